/*
 * sched.h — the ULT scheduler's internal interface (see DESIGN.md,
 * "Scheduler"). The public ULT calls (mpiv_ult_*, mpiv_counter_*,
 * mpiv_mutex_*, mpiv_barrier_init/wait/destroy) are implemented in this
 * folder on top of it.
 *
 * The one primitive the layers above rely on is the sync object: a waiter
 * calls sched_wait(s) and returns once someone called sched_signal(s). A
 * signal that comes before the wait is remembered (not lost) and consumed by
 * the next wait (not counted twice). One waiter per sync object at a time.
 * The waiter may be a ULT (it switches to its worker's scheduler) or a plain
 * pthread (it spins briefly, then sleeps in the kernel). The signaller may be
 * any pthread: the server, a worker, a plain thread.
 *
 * After sched_signal(s) the waiter may return and free s at once: signal
 * touches s's memory only before the store that can release the waiter.
 */
#ifndef MPIV_SCHED_H
#define MPIV_SCHED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/util.h"

typedef struct sched_sync {
    /* 0: nothing; 1: signalled before any wait; otherwise the waiter's
     * encoded identity (the sched folder owns the encoding). */
    _Atomic uintptr_t state;
} sched_sync;

#define SCHED_SYNC_INIT {0}

static inline void sched_sync_init(sched_sync *s) { atomic_init(&s->state, 0); }

/* Signals s while nobody else can see it yet (an operation that completes
 * before the call that started it returns): a plain store, no locked
 * instruction, so the stores before it (a message into a ring) need not
 * drain first. Whoever later learns of s through the caller's own
 * publication sees it signalled. */
static inline void sched_sync_init_signalled(sched_sync *s) { atomic_init(&s->state, 1); }

/* Whether s is neither signalled nor waited on, as a peek (relaxed): for a
 * caller choosing between sched_signal_unwaited and sched_signal, which
 * both look again. */
static inline bool sched_sync_idle(sched_sync *s)
{
    return atomic_load_explicit(&s->state, memory_order_relaxed) == 0;
}

/* Signals s with a plain store if no waiter is registered on it, for a
 * caller that knows no waiter can register meanwhile (the one-thread fast
 * path's owner, util/bias.h); returns false, having done nothing, if one
 * is registered (the caller then calls sched_signal). Release: as
 * sched_signal's. */
static inline bool sched_signal_unwaited(sched_sync *s)
{
    /* relaxed: by the caller's guarantee only this thread changes s now */
    if (atomic_load_explicit(&s->state, memory_order_relaxed) != 0)
        return false;
    atomic_store_explicit(&s->state, 1, memory_order_release);
    return true;
}

/* Whether s was signalled and no wait consumed it yet (a poll: the next
 * sched_wait returns at once). Acquire: the signaller's writes before its
 * signal are visible to whoever sees true. */
static inline bool sched_sync_signalled(sched_sync *s)
{
    return atomic_load_explicit(&s->state, memory_order_acquire) == 1;
}

/* Consumes s if it is signalled and nobody waits on it, what a completed
 * operation leaves when no waiter came first: true, and s is as after a
 * sched_wait that returned at once. No locked instruction: the
 * signaller's last access to s was its store of 1, so nobody else writes
 * s (acquire: pairs with that store's release). False: nothing changed. */
static inline bool sched_sync_consume(sched_sync *s)
{
    if (atomic_load_explicit(&s->state, memory_order_acquire) != 1)
        return false;
    /* relaxed: see above */
    atomic_store_explicit(&s->state, 0, memory_order_relaxed);
    return true;
}

/* Starts cfg->workers worker pthreads, pinned per cfg->bind. */
int sched_init(const struct util_config *cfg);
/* Stops the workers. MPIV_ERR_STATE if ULTs are still alive. */
int sched_finalize(void);
/* How many ULTs are alive (spawned, not joined) on all workers. If none,
 * spawns are refused from now on (MPIV_ERR_STATE) until sched_finalize, so
 * that a sched_finalize after a step that must not be repeated (the
 * finalize barrier) cannot fail for live ULTs; if some, nothing changes,
 * except that a spawn racing with this call may have been refused. From a
 * pthread, not a ULT; 0 if the scheduler is not running. */
uint64_t sched_close(void);

int sched_num_workers(void);
/* The calling thread's worker index, or -1 for a thread that is not running
 * a ULT (main, the server, any other pthread). */
