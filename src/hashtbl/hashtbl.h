/*
 * hashtbl.h — the matching table shared by worker ULTs and the server (see
 * DESIGN.md, "Matching table").
 *
 * Key (64 bits): | context:12 | source rank:20 | tag:32 | (the HT_*_BITS
 * and HT_*_SHIFT macros below are the one definition of this layout; derive
 * masks from them). A context is a communicator's user or collective
 * traffic (src/proto/comm.c: communicator id c uses contexts 2c and 2c+1),
 * so collectives never match user tags and communicators never match each
 * other. User tags are 0..MPIV_TAG_MAX (31 bits), ranks 0..MPIV_RANK_MAX
 * (20 bits: the source's rank in the job, not in the communicator).
 * Limits this implies: at most 2^20 = 1,048,576 ranks per job, 4,096
 * contexts (2,048 communicators), and 31 tag bits (mpiv.h reserves bit 31).
 * ht_make_key masks each field, so an out-of-range rank or context can
 * never alias another field, but it truncates silently: the public API
 * must reject out-of-range ranks and tags (MPIV_ERR_RANK / MPIV_ERR_TAG)
 * before building a key. The table hashes all 64 bits, so any field may
 * vary.
 *
 * Value: a tagged pointer. Bit 0 says what it points to: HT_KIND_REQ, a
 * posted receive request; HT_KIND_PKT, an arrived packet (or any object the
 * arriving side stands for). Pointers must be at least 2-byte aligned.
 *
 * ht_match_or_insert(t, k, v) is the only operation the protocols need: if
 * values of the other kind wait under k, the oldest is removed and returned
 * (a match); otherwise v is queued under k behind any values of its own kind
 * and HT_EMPTY is returned. Equal keys are therefore first-in, first-out on
 * both sides, which keeps MPI's non-overtaking rule.
 */
#ifndef MPIV_HASHTBL_H
#define MPIV_HASHTBL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

/* The world communicator's two contexts (comm.c gives the others). */
enum ht_ctx { HT_CTX_USER = 0, HT_CTX_COLL = 1 };

#define HT_TAG_BITS 32
#define HT_RANK_BITS 20
#define HT_CTX_BITS (64 - HT_RANK_BITS - HT_TAG_BITS)
#define HT_RANK_SHIFT HT_TAG_BITS
#define HT_CTX_SHIFT (HT_TAG_BITS + HT_RANK_BITS)
#define HT_TAG_MASK ((uint64_t)0xffffffffu)
#define HT_RANK_MASK (((uint64_t)1 << HT_RANK_BITS) - 1) /* of the field, unshifted */
#define HT_CTX_MASK (((uint64_t)1 << HT_CTX_BITS) - 1)   /* of the field, unshifted */
#define HT_CTX_COUNT (1u << HT_CTX_BITS)
/* The source rank of key k (what ht_make_key stored). */
#define HT_KEY_RANK(k) ((uint32_t)(((k) >> HT_RANK_SHIFT) & HT_RANK_MASK))
#define HT_KEY_CTX(k) ((unsigned)(((k) >> HT_CTX_SHIFT) & HT_CTX_MASK))

typedef uint64_t ht_key;
typedef uintptr_t ht_value;

#define HT_EMPTY ((ht_value)0)
/* Returned instead of queueing when the gate is open (ht_gate_add): the
 * caller must take its ordered path. Never a pointer. */
#define HT_DEFER ((ht_value)2)
#define HT_KIND_REQ ((uintptr_t)0)
#define HT_KIND_PKT ((uintptr_t)1)

static inline ht_key ht_make_key(unsigned ctx, uint32_t rank, uint32_t tag)
{
    return ((uint64_t)(ctx & HT_CTX_MASK) << HT_CTX_SHIFT) |
           ((uint64_t)(rank & HT_RANK_MASK) << HT_RANK_SHIFT) | tag;
}

/* The bits of each field, derived from ht_make_key itself (it masks each
 * field), so that a change of the layout above changes them too: nothing
 * else may hard-code a bit position. */
