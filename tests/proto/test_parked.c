/*
 * Pthreads that wait past the few that poll (proto_wait_pending), 2 ranks
 * with inline progress (MPIV_SERVER=inline, MPIV_WORKERS=1): no server
 * thread polls, so pthreads waiting in receives poll themselves, at most
 * PROTO_PTHREAD_POLLERS at once; the rest park, asleep on their
 * request, and worker 0 polls for them (sched_net_waiter_begin, N1 in
 * sched.c).
 *   - the pollers are served first and leave: every parked one is still
 *     completed (worker 0 polls for them, and a parked pthread whose
 *     timed sleep ends may take a free poller's place), and each gets
 *     its own message;
 *   - the same while worker 0 runs a ULT that computes without yielding
 *     until the parked pthreads are done: they must reach a poll by
 *     themselves (their sleep is timed), not wait for the ULT to give up
 *     (after 20 s, which the test counts as a failure);
 *   - many pthreads wait at once, more than the pollers by far, each for
 *     a message of its own, while the sender sends in bursts: all arrive.
 * (N1 alone is not isolated here: a parked pthread's timed sleep serves
 * it too, so a broken N1 costs time, not completion.)
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check_main.h"
#include "common/test_mpiv.h"
#include "mpiv.h"
#include "proto/proto.h"
#include "util/util.h"

static int me;

/* One waiting pthread: receives its tag's message into val. */
struct waiter {
    pthread_t t;
    int tag;
    uint64_t val;
    int rc;
};

static void *wait_one(void *arg)
{
    struct waiter *w = arg;
    w->rc = mpiv_recv(&w->val, sizeof w->val, 0, w->tag, NULL);
    return NULL;
}

static uint64_t value_of(int tag) { return 0x9e3779b97f4a7c15ull ^ (uint64_t)tag; }

static void nap_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000};
    nanosleep(&ts, NULL);
}

static struct proto_stats stats(void)
{
    struct proto_stats st;
    proto_get_stats(&st);
    return st;
}

/* Waits up to 10 s for the stats to satisfy pred; false if they never did. */
static bool stats_reach(bool (*pred)(const struct proto_stats *, uint64_t), uint64_t arg)
{
    for (int i = 0; i < 10000; i++) {
        struct proto_stats st = stats();
        if (pred(&st, arg))
            return true;
        nap_ms(1);
    }
    return false;
}

static bool pollers_are(const struct proto_stats *st, uint64_t n) { return st->pthread_pollers == n; }
static bool parks_reach(const struct proto_stats *st, uint64_t n) { return st->pthread_parks >= n; }

/* Worker 0 busy: a ULT that computes (spins, never yields) until the
 * parked pthreads are done, or SPIN_LIMIT_S passed. */
#define SPIN_LIMIT_S 20
static atomic_int left;      /* parked pthreads whose message has not come */
static atomic_int spinning;  /* the ULT runs */
static atomic_int timed_out; /* it gave up: nobody served the parked ones */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *compute(void *arg)
{
    (void)arg;
    double end = now_s() + SPIN_LIMIT_S;
    atomic_store(&spinning, 1);
    while (atomic_load(&left) > 0)
        if (now_s() > end) {
            atomic_store(&timed_out, 1);
            break;
        }
    return NULL;
}

static void *wait_counted(void *arg)
{
    wait_one(arg);
    atomic_fetch_sub(&left, 1);
    return NULL;
}

/* The pollers are served first and leave; then the parked ones' messages
 * come while nobody but worker 0 could poll for them. With busy, worker 0
 * computes meanwhile, so the parked ones must find their way to a poll
 * themselves (park_until_done's timed sleep). */
