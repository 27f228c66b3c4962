/*
 * The one-thread fast path in a real job (src/util/bias.h), 2 ranks with
 * inline progress (MPIV_SERVER=inline, MPIV_WORKERS=1):
 *   case "pthread": the main thread communicates alone and owns the bias
 *   (no locked instruction on its paths); then a second pthread joins in
 *   the middle of the main thread's traffic, revokes it, and both streams
 *   arrive intact; ULTs communicate afterwards as usual.
 *   case "ult": one worker runs every ULT, so the worker owns the bias
 *   while 64 ULTs ping-pong.
 *   case "handover": the bias follows the thread that communicates: main
 *   parks it when it joins a ULT, the worker takes it over, parks it when
 *   left without ULTs, and main takes it back; no revocation.
 *   case "alone": a ULT that is its worker's only one waits by polling
 *   the network itself, never switching out (proto_wait, sched_ult_alone);
 *   one that waits so switches out when another ULT is spawned onto its
 *   worker, which would otherwise never run.
 *   case "sweep": a worker that runs thousands of ULTs in one sweep polls
 *   the network between them (sched.c, sweep_tick), so messages that
 *   wait in the ring meet the receivers that run after them as unexpected
 *   messages, and those receivers end without blocking or keeping a stack.
 * With MPIV_ONE_THREAD=off nobody may own it. Each case runs in its own
 * job (CK_RUN_CASE), since a revocation lasts until mpiv_finalize.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "common/check_main.h"
#include "common/test_data.h"
#include "common/test_mpiv.h"
#include "mpiv.h"
#include "sched/sched.h"
#include "util/bias.h"

static int me, partner;

static bool bias_expected(void)
{
    const char *v = getenv("MPIV_ONE_THREAD");
    return !(v && strcmp(v, "off") == 0);
}

/* Under ThreadSanitizer every byte filled and checked is an instrumented
 * access, and the long streams' bytes were most of each job's time: they
 * run a quarter of their rounds there, still with every size, and still
 * overlapping where a case needs them to. */
#ifdef MPIV_TSAN
#define LONG_ROUNDS(n) ((n) / 4 > 6 ? (n) / 4 : 6) /* 6: every size once */
#else
#define LONG_ROUNDS(n) (n)
#endif

/* Round trips on `tag` with sizes cycling through eager and rendezvous
 * ones; returns 0, or a code naming what went wrong. */
static long pingpong(int tag, int rounds, unsigned char *out, unsigned char *in)
{
    static const size_t sizes[] = {0, 8, 200, 4000, 70000, 300000};
    int first = me == 0;
    for (int i = 0; i < rounds; i++) {
        size_t n = sizes[i % 6];
        unsigned seed = (unsigned)(tag * 1000 + i);
        mpiv_status_t st;
        if (first) {
            fill(out, n, seed);
            if (mpiv_send(out, n, partner, tag) != MPIV_SUCCESS)
                return 1;
            if (mpiv_recv(in, 300000, partner, tag, &st) != MPIV_SUCCESS || st.size != n)
                return 2;
            if (data_mismatch(in, 0, n, seed + 1) != n)
                return 3;
        } else {
            if (mpiv_recv(in, 300000, partner, tag, &st) != MPIV_SUCCESS || st.size != n)
                return 2;
            if (data_mismatch(in, 0, n, seed) != n)
                return 3;
            fill(out, n, seed + 1);
            if (mpiv_send(out, n, partner, tag) != MPIV_SUCCESS)
                return 1;
        }
    }
    return 0;
}

struct stream {
    int tag, rounds;
    long rc;
};

static void *stream_main(void *p)
{
    struct stream *s = p;
    unsigned char *out = malloc(300000), *in = malloc(300000);
    s->rc = out && in ? pingpong(s->tag, s->rounds, out, in) : 9;
    free(out);
    free(in);
    return NULL;
}

