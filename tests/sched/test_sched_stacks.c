/* Stacks are taken when a ULT first runs and given back the moment it
 * ends (K1-K4 at the top of src/sched/sched.c):
 *   never_run_join      ULTs spawned onto a worker that is busy, so they
 *                       have not run when joined (from a pthread and from
 *                       a ULT on the other worker): they own no stack
 *                       until they run, and their handles keep their
 *                       generations (a second join and a stale handle are
 *                       refused).
 *   nonblocking_few     many ULTs that end without blocking, spawned all
 *                       before any is joined: one stack per worker.
 *   one_at_a_time       100,000 ULTs spawned and joined in turn: one
 *                       stack in all (and, under TSan, one fiber).
 *   blocked_keep_stack  ULTs that wait and yield many times while other
 *                       ULTs start and end on the same worker: each keeps
 *                       its stack and its frames intact (the others never
 *                       get a stack that is in use).
 *   ready_in_batches    100 ULTs blocked at once: of the second chunk
 *                       (128 stacks) only the first batch of 64 gets its
 *                       guards and prefaulted top pages, not all 128.
 * The overflow report on a recycled stack is in test_sched.c (the fork
 * helpers are there). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "sched/sched_internal.h"
#include "sched_test.h"

#if defined(MPIV_TSAN)
#define NQUICK (1 << 10) /* TSan: a fiber per ULT run, ~0.8 MB memset each */
#else
#define NQUICK (1 << 16)
#endif

static struct sched_stack_stats stats(void)
{
    struct sched_stack_stats st;
    sched_stack_stats(&st);
    return st;
}

/* Whether the calling ULT's frame lies on the stack its record names. */
__attribute__((noinline)) static bool on_own_stack(void)
{
    struct mpiv_ult *u = sched_self();
    char *fp = __builtin_frame_address(0);
    return u && u->stack && fp >= u->stack->lo && fp < u->stack->lo + u->stack->size;
}

static atomic_long off_stack; /* ULTs that found themselves off their stack */

static void *plus_one(void *arg)
{
    if (!on_own_stack())
        atomic_fetch_add(&off_stack, 1);
    return (char *)arg + 1;
}

/* --- never_run_join ------------------------------------------------------ */

static atomic_int hog_release, hog_running;

/* Keeps worker 0's pthread busy, without yielding, until released. */
static void *hog(void *arg)
{
    atomic_store(&hog_running, 1);
    while (!atomic_load(&hog_release))
        util_cpu_relax();
    return arg;
}

#define NEVER 256
static mpiv_ult_t never[NEVER];
static atomic_int ult_join_bad = -1;

/* On worker 1: joins the odd ones of never[], which have not run yet. */
static void *join_odd(void *arg)
{
    (void)arg;
    int bad = 0;
    for (int i = 1; i < NEVER; i += 2) {
        void *r;
        if (mpiv_ult_join(never[i], &r) || r != (void *)(intptr_t)(i + 1))
            bad++;
    }
    atomic_store(&ult_join_bad, bad);
    return NULL;
}

static atomic_int pthread_join_rc = -1;
static void *r_even0;

static void *join_first(void *arg)
{
    (void)arg;
    atomic_store(&pthread_join_rc, mpiv_ult_join(never[0], &r_even0));
    return NULL;
}

START_TEST(never_run_join)
{
    sched_test_start(2, 4096, NULL);
    atomic_store(&off_stack, 0);
    mpiv_ult_t h;
    ck_assert_int_eq(mpiv_ult_spawn(hog, NULL, 0, &h), 0);
    while (!atomic_load(&hog_running))
        sched_test_sleep_us(100);
    for (int i = 0; i < NEVER; i++)
        ck_assert_int_eq(mpiv_ult_spawn(plus_one, (void *)(intptr_t)i, 0, &never[i]), 0);
    /* worker 0 is busy: none of them ran, and none owns a stack */
    struct sched_stack_stats st = stats();
    ck_assert_uint_eq(st.in_use, 1); /* the hog's */
    ck_assert_uint_eq(st.made, 1);
    /* joined before they run: from a pthread, and from a ULT on worker 1 */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, join_first, NULL), 0);
    mpiv_ult_t j;
    ck_assert_int_eq(mpiv_ult_spawn(join_odd, NULL, 1, &j), 0);
    sched_test_sleep_us(20000); /* let the joiners block, where they can */
    ck_assert_int_eq(atomic_load(&pthread_join_rc), -1);
    ck_assert_int_eq(atomic_load(&ult_join_bad), -1);
    st = stats();
    ck_assert_uint_le(st.in_use, 2); /* the hog and, once it ran, join_odd */
    atomic_store(&hog_release, 1);
    ck_assert_int_eq(mpiv_ult_join(h, NULL), 0);
    ck_assert_int_eq(mpiv_ult_join(j, NULL), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&pthread_join_rc), 0);
    ck_assert_ptr_eq(r_even0, (void *)1);
    ck_assert_int_eq(atomic_load(&ult_join_bad), 0);
    for (int i = 2; i < NEVER; i += 2) {
        void *r;
        ck_assert_int_eq(mpiv_ult_join(never[i], &r), 0);
        ck_assert_ptr_eq(r, (void *)(intptr_t)(i + 1));
    }
    ck_assert_int_eq(atomic_load(&off_stack), 0);
    /* worker 0 ran the hog and then 256 ULTs one after another on the
     * hog's stack; worker 1 ran join_odd */
    st = stats();
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_le(st.made, 2);
    /* generations: a joined handle is refused, and so is a stale one once
     * its slot is reused (LIFO: the next spawn takes never[NEVER-2]'s slot) */
    ck_assert_int_eq(mpiv_ult_join(never[NEVER - 2], NULL), MPIV_ERR_ARG);
    ck_assert(strstr(mpiv_error_detail(), "joined already") != NULL);
    mpiv_ult_t again;
    ck_assert_int_eq(mpiv_ult_spawn(plus_one, (void *)5, 0, &again), 0);
    ck_assert_int_eq(mpiv_ult_join(never[NEVER - 2], NULL), MPIV_ERR_ARG);
    ck_assert_msg(strstr(mpiv_error_detail(), "stale handle") != NULL, "detail: %s",
                  mpiv_error_detail());
    void *r;
    ck_assert_int_eq(mpiv_ult_join(again, &r), 0);
    ck_assert_ptr_eq(r, (void *)6);
    sched_test_stop();
}
END_TEST

