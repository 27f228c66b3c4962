/*
 * sched_internal.h — the scheduler's data structures and its hot paths
 * (signal, wait, yield, the context switch), static inline so that the
 * layers above pay no call for them. The cold rest (start-up, slots,
 * spawn/join, the worker loop) is in sched.c; the stacks (layout, guard
 * pages, tripwires, the overflow report) in stack.c; the ULT sync objects
 * in sync.c.
 *
 * Per worker ω:
 *   words[]    one bit per ULT slot Γ: set = "Γ is runnable".
 *   summary[]  one bit per word of words[]: set = "that word may be non-zero".
 *   slot[]     Γ -> its ULT record (bound for good when Γ is first used).
 *
 * Invariants of the runnable set:
 *   R1. A ULT's bit is set only while it is suspended or about to suspend
 *       (spawn, or a signal to it as a registered waiter): never twice for
 *       one suspension, so the scheduler never resumes a running ULT.
 *   R2. Setting is word bit first, then summary bit. The scheduler clears a
 *       summary word first (exchange), then each word it names (exchange).
 *       A bit set between those two exchanges leaves the summary bit set
 *       for the next sweep; a summary bit whose word is already empty costs
 *       one spurious exchange. No bit is ever lost.
 *   R3. Only worker ω's own pthread resumes ω's ULTs: ULTs never migrate,
 *       so `current`, `sched_ctx` and the record's `ctx` are private to ω.
 *   R4. Every sweep runs each bit that was set when its word was exchanged,
 *       and a ULT that re-signals itself lands in the atomic word, to be run
 *       in the next sweep: a runnable ULT waits at most one sweep. The sweep
 *       also rotates its starting summary word and starting bit.
 *   R5. A ULT made runnable by its own worker's pthread (a yield, a spawn
 *       or a signal from a ULT of the same worker, a join signalled by the
 *       scheduler) skips the bit-vector: it goes on the worker's private
 *       FIFO (plain stores, no atomics), which each sweep detaches and runs
 *       first. A ULT is on that queue, or has its bit set, or is running,
 *       never two of these; a queued ULT runs in the next sweep, so R4
 *       holds. Only signals from other pthreads use the atomic bits.
 *
 * Sleeping (Dekker-style, all four operations seq_cst):
 *   worker: store sleeping=1; load nsum; load summary[0..nsum) ; sleep if 0
 *   remote signaller: RMW summary bit; load sleeping; wake if 1
 *   In the single total order either the worker's loads see the bit or the
 *   signaller's load sees sleeping=1. The signaller wakes with an exchange
 *   so that only one of several signallers pays the futex call.
 *
 * sched_sync.state: 0 nothing; 1 signalled, no waiter yet; a ULT record
 * address (64-byte aligned) for a waiting ULT; a pthread waiter record
 * address | SYNC_PTHREAD for a waiting pthread.
 */
#ifndef MPIV_SCHED_INTERNAL_H
#define MPIV_SCHED_INTERNAL_H

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sched/sched.h"
#include "util/atomic.h"
#include "util/spinlock.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SCHED_ASAN 1
#endif
#ifdef MPIV_TSAN
#include <sanitizer/tsan_interface.h>
/* the hook instrumented code calls on return (not in the header) */
void __tsan_func_exit(void);
#endif

/* Boost.Context's C ABI (libboost_context.a, fcontext). */
typedef void *fcontext_t;
typedef struct {
    fcontext_t fctx;
    void *data;
} transfer_t;
transfer_t jump_fcontext(fcontext_t const to, void *vp);
fcontext_t make_fcontext(void *sp, size_t size, void (*fn)(transfer_t));

/* Tuning. An idle worker spins for UTIL_IDLE_SPIN_NS (a signal is picked
 * up in well under a microsecond), then calls sched_yield() until
 * UTIL_IDLE_YIELD_NS (lets a server thread sharing the core run), then
 * sleeps on a futex until a remote signal wakes it (util.h, idle.c). */