START_TEST(main_thread_owns_then_a_second_joins)
{
    struct stream a = {.tag = 1, .rounds = LONG_ROUNDS(300)};
    stream_main(&a);
    ck_assert_int_eq(a.rc, 0);
    ck_assert_int_eq(util_bias_mine(), bias_expected());
    ck_assert_int_eq(util_bias_revocations(), 0);

    /* the second pthread starts while the main thread's traffic runs (the
     * main thread's stream is the longer one) */
    struct stream b = {.tag = 2, .rounds = LONG_ROUNDS(300)};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, stream_main, &b), 0);
    struct stream c = {.tag = 3, .rounds = LONG_ROUNDS(600)};
    stream_main(&c);
    pthread_join(t, NULL);
    ck_assert_int_eq(b.rc, 0);
    ck_assert_int_eq(c.rc, 0);
    ck_assert(!util_bias_mine());
    ck_assert_int_eq(util_bias_revocations(), bias_expected() ? 1 : 0);
    OK(mpiv_barrier());
}
END_TEST

static void *ult_stream(void *p)
{
    struct stream *s = p;
    stream_main(s);
    return NULL;
}

static void run_ults(int n, int rounds)
{
    mpiv_ult_t u[64];
    struct stream s[64];
    for (int i = 0; i < n; i++) {
        s[i] = (struct stream){.tag = 100 + i, .rounds = rounds};
        OK(mpiv_ult_spawn(ult_stream, &s[i], MPIV_WORKER_ANY, &u[i]));
    }
    for (int i = 0; i < n; i++) {
        OK(mpiv_ult_join(u[i], NULL));
        ck_assert_msg(s[i].rc == 0, "ULT %d: %ld", i, s[i].rc);
    }
}

START_TEST(ults_after_a_revocation)
{
    run_ults(64, LONG_ROUNDS(12));
    OK(mpiv_barrier());
}
END_TEST

static atomic_int ult_owned;

/* Communicates, then says whether its thread owns the fast path: a worker
 * left without ULTs parks it (sched.c), and a joiner that progresses may
 * take a parked one over meanwhile, so only a thread that has just
 * communicated is sure to be the owner (B8). Both ranks run it, so the
 * two streams pair up. */
static void *owner_check(void *unused)
{
    (void)unused;
    struct stream s = {.tag = 190, .rounds = 2};
    stream_main(&s);
    atomic_store(&ult_owned, s.rc == 0 ? util_bias_mine() : -1);
    return NULL;
}

START_TEST(one_worker_owns_it_for_its_ults)
{
    run_ults(64, LONG_ROUNDS(30));
    mpiv_ult_t u;
    OK(mpiv_ult_spawn(owner_check, NULL, MPIV_WORKER_ANY, &u));
    OK(mpiv_ult_join(u, NULL));
    ck_assert_int_eq(atomic_load(&ult_owned), bias_expected());
    ck_assert_int_eq(util_bias_revocations(), 0);
    ck_assert(!util_bias_mine()); /* the main thread is not the owner */
}
END_TEST

/* One ULT per rank ping-pongs (eager and rendezvous sizes, so receives
 * and rendezvous sends wait): with nothing else on its worker it never
 * switches out. If it did, every receive would (its message is not there
 * yet when it waits): about 300 per rank. */
START_TEST(a_lone_ult_waits_in_place)
{
    struct stream a = {.tag = 200, .rounds = LONG_ROUNDS(300)};
    uint64_t before = sched_blocked_waits();
    mpiv_ult_t u;
    OK(mpiv_ult_spawn(ult_stream, &a, MPIV_WORKER_ANY, &u));
    OK(mpiv_ult_join(u, NULL));
    ck_assert_int_eq(a.rc, 0);
    ck_assert_uint_eq(sched_blocked_waits() - before, 0);
    OK(mpiv_barrier());
}
END_TEST

