/*
 * pktpool.c — the packet pool (see pktpool.h for the contract).
 *
 * Where a free packet can be
 *   - in a worker's private deque: a fixed ring of PKT_DEQUE_SIZE pointers
 *     under a spinlock that only its worker and thieves (the server, or a
 *     getter that found everything else empty) take. The worker works at
 *     the top (LIFO: the packet it returned last is warm in its cache);
 *     spills and steals take the bottom, the least recently used packet.
 *   - on the shared stack: a Treiber stack of packet indices. Its head is
 *     one 64-bit word {tag:32 | index+1:32}; every successful CAS bumps the
 *     tag, so a head that was popped and pushed back between a popper's load
 *     and its CAS no longer compares equal (ABA). The links live in the
 *     pool's own array of atomics, not in the packets, so a popper reading a
 *     stale link races with nobody (it only loses its CAS). 64-bit CAS is
 *     native on every target we build for; no libatomic.
 *
 * Invariants
 *   P1  Every packet is in exactly one of: a deque, the shared stack, or a
 *       holder's hands. Packets are never created or destroyed after
 *       pkt_pool_create.
 *   P2  A deque's ring holds `n` packets from ring[bot] upwards (mod size);
 *       bot and n change only under the deque's lock.
 *   P3  The shared stack's tag changes on every successful push and pop; a
 *       thread would have to sleep through 2^32 of them between its load and
 *       its CAS to suffer ABA.
 *   P4  Debug builds (NDEBUG undefined): p->owner is PKT_OWNER_FREE exactly
 *       while the packet is in the pool, else the id of the thread that got
 *       it (worker >= 0, -1 a plain pthread, -2 the server). It is swapped
 *       atomically on every get and put, so a double put, a put of a packet
 *       that is not out, or a packet handed out twice abort with a message.
 *   P5  A packet's header is written first when the packet first leaves the
 *       shared stack, not at create: the thread whose pop took it sees its
 *       bit in `inited` clear, writes the header and sets the bit before it
 *       hands the packet out. Every later pop of it is ordered after that
 *       by the put and push that brought it back, so it sees the bit set.
 *       Deques and holders only ever have packets that left the stack. So
 *       create commits none of the region's pages: with packets of a page
 *       or more, writing every header would commit a page per packet, for
 *       headers that a process on shm alone mostly never uses. (A running
 *       count of first pops cannot say this: a popper preempted between
 *       its pop and its check would find the count already past its
 *       packet.)
 */
#include "pktpool/pktpool.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util/atomic.h"
#include "util/spinlock.h"

#define PKT_DEQUE_SIZE 32
#define PKT_NONE 0u /* index+1 encoding: 0 is the empty link */

#ifndef NDEBUG
#define PKT_CHECK_OWNER 1
#endif
#define PKT_OWNER_FREE (-3)
#define PKT_OWNER_SERVER (-2)

struct pkt_deque {
    _Alignas(UTIL_CACHELINE) util_spinlock lock;
    uint32_t bot; /* ring index of the bottom (oldest) packet */
    _Atomic uint32_t n; /* packets in the ring; written under the lock,
                           read without it by thieves taking a look  */
    pkt_t *ring[PKT_DEQUE_SIZE];
};

struct pkt_pool {
    _Alignas(UTIL_CACHELINE) _Atomic uint64_t top; /* {tag:32 | idx+1:32} */
    _Alignas(UTIL_CACHELINE) unsigned char *base;
    size_t stride;
    size_t data_size;
    size_t npackets;
    int nworkers;
    _Atomic uint32_t *link; /* shared-stack link of packet i: idx+1 or 0 */
    _Atomic uint64_t *inited; /* P5: bit i set once packet i's header is written */
    struct pkt_deque *deques;
};

/* P5: whether packet i's header was written (relaxed: see P5). */
static inline bool pkt_inited(struct pkt_pool *pool, uint32_t i)
{
    return util_load_relaxed(&pool->inited[i / 64]) >> (i % 64) & 1;
}

/* --- ownership check (debug builds) ------------------------------------ */

