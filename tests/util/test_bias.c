/*
 * Tests of the one-thread fast path (src/util/bias.h): the owner takes
 * biased locks without a locked instruction, a second thread revokes the
 * bias and waits for the owner's open sections (B1, B2), and nothing the
 * owner wrote plainly is lost to a thread that locks after the revocation
 * (B5). The stress case fails if the revoker does not wait for the owner's
 * depth to drain, if the owner does not read the word again after raising
 * its depth, or if a third thread may lock for real before the drain ends
 * (a revoker that turns the bias off before waiting).
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/check_main.h"
#include "sched/sched.h"
#include "util/bias.h"

static int locked(util_spinlock *l) { return atomic_load(&l->locked); }

START_TEST(unarmed_locks_for_real)
{
    util_bias_disarm();
    util_spinlock l = UTIL_SPINLOCK_INIT;
    util_bias_lock(&l);
    ck_assert_int_eq(locked(&l), 1);
    ck_assert(!util_bias_trylock(&l));
    util_bias_unlock(&l);
    ck_assert_int_eq(locked(&l), 0);
    ck_assert(!util_bias_mine());
}
END_TEST

START_TEST(owner_takes_plainly_and_nests)
{
    ck_assert_msg(util_bias_arm(), "membarrier(2) is needed for the fast path");
    util_spinlock a = UTIL_SPINLOCK_INIT, b = UTIL_SPINLOCK_INIT;
    util_bias_lock(&a); /* the first lock claims the bias */
    ck_assert(util_bias_mine());
    ck_assert_int_eq(locked(&a), UTIL_SPIN_PLAIN);
    ck_assert_uint_eq(atomic_load(&util_bias_depth), 1);
    ck_assert(!util_bias_trylock(&a)); /* B3: still held, by us */
    ck_assert(util_bias_trylock(&b));
    ck_assert_int_eq(locked(&b), UTIL_SPIN_PLAIN);
    ck_assert_uint_eq(atomic_load(&util_bias_depth), 2);
    util_bias_unlock(&b);
    util_bias_unlock(&a);
    ck_assert_int_eq(locked(&a), 0);
    ck_assert_int_eq(locked(&b), 0);
    ck_assert_uint_eq(atomic_load(&util_bias_depth), 0);
    util_bias_disarm();
    ck_assert(!util_bias_mine());
}
END_TEST

START_TEST(signal_unwaited_only_without_waiter)
{
    sched_sync s = SCHED_SYNC_INIT;
    ck_assert(sched_signal_unwaited(&s));
    ck_assert(sched_sync_signalled(&s));
    ck_assert(!sched_signal_unwaited(&s)); /* pending already: left alone */
    sched_sync w;
    atomic_init(&w.state, (uintptr_t)0x1000); /* a registered waiter */
    ck_assert(!sched_signal_unwaited(&w));
    ck_assert_uint_eq(atomic_load(&w.state), 0x1000);
}
END_TEST

/* --- a second thread waits for the owner's open section ----------------- */

static util_spinlock lock_a = UTIL_SPINLOCK_INIT, lock_b = UTIL_SPINLOCK_INIT;
static atomic_int owner_done; /* set by the owner just before it unlocks */
static atomic_int saw_done;   /* what the second thread saw when it got in */

static void *take_other_lock(void *unused)
{
    (void)unused;
    util_bias_lock(&lock_b); /* a different lock: the wait is for the owner's depth */
    atomic_store(&saw_done, atomic_load(&owner_done));
    ck_assert_int_eq(locked(&lock_b), 1); /* taken for real */
    util_bias_unlock(&lock_b);
    return NULL;
}

