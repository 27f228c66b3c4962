/*
 * bias.h — the one-thread fast path: locks and signals that cost no locked
 * instruction while only one thread communicates.
 *
 * A rank whose messages all go through one thread (one pthread per rank,
 * or one worker running every ULT, with no server thread) would otherwise
 * pay for being safe with many: a locked exchange per matching-table
 * operation, per ring send and per progress round, and a compare-and-swap
 * per completed request. Each drains the store buffer, which is dear while
 * a stream of messages is being copied, and a small message pays several
 * on each side (docs/perf/pt2pt.md has the counts and what removing them
 * buys, and costs).
 *
 * So the hot locks of the messaging layer are *biased* (the technique of
 * biased locking in JVMs): once armed (util_bias_arm, by mpiv_init when no
 * server thread runs), the first thread to take one becomes the owner, and
 * the owner takes them with plain loads and stores. An other thread that
 * takes one while the owner is active (not parked, below) revokes the
 * bias for good: it turns it off, makes every
 * thread of the process execute a full barrier (membarrier(2)), and waits
 * until the owner is in no section it entered without locking. From then
 * on everybody locks, the owner too.
 *
 * State: util_bias_word is 0 (off: lock for real), UTIL_BIAS_ARMED (no owner
 * yet), the owner's token (the address of its thread-local word, a
 * multiple of 4), the token + 1 while a revocation is under way, or the
 * token + 2 while the owner is parked (B8). util_bias_depth counts the
 * owner's open sections (plain-taken locks and signals in progress); only
 * the owner writes it.
 *
 * A thread that stops communicating for a while at a point where it holds
 * nothing (a pthread blocking in mpiv_ult_join, a worker left without
 * ULTs) parks its bias (util_bias_park). The next thread that communicates
 * then takes the bias over, instead of revoking it for good: so a program
 * whose main thread initialises, then runs its ULTs on one worker and
 * joins them, keeps the fast path in whichever thread is the one
 * communicating. A thread that finds the owner active waits a little for
 * it to park (it may be on its way to a join) before it revokes.
 *
 * Invariants
 *   B1  While the word holds the owner's token, the token + 1 or the token
 *       + 2, no other thread touches a biased lock or what it protects: a
 *       non-owner first takes a parked bias over (B8), revokes, or waits
 *       for the revocation under way (util_bias_settle,
 *       under a mutex the revoker holds throughout), and the word becomes
 *       0 only once depth is 0 after it became token + 1. (A revoker that
 *       wrote 0 first would let a third thread lock for real while the
 *       owner is still in a plain section of the same lock.)
 *   B2  The owner opens a section by writing depth + 1, then reads the word
 *       again (util_bias_begin); the revoker writes token + 1, then runs
 *       membarrier, then reads depth. membarrier puts a full barrier in
 *       every running thread between the revoker's write and read, so
 *       either the owner's second read sees token + 1 (it undoes its depth
 *       and locks for real, without waiting: the revoker may be waiting
 *       for an outer section of its own) or the revoker sees the owner's
 *       depth and waits (the Dekker pair, with the owner's half of the
 *       fence paid by the revoker). While the word is token + 1 only the
 *       owner runs in biased code, so its real locks meet no one.
 *   B3  A lock taken plainly holds UTIL_SPIN_PLAIN (2), one taken for real
 *       holds 1, so unlock knows which it undoes; nested plain locks keep
 *       their meaning (a trylock of a lock the owner holds fails).
 *   B4  A thread never takes a biased lock while holding a plain spinlock
 *       that code under a biased lock may take: a revoker waits for the
 *       owner's sections to end, and an owner section that waited for that
 *       lock would never end. The matching layer's wildcard lock is biased
 *       for this reason (it is held around matching-table calls).
 *   B5  What the owner wrote in plain sections is visible to whoever locks
 *       after it: a plain unlock stores 0 with release, so a later real
 *       lock's acquire exchange synchronises with it; depth's decrement
 *       is a release store that the revoker reads with acquire, before it
 *       releases the mutex that the threads waiting in settle take, and
 *       before it stores 0 with release, which a thread arriving later
 *       reads with acquire (util_bias_begin, util_bias_claim).
 *   B6  The word goes from the owner's token to token + 1 (a revocation,
 *       which ends at 0) or to token + 2 (parked, by the owner only), and
 *       from token + 2 back to the token (the owner) or to another
 *       thread's token (a takeover, under bias_mu); each of these by a
 *       compare-and-swap, so a park, an unpark, a takeover and the start
 *       of a revocation that race decide by which swap wins. From 0 it
 *       goes back to armed only in util_bias_arm (mpiv_init): a bias is
 *       revoked once.
 *   B7  No other thread is in biased code when the bias is armed: a thread
 *       that read the word as 0 just before could lock for real at the
 *       moment the owner's plain test-then-store takes the same lock.
 *       mpiv_init arms last, only where no server thread runs, before the
 *       caller can have spawned a ULT, and idle workers without ULTs stay
 *       out of the network (sched.c). The owner's plain acquisition still
 *       reads the lock with acquire, so it sees what a real holder before
 *       the arming wrote.
 *   B8  A thread parks only at a point where it is in no section, holds no
 *       lock (biased or one that biased code takes) and is in no lock
 *       operation, and depth is 0 (util_bias_park checks it). While the
 *       word is token + 2 the owner runs no biased code: its next biased
 *       call first swaps the word back (util_bias_settle), and if another
 *       thread took the bias over meanwhile it is a non-owner from then
 *       on. So a takeover meets no open section and no lock taken for
 *       real (those exist only once the word was 0 or token + 1, and the
 *       word never leaves 0, and token + 1 ends at 0), and only the new
 *       owner writes depth. The park's swap is a release and the
 *       takeover's an acquire: what the parked owner wrote is visible to
 *       the new one (B5's role).
 *
 *   B9  A biased count (util_bias_add, util_bias_take; the eager credit)
 *       is changed plainly only by the owner inside a section, and every
 *       locked change of it follows util_bias_claim. So, as for a lock's
 *       plain sections (B1, B2), a non-owner's locked change waits for the
 *       owner's plain ones to end, and after a revocation everybody's
 *       changes are locked. A count changed anywhere without these two
 *       would race the owner's plain store.
 *
 * Not covered: fork() of a process whose bias is owned (the child inherits
 * the word; MPIv in a forked child is not supported anyway).
 */
