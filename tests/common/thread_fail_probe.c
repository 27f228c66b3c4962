/*
 * A suite that fails on purpose from a helper thread, run without fork as
 * the server and protocol tests are (tests/CMakeLists.txt checks its
 * output). The first case's helper fails while the main thread waits with
 * data on its stack, as ST_WAIT does; the second case must then run, on
 * the main thread, and pass: the failure is one failed test. (A helper
 * calling ck_abort_msg instead longjmps into the main thread's context and
 * runs the rest of the suite itself, on the main thread's stack.)
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "common/check_main.h"
#include "common/test_wait.h"

static atomic_bool helper_done;
static pthread_t main_thread;

static int probe_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    main_thread = pthread_self();
    return 0;
}

static void *helper(void *arg)
{
    (void)arg;
    test_thread_fail("helper thread failed on purpose");
    atomic_store(&helper_done, true);
    return NULL;
}

START_TEST(helper_fails)
{
    volatile char on_stack[4096];
    memset((char *)on_stack, 0x5a, sizeof on_stack);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, helper, NULL), 0);
    while (!atomic_load(&helper_done) && !test_thread_failed())
        sched_yield();
    pthread_join(th, NULL);
    for (size_t i = 0; i < sizeof on_stack; i++)
        ck_assert_int_eq(on_stack[i], 0x5a);
    TEST_THREAD_CHECK();
}
END_TEST

START_TEST(next_case_runs)
{
    ck_assert_msg(pthread_equal(pthread_self(), main_thread),
                  "the suite goes on in a helper thread");
    volatile char on_stack[4096];
    memset((char *)on_stack, 0x33, sizeof on_stack);
    for (size_t i = 0; i < sizeof on_stack; i++)
        ck_assert_int_eq(on_stack[i], 0x33);
}
END_TEST

static Suite *probe_suite(void)
{
    Suite *s = suite_create("thread_fail_probe");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, helper_fails);
    tcase_add_test(tc, next_case_runs);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = probe_suite, .fork = CK_NOFORK, .init = probe_init);
