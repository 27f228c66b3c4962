/*
 * sched.c — workers, ULT slots, the worker loop, spawn and join. The hot
 * paths (signal, wait, yield and the ULT side of a switch) are in
 * sched_internal.h, whose top comment states the invariants of the
 * runnable set and of sleeping; the stacks themselves (layout, guard
 * pages, tripwires, the overflow report) in stack.c.
 *
 * Slots: Γ names a record (struct mpiv_ult) in the worker's record array,
 * bound to it for good. Freed slots go on the worker's LIFO free list
 * (under w->lock, shared with spawners on other pthreads). A record holds
 * no stack: a spawned ULT is a record and a runnable bit, nothing more.
 *
 * Invariants of the slot allocator (w->lock held for all of them):
 *   S1. hwm slots were ever used; slot[0..hwm) point to their records,
 *       recs[0..hwm).
 *   S2. free_list holds exactly the used slots that are joined; live =
 *       hwm - |free_list|.
 *   S3. nsum >= hwm / 4096 rounded up, stored before the first bit of a new
 *       summary word can be set (release; the worker loads it with acquire
 *       in a sweep, seq_cst before sleeping).
 *   S4. Nothing is written for the first time under w->lock: a page fault
 *       there (a whole 2 MiB page past the records' head, util_map_dense)
 *       would make every spawner and joiner of w spin for as long. Before
 *       taking the lock a spawner that finds hwm within a page of records
 *       of `touched` writes the next page's records and slot entries once,
 *       with atomic operations that change no value (touch_ahead), and
 *       moves `touched` past them; a CAS on `touched` elects one writer per
 *       range. Best effort: a spawner that overtakes the writer of the
 *       range it needs faults under the lock as before, and nothing but
 *       timing depends on this.
 *
 * Stacks: each worker carves stacks from its own chunks (stack.c) and
 * keeps the free ones in a LIFO cache, so the next ULT to start runs on
 * the stack the last one to end just left, still warm in cache and
 * already committed. Invariants (all on the worker's own pthread, R3):
 *   K1. A ULT owns a stack from its first run to its end, and only then:
 *       spawn gives it none (ctx == NULL marks "never ran"); its worker
 *       takes one just before switching to it the first time, and puts it
 *       back in the cache when it switches out finished, before the join
 *       signal (after which the record may be reused). A ULT that never
 *       blocks therefore holds a stack only while it runs: a worker whose
 *       ULTs all run to completion uses one stack, however many it runs.
 *   K2. Stacks, the cache and the chunks are touched only by their
 *       worker's pthread: no lock, no atomics (the two counters below are
 *       atomics only so that sched_stack_stats may read them).
 *   K3. A stack is in the cache, or owned by exactly one ULT, or not yet
 *       carved; stacks_made = carved, stacks_used = owned, and
 *       stacks_made - stacks_used are in the cache. Stacks are never
 *       unmapped before sched_finalize, so a stack keeps its guard page
 *       (or its tripwire) for its whole life, whichever ULT runs on it.
 *   K4. A suspended ULT's stack is neither in the cache nor given to
 *       another ULT: it keeps its frames across any number of waits and
 *       yields, until it ends.
 * A ULT joined from another worker or a pthread changes none of this: the
 * joiner touches only the record and the slot lock, never the stack.
 * If no stack can be mapped when a ULT first runs, it stays runnable and
 * is tried again in the next sweep (other ULTs ending may free stacks); a
 * warning says why once per worker.
 */
#include <errno.h>
#include <hwloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "sched/sched_internal.h"
#include "util/bias.h"

struct sched_global sched_g;
_Thread_local struct sched_worker *sched_tls_worker __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------------ */
/* slots                                                                    */
/* ------------------------------------------------------------------------ */

/* Writes to a record and to a slot entry that change nothing: the write
 * faults their page in (S4). They race with nothing: a record's hstate
 * is only ever accessed atomically, and a slot entry is NULL until
 * new_slot stores it (the CAS fails then, writing nothing). */
static inline void touch_rec(struct mpiv_ult *u)
{
    atomic_fetch_or_explicit(&u->hstate, 0, memory_order_relaxed);
}

static inline void touch_slot(_Atomic(struct mpiv_ult *) *s)
{
    struct mpiv_ult *none = NULL;
    atomic_compare_exchange_strong_explicit(s, &none, NULL, memory_order_relaxed,
                                            memory_order_relaxed);
}

/* S4: writes, once, the records and slot entries up to the end of the
 * page past the one the next new slot takes, if nobody has yet. Without
 * w->lock. */
static void touch_ahead(struct sched_worker *w)
{
    /* relaxed: hints; the CAS below elects the writer, and a stale value
     * only moves the writes by a page */
    uint32_t h = atomic_load_explicit(&w->hwm, memory_order_relaxed);
    uint32_t t = atomic_load_explicit(&w->touched, memory_order_relaxed);
    uint32_t per = sched_g.recs_per_page;
    if (h + per <= t || t >= sched_g.max_ults)
        return;
    uint32_t to = (h / per + 2) * per;
    if (to > sched_g.max_ults)
        to = sched_g.max_ults;
    if (!atomic_compare_exchange_strong_explicit(&w->touched, &t, to, memory_order_relaxed,
                                                 memory_order_relaxed))
        return; /* another spawner writes them */
    /* a page at a time, and the range's last entries, whose page the
     * steps may miss (slot entries are smaller: t need not start one) */
    uint32_t per_slot = (uint32_t)(sched_g.page / sizeof *w->slot);
    for (uint32_t i = t; i < to; i += per)
        touch_rec(&w->recs[i]);
    for (uint32_t i = t; i < to; i += per_slot)
        touch_slot(&w->slot[i]);
    touch_rec(&w->recs[to - 1]);
    touch_slot(&w->slot[to - 1]);
}