#ifndef MPIV_UTIL_BIAS_H
#define MPIV_UTIL_BIAS_H

#include <stdbool.h>
#include <stdint.h>

#include "spinlock.h"
#include "util.h"

#define UTIL_BIAS_ARMED ((uintptr_t)1)
#define UTIL_BIAS_REVOKING ((uintptr_t)1) /* added to the owner's token (B1) */
#define UTIL_BIAS_PARKED ((uintptr_t)2)   /* added to the owner's token (B8) */
#define UTIL_SPIN_PLAIN 2 /* B3: the value of a lock taken without a locked instruction */

/* Each in a cache line of its own: every biased lock reads the word, and
 * the owner writes depth at every lock, so neither may share a line with
 * data that other threads write. */
struct util_bias_line {
    _Alignas(UTIL_CACHELINE) _Atomic uintptr_t v;
};
/* hidden: read on every biased lock, so addressed directly rather than
 * through the shared library's GOT */
extern struct util_bias_line util_bias_word_ __attribute__((visibility("hidden")));
extern struct util_bias_line util_bias_depth_ __attribute__((visibility("hidden")));
#define util_bias_word (util_bias_word_.v)
#define util_bias_depth (util_bias_depth_.v)
/* Only its address is used: the calling thread's token, a multiple of 4,
 * so that token + 1 and token + 2 are never another thread's token. */
extern _Thread_local _Alignas(4) uint16_t util_bias_me
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

/* Arms the fast path: the next thread to take a biased lock owns it.
 * Returns false (and leaves it off) where membarrier(2) is missing. */
bool util_bias_arm(void);
/* Off for good, revoking first if another thread owns it. Call with no
 * biased lock held. */
void util_bias_disarm(void);
/* The word held neither 0 nor our token: takes our parked bias back, claims
 * the bias if it is armed or takes it over if its owner parked, else waits
 * a little for the owner to park and then revokes it, or waits for the
 * revocation under way (B1, B8); the word is read again under the mutex.
 * Returns true if the caller owns it now. */
bool util_bias_settle(void);
/* Parks the bias if the calling thread owns it (B8): call only where the
 * thread is in no section and holds no lock, before it stops
 * communicating for a while (a blocking join, a worker's idle spell
 * without ULTs). Its next biased call takes it back if nobody took it
 * over meanwhile. */
void util_bias_park(void);
/* For logs and tests: revocations and takeovers of a parked bias since
 * start, and whether the calling thread owns the bias (parked: no). */
long util_bias_revocations(void);
long util_bias_takeovers(void);
bool util_bias_mine(void);

static inline uintptr_t util_bias_token(void) { return (uintptr_t)&util_bias_me; }
/* Whether word value w is some thread's parked bias (token + 2, B8). */
static inline bool util_bias_parked(uintptr_t w) { return (w & 3) == UTIL_BIAS_PARKED; }

/* Opens a plain section if the calling thread owns the bias (returns true:
 * end it with util_bias_end), else returns false and the caller locks for
 * real. A non-owner that finds the bias on claims or revokes it here. */
