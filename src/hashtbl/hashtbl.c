/*
 * hashtbl.c — the matching table: where a posted receive meets an arrived
 * packet (see hashtbl.h for the contract, DESIGN.md for the picture).
 *
 * Layout
 *   The table is a fixed, power-of-two number of stripes. A key's hash
 *   picks its stripe (top bits) and its home bucket inside the stripe (low
 *   bits). Each stripe is a small open-addressed table of its own: a
 *   power-of-two array of 64-byte buckets, each one cache line holding a
 *   control word and three {key, value} entries, under the stripe's own
 *   spinlock. A key that finds its home bucket full goes to the first
 *   bucket after it (linear probing, wrapping) with a free entry.
 *
 *   A stripe doubles its bucket array when it would pass two keys per
 *   bucket (two thirds of its entries) and halves it when it falls under
 *   one key per four buckets, never below the size it started with. Only
 *   that stripe's lock is held while it is rehashed: the other stripes keep
 *   working, there is no global stop. The stripe count itself never
 *   changes, so a key always maps to the same stripe and the same lock.
 *
 *   A key with one waiting value keeps that value inline in its entry: the
 *   unique-key path (insert, then the other side matches) touches the
 *   stripe's line and the home bucket's line, under one lock. When a second
 *   value of the same kind arrives under a key, the entry's value becomes a
 *   pointer to a per-key FIFO (struct ht_queue: one cache line holding a
 *   ring of five values, grown by doubling past that). The queue lives
 *   until it is empty again; then the entry is freed. This is LCI's idea
 *   (a small queue per key) in a form that keeps the common case
 *   allocation-free.
 *
 * Who touches what
 *   t->stripes, t->smask and each stripe's min_mask are written once by
 *   ht_create and only read afterwards (no lock needed). The rest of a
 *   stripe (b, mask, used, grows, shrinks, its buckets and the queues
 *   hanging off them) is read and written only by the holder of that
 *   stripe's lock. ht_count and ht_stats take each stripe's lock in turn.
 *   A resize swaps `b` and `mask` under the lock, so no one ever sees a
 *   half-moved stripe; the old array is freed after the lock is dropped,
 *   when no one can reach it any more.
 *
 * Invariants (per stripe, under its lock)
 *   I1  An entry is free iff its value is HT_EMPTY; its key is then garbage.
 *   I2  A key occupies at most one entry in its stripe.
 *   I3  All values waiting under one key are of one kind: a value of the
 *       other kind never waits, it matches the oldest one instead.
 *   I4  Bit i of a bucket's qmask is set iff entry i is in use and holds a
 *       queue; the entry's value is then (queue pointer | kind of the values
 *       queued), and the queue holds at least one value.
 *   I5  A queue hands its values out in the order they were queued (FIFO).
 *       Every operation on a key runs under the one lock of the key's stripe
 *       and a rehash moves an entry (and with it its queue pointer and qmask
 *       bit) as one unit, so the order of a key's values is exactly the
 *       order in which operations on that key took the lock: equal keys
 *       keep MPI's non-overtaking order on both sides, across resizes.
 *   I6  Probe counts: a bucket's `ovf` is the number of keys whose home
 *       bucket is at or before it and which sit after it, i.e. whose probe
 *       sequence runs through it (for a key at bucket p with home h, every
 *       bucket of the cyclic range [h, p) counts it). A search for a key
 *       stops at the first bucket with ovf == 0: the key cannot lie beyond.
 *       Freeing an entry decrements the counts of [h, p) again, so no
 *       tombstones are needed and entries never move except in a rehash.
 *   I7  used <= 2 * buckets before every insertion of a new key (a stripe
 *       grows first), so a stripe always has a free entry and every probe
 *       for a free entry ends.
 *   I8  Memory is never allocated or freed while a lock is held: a new
 *       bucket array, a queue line or a larger ring is allocated with the
 *       lock dropped and the operation starts over (the stripe may have
 *       changed meanwhile: everything is looked up again). Allocation may
 *       make a system call, and a spinlock must never be held across one.
 *   I9  A stripe keeps at most one empty queue (s->keep: count 0, a ring
 *       of at most HT_KEEP_CAP values), only ever reached through the
 *       stripe under its lock: the next key of the stripe that needs a
 *       queue takes it instead of allocating one. A window of receives
 *       (or of messages) under one key builds the same queue every round;
 *       kept, it is neither allocated nor grown again. Freed with the
 *       table.
 *
 * Values must be non-NULL pointers (ht_val(NULL, HT_KIND_REQ) would read
 * as HT_EMPTY). The table owns its buckets and queues, never the values.
 */