/* A never-used slot and its record. w->lock held, w->hwm < max_ults. */
static struct mpiv_ult *new_slot(struct sched_worker *w)
{
    /* relaxed: only lock holders write hwm (S1) */
    uint32_t h = atomic_load_explicit(&w->hwm, memory_order_relaxed);
    struct mpiv_ult *u = &w->recs[h];
    u->w = w;
    u->id = h;
    /* release: a joiner that looks up a handle with acquire sees the
     * record's fields (w, id) */
    atomic_store_explicit(&w->slot[u->id], u, memory_order_release);
    uint32_t need = u->id / 4096 + 1;
    /* relaxed load: only this lock holder writes nsum. The store is at
     * least release (a sweep that sees the new count sees slot[], S3) and
     * seq_cst for the sleeping protocol (a sleeping worker's seq_cst load
     * of nsum is ordered against our later seq_cst summary bit-set). */
    if (atomic_load_explicit(&w->nsum, memory_order_relaxed) < need)
        atomic_store_explicit(&w->nsum, need, memory_order_seq_cst);
    atomic_store_explicit(&w->hwm, h + 1, memory_order_relaxed);
    return u;
}

/* A slot for a new ULT on w, counted live; NULL with the error detail set
 * and its code in *err. No system call and no stack: a record only (K1). */
static struct mpiv_ult *take_slot(struct sched_worker *w, int *err)
{
    struct mpiv_ult *u = NULL;
    bool closed = false, full = false;
    touch_ahead(w);
    util_spin_lock(&w->lock);
    /* relaxed: sched_close stored it before taking this lock to count
     * live; the lock orders the two (see sched_close) */
    if (atomic_load_explicit(&sched_g.closing, memory_order_relaxed))
        closed = true;
    else if ((u = w->free_list) != NULL)
        w->free_list = u->link.next_free;
    else if (atomic_load_explicit(&w->hwm, memory_order_relaxed) < sched_g.max_ults)
        u = new_slot(w);
    else
        full = true;
    if (u) /* relaxed: the lock orders it; peeks need no order */
        atomic_fetch_add_explicit(&w->live, 1, memory_order_relaxed);
    util_spin_unlock(&w->lock);
    /* util_err after the unlock: at MPIV_LOG=debug it writes to stderr,
     * a system call that may block (spinlock.h) */
    if (closed)
        *err = util_err(MPIV_ERR_STATE, "mpiv_finalize is running: no new ULTs");
    else if (full)
        *err = util_err(MPIV_ERR_NO_RESOURCES,
                        "worker %d already holds MPIV_MAX_ULTS=%u ULTs: join some first", w->id,
                        sched_g.max_ults);
    return u;
}

/* ------------------------------------------------------------------------ */
/* stacks (K1-K4 above; w's own pthread only)                               */
/* ------------------------------------------------------------------------ */

/* A free stack for w: the most recently freed one, else a new one carved
 * from the current chunk (mapping the next chunk when it is used up, 64
 * stacks first, doubling up to SCHED_STACK_CHUNK). NULL if no chunk can
 * be mapped. */
static struct sched_stack *take_stack(struct sched_worker *w)
{
    struct sched_stack *s = w->stack_free;
    if (s) {
        w->stack_free = s->next_free;
        return s;
    }
    if (w->chunk_left == 0) {
        uint32_t n = w->chunk_next_n ? w->chunk_next_n : SCHED_STACK_CHUNK_MIN;
        struct sched_chunk *c = sched_chunk_make(n);
        if (!c)
            return NULL;
        c->next = w->chunks;
        w->chunks = c;
        w->cur = c;
        w->chunk_left = n;
        w->chunk_next_n = n * 2 < SCHED_STACK_CHUNK ? n * 2 : SCHED_STACK_CHUNK;
    }
    uint32_t ready = w->cur->ready;
    s = sched_stack_at(w->cur, w->cur->n - w->chunk_left);
    w->chunk_left--;
    worker_count(&w->stacks_made, 1);
    worker_count(&w->stacks_ready, w->cur->ready - ready);
    return s;
}

static void ult_entry(transfer_t t);

/* u's first run is about to happen: give it a stack and a context (K1).
 * false if no stack could be had (u stays as it is). */
static bool start_ult(struct sched_worker *w, struct mpiv_ult *u)
{
    struct sched_stack *s = take_stack(w);
    if (!s) {
        if (!w->stack_warned) {
            w->stack_warned = true;
            util_log_warn("worker %d cannot map ULT stacks (%s): its new ULTs wait until "
                          "others end", w->id, strerror(errno));
        }
        return false;
    }
    worker_count(&w->stacks_used, 1);
    u->stack = s;
#ifdef SCHED_ASAN
    /* frames abandoned by the stack's previous ULT may have left poisoned
     * redzones (a fresh stack has clean shadow: skip the 1/8-size memset) */
    if (s->used)
        __asan_unpoison_memory_region(s->lo, s->size);
    s->used = true;
    u->asan_fake = NULL;
#endif
#ifdef MPIV_TSAN
    if (!s->tsan_fiber)
        s->tsan_fiber = __tsan_create_fiber(0);
    u->tsan_fiber = s->tsan_fiber;
#endif
    u->ctx = make_fcontext((char *)s, s->size, ult_entry);
    return true;
}

/* u has ended: its stack goes back to w's cache (K1, K3). */
static void end_ult(struct sched_worker *w, struct mpiv_ult *u)
{
    struct sched_stack *s = u->stack;
    s->next_free = w->stack_free;
    w->stack_free = s;
    u->stack = NULL;
    worker_count(&w->stacks_used, -1);
}

uint64_t sched_blocked_waits(void)
{
    uint64_t n = 0;
    if (!sched_ready())
        return 0;
    for (int i = 0; i < sched_g.nworkers; i++)
        /* relaxed: a counter, nothing is read through it */
        n += atomic_load_explicit(&sched_g.workers[i]->blocked_waits, memory_order_relaxed);
    return n;
}

void sched_stack_stats(struct sched_stack_stats *st)
{
    if (!st)
        return;
    memset(st, 0, sizeof *st);
    if (!sched_ready())
        return;
    for (int i = 0; i < sched_g.nworkers; i++) {
        struct sched_worker *w = sched_g.workers[i];
        /* relaxed: counters, nothing is read through them */
        uint64_t made = atomic_load_explicit(&w->stacks_made, memory_order_relaxed);
        uint64_t used = atomic_load_explicit(&w->stacks_used, memory_order_relaxed);
        st->made += made;
        st->in_use += used;
        st->ready += atomic_load_explicit(&w->stacks_ready, memory_order_relaxed);
    }
}