static void pollers_leave(bool busy)
{
    const int pollers = PROTO_PTHREAD_POLLERS, parked = 28, n = pollers + parked;
    struct waiter *w = calloc((size_t)n, sizeof *w);
    ck_assert_ptr_nonnull(w);
    uint64_t parks0 = stats().pthread_parks;
    /* what went wrong, asserted only after the last barrier: a rank that
     * left early would take the next test's barriers for this one's */
    const char *bad = NULL;
    mpiv_ult_t u;
    if (me == 1) {
        atomic_store(&left, parked);
        atomic_store(&timed_out, 0);
        atomic_store(&spinning, 0);
        /* the first few take every poller's place, the rest park */
        for (int i = 0; i < n; i++) {
            w[i].tag = 100 + i;
            ck_assert_int_eq(pthread_create(&w[i].t, NULL, i < pollers ? wait_one : wait_counted, &w[i]),
                             0);
            if (i == pollers - 1 && !stats_reach(pollers_are, (uint64_t)pollers))
                bad = "the first pthreads to wait did not all poll";
        }
        if (!stats_reach(parks_reach, parks0 + (uint64_t)parked))
            bad = "the pthreads past the pollers did not park";
    }
    OK(mpiv_barrier());
    /* the pollers' messages: they complete and leave */
    if (me == 0)
        for (int i = 0; i < pollers; i++) {
            uint64_t v = value_of(100 + i);
            OK(mpiv_send(&v, sizeof v, 1, 100 + i));
        }
    if (me == 1) {
        for (int i = 0; i < pollers; i++)
            ck_assert_int_eq(pthread_join(w[i].t, NULL), 0);
        /* The pollers are gone. A parked pthread may now take a free
         * poller's place when its timed sleep ends (park_until_done), so
         * what serves the rest is worker 0 or that; either must. */
        if (busy) {
            OK(mpiv_ult_spawn(compute, NULL, 0, &u));
            while (!atomic_load(&spinning))
                nap_ms(1);
        }
    }
    OK(mpiv_barrier());
    /* now rank 1's main is in pthread_join, and only worker 0 or the
     * parked pthreads themselves may poll (with busy, only they) */
    if (me == 0)
        for (int i = pollers; i < n; i++) {
            uint64_t v = value_of(100 + i);
            OK(mpiv_send(&v, sizeof v, 1, 100 + i));
        }
    if (me == 1) {
        for (int i = pollers; i < n; i++)
            ck_assert_int_eq(pthread_join(w[i].t, NULL), 0);
        if (busy)
            OK(mpiv_ult_join(u, NULL));
        if (atomic_load(&timed_out))
            bad = "the parked pthreads waited for worker 0 to stop computing";
        for (int i = 0; i < n && !bad; i++)
            if (w[i].rc != MPIV_SUCCESS || w[i].val != value_of(w[i].tag))
                bad = "a pthread failed or got another message";
    }
    free(w);
    OK(mpiv_barrier());
    ck_assert_msg(!bad, "%s", bad ? bad : "");
}

START_TEST(parked_are_served_after_the_pollers_leave) { pollers_leave(false); }
END_TEST

START_TEST(parked_are_served_while_worker0_computes) { pollers_leave(true); }
END_TEST

START_TEST(many_waiters_in_bursts)
{
    const int n = 256, burst = 16;
    struct waiter *w = calloc((size_t)n, sizeof *w);
    ck_assert_ptr_nonnull(w);
    uint64_t parks0 = stats().pthread_parks;
    if (me == 1)
        for (int i = 0; i < n; i++) {
            w[i].tag = 1000 + i;
            ck_assert_int_eq(pthread_create(&w[i].t, NULL, wait_one, &w[i]), 0);
        }
    OK(mpiv_barrier());
    if (me == 0)
        for (int i = 0; i < n; i++) {
            /* from the last: the pthreads created last are the likeliest
             * to have parked */
            uint64_t v = value_of(1000 + n - 1 - i);
            OK(mpiv_send(&v, sizeof v, 1, 1000 + n - 1 - i));
            if (i % burst == burst - 1)
                nap_ms(2);
        }
    int bad = -1;
    bool parks = true;
    if (me == 1) {
        for (int i = 0; i < n; i++) {
            ck_assert_int_eq(pthread_join(w[i].t, NULL), 0);
            if (bad < 0 && (w[i].rc != MPIV_SUCCESS || w[i].val != value_of(w[i].tag)))
                bad = i;
        }
        parks = stats().pthread_parks > parks0;
    }
    free(w);
    OK(mpiv_barrier()); /* both ranks pass it before either may fail */
    ck_assert_msg(bad < 0, "pthread %d failed or got another message", bad);
    ck_assert_msg(parks, "no waiting pthread parked");
}
END_TEST

static int parked_init(int *argc, char ***argv)
{
    if (test_mpiv_init(argc, argv))
        return 1;
    me = mpiv_rank();
    return mpiv_size() == 2 ? 0 : 2;
}

static Suite *parked_suite(void)
{
    Suite *s = suite_create("parked");
    TCase *tc = tcase_create("parked");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, parked_are_served_after_the_pollers_leave);
    tcase_add_test(tc, parked_are_served_while_worker0_computes);
    tcase_add_test(tc, many_waiters_in_bursts);
    suite_add_tcase(s, tc);
    return s;
}

static bool parked_quiet(void) { return me != 0; }

CHECK_MAIN(.suite = parked_suite, .fork = CK_NOFORK, .init = parked_init, .quiet = parked_quiet,
           .fini = test_mpiv_fini);