#ifdef PKT_CHECK_OWNER
static void pkt_check_mine(struct pkt_pool *pool, pkt_t *p, const char *what)
{
    uintptr_t off = (uintptr_t)p - (uintptr_t)pool->base;
    if (!p || (uintptr_t)p < (uintptr_t)pool->base || off % pool->stride != 0 ||
        off / pool->stride >= pool->npackets)
        util_fatal("%s: %p is not a packet of this pool", what, (void *)p);
}
#endif

static inline void pkt_take(struct pkt_pool *pool, pkt_t *p, int32_t who)
{
    (void)pool;
    (void)p;
    (void)who;
#ifdef PKT_CHECK_OWNER
    /* Relaxed is enough: the pool's own acquire (lock or pop CAS) orders
     * this after the put that freed the packet. */
    int32_t was = __atomic_exchange_n(&p->owner, who, __ATOMIC_RELAXED);
    if (was != PKT_OWNER_FREE)
        util_fatal("pkt_get: packet %u handed out twice (held by %d, now also %d)",
                   p->idx, was, who);
#endif
}

static inline void pkt_give(struct pkt_pool *pool, pkt_t *p, const char *what)
{
    (void)pool;
    (void)p;
    (void)what;
#ifdef PKT_CHECK_OWNER
    pkt_check_mine(pool, p, what);
    /* P5: a packet that never left has no header to check yet */
    uint32_t i = (uint32_t)(((uintptr_t)p - (uintptr_t)pool->base) / pool->stride);
    if (!pkt_inited(pool, i))
        util_fatal("%s: packet %u is already free (put of a packet nobody got)", what, i);
    int32_t was = __atomic_exchange_n(&p->owner, PKT_OWNER_FREE, __ATOMIC_RELAXED);
    if (was == PKT_OWNER_FREE)
        util_fatal("%s: packet %u is already free (double put, or put of a packet "
                   "nobody got)", what, p->idx);
#endif
}

/* --- shared lock-free stack -------------------------------------------- */

static inline uint64_t pkt_top_make(uint64_t tag, uint32_t idx1)
{
    return (tag << 32) | idx1;
}

static void pkt_shared_push(struct pkt_pool *pool, pkt_t *p)
{
    uint32_t idx1 = p->idx + 1;
    uint64_t old = util_load_relaxed(&pool->top);
    uint64_t new;
    do {
        /* The link may be read by a popper that loaded an older head; it
         * is atomic so that read is no race, and the tag makes that popper's
         * CAS fail. */
        util_store_relaxed(&pool->link[p->idx], (uint32_t)old);
        new = pkt_top_make((old >> 32) + 1, idx1);
        /* Release: the link and everything the putter wrote into the
         * packet become visible to the popper that acquires this head. */
    } while (!atomic_compare_exchange_weak_explicit(&pool->top, &old, new, memory_order_release,
                                                    memory_order_relaxed));
}

/* P5: packet i leaves the shared stack for the first time; we own it. */
static void pkt_first_out(struct pkt_pool *pool, pkt_t *p, uint32_t i)
{
    memset(p, 0, sizeof *p);
    p->idx = i;
    p->owner = PKT_OWNER_FREE;
    p->peer = -1;
    /* relaxed: our put, when it comes, publishes it with the packet */
    atomic_fetch_or_explicit(&pool->inited[i / 64], UINT64_C(1) << (i % 64),
                             memory_order_relaxed);
}

static pkt_t *pkt_shared_pop(struct pkt_pool *pool)
{
    /* Acquire: pairs with the push's release so the link we read next
     * and the packet's contents are those the pusher wrote. */
    uint64_t old = util_load_acquire(&pool->top);
    for (;;) {
        uint32_t idx1 = (uint32_t)old;
        if (idx1 == PKT_NONE)
            return NULL;
        uint32_t next = util_load_relaxed(&pool->link[idx1 - 1]);
        uint64_t new = pkt_top_make((old >> 32) + 1, next);
        if (atomic_compare_exchange_weak_explicit(&pool->top, &old, new, memory_order_acquire,
                                                  memory_order_acquire)) {
            pkt_t *p = (pkt_t *)(pool->base + (size_t)(idx1 - 1) * pool->stride);
            if (!pkt_inited(pool, idx1 - 1))
                pkt_first_out(pool, p, idx1 - 1);
            return p;
        }
    }
}