START_TEST(revoker_waits_for_open_sections)
{
    ck_assert(util_bias_arm());
    long before = util_bias_revocations();
    atomic_store(&owner_done, 0);
    util_bias_lock(&lock_a);
    ck_assert(util_bias_mine());
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, take_other_lock, NULL), 0);
    struct timespec nap = {0, 100 * 1000 * 1000};
    nanosleep(&nap, NULL);
    atomic_store(&owner_done, 1);
    util_bias_unlock(&lock_a);
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&saw_done), 1);
    ck_assert_int_eq(util_bias_revocations(), before + 1);
    ck_assert(!util_bias_mine());
    util_bias_lock(&lock_a); /* the former owner now locks for real too */
    ck_assert_int_eq(locked(&lock_a), 1);
    util_bias_unlock(&lock_a);
    util_bias_disarm();
}
END_TEST

/* While its own revocation is under way the owner must not wait for it
 * (the revoker waits for the owner's open section): with a section open,
 * it takes further locks for real, and a claim returns at once. A thread
 * arriving after the revocation locks for real. */
static util_spinlock lock_c = UTIL_SPINLOCK_INIT;

static void *lock_after(void *unused)
{
    (void)unused;
    util_bias_lock(&lock_c);
    atomic_store(&saw_done, locked(&lock_c));
    util_bias_unlock(&lock_c);
    return NULL;
}

START_TEST(owner_nests_during_its_revocation)
{
    ck_assert(util_bias_arm());
    long before = util_bias_revocations();
    atomic_store(&owner_done, 0);
    util_bias_lock(&lock_a);
    ck_assert(util_bias_mine());
    uintptr_t me = util_bias_token();
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, take_other_lock, NULL), 0);
    struct timespec nap = {0, 1000 * 1000};
    for (int i = 0; atomic_load(&util_bias_word) != me + UTIL_BIAS_REVOKING; i++) {
        ck_assert_msg(i < 10000, "the second thread never started revoking");
        nanosleep(&nap, NULL);
    }
    util_bias_lock(&lock_c); /* nested, during the revocation: for real */
    ck_assert_int_eq(locked(&lock_c), 1);
    util_bias_claim(); /* returns: it does not wait for its own revocation */
    util_spinlock d = UTIL_SPINLOCK_INIT;
    ck_assert(util_bias_trylock(&d));
    ck_assert_int_eq(locked(&d), 1);
    util_bias_unlock(&d);
    util_bias_unlock(&lock_c);
    ck_assert_uint_eq(atomic_load(&util_bias_word), me + UTIL_BIAS_REVOKING);
    atomic_store(&owner_done, 1);
    util_bias_unlock(&lock_a); /* the outer section ends: the revoker goes on */
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&saw_done), 1);
    ck_assert_int_eq(util_bias_revocations(), before + 1);
    ck_assert_uint_eq(atomic_load(&util_bias_word), 0);
    atomic_store(&saw_done, 0);
    ck_assert_int_eq(pthread_create(&t, NULL, lock_after, NULL), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&saw_done), 1); /* held for real */
    util_bias_disarm();
}
END_TEST

/* --- revocation in the middle of traffic -------------------------------- */

#define ROUNDS 100
#define PER_THREAD 3000

static util_spinlock counter_lock = UTIL_SPINLOCK_INIT;
static long counter; /* plain: only ever touched under counter_lock */
static atomic_int go;

/* A read-modify-write stretched over a few microseconds, so that two
 * threads inside at once lose an update nearly every time: longer than a
 * membarrier takes, or the revoker would come out of it only after the
 * owner's section had ended anyway, and a missing wait would go unseen. */
static atomic_int inside, overlapped; /* threads in bump now; ever two at once */

static void bump(void)
{
    if (atomic_fetch_add_explicit(&inside, 1, memory_order_relaxed) != 0)
        atomic_store_explicit(&overlapped, 1, memory_order_relaxed);
    long v = counter;
    for (volatile int i = 0; i < 2000; i++)
        ;
    counter = v + 1;
    atomic_fetch_sub_explicit(&inside, 1, memory_order_relaxed);
}

