/*
 * bias.c — claiming, handing over and revoking the one-thread fast path
 * (bias.h has the invariants). All are rare: a claim once per mpiv_init, a
 * takeover when the thread that communicates changes (a join, a worker
 * left without ULTs), a revocation at most once; so they take a mutex and
 * may make system calls.
 */
#include "util/bias.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct util_bias_line util_bias_word_, util_bias_depth_;
_Thread_local _Alignas(4) uint16_t util_bias_me;

static pthread_mutex_t bias_mu = PTHREAD_MUTEX_INITIALIZER;
static bool registered; /* membarrier's private expedited command, under bias_mu */
static _Atomic long revocations, takeovers;
static bool claimed_once; /* under bias_mu: the first claim is logged */

/* How long a thread that finds the owner active waits for it to park (it
 * may be on its way to a join, or to an idle spell) before revoking. */
#define PARK_WAIT_NS 1000000

static int membarrier(int cmd) { return (int)syscall(__NR_membarrier, cmd, 0, 0); }

bool util_bias_arm(void)
{
    pthread_mutex_lock(&bias_mu);
    if (!registered) {
        int have = membarrier(MEMBARRIER_CMD_QUERY);
        registered = have > 0 && (have & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                     membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
        if (!registered)
            util_log_info("one-thread fast path off: no membarrier(2) here (%s)",
                          have < 0 ? strerror(errno) : "private expedited not offered");
    }
    if (registered) {
        /* relaxed: B6, armed before any other thread of ours communicates
         * (mpiv_init's caller has not started them on MPIv yet) */
        atomic_store_explicit(&util_bias_depth, 0, memory_order_relaxed);
        atomic_store_explicit(&util_bias_word, UTIL_BIAS_ARMED, memory_order_seq_cst);
    }
    pthread_mutex_unlock(&bias_mu);
    return registered;
}

/* Under bias_mu: takes the bias from the owner whose token is in the word
 * (B1, B2). Other threads wait on bias_mu meanwhile (settle). Returns
 * false, having done nothing, if the word is no longer `owner` (it parked
 * meanwhile: the caller looks again). */
static bool bias_revoke(uintptr_t owner)
{
    uintptr_t expect = owner;
    if (!atomic_compare_exchange_strong_explicit(&util_bias_word, &expect,
                                                 owner + UTIL_BIAS_REVOKING,
                                                 memory_order_seq_cst, memory_order_relaxed))
        return false;
    /* B2: a full barrier in every running thread of the process (and a
     * thread that is not running passed one in its context switch) */
    if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
        util_fatal("one-thread fast path: membarrier failed after registering: %s",
                   strerror(errno));
    /* acquire: B5. The owner's sections are a few dozen instructions,
     * unless it lost its core in one: give it ours after a while. */
    for (int i = 0; atomic_load_explicit(&util_bias_depth, memory_order_acquire) != 0; i++) {
        if (i < 1000)
            util_cpu_relax();
        else
            sched_yield();
    }
    /* release: what the owner wrote is published to whoever reads 0 here
     * with acquire; the threads in settle have it from bias_mu (B5) */
    atomic_store_explicit(&util_bias_word, 0, memory_order_release);
    atomic_fetch_add_explicit(&revocations, 1, memory_order_relaxed);
    util_log_info("one-thread fast path off: a second thread communicates; every thread "
                  "locks from now on");
    return true;
}

/* Under bias_mu: waits up to PARK_WAIT_NS for the word to leave `owner`
 * (the owner parks, or turns the fast path off in util_bias_disarm); true
 * if it did. Yields the core after a while: the owner may need it to get to
 * its park. */
static bool wait_for_park(uintptr_t owner)
{
    uint64_t t0 = util_now_ns();
    for (int i = 0;; i++) {
        /* relaxed: the swap that follows decides */
        if (atomic_load_explicit(&util_bias_word, memory_order_relaxed) != owner)
            return true;
        if ((i & 63) == 63 && util_now_ns() - t0 > PARK_WAIT_NS)
            return false;
        if (i < 256)
            util_cpu_relax();
        else
            sched_yield();
    }
}

bool util_bias_settle(void)
{
    uintptr_t me = util_bias_token();
    /* Our own parked bias: take it back, without the mutex (B6: a swap;
     * if a taker's swap won, we are not the owner any more). acq_rel: a
     * swap on the word, as the takeover's. */
    uintptr_t now = me + UTIL_BIAS_PARKED;
    if (atomic_compare_exchange_strong_explicit(&util_bias_word, &now, me, memory_order_acq_rel,
                                                memory_order_acquire))
        return true;
    pthread_mutex_lock(&bias_mu);
    for (;;) {
        /* acquire: B5, and B8's for a parked owner's writes */
        now = atomic_load_explicit(&util_bias_word, memory_order_acquire);
        if (now == 0 || now == me)
            break;
        if (now == UTIL_BIAS_ARMED || util_bias_parked(now)) {
            /* claim it, or take it (back) from a parked owner (B8): the
             * swap fails if the owner took it back first, and we look
             * again. acq_rel: acquire the parked owner's writes. */
            if (atomic_compare_exchange_strong_explicit(&util_bias_word, &now, me,
                                                        memory_order_acq_rel,
                                                        memory_order_acquire)) {
                if (now == UTIL_BIAS_ARMED && !claimed_once) {
                    claimed_once = true;
                    util_log_info("one-thread fast path on: one thread communicates, without "
                                  "locked instructions, until another one does");
                } else if (now != UTIL_BIAS_ARMED && now != me + UTIL_BIAS_PARKED) {
                    atomic_fetch_add_explicit(&takeovers, 1, memory_order_relaxed);
                }
            }
            continue;
        }
        /* Another thread owns it and is active (token + 1 is never seen
         * here: a revocation ends, at 0, before it lets bias_mu go). Give
         * it a moment to park, then revoke. */
        if (!wait_for_park(now))
            bias_revoke(now); /* false if it parked just now: look again */
    }
    bool mine = atomic_load_explicit(&util_bias_word, memory_order_relaxed) == me;
    pthread_mutex_unlock(&bias_mu);
    return mine;
}

void util_bias_park(void)
{
    uintptr_t me = util_bias_token();
    /* relaxed: only we make the word our token */
    if (atomic_load_explicit(&util_bias_word, memory_order_relaxed) != me)
        return;
    /* B8: never from inside a section */
    if (atomic_load_explicit(&util_bias_depth, memory_order_relaxed) != 0)
        util_fatal("one-thread fast path: parked inside a section");
    /* release: what we wrote in plain sections, for whoever takes it over
     * (B8); fails only if a revocation started, which then finds depth 0 */
    atomic_compare_exchange_strong_explicit(&util_bias_word, &me, me + UTIL_BIAS_PARKED,
                                            memory_order_release, memory_order_relaxed);
}

void util_bias_disarm(void)
{
    uintptr_t me = util_bias_token();
    pthread_mutex_lock(&bias_mu);
    for (;;) {
        uintptr_t now = atomic_load_explicit(&util_bias_word, memory_order_acquire);
        if (now == 0 || now == UTIL_BIAS_ARMED || now == me)
            break;
        if (util_bias_parked(now)) {
            /* a parked owner runs no biased code (B8): off, unless it
             * takes it back first (then it is active: look again) */
            if (atomic_compare_exchange_strong_explicit(&util_bias_word, &now, 0,
                                                        memory_order_acq_rel,
                                                        memory_order_relaxed))
                break;
            continue;
        }
        bias_revoke(now); /* false if it parked just now: look again */
    }
    atomic_store_explicit(&util_bias_word, 0, memory_order_seq_cst);
    claimed_once = false;
    pthread_mutex_unlock(&bias_mu);
}

long util_bias_revocations(void) { return atomic_load_explicit(&revocations, memory_order_relaxed); }
long util_bias_takeovers(void) { return atomic_load_explicit(&takeovers, memory_order_relaxed); }

bool util_bias_mine(void)
{
    return atomic_load_explicit(&util_bias_word, memory_order_relaxed) == util_bias_token();
}