/* A pthread waiter's spins before it sleeps in the kernel, where a server
 * thread runs (a core for every thread): the signaller runs on another
 * core, and a signal within about 100 us is taken without a futex. */
#define SCHED_PTHREAD_SPINS 4000
/* Without a server thread (sched_set_idle_stay: fewer cores than threads)
 * a spin holds a core that the worker which will signal may need: the
 * waiter yields its core this many times instead, then sleeps. */
#define SCHED_PTHREAD_YIELDS 100
/* Stacks mapped at once per worker: the first chunk holds
 * SCHED_STACK_CHUNK_MIN, each next one twice as many, up to
 * SCHED_STACK_CHUNK (IOV_MAX: one batched process_madvise per chunk). */
#define SCHED_STACK_CHUNK_MIN 64
#define SCHED_STACK_CHUNK 1024
/* Stacks of a chunk readied at once (guards installed, top pages
 * prefaulted: stack.c), as they are first taken. */
#define SCHED_STACK_BATCH 64
/* Bytes at the top of every stack region, above the ULT record, that hold
 * the tripwire of the stack above when that one has no guard page (see
 * the top of stack.c). A multiple of the cache line. */
#define SCHED_TRIPWIRE_BYTES 512

#define SYNC_SIGNALLED ((uintptr_t)1)
#define SYNC_PTHREAD ((uintptr_t)2)

/* Passed from a finished ULT to its scheduler in transfer_t.data. */
#define SCHED_ULT_FINISHED ((void *)1)

struct sched_worker;

/* A ULT handle (the public mpiv_ult_t) is not a pointer but a number that
 * names a record and one use of it:
 *   bits  0..23  Γ, the slot on its worker (MPIV_MAX_ULTS <= 2^24)
 *   bits 24..35  the worker (MPIV_WORKERS <= 4096)
 *   bits 36..63  the generation: the slot's spawn count, 1..2^28-1, never 0
 * so that a handle is never NULL, and a handle whose ULT was joined (a
 * second join) or whose slot has been reused (a stale handle) is told
 * apart from the live one and refused, and a made-up value is refused
 * without being dereferenced. The generation wraps after 2^28 - 1 spawns
 * on one slot: a stale handle kept that long would name the live ULT
 * again. */
#define SCHED_H_SLOT_BITS 24
#define SCHED_H_WORKER_BITS 12
#define SCHED_H_GEN_BITS 28
#define SCHED_H_GEN_MAX ((UINT32_C(1) << SCHED_H_GEN_BITS) - 1)
_Static_assert(SCHED_H_SLOT_BITS + SCHED_H_WORKER_BITS + SCHED_H_GEN_BITS <= 8 * sizeof(void *),
               "a ULT handle fits in a pointer");
/* u->hstate: the generation of u's current (or last) handle times 2, plus
 * SCHED_H_CLAIMED once a joiner has taken that handle. */
#define SCHED_H_CLAIMED UINT32_C(1)

/* A stack's descriptor, at the top of the stack itself (below the
 * tripwire bytes of the stack above, see stack.c): the ULT's first frame
 * starts right below it. Made and used only by its worker's pthread (R3),
 * like everything about stacks (K1-K4 in sched.c). */
struct sched_stack {
    _Alignas(UTIL_CACHELINE) struct sched_stack *next_free; /* w's cache of free stacks */
    char *lo;                  /* lowest usable byte; guard page below */
    size_t size;               /* usable bytes, up to this descriptor */
    const uint64_t *tripwire;  /* NULL if a guard page lies below lo */
#ifdef SCHED_ASAN
    bool used; /* ran a ULT before: may hold stale poison */
#endif
#ifdef MPIV_TSAN
    /* the TSan fiber of whichever ULT runs on this stack, made at the
     * stack's first use: creating one costs ~0.8 MB of memset, and ULTs
     * on one stack run one after another on one pthread, ordered by the
     * fiber switches anyway; kept until finalize (ult_entry leaves it
     * with no frames on it) */
    void *tsan_fiber;
#endif
};