/* ------------------------------------------------------------------------ */
/* running ULTs                                                             */
/* ------------------------------------------------------------------------ */

static void ult_entry(transfer_t t)
{
    struct sched_worker *w = sched_tls_worker;
    w->sched_ctx = t.fctx;
#ifdef SCHED_ASAN
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
    struct mpiv_ult *u = w->current;
    u->io.ret = u->io.start.fn(u->io.start.arg);
    /* never resumed: the scheduler, on its own stack, puts this stack back
     * in the cache and then signals the joiner, who may reuse the record */
#ifdef MPIV_TSAN
    /* The stack's fiber passes to the next ULT on it (making one costs a
     * megabyte of fresh memory). ult_entry never returns, so TSan would
     * keep its frame on the fiber and every later ULT would pile one more
     * on it, until TSan crashed (sched_stacks/one_at_a_time): pop it here;
     * sched_switch_out is inlined, so no frame is pushed after this. */
    __tsan_func_exit();
#endif
    sched_switch_out(w, u, SCHED_ULT_FINISHED);
    util_fatal("finished ULT %u resumed", u->id);
}

static inline void sched_run(struct sched_worker *w, struct mpiv_ult *u)
{
    if (__builtin_expect(u->ctx == NULL, 0) && !start_ult(w, u)) {
        sched_make_runnable(w, u); /* R5: tried again next sweep */
        return;
    }
    w->current = u;
#ifdef SCHED_ASAN
    __sanitizer_start_switch_fiber(&w->asan_fake, u->stack->lo, u->stack->size);
#endif
#ifdef MPIV_TSAN
    __tsan_switch_to_fiber(u->tsan_fiber, 0);
#endif
    transfer_t t = jump_fcontext(u->ctx, NULL);
#ifdef SCHED_ASAN
    __sanitizer_finish_switch_fiber(w->asan_fake, NULL, NULL);
#endif
    w->current = NULL;
    if (t.data != SCHED_ULT_FINISHED) {
        u->ctx = t.fctx;
        return;
    }
    end_ult(w, u);
    sched_signal_inline(&u->join); /* u may be recycled from here on */
}

/* The idle hook once, if one is set: what it returns (nonzero: it did
 * work), or 0. */
static inline int run_idle_hook(void)
{
    /* relaxed: the hook needs no ordering with our data */
    sched_idle_hook hook = atomic_load_explicit(&sched_g.idle_hook, memory_order_relaxed);
    return hook ? hook() : 0;
}

/* Whether the idle hook is all that brings work to blocked ULTs
 * (sched_set_idle_stay): no server thread. */
static inline bool hook_is_progress(void)
{
    /* relaxed: a setting, read again at each use */
    return atomic_load_explicit(&sched_g.idle_stay, memory_order_relaxed);
}

/* A sweep calls the idle hook after every SCHED_SWEEP_POLL ULTs it runs,
 * and again while the hook finds work, up to SCHED_SWEEP_POLLS calls. */
#define SCHED_SWEEP_POLL 64
#define SCHED_SWEEP_POLLS 8

/* Called after each ULT a sweep runs. Without a server thread
 * (idle_stay) the network is polled by the idle hook, between sweeps; but
 * one sweep can run thousands of ULTs (all those spawned meanwhile). If
 * each posts a receive before any message is taken off the wire, each
 * blocks and holds its stack while its message waits in the ring. Polling
 * within the sweep lets arrivals meet the ULTs that run after them, as
 * unexpected messages taken without blocking; the repeat while the hook
 * finds work keeps the polls' intake (a batch each) ahead of ULTs that
 * each take one message. The hook runs on the worker's own context
 * (current == NULL), as between sweeps: a ULT it makes runnable runs in
 * this sweep or the next (R5). */
static inline void sweep_tick(struct sched_worker *w)
{
    if (++w->runs_since_poll < SCHED_SWEEP_POLL)
        return;
    w->runs_since_poll = 0;
    if (!hook_is_progress())
        return;
    for (int k = 0; k < SCHED_SWEEP_POLLS && run_idle_hook(); k++)
        ;
}

static inline void run_word(struct sched_worker *w, uint32_t wi)
{
    /* acquire: pairs with the release bit-sets, so each ULT's record and
     * its signaller's writes are visible before it runs (R2) */
    uint64_t bits = atomic_exchange_explicit(&w->words[wi], 0, memory_order_acquire);
    while (bits) {
        uint32_t b = (uint32_t)__builtin_ctzll(bits);
        bits &= bits - 1;
        /* relaxed: the exchange above ordered the record (R2) */
        sched_run(w, atomic_load_explicit(&w->slot[wi * 64 + b], memory_order_relaxed));
        sweep_tick(w);
    }
}

/* One sweep over the runnable set (R4). Returns whether anything ran. */
static bool sched_sweep(struct sched_worker *w)
{
    /* acquire: pairs with new_slot's store, slot[] is then visible (S3) */
    uint32_t n = atomic_load_explicit(&w->nsum, memory_order_acquire);
    uint32_t start = w->scan_start < n ? w->scan_start : 0;
    unsigned rot = (unsigned)(w->sweeps++ & 63);
    /* R5: the ULTs made runnable locally since the last sweep; the ones
     * queued now go on a fresh queue, for the next sweep. `next` is read
     * before running y: y may be queued again (resetting its link). */
    struct mpiv_ult *y = w->rq_head;
    bool ran = y != NULL;
    w->rq_head = w->rq_tail = NULL;
    while (y) {
        struct mpiv_ult *next = y->link.next_ready;
        sched_run(w, y);
        sweep_tick(w);
        y = next;
    }
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = start + k < n ? start + k : start + k - n;
        /* relaxed: a peek to avoid writing a clean line; the exchange
         * below is what orders */
        if (!atomic_load_explicit(&w->summary[i], memory_order_relaxed))
            continue;
        /* acquire: as in run_word */
        uint64_t s = atomic_exchange_explicit(&w->summary[i], 0, memory_order_acquire);
        uint64_t hi = s & (~UINT64_C(0) << rot), lo = s & ~(~UINT64_C(0) << rot);
        for (uint64_t m = hi; m; m &= m - 1)
            run_word(w, i * 64 + (uint32_t)__builtin_ctzll(m));
        for (uint64_t m = lo; m; m &= m - 1)
            run_word(w, i * 64 + (uint32_t)__builtin_ctzll(m));
        ran |= s != 0;
    }
    w->scan_start = start + 1 < n ? start + 1 : 0;
    return ran;
}

