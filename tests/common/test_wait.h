/*
 * test_wait.h — waiting in tests without trusting the clock, and failing
 * from helper threads without breaking the runner.
 *
 * Time limits. A loaded machine makes everything slower, never stuck, so
 * a wait fails only when what it watches has not moved for a while (a
 * stall), not when a total time is up. Every limit a test sets, stall or
 * not, is multiplied by MPIV_TEST_TIMEOUT_SCALE (default 1): the same
 * factor that check_main.c hands to Check's own timeouts and
 * tests/CMakeLists.txt to CTest's and the launcher's.
 *
 * Helper threads. Check's ck_* calls end the current test from the thread
 * they run on. Under CK_NOFORK that is a longjmp from a helper thread into
 * the main thread's saved context: the helper then runs the rest of the
 * suite on the main thread's stack while the main thread still uses it
 * ("*** stack smashing detected ***", or a SIGSEGV). So helper threads
 * never call ck_*: they record the failure with test_thread_fail and
 * return; the main thread reports it with TEST_THREAD_CHECK.
 */
#ifndef MPIV_TESTS_TEST_WAIT_H
#define MPIV_TESTS_TEST_WAIT_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* MPIV_TEST_TIMEOUT_SCALE: a number from 0.01 to 1000, 1 when unset. A bad
 * value ends the program with a message naming the variable (status 2). */
double test_timeout_scale(void);

/* Nanoseconds on the monotonic clock. */
uint64_t test_now_ns(void);

/* A stall detector over an integer that grows as the awaited work
 * advances (a count of arrivals, of completions...). */
struct test_stall {
    uint64_t value;    /* last value seen                    */
    uint64_t since_ns; /* when it last changed               */
    uint64_t seen_ns;  /* when the waiter last looked         */
    uint64_t limit_ns; /* idle time that counts as a stall   */
};

/* Starts watching `value`; a stall is `secs` seconds (times the scale)
 * without a change. */
void test_stall_init(struct test_stall *st, double secs, uint64_t value);

/* Feeds the current value: true when it has not changed for the limit.
 * Any change, up or down, restarts the idle time. So does a gap of half
 * the limit or more since the waiter last looked: the waiter itself was
 * not running (descheduled, stopped), and the others get the time it
 * missed before they count as stuck. */
bool test_stall_stuck(struct test_stall *st, uint64_t value);

/* The same at a given time (test_now_ns's clock), for tests of it. */
bool test_stall_stuck_at(struct test_stall *st, uint64_t value, uint64_t now_ns);

/* Seconds since the value last changed. */
double test_stall_idle_s(const struct test_stall *st);

/* Records a failure from any thread (the first one is kept, with its
 * message) and returns: the caller then stops its work and returns. */
void test_thread_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether a failure was recorded and not yet reported. */
bool test_thread_failed(void);

/* Moves the recorded message (if any) into buf and clears the record:
 * true if there was one. */
bool test_thread_take_failure(char *buf, size_t len);

/* Main thread only: fails the current test with a helper thread's
 * recorded failure, if there is one. */
#define TEST_THREAD_CHECK()                                                    \
    do {                                                                       \
        char tw_msg_[512];                                                     \
        if (test_thread_take_failure(tw_msg_, sizeof tw_msg_))                 \
            ck_abort_msg("%s", tw_msg_);                                       \
    } while (0)

#endif