/* One ULT record, in its worker's record array (slot Γ), apart from any
 * stack: a ULT owns a stack only from its first run to its end (K1).
 * One cache line (outside sanitizer builds): a million ULTs spawned
 * before any is joined fault in their records (the array past its first
 * 2 MiB in 2 MiB pages: util_map_dense), and the spawner writes and the
 * worker reads each one. Hence the unions, each of fields never live at once, and the
 * stack's bounds and tripwire read through `stack` rather than copied. */
struct mpiv_ult {
    _Alignas(UTIL_CACHELINE) fcontext_t ctx; /* where it is suspended (R3);
                                              * NULL: never ran, no stack */
    union {
        struct {
            mpiv_ult_fn fn; /* from the spawn to the first run */
            void *arg;
        } start;
        void *ret; /* from its end to its join */
    } io;
    struct sched_worker *w;
    union {
        struct mpiv_ult *next_free;  /* joined: free list of w, under w->lock */
        struct mpiv_ult *next_ready; /* live: w's private ready queue (R5) */
    } link;
    struct sched_stack *stack; /* its stack while it has one (K1) */
    uint32_t id;               /* Γ */
    /* generation * 2 | SCHED_H_CLAIMED, see above: set by the spawner
     * before the handle is returned, claimed by the one joiner (CAS) */
    _Atomic uint32_t hstate;
    sched_sync join;            /* signalled by the scheduler when done */
#ifdef SCHED_ASAN
    void *asan_fake;
#endif
#ifdef MPIV_TSAN
    void *tsan_fiber; /* = stack->tsan_fiber */
#endif
};
#if !defined(SCHED_ASAN) && !defined(MPIV_TSAN)
_Static_assert(sizeof(struct mpiv_ult) == UTIL_CACHELINE, "a ULT record is one cache line");
#endif

struct sched_worker {
    /* read by every signaller: */
    _Alignas(UTIL_CACHELINE) _Atomic uint64_t *words;
    _Atomic uint64_t *summary;
    /* written once per slot, under lock (release); read by the worker
     * (its own order comes from the bit exchanges) and by joiners
     * (acquire) looking up a handle */
    _Atomic(struct mpiv_ult *) *slot;
    _Atomic uint32_t nsum; /* summary words in use (grows with hwm) */
    int id;
    _Alignas(UTIL_CACHELINE) atomic_int sleeping; /* futex word, see top */
    atomic_int stop;
    /* the worker's own (R3): */
    _Alignas(UTIL_CACHELINE) struct mpiv_ult *current;
    struct mpiv_ult *rq_head, *rq_tail; /* made runnable locally, FIFO (R5) */
    fcontext_t sched_ctx;
    uint32_t scan_start;
    uint32_t runs_since_poll; /* ULTs run since the idle hook last ran */
    uint64_t sweeps;
    char *sched_stack_lo;
    size_t sched_stack_size;
#ifdef SCHED_ASAN
    void *asan_fake;
#endif
#ifdef MPIV_TSAN
    void *tsan_fiber;
#endif
    /* stacks (K1-K4 in sched.c): the worker's own pthread only (R3); the
     * counters are written by it alone and read by sched_stack_stats */
    struct sched_stack *stack_free; /* LIFO cache of free stacks */
    uint32_t chunk_left;            /* stacks of cur not carved yet */
    uint32_t chunk_next_n;          /* stacks in the next chunk to map */
    struct sched_chunk *chunks;     /* all of w's chunks (freed at finalize) */
    struct sched_chunk *cur;        /* the one being carved */
    _Atomic uint64_t stacks_made;   /* carved from chunks, ever */
    _Atomic uint64_t stacks_used;   /* owned by a ULT now */
    _Atomic uint64_t stacks_ready;  /* guarded and prefaulted (stack.c), ever */
    bool stack_warned;              /* "cannot map" logged */
    /* ULT waits that switched out (sched_blocked_waits): written by this
     * worker's pthread only */
    _Atomic uint64_t blocked_waits;
    /* slot allocation, shared with spawners on other threads: */
    _Alignas(UTIL_CACHELINE) util_spinlock lock;
    struct mpiv_ult *free_list;
    /* slots ever used: written under lock; read relaxed outside it by
     * touch_ahead (S4 in sched.c), which only needs a recent value */
    _Atomic uint32_t hwm;
    /* records and slot entries below this were written once (S4); only
     * grows, by the CAS of the spawner that writes them */
    _Atomic uint32_t touched;
    /* spawned and not yet joined: changed under lock; read under it, or
     * relaxed as a peek (sched_ult_alone, has_live) */
    _Atomic uint32_t live;
    struct mpiv_ult *recs; /* the records of slots 0..max_ults, zeroed */
    /* start-up */
    pthread_t thread;
    int core; /* hwloc logical core index, -1 if not bound */
    void *altstack;
};