static bool any_runnable(struct sched_worker *w, memory_order mo)
{
    if (w->rq_head)
        return true;
    uint32_t n = atomic_load_explicit(&w->nsum, mo);
    for (uint32_t i = 0; i < n; i++)
        if (atomic_load_explicit(&w->summary[i], mo))
            return true;
    return false;
}

/* Whether w has ULTs spawned and not yet joined. A peek: a spawn usually
 * makes its ULT runnable too, which the idle loop sees by itself; one
 * started on an event (sched_ult_start_on) is live but not runnable, which
 * the idle loop checks at each turn, and the sleep check again (seq_cst);
 * a stale true after the last join only keeps w polling for one more turn
 * of its idle spell. */
static bool has_live(struct sched_worker *w)
{
    /* relaxed: see above */
    return atomic_load_explicit(&w->live, memory_order_relaxed) > 0;
}

/* Whether w polls for pthreads parked on the network (sched_net_waiter_
 * begin): worker 0 does while any is. A peek, as has_live; the sleep check
 * loads it again, seq_cst. Invariant:
 *   N1. While a pthread is between sched_net_waiter_begin and _end, worker
 *       0 does not sleep in the kernel: begin counts it (seq_cst) and then
 *       wakes worker 0 if it sleeps, and worker 0 stores sleeping (seq_cst)
 *       and then loads the count, so either it sees the pthread counted
 *       and keeps polling, or begin sees it asleep and wakes it. So with
 *       idle_stay a parked pthread is always polled for. */
static bool serves_net_waiters(struct sched_worker *w, memory_order mo)
{
    return w == sched_g.workers[0] && atomic_load_explicit(&sched_g.net_waiters, mo) > 0;
}

static void worker_loop(struct sched_worker *w)
{
    for (;;) {
        if (sched_sweep(w)) {
            /* With sched_set_idle_stay the hook may be the only thing
             * that wakes blocked ULTs; ULTs that only yield (polling a
             * flag, mpiv_test in a loop) keep this worker from idling,
             * so it is called between sweeps too. */
            if (hook_is_progress())
                run_idle_hook();
            continue;
        }
        /* idle: spin, then yield the core (util_idle), then sleep on the
         * futex; or, while the hook is all that can wake our ULTs (we have
         * live ULTs and no server thread runs), nap between calls of the
         * hook instead */
        struct util_idle idle;
        util_idle_reset(&idle);
        int stay = -1; /* not asked yet this spell */
        bool found = false;
        /* Without a server thread (idle_stay) the network is polled by
         * whoever waits on it: a worker with no ULT has nobody to poll
         * for, and keeps out of the network, so that a program that
         * communicates from one pthread stays the only thread in it (the
         * one-thread fast path, util/bias.h). */
        bool poll = !hook_is_progress() || has_live(w) ||
                    serves_net_waiters(w, memory_order_relaxed);
        for (;;) {
            /* relaxed: a peek; the sweep's exchanges order */
            if (any_runnable(w, memory_order_relaxed)) {
                found = true;
                break;
            }
            /* relaxed: finalize wakes us again after setting stop */
            if (atomic_load_explicit(&w->stop, memory_order_relaxed))
                return;
            /* Asked at each turn: a ULT counted live during the spell
             * without being made runnable (sched_ult_start_on: it waits
             * before it ever ran) needs the network polled for it from
             * now on; and once the last ULT is joined nobody here waits
             * on the network any more (whether to stay up is asked
             * again too). */
            bool p = !hook_is_progress() || has_live(w) ||
                     serves_net_waiters(w, memory_order_relaxed);
            if (p != poll) {
                poll = p;
                stay = -1;
            }
            /* A worker left without ULTs keeps out of the network, and
             * the thread that communicates now (main's, after the join)
             * takes the one-thread fast path over instead of revoking it
             * (util/bias.h, B8; nothing is held between sweeps). */
            if (!poll)
                util_bias_park();
            if (poll && run_idle_hook()) {
                util_idle_reset(&idle); /* work came: stay responsive */
                continue;
            }
            if (util_idle_step(&idle) != UTIL_IDLE_LONG)
                continue;
            if (stay < 0) /* from this turn's answer, as the park above */
                stay = hook_is_progress() && poll;
            if (!stay)
                break;
            util_idle_nap(&idle);
        }
        if (found)
            continue;
        /* seq_cst: the Dekker pair with remote signallers (header top),
         * with sched_ult_start_on for a ULT counted live after this
         * spell decided not to poll, and with sched_net_waiter_begin: it
         * must not sleep while the hook is all that can wake that ULT or
         * that pthread */
        atomic_store_explicit(&w->sleeping, 1, memory_order_seq_cst);
        if (any_runnable(w, memory_order_seq_cst) ||
            atomic_load_explicit(&w->stop, memory_order_seq_cst) ||
            (hook_is_progress() && (atomic_load_explicit(&w->live, memory_order_seq_cst) > 0 ||
                                    serves_net_waiters(w, memory_order_seq_cst)))) {
            /* relaxed: nobody waits for this store */
            atomic_store_explicit(&w->sleeping, 0, memory_order_relaxed);
            continue;
        }
        /* No live ULT now (the check above), whatever this spell saw:
         * never sleep holding the fast path (util/bias.h, B8) */
        util_bias_park();
        /* relaxed: the futex re-checks the value in the kernel, and the
         * sweep's exchanges order the data */
        while (atomic_load_explicit(&w->sleeping, memory_order_relaxed) == 1)
            sched_futex(&w->sleeping, FUTEX_WAIT, 1);
    }
}

void sched_set_idle_stay(bool on)
{
    atomic_store_explicit(&sched_g.idle_stay, on, memory_order_relaxed);
}

bool sched_net_waiter_begin(void)
{
    if (!sched_ready())
        return false;
    /* seq_cst: the Dekker pair with worker 0's sleeping store and this
     * count's load (worker_loop): either it sees us counted or we see it
     * asleep and wake it */
    atomic_fetch_add_explicit(&sched_g.net_waiters, 1, memory_order_seq_cst);
    sched_wake_sleeper(sched_g.workers[0]);
    return true;
}

