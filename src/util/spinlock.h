/*
 * spinlock.h — test-and-test-and-set spinlock for critical sections of a
 * few dozen instructions (a hash bucket, a deque end). Never hold one across
 * a context switch or a system call.
 *
 * Invariant: `locked` is 1 exactly while one thread is between a successful
 * util_spin_lock/trylock and its util_spin_unlock. Acquire on lock and
 * release on unlock make the protected data's writes visible to the next
 * holder.
 */
#ifndef MPIV_UTIL_SPINLOCK_H
#define MPIV_UTIL_SPINLOCK_H

#include <stdbool.h>

#include "atomic.h"

typedef struct util_spinlock {
    atomic_int locked;
} util_spinlock;

#define UTIL_SPINLOCK_INIT {0}

static inline void util_spin_init(util_spinlock *l) { atomic_init(&l->locked, 0); }

static inline bool util_spin_trylock(util_spinlock *l)
{
    /* Read first so a contended lock spins on a shared line, not by
     * bouncing it with writes. */
    return util_load_relaxed(&l->locked) == 0 &&
           atomic_exchange_explicit(&l->locked, 1, memory_order_acquire) == 0;
}

static inline void util_spin_lock(util_spinlock *l)
{
    while (!util_spin_trylock(l))
        util_cpu_relax();
}

static inline void util_spin_unlock(util_spinlock *l)
{
    util_store_release(&l->locked, 0);
}

#endif