/* --- private deques ---------------------------------------------------- */

/* n is only written under the lock, so relaxed accesses there are plain
 * reads and writes; it is atomic only for the thieves' unlocked look. */
#define DQ_N(d) util_load_relaxed(&(d)->n)
#define DQ_SET_N(d, v) util_store_relaxed(&(d)->n, (v))

static pkt_t *pkt_deque_pop_top(struct pkt_deque *d)
{
    pkt_t *p = NULL;
    util_spin_lock(&d->lock);
    uint32_t n = DQ_N(d);
    if (n > 0) {
        DQ_SET_N(d, n - 1);
        p = d->ring[(d->bot + n - 1) % PKT_DEQUE_SIZE];
    }
    util_spin_unlock(&d->lock);
    return p;
}

/* Pushes p on top; returns the bottom packet it pushed out, or NULL. */
static pkt_t *pkt_deque_push_top(struct pkt_deque *d, pkt_t *p)
{
    pkt_t *spill = NULL;
    util_spin_lock(&d->lock);
    uint32_t n = DQ_N(d);
    if (n == PKT_DEQUE_SIZE) {
        spill = d->ring[d->bot];
        d->bot = (d->bot + 1) % PKT_DEQUE_SIZE;
        n--;
    }
    d->ring[(d->bot + n) % PKT_DEQUE_SIZE] = p;
    DQ_SET_N(d, n + 1);
    util_spin_unlock(&d->lock);
    return spill;
}

static pkt_t *pkt_deque_pop_bottom(struct pkt_deque *d)
{
    /* A look without the lock first, so a thief scanning empty deques does
     * not bounce every worker's lock line; a packet pushed just after the
     * look is simply found next time. */
    if (DQ_N(d) == 0)
        return NULL;
    pkt_t *p = NULL;
    util_spin_lock(&d->lock);
    uint32_t n = DQ_N(d);
    if (n > 0) {
        p = d->ring[d->bot];
        d->bot = (d->bot + 1) % PKT_DEQUE_SIZE;
        DQ_SET_N(d, n - 1);
    }
    util_spin_unlock(&d->lock);
    return p;
}

/* Steals from the deques' bottoms, starting at a random one. */
static pkt_t *pkt_steal(struct pkt_pool *pool, int skip)
{
    static _Thread_local uint32_t rng = 0x9e3779b9u;
    if (pool->nworkers == 0)
        return NULL;
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    int start = (int)(rng % (uint32_t)pool->nworkers);
    for (int i = 0; i < pool->nworkers; i++) {
        int w = (start + i) % pool->nworkers;
        if (w == skip)
            continue;
        pkt_t *p = pkt_deque_pop_bottom(&pool->deques[w]);
        if (p)
            return p;
    }
    return NULL;
}

/* --- the interface ------------------------------------------------------ */