struct sched_global {
    atomic_int ready; /* 1 between sched_init and sched_finalize */
    int nworkers;
    struct sched_worker **workers;
    int *cores;
    uint32_t max_ults;
    uint32_t recs_per_page; /* ULT records per page, at least 1 (S4) */
    uint32_t nwords, nsumwords;
    size_t stack_size; /* per ULT, guard page excluded */
    size_t page;
    atomic_int closing; /* set by sched_close: spawns are refused */
    /* Guard pages: decided once in sched_init (before the workers start,
     * read-only afterwards, so plain fields). */
    bool guard_install;    /* madvise(MADV_GUARD_INSTALL) works */
    bool pm_guard;         /* ... and process_madvise on ourselves does too */
    bool pm_populate;      /* process_madvise(MADV_POPULATE_WRITE) works */
    int pidfd;             /* pidfd of this process, -1 if none */
    int guard_budget;      /* mprotect guards allowed (fallback path) */
    uint64_t tripwire;     /* the tripwire pattern (random per sched_init) */
    atomic_int guard_vmas; /* mprotect guards made (fallback path) */
    /* Called by an idle worker while it spins, and (with idle_stay) between
     * sweeps and every SCHED_SWEEP_POLL ULTs within one (sched_set_idle_hook). Set
     * before the workers start or while they run: an atomic pointer, read
     * relaxed — a worker that sees it late only spins without it. */
    _Atomic(sched_idle_hook) idle_hook;
    atomic_bool idle_stay; /* sched_set_idle_stay */
    /* pthreads blocked between sched_net_waiter_begin and _end: worker 0
     * polls for them (worker_loop) */
    atomic_int net_waiters;
    /* MPIV_WORKER_ANY from a pthread: round robin. A line of its own: a
     * pthread spawning a burst writes it at every spawn, and every thread
     * reads the fields above (ready, workers) at every call. */
    _Alignas(UTIL_CACHELINE) atomic_uint rr;
};
extern struct sched_global sched_g;

/* The worker whose pthread this is, NULL elsewhere. initial-exec: one
 * %fs-relative load, no __tls_get_addr. */
extern _Thread_local struct sched_worker *sched_tls_worker
    __attribute__((tls_model("initial-exec")));

static inline struct mpiv_ult *sched_self(void)
{
    struct sched_worker *w = sched_tls_worker;
    return w ? w->current : NULL;
}