/* One increment, in one of the three ways the library protects data:
 * a biased lock, a biased trylock, or a plain section with no lock word at
 * all (util_bias_begin/end, as a request's signal), which falls back to a
 * real lock once the bias is gone. The third is what B1's wait protects
 * alone: without it, or without B2's second read of the word, a revoker's
 * first increment lands inside the owner's stretched one. */
static void section(int way)
{
    if (way == 0) {
        util_bias_lock(&counter_lock);
    } else if (way == 1) {
        while (!util_bias_trylock(&counter_lock))
            util_cpu_relax();
    } else if (util_bias_begin()) {
        bump();
        util_bias_end();
        return;
    } else {
        util_spin_lock(&counter_lock);
        bump();
        util_spin_unlock(&counter_lock);
        return;
    }
    bump();
    util_bias_unlock(&counter_lock);
}

static void *contender(void *arg)
{
    unsigned delay = (unsigned)(uintptr_t)arg;
    while (!atomic_load(&go))
        ;
    for (volatile unsigned i = 0; i < delay; i++)
        ;
    for (int i = 0; i < PER_THREAD; i++)
        section(i % 3);
    return NULL;
}

/* A third thread, which starts the moment the word stops naming the owner:
 * if it could lock for real then, it would land in the owner's section. */
static _Atomic uintptr_t owner_token;

static void *watcher(void *unused)
{
    (void)unused;
    while (atomic_load(&util_bias_word) == atomic_load(&owner_token))
        ;
    for (int i = 0; i < PER_THREAD; i++)
        section(i % 3);
    return NULL;
}

START_TEST(revocation_under_traffic_loses_nothing)
{
    unsigned seed = (unsigned)time(NULL);
    long revoked = util_bias_revocations();
    for (int r = 0; r < ROUNDS; r++) {
        ck_assert(util_bias_arm());
        counter = 0;
        atomic_store(&go, 0);
        util_bias_lock(&counter_lock); /* claim: this thread owns the bias */
        bump();
        util_bias_unlock(&counter_lock);
        ck_assert(util_bias_mine());
        atomic_store(&owner_token, util_bias_token());
        pthread_t t, t3;
        ck_assert_int_eq(pthread_create(&t3, NULL, watcher, NULL), 0);
        /* the second thread starts somewhere in the owner's first few
         * thousand sections */
        ck_assert_int_eq(pthread_create(&t, NULL, contender, (void *)(uintptr_t)(rand_r(&seed) % 200000)), 0);
        atomic_store(&go, 1);
        for (int i = 1; i < PER_THREAD; i++)
            section(2 - i % 3);
        pthread_join(t, NULL);
        pthread_join(t3, NULL);
        ck_assert_msg(counter == 3 * PER_THREAD, "round %d: %ld increments of %d survived", r,
                      counter, 3 * PER_THREAD);
        util_bias_disarm();
    }
    /* each round's second thread revoked once (the third only waits for
     * it): the owner disarms only after joining both */
    ck_assert_int_eq(util_bias_revocations() - revoked, ROUNDS);
}
END_TEST

/* Threads that take turns: each runs bursts of sections, parking the
 * bias after each burst (B8), so that the others take it over from the
 * parked owner, or revoke it from an active one that keeps it past their
 * wait. Loose turns pause between bursts of 50; tight ones park after
 * every 1 to 4 sections and go on at once, so that parks, take-backs and
 * takeovers race. No two threads may ever be in a section at once, and no
 * increment may be lost: a takeover that did not wait for the park (an
 * active owner taken over mid-section), or a take-back that is not a
 * swap, lets two in. */
#define TURN_THREADS 3
#define TURN_BURSTS 60
#define TURN_BURST 50

static _Atomic bool tight;