void sched_net_waiter_end(void)
{
    /* relaxed: only steers whether worker 0 keeps polling; a stale count
     * keeps it up one more turn */
    atomic_fetch_sub_explicit(&sched_g.net_waiters, 1, memory_order_relaxed);
}

bool sched_wait_pthread_for(sched_sync *s, uint64_t ns, bool spin)
{
    uint64_t end = util_now_ns() + ns;
    struct sched_pwaiter p;
    /* a short wait is caught without the kernel, as sched_wait's */
    if (!sched_pwaiter_register(s, &p) || (spin && sched_pwaiter_spin(&p)) ||
        !sched_pwaiter_arm(&p))
        return true;
    uintptr_t me = (uintptr_t)&p | SYNC_PTHREAD;
    for (;;) {
        /* acquire: pairs with the signaller's release exchange */
        if (atomic_load_explicit(&p.flag, memory_order_acquire) != 2)
            return true;
        uint64_t now = util_now_ns();
        if (now >= end)
            break;
        struct timespec ts = {(time_t)((end - now) / 1000000000u), (long)((end - now) % 1000000000u)};
        syscall(SYS_futex, (int *)&p.flag, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, 2, &ts, NULL, 0);
    }
    /* Time is up. Take p back from s, unless a signaller took it first
     * (its CAS set state to 0): it then writes the flag, and p must live
     * until it has. acq_rel: pairs with the registration
     * (sched_pwaiter_register). */
    if (atomic_compare_exchange_strong_explicit(&s->state, &me, 0, memory_order_acq_rel,
                                                memory_order_acquire))
        return false;
    /* acquire: as above, once the signaller's exchange wrote 1 (it saw 2,
     * so it wakes us) */
    while (atomic_load_explicit(&p.flag, memory_order_acquire) == 2)
        sched_futex(&p.flag, FUTEX_WAIT, 2);
    return true;
}

void sched_set_idle_hook(sched_idle_hook fn)
{
    atomic_store_explicit(&sched_g.idle_hook, fn, memory_order_relaxed);
}

static void *worker_main(void *arg)
{
    struct sched_worker *w = arg;
    sched_tls_worker = w;
    stack_t ss = {.ss_sp = w->altstack, .ss_size = 64 << 10, .ss_flags = 0};
    if (w->altstack)
        sigaltstack(&ss, NULL);
    pthread_attr_t a;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        void *lo;
        size_t sz;
        pthread_attr_getstack(&a, &lo, &sz);
        w->sched_stack_lo = lo;
        w->sched_stack_size = sz;
        pthread_attr_destroy(&a);
    }
#ifdef MPIV_TSAN
    w->tsan_fiber = __tsan_get_current_fiber();
#endif
    worker_loop(w);
    if (w->altstack) {
        ss.ss_flags = SS_DISABLE;
        sigaltstack(&ss, NULL);
    }
    sched_tls_worker = NULL;
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* start and stop                                                           */
/* ------------------------------------------------------------------------ */

static void free_worker(struct sched_worker *w)
{
    if (!w)
        return;
#ifdef MPIV_TSAN
    /* every stack is in the cache now (no ULT is live, K3) */
    for (struct sched_stack *s = w->stack_free; s; s = s->next_free)
        if (s->tsan_fiber)
            __tsan_destroy_fiber(s->tsan_fiber);
#endif
    for (struct sched_chunk *c = w->chunks, *n; c; c = n) {
        n = c->next;
        sched_chunk_free(c);
    }
    if (w->words)
        munmap((void *)w->words, sched_g.nwords * sizeof(uint64_t));
    if (w->summary)
        munmap((void *)w->summary, sched_g.nsumwords * sizeof(uint64_t));
    if (w->slot)
        util_unmap_dense((void *)w->slot, sched_g.max_ults * sizeof(void *));
    if (w->recs)
        util_unmap_dense(w->recs, sched_g.max_ults * sizeof(struct mpiv_ult));
    if (w->altstack)
        munmap(w->altstack, 64 << 10);
    free(w);
}

static void free_all(void)
{
    if (sched_g.workers)
        for (int i = 0; i < sched_g.nworkers; i++)
            free_worker(sched_g.workers[i]);
    free(sched_g.workers);
    free(sched_g.cores);
    sched_stack_release();
    sched_g.workers = NULL;
    sched_g.cores = NULL;
}

/* How many of the host's cores are this rank's own: 0 when local ranks
 * outnumber the cores. */
static int rank_share(const struct util_config *cfg, int ncores)
{
    return ncores / (cfg->local_ranks > 0 ? cfg->local_ranks : 1);
}

/* Which hwloc logical core worker i of this rank runs on: this rank's
 * share of the cores, in order, wrapping when workers outnumber it. */
static void plan_cores(const struct util_config *cfg, int ncores)
{
    int share = rank_share(cfg, ncores);
    for (int i = 0; i < sched_g.nworkers; i++) {
        if (share >= 1)
            sched_g.cores[i] = cfg->local_rank * share + i % share;
        else
            sched_g.cores[i] = (cfg->local_rank * sched_g.nworkers + i) % ncores;
    }
}

/* With MPIV_BIND=core, the thread that starts the scheduler (the
 * program's main thread, in mpiv_init) is bound to this rank's share of
 * the cores as well, the way an MPI launcher's --bind-to core binds the
 * whole process: the threads the program creates afterwards inherit it.
 * Why: a rank's own pthreads otherwise float over every core and
 * time-slice with the other ranks' threads there, and a stream between
 * pthreads of two ranks then runs at whatever the scheduler's placement
 * gives it (docs/perf/pt2pt.md, "A rank's own threads bound to its
 * cores", has the numbers). Only a thread that nobody has bound already
 * (its mask is every core the process may use): a launcher's or the
 * user's binding stays as it was. MPIV_BIND=workers leaves it unbound,
 * for programs whose ranks take turns idling: an idle rank's core can
 * then run another rank's main thread (docs/perf/sched.md). */