static inline long sched_futex(atomic_int *addr, int op, int val)
{
    return syscall(SYS_futex, (int *)addr, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

/* --- stacks (stack.c) ------------------------------------------------------ */

/* A mapping of n stacks, each with its guard page (see the top of
 * stack.c). Owned by one worker, freed at sched_finalize. */
struct sched_chunk {
    struct sched_chunk *next;
    void *base;
    size_t len;
    uint32_t n; /* stacks */
    uint32_t ready; /* stacks [0, ready) have their guards and top pages */
    uint32_t guard_vmas; /* its mprotect guards, given back when unmapped */
    uint64_t unguarded[SCHED_STACK_CHUNK / 64]; /* bit k: stack k has no guard */
};

/* Bytes from one stack's guard page to the next one's. */
static inline size_t sched_stack_stride(void) { return sched_g.page + sched_g.stack_size; }

/* Anonymous zeroed memory, committed lazily; NULL on failure. */
void *sched_map_zeroed(size_t len);
/* Decides how stacks get guards on this kernel and draws the tripwire
 * pattern. sched_init, before the workers start; sched_g.page and
 * sched_g.stack_size set. */
void sched_stack_probe(void);
/* Gives back what sched_stack_probe kept (the pidfd). */
void sched_stack_release(void);
/* Maps a chunk of n <= SCHED_STACK_CHUNK stacks, none readied yet
 * (sched_stack_at readies them in batches); NULL (errno set) if it cannot
 * be mapped. */
struct sched_chunk *sched_chunk_make(uint32_t n);
/* Unmaps c and gives back its mprotect guards. */
void sched_chunk_free(struct sched_chunk *c);
/* The descriptor at the top of stack k of c, with lo, size and tripwire
 * set (the tripwire armed if the stack has no guard). Readies the batch
 * of SCHED_STACK_BATCH stacks from k on first (guards, top pages: tens
 * of microseconds; call without locks held) if k is not ready yet;
 * callers take k in order. Touches the
 * descriptor's page and, for an unguarded stack, the top of the stack
 * below. */
struct sched_stack *sched_stack_at(struct sched_chunk *c, uint32_t k);
/* The SIGSEGV handler that reports ULT stack overflows; chains to the
 * previous handler for any other fault. Idempotent. */
void sched_stack_segv_install(void);
void sched_stack_segv_restore(void);

/* Only for a ULT whose stack has no guard page (u->tripwire set): aborts
 * with the overflow report if u's stack pointer is below its stack or its
 * tripwire was written. */
void sched_stack_check(struct sched_worker *w, struct mpiv_ult *u);

/* Tests only: the next sched_init behaves as on a kernel without
 * MADV_GUARD_INSTALL, with at most vma_budget mprotect guards (then
 * tripwires). A negative budget restores the default. Call before
 * sched_init, from one thread. */
void sched_test_force_guard_fallback(int vma_budget);

/* --- context switches ----------------------------------------------------- */

/* The switch itself, ULT -> its scheduler: the tripwire check, the
 * sanitizers' fiber switches, the jump; returns when the ULT is resumed.
 * `data` is NULL (suspend) or SCHED_ULT_FINISHED (never resumed). Always
 * inlined: a finishing ULT switches out from ult_entry after popping its
 * own frame under ThreadSanitizer, and must not enter an instrumented
 * function that never returns on the way (TSan would keep that frame on
 * the stack's fiber, which the next ULT on the stack inherits). */
static inline __attribute__((always_inline)) transfer_t
sched_switch_out(struct sched_worker *w, struct mpiv_ult *u, void *data)
{
    if (__builtin_expect(u->stack->tripwire != NULL, 0))
        sched_stack_check(w, u);
#ifdef SCHED_ASAN
    __sanitizer_start_switch_fiber(data ? NULL : &u->asan_fake, w->sched_stack_lo,
                                   w->sched_stack_size);
#endif
#ifdef MPIV_TSAN
    __tsan_switch_to_fiber(w->tsan_fiber, 0);
#endif
    return jump_fcontext(w->sched_ctx, data);
}

/* ULT -> its scheduler, to be resumed later (a wait or a yield). */
static inline void sched_to_scheduler(struct sched_worker *w, struct mpiv_ult *u, void *data)
{
    transfer_t t = sched_switch_out(w, u, data);
    /* resumed by our scheduler (same pthread, R3) */
#ifdef SCHED_ASAN
    __sanitizer_finish_switch_fiber(u->asan_fake, NULL, NULL);
#endif
    (void)u;
    w->sched_ctx = t.fctx;
}

/* --- the runnable set ----------------------------------------------------- */

/* Wakes w if it sleeps on its futex. The caller made what w must see
 * visible first, with a seq_cst operation or fence: the Dekker pair with
 * w's sleeping store (top). */
static inline void sched_wake_sleeper(struct sched_worker *w)
{
    if (atomic_load_explicit(&w->sleeping, memory_order_seq_cst) &&
        /* relaxed: only elects one waker; the futex call orders the rest */
        atomic_exchange_explicit(&w->sleeping, 0, memory_order_relaxed))
        sched_futex(&w->sleeping, FUTEX_WAKE, 1);
}

/* Marks u runnable on its worker w. From w's own pthread (R5): onto the
 * private FIFO. From any other pthread: the atomic bits, and a wake-up if
 * w sleeps. */
static inline void sched_make_runnable(struct sched_worker *w, struct mpiv_ult *u)
{
    if (sched_tls_worker == w) {
        u->link.next_ready = NULL;
        if (w->rq_tail)
            w->rq_tail->link.next_ready = u;
        else
            w->rq_head = u;
        w->rq_tail = u;
        return;
    }
    uint32_t id = u->id, wi = id >> 6;
    /* release: publishes the ULT record and whatever the signaller wrote
     * before, to the scheduler's acquire exchange of this word (R2). */
    atomic_fetch_or_explicit(&w->words[wi], UINT64_C(1) << (id & 63), memory_order_release);
    /* seq_cst: the Dekker pair with the worker's sleeping store (top). */
    atomic_fetch_or_explicit(&w->summary[wi >> 6], UINT64_C(1) << (wi & 63),
                             memory_order_seq_cst);
    sched_wake_sleeper(w);
}

/* Bumps a counter of a worker that only the worker's own pthread writes
 * (stacks made and in use, blocked waits): no RMW needed; relaxed, since
 * only the statistics (sched_stack_stats, sched_blocked_waits) read it. */
static inline void worker_count(_Atomic uint64_t *c, int64_t d)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + (uint64_t)d,
                          memory_order_relaxed);
}