static void *taker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    while (!atomic_load(&go))
        ;
    for (int b = 0; b < TURN_BURSTS; b++) {
        int n = atomic_load(&tight) ? (int)(rand_r(&seed) % 4) + 1 : TURN_BURST;
        for (int k = 0; k < n; k++)
            section((int)(rand_r(&seed) % 3));
        util_bias_park(); /* between bursts nothing is held */
        if (!atomic_load(&tight)) {
            struct timespec ts = {0, (long)(rand_r(&seed) % 50000)};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

START_TEST(takeovers_under_traffic_lose_nothing)
{
    long took = util_bias_takeovers();
    atomic_store(&overlapped, 0);
    for (int r = 0; r < 20; r++) {
        atomic_store(&tight, r % 2 == 1);
        ck_assert(util_bias_arm());
        counter = 0;
        long want = 0;
        unsigned seed = 0;
        atomic_store(&go, 0);
        pthread_t t[TURN_THREADS];
        for (int i = 0; i < TURN_THREADS; i++)
            ck_assert_int_eq(pthread_create(&t[i], NULL, taker, (void *)(uintptr_t)(r * 10 + i + 1)),
                             0);
        atomic_store(&go, 1);
        for (int i = 0; i < TURN_THREADS; i++)
            pthread_join(t[i], NULL);
        /* the counts each taker drew, drawn again */
        for (int i = 0; i < TURN_THREADS; i++) {
            seed = (unsigned)(r * 10 + i + 1);
            for (int b = 0; b < TURN_BURSTS; b++) {
                int n = atomic_load(&tight) ? (int)(rand_r(&seed) % 4) + 1 : TURN_BURST;
                want += n;
                for (int k = 0; k < n; k++)
                    (void)rand_r(&seed);
                if (!atomic_load(&tight))
                    (void)rand_r(&seed);
            }
        }
        ck_assert_msg(counter == want, "round %d (%s): %ld increments of %ld survived", r,
                      atomic_load(&tight) ? "tight" : "loose", counter, want);
        ck_assert_msg(!atomic_load(&overlapped), "round %d: two threads in a section at once", r);
        util_bias_disarm();
    }
    /* the bias did change hands without a revocation */
    ck_assert_int_gt(util_bias_takeovers() - took, 0);
}
END_TEST

/* A parked owner takes its bias back with its next lock; a parked bias is
 * taken over by the next thread that locks, with no revocation; and the
 * previous owner then locks for real while the new one holds it. */
static void *lock_once(void *arg)
{
    util_spinlock *l = arg;
    util_bias_lock(l);
    bool mine = util_bias_mine();
    util_bias_unlock(l);
    util_bias_park();
    return (void *)(uintptr_t)mine;
}

START_TEST(a_parked_bias_is_taken_back_or_over)
{
    ck_assert(util_bias_arm());
    long revoked = util_bias_revocations(), took = util_bias_takeovers();
    util_spinlock l = UTIL_SPINLOCK_INIT;
    util_bias_lock(&l);
    ck_assert(util_bias_mine());
    util_bias_unlock(&l);
    util_bias_park();
    ck_assert(!util_bias_mine());
    ck_assert_uint_eq(atomic_load(&util_bias_word), util_bias_token() + UTIL_BIAS_PARKED);
    util_bias_lock(&l); /* back: ours again, plainly */
    ck_assert(util_bias_mine());
    ck_assert_int_eq(locked(&l), UTIL_SPIN_PLAIN);
    util_bias_unlock(&l);
    util_bias_park();
    pthread_t t;
    void *mine = NULL;
    ck_assert_int_eq(pthread_create(&t, NULL, lock_once, &l), 0);
    pthread_join(t, &mine);
    ck_assert_msg(mine != NULL, "the second thread did not take the parked bias over");
    ck_assert_int_eq(util_bias_takeovers() - took, 1);
    ck_assert_int_eq(util_bias_revocations() - revoked, 0);
    /* it parked in turn, and exited: ours again at our next lock */
    util_bias_lock(&l);
    ck_assert(util_bias_mine());
    util_bias_unlock(&l);
    ck_assert_int_eq(util_bias_takeovers() - took, 2);
    ck_assert_int_eq(util_bias_revocations() - revoked, 0);
    util_bias_disarm();
}
END_TEST

/* A count changed plainly by the owner (util_bias_add, util_bias_take)
 * while a second thread changes it with locked adds (round 0) or locked
 * takes (round 1): the second thread's claim revokes the bias first, so
 * no change is lost. Without the claim its locked changes would land
 * between the owner's plain loads and stores, which would go on for the
 * whole run, and lose some of them. */
#define COUNT_CHANGES 400000

static _Atomic long shared_count;
static atomic_long refused_other;

static void *count_other(void *arg)
{
    bool takes = arg != NULL;
    while (!atomic_load(&go))
        ;
    for (int i = 0; i < COUNT_CHANGES; i++) {
        if (!takes)
            util_bias_add(&shared_count, 3, false);
        else if (!util_bias_take(&shared_count, 1, false))
            atomic_fetch_add(&refused_other, 1);
    }
    return NULL;
}

START_TEST(a_count_changed_plainly_loses_nothing)
{
    for (int takes = 0; takes < 2; takes++) {
        ck_assert(util_bias_arm());
        long revoked = util_bias_revocations();
        long start = 4l * COUNT_CHANGES; /* enough that no take is refused */
        atomic_store(&shared_count, start);
        atomic_store(&go, 0);
        atomic_store(&refused_other, 0);
        util_bias_add(&shared_count, 0, true); /* claim: this thread owns the bias */
        ck_assert(util_bias_mine());
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, count_other, takes ? &shared_count : NULL), 0);
        atomic_store(&go, 1);
        long refused = 0;
        for (int i = 0; i < COUNT_CHANGES; i++) {
            if (i % 2)
                util_bias_add(&shared_count, 2, true);
            else if (!util_bias_take(&shared_count, 1, true))
                refused++;
        }
        pthread_join(t, NULL);
        ck_assert_int_eq(refused, 0);
        ck_assert_int_eq(atomic_load(&refused_other), 0);
        long want = start + COUNT_CHANGES / 2 + (takes ? -1l : 3l) * COUNT_CHANGES;
        ck_assert_msg(atomic_load(&shared_count) == want, "%s: %ld, not %ld",
                      takes ? "takes" : "adds", atomic_load(&shared_count), want);
        ck_assert_int_eq(util_bias_revocations() - revoked, 1);
        util_bias_disarm();
    }
    /* a take that finds too little leaves the count as it was, either way */
    ck_assert(util_bias_arm());
    atomic_store(&shared_count, 5);
    ck_assert(!util_bias_take(&shared_count, 6, true));
    ck_assert(util_bias_mine());
    ck_assert(!util_bias_take(&shared_count, 6, false));
    ck_assert_int_eq(atomic_load(&shared_count), 5);
    ck_assert(util_bias_take(&shared_count, 5, false));
    ck_assert_int_eq(atomic_load(&shared_count), 0);
    util_bias_disarm();
}
END_TEST

static Suite *bias_suite(void)
{
    Suite *s = suite_create("bias");
    TCase *tc = tcase_create("bias");
    tcase_add_test(tc, unarmed_locks_for_real);
    tcase_add_test(tc, owner_takes_plainly_and_nests);
    tcase_add_test(tc, signal_unwaited_only_without_waiter);
    tcase_add_test(tc, revoker_waits_for_open_sections);
    tcase_add_test(tc, owner_nests_during_its_revocation);
    tcase_add_test(tc, revocation_under_traffic_loses_nothing);
    tcase_add_test(tc, a_parked_bias_is_taken_back_or_over);
    tcase_add_test(tc, takeovers_under_traffic_lose_nothing);
    tcase_add_test(tc, a_count_changed_plainly_loses_nothing);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = bias_suite);