static void bind_caller(const struct util_config *cfg, hwloc_topology_t topo, int ncores)
{
    hwloc_bitmap_t want = hwloc_bitmap_alloc(), now = hwloc_bitmap_alloc();
    if (!want || !now)
        goto out;
    int share = rank_share(cfg, ncores);
    for (int i = 0; i < (share >= 1 ? share : sched_g.nworkers); i++) {
        int c = share >= 1 ? (int)cfg->local_rank * share + i : sched_g.cores[i];
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)c);
        if (core)
            hwloc_bitmap_or(want, want, core->cpuset);
    }
    if (hwloc_bitmap_iszero(want) || hwloc_get_cpubind(topo, now, HWLOC_CPUBIND_THREAD) != 0 ||
        !hwloc_bitmap_isincluded(hwloc_topology_get_allowed_cpuset(topo), now))
        goto out;
    if (hwloc_set_cpubind(topo, want, HWLOC_CPUBIND_THREAD) != 0)
        util_log_warn("cannot bind the main thread to this rank's cores (MPIV_BIND=core)");
out:
    if (want)
        hwloc_bitmap_free(want);
    if (now)
        hwloc_bitmap_free(now);
}

int sched_init(const struct util_config *cfg)
{
    if (!cfg)
        return util_err(MPIV_ERR_ARG, "sched_init: cfg is NULL");
    if (sched_ready())
        return util_err(MPIV_ERR_STATE, "the scheduler is already running");
    if (cfg->workers < 1 || cfg->workers > 4096 || cfg->max_ults < 64 ||
        cfg->max_ults > (1 << 24) || cfg->stack_size < (16 << 10))
        return util_err(MPIV_ERR_CONFIG, "scheduler: workers=%lld max_ults=%lld stack=%lld out of range",
                        (long long)cfg->workers, (long long)cfg->max_ults,
                        (long long)cfg->stack_size);
    long page = sysconf(_SC_PAGESIZE);
    /* relaxed: single-threaded here, published by the ready store below */
    atomic_store_explicit(&sched_g.closing, 0, memory_order_relaxed);
    atomic_store_explicit(&sched_g.net_waiters, 0, memory_order_relaxed);
    sched_g.page = page > 0 ? (size_t)page : 4096;
    sched_g.nworkers = (int)cfg->workers;
    sched_g.max_ults = (uint32_t)cfg->max_ults;
    sched_g.recs_per_page = sched_g.page / sizeof(struct mpiv_ult) > 1
                                ? (uint32_t)(sched_g.page / sizeof(struct mpiv_ult))
                                : 1;
    sched_g.nwords = (sched_g.max_ults + 63) / 64;
    sched_g.nsumwords = (sched_g.nwords + 63) / 64;
    sched_g.stack_size = ((size_t)cfg->stack_size + sched_g.page - 1) / sched_g.page * sched_g.page;
    sched_stack_probe();
    sched_g.workers = calloc((size_t)sched_g.nworkers, sizeof *sched_g.workers);
    sched_g.cores = calloc((size_t)sched_g.nworkers, sizeof *sched_g.cores);
    if (!sched_g.workers || !sched_g.cores)
        goto nomem;
    for (int i = 0; i < sched_g.nworkers; i++) {
        struct sched_worker *w = aligned_alloc(UTIL_CACHELINE, sizeof *w);
        if (!w)
            goto nomem;
        memset(w, 0, sizeof *w);
        sched_g.workers[i] = w;
        w->id = i;
        util_spin_init(&w->lock);
        w->words = sched_map_zeroed(sched_g.nwords * sizeof(uint64_t));
        w->summary = sched_map_zeroed(sched_g.nsumwords * sizeof(uint64_t));
        w->slot = util_map_dense(sched_g.max_ults * sizeof(void *), UTIL_HUGE_PAGE);
        w->recs = util_map_dense(sched_g.max_ults * sizeof(struct mpiv_ult), UTIL_HUGE_PAGE);
        w->altstack = sched_map_zeroed(64 << 10);
        if (!w->words || !w->summary || !w->slot || !w->recs || !w->altstack)
            goto nomem;
    }

    hwloc_topology_t topo = NULL;
    int ncores = 0;
    if (hwloc_topology_init(&topo) == 0 && hwloc_topology_load(topo) == 0)
        ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    if (ncores <= 0)
        ncores = cfg->ncores > 0 ? cfg->ncores : 1;
    plan_cores(cfg, ncores);

    sched_stack_segv_install();

    int started = 0;
    for (; started < sched_g.nworkers; started++) {
        struct sched_worker *w = sched_g.workers[started];
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
            break;
        w->core = -1;
        if (cfg->bind != UTIL_BIND_NONE && topo) {
            hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE,
                                                     (unsigned)sched_g.cores[started]);
            if (core && hwloc_set_thread_cpubind(topo, w->thread, core->cpuset, 0) == 0)
                w->core = sched_g.cores[started];
            else
                util_log_warn("cannot bind worker %d to core %d", started,
                              sched_g.cores[started]);
        }
    }
    if (cfg->bind == UTIL_BIND_CORE && topo && started == sched_g.nworkers)
        bind_caller(cfg, topo, ncores);
    if (topo)
        hwloc_topology_destroy(topo);
    if (cfg->bind == UTIL_BIND_NONE)
        for (int i = 0; i < sched_g.nworkers; i++)
            sched_g.cores[i] = -1;
    if (started < sched_g.nworkers) {
        for (int i = 0; i < started; i++) {
            struct sched_worker *w = sched_g.workers[i];
            /* as in sched_finalize */
            atomic_store_explicit(&w->stop, 1, memory_order_seq_cst);
            atomic_store_explicit(&w->sleeping, 0, memory_order_seq_cst);
            sched_futex(&w->sleeping, FUTEX_WAKE, 1);
            pthread_join(w->thread, NULL);
        }
        free_all();
        return util_err(MPIV_ERR_NO_RESOURCES, "cannot start worker %d: out of threads", started);
    }
    /* release: a thread that sees ready sees the tables above */
    atomic_store_explicit(&sched_g.ready, 1, memory_order_release);
    return MPIV_SUCCESS;

nomem:
    free_all();
    return util_err(MPIV_ERR_NO_RESOURCES, "cannot allocate the scheduler's tables");
}

