/*
 * sched.c — workers, ULT stacks and slots, the worker loop, spawn and join,
 * and the stack-overflow report. The hot paths (signal, wait, yield and the
 * ULT side of a switch) are in sched_internal.h, whose top comment states
 * the invariants of the runnable set and of sleeping.
 *
 * Slots and stacks: Γ is bound for good to one stack when first used; its
 * record (struct mpiv_ult) sits at the top of that stack. Freed slots go on
 * the worker's LIFO free list (under w->lock, shared with spawners on other
 * pthreads), so the next spawn reuses the most recently used, cache-warm
 * stack. Stacks are carved from per-worker chunks (64 stacks, doubling up to
 * SCHED_STACK_CHUNK = 1024):
 *
 *   [pad page] [guard 0][stack 0 ... record 0|tw 1] [guard 1][stack 1 ...
 *
 * Each stack has a guard page below it and, at its very top, above its
 * record, SCHED_TRIPWIRE_BYTES that belong to the stack above ("tw 1": the
 * tripwire of stack 1; stack 0's lives at the top of the pad page).
 *
 * Guards: MADV_GUARD_INSTALL where the kernel has it (Linux >= 6.13; no
 * extra VMA, so a million guards fit under vm.max_map_count), installed for
 * a whole chunk with one process_madvise() call; else mprotect(PROT_NONE)
 * while a budget of SCHED_GUARD_VMA_BUDGET lasts (each splits a VMA; the
 * default vm.max_map_count is 65530). A guard hit faults and sched_segv
 * reports the overflow.
 *
 * Stacks beyond that budget (or whose guard could not be made) have no
 * guard page: their "guard page" is plain memory that nobody uses, and
 * their tripwire is filled with a random pattern. At every switch out of
 * such a ULT (wait, yield, finish: sched_to_scheduler) sched_stack_check
 * aborts with the same report as a guard hit if
 *   (a) the ULT's stack pointer is below its stack (it is overflowing now:
 *       the gap page absorbs the first 4 KiB), or
 *   (b) any tripwire word changed: an overflow went past the gap page and
 *       was on its way into the record and frames of the stack below.
 * This costs no memory (the tripwire is in the page the stack below
 * already touches for its record) and, on unguarded stacks only, a read of
 * 512 bytes per switch. sched_segv also reports a fault taken with the
 * stack pointer below the stack (a runaway recursion that ran off the
 * mapping).
 * What it cannot catch: (1) an overflow that passed the tripwire in one
 * jump (a frame of more than gap + 512 bytes, e.g. a big local array, that
 * writes only below the tripwire) and unwound before the ULT switched out;
 * (2) damage used before the overflowing ULT switches out: the stack below
 * is on the same worker and so cannot run until then, but other pthreads
 * may read its record meanwhile (a signaller reads u->w and u->id, a
 * spawner u->next_free of a joined slot); (3) an overflow of a chunk's
 * first stack past the pad page into whatever is mapped below the chunk.
 * Guard pages catch all of these; the tripwire is the fallback for old
 * kernels beyond the VMA budget only.
 *
 * Creation cost: the first touch of a stack's top page (the record) is a
 * page fault. Where process_madvise() on ourselves takes any advice (Linux
 * >= 6.13), a chunk's top pages are prefaulted with one
 * MADV_POPULATE_WRITE call instead (the pages spawns would touch, so the
 * same RSS once the chunk is used; until then up to a chunk's top pages,
 * 1024 x 4 KiB per worker, are committed early, and as much again for a
 * worker's spare chunk).
 * Chunks are mapped outside w->lock; a chunk mapped by a spawner that lost
 * the race is kept as the worker's spare.
 *
 * Invariants of the slot allocator (w->lock held for all of them):
 *   S1. hwm slots were ever used; slot[0..hwm) point to their records.
 *   S2. free_list holds exactly the used slots that are joined; live =
 *       hwm - |free_list|.
 *   S3. nsum >= hwm / 4096 rounded up, stored before the first bit of a new
 *       summary word can be set (release; the worker loads it with acquire
 *       in a sweep, seq_cst before sleeping).
 */
#include <errno.h>
#include <hwloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <ucontext.h>