static atomic_int lone_waiting;
static unsigned char lone_in[8];

static void *lone_receiver(void *unused)
{
    (void)unused;
    atomic_store(&lone_waiting, 1);
    mpiv_status_t st;
    if (mpiv_recv(lone_in, sizeof lone_in, 0, 301, &st) != MPIV_SUCCESS || st.size != 8)
        return (void *)1;
    return NULL;
}

static void *lone_sender(void *unused)
{
    (void)unused;
    unsigned char out[8];
    fill(out, 8, 300);
    return mpiv_send(out, 8, 0, 300) == MPIV_SUCCESS ? NULL : (void *)1;
}

/* Rank 1's only ULT waits for a message that rank 0 sends only after a
 * second ULT, spawned onto the same (single) worker while the first one
 * waits, has sent it one: the waiter must step aside for it. */
START_TEST(a_spawn_ends_the_wait_in_place)
{
    unsigned char buf[8];
    if (me == 0) {
        mpiv_status_t st;
        OK(mpiv_recv(buf, 8, 1, 300, &st));
        for (int k = 0; k < 8; k++)
            ck_assert_uint_eq(buf[k], pattern((size_t)k, 300));
        fill(buf, 8, 301);
        OK(mpiv_send(buf, 8, 1, 301));
    } else {
        mpiv_ult_t a, b;
        OK(mpiv_ult_spawn(lone_receiver, NULL, MPIV_WORKER_ANY, &a));
        while (!atomic_load(&lone_waiting))
            sched_yield();
        /* let it get into its wait (the test passes either way; this makes
         * it test the wait in place) */
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        uint64_t before = sched_blocked_waits();
        OK(mpiv_ult_spawn(lone_sender, NULL, MPIV_WORKER_ANY, &b));
        void *rb, *ra;
        OK(mpiv_ult_join(b, &rb));
        OK(mpiv_ult_join(a, &ra));
        ck_assert_ptr_null(rb);
        ck_assert_ptr_null(ra);
        for (int k = 0; k < 8; k++)
            ck_assert_uint_eq(lone_in[k], pattern((size_t)k, 301));
        /* the receiver switched out (once) when the sender came */
        ck_assert_uint_ge(sched_blocked_waits() - before, 1);
    }
    OK(mpiv_barrier());
}
END_TEST

#define SWEEP_N 4096
#define SWEEP_TAG 1000

static void *sweep_receiver(void *arg)
{
    int i = (int)(intptr_t)arg;
    unsigned char in[8];
    mpiv_status_t st;
    if (mpiv_recv(in, sizeof in, 0, SWEEP_TAG + i, &st) != MPIV_SUCCESS || st.size != 8)
        return (void *)1;
    for (int k = 0; k < 8; k++)
        if (in[k] != pattern((size_t)k, (unsigned)i))
            return (void *)1;
    return NULL;
}

/* Spawns the receivers onto its own worker without yielding, so that they
 * all run in the worker's next sweep, then joins them. */
static void *sweep_spawner(void *unused)
{
    (void)unused;
    static mpiv_ult_t u[SWEEP_N];
    for (int i = 0; i < SWEEP_N; i++)
        if (mpiv_ult_spawn(sweep_receiver, (void *)(intptr_t)i, MPIV_WORKER_ANY, &u[i]) !=
            MPIV_SUCCESS)
            return (void *)1;
    intptr_t bad = 0;
    for (int i = 0; i < SWEEP_N; i++) {
        void *r;
        if (mpiv_ult_join(u[i], &r) != MPIV_SUCCESS || r)
            bad++;
    }
    return (void *)bad;
}

/* Rank 0 sends SWEEP_N messages while rank 1 does not poll (its main
 * thread sleeps, its worker has no ULT); they wait in rank 1's ring, more
 * than its pool can take as unexpected. Then rank 1 runs one receiver per
 * message, all in one sweep. Without polls inside the sweep each receiver
 * posts its receive before its message is taken off the wire, and blocks:
 * about SWEEP_N blocked waits and as many stacks. */