#include "hashtbl/hashtbl.h"

#include <stdlib.h>
#include <string.h>

#include "util/spinlock.h"
#include "util/bias.h"

#define HT_SLOTS 3           /* {key, value} entries per bucket            */
#define HT_QINLINE 5         /* values a queue holds before its ring grows */
#define HT_KEEP_CAP 256      /* the largest ring a stripe keeps (I9)        */
#define HT_STRIPES_MAX 4096  /* more locks than this buy nothing           */
#define HT_STRIPE_SHIFT 52   /* hash bits 52..63 pick the stripe           */
#define HT_BUCKETS_PER_STRIPE 4 /* at creation, while stripes are added     */
_Static_assert(HT_STRIPES_MAX <= (1u << (64 - HT_STRIPE_SHIFT)), "stripe bits");

struct ht_entry {
    ht_key key;
    ht_value val;
};

struct ht_bucket {
    uint32_t ovf;   /* keys whose probe runs through this bucket (I6) */
    uint32_t qmask; /* bit i: entry i holds a queue (I4)              */
    uint64_t pad_;
    struct ht_entry e[HT_SLOTS];
};
_Static_assert(sizeof(struct ht_bucket) == UTIL_CACHELINE, "a bucket is one cache line");

/* One line per stripe, so that two threads on neighbouring stripes never
 * share a line. */
struct ht_stripe {
    _Alignas(UTIL_CACHELINE) util_spinlock lock;
    uint32_t pad_;
    struct ht_bucket *b; /* mask + 1 buckets                       */
    size_t mask;
    size_t used;         /* entries in use (keys present)          */
    size_t min_mask;     /* the size it started with: never below  */
    size_t grows, shrinks;
    /* The last queue that emptied here, kept for the next key that needs
     * one (I9), or NULL. */
    struct ht_queue *keep;
};
_Static_assert(sizeof(struct ht_stripe) == UTIL_CACHELINE, "a stripe is one cache line");

struct ht_table {
    struct ht_stripe *stripes;
    size_t smask; /* stripes - 1 */
    /* The gate (hashtbl.h): non-zero while the ordered path is in use. In
     * the same line as the two fields every operation reads anyway. */
    _Atomic long gate;
    /* Queue lines and rings allocated (ht_stats), counted on the slow
     * path only. */
    _Atomic size_t qallocs;
};

/* Relaxed: read under a stripe's lock, and an opener changes it before it
 * locks any stripe, so the lock orders the two (hashtbl.h, the gate). */
static inline bool ht_gate_load(struct ht_table *t)
{
    return atomic_load_explicit(&t->gate, memory_order_relaxed) != 0;
}

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

/* Contexts, ranks and tags sit in separate bit fields of the key. A full
 * 64-bit finaliser (murmur3's fmix64) spreads every input bit over the top
 * bits (the stripe) and the low bits (the bucket) alike, so that
 * neighbouring tags or ranks land in different stripes and buckets. */