#include "sched/sched_internal.h"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
/* Without MADV_GUARD_INSTALL each guard costs two VMAs; keep well below the
 * default vm.max_map_count (65530); stacks beyond it get tripwires. */
#define SCHED_GUARD_VMA_BUDGET 20000

struct sched_global sched_g;
_Thread_local struct sched_worker *sched_tls_worker __attribute__((tls_model("initial-exec")));

struct sched_chunk {
    struct sched_chunk *next;
    void *base;
    size_t len;
    uint32_t n; /* stacks */
    uint32_t guard_vmas; /* its mprotect guards, given back when unmapped */
    uint64_t unguarded[SCHED_STACK_CHUNK / 64]; /* bit k: stack k has no guard */
};

static struct sigaction sched_old_segv;
static int sched_segv_installed;
/* sched_test_force_guard_fallback's budget, -1 if not forced */
static int sched_forced_budget = -1;

/* ------------------------------------------------------------------------ */
/* stacks                                                                   */
/* ------------------------------------------------------------------------ */

static void *map_zeroed(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static size_t stack_stride(void) { return sched_g.page + sched_g.stack_size; }

void sched_test_force_guard_fallback(int vma_budget) { sched_forced_budget = vma_budget; }

/* What the kernel offers; sched_init, before the workers start. */
static void probe_guards(void)
{
    size_t pg = sched_g.page;
    int forced = sched_forced_budget;
    sched_forced_budget = -1; /* for the next sched_init only */
    sched_g.guard_install = sched_g.pm_guard = sched_g.pm_populate = false;
    sched_g.pidfd = -1;
    sched_g.guard_budget = forced >= 0 ? forced : SCHED_GUARD_VMA_BUDGET;
    char *p = map_zeroed(3 * pg);
    if (!p)
        return;
    if (forced < 0)
        sched_g.guard_install = madvise(p, pg, MADV_GUARD_INSTALL) == 0;
    int fd = (int)syscall(SYS_pidfd_open, (long)getpid(), 0L);
    if (fd >= 0) {
        struct iovec v = {p + pg, pg};
        sched_g.pm_guard = sched_g.guard_install &&
                           syscall(SYS_process_madvise, fd, &v, 1L, MADV_GUARD_INSTALL, 0L) == (long)pg;
        v.iov_base = p + 2 * pg;
        sched_g.pm_populate =
            syscall(SYS_process_madvise, fd, &v, 1L, MADV_POPULATE_WRITE, 0L) == (long)pg;
        if (sched_g.pm_guard || sched_g.pm_populate)
            sched_g.pidfd = fd;
        else
            close(fd);
    }
    munmap(p, 3 * pg);
    /* the tripwire pattern: random-ish, top bit set (not a user pointer) */
    uint64_t x = util_now_ns() ^ (uintptr_t)p ^ ((uint64_t)getpid() << 32);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    sched_g.tripwire = (x ^ (x >> 31)) | UINT64_C(1) << 63;
}

/* Applies `advice` to the n one-page ranges of iov with as few
 * process_madvise calls as the kernel allows; returns how many of them
 * (a prefix) were done. */
static uint32_t advise_pages(struct iovec *iov, uint32_t n, int advice)
{
    uint32_t done = 0;
    while (done < n) {
        long r = syscall(SYS_process_madvise, sched_g.pidfd, iov + done, (long)(n - done),
                         advice, 0L);
        if (r <= 0)
            break;
        done += (uint32_t)((size_t)r / sched_g.page);
    }
    return done;
}

/* One guard page, without batching. Returns whether it is guarded, and
 * counts in *vmas the guards that took one of the mprotect budget. */
static bool guard_one(char *page, uint32_t *vmas)
{
    if (sched_g.guard_install && madvise(page, sched_g.page, MADV_GUARD_INSTALL) == 0)
        return true;
    /* relaxed: a budget counter, nothing is published through it */
    if (atomic_load_explicit(&sched_g.guard_vmas, memory_order_relaxed) < sched_g.guard_budget &&
        atomic_fetch_add_explicit(&sched_g.guard_vmas, 1, memory_order_relaxed) <
            sched_g.guard_budget) {
        if (mprotect(page, sched_g.page, PROT_NONE) == 0) {
            (*vmas)++;
            return true;
        }
        /* out of VMAs (ENOMEM): do not try again; relaxed as above */
        atomic_store_explicit(&sched_g.guard_vmas, sched_g.guard_budget, memory_order_relaxed);
    }
    static atomic_int warned;
    /* relaxed: warn once, no data depends on it */
    if (!atomic_exchange_explicit(&warned, 1, memory_order_relaxed))
        util_log_warn("no MADV_GUARD_INSTALL and %d mprotect guards made: further ULT stacks "
                      "have no guard page; their overflows are caught at context switches",
                      sched_g.guard_budget);
    return false;
}

/* Maps and prepares a chunk of n stacks. Called without w->lock. */
static struct sched_chunk *make_chunk(uint32_t n)
{
    size_t pg = sched_g.page, stride = stack_stride();
    size_t len = pg + stride * n; /* + the pad page */
    struct sched_chunk *c = calloc(1, sizeof *c);
    struct iovec *iov = (sched_g.pm_guard || sched_g.pm_populate) ? malloc(n * sizeof *iov) : NULL;
    char *base = c ? map_zeroed(len) : NULL;
    if (!base) {
        free(c);
        free(iov);
        return NULL;
    }
    /* a 2 MiB huge page would commit 2 MiB for one touched stack page */
    madvise(base, len, MADV_NOHUGEPAGE);
    char *s0 = base + pg;
    uint32_t guarded = 0;
    if (iov && sched_g.pm_guard) {
        for (uint32_t k = 0; k < n; k++)
            iov[k] = (struct iovec){s0 + (size_t)k * stride, pg};
        guarded = advise_pages(iov, n, MADV_GUARD_INSTALL);
    }
    for (uint32_t k = guarded; k < n; k++)
        if (!guard_one(s0 + (size_t)k * stride, &c->guard_vmas))
            c->unguarded[k / 64] |= UINT64_C(1) << (k % 64);
    if (iov && sched_g.pm_populate) {
        /* prefault each top page (record, tripwire, first frames): a
         * failure only leaves them to be faulted on first touch */
        for (uint32_t k = 0; k < n; k++)
            iov[k] = (struct iovec){s0 + (size_t)(k + 1) * stride - pg, pg};
        advise_pages(iov, n, MADV_POPULATE_WRITE);
    }
    free(iov);
    c->base = base;
    c->len = len;
    c->n = n;
    return c;
}

/* Makes c w's current chunk. w->lock held, w's current chunk used up. */
static void start_chunk(struct sched_worker *w, struct sched_chunk *c)
{
    w->cur = c;
    w->chunk = (char *)c->base + sched_g.page;
    w->chunk_left = c->n;
    uint32_t next = c->n * 2;
    w->chunk_next_n = next < SCHED_STACK_CHUNK ? next : SCHED_STACK_CHUNK;
}

/* A never-used slot with its stack, carved from the current chunk.
 * w->lock held, w->chunk_left > 0. */
static struct mpiv_ult *new_slot(struct sched_worker *w)
{
    char *base = w->chunk; /* its guard page */
    size_t stride = stack_stride();
    uint32_t k = w->cur->n - w->chunk_left;
    w->chunk += stride;
    w->chunk_left--;
    size_t rec = (sizeof(struct mpiv_ult) + UTIL_CACHELINE - 1) & ~(size_t)(UTIL_CACHELINE - 1);
    struct mpiv_ult *u = (struct mpiv_ult *)(base + stride - SCHED_TRIPWIRE_BYTES - rec);
    u->w = w;
    u->id = w->hwm;
    u->stack_lo = base + sched_g.page;
    u->stack_size = (size_t)((char *)u - u->stack_lo);
    u->tripwire = NULL;
    if (w->cur->unguarded[k / 64] >> (k % 64) & 1) {
        /* the top of the stack below (or of the pad page), touched already
         * for that stack's record; written before u is published */
        uint64_t *t = (uint64_t *)(base - SCHED_TRIPWIRE_BYTES);
        for (size_t i = 0; i < SCHED_TRIPWIRE_BYTES / sizeof *t; i++)
            t[i] = sched_g.tripwire;
        u->tripwire = t;
    }
    w->slot[u->id] = u;
    uint32_t need = u->id / 4096 + 1;
    /* relaxed load: only this lock holder writes nsum. The store is at
     * least release (a sweep that sees the new count sees slot[], S3) and
     * seq_cst for the sleeping protocol (a sleeping worker's seq_cst load
     * of nsum is ordered against our later seq_cst summary bit-set). */
    if (atomic_load_explicit(&w->nsum, memory_order_relaxed) < need)
        atomic_store_explicit(&w->nsum, need, memory_order_seq_cst);
    w->hwm++;
    return u;
}

/* A slot for a new ULT on w, counted live; NULL with the error set. Maps a
 * new chunk without holding w->lock (it takes milliseconds), so spawners
 * and joiners of w are not held up meanwhile. */
static struct mpiv_ult *take_slot(struct sched_worker *w)
{
    struct sched_chunk *fresh = NULL, *unused = NULL;
    struct mpiv_ult *u = NULL;
    util_spin_lock(&w->lock);
    for (;;) {
        if ((u = w->free_list) != NULL) {
            w->free_list = u->next_free;
            break;
        }
        if (w->hwm >= sched_g.max_ults) {
            util_err(MPIV_ERR_NO_RESOURCES,
                     "worker %d already holds MPIV_MAX_ULTS=%u ULTs: join some first", w->id,
                     sched_g.max_ults);
            break;
        }
        if (w->chunk_left == 0 && (w->spare || fresh)) {
            struct sched_chunk *c = w->spare;
            if (c) {
                w->spare = NULL;
            } else {
                c = fresh;
                fresh = NULL;
                c->next = w->chunks;
                w->chunks = c;
            }
            start_chunk(w, c);
        }
        if (w->chunk_left) {
            u = new_slot(w);
            break;
        }
        uint32_t n = w->chunk_next_n ? w->chunk_next_n : SCHED_STACK_CHUNK_MIN;
        util_spin_unlock(&w->lock);
        fresh = make_chunk(n);
        if (!fresh) {
            util_err(MPIV_ERR_NO_RESOURCES, "cannot map ULT stacks: %s", strerror(errno));
            return NULL;
        }
        util_spin_lock(&w->lock);
    }
    if (u)
        w->live++;
    if (fresh) { /* another spawner mapped one meanwhile, or a slot was freed */
        if (!w->spare) {
            w->spare = fresh;
            fresh->next = w->chunks;
            w->chunks = fresh;
        } else {
            unused = fresh;
        }
    }
    util_spin_unlock(&w->lock);
    if (unused) {
        munmap(unused->base, unused->len);
        /* relaxed: a budget counter, as in guard_one */
        atomic_fetch_sub_explicit(&sched_g.guard_vmas, unused->guard_vmas, memory_order_relaxed);
        free(unused);
    }
    return u;
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
    u->ret = u->fn(u->arg);
    /* never resumed: the scheduler signals the joiner from its own stack,
     * so the joiner may recycle this stack at once */
    sched_to_scheduler(w, u, SCHED_ULT_FINISHED);
    util_fatal("finished ULT %u resumed", u->id);
}

static inline void sched_run(struct sched_worker *w, struct mpiv_ult *u)
{
    w->current = u;
#ifdef SCHED_ASAN
    __sanitizer_start_switch_fiber(&w->asan_fake, u->stack_lo, u->stack_size);
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
#ifdef MPIV_TSAN
    __tsan_destroy_fiber(u->tsan_fiber);
#endif
    sched_signal_inline(&u->join); /* u may be recycled from here on */
}

static inline void run_word(struct sched_worker *w, uint32_t wi)
{
    /* acquire: pairs with the release bit-sets, so each ULT's record and
     * its signaller's writes are visible before it runs (R2) */
    uint64_t bits = atomic_exchange_explicit(&w->words[wi], 0, memory_order_acquire);
    while (bits) {
        uint32_t b = (uint32_t)__builtin_ctzll(bits);
        bits &= bits - 1;
        sched_run(w, w->slot[wi * 64 + b]);
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
        struct mpiv_ult *next = y->next_ready;
        sched_run(w, y);
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

static void worker_loop(struct sched_worker *w)
{
    for (;;) {
        if (sched_sweep(w))
            continue;
        /* idle: spin, then yield the core, then sleep */
        uint64_t t0 = util_now_ns();
        bool found = false;
        for (unsigned i = 0;; i++) {
            /* relaxed: a peek; the sweep's exchanges order */
            if (any_runnable(w, memory_order_relaxed)) {
                found = true;
                break;
            }
            /* relaxed: finalize wakes us again after setting stop */
            if (atomic_load_explicit(&w->stop, memory_order_relaxed))
                return;
            /* relaxed: the hook needs no ordering with our data */
            sched_idle_hook hook = atomic_load_explicit(&sched_g.idle_hook, memory_order_relaxed);
            if (hook && hook()) {
                t0 = util_now_ns(); /* work came: stay responsive */
                continue;
            }
            uint64_t dt = (i & 15) ? 0 : util_now_ns() - t0;
            if (dt >= SCHED_IDLE_YIELD_NS)
                break;
            if (dt >= SCHED_IDLE_SPIN_NS)
                sched_yield();
            else
                util_cpu_relax();
        }
        if (found)
            continue;
        /* seq_cst: the Dekker pair with remote signallers (header top) */
        atomic_store_explicit(&w->sleeping, 1, memory_order_seq_cst);
        if (any_runnable(w, memory_order_seq_cst) ||
            atomic_load_explicit(&w->stop, memory_order_seq_cst)) {
            /* relaxed: nobody waits for this store */
            atomic_store_explicit(&w->sleeping, 0, memory_order_relaxed);
            continue;
        }
        /* relaxed: the futex re-checks the value in the kernel, and the
         * sweep's exchanges order the data */
        while (atomic_load_explicit(&w->sleeping, memory_order_relaxed) == 1)
            sched_futex(&w->sleeping, FUTEX_WAIT, 1);
    }
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
/* stack overflow                                                           */
/* ------------------------------------------------------------------------ */

static char *fmt_uint(char *p, unsigned long v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* Writes "mpiv: ULT stack overflow (worker W, ULT G): caught by HOW..."
 * and aborts. Async-signal-safe; may run on the overflowed stack itself. */
static _Noreturn void report_overflow(const struct sched_worker *w, const struct mpiv_ult *u,
                                      const char *how)
{
    char msg[160], *p = msg;
    static const char h[] = "mpiv: ULT stack overflow (worker ";
    static const char by[] = "): caught by ";
    static const char tail[] = "; raise MPIV_STACK_SIZE\n";
    size_t hl = strlen(how);
    memcpy(p, h, sizeof h - 1);
    p = fmt_uint(p + sizeof h - 1, (unsigned long)w->id);
    memcpy(p, ", ULT ", 6);
    p = fmt_uint(p + 6, u->id);
    memcpy(p, by, sizeof by - 1);
    p += sizeof by - 1;
    memcpy(p, how, hl < 48 ? hl : 48);
    p += hl < 48 ? hl : 48;
    memcpy(p, tail, sizeof tail - 1);
    p += sizeof tail - 1;
    ssize_t r = write(2, msg, (size_t)(p - msg));
    (void)r;
    abort();
}

/* See "Stacks" at the top. Not instrumented by ASan: after an overflow,
 * frames that ran in the gap may have left poisoned shadow behind, and the
 * report should be ours. */
__attribute__((noinline, no_sanitize_address)) void sched_stack_check(struct sched_worker *w,
                                                                      struct mpiv_ult *u)
{
    const char *sp = __builtin_frame_address(0);
    const uint64_t *t = u->tripwire, want = sched_g.tripwire;
    if (sp < u->stack_lo)
        report_overflow(w, u, "the stack-pointer check");
    uint64_t bad = 0;
    for (size_t i = 0; i < SCHED_TRIPWIRE_BYTES / sizeof *t; i++)
        bad |= t[i] ^ want;
    if (bad)
        report_overflow(w, u, "its tripwire");
}

static void sched_segv(int sig, siginfo_t *si, void *ctx)
{
    struct sched_worker *w = sched_tls_worker;
    struct mpiv_ult *u = w ? w->current : NULL;
    if (u) {
        const char *a = si->si_addr;
        /* the guard page below the stack */
        if (a < u->stack_lo && a >= u->stack_lo - sched_g.page)
            report_overflow(w, u, "its guard page");
        /* or a fault with the stack pointer below the stack (no guard, or
         * a frame that jumped the guard), up to a chunk's span below */
        const char *sp = NULL;
#if defined(__x86_64__)
        sp = (const char *)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
        sp = (const char *)((ucontext_t *)ctx)->uc_mcontext.sp;
#endif
        size_t span = (size_t)SCHED_STACK_CHUNK * stack_stride();
        if (sp && sp < u->stack_lo && (uintptr_t)(u->stack_lo - sp) <= span)
            report_overflow(w, u, "a fault with the stack pointer below the stack");
    }
    /* not ours: hand it to whoever was there before (a sanitizer, or the
     * default action, which the re-executed access then triggers) */
    if (sched_old_segv.sa_flags & SA_SIGINFO) {
        sched_old_segv.sa_sigaction(sig, si, ctx);
    } else if (sched_old_segv.sa_handler == SIG_DFL || sched_old_segv.sa_handler == SIG_IGN) {
        signal(sig, SIG_DFL);
    } else {
        sched_old_segv.sa_handler(sig);
    }
}

/* ------------------------------------------------------------------------ */
/* start and stop                                                           */
/* ------------------------------------------------------------------------ */

static void free_worker(struct sched_worker *w)
{
    if (!w)
        return;
    for (struct sched_chunk *c = w->chunks, *n; c; c = n) {
        n = c->next;
        munmap(c->base, c->len);
        free(c);
    }
    if (w->words)
        munmap((void *)w->words, sched_g.nwords * sizeof(uint64_t));
    if (w->summary)
        munmap((void *)w->summary, sched_g.nsumwords * sizeof(uint64_t));
    if (w->slot)
        munmap(w->slot, sched_g.max_ults * sizeof(void *));
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
    if (sched_g.pidfd >= 0)
        close(sched_g.pidfd);
    sched_g.pidfd = -1;
    sched_g.workers = NULL;
    sched_g.cores = NULL;
}

/* Which hwloc logical core worker i of this rank runs on: this rank's
 * share of the cores, in order, wrapping when workers outnumber it. */
static void plan_cores(const struct util_config *cfg, int ncores)
{
    int share = ncores / (cfg->local_ranks > 0 ? cfg->local_ranks : 1);
    for (int i = 0; i < sched_g.nworkers; i++) {
        if (share >= 1)
            sched_g.cores[i] = cfg->local_rank * share + i % share;
        else
            sched_g.cores[i] = (cfg->local_rank * sched_g.nworkers + i) % ncores;
    }
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
    sched_g.page = page > 0 ? (size_t)page : 4096;
    sched_g.nworkers = (int)cfg->workers;
    sched_g.max_ults = (uint32_t)cfg->max_ults;
    sched_g.nwords = (sched_g.max_ults + 63) / 64;
    sched_g.nsumwords = (sched_g.nwords + 63) / 64;
    sched_g.stack_size = ((size_t)cfg->stack_size + sched_g.page - 1) / sched_g.page * sched_g.page;
    probe_guards();
    atomic_store_explicit(&sched_g.guard_vmas, 0, memory_order_relaxed); /* single-threaded */
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
        w->words = map_zeroed(sched_g.nwords * sizeof(uint64_t));
        w->summary = map_zeroed(sched_g.nsumwords * sizeof(uint64_t));
        w->slot = map_zeroed(sched_g.max_ults * sizeof(void *));
        w->altstack = map_zeroed(64 << 10);
        if (!w->words || !w->summary || !w->slot || !w->altstack)
            goto nomem;
    }

    hwloc_topology_t topo = NULL;
    int ncores = 0;
    if (hwloc_topology_init(&topo) == 0 && hwloc_topology_load(topo) == 0)
        ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    if (ncores <= 0)
        ncores = cfg->ncores > 0 ? cfg->ncores : 1;
    plan_cores(cfg, ncores);

    if (!sched_segv_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = sched_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &sched_old_segv);
        sched_segv_installed = 1;
    }

    int started = 0;
    for (; started < sched_g.nworkers; started++) {
        struct sched_worker *w = sched_g.workers[started];
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
            break;
        w->core = -1;
        if (cfg->bind == UTIL_BIND_CORE && topo) {
            hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE,
                                                     (unsigned)sched_g.cores[started]);
            if (core && hwloc_set_thread_cpubind(topo, w->thread, core->cpuset, 0) == 0)
                w->core = sched_g.cores[started];
            else
                util_log_warn("cannot bind worker %d to core %d", started,
                              sched_g.cores[started]);
        }
    }
    if (topo)
        hwloc_topology_destroy(topo);
    if (cfg->bind != UTIL_BIND_CORE)
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

int sched_finalize(void)
{
    if (!sched_ready())
        return util_err(MPIV_ERR_STATE, "the scheduler is not running");
    if (sched_self())
        return util_err(MPIV_ERR_STATE, "sched_finalize called from a ULT");
    for (int i = 0; i < sched_g.nworkers; i++) {
        struct sched_worker *w = sched_g.workers[i];
        util_spin_lock(&w->lock);
        uint32_t live = w->live;
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
    for (int i = 0; i < sched_g.nworkers; i++)
        pthread_join(sched_g.workers[i]->thread, NULL);
    free_all();
    if (sched_segv_installed) {
        sigaction(SIGSEGV, &sched_old_segv, NULL);
        sched_segv_installed = 0;
    }
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
mpiv_ult_t mpiv_ult_self(void) { return sched_self(); }

int mpiv_ult_yield(void)
{
    if (!sched_ready())
        return util_err(MPIV_ERR_STATE, "mpiv_ult_yield before mpiv_init");
    sched_yield_inline();
    return MPIV_SUCCESS;
}

int mpiv_ult_spawn(mpiv_ult_fn fn, void *arg, int worker, mpiv_ult_t *ult)
{
    if (!sched_ready())
        return util_err(MPIV_ERR_STATE, "mpiv_ult_spawn before mpiv_init");
    if (!fn || !ult)
        return util_err(MPIV_ERR_ARG, "mpiv_ult_spawn: %s is NULL", fn ? "ult" : "fn");
    if (worker < MPIV_WORKER_ANY || worker >= sched_g.nworkers)
        return util_err(MPIV_ERR_ARG, "mpiv_ult_spawn: worker %d is not in [0, %d) or MPIV_WORKER_ANY",
                        worker, sched_g.nworkers);
    struct sched_worker *me = sched_tls_worker, *w;
    if (worker != MPIV_WORKER_ANY)
        w = sched_g.workers[worker];
    else if (me && me->current)
        w = me;
    else /* relaxed: only spreads the load, orders nothing */
        w = sched_g.workers[atomic_fetch_add_explicit(&sched_g.rr, 1, memory_order_relaxed) %
                            (unsigned)sched_g.nworkers];

    struct mpiv_ult *u = take_slot(w);
    if (!u)
        return MPIV_ERR_NO_RESOURCES; /* take_slot said why */

    u->fn = fn;
    u->arg = arg;
    u->ret = NULL;
    /* relaxed: the bit-set below publishes it with release */
    atomic_store_explicit(&u->join.state, 0, memory_order_relaxed);
#ifdef SCHED_ASAN
    /* frames abandoned by the previous ULT may have left poisoned redzones
     * (a fresh stack has clean shadow: skip the 1/8-size memset) */
    if (u->asan_used)
        __asan_unpoison_memory_region(u->stack_lo, u->stack_size);
    u->asan_used = true;
    u->asan_fake = NULL;
#endif
#ifdef MPIV_TSAN
    u->tsan_fiber = __tsan_create_fiber(0);
#endif
    u->ctx = make_fcontext((char *)u, u->stack_size, ult_entry);
    *ult = u;
    sched_make_runnable(w, u);
    return MPIV_SUCCESS;
}

int mpiv_ult_join(mpiv_ult_t u, void **retval)
{
    if (!sched_ready())
        return util_err(MPIV_ERR_STATE, "mpiv_ult_join before mpiv_init");
    if (!u)
        return util_err(MPIV_ERR_ARG, "mpiv_ult_join: ult is NULL");
    if (u == sched_self())
        return util_err(MPIV_ERR_DEADLOCK, "a ULT cannot join itself");
    sched_wait_inline(&u->join);
    if (retval)
        *retval = u->ret;
    struct sched_worker *w = u->w;
    util_spin_lock(&w->lock);
    u->next_free = w->free_list;
    w->free_list = u;
    w->live--;
    util_spin_unlock(&w->lock);
    return MPIV_SUCCESS;
}