uint64_t sched_close(void)
{
    if (!sched_ready())
        return 0;
    /* relaxed: each spawner reads it under a worker's lock, which we take
     * below after this store; a spawner that took the lock before us has
     * counted its ULT live by the time we read live, one after us sees
     * closing set (lock release/acquire). */
    atomic_store_explicit(&sched_g.closing, 1, memory_order_relaxed);
    uint64_t live = 0;
    for (int i = 0; i < sched_g.nworkers; i++) {
        struct sched_worker *w = sched_g.workers[i];
        util_spin_lock(&w->lock);
        live += atomic_load_explicit(&w->live, memory_order_relaxed);
        util_spin_unlock(&w->lock);
    }
    if (live) /* relaxed: spawns may come again; nothing else changed */
        atomic_store_explicit(&sched_g.closing, 0, memory_order_relaxed);
    return live;
}

int sched_finalize(void)
{
    if (!sched_ready())
        return util_err(MPIV_ERR_STATE, "the scheduler is not running");
    if (sched_self())
        return util_err(MPIV_ERR_STATE, "sched_finalize called from a ULT");
    for (int i = 0; i < sched_g.nworkers; i++) {
        struct sched_worker *w = sched_g.workers[i];
        util_spin_lock(&w->lock);
        uint32_t live = atomic_load_explicit(&w->live, memory_order_relaxed);
        util_spin_unlock(&w->lock);
        if (live)
            return util_err(MPIV_ERR_STATE, "%u ULTs on worker %d are not joined yet", live, i);
    }
    /* release: pairs with sched_ready's acquire (nothing new to publish,
     * but calls racing with finalize then fail cleanly) */
    atomic_store_explicit(&sched_g.ready, 0, memory_order_release);
    for (int i = 0; i < sched_g.nworkers; i++) {
        struct sched_worker *w = sched_g.workers[i];
        /* seq_cst: the worker stores sleeping=1 then loads stop; we store
         * stop then clear sleeping, so it sees stop or is woken */
        atomic_store_explicit(&w->stop, 1, memory_order_seq_cst);
        atomic_store_explicit(&w->sleeping, 0, memory_order_seq_cst);
        sched_futex(&w->sleeping, FUTEX_WAKE, 1);
    }
    for (int i = 0; i < sched_g.nworkers; i++) {
        struct sched_worker *w = sched_g.workers[i];
        pthread_join(w->thread, NULL);
        /* relaxed: the worker has exited (joined) */
        util_log_info("worker %d: %u ULT slots used, %llu stacks made", i,
                      atomic_load_explicit(&w->hwm, memory_order_relaxed),
                      (unsigned long long)atomic_load_explicit(&w->stacks_made,
                                                               memory_order_relaxed));
    }
    free_all();
    sched_stack_segv_restore();
    return MPIV_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* sched.h                                                                  */
/* ------------------------------------------------------------------------ */

int sched_num_workers(void) { return sched_ready() ? sched_g.nworkers : 0; }

int sched_worker_id(void)
{
    struct sched_worker *w = sched_tls_worker;
    return w && w->current ? w->id : -1;
}

bool sched_in_ult(void) { return sched_self() != NULL; }

bool sched_ult_alone(void)
{
    struct sched_worker *w = sched_tls_worker;
    /* relaxed: a peek, asked again at each poll by its caller */
    return w && w->current && atomic_load_explicit(&w->live, memory_order_relaxed) == 1 &&
           !any_runnable(w, memory_order_relaxed);
}
void sched_wait(sched_sync *s) { sched_wait_inline(s); }
void sched_signal(sched_sync *s) { sched_signal_inline(s); }
void sched_yield_now(void) { sched_yield_inline(); }

const int *sched_worker_cores(int *n)
{
    if (n)
        *n = sched_ready() ? sched_g.nworkers : 0;
    return sched_g.cores;
}

/* ------------------------------------------------------------------------ */
/* public ULT API                                                           */
/* ------------------------------------------------------------------------ */

int mpiv_num_workers(void) { return sched_num_workers(); }
int mpiv_worker_id(void) { return sched_worker_id(); }
/* u's handle for its current generation (see sched_internal.h). */
static mpiv_ult_t ult_handle(const struct mpiv_ult *u, uint32_t gen)
{
    uintptr_t h = (uintptr_t)gen << (SCHED_H_SLOT_BITS + SCHED_H_WORKER_BITS) |
                  (uintptr_t)u->w->id << SCHED_H_SLOT_BITS | u->id;
    return (mpiv_ult_t)h;
}

mpiv_ult_t mpiv_ult_self(void)
{
    struct mpiv_ult *u = sched_self();
    /* relaxed: only the spawner wrote the generation, before u ran */
    return u ? ult_handle(u, atomic_load_explicit(&u->hstate, memory_order_relaxed) >> 1) : NULL;
}

int mpiv_ult_yield(void)
{
    if (!sched_ready())
        return util_err(MPIV_ERR_STATE, "mpiv_ult_yield before mpiv_init");
    sched_yield_inline();
    return MPIV_SUCCESS;
}

int mpiv_ult_spawn(mpiv_ult_fn fn, void *arg, int worker, mpiv_ult_t *ult)
{
    int err = MPIV_SUCCESS;
    struct mpiv_ult *u = sched_ult_new(fn, arg, worker, ult, &err, __func__);
    if (!u)
        return err;
    sched_make_runnable(u->w, u);
    return MPIV_SUCCESS;
}

void sched_ult_start(struct mpiv_ult *u) { sched_make_runnable(u->w, u); }

void sched_ult_start_on(struct mpiv_ult *u, sched_sync *s)
{
    uintptr_t old = 0;
    /* As a waiter's own registration (sched_wait_inline): release publishes
     * u to the signaller, acquire on failure takes a signal that came
     * first, with the signaller's writes. */
    if (atomic_compare_exchange_strong_explicit(&s->state, &old, (uintptr_t)u, memory_order_acq_rel,
                                                memory_order_acquire)) {
        /* u waits without having run. Without a server thread its worker
         * must poll the network for it (an idle worker with live ULTs
         * does), but one asleep since before u was counted live (in
         * sched_ult_new) learns of it only if woken. seq_cst fence: the
         * Dekker pair with the worker's sleeping store and live load
         * (worker_loop); either it sees u live or we see it asleep. */
        atomic_thread_fence(memory_order_seq_cst);
        sched_wake_sleeper(u->w);
        return;
    }
    /* Signalled already: u consumes it as its wait would (relaxed: only a
     * signal could race, and it sees 1 and returns), and runs now. */
    atomic_store_explicit(&s->state, 0, memory_order_relaxed);
    sched_make_runnable(u->w, u);
}

struct mpiv_ult *sched_ult_new(mpiv_ult_fn fn, void *arg, int worker, mpiv_ult_t *ult, int *errp,
                               const char *who)
{
    int err = MPIV_SUCCESS;
    if (!sched_ready())
        err = util_err(MPIV_ERR_STATE, "%s before mpiv_init", who);
    else if (!fn || !ult)
        err = util_err(MPIV_ERR_ARG, "%s: %s is NULL", who, fn ? "ult" : "fn");
    else if (worker < MPIV_WORKER_ANY || worker >= sched_g.nworkers)
        err = util_err(MPIV_ERR_ARG, "%s: worker %d is not in [0, %d) or MPIV_WORKER_ANY", who,
                       worker, sched_g.nworkers);
    if (err) {
        *errp = err;
        return NULL;
    }
    struct sched_worker *me = sched_tls_worker, *w;
    if (worker != MPIV_WORKER_ANY)
        w = sched_g.workers[worker];
    else if (me && me->current)
        w = me;
    else if (sched_g.nworkers == 1)
        w = sched_g.workers[0];
    else /* relaxed: only spreads the load, orders nothing */
        w = sched_g.workers[atomic_fetch_add_explicit(&sched_g.rr, 1, memory_order_relaxed) %
                            (unsigned)sched_g.nworkers];

    err = MPIV_ERR_INTERNAL;
    struct mpiv_ult *u = take_slot(w, &err);
    if (!u) {
        *errp = err; /* take_slot said why */
        return NULL;
    }

    u->io.start.fn = fn; /* io.ret is set when it ends, before anyone joins */
    u->io.start.arg = arg;
    /* The slot's next generation: no older handle of it names this ULT.
     * Relaxed: the last joiner's claim came before it put the slot on the
     * free list (w->lock orders it before our take_slot); a stale joiner's
     * CAS fails whichever value it reads; a joiner of the new handle got
     * it through something that orders. */
    uint32_t gen = atomic_load_explicit(&u->hstate, memory_order_relaxed) >> 1;
    gen = gen % SCHED_H_GEN_MAX + 1;
    atomic_store_explicit(&u->hstate, gen << 1, memory_order_relaxed);
    /* relaxed: the bit-set below publishes it with release */
    atomic_store_explicit(&u->join.state, 0, memory_order_relaxed);
    u->ctx = NULL; /* no stack until its first run (K1) */
    *ult = ult_handle(u, gen);
    return u;
}

/* The record that handle h names, if h is a handle this scheduler gave out
 * (any generation); NULL otherwise. Never dereferences h. */
static struct mpiv_ult *ult_lookup(mpiv_ult_t h)
{
    uintptr_t v = (uintptr_t)h;
    uint32_t id = (uint32_t)(v & ((UINT32_C(1) << SCHED_H_SLOT_BITS) - 1));
    uintptr_t wi = v >> SCHED_H_SLOT_BITS & ((UINT32_C(1) << SCHED_H_WORKER_BITS) - 1);
    if (v >> (SCHED_H_SLOT_BITS + SCHED_H_WORKER_BITS) == 0 || wi >= (uintptr_t)sched_g.nworkers ||
        id >= sched_g.max_ults)
        return NULL;
    /* acquire: pairs with new_slot's release, the record's fields are set */
    return atomic_load_explicit(&sched_g.workers[wi]->slot[id], memory_order_acquire);
}

int mpiv_ult_join(mpiv_ult_t h, void **retval)
{
    if (!sched_ready())
        return util_err(MPIV_ERR_STATE, "mpiv_ult_join before mpiv_init");
    if (!h)
        return util_err(MPIV_ERR_ARG, "mpiv_ult_join: ult is NULL");
    struct mpiv_ult *u = ult_lookup(h);
    if (!u)
        return util_err(MPIV_ERR_ARG, "mpiv_ult_join: %p is not a ULT handle", (void *)h);
    uint32_t gen = (uint32_t)((uintptr_t)h >> (SCHED_H_SLOT_BITS + SCHED_H_WORKER_BITS));
    uint32_t want = gen << 1;
    /* relaxed: our own generation, written before we ran (another
     * joiner may have claimed it meanwhile) */
    if (u == sched_self() && atomic_load_explicit(&u->hstate, memory_order_relaxed) >> 1 == gen)
        return util_err(MPIV_ERR_DEADLOCK, "a ULT cannot join itself");
    /* Take the handle: only one joiner per spawn gets past here. acquire
     * on success is not needed for the data (the join sync orders the
     * ULT's writes); relaxed on failure: only the value is reported. */
    uint32_t cur = want;
    if (!atomic_compare_exchange_strong_explicit(&u->hstate, &cur, want | SCHED_H_CLAIMED,
                                                 memory_order_relaxed, memory_order_relaxed))
        return util_err(MPIV_ERR_ARG,
                        cur >> 1 == gen
                            ? "mpiv_ult_join: ULT %u of worker %d is joined already, or being "
                              "joined by another caller (a handle is joined once)"
                            : "mpiv_ult_join: stale handle: ULT %u of worker %d was joined and "
                              "its slot reused since",
                        u->id, u->w->id);
    /* A pthread that blocks here stops communicating: the ULT it waits
     * for may be the one that communicates now, so it gets the one-thread
     * fast path instead of revoking it (util/bias.h, B8; nothing is held
     * here). */
    if (!sched_self() && !sched_sync_signalled(&u->join))
        util_bias_park();
    sched_wait_inline(&u->join);
    if (retval)
        *retval = u->io.ret;
    struct sched_worker *w = u->w;
    util_spin_lock(&w->lock);
    u->link.next_free = w->free_list;
    w->free_list = u;
    atomic_fetch_sub_explicit(&w->live, 1, memory_order_relaxed);
    util_spin_unlock(&w->lock);
    return MPIV_SUCCESS;
}