static inline ht_key ht_key_ctx_bits(void) { return ht_make_key(~0u, 0, 0); }
static inline ht_key ht_key_rank_bits(void) { return ht_make_key(0, ~0u, 0); }
static inline ht_key ht_key_tag_bits(void) { return ht_make_key(0, 0, ~0u); }

/* Wildcard patterns: a key k fits (pattern, mask) iff (k & mask) ==
 * pattern. any_rank / any_tag leave that field out of the mask (and the
 * pattern); the context always takes part. */
static inline ht_key ht_wild_mask(bool any_rank, bool any_tag)
{
    ht_key m = ~(ht_key)0;
    if (any_rank)
        m &= ~ht_key_rank_bits();
    if (any_tag)
        m &= ~ht_key_tag_bits();
    return m;
}
static inline bool ht_key_fits(ht_key k, ht_key pattern, ht_key mask)
{
    return (k & mask) == pattern;
}

static inline ht_value ht_val(void *p, uintptr_t kind) { return (uintptr_t)p | kind; }
static inline uintptr_t ht_kind(ht_value v) { return v & 1u; }
static inline void *ht_ptr(ht_value v) { return (void *)(v & ~(uintptr_t)1); }

struct ht_table;

/* Largest initial size ht_create commits (64 B a bucket: 64 MiB). */
#define HT_INIT_BUCKETS_MAX ((size_t)1 << 20)

/* nbuckets: the initial size, a power of two (0 = 1024); it also fixes the
 * number of stripes (locks), nbuckets / 4 within 1..4096. The table grows
 * as values wait and shrinks back to this size as they leave, so the size
 * is a hint: more than HT_INIT_BUCKETS_MAX is taken as that many.
 * MPIV_ERR_ARG if nbuckets is not a power of two, MPIV_ERR_NO_RESOURCES on
 * no memory. */
int ht_create(struct ht_table **t, size_t nbuckets);
void ht_destroy(struct ht_table *t);

/* v must not be HT_EMPTY (a NULL request pointer). Never fails: running
 * out of memory to grow the table or a per-key queue is fatal. */
ht_value ht_match_or_insert(struct ht_table *t, ht_key k, ht_value v);

/* The match half alone: if values of the other kind than `kind` wait
 * under k, the oldest is removed and returned; otherwise nothing changes
 * and HT_EMPTY is returned. For an arrival that is cheaper to handle
 * without a copy when a receive waits (kind HT_KIND_PKT): a receive only
 * waits under k while no message of k does, so taking it keeps FIFO; if
 * none waits, the caller inserts a copy with ht_match_or_insert, which
 * still matches a receive posted in between. */
ht_value ht_match(struct ht_table *t, ht_key k, uintptr_t kind);

/* ht_match for a run of arrivals under one key: takes the oldest values of
 * the other kind than `kind` waiting under k, up to max of them, oldest
 * first, into out; returns how many (0 if none waits). One lock and one
 * walk for the lot, so a batch of messages that carry one key (a window
 * of sends with one tag) pays for one lookup. Gated like ht_match: with
 * kind HT_KIND_PKT and the gate open it takes nothing (0), and each
 * arrival goes its own way (ht_match then says HT_DEFER). */
size_t ht_match_many(struct ht_table *t, ht_key k, uintptr_t kind, ht_value *out, size_t max);

/* Asks the processor for the first two buckets that k's lookup may read
 * (its home bucket and the next, where linear probing puts a key whose
 * home is full: at up to two keys per 3-entry bucket, often), so that a
 * batch of lookups can overlap their misses. Only a hint: it takes no
 * lock, and a table being resized meanwhile only wastes it. */
void ht_prefetch(struct ht_table *t, ht_key k);
/* Asks for the line of k's stripe, which ht_prefetch(k) reads (and stalls
 * on if it misses): a step earlier in a pipeline of prefetches. Reads
 * nothing itself. */
