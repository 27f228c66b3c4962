/*
 * stack.c — ULT stacks: how a chunk of stacks is laid out and mapped, the
 * guard pages below them, the tripwires of stacks that have none, and the
 * stack-overflow report. Which stack a ULT gets, and when (at its first
 * run, from its worker's cache; given back the moment it ends: K1-K4 at
 * the top of sched.c), is sched.c's business; this file only makes stacks
 * and checks them.
 *
 * Layout: stacks are carved from per-worker chunks (64 stacks, doubling up
 * to SCHED_STACK_CHUNK = 1024):
 *
 *   [pad page] [guard 0][stack 0 ... desc 0|tw 1] [guard 1][stack 1 ...
 *
 * A stack's descriptor (struct sched_stack: its bounds, its tripwire, its
 * link in the worker's free-stack cache) sits at its top; the ULT's frames
 * start right below it. The ULT record itself is not on the stack (a ULT
 * that never ran has none). Each stack has a
 * guard page below it and, at its very top, above its descriptor,
 * SCHED_TRIPWIRE_BYTES that belong to the stack above ("tw 1": the
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
 * such a ULT (wait, yield, finish: sched_switch_out) sched_stack_check
 * aborts with the same report as a guard hit if
 *   (a) the ULT's stack pointer is below its stack (it is overflowing now:
 *       the gap page absorbs the first 4 KiB), or
 *   (b) any tripwire word changed: an overflow went past the gap page and
 *       was on its way into the descriptor and frames of the stack below.
 * This costs no memory (the tripwire is in the page the stack below
 * already touches for its descriptor) and, on unguarded stacks only, a read of
 * 512 bytes per switch. sched_segv also reports a fault taken with the
 * stack pointer below the stack (a runaway recursion that ran off the
 * mapping).
 * What it cannot catch: (1) an overflow that passed the tripwire in one
 * jump (a frame of more than gap + 512 bytes, e.g. a big local array, that
 * writes only below the tripwire) and unwound before the ULT switched out;
 * (2) damage used before the overflowing ULT switches out: the stack below
 * is on the same worker and so cannot run until then (its descriptor and
 * frames are read by that worker's pthread only, K2 in sched.c), but a
 * ULT's frames may hold objects that other pthreads read meanwhile (a
 * sched_sync or a request on its stack); (3) an overflow of a chunk's
 * first stack past the pad page into whatever is mapped below the chunk.
 * Guard pages catch all of these; the tripwire is the fallback for old
 * kernels beyond the VMA budget only.
 *
 * Creation cost: the first touch of a stack's top page (the descriptor)
 * is a page fault. Where process_madvise() on ourselves takes any advice (Linux
 * >= 6.13), the top pages are prefaulted with one MADV_POPULATE_WRITE call
 * per SCHED_STACK_BATCH stacks instead (the pages first runs would touch;
 * at most a batch's top pages, 64 x 4 KiB per worker, are committed
 * before they are used). Guards are installed batch by batch too, so a
 * chunk costs only its mapping until its stacks are taken.
 */
#include <signal.h>
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

static struct sigaction sched_old_segv;
static int sched_segv_installed;
/* sched_test_force_guard_fallback's budget, -1 if not forced */
static int sched_forced_budget = -1;

/* ------------------------------------------------------------------------ */
/* making stacks                                                            */
/* ------------------------------------------------------------------------ */