/* --- wait / signal -------------------------------------------------------- */

struct sched_pwaiter {
    atomic_int flag; /* 0 spinning, 1 signalled, 2 asleep in the kernel */
};

static inline void sched_signal_inline(sched_sync *s)
{
    /* relaxed: a hint for the CAS below, which carries the ordering. */
    uintptr_t old = atomic_load_explicit(&s->state, memory_order_relaxed);
    for (;;) {
        if (old == SYNC_SIGNALLED)
            return; /* already pending: not counted twice */
        uintptr_t want = old == 0 ? SYNC_SIGNALLED : 0;
        /* acq_rel: release publishes our writes to a later waiter that
         * consumes the flag; acquire reads the waiter's record, which it
         * published with its own release CAS. */
        if (atomic_compare_exchange_weak_explicit(&s->state, &old, want, memory_order_acq_rel,
                                                  memory_order_relaxed))
            break;
    }
    if (old == 0)
        return;
    /* A waiter was registered and is still blocked: s is not touched again
     * below, so the waiter may free it as soon as it is released. */
    if (old & SYNC_PTHREAD) {
        struct sched_pwaiter *p = (struct sched_pwaiter *)(old & ~SYNC_PTHREAD);
        /* release: the waiter's acquire load sees our writes. After this
         * store p may be gone; FUTEX_WAKE on a dead address wakes nobody
         * (the waiter loops on flag, so a stray wake is harmless). */
        if (atomic_exchange_explicit(&p->flag, 1, memory_order_release) == 2)
            sched_futex(&p->flag, FUTEX_WAKE, 1);
        return;
    }
    struct mpiv_ult *u = (struct mpiv_ult *)old;
    sched_make_runnable(u->w, u);
}

/* A wait that finds s signalled already consumes it without a locked
 * instruction (sched_sync_consume): the common case when the caller
 * polled until done (proto_wait), and for an operation that completed
 * before its call returned. */
static inline bool sched_wait_consumed(sched_sync *s)
{
    _Static_assert(SYNC_SIGNALLED == 1, "sched_sync_consume's signalled state");
    return sched_sync_consume(s);
}

/* A registered pthread waiter's wait before it sleeps in the kernel:
 * spins, or where cores are scarce (idle_stay) yields its core, a while;
 * true if the signal came meanwhile. */