static inline uint64_t ht_hash(ht_key k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

/* The stripe that holds the keys of hash h. */
static inline struct ht_stripe *ht_stripe_of(struct ht_table *t, uint64_t h)
{
    return &t->stripes[(h >> HT_STRIPE_SHIFT) & t->smask];
}

static inline size_t ht_home(uint64_t h, size_t mask) { return (size_t)h & mask; }

static void *ht_line_alloc(void)
{
    void *p = aligned_alloc(UTIL_CACHELINE, UTIL_CACHELINE);
    if (!p)
        util_fatal("matching table: out of memory for a 64-byte line");
    return p;
}

/* A zeroed array of n buckets (all entries free, all counts 0), or NULL. */
static struct ht_bucket *ht_buckets_alloc(size_t n)
{
    if (n > SIZE_MAX / sizeof(struct ht_bucket))
        return NULL;
    struct ht_bucket *b = aligned_alloc(UTIL_CACHELINE, n * sizeof *b);
    if (b)
        memset(b, 0, n * sizeof *b);
    return b;
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
    /* The table grows by itself: a larger request only saves a few early
     * doublings, and is not worth committing memory for up front. */
    if (nbuckets > HT_INIT_BUCKETS_MAX)
        nbuckets = HT_INIT_BUCKETS_MAX;
    size_t nstripes = nbuckets / HT_BUCKETS_PER_STRIPE;
    if (nstripes < 1)
        nstripes = 1;
    if (nstripes > HT_STRIPES_MAX)
        nstripes = HT_STRIPES_MAX;
    size_t per = nbuckets / nstripes;

    struct ht_table *tb = malloc(sizeof *tb);
    if (!tb)
        return util_err(MPIV_ERR_NO_RESOURCES, "ht_create: no memory for the table");
    tb->stripes = aligned_alloc(UTIL_CACHELINE, nstripes * sizeof *tb->stripes);
    if (!tb->stripes) {
        free(tb);
        return util_err(MPIV_ERR_NO_RESOURCES, "ht_create: no memory for %zu stripes", nstripes);
    }
    memset(tb->stripes, 0, nstripes * sizeof *tb->stripes);
    tb->smask = nstripes - 1;
    atomic_init(&tb->gate, 0);
    atomic_init(&tb->qallocs, 0);
    for (size_t i = 0; i < nstripes; i++) {
        struct ht_stripe *s = &tb->stripes[i];
        util_spin_init(&s->lock);
        s->mask = s->min_mask = per - 1;
        s->b = ht_buckets_alloc(per);
        if (!s->b) {
            ht_destroy(tb);
            return util_err(MPIV_ERR_NO_RESOURCES, "ht_create: no memory for %zu buckets",
                            nbuckets);
        }
    }
    *t = tb;
    return MPIV_SUCCESS;
}

static void ht_queue_free(struct ht_queue *q)
{
    if (q->ring != q->inl)
        free(q->ring);
    free(q);
}

/* A queue that emptied in stripe s (its lock held): kept for the stripe's
 * next queue if it has none and the ring is small enough (I9), else
 * returned, for the caller to free once the lock is dropped (I8). */
static struct ht_queue *ht_queue_retire(struct ht_stripe *s, struct ht_queue *q)
{
    if (s->keep || q->cap > HT_KEEP_CAP)
        return q;
    s->keep = q;
    return NULL;
}

void ht_destroy(struct ht_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i <= t->smask; i++) {
        struct ht_stripe *s = &t->stripes[i];
        if (!s->b) /* ht_create ran out of memory here */
            break;
        for (size_t j = 0; j <= s->mask; j++)
            for (int e = 0; e < HT_SLOTS; e++)
                if (s->b[j].qmask & (1u << e))
                    ht_queue_free(ht_ptr(s->b[j].e[e].val));
        if (s->keep)
            ht_queue_free(s->keep);
        free(s->b);
    }
    free(t->stripes);
    free(t);
}

static inline ht_value ht_queue_pop(struct ht_queue *q)
{
    ht_value v = q->ring[q->head];
    q->head = q->head + 1 == q->cap ? 0 : q->head + 1;
    q->count--;
    return v;
}

/* Returns 0, or -1 if the ring is full and must grow first (I8). */
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

/* Puts an entry whose key is known to be absent into the first free entry
 * of its probe sequence in `b` (mask + 1 buckets, a free entry exists: I7),
 * counting it in the buckets it passes (I6). */
static void ht_place(struct ht_bucket *b, size_t mask, size_t home, ht_key k, ht_value v,
                     int queued)
{
    for (size_t i = home;; i = (i + 1) & mask) {
        for (int j = 0; j < HT_SLOTS; j++) {
            if (b[i].e[j].val != HT_EMPTY)
                continue;
            b[i].e[j].key = k;
            b[i].e[j].val = v;
            if (queued)
                b[i].qmask |= 1u << j;
            for (size_t x = home; x != i; x = (x + 1) & mask)
                b[x].ovf++;
            return;
        }
    }
}

/* Moves every entry of s into `nb` (n zeroed buckets), installs it and
 * returns the old array for the caller to free once the lock is dropped. */
static struct ht_bucket *ht_rehash(struct ht_stripe *s, struct ht_bucket *nb, size_t n)
{
    struct ht_bucket *old = s->b;
    for (size_t i = 0; i <= s->mask; i++)
        for (int j = 0; j < HT_SLOTS; j++) {
            struct ht_entry *e = &old[i].e[j];
            if (e->val != HT_EMPTY)
                ht_place(nb, n - 1, ht_home(ht_hash(e->key), n - 1), e->key, e->val,
                         (old[i].qmask >> j) & 1u);
        }
    s->b = nb;
    s->mask = n - 1;
    return old;
}

