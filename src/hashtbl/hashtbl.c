/*
 * hashtbl.c — the matching table: where a posted receive meets an arrived
 * packet (see hashtbl.h for the contract, DESIGN.md for the picture).
 *
 * Layout
 *   The table is a power-of-two array of 64-byte buckets, each one cache
 *   line: a control entry (the spinlock, a mask of which entries hold a
 *   queue, the overflow pointer) and three {key, value} entries. A bucket
 *   that fills up chains overflow buckets of the same shape; only the head
 *   bucket's lock is ever used, it covers the whole chain and every queue
 *   hanging off it.
 *
 *   A key with one waiting value keeps that value inline in its entry: the
 *   unique-key path (insert, then the other side matches) touches the head
 *   bucket's line and nothing else, under one lock. When a second value of
 *   the same kind arrives under a key, the entry's value becomes a pointer
 *   to a per-key FIFO (struct ht_queue: one cache line holding a ring of
 *   five values, grown by doubling past that). The queue lives until it is
 *   empty again; then the entry is freed. This is LCI's idea (a small queue
 *   per key) in a form that keeps the common case allocation-free.
 *
 * Invariants (all under the head bucket's lock)
 *   I1  An entry is free iff its value is HT_EMPTY; its key is then garbage.
 *   I2  A key occupies at most one entry in its chain.
 *   I3  All values waiting under one key are of one kind: a value of the
 *       other kind never waits, it matches the oldest one instead.
 *   I4  Bit i of a bucket's qmask is set iff entry i is in use and holds a
 *       queue; the entry's value is then (queue pointer | kind of the values
 *       queued), and the queue holds at least one value.
 *   I5  A queue hands its values out in the order they were queued (FIFO),
 *       so equal keys keep MPI's non-overtaking order on both sides.
 *   I6  Overflow buckets are never empty: a chain bucket whose last entry
 *       is freed is unlinked and freed at once, so chains shrink back after
 *       a burst of colliding keys.
 *   I7  Memory is never allocated while the lock is held, except to grow a
 *       queue past five values of one kind under one key (rare): the lock
 *       is dropped, a line is allocated, and the operation starts over.
 *
 * Values must be non-NULL pointers (ht_val(NULL, HT_KIND_REQ) would read
 * as HT_EMPTY). The table owns its buckets and queues, never the values.
 */
#include "hashtbl/hashtbl.h"

#include <stdlib.h>
#include <string.h>

#include "util/spinlock.h"

#define HT_SLOTS 3     /* {key, value} entries per bucket            */
#define HT_QINLINE 5   /* values a queue holds before its ring grows */

struct ht_entry {
    ht_key key;
    ht_value val;
};

struct ht_bucket {
    util_spinlock lock;     /* head bucket only: guards the whole chain */
    uint32_t qmask;         /* bit i: entry i holds a queue (I4)        */
    struct ht_bucket *next; /* overflow chain                           */
    struct ht_entry e[HT_SLOTS];
};
_Static_assert(sizeof(struct ht_bucket) == UTIL_CACHELINE, "a bucket is one cache line");

/* A per-key FIFO of values of one kind: a ring of `cap` values starting
 * at ring[head]. It starts in its own line (inl) and moves to the heap
 * when it outgrows it. */
struct ht_queue {
    uint32_t head;
    uint32_t count;
    uint32_t cap;
    uint32_t pad_;
    ht_value *ring;
    ht_value inl[HT_QINLINE];
};
_Static_assert(sizeof(struct ht_queue) == UTIL_CACHELINE, "a queue is one cache line");

struct ht_table {
    struct ht_bucket *buckets;
    uint64_t mask;
};

/* Contexts, ranks and tags sit in separate bit fields of the key; a
 * multiply-xorshift mix spreads them all over the index bits so that
 * neighbouring tags or ranks land in different buckets. */
static inline uint64_t ht_hash(ht_key k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 29;
    return k;
}

static void *ht_line_alloc(void)
{
    void *p = aligned_alloc(UTIL_CACHELINE, UTIL_CACHELINE);
    if (!p)
        util_fatal("matching table: out of memory for a 64-byte line");
    return p;
}