static inline bool sched_pwaiter_spin(struct sched_pwaiter *p)
{
    /* relaxed: a setting, fixed while threads wait */
    bool scarce = atomic_load_explicit(&sched_g.idle_stay, memory_order_relaxed);
    for (int i = 0, n = scarce ? SCHED_PTHREAD_YIELDS : SCHED_PTHREAD_SPINS; i < n; i++) {
        /* acquire: pairs with the signaller's release exchange */
        if (atomic_load_explicit(&p->flag, memory_order_acquire) == 1)
            return true;
        if (scarce)
            sched_yield();
        else
            util_cpu_relax();
    }
    return false;
}

/* Registers p (flag 0) as s's waiter: false if s was signalled already,
 * and then consumes the signal (a pthread waiter's first step, in
 * sched_wait_pthread and sched_wait_pthread_for). */
static inline bool sched_pwaiter_register(sched_sync *s, struct sched_pwaiter *p)
{
    if (sched_wait_consumed(s))
        return false;
    atomic_init(&p->flag, 0);
    uintptr_t old = 0;
    /* acq_rel on success: release publishes p to the signaller; on failure
     * (state is 1) acquire pairs with the signaller's release. */
    if (!atomic_compare_exchange_strong_explicit(&s->state, &old, (uintptr_t)p | SYNC_PTHREAD,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        /* relaxed: only a signal could race, and it sees 1 and returns */
        atomic_store_explicit(&s->state, 0, memory_order_relaxed);
        return false;
    }
    return true;
}

/* Tells the signaller of a registered p that its waiter is about to sleep
 * in the kernel (flag 2: wake it): false if the signal came first. */
static inline bool sched_pwaiter_arm(struct sched_pwaiter *p)
{
    int expect = 0;
    /* acquire (failure: the flag is 1, the signal's writes are ours;
     * success: a no-op, C11 forbids a weaker success order) */
    return atomic_compare_exchange_strong_explicit(&p->flag, &expect, 2, memory_order_acquire,
                                                   memory_order_acquire);
}

static inline void sched_wait_pthread(sched_sync *s)
{
    struct sched_pwaiter p;
    if (!sched_pwaiter_register(s, &p) || sched_pwaiter_spin(&p) || !sched_pwaiter_arm(&p))
        return;
    /* acquire: pairs with the signaller's release exchange, once it wrote 1 */
    while (atomic_load_explicit(&p.flag, memory_order_acquire) == 2)
        sched_futex(&p.flag, FUTEX_WAIT, 2);
}

static inline void sched_wait_inline(sched_sync *s)
{
    if (sched_wait_consumed(s))
        return;
    struct sched_worker *w = sched_tls_worker;
    struct mpiv_ult *u = w ? w->current : NULL;
    if (!u) {
        sched_wait_pthread(s);
        return;
    }
    uintptr_t old = 0;
    /* as in sched_wait_pthread: release publishes u, acquire takes a
     * signal that came first. */
    if (!atomic_compare_exchange_strong_explicit(&s->state, &old, (uintptr_t)u,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        /* relaxed: a racing signal sees 1 and returns without writing */
        atomic_store_explicit(&s->state, 0, memory_order_relaxed);
        return;
    }
    worker_count(&w->blocked_waits, 1);
    /* A signal may set our bit before we switch out: harmless, only this
     * pthread resumes us, and not before we have switched (R3). */
    sched_to_scheduler(w, u, NULL);
}

static inline void sched_yield_inline(void)
{
    struct sched_worker *w = sched_tls_worker;
    struct mpiv_ult *u = w ? w->current : NULL;
    if (!u) {
        sched_yield();
        return;
    }
    sched_make_runnable(w, u); /* R5: the private FIFO */
    sched_to_scheduler(w, u, NULL);
}

/* sync.c / sched.c shared helpers */
static inline bool sched_ready(void)
{
    /* acquire: pairs with sched_init's release, so the tables are seen */
    return atomic_load_explicit(&sched_g.ready, memory_order_acquire) != 0;
}

#endif