START_TEST(a_long_sweep_takes_arrivals)
{
    unsigned char buf[8];
    /* the 200 ms below count from here on both ranks */
    OK(mpiv_barrier());
    if (me == 0) {
        for (int i = 0; i < SWEEP_N; i++) {
            fill(buf, 8, (unsigned)i);
            OK(mpiv_send(buf, 8, 1, SWEEP_TAG + i));
        }
        OK(mpiv_recv(buf, 1, 1, SWEEP_TAG - 1, NULL));
    } else {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        struct sched_stack_stats s0, s1;
        sched_stack_stats(&s0);
        uint64_t waits = sched_blocked_waits();
        mpiv_ult_t sp;
        void *bad;
        OK(mpiv_ult_spawn(sweep_spawner, NULL, MPIV_WORKER_ANY, &sp));
        OK(mpiv_ult_join(sp, &bad));
        ck_assert_ptr_null(bad);
        waits = sched_blocked_waits() - waits;
        sched_stack_stats(&s1);
        ck_assert_msg(waits < SWEEP_N / 8, "%llu of %d receivers blocked",
                      (unsigned long long)waits, SWEEP_N);
        ck_assert_msg(s1.made - s0.made < SWEEP_N / 8, "%llu stacks made for %d receivers",
                      (unsigned long long)(s1.made - s0.made), SWEEP_N);
        buf[0] = 1;
        OK(mpiv_send(buf, 1, 0, SWEEP_TAG - 1));
    }
    OK(mpiv_barrier());
}
END_TEST

static int one_thread_init(int *argc, char ***argv)
{
    if (test_mpiv_init(argc, argv))
        return 1;
    me = mpiv_rank();
    partner = me ^ 1;
    return mpiv_size() == 2 ? 0 : 2;
}

/* The bias follows the thread that communicates (util/bias.h, B8): main
 * communicates and owns it, parks it as it blocks in a join, and the
 * worker that runs the ULT takes it over; the worker parks it once it is
 * left without ULTs, and main takes it back at its next call. Three
 * rounds, with no revocation. Each side waits for the other's park before
 * it communicates: what is checked is the handover, not how long a thread
 * waits for a park before it revokes. */
static _Atomic uintptr_t main_token;

static bool parked_or_free(uintptr_t w, uintptr_t mine)
{
    return w == 0 || w == UTIL_BIAS_ARMED || w == mine || util_bias_parked(w);
}

static void wait_parked(uintptr_t mine)
{
    time_t t0 = time(NULL);
    while (!parked_or_free(atomic_load(&util_bias_word), mine)) {
        ck_assert_msg(time(NULL) - t0 < 20, "the owner never parked the bias");
        sched_yield();
    }
}

static void *handed_over(void *p)
{
    struct stream *s = p;
    /* main is on its way to the join */
    while (atomic_load(&util_bias_word) == atomic_load(&main_token))
        sched_yield();
    stream_main(s);
    atomic_store(&ult_owned, util_bias_mine());
    return NULL;
}

START_TEST(the_bias_follows_the_thread_that_communicates)
{
    long took = util_bias_takeovers();
    atomic_store(&main_token, util_bias_token());
    for (int r = 0; r < 3; r++) {
        wait_parked(util_bias_token());
        struct stream a = {.tag = 400 + r, .rounds = 60};
        stream_main(&a);
        ck_assert_int_eq(a.rc, 0);
        ck_assert_int_eq(util_bias_mine(), bias_expected());
        struct stream b = {.tag = 500 + r, .rounds = 60};
        atomic_store(&ult_owned, 0);
        mpiv_ult_t u;
        OK(mpiv_ult_spawn(handed_over, &b, MPIV_WORKER_ANY, &u));
        OK(mpiv_ult_join(u, NULL));
        ck_assert_int_eq(b.rc, 0);
        ck_assert_int_eq(atomic_load(&ult_owned), bias_expected());
    }
    ck_assert_int_eq(util_bias_revocations(), 0);
    /* main to the worker three times, back twice */
    ck_assert_int_eq(util_bias_takeovers() - took, bias_expected() ? 5 : 0);
    OK(mpiv_barrier());
}
END_TEST