void *sched_map_zeroed(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void sched_test_force_guard_fallback(int vma_budget) { sched_forced_budget = vma_budget; }

void sched_stack_probe(void)
{
    size_t pg = sched_g.page;
    int forced = sched_forced_budget;
    sched_forced_budget = -1; /* for the next sched_init only */
    sched_g.guard_install = sched_g.pm_guard = sched_g.pm_populate = false;
    sched_g.pidfd = -1;
    sched_g.guard_budget = forced >= 0 ? forced : SCHED_GUARD_VMA_BUDGET;
    /* single-threaded: the workers are not started yet */
    atomic_store_explicit(&sched_g.guard_vmas, 0, memory_order_relaxed);
    char *p = sched_map_zeroed(3 * pg);
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

void sched_stack_release(void)
{
    if (sched_g.pidfd >= 0)
        close(sched_g.pidfd);
    sched_g.pidfd = -1;
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

struct sched_chunk *sched_chunk_make(uint32_t n)
{
    size_t len = sched_g.page + sched_stack_stride() * n; /* + the pad page */
    struct sched_chunk *c = calloc(1, sizeof *c);
    char *base = c ? sched_map_zeroed(len) : NULL;
    if (!base) {
        free(c);
        return NULL;
    }
    /* a 2 MiB huge page would commit 2 MiB for one touched stack page */
    madvise(base, len, MADV_NOHUGEPAGE);
    c->base = base;
    c->len = len;
    c->n = n;
    return c;
}

/* Readies the next batch of c's stacks, from c->ready on: their guard
 * pages installed and their top pages prefaulted, each with one
 * process_madvise call where the kernel takes it. In batches, not the
 * whole chunk at once: a chunk of 1024 made for the 513th blocked ULT
 * would otherwise commit and prefault 1024 top pages when a few are used
 * (a prefault costs as much as the fault it saves, 1.3-2 us a page on
 * the machines measured). */
static void chunk_ready_batch(struct sched_chunk *c)
{
    size_t pg = sched_g.page, stride = sched_stack_stride();
    uint32_t k0 = c->ready, n = c->n - k0 < SCHED_STACK_BATCH ? c->n - k0 : SCHED_STACK_BATCH;
    char *s0 = (char *)c->base + pg + (size_t)k0 * stride;
    struct iovec iov[SCHED_STACK_BATCH];
    uint32_t guarded = 0;
    if (sched_g.pm_guard) {
        for (uint32_t k = 0; k < n; k++)
            iov[k] = (struct iovec){s0 + (size_t)k * stride, pg};
        guarded = advise_pages(iov, n, MADV_GUARD_INSTALL);
    }
    for (uint32_t k = guarded; k < n; k++)
        if (!guard_one(s0 + (size_t)k * stride, &c->guard_vmas))
            c->unguarded[(k0 + k) / 64] |= UINT64_C(1) << ((k0 + k) % 64);
    if (sched_g.pm_populate) {
        /* prefault each top page (descriptor, tripwire, first frames): a
         * failure only leaves them to be faulted on first touch */
        for (uint32_t k = 0; k < n; k++)
            iov[k] = (struct iovec){s0 + (size_t)(k + 1) * stride - pg, pg};
        advise_pages(iov, n, MADV_POPULATE_WRITE);
    }
    c->ready = k0 + n;
}

void sched_chunk_free(struct sched_chunk *c)
{
    munmap(c->base, c->len);
    /* relaxed: a budget counter, as in guard_one */
    atomic_fetch_sub_explicit(&sched_g.guard_vmas, c->guard_vmas, memory_order_relaxed);
    free(c);
}

struct sched_stack *sched_stack_at(struct sched_chunk *c, uint32_t k)
{
    while (k >= c->ready)
        chunk_ready_batch(c);
    size_t stride = sched_stack_stride();
    char *base = (char *)c->base + sched_g.page + (size_t)k * stride; /* its guard page */
    size_t d = (sizeof(struct sched_stack) + UTIL_CACHELINE - 1) & ~(size_t)(UTIL_CACHELINE - 1);
    struct sched_stack *s = (struct sched_stack *)(base + stride - SCHED_TRIPWIRE_BYTES - d);
    s->next_free = NULL;
#ifdef SCHED_ASAN
    s->used = false;
#endif
#ifdef MPIV_TSAN
    s->tsan_fiber = NULL;
#endif
    s->lo = base + sched_g.page;
    s->size = (size_t)((char *)s - s->lo);
    s->tripwire = NULL;
    if (c->unguarded[k / 64] >> (k % 64) & 1) {
        /* the top of the stack below (or of the pad page), touched already
         * for that stack's descriptor */
        uint64_t *t = (uint64_t *)(base - SCHED_TRIPWIRE_BYTES);
        for (size_t i = 0; i < SCHED_TRIPWIRE_BYTES / sizeof *t; i++)
            t[i] = sched_g.tripwire;
        s->tripwire = t;
    }
    return s;
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

/* See the top of this file. Not instrumented by ASan: after an overflow,
 * frames that ran in the gap may have left poisoned shadow behind, and the
 * report should be ours. */
__attribute__((noinline, no_sanitize_address)) void sched_stack_check(struct sched_worker *w,
                                                                      struct mpiv_ult *u)
{
    const char *sp = __builtin_frame_address(0);
    const uint64_t *t = u->stack->tripwire, want = sched_g.tripwire;
    if (sp < u->stack->lo)
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
    /* the running ULT's stack descriptor, at the top of its own stack:
     * an overflow runs away from it, downwards */
    const struct sched_stack *st = u ? u->stack : NULL;
    if (st) {
        const char *a = si->si_addr, *lo = st->lo;
        /* the guard page below the stack */
        if (a < lo && a >= lo - sched_g.page)
            report_overflow(w, u, "its guard page");
        /* or a fault with the stack pointer below the stack (no guard, or
         * a frame that jumped the guard), up to a chunk's span below */
        const char *sp = NULL;
#if defined(__x86_64__)
        sp = (const char *)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
        sp = (const char *)((ucontext_t *)ctx)->uc_mcontext.sp;
#endif
        size_t span = (size_t)SCHED_STACK_CHUNK * sched_stack_stride();
        if (sp && sp < lo && (uintptr_t)(lo - sp) <= span)
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

void sched_stack_segv_install(void)
{
    if (sched_segv_installed)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = sched_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &sched_old_segv);
    sched_segv_installed = 1;
}

void sched_stack_segv_restore(void)
{
    if (!sched_segv_installed)
        return;
    sigaction(SIGSEGV, &sched_old_segv, NULL);
    sched_segv_installed = 0;
}
