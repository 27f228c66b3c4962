/*
 * check_main.h — the one main() of the Check tests (check_main.c).
 *
 * A test file builds its suite in a function and names it once:
 *
 *     static Suite *util_suite(void) { ... return s; }
 *     CHECK_MAIN(.suite = util_suite);
 *
 * main() then applies MPIV_TEST_TIMEOUT_SCALE to Check's timeouts, runs the
 * suite, prints Check's counts and exits with EXIT_FAILURE if any test
 * failed. Optional fields cover the tests that need more:
 *
 *   .fork   CK_NOFORK for a suite whose cases share one process (a network
 *           endpoint, an MPIv job); the default lets CK_FORK decide, which
 *           is Check's own default (fork each case).
 *   .init   runs before the suite is built, with main's arguments (start
 *           MPIv here); a non-zero return is the exit status, and nothing
 *           is run.
 *   .quiet  true when this process should print nothing (every rank but
 *           one of a multi-rank job).
 *   .fini   runs after, given the number of failed tests; its return is
 *           the exit status (finalize MPIv here).
 */
#ifndef MPIV_TESTS_CHECK_MAIN_H
#define MPIV_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdbool.h>

/* Check's ck_assert_msg (and every ck_assert_* built on it) records the
 * place of each assertion that passes, one write(2) to a file each, so
 * that a crash or timeout can be reported "after this point". Our tests
 * assert in loops of up to a million rounds, where those writes cost more
 * than the work under test. Here a passing assertion costs nothing; a
 * failing one reports as before. Where a crash's place matters, call
 * mark_point(). */
#undef ck_assert_msg
#define ck_assert_msg(expr, ...)                                                             \
    ((expr) ? (void)0                                                                        \
            : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed",          \
                                ##__VA_ARGS__))

struct check_main {
    Suite *(*suite)(void);
    enum fork_status fork;
    int (*init)(int *argc, char ***argv);
    bool (*quiet)(void);
    int (*fini)(int failed);
};

/* Defined by every test file, through CHECK_MAIN. */
extern const struct check_main check_main_spec;

#define CHECK_MAIN(...) const struct check_main check_main_spec = {__VA_ARGS__}

#endif