static void *plain_stream(void *p)
{
    stream_main(p);
    return NULL;
}

/* The same turns without waiting for the parks: main communicates again
 * the moment its join returns, and a ULT the moment it runs, so each may
 * meet the other still active and wait for its park (or, past the wait,
 * revoke: allowed here, a loaded machine may get there). The messages
 * stay intact, and the bias changed hands at least once. */
START_TEST(turns_without_waiting_for_the_park)
{
    long took = util_bias_takeovers(), revoked = util_bias_revocations();
    for (int r = 0; r < 20; r++) {
        struct stream a = {.tag = 600 + r, .rounds = 20};
        stream_main(&a);
        ck_assert_int_eq(a.rc, 0);
        struct stream b = {.tag = 700 + r, .rounds = 20};
        mpiv_ult_t u;
        OK(mpiv_ult_spawn(plain_stream, &b, MPIV_WORKER_ANY, &u));
        OK(mpiv_ult_join(u, NULL));
        ck_assert_int_eq(b.rc, 0);
    }
    /* changed hands: by a takeover after a park, or (under load, e.g.
     * ThreadSanitizer's) by a revocation after the wait. That revocation
     * may also come just before this case: in the previous case's last
     * barrier, where main communicates the moment its join returned, as
     * here, and the bias is then off from this case's start. A revocation
     * lasts until mpiv_finalize, so then nothing can change hands here:
     * it counts, as the change the previous case saw no room for. */
    long takeovers = util_bias_takeovers() - took;
    long changes = takeovers + util_bias_revocations() - revoked;
    if (bias_expected())
        ck_assert_msg(changes > 0 || revoked > 0,
                      "the bias never changed hands: %ld takeovers, %ld revocations (%ld before)",
                      takeovers, util_bias_revocations() - revoked, revoked);
    else
        ck_assert_int_eq(changes + revoked, 0);
    OK(mpiv_barrier());
}
END_TEST

static Suite *one_thread_suite(void)
{
    Suite *s = suite_create("one_thread");
    TCase *p = tcase_create("pthread");
    tcase_set_timeout(p, 120);
    tcase_add_test(p, main_thread_owns_then_a_second_joins);
    tcase_add_test(p, ults_after_a_revocation);
    suite_add_tcase(s, p);
    TCase *u = tcase_create("ult");
    tcase_set_timeout(u, 120);
    tcase_add_test(u, one_worker_owns_it_for_its_ults);
    suite_add_tcase(s, u);
    TCase *h = tcase_create("handover");
    tcase_set_timeout(h, 120);
    tcase_add_test(h, the_bias_follows_the_thread_that_communicates);
    tcase_add_test(h, turns_without_waiting_for_the_park);
    suite_add_tcase(s, h);
    TCase *a = tcase_create("alone");
    tcase_set_timeout(a, 120);
    tcase_add_test(a, a_lone_ult_waits_in_place);
    tcase_add_test(a, a_spawn_ends_the_wait_in_place);
    suite_add_tcase(s, a);
    TCase *w = tcase_create("sweep");
    tcase_set_timeout(w, 120);
    tcase_add_test(w, a_long_sweep_takes_arrivals);
    suite_add_tcase(s, w);
    return s;
}

static bool one_thread_quiet(void) { return me != 0; }

CHECK_MAIN(.suite = one_thread_suite, .fork = CK_NOFORK, .init = one_thread_init,
           .quiet = one_thread_quiet, .fini = test_mpiv_fini);
