/* The tests' own helpers (tests/common): the stall detector and the
 * record of helper-thread failures. */
#include <pthread.h>
#include <string.h>

#include "common/check_main.h"
#include "common/test_wait.h"

/* Explicit times: a loaded machine may sleep a thread for any time between
 * two calls, so the clock is not read here. */
/* Feeds `value` at every step of `step` from `from` to `to` (inclusive);
 * returns whether the last call said stuck. */
static bool feed(struct test_stall *st, uint64_t value, uint64_t from, uint64_t to, uint64_t step)
{
    bool stuck = false;
    for (uint64_t t = from; t <= to; t += step)
        stuck = test_stall_stuck_at(st, value, t);
    return stuck;
}

START_TEST(stall_needs_an_unchanged_value)
{
    struct test_stall st;
    test_stall_init(&st, 0.02, 5);
    const uint64_t t0 = st.since_ns, lim = st.limit_ns, step = lim / 10;
    ck_assert_uint_eq(lim, (uint64_t)(0.02 * test_timeout_scale() * 1e9));
    ck_assert(!feed(&st, 5, t0 + step, t0 + lim, step));
    ck_assert(test_stall_stuck_at(&st, 5, t0 + lim + 1));
    /* a change, even after the limit, is progress and restarts the clock */
    const uint64_t t1 = t0 + lim + 2;
    ck_assert(!test_stall_stuck_at(&st, 6, t1));
    ck_assert(!feed(&st, 6, t1 + step, t1 + lim, step));
    ck_assert(test_stall_stuck_at(&st, 6, t1 + lim + 1));
    ck_assert(!test_stall_stuck_at(&st, 2, t1 + lim + 2)); /* down is a change too */
}
END_TEST

/* A waiter that did not run for a while (stopped, descheduled) does not
 * blame the others for the time it missed. */
START_TEST(stall_waiter_absence_is_not_a_stall)
{
    struct test_stall st;
    test_stall_init(&st, 0.02, 5);
    const uint64_t t0 = st.since_ns, lim = st.limit_ns, step = lim / 10;
    ck_assert(!test_stall_stuck_at(&st, 5, t0 + 10 * lim)); /* back after a long gap */
    const uint64_t t1 = t0 + 10 * lim;
    ck_assert(!feed(&st, 5, t1 + step, t1 + lim, step));
    ck_assert(test_stall_stuck_at(&st, 5, t1 + lim + step / 2));
}
END_TEST

static void *fail_twice(void *arg)
{
    (void)arg;
    test_thread_fail("first: %d", 1);
    test_thread_fail("second: %d", 2);
    return NULL;
}

START_TEST(thread_failure_kept_until_taken)
{
    char buf[64];
    ck_assert(!test_thread_failed());
    ck_assert(!test_thread_take_failure(buf, sizeof buf));
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, fail_twice, NULL), 0);
    pthread_join(th, NULL);
    ck_assert(test_thread_failed());
    ck_assert(test_thread_take_failure(buf, sizeof buf));
    ck_assert_str_eq(buf, "first: 1");
    ck_assert(!test_thread_failed());
    ck_assert(!test_thread_take_failure(buf, sizeof buf));
}
END_TEST

static Suite *common_suite(void)
{
    Suite *s = suite_create("test_common");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, stall_needs_an_unchanged_value);
    tcase_add_test(tc, stall_waiter_absence_is_not_a_stall);
    tcase_add_test(tc, thread_failure_kept_until_taken);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = common_suite);