static inline int ht_wants_shrink(const struct ht_stripe *s)
{
    return s->mask > s->min_mask && s->used <= (s->mask + 1) / 4;
}

/* Halves s, if it still wants it once the new array is in hand (I8). A
 * shrink only saves memory: if there is none to be had, s stays as it is. */
static void ht_shrink(struct ht_stripe *s, size_t n_seen)
{
    struct ht_bucket *nb = ht_buckets_alloc(n_seen / 2);
    if (!nb)
        return;
    struct ht_bucket *old = nb;
    util_bias_lock(&s->lock);
    if (s->mask + 1 == n_seen && ht_wants_shrink(s)) {
        old = ht_rehash(s, nb, n_seen / 2);
        s->shrinks++;
    }
    util_bias_unlock(&s->lock);
    free(old);
}

static void ht_entry_clear(struct ht_stripe *s, size_t i, int j);

/* ht_match_or_insert, and ht_match when !insert (v then only gives the
 * kind that looks for a match, and is never stored). gated: honour the
 * gate (hashtbl.h); pref: offered the oldest value of the other kind
 * before it is taken (NULL: always taken). */
static inline __attribute__((always_inline)) ht_value
ht_lookup(struct ht_table *t, ht_key k, ht_value v, bool insert, bool gated, ht_pref_fn pref,
          void *arg)
{
    uint64_t h = ht_hash(k);
    struct ht_stripe *s = ht_stripe_of(t, h);
    void *spare = NULL;       /* a line allocated outside the lock (I8)   */
    ht_value *spare_ring = NULL;
    uint32_t spare_cap = 0;
    struct ht_bucket *spare_arr = NULL; /* a doubled array, likewise      */
    size_t spare_n = 0;
    struct ht_queue *garbage = NULL;    /* freed once the lock is dropped */
    struct ht_bucket *old_arr = NULL;   /* likewise                       */
    size_t shrink_from = 0;             /* halve after unlocking          */
    ht_value ret = HT_EMPTY;

retry:
    util_bias_lock(&s->lock);
    if (gated && ht_kind(v) == HT_KIND_PKT && util_unlikely(ht_gate_load(t))) {
        ret = HT_DEFER;
        goto done;
    }
search:;
    struct ht_bucket *bk = s->b;
    size_t mask = s->mask;
    size_t home = ht_home(h, mask), i = home;
    struct ht_bucket *free_b = NULL;
    int free_j = -1;
    /* I6: the key is in [home, first bucket with ovf == 0]. The bound on
     * the walk only matters if every bucket has a non-zero count. */
    for (size_t walked = 0; walked <= mask; walked++, i = (i + 1) & mask) {
        struct ht_bucket *b = &bk[i];
        for (int j = 0; j < HT_SLOTS; j++) {
            ht_value cur = b->e[j].val;
            if (cur == HT_EMPTY) {
                if (!free_b) {
                    free_b = b;
                    free_j = j;
                }
                continue;
            }
            if (b->e[j].key != k)
                continue;

            /* k waits here (I2). */
            int queued = (b->qmask >> j) & 1u;
            if (!queued) {
                if (ht_kind(cur) != ht_kind(v)) { /* match the one value */
                    if (pref && !pref(cur, arg))
                        goto done;
                    ret = cur;
                    goto emptied;
                }
                if (!insert)
                    goto done;
                if (gated && util_unlikely(ht_gate_load(t))) {
                    ret = HT_DEFER;
                    goto done;
                }
                /* A second value of the same kind: start a queue, the
                 * stripe's kept one if it has one (I9). */
                struct ht_queue *q = s->keep;
                if (q) {
                    s->keep = NULL;
                } else {
                    if (!spare)
                        goto need_line;
                    q = spare;
                    spare = NULL;
                    q->ring = q->inl;
                    q->cap = HT_QINLINE;
                }
                q->head = 0;
                q->count = 2;
                q->ring[0] = cur;
                q->ring[1] = v;
                b->e[j].val = (uintptr_t)q | ht_kind(cur);
                b->qmask |= 1u << j;
                goto done;
            }

            struct ht_queue *q = ht_ptr(cur);
            if (ht_kind(cur) != ht_kind(v)) { /* match the oldest (I5) */
                if (pref && !pref(q->ring[q->head], arg))
                    goto done;
                ret = ht_queue_pop(q);
                if (q->count > 0)
                    goto done;
                b->qmask &= ~(1u << j);
                garbage = ht_queue_retire(s, q);
                goto emptied;
            }
            if (!insert)
                goto done;
            if (gated && util_unlikely(ht_gate_load(t))) {
                ret = HT_DEFER;
                goto done;
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
            util_bias_unlock(&s->lock);
            free(spare_ring);
            spare_ring = malloc(spare_cap * sizeof *spare_ring);
            atomic_fetch_add_explicit(&t->qallocs, 1, memory_order_relaxed);
            if (!spare_ring)
                util_fatal("matching table: out of memory for a queue of %u values", spare_cap);
            goto retry;

        emptied:
            b->e[j].val = HT_EMPTY;
            for (size_t x = home; x != i; x = (x + 1) & mask) /* keep I6 */
                bk[x].ovf--;
            s->used--;
            if (util_unlikely(ht_wants_shrink(s)))
                shrink_from = mask + 1;
            goto done;
        }
        if (b->ovf == 0)
            break;
    }

    if (!insert)
        goto done;
    if (gated && util_unlikely(ht_gate_load(t))) {
        ret = HT_DEFER;
        goto done;
    }
    /* k is not in the stripe: v waits in the first free entry of its probe
     * sequence, once the stripe has room for one more key (I7). */
    if (util_unlikely(s->used >= 2 * (mask + 1))) {
        if (spare_arr && spare_n == 2 * (mask + 1)) {
            old_arr = ht_rehash(s, spare_arr, spare_n);
            spare_arr = NULL;
            s->grows++;
            goto search;
        }
        util_bias_unlock(&s->lock);
        free(spare_arr);
        spare_n = 2 * (mask + 1);
        spare_arr = ht_buckets_alloc(spare_n);
        if (!spare_arr)
            util_fatal("matching table: out of memory for %zu buckets", spare_n);
        goto retry;
    }
    if (free_b) {
        /* The first free entry from home on: the search passed it, so the
         * counts of the buckets before it must count k too. */
        free_b->e[free_j].key = k;
        free_b->e[free_j].val = v;
        for (size_t x = home; &bk[x] != free_b; x = (x + 1) & mask)
            bk[x].ovf++;
    } else {
        ht_place(bk, mask, home, k, v, 0);
    }
    s->used++;

done:
    util_bias_unlock(&s->lock);
    /* Only rare paths leave something to free: test before calling. */
    if (util_unlikely(garbage || old_arr || spare || spare_ring || spare_arr)) {
        if (garbage)
            ht_queue_free(garbage);
        free(old_arr);
        free(spare);
        free(spare_ring);
        free(spare_arr);
    }
    if (util_unlikely(shrink_from))
        ht_shrink(s, shrink_from);
    return ret;

need_line:
    util_bias_unlock(&s->lock);
    spare = ht_line_alloc();
    atomic_fetch_add_explicit(&t->qallocs, 1, memory_order_relaxed);
    goto retry;
}

ht_value ht_match_or_insert(struct ht_table *t, ht_key k, ht_value v)
{
#ifndef NDEBUG
    if (util_unlikely(v == HT_EMPTY))
        util_fatal("ht_match_or_insert: a NULL request is not a value");
#endif
    return ht_lookup(t, k, v, true, true, NULL, NULL);
}

ht_value ht_match(struct ht_table *t, ht_key k, uintptr_t kind)
{
    return ht_lookup(t, k, (ht_value)kind, false, true, NULL, NULL);
}

size_t ht_match_many(struct ht_table *t, ht_key k, uintptr_t kind, ht_value *out, size_t max)
{
    if (!max)
        return 0;
    uint64_t h = ht_hash(k);
    struct ht_stripe *s = ht_stripe_of(t, h);
    struct ht_queue *garbage = NULL;
    size_t got = 0, shrink_from = 0;
    util_bias_lock(&s->lock);
    if (kind == HT_KIND_PKT && util_unlikely(ht_gate_load(t)))
        goto done; /* as ht_match's HT_DEFER: the ordered path decides */
    struct ht_bucket *bk = s->b;
    size_t mask = s->mask, i = ht_home(h, mask);
    for (size_t walked = 0; walked <= mask; walked++, i = (i + 1) & mask) {
        struct ht_bucket *b = &bk[i];
        for (int j = 0; j < HT_SLOTS; j++) {
            ht_value cur = b->e[j].val;
            if (cur == HT_EMPTY || b->e[j].key != k)
                continue;
            if (ht_kind(cur) == kind) /* k's values wait for a match too (I3) */
                goto done;
            if (!((b->qmask >> j) & 1u)) {
                out[got++] = cur;
            } else {
                struct ht_queue *q = ht_ptr(cur);
                /* the oldest first (I5), in at most two stretches of the
                 * ring: from head to its end, then from its start */
                uint32_t take = q->count < max ? q->count : (uint32_t)max;
                uint32_t first = q->cap - q->head < take ? q->cap - q->head : take;
                memcpy(out, q->ring + q->head, first * sizeof *out);
                memcpy(out + first, q->ring, (take - first) * sizeof *out);
                q->head = q->head + take >= q->cap ? q->head + take - q->cap : q->head + take;
                q->count -= take;
                got = take;
                if (q->count > 0)
                    goto done;
                garbage = ht_queue_retire(s, q);
            }
            ht_entry_clear(s, i, j); /* emptied (I1, I4, I6) */
            if (util_unlikely(ht_wants_shrink(s)))
                shrink_from = mask + 1;
            goto done;
        }
        if (b->ovf == 0)
            break;
    }
done:
    util_bias_unlock(&s->lock);
    if (util_unlikely(garbage != NULL))
        ht_queue_free(garbage);
    if (util_unlikely(shrink_from))
        ht_shrink(s, shrink_from);
    return got;
}

ht_value ht_match_pref(struct ht_table *t, ht_key k, ht_value v, ht_pref_fn pref, void *arg,
                       bool insert)
{
    return ht_lookup(t, k, v, insert, false, pref, arg);
}

void ht_gate_add(struct ht_table *t, long delta)
{
    /* Relaxed: the opener's next step is a walk that locks every stripe,
     * and the lock orders the gate for each (hashtbl.h). A close needs no
     * order: a gated call that still sees it open only takes the ordered
     * path, which is always correct. */
    long was = atomic_fetch_add_explicit(&t->gate, delta, memory_order_relaxed);
    if (util_unlikely(was + delta < 0))
        util_fatal("matching table: the gate was closed more often than opened");
}

bool ht_gate_is_open(struct ht_table *t) { return ht_gate_load(t); }

static bool ht_is_value(ht_value oldest, void *arg) { return oldest == (ht_value)arg; }

bool ht_take_oldest(struct ht_table *t, ht_key k, ht_value v)
{
    /* looked for by the other kind, taken only if it is v */
    ht_value other = ht_kind(v) == HT_KIND_PKT ? HT_KIND_REQ : HT_KIND_PKT;
    return ht_lookup(t, k, other, false, false, ht_is_value, (void *)v) == v;
}

void ht_visit_oldest(struct ht_table *t, ht_key pattern, ht_key mask, uintptr_t kind,
                     void (*fn)(ht_key k, ht_value v, void *arg), void *arg)
{
    for (size_t si = 0; si <= t->smask; si++) {
        struct ht_stripe *s = &t->stripes[si];
        util_bias_lock(&s->lock);
        for (size_t i = 0; i <= s->mask; i++) {
            struct ht_bucket *b = &s->b[i];
            for (int j = 0; j < HT_SLOTS; j++) {
                ht_value cur = b->e[j].val;
                if (cur == HT_EMPTY || ht_kind(cur) != kind ||
                    !ht_key_fits(b->e[j].key, pattern, mask))
                    continue;
                if ((b->qmask >> j) & 1u) {
                    struct ht_queue *q = ht_ptr(cur);
                    cur = q->ring[q->head];
                }
                fn(b->e[j].key, cur, arg);
            }
        }
        util_bias_unlock(&s->lock);
    }
}

size_t ht_count(struct ht_table *t)
{
    size_t n = 0;
    for (size_t i = 0; i <= t->smask; i++) {
        struct ht_stripe *s = &t->stripes[i];
        util_bias_lock(&s->lock);
        for (size_t b = 0; b <= s->mask; b++)
            for (int j = 0; j < HT_SLOTS; j++) {
                ht_value v = s->b[b].e[j].val;
                if (v == HT_EMPTY)
                    continue;
                if (s->b[b].qmask & (1u << j))
                    n += ((struct ht_queue *)ht_ptr(v))->count;
                else
                    n++;
            }
        util_bias_unlock(&s->lock);
    }
    return n;
}

void ht_stats(struct ht_table *t, struct ht_stats *st)
{
    memset(st, 0, sizeof *st);
    st->stripes = t->smask + 1;
    st->queue_allocs = atomic_load_explicit(&t->qallocs, memory_order_relaxed);
    for (size_t i = 0; i <= t->smask; i++) {
        struct ht_stripe *s = &t->stripes[i];
        util_bias_lock(&s->lock);
        st->buckets += s->mask + 1;
        st->keys += s->used;
        st->grows += s->grows;
        st->shrinks += s->shrinks;
        util_bias_unlock(&s->lock);
    }
}

/* Frees entry j of bucket i of stripe s (lock held): keeps I6's counts. */
static void ht_entry_clear(struct ht_stripe *s, size_t i, int j)
{
    struct ht_bucket *bk = s->b;
    size_t home = ht_home(ht_hash(bk[i].e[j].key), s->mask);
    bk[i].e[j].val = HT_EMPTY;
    bk[i].qmask &= ~(1u << j);
    for (size_t x = home; x != i; x = (x + 1) & s->mask)
        bk[x].ovf--;
    s->used--;
}

size_t ht_remove_if(struct ht_table *t, int (*pred)(ht_key k, ht_value v, void *arg), void *arg,
                    void (*fn)(ht_value v, void *arg))
{
    /* Found values are handed to fn in batches with every lock dropped, and
     * emptied queues freed likewise (I8); a stripe is walked again after a
     * full batch, since what was taken out cannot match twice. */
    enum { BATCH = 64 };
    ht_value got[BATCH];
    struct ht_queue *dead[BATCH];
    size_t total = 0;
    for (size_t si = 0; si <= t->smask; si++) {
        struct ht_stripe *s = &t->stripes[si];
        int full;
        do {
            int n = 0, nd = 0;
            full = 0;
            util_bias_lock(&s->lock);
            for (size_t i = 0; i <= s->mask && !full; i++) {
                struct ht_bucket *b = &s->b[i];
                for (int j = 0; j < HT_SLOTS && !full; j++) {
                    ht_value cur = b->e[j].val;
                    if (cur == HT_EMPTY)
                        continue;
                    ht_key k = b->e[j].key;
                    if (!((b->qmask >> j) & 1u)) {
                        if (pred(k, cur, arg)) {
                            got[n++] = cur;
                            ht_entry_clear(s, i, j);
                        }
                    } else {
                        /* filter the ring in place, oldest first (I5) */
                        struct ht_queue *q = ht_ptr(cur);
                        uint32_t left = q->count, kept = 0;
                        for (uint32_t x = 0; x < left; x++) {
                            ht_value v = ht_queue_pop(q);
                            if (n < BATCH && pred(k, v, arg))
                                got[n++] = v;
                            else
                                kept += ht_queue_push(q, v) == 0; /* room: one was popped */
                        }
                        if (kept == 0) {
                            dead[nd++] = q;
                            ht_entry_clear(s, i, j);
                        }
                    }
                    full = n == BATCH || nd == BATCH;
                }
            }
            util_bias_unlock(&s->lock);
            for (int x = 0; x < nd; x++)
                ht_queue_free(dead[x]);
            for (int x = 0; x < n; x++)
                fn(got[x], arg);
            total += (size_t)n;
        } while (full);
    }
    return total;
}

/* Reads the stripe's array and size without its lock: a stale pair only
 * prefetches a line that is no longer (or not yet) the key's, or one of
 * a freed array, which a prefetch may touch (it never faults). Not
 * instrumented by TSan for that reason. */
__attribute__((no_sanitize("thread"))) void ht_prefetch(struct ht_table *t, ht_key k)
{
    uint64_t h = ht_hash(k);
    struct ht_stripe *s = ht_stripe_of(t, h);
    struct ht_bucket *b = s->b;
    size_t mask = s->mask;
    size_t home = ht_home(h, mask);
    __builtin_prefetch(&b[home]);
    __builtin_prefetch(&b[(home + 1) & mask]);
}

void ht_prefetch_stripe(struct ht_table *t, ht_key k)
{
    __builtin_prefetch(ht_stripe_of(t, ht_hash(k)));
}

__attribute__((no_sanitize("thread"))) bool ht_grown(struct ht_table *t)
{
    return t->stripes[0].mask > t->stripes[0].min_mask;
}
