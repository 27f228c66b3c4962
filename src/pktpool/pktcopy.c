/*
 * pktcopy.c — packet-shaped heap blocks (see pktcopy.h for the contract).
 *
 * Why not malloc: a backlog of small copies (a million early messages at a
 * receiver, a queue of sends behind a full ring) is freed in about the
 * order it was taken, long after. glibc then coalesces each freed chunk
 * with its neighbours (their headers are cache misses by then), and a
 * 64-byte-aligned request splits a larger chunk on every call; both showed
 * as the largest items of the receiver's and the sender's profiles in
 * `million 1M` (docs/perf/sched.md). A free list of same-sized cells gives
 * a block back by writing one link, and takes the last one given back
 * (LIFO: still in the cache) when there is one.
 *
 * Layout
 *   Class c serves blocks of c + 2 cache lines (the pkt_t header and up to
 *   (c + 1) * 64 data bytes), c < PC_CLASSES. Each class has a free list
 *   linked through pkt_t.next, and a current chunk carved from `bump`
 *   towards `end`, all under the class's spinlock. A chunk is PC_CHUNK
 *   (2 MiB) bytes from util_map_dense, in 2 MiB pages but for a class's
 *   first chunk; its first line links it into the class's list of chunks,
 *   the cells follow.
 *
 * Invariants (per class, under its lock)
 *   C1  A cell of a chunk is in exactly one of: the free list, held (taken
 *       and not given back), or not carved yet (at or past bump in the
 *       current chunk). A chunk is installed only when the class has no
 *       free cell and no room left in its current one, so every chunk but
 *       the current is carved to its end (less than a cell left).
 *   C2  held == cells carved - cells on the free list.
 *   C3  Memory is never allocated, freed or first touched while the lock
 *       is held (a spinlock is never held across a system call or a page
 *       fault, which for a 2 MiB page means zeroing it): a new chunk is
 *       allocated and its first line written with the lock dropped, and
 *       the take is tried again before it is installed (a chunk that lost
 *       that race is freed unused).
 *   C4  Installed chunks are freed only by pkt_copy_release, and only when
 *       no class holds a cell: so no block anyone holds ever points into
 *       freed memory.
 * Under AddressSanitizer only a held block's header and its len data
 * bytes are addressable: the rest of its cell, a cell on the free list
 * (but its link word) and a cell not carved yet are poisoned, so a read
 * past len or a use after pkt_copy_free is reported as with malloc.
 */
#include "pktpool/pktcopy.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/spinlock.h"
#include "util/util.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define PC_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define PC_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define PC_POISON(p, n) ((void)(p), (void)(n))
#define PC_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define PC_LINE 64
#define PC_CLASSES (PKT_COPY_SMALL_MAX / PC_LINE)
#define PC_CHUNK UTIL_HUGE_PAGE
_Static_assert(sizeof(pkt_t) == PC_LINE, "a cell starts with one header line");
_Static_assert(PKT_COPY_SMALL_MAX % PC_LINE == 0, "classes are whole lines");

struct pc_chunk {
    struct pc_chunk *next;
};

struct pc_class {
    _Alignas(UTIL_CACHELINE) util_spinlock lock;
    pkt_t *free;                     /* C1: given back, LIFO          */
    unsigned char *bump, *end;       /* the current chunk's uncarved part */
    struct pc_chunk *chunks;         /* every chunk of this class     */
    size_t held;                     /* C2                            */
};

static struct pc_class pc_classes[PC_CLASSES];
/* Large blocks held (aligned_alloc), for pkt_copy_held. */
static atomic_size_t pc_large_held;

static inline size_t pc_cell_bytes(unsigned c) { return (size_t)(c + 2) * PC_LINE; }

/* The class of a block with len data bytes; len <= PKT_COPY_SMALL_MAX. A
 * block with no data still takes one data line. */
static inline unsigned pc_class_of(size_t len) { return len ? (unsigned)((len - 1) / PC_LINE) : 0; }

static inline void pc_poison_cell(pkt_t *p, size_t bytes)
{
    PC_POISON((unsigned char *)p + sizeof p->next, bytes - sizeof p->next);
}

/* A cell of class k (cells of `cell` bytes), counted held: the one given
 * back last, else the next of the current chunk; NULL if there is neither.
 * Under k's lock. */
static pkt_t *pc_take(struct pc_class *k, size_t cell)
{
    pkt_t *p = k->free;
    if (p) {
        k->free = p->next;
    } else if (k->bump && (size_t)(k->end - k->bump) >= cell) {
        p = (pkt_t *)k->bump;
        k->bump += cell;
    } else {
        return NULL;
    }
    k->held++;
    return p;
}

/* pkt_copy_test_fail's count of allocations left to fail. */
static _Atomic unsigned pc_fail;

void pkt_copy_test_fail(unsigned n) { atomic_store_explicit(&pc_fail, n, memory_order_relaxed); }

/* Whether this allocation is one pkt_copy_test_fail asked to fail. */
static bool pc_fail_now(void)
{
    /* relaxed: a test's knob, set before the traffic it aims at */
    unsigned n = atomic_load_explicit(&pc_fail, memory_order_relaxed);
    while (n && !atomic_compare_exchange_weak_explicit(&pc_fail, &n, n - 1, memory_order_relaxed,
                                                       memory_order_relaxed))
        ;
    return n != 0;
}