/* --- nonblocking_few ------------------------------------------------------ */

START_TEST(nonblocking_few)
{
    sched_test_start(2, NQUICK, NULL);
    atomic_store(&off_stack, 0);
    mpiv_ult_t *u = malloc(NQUICK * sizeof *u);
    ck_assert_ptr_nonnull(u);
    /* all spawned before any is joined: up to NQUICK records live at once,
     * spread over both workers, which run them as they come */
    for (long i = 0; i < NQUICK; i++)
        if (mpiv_ult_spawn(plus_one, (void *)(intptr_t)i, MPIV_WORKER_ANY, &u[i]))
            ck_abort_msg("spawn %ld: %s", i, mpiv_error_detail());
    for (long i = 0; i < NQUICK; i++) {
        void *r;
        if (mpiv_ult_join(u[i], &r) || r != (void *)(intptr_t)(i + 1))
            ck_abort_msg("join %ld", i);
    }
    struct sched_stack_stats st = stats();
    ck_assert_int_eq(atomic_load(&off_stack), 0);
    ck_assert_uint_eq(st.in_use, 0);
    /* one stack per worker: each ULT ended before the next one started */
    ck_assert_msg(st.made <= 2, "%llu stacks made for %d ULTs that never blocked",
                  (unsigned long long)st.made, NQUICK);
    free(u);
    sched_test_stop();
}
END_TEST

/* --- one_at_a_time ---------------------------------------------------------- */

/* Spawned and joined one at a time: every ULT runs on the stack the last
 * one gave back. Under TSan they also share that stack's fiber, which
 * must carry no frame from one ULT to the next (an ULT ends by a jump,
 * not a return): so many ULTs that even one frame left by each would
 * overflow TSan's shadow stack (64 Ki frames) and crash it. */
#define NSEQ 100000

START_TEST(one_at_a_time)
{
    sched_test_start(1, 64, NULL);
    atomic_store(&off_stack, 0);
    for (long i = 0; i < NSEQ; i++) {
        mpiv_ult_t u;
        void *r;
        if (mpiv_ult_spawn(plus_one, (void *)(intptr_t)i, MPIV_WORKER_ANY, &u) ||
            mpiv_ult_join(u, &r) || r != (void *)(intptr_t)(i + 1))
            ck_abort_msg("ULT %ld: %s", i, mpiv_error_detail());
    }
    struct sched_stack_stats st = stats();
    ck_assert_int_eq(atomic_load(&off_stack), 0);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_le(st.made, 1);
    sched_test_stop();
}
END_TEST

/* --- blocked_keep_stack ---------------------------------------------------- */

#define NBLOCK 64
#define ROUNDS 40
#define FILL 2048

static sched_sync bgate[NBLOCK];
static atomic_int arrived;
static atomic_long smashed;

static bool intact(const volatile unsigned char *buf, long i, int round)
{
    for (int k = 0; k < FILL; k++)
        if (buf[k] != (unsigned char)(i * 31 + k + round))
            return false;
    return true;
}

/* Fills a frame with a pattern of its own, then waits and yields ROUNDS
 * times each; after every resumption the pattern, the frame's address and
 * the stack it names must be what they were. */