int ht_create(struct ht_table **t, size_t nbuckets)
{
    if (!t)
        return util_err(MPIV_ERR_ARG, "ht_create: NULL table pointer");
    *t = NULL;
    if (nbuckets == 0)
        nbuckets = 1024;
    if (nbuckets & (nbuckets - 1))
        return util_err(MPIV_ERR_ARG, "ht_create: %zu buckets is not a power of two", nbuckets);
    if (nbuckets > SIZE_MAX / sizeof(struct ht_bucket))
        return util_err(MPIV_ERR_NO_RESOURCES, "ht_create: %zu buckets overflow", nbuckets);
    struct ht_table *tb = malloc(sizeof *tb);
    if (!tb)
        return util_err(MPIV_ERR_NO_RESOURCES, "ht_create: no memory for the table");
    size_t bytes = nbuckets * sizeof(struct ht_bucket);
    tb->buckets = aligned_alloc(UTIL_CACHELINE, bytes);
    if (!tb->buckets) {
        free(tb);
        return util_err(MPIV_ERR_NO_RESOURCES, "ht_create: no memory for %zu buckets", nbuckets);
    }
    memset(tb->buckets, 0, bytes);
    for (size_t i = 0; i < nbuckets; i++)
        util_spin_init(&tb->buckets[i].lock);
    tb->mask = nbuckets - 1;
    *t = tb;
    return MPIV_SUCCESS;
}

static void ht_queue_free(struct ht_queue *q)
{
    if (q->ring != q->inl)
        free(q->ring);
    free(q);
}

static void ht_free_chain_contents(struct ht_bucket *b)
{
    for (int i = 0; i < HT_SLOTS; i++)
        if (b->qmask & (1u << i))
            ht_queue_free(ht_ptr(b->e[i].val));
}

void ht_destroy(struct ht_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i <= t->mask; i++) {
        struct ht_bucket *b = &t->buckets[i];
        ht_free_chain_contents(b);
        b = b->next;
        while (b) {
            struct ht_bucket *nx = b->next;
            ht_free_chain_contents(b);
            free(b);
            b = nx;
        }
    }
    free(t->buckets);
    free(t);
}

static inline ht_value ht_queue_pop(struct ht_queue *q)
{
    ht_value v = q->ring[q->head];
    q->head = q->head + 1 == q->cap ? 0 : q->head + 1;
    q->count--;
    return v;
}

/* Returns 0, or -1 if the ring is full and must grow first (I7). */
static inline int ht_queue_push(struct ht_queue *q, ht_value v)
{
    if (q->count == q->cap)
        return -1;
    uint32_t tail = q->head + q->count;
    if (tail >= q->cap)
        tail -= q->cap;
    q->ring[tail] = v;
    q->count++;
    return 0;
}

/* Moves q's values, oldest first, into `ring` of `cap` > q->count slots. */
static void ht_queue_regrow(struct ht_queue *q, ht_value *ring, uint32_t cap)
{
    uint32_t n = q->count;
    for (uint32_t i = 0; i < n; i++)
        ring[i] = ht_queue_pop(q);
    if (q->ring != q->inl)
        free(q->ring);
    q->ring = ring;
    q->cap = cap;
    q->head = 0;
    q->count = n;
}

