/*
 * bias.c — claiming and revoking the one-thread fast path (bias.h has the
 * invariants). Both are rare: a claim once per mpiv_init, a revocation at
 * most once, so they take a mutex and may make system calls.
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
_Thread_local uint16_t util_bias_me;

static pthread_mutex_t bias_mu = PTHREAD_MUTEX_INITIALIZER;
static bool registered; /* membarrier's private expedited command, under bias_mu */
static _Atomic long revocations;

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
 * (B1, B2). Other threads wait on bias_mu meanwhile (settle). */
static void bias_revoke(uintptr_t owner)
{
    atomic_store_explicit(&util_bias_word, owner + UTIL_BIAS_REVOKING, memory_order_seq_cst);
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
}

bool util_bias_settle(void)
{
    uintptr_t me = util_bias_token();
    pthread_mutex_lock(&bias_mu);
    /* relaxed: bias_mu orders claims and revocations among themselves;
     * the owner's reads are B2's business */
    uintptr_t now = atomic_load_explicit(&util_bias_word, memory_order_relaxed);
    if (now == UTIL_BIAS_ARMED) {
        atomic_store_explicit(&util_bias_word, me, memory_order_seq_cst);
        util_log_info("one-thread fast path on: one thread communicates, without locked "
                      "instructions, until another one does");
    }
    else if (now != 0 && now != me)
        bias_revoke(now); /* never token + 1 here: revocations end under bias_mu */
    bool mine = atomic_load_explicit(&util_bias_word, memory_order_relaxed) == me;
    pthread_mutex_unlock(&bias_mu);
    return mine;
}

void util_bias_disarm(void)
{
    pthread_mutex_lock(&bias_mu);
    uintptr_t now = atomic_load_explicit(&util_bias_word, memory_order_relaxed);
    if (now != 0 && now != UTIL_BIAS_ARMED && now != util_bias_token())
        bias_revoke(now);
    atomic_store_explicit(&util_bias_word, 0, memory_order_seq_cst);
    pthread_mutex_unlock(&bias_mu);
}

long util_bias_revocations(void) { return atomic_load_explicit(&revocations, memory_order_relaxed); }

bool util_bias_mine(void)
{
    return atomic_load_explicit(&util_bias_word, memory_order_relaxed) == util_bias_token();
}