int sched_worker_id(void);
bool sched_in_ult(void);
/* From a ULT: whether it is the only ULT of its worker (spawned and not
 * joined) and nothing else is ready to run there: a relaxed peek, true
 * for a moment only (a spawn onto the worker may end it). Such a ULT may
 * poll for what it waits on instead of switching out, as a plain
 * pthread does. False from a pthread. */
bool sched_ult_alone(void);

void sched_wait(sched_sync *s);
void sched_signal(sched_sync *s);

/* mpiv_ult_spawn in two steps, for a ULT that must not run before an
 * event: sched_ult_new takes a slot and sets fn(arg) up with its handle in
 * *ult, not runnable yet (NULL with *err set on failure; `who` names the
 * public call in the message). Then sched_ult_start makes it runnable now,
 * or sched_ult_start_on once s is signalled, as if its first act were
 * sched_wait(s): it consumes the signal and, like any ULT that never ran,
 * holds no stack until then (sched.c, K1). A new ULT must be started:
 * only a ULT that ran can end and be released. s stays the caller's: it
 * must live until it is signalled, and nobody else may wait on it. */
struct mpiv_ult *sched_ult_new(mpiv_ult_fn fn, void *arg, int worker, mpiv_ult_t *ult, int *err,
                               const char *who);
void sched_ult_start(struct mpiv_ult *u);
void sched_ult_start_on(struct mpiv_ult *u, sched_sync *s);
/* From a ULT: let the worker's other runnable ULTs run. From a pthread:
 * sched_yield(). */
void sched_yield_now(void);

/* An idle worker calls fn() in its spinning phase, before it yields its
 * core or sleeps; fn returns nonzero if it did work (the worker then keeps
 * spinning instead of backing off). With sched_set_idle_stay a busy worker
 * also calls it between sweeps and every 64 ULTs it runs within one (again
 * while it did work, up to 8 times): a long sweep must not starve the
 * network. The layers above use it to let idle
 * workers drive network progress where cores are scarce; the scheduler
 * knows nothing of what fn does. NULL removes it. */
typedef int (*sched_idle_hook)(void);
void sched_set_idle_hook(sched_idle_hook fn);
/* With `on`, a worker that has ULTs alive (spawned, not joined) never
 * sleeps in the kernel when idle: it keeps calling the idle hook, yielding
 * its core between calls. For when the hook is the only thing that can
 * wake its ULTs (network progress without a server thread); a worker
 * without live ULTs still sleeps until a spawn wakes it. */
void sched_set_idle_stay(bool on);
/* Around a pthread's block on a sched_sync that only network progress
 * will signal, where no server thread polls (sched_set_idle_stay): while
 * any such pthread is blocked, worker 0 polls through the idle hook
 * between naps, as for live ULTs of its own, instead of sleeping in the
 * kernel; begin wakes it if it sleeps. begin returns false (and counts
 * nothing) before sched_init; each true begin is paired with one end.
 * (p2p.c parks the pthreads past the few that poll for themselves.) */
bool sched_net_waiter_begin(void);
void sched_net_waiter_end(void);
/* From a pthread: sched_wait(s), but for at most about ns nanoseconds;
 * with spin, first spinning or yielding as sched_wait does, else asleep
 * in the kernel from the start. True once s was signalled (consumed as by
 * sched_wait); false if the time passed first, leaving s as it was, with
 * no waiter registered. */
bool sched_wait_pthread_for(sched_sync *s, uint64_t ns, bool spin);

/* ULT stacks, summed over the workers: `made` carved ever (a worker
 * carves one only when its cache of free stacks is empty, so this is the
 * sum of each worker's peak of stacks in use), `in_use` owned by a ULT
 * now (running or blocked; made - in_use are cached for reuse). A ULT
 * owns a stack only from its first run to its end, so ULTs that end
 * without blocking need one stack per worker however many run. Read
 * without stopping the workers: each worker's figures are exact at some
 * recent moment. All zero if the scheduler is not running. */
struct sched_stack_stats {
    uint64_t made;
    uint64_t in_use;
    uint64_t ready; /* made or about to be: guards installed, top pages
                     * prefaulted, SCHED_STACK_BATCH at a time */
};
void sched_stack_stats(struct sched_stack_stats *st);

/* How many times a ULT's sched_wait switched out because what it waits
 * for had not happened yet, summed over the workers (each figure exact at
 * some recent moment). 0 if the scheduler is not running. */
uint64_t sched_blocked_waits(void);

/* Cores used by this process's workers, in order (for the server to avoid
 * them); sets *n. Valid after sched_init. */
const int *sched_worker_cores(int *n);

#endif