void ht_prefetch_stripe(struct ht_table *t, ht_key k);
/* Whether the table has grown past the size it started with (judged by
 * one stripe, without its lock: the stripes grow together, keys being
 * spread over them by hash): then lookups miss the cache, and prefetching
 * pays. */
bool ht_grown(struct ht_table *t);

/* --- the gate and the ordered path (wildcards, probes) ---------------------
 *
 * The table knows nothing of wildcards; it offers their owner (proto's
 * match.c) a gate and a few unordered-key primitives. While the gate's
 * count is non-zero (some wildcard receive or probe waits), the gated
 * calls above refuse to queue: ht_match_or_insert returns HT_DEFER instead
 * of queueing a value of either kind, and for a value of kind HT_KIND_PKT
 * (an arrival) it returns HT_DEFER before even matching, as does ht_match
 * with kind HT_KIND_PKT; a request (HT_KIND_REQ) still takes a message
 * waiting under its key. The gate is read under the stripe's lock: an
 * operation on a stripe that locks it after an opener locked it (a walk of
 * the table) sees the gate open; one that locked it before is seen by the
 * walk. Closed, the gated calls cost one more load of a line that only
 * changes when the gate does. */
void ht_gate_add(struct ht_table *t, long delta);
bool ht_gate_is_open(struct ht_table *t);

/* Called under a stripe's lock with the oldest value of the other kind
 * waiting under a key: true takes it. Must not use the table. */
typedef bool (*ht_pref_fn)(ht_value oldest, void *arg);

/* Ungated ht_match_or_insert for the ordered path: if values of the other
 * kind than v's wait under k, the oldest is offered to pref (NULL: taken
 * always); if taken it is removed and returned, if declined nothing
 * changes and HT_EMPTY is returned. If none waits, v is queued when
 * `insert` (else nothing changes); HT_EMPTY. With insert false, v only
 * gives the kind (v may be (ht_value)kind, as for ht_match). */
ht_value ht_match_pref(struct ht_table *t, ht_key k, ht_value v, ht_pref_fn pref, void *arg,
                       bool insert);

/* Calls fn(k, v, arg) under the stripe's lock for every key k with
 * ht_key_fits(k, pattern, mask) whose waiting values are of `kind`, with v
 * the oldest of them (the one a match would take). fn must not use the
 * table. Walks the whole table, like ht_remove_if. */
void ht_visit_oldest(struct ht_table *t, ht_key pattern, ht_key mask, uintptr_t kind,
                     void (*fn)(ht_key k, ht_value v, void *arg), void *arg);

/* Removes v if it is the oldest value waiting under k: true; else (it
 * left meanwhile, or is not the oldest) nothing changes, false. */
bool ht_take_oldest(struct ht_table *t, ht_key k, ht_value v);

/* Number of values waiting in the table (both kinds). Locks each bucket in
 * turn: exact only when no one inserts concurrently (tests, finalize). */
size_t ht_count(struct ht_table *t);

/* Takes out every waiting value v (of either kind, under any key k) for
 * which pred(k, v, arg) holds, and calls fn(v, arg) on each once the
 * table's locks are dropped (fn may use the table). Equal keys keep their
 * order among the values left. For the rare paths: cancelling a posted
 * receive, failing every receive from a rank that died. Walks the whole
 * table: cost in proportion to its size, not to what it removes. Returns
 * how many values it took out. */
size_t ht_remove_if(struct ht_table *t, int (*pred)(ht_key k, ht_value v, void *arg), void *arg,
                    void (*fn)(ht_value v, void *arg));

/* The table's shape, for tests and benchmarks: stripes, buckets now, keys
 * present, and how many times a stripe doubled or halved. Locks each
 * stripe in turn, like ht_count. */
struct ht_stats {
    size_t stripes, buckets, keys, grows, shrinks;
    size_t queue_allocs; /* per-key queue lines and rings allocated */
};
void ht_stats(struct ht_table *t, struct ht_stats *st);

#endif