static void *blocker(void *arg)
{
    long i = (long)(intptr_t)arg;
    volatile unsigned char buf[FILL];
    struct mpiv_ult *self = sched_self();
    struct sched_stack *mine = self->stack;
    char *fp = __builtin_frame_address(0);
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < FILL; k++)
            buf[k] = (unsigned char)(i * 31 + k + r);
        atomic_fetch_add(&arrived, 1);
        sched_wait(&bgate[i]);
        if (!intact(buf, i, r) || self->stack != mine || __builtin_frame_address(0) != fp)
            atomic_fetch_add(&smashed, 1);
        mpiv_ult_yield();
        if (!intact(buf, i, r) || self->stack != mine)
            atomic_fetch_add(&smashed, 1);
    }
    return arg;
}

/* Writes over as much of its stack as a blocker's pattern covers. */
static void *scribble(void *arg)
{
    volatile unsigned char junk[FILL + 512];
    for (size_t k = 0; k < sizeof junk; k++)
        junk[k] = 0xa5;
    return (void *)(uintptr_t)junk[(uintptr_t)arg % sizeof junk];
}

START_TEST(blocked_keep_stack)
{
    sched_test_start(1, 1024, NULL);
    mpiv_ult_t b[NBLOCK], q[64];
    for (int i = 0; i < NBLOCK; i++) {
        sched_sync_init(&bgate[i]);
        ck_assert_int_eq(mpiv_ult_spawn(blocker, (void *)(intptr_t)i, 0, &b[i]), 0);
    }
    for (int r = 0; r < ROUNDS; r++) {
        while (atomic_load(&arrived) < NBLOCK * (r + 1))
            sched_test_sleep_us(100);
        /* all blocked (or about to be): ULTs that start and end now must
         * get other stacks than theirs */
        for (int k = 0; k < 64; k++)
            ck_assert_int_eq(mpiv_ult_spawn(scribble, (void *)(intptr_t)k, 0, &q[k]), 0);
        for (int k = 0; k < 64; k++)
            ck_assert_int_eq(mpiv_ult_join(q[k], NULL), 0);
        struct sched_stack_stats st = stats();
        ck_assert_uint_eq(st.in_use, NBLOCK);
        for (int i = 0; i < NBLOCK; i++)
            sched_signal(&bgate[i]);
    }
    for (int i = 0; i < NBLOCK; i++)
        ck_assert_int_eq(mpiv_ult_join(b[i], NULL), 0);
    ck_assert_int_eq(atomic_load(&smashed), 0);
    struct sched_stack_stats st = stats();
    ck_assert_uint_eq(st.in_use, 0);
    /* the blockers' stacks, and one more for the ULTs that come and go
     * while they are blocked */
    ck_assert_uint_le(st.made, NBLOCK + 1);
    sched_test_stop();
}
END_TEST

/* --- ready_in_batches ---------------------------------------------------- */

#define NWAIT 100
static sched_sync wgate[NWAIT];
static atomic_int waiting;

static void *wait_gate(void *arg)
{
    atomic_fetch_add(&waiting, 1);
    sched_wait(&wgate[(intptr_t)arg]);
    return plus_one(arg);
}

START_TEST(ready_in_batches)
{
    sched_test_start(1, 1024, NULL);
    mpiv_ult_t u[NWAIT];
    for (int i = 0; i < NWAIT; i++)
        sched_sync_init(&wgate[i]);
    for (int i = 0; i < NWAIT; i++)
        ck_assert_int_eq(mpiv_ult_spawn(wait_gate, (void *)(intptr_t)i, 0, &u[i]), 0);
    while (atomic_load(&waiting) < NWAIT)
        sched_test_sleep_us(100);
    /* 100 blocked ULTs hold 100 stacks: the first chunk's 64, and 36 of
     * the second (128 stacks), of which only the first batch is readied */
    struct sched_stack_stats st = stats();
    ck_assert_uint_eq(st.made, NWAIT);
    ck_assert_uint_eq(st.in_use, NWAIT);
    ck_assert_uint_eq(st.ready, SCHED_STACK_CHUNK_MIN + SCHED_STACK_BATCH);
    for (int i = 0; i < NWAIT; i++) {
        sched_signal(&wgate[i]);
        void *r;
        ck_assert_int_eq(mpiv_ult_join(u[i], &r), 0);
        ck_assert_ptr_eq(r, (void *)(intptr_t)(i + 1));
    }
    ck_assert_int_eq(atomic_load(&off_stack), 0);
    st = stats();
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_eq(st.ready, SCHED_STACK_CHUNK_MIN + SCHED_STACK_BATCH);
    sched_test_stop();
}
END_TEST

static Suite *stacks_suite(void)
{
    Suite *s = suite_create("sched_stacks");
    TCase *tc = tcase_create("stacks");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, never_run_join);
    tcase_add_test(tc, nonblocking_few);
    tcase_add_test(tc, blocked_keep_stack);
    tcase_add_test(tc, one_at_a_time);
    tcase_add_test(tc, ready_in_batches);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = stacks_suite);