ht_value ht_match_or_insert(struct ht_table *t, ht_key k, ht_value v)
{
#ifndef NDEBUG
    if (util_unlikely(v == HT_EMPTY))
        util_fatal("ht_match_or_insert: a NULL request is not a value");
#endif
    struct ht_bucket *head = &t->buckets[ht_hash(k) & t->mask];
    void *spare = NULL;       /* a line allocated outside the lock (I7)   */
    ht_value *spare_ring = NULL;
    uint32_t spare_cap = 0;
    struct ht_queue *garbage = NULL;     /* freed once the lock is dropped */
    struct ht_bucket *dead_bucket = NULL; /* likewise                      */
    ht_value ret = HT_EMPTY;

retry:
    util_spin_lock(&head->lock);
    struct ht_bucket *b = head, *prev = NULL, *last = head;
    struct ht_bucket *free_b = NULL;
    int free_i = -1;
    for (; b; prev = b, b = b->next) {
        last = b;
        for (int i = 0; i < HT_SLOTS; i++) {
            ht_value cur = b->e[i].val;
            if (cur == HT_EMPTY) {
                if (!free_b) {
                    free_b = b;
                    free_i = i;
                }
                continue;
            }
            if (b->e[i].key != k)
                continue;

            /* k waits here (I2). */
            int queued = (b->qmask >> i) & 1u;
            if (!queued) {
                if (ht_kind(cur) != ht_kind(v)) { /* match the one value */
                    ret = cur;
                    goto emptied;
                }
                /* A second value of the same kind: start a queue. */
                if (!spare)
                    goto need_line;
                struct ht_queue *q = spare;
                spare = NULL;
                q->ring = q->inl;
                q->cap = HT_QINLINE;
                q->head = 0;
                q->count = 2;
                q->inl[0] = cur;
                q->inl[1] = v;
                b->e[i].val = (uintptr_t)q | ht_kind(cur);
                b->qmask |= 1u << i;
                goto done;
            }

            struct ht_queue *q = ht_ptr(cur);
            if (ht_kind(cur) != ht_kind(v)) { /* match the oldest (I5) */
                ret = ht_queue_pop(q);
                if (q->count > 0)
                    goto done;
                b->qmask &= ~(1u << i);
                garbage = q;
                goto emptied;
            }
            if (ht_queue_push(q, v) == 0)
                goto done;
            /* Full ring: grow it with memory taken outside the lock. */
            if (spare_ring && spare_cap > q->count) {
                ht_queue_regrow(q, spare_ring, spare_cap);
                spare_ring = NULL;
                ht_queue_push(q, v);
                goto done;
            }
            spare_cap = q->cap * 2;
            util_spin_unlock(&head->lock);
            free(spare_ring);
            spare_ring = malloc(spare_cap * sizeof *spare_ring);
            if (!spare_ring)
                util_fatal("matching table: out of memory for a queue of %u values", spare_cap);
            goto retry;

        emptied:
            b->e[i].val = HT_EMPTY;
            if (b != head && b->e[0].val == HT_EMPTY && b->e[1].val == HT_EMPTY &&
                b->e[2].val == HT_EMPTY) { /* keep I6 */
                prev->next = b->next;
                dead_bucket = b;
            }
            goto done;
        }
    }

    /* k is not in the table: v waits in the first free entry, or in a new
     * overflow bucket at the chain's end. */
    if (free_b) {
        free_b->e[free_i].key = k;
        free_b->e[free_i].val = v;
        goto done;
    }
    if (!spare)
        goto need_line;
    struct ht_bucket *nb = spare;
    spare = NULL;
    memset(nb, 0, sizeof *nb);
    nb->e[0].key = k;
    nb->e[0].val = v;
    last->next = nb;

done:
    util_spin_unlock(&head->lock);
    /* Only rare paths leave something to free: test before calling. */
    if (util_unlikely(garbage || dead_bucket || spare || spare_ring)) {
        if (garbage)
            ht_queue_free(garbage);
        free(dead_bucket);
        free(spare);
        free(spare_ring);
    }
    return ret;

need_line:
    util_spin_unlock(&head->lock);
    spare = ht_line_alloc();
    goto retry;
}

size_t ht_count(struct ht_table *t)
{
    size_t n = 0;
    for (size_t i = 0; i <= t->mask; i++) {
        struct ht_bucket *head = &t->buckets[i];
        util_spin_lock(&head->lock);
        for (struct ht_bucket *b = head; b; b = b->next)
            for (int j = 0; j < HT_SLOTS; j++) {
                if (b->e[j].val == HT_EMPTY)
                    continue;
                if (b->qmask & (1u << j))
                    n += ((struct ht_queue *)ht_ptr(b->e[j].val))->count;
                else
                    n++;
            }
        util_spin_unlock(&head->lock);
    }
    return n;
}