int pkt_pool_create(struct pkt_pool **pool, size_t npackets, size_t data_size, int nworkers)
{
    if (!pool)
        return util_err(MPIV_ERR_ARG, "pkt_pool_create: NULL pool pointer");
    *pool = NULL;
    if (npackets == 0 || npackets >= UINT32_MAX)
        return util_err(MPIV_ERR_ARG, "pkt_pool_create: %zu packets: expected 1 to %u",
                        npackets, UINT32_MAX - 1);
    if (nworkers < 0)
        return util_err(MPIV_ERR_ARG, "pkt_pool_create: %d workers", nworkers);
    size_t stride = sizeof(pkt_t) + (data_size + UTIL_CACHELINE - 1) / UTIL_CACHELINE * UTIL_CACHELINE;
    if (data_size > SIZE_MAX / 2 || npackets > SIZE_MAX / stride)
        return util_err(MPIV_ERR_NO_RESOURCES, "pkt_pool_create: %zu packets of %zu bytes overflow",
                        npackets, data_size);

    struct pkt_pool *pl = aligned_alloc(UTIL_CACHELINE, sizeof *pl);
    if (!pl)
        return util_err(MPIV_ERR_NO_RESOURCES, "pkt_pool_create: no memory");
    memset(pl, 0, sizeof *pl);
    pl->stride = stride;
    pl->data_size = data_size;
    pl->npackets = npackets;
    pl->nworkers = nworkers;
    /* Page-aligned so the network may register it without rounding. */
    size_t bytes = (npackets * stride + 4095) / 4096 * 4096;
    if (posix_memalign((void **)&pl->base, 4096, bytes) != 0)
        pl->base = NULL;
    pl->link = calloc(npackets, sizeof *pl->link);
    pl->inited = calloc((npackets + 63) / 64, sizeof *pl->inited);
    pl->deques = nworkers ? aligned_alloc(UTIL_CACHELINE, (size_t)nworkers * sizeof *pl->deques)
                          : NULL;
    if (!pl->base || !pl->link || !pl->inited || (nworkers && !pl->deques)) {
        free(pl->base);
        free((void *)pl->link);
        free((void *)pl->inited);
        free(pl->deques);
        free(pl);
        return util_err(MPIV_ERR_NO_RESOURCES, "pkt_pool_create: no memory for %zu packets of %zu bytes",
                        npackets, data_size);
    }
    for (int w = 0; w < nworkers; w++) {
        memset(&pl->deques[w], 0, sizeof pl->deques[w]);
        util_spin_init(&pl->deques[w].lock);
        atomic_init(&pl->deques[w].n, 0);
    }
    /* Packet 0 ends on top: consecutive gets walk the region forwards.
     * Headers are written at each packet's first get (P5). */
    for (size_t i = 0; i < npackets; i++)
        atomic_init(&pl->link[i], i + 1 < npackets ? (uint32_t)i + 2 : PKT_NONE);
    atomic_init(&pl->top, pkt_top_make(0, 1));
    *pool = pl;
    return MPIV_SUCCESS;
}

void pkt_pool_destroy(struct pkt_pool *pool)
{
    if (!pool)
        return;
    free(pool->base);
    free((void *)pool->link);
    free((void *)pool->inited);
    free(pool->deques);
    free(pool);
}

void pkt_pool_region(struct pkt_pool *pool, void **base, size_t *len)
{
    *base = pool->base;
    *len = pool->npackets * pool->stride;
}

size_t pkt_data_size(const struct pkt_pool *pool) { return pool->data_size; }
size_t pkt_count(const struct pkt_pool *pool) { return pool->npackets; }
size_t pkt_stride(const struct pkt_pool *pool) { return pool->stride; }

pkt_t *pkt_by_index(struct pkt_pool *pool, uint32_t idx)
{
    if (idx >= pool->npackets)
        return NULL;
    return (pkt_t *)(pool->base + (size_t)idx * pool->stride);
}

pkt_t *pkt_get(struct pkt_pool *pool, int worker)
{
    pkt_t *p = NULL;
    if (worker >= 0) {
        if (util_unlikely(worker >= pool->nworkers))
            util_fatal("pkt_get: worker %d of %d", worker, pool->nworkers);
        p = pkt_deque_pop_top(&pool->deques[worker]);
    }
    if (!p)
        p = pkt_shared_pop(pool);
    /* Last resort, so that packets idling in another worker's deque never
     * starve this one: NULL means no packet was free anywhere we looked. */
    if (!p)
        p = pkt_steal(pool, worker);
    if (p)
        pkt_take(pool, p, worker);
    return p;
}

void pkt_put(struct pkt_pool *pool, int worker, pkt_t *p)
{
    pkt_give(pool, p, "pkt_put");
    if (worker < 0) {
        pkt_shared_push(pool, p);
        return;
    }
    if (util_unlikely(worker >= pool->nworkers))
        util_fatal("pkt_put: worker %d of %d", worker, pool->nworkers);
    pkt_t *spill = pkt_deque_push_top(&pool->deques[worker], p);
    if (spill)
        pkt_shared_push(pool, spill);
}

pkt_t *pkt_get_server(struct pkt_pool *pool)
{
    pkt_t *p = pkt_shared_pop(pool);
    if (!p)
        p = pkt_steal(pool, -1);
    if (p)
        pkt_take(pool, p, PKT_OWNER_SERVER);
    return p;
}

void pkt_put_server(struct pkt_pool *pool, pkt_t *p)
{
    pkt_give(pool, p, "pkt_put_server");
    pkt_shared_push(pool, p);
}