pkt_t *pkt_copy_alloc(size_t len)
{
    if (util_unlikely(pc_fail_now()))
        return NULL;
    if (len > PKT_COPY_SMALL_MAX) {
        if (len > SIZE_MAX - sizeof(pkt_t) - PC_LINE)
            return NULL;
        size_t bytes = (sizeof(pkt_t) + len + PC_LINE - 1) & ~(size_t)(PC_LINE - 1);
        pkt_t *p = aligned_alloc(PC_LINE, bytes);
        if (p) /* relaxed: a count for statistics and tests */
            atomic_fetch_add_explicit(&pc_large_held, 1, memory_order_relaxed);
        return p;
    }
    unsigned c = pc_class_of(len);
    struct pc_class *k = &pc_classes[c];
    size_t cell = pc_cell_bytes(c);
    util_spin_lock(&k->lock);
    pkt_t *p = pc_take(k, cell);
    bool first = !k->chunks;
    util_spin_unlock(&k->lock);
    if (!p) {
        /* C3: a new chunk, allocated with the lock dropped. A class's
         * first chunk in 4 KiB pages: most programs never need a second
         * one, and a 2 MiB page would be committed whole. */
        struct pc_chunk *ch = util_map_dense(PC_CHUNK, first ? PC_CHUNK : 0);
        if (!ch)
            return NULL;
        /* Its first write faults the page in (a whole 2 MiB one past a
         * class's first chunk): here, not under the lock (C3). */
        ch->next = NULL;
        PC_POISON((unsigned char *)ch + PC_LINE, PC_CHUNK - PC_LINE);
        util_spin_lock(&k->lock);
        /* Another thread may have made a chunk, or given a block back,
         * meanwhile: then ours goes, so that no chunk is left with most of
         * it uncarved (C1). */
        p = pc_take(k, cell);
        if (!p) {
            ch->next = k->chunks;
            k->chunks = ch;
            k->bump = (unsigned char *)ch + PC_LINE;
            k->end = (unsigned char *)ch + PC_CHUNK;
            ch = NULL;
            p = pc_take(k, cell);
        }
        util_spin_unlock(&k->lock);
        if (ch) {
            PC_UNPOISON(ch, PC_CHUNK);
            util_unmap_dense(ch, PC_CHUNK);
        }
    }
    PC_UNPOISON(p, sizeof *p + len);
    return p;
}

void pkt_copy_free(pkt_t *p, size_t len)
{
    if (!p)
        return;
    if (len > PKT_COPY_SMALL_MAX) {
        atomic_fetch_sub_explicit(&pc_large_held, 1, memory_order_relaxed);
        free(p);
        return;
    }
    unsigned c = pc_class_of(len);
    struct pc_class *k = &pc_classes[c];
#if defined(__SANITIZE_ADDRESS__)
    /* A held block's header is addressable; a free cell's is poisoned
     * past its link word: so this is a block given back twice, which
     * would otherwise link the cell to itself and hand it out for ever. */
    if (__asan_address_is_poisoned((unsigned char *)p + sizeof p->next))
        util_fatal("pkt_copy_free: block %p given back twice", (void *)p);
#endif
    pc_poison_cell(p, pc_cell_bytes(c));
    util_spin_lock(&k->lock);
    p->next = k->free;
    k->free = p;
    k->held--;
    util_spin_unlock(&k->lock);
}

size_t pkt_copy_held(void)
{
    size_t n = atomic_load_explicit(&pc_large_held, memory_order_relaxed);
    for (unsigned c = 0; c < PC_CLASSES; c++) {
        util_spin_lock(&pc_classes[c].lock);
        n += pc_classes[c].held;
        util_spin_unlock(&pc_classes[c].lock);
    }
    return n;
}

size_t pkt_copy_release(void)
{
    size_t held = 0;
    for (unsigned c = 0; c < PC_CLASSES; c++)
        util_spin_lock(&pc_classes[c].lock);
    for (unsigned c = 0; c < PC_CLASSES; c++)
        held += pc_classes[c].held;
    struct pc_chunk *chunks[PC_CLASSES] = {0};
    if (!held) {
        for (unsigned c = 0; c < PC_CLASSES; c++) {
            struct pc_class *k = &pc_classes[c];
            chunks[c] = k->chunks;
            k->chunks = NULL;
            k->free = NULL;
            k->bump = k->end = NULL;
        }
    }
    for (unsigned c = 0; c < PC_CLASSES; c++)
        util_spin_unlock(&pc_classes[c].lock);
    /* C3, C4: freed with the locks dropped, unreachable from the classes */
    for (unsigned c = 0; c < PC_CLASSES; c++) {
        while (chunks[c]) {
            struct pc_chunk *next = chunks[c]->next;
            PC_UNPOISON(chunks[c], PC_CHUNK);
            util_unmap_dense(chunks[c], PC_CHUNK);
            chunks[c] = next;
        }
    }
    return held + atomic_load_explicit(&pc_large_held, memory_order_relaxed);
}