static inline bool util_bias_begin(void)
{
    /* acquire: B5, for a thread that reads the revoker's 0 (a plain load
     * on x86, LDAR on ARM); B2's ordering comes from membarrier */
    uintptr_t w = atomic_load_explicit(&util_bias_word, memory_order_acquire);
    if (w == 0) /* no hint: both ways are hot, in different programs */
        return false;
    uintptr_t me = util_bias_token();
    /* B2: the owner does not wait for its own revocation */
    if (util_unlikely(w != me) && (w == me + UTIL_BIAS_REVOKING || !util_bias_settle()))
        return false;
    /* relaxed: only this thread writes depth */
    uintptr_t d = atomic_load_explicit(&util_bias_depth, memory_order_relaxed);
    atomic_store_explicit(&util_bias_depth, d + 1, memory_order_relaxed);
    /* B2: the store above is before the load below in program order; the
     * revoker's membarrier supplies the hardware fence between them */
    atomic_signal_fence(memory_order_seq_cst);
    if (util_likely(atomic_load_explicit(&util_bias_word, memory_order_relaxed) == me))
        return true;
    atomic_store_explicit(&util_bias_depth, d, memory_order_release);
    return false;
}

/* For a thread about to touch state that the owner changes in plain
 * sections without a biased lock (a request's signal): claims or revokes
 * the bias unless the caller owns it or it is off. */
static inline void util_bias_claim(void)
{
    /* acquire: as in util_bias_begin */
    uintptr_t w = atomic_load_explicit(&util_bias_word, memory_order_acquire);
    uintptr_t me = util_bias_token();
    if (util_unlikely(w != 0) && w != me && w != me + UTIL_BIAS_REVOKING)
        util_bias_settle();
}

static inline void util_bias_end(void)
{
    uintptr_t d = atomic_load_explicit(&util_bias_depth, memory_order_relaxed);
    /* release: B5 */
    atomic_store_explicit(&util_bias_depth, d - 1, memory_order_release);
}

/* A count that the owner may change with a plain load and store (B9):
 * only in a section (when `plain` asks for it and the caller owns the
 * bias), while every locked change comes after util_bias_claim, so a
 * non-owner has settled the bias (B1) before its locked add can meet the
 * owner's plain one. Every change of such a count must go through these
 * two. Relaxed: counts (eager credit), not orders. */
static inline long util_bias_add(_Atomic long *c, long v, bool plain)
{
    if (plain && util_bias_begin()) {
        long n = atomic_load_explicit(c, memory_order_relaxed) + v;
        atomic_store_explicit(c, n, memory_order_relaxed);
        util_bias_end();
        return n;
    }
    util_bias_claim();
    return atomic_fetch_add_explicit(c, v, memory_order_relaxed) + v;
}

/* Takes v from the count if it holds at least v; false (count unchanged)
 * if not. As util_bias_add. */
static inline bool util_bias_take(_Atomic long *c, long v, bool plain)
{
    if (plain && util_bias_begin()) {
        long left = atomic_load_explicit(c, memory_order_relaxed);
        bool ok = left >= v;
        if (ok)
            atomic_store_explicit(c, left - v, memory_order_relaxed);
        util_bias_end();
        return ok;
    }
    util_bias_claim();
    if (atomic_fetch_sub_explicit(c, v, memory_order_relaxed) >= v)
        return true;
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
    return false;
}

static inline bool util_bias_trylock(util_spinlock *l)
{
    if (util_bias_begin()) {
        /* acquire: B7 */
        if (atomic_load_explicit(&l->locked, memory_order_acquire) == 0) {
            atomic_store_explicit(&l->locked, UTIL_SPIN_PLAIN, memory_order_relaxed);
            return true;
        }
        util_bias_end();
        return false; /* we hold it ourselves (B3) */
    }
    return util_spin_trylock(l);
}

static inline void util_bias_lock(util_spinlock *l)
{
    if (util_bias_begin()) {
        /* acquire: B7 */
        if (util_likely(atomic_load_explicit(&l->locked, memory_order_acquire) == 0)) {
            atomic_store_explicit(&l->locked, UTIL_SPIN_PLAIN, memory_order_relaxed);
            return;
        }
        /* held by ourselves: a real lock would spin forever too */
        util_bias_end();
    }
    util_spin_lock(l);
}

static inline void util_bias_unlock(util_spinlock *l)
{
    /* relaxed: a lock we hold; only we change it */
    if (atomic_load_explicit(&l->locked, memory_order_relaxed) == UTIL_SPIN_PLAIN) {
        /* release: B5 (a plain store on x86, STLR on ARM) */
        atomic_store_explicit(&l->locked, 0, memory_order_release);
        util_bias_end();
        return;
    }
    util_spin_unlock(l);
}

#endif
