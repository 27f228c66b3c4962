/* Unit tests for src/hashtbl: matching, per-key FIFO on both sides,
 * collisions and overflow chains, key packing. Single-threaded; the
 * concurrent checks are in test_hashtbl_stress.c. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "hashtbl/hashtbl.h"

/* Objects the table points to: aligned, distinguishable. */
struct obj {
    _Alignas(8) int id;
};

static struct obj reqs[4096], pkts[4096];

static ht_value R(int i) { return ht_val(&reqs[i], HT_KIND_REQ); }
static ht_value P(int i) { return ht_val(&pkts[i], HT_KIND_PKT); }

START_TEST(create_rejects_bad_sizes)
{
    struct ht_table *t = (void *)1;
    ck_assert_int_eq(ht_create(&t, 1000), MPIV_ERR_ARG);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(ht_create(NULL, 1024), MPIV_ERR_ARG);
    ck_assert_int_eq(ht_create(&t, 0), MPIV_SUCCESS); /* default size */
    ck_assert_uint_eq(ht_count(t), 0);
    ht_destroy(t);
    ck_assert_int_eq(ht_create(&t, 1), MPIV_SUCCESS);
    ht_destroy(t);
    ht_destroy(NULL);
}
END_TEST

START_TEST(req_then_pkt_and_pkt_then_req)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 64), MPIV_SUCCESS);
    ht_key k = ht_make_key(HT_CTX_USER, 3, 42);
    ck_assert_uint_eq(ht_match_or_insert(t, k, R(0)), HT_EMPTY);
    ck_assert_uint_eq(ht_count(t), 1);
    ht_value m = ht_match_or_insert(t, k, P(0));
    ck_assert_uint_eq(m, R(0));
    ck_assert_uint_eq(ht_kind(m), HT_KIND_REQ);
    ck_assert_ptr_eq(ht_ptr(m), &reqs[0]);
    ck_assert_uint_eq(ht_count(t), 0);

    ck_assert_uint_eq(ht_match_or_insert(t, k, P(1)), HT_EMPTY);
    m = ht_match_or_insert(t, k, R(1));
    ck_assert_uint_eq(m, P(1));
    ck_assert_uint_eq(ht_kind(m), HT_KIND_PKT);
    ck_assert_ptr_eq(ht_ptr(m), &pkts[1]);
    ck_assert_uint_eq(ht_count(t), 0);
    ht_destroy(t);
}
END_TEST

START_TEST(keys_differing_in_any_field_do_not_match)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 16), MPIV_SUCCESS);
    ht_key base = ht_make_key(HT_CTX_USER, 5, 7);
    ht_key others[] = {
        ht_make_key(HT_CTX_COLL, 5, 7), ht_make_key(HT_CTX_COUNT - 1, 5, 7),
        ht_make_key(HT_CTX_USER, 6, 7), ht_make_key(HT_CTX_USER, 5, 8),
        ht_make_key(HT_CTX_USER, MPIV_RANK_MAX, MPIV_TAG_MAX),
        ht_make_key(HT_CTX_USER, 0, 0),
    };
    ck_assert_uint_eq(ht_match_or_insert(t, base, R(0)), HT_EMPTY);
    for (int i = 0; i < 6; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, others[i], P(i)), HT_EMPTY);
    ck_assert_uint_eq(ht_count(t), 7);
    ck_assert_uint_eq(ht_match_or_insert(t, base, P(10)), R(0));
    for (int i = 0; i < 6; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, others[i], R(10 + i)), P(i));
    ck_assert_uint_eq(ht_count(t), 0);
    ht_destroy(t);
}
END_TEST

START_TEST(key_packing_fields)
{
    ht_key k = ht_make_key(0xabc, 0x12345, 0x89abcdefu);
    ck_assert_uint_eq(HT_KEY_CTX(k), 0xabc);
    ck_assert_uint_eq(HT_KEY_RANK(k), 0x12345);
    ck_assert_uint_eq(k & HT_TAG_MASK, 0x89abcdefu);
    ck_assert_uint_eq(HT_CTX_BITS + HT_RANK_BITS + HT_TAG_BITS, 64);
    ck_assert_uint_eq(HT_RANK_MASK, MPIV_RANK_MAX);
    /* Out-of-range ranks cannot bleed into the context. */
    ck_assert_uint_eq(HT_KEY_CTX(ht_make_key(0, 0xfff00001u, 0)), 0);
}
END_TEST

/* n values of one kind under one key come out in the order they went in,
 * for both kinds, crossing the queue's inline capacity and ring growth. */
static void fifo_one_key(int n, uintptr_t first_kind)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 8), MPIV_SUCCESS);
    ht_key k = ht_make_key(HT_CTX_USER, 1, 1);
    ht_value (*waiting)(int) = first_kind == HT_KIND_REQ ? R : P;
    ht_value (*arriving)(int) = first_kind == HT_KIND_REQ ? P : R;
    for (int i = 0; i < n; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, k, waiting(i)), HT_EMPTY);
    ck_assert_uint_eq(ht_count(t), (size_t)n);
    for (int i = 0; i < n; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, k, arriving(i)), waiting(i));
    ck_assert_uint_eq(ht_count(t), 0);
    /* The key is gone: the next value waits again. */
    ck_assert_uint_eq(ht_match_or_insert(t, k, arriving(0)), HT_EMPTY);
    ck_assert_uint_eq(ht_match_or_insert(t, k, waiting(0)), arriving(0));
    ht_destroy(t);
}

START_TEST(fifo_requests)
{
    int sizes[] = {2, 3, 5, 6, 17, 1000};
    for (int i = 0; i < 6; i++)
        fifo_one_key(sizes[i], HT_KIND_REQ);
}
END_TEST

START_TEST(fifo_packets)
{
    int sizes[] = {2, 3, 5, 6, 17, 1000};
    for (int i = 0; i < 6; i++)
        fifo_one_key(sizes[i], HT_KIND_PKT);
}
END_TEST

/* A queue that drains partly and refills keeps its order across the ring's
 * wrap-around and growth. */
START_TEST(fifo_interleaved_with_wraparound)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 4), MPIV_SUCCESS);
    ht_key k = ht_make_key(HT_CTX_USER, 9, 9);
    int in = 0, out = 0;
    for (int round = 0; round < 200; round++) {
        int push = 1 + (round * 7) % 11, pop = 1 + (round * 5) % 9;
        for (int i = 0; i < push; i++, in++)
            ck_assert_uint_eq(ht_match_or_insert(t, k, R(in % 4096)), HT_EMPTY);
        for (int i = 0; i < pop && out < in; i++, out++)
            ck_assert_uint_eq(ht_match_or_insert(t, k, P(0)), R(out % 4096));
        ck_assert_uint_eq(ht_count(t), (size_t)(in - out));
    }
    while (out < in) {
        ck_assert_uint_eq(ht_match_or_insert(t, k, P(0)), R(out % 4096));
        out++;
    }
    ck_assert_uint_eq(ht_count(t), 0);
    ht_destroy(t);
}
END_TEST

static size_t queue_allocs(struct ht_table *t)
{
    struct ht_stats st;
    ht_stats(t, &st);
    return st.queue_allocs;
}

/* I9: a window of values under one key, round after round, builds its
 * queue once: the emptied queue (and its grown ring) is kept by the
 * stripe and taken by the next round, in FIFO order every time. */
START_TEST(emptied_queue_is_kept_for_the_next)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 64), MPIV_SUCCESS);
    ht_key k = ht_make_key(HT_CTX_USER, 3, 77);
    size_t first = 0;
    for (int round = 0; round < 100; round++) {
        for (int i = 0; i < 64; i++)
            ck_assert_uint_eq(ht_match_or_insert(t, k, R(i)), HT_EMPTY);
        for (int i = 0; i < 64; i++)
            ck_assert_uint_eq(ht_match_or_insert(t, k, P(0)), R(i));
        ck_assert_uint_eq(ht_count(t), 0);
        if (round == 0)
            first = queue_allocs(t);
    }
    ck_assert_uint_gt(first, 0);
    ck_assert_uint_eq(queue_allocs(t), first);
    /* windows of other sizes reuse it too, in order, and may grow it */
    for (int round = 0; round < 200; round++) {
        int n = 2 + (round * 37) % 150;
        ht_key kk = ht_make_key(HT_CTX_USER, 3, (uint32_t)(round % 3));
        for (int i = 0; i < n; i++)
            ck_assert_uint_eq(ht_match_or_insert(t, kk, P(i)), HT_EMPTY);
        for (int i = 0; i < n; i++)
            ck_assert_uint_eq(ht_match_or_insert(t, kk, R(0)), P(i));
    }
    ck_assert_uint_eq(ht_count(t), 0);
    ht_destroy(t); /* frees the kept queues (LeakSanitizer) */
}
END_TEST

/* ht_match_many: the oldest values of the other kind, oldest first, up to
 * max, across the end of a queue's ring; the inline value of a key with
 * one; nothing for a key whose values are of the asking kind, nor with
 * max 0; nothing for an arrival while the gate is open (but a receive
 * still takes messages). An emptied queue is kept for the next key. */
START_TEST(match_many_takes_the_oldest_in_order)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 64), MPIV_SUCCESS);
    ht_key k = ht_make_key(HT_CTX_USER, 1, 5), other = ht_make_key(HT_CTX_USER, 1, 6);
    ht_value out[256];
    int in = 0, taken = 0;
    /* a ring of 8 after growing past 5: push and take so that head wraps */
    for (int round = 0; round < 40; round++) {
        int push = 1 + round % 7;
        for (int i = 0; i < push; i++, in++)
            ck_assert_uint_eq(ht_match_or_insert(t, k, R(in)), HT_EMPTY);
        size_t max = (size_t)(round % 5);
        size_t n = ht_match_many(t, k, HT_KIND_PKT, out, max);
        size_t want = (size_t)(in - taken) < max ? (size_t)(in - taken) : max;
        ck_assert_uint_eq(n, want);
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(out[i], R(taken + (int)i));
        taken += (int)n;
        ck_assert_uint_eq(ht_count(t), (size_t)(in - taken));
    }
    /* the rest in one go (asking for more than wait), then nothing */
    ck_assert_uint_lt((size_t)(in - taken), 256);
    ck_assert_uint_eq(ht_match_many(t, k, HT_KIND_PKT, out, 256), (size_t)(in - taken));
    for (int i = 0; taken + i < in; i++)
        ck_assert_uint_eq(out[i], R(taken + i));
    ck_assert_uint_eq(ht_count(t), 0);
    ck_assert_uint_eq(ht_match_many(t, k, HT_KIND_PKT, out, 8), 0);
    /* the emptied queue went to the stripe: another key's queue takes it
     * (or it went as garbage: either way no leak, and FIFO below) */
    size_t allocs = queue_allocs(t);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, k, P(i)), HT_EMPTY);
    ck_assert_uint_eq(queue_allocs(t), allocs);
    /* same kind waits: nothing; max 0: nothing */
    ck_assert_uint_eq(ht_match_many(t, k, HT_KIND_PKT, out, 8), 0);
    ck_assert_uint_eq(ht_match_many(t, k, HT_KIND_REQ, out, 0), 0);
    ck_assert_uint_eq(ht_count(t), 3);
    /* the gate: arrivals take nothing, a receive still takes messages */
    ck_assert_uint_eq(ht_match_or_insert(t, other, R(100)), HT_EMPTY);
    ht_gate_add(t, 1);
    ck_assert_uint_eq(ht_match_many(t, other, HT_KIND_PKT, out, 8), 0);
    ck_assert_uint_eq(ht_match_many(t, k, HT_KIND_REQ, out, 2), 2);
    ck_assert_uint_eq(out[0], P(0));
    ck_assert_uint_eq(out[1], P(1));
    ht_gate_add(t, -1);
    /* one inline value: taken, the key leaves */
    ck_assert_uint_eq(ht_match_many(t, other, HT_KIND_PKT, out, 8), 1);
    ck_assert_uint_eq(out[0], R(100));
    ck_assert_uint_eq(ht_match_many(t, k, HT_KIND_REQ, out, 8), 1);
    ck_assert_uint_eq(out[0], P(2));
    ck_assert_uint_eq(ht_count(t), 0);
    ht_destroy(t);
}
END_TEST

/* I9's bound: a ring of more than HT_KEEP_CAP (256) values is not kept,
 * so the next round allocates again. */
START_TEST(big_queue_is_not_kept)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 64), MPIV_SUCCESS);
    ht_key k = ht_make_key(HT_CTX_USER, 1, 1);
    size_t allocs[3];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 1000; i++)
            ck_assert_uint_eq(ht_match_or_insert(t, k, R(i)), HT_EMPTY);
        for (int i = 0; i < 1000; i++)
            ck_assert_uint_eq(ht_match_or_insert(t, k, P(0)), R(i));
        allocs[round] = queue_allocs(t);
    }
    ck_assert_uint_gt(allocs[1], allocs[0]);
    ck_assert_uint_gt(allocs[2], allocs[1]);
    ht_destroy(t);
}
END_TEST

/* One bucket, many keys: everything lives in overflow chains, entries are
 * freed from the middle of a chain and reused, chains shrink back. */
START_TEST(overflow_chains)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 1), MPIV_SUCCESS);
    enum { N = 300 };
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, 0, (uint32_t)i), R(i)), HT_EMPTY);
    /* a second request under every third key: queues inside the chain */
    for (int i = 0; i < N; i += 3)
        ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, 0, (uint32_t)i), R(N + i)),
                          HT_EMPTY);
    ck_assert_uint_eq(ht_count(t), N + N / 3);
    /* match the odd keys first (holes everywhere), then the even ones */
    for (int pass = 1; pass >= 0; pass--)
        for (int i = pass; i < N; i += 2)
            ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, 0, (uint32_t)i), P(i)), R(i));
    ck_assert_uint_eq(ht_count(t), N / 3);
    for (int i = 0; i < N; i += 3)
        ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, 0, (uint32_t)i), P(i)), R(N + i));
    ck_assert_uint_eq(ht_count(t), 0);
    /* refill after the chain shrank */
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(1, 2, (uint32_t)i), P(i)), HT_EMPTY);
    ck_assert_uint_eq(ht_count(t), N);
    ht_destroy(t); /* frees chains and queues with values still waiting */
}
END_TEST

/* Destroying a table with queues and chains still populated frees them
 * (ASan's leak checker watches this one). */
START_TEST(destroy_with_queues)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 2), MPIV_SUCCESS);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 1 + i % 9; j++)
            ht_match_or_insert(t, ht_make_key(0, (uint32_t)i, 0), P(j));
    ht_destroy(t);
}
END_TEST

/* Many distinct keys in a sized table behave like a map. */
START_TEST(many_keys)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 1024), MPIV_SUCCESS);
    enum { N = 4096 };
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, (uint32_t)i % 64, (uint32_t)i / 64), P(i)),
                          HT_EMPTY);
    ck_assert_uint_eq(ht_count(t), N);
    for (int i = N - 1; i >= 0; i--)
        ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, (uint32_t)i % 64, (uint32_t)i / 64), R(i)),
                          P(i));
    ck_assert_uint_eq(ht_count(t), 0);
    ht_destroy(t);
}
END_TEST


/* A table that starts with one bucket takes 100,000 distinct keys (a
 * million posted receives in miniature): it must grow to keep at most two
 * keys per bucket, then shrink back to its initial size as they leave. */
START_TEST(grows_with_keys_and_shrinks_back)
{
    struct ht_table *t;
    struct ht_stats st;
    ck_assert_int_eq(ht_create(&t, 1), MPIV_SUCCESS);
    ht_stats(t, &st);
    ck_assert_uint_eq(st.stripes, 1);
    ck_assert_uint_eq(st.buckets, 1);
    ck_assert(!ht_grown(t));
    enum { N = 100000 };
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(
            ht_match_or_insert(t, ht_make_key(0, (uint32_t)i % 7, (uint32_t)i), R(i % 4096)),
            HT_EMPTY);
    /* the server prefetches for a batch once the table has grown (p2p.c,
     * proto_on_batch): a hint that changes nothing, present key or not */
    ck_assert(ht_grown(t));
    for (int i = 0; i < 64; i++)
        ht_prefetch(t, ht_make_key((unsigned)i, (uint32_t)i % 7, (uint32_t)i * 977u));
    ht_stats(t, &st);
    ck_assert_uint_eq(st.keys, N);
    ck_assert_uint_ge(st.buckets * 2, N);
    ck_assert_uint_le(st.buckets, N); /* and not more than it needs */
    ck_assert_uint_gt(st.grows, 0);
    ck_assert_uint_eq(ht_count(t), N);
    /* match them in another order than they came in */
    for (int i = 0; i < N; i++) {
        int x = (int)(((long)i * 7919) % N);
        ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, (uint32_t)x % 7, (uint32_t)x), P(0)),
                          R(x % 4096));
    }
    ht_stats(t, &st);
    ck_assert_uint_eq(st.keys, 0);
    ck_assert_uint_eq(st.buckets, 1);
    ck_assert_uint_gt(st.shrinks, 0);
    ck_assert_uint_eq(ht_count(t), 0);
    ck_assert(!ht_grown(t));
    ht_destroy(t);
}
END_TEST

/* Many stripes: each grows on its own, the total follows the keys. */
START_TEST(stripes_grow_independently)
{
    struct ht_table *t;
    struct ht_stats st;
    ck_assert_int_eq(ht_create(&t, 2048), MPIV_SUCCESS);
    ht_stats(t, &st);
    ck_assert_uint_eq(st.stripes, 512);
    ck_assert_uint_eq(st.buckets, 2048);
    enum { N = 200000 };
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, 1, (uint32_t)i), P(i % 4096)),
                          HT_EMPTY);
    ht_stats(t, &st);
    ck_assert_uint_ge(st.buckets * 2, N);
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, 1, (uint32_t)i), R(0)), P(i % 4096));
    ht_stats(t, &st);
    ck_assert_uint_eq(st.buckets, 2048);
    ck_assert_uint_eq(ht_count(t), 0);
    ht_destroy(t);
}
END_TEST

/* Random operations checked one by one against a model (a FIFO per key of
 * value ids and kinds), while the load swings up and down so that the one
 * stripe grows and shrinks many times with queues, probe runs that wrap
 * around the array and holes in the middle of them. */
struct model_q {
    int kind, head, n;
    int ids[64];
};

static uint32_t xs32(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

START_TEST(random_ops_match_a_model)
{
    enum { NKEYS = 30000, OPS = 400000 };
    static struct model_q m[NKEYS];
    static int waiting[NKEYS], where[NKEYS]; /* the keys with values waiting */
    int nwaiting = 0;
    memset(m, 0, sizeof m);
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 2), MPIV_SUCCESS);
    uint32_t rng = 12345;
    size_t live = 0;
    int next_id = 0;
    for (int op = 0; op < OPS; op++) {
        /* A slow wave. Fill phases add values of random kinds under random
         * keys (one op in three among 40 keys, which makes queues), so the
         * stripe grows. Drain phases mostly pick a key with values waiting
         * and post the other kind, so keys leave and the stripe shrinks. */
        int drain = (op / 20000) & 1;
        int k, kind;
        if (drain && nwaiting > 0 && xs32(&rng) % 100 < 90) {
            k = waiting[xs32(&rng) % (uint32_t)nwaiting];
            kind = !m[k].kind;
        } else {
            k = (int)(xs32(&rng) % (op % 3 ? NKEYS : 40));
            kind = (int)(xs32(&rng) & 1);
        }
        ht_key key = ht_make_key((unsigned)k % 3, (uint32_t)k % 11, (uint32_t)k);
        struct model_q *q = &m[k];
        if (xs32(&rng) % 8 == 0) {
            /* a run of arrivals (or posts) under k matched at once: the
             * oldest of the other kind, up to max, oldest first */
            ht_value many[24];
            size_t max = xs32(&rng) % 24;
            size_t n = ht_match_many(t, key, kind ? HT_KIND_PKT : HT_KIND_REQ, many, max);
            size_t want = q->n > 0 && q->kind != kind ? ((size_t)q->n < max ? (size_t)q->n : max)
                                                      : 0;
            ck_assert_msg(n == want, "op %d key %d: took %zu of %zu", op, k, n, want);
            for (size_t i = 0; i < n; i++) {
                int id = q->ids[q->head];
                ck_assert_msg(many[i] == (kind ? R(id) : P(id)), "op %d key %d: value %zu", op,
                              k, i);
                q->head = (q->head + 1) % 64;
                q->n--;
                live--;
            }
            if (n > 0 && q->n == 0) {
                int last = waiting[--nwaiting];
                waiting[where[k]] = last;
                where[last] = where[k];
            }
            continue;
        }
        int id = next_id++ % 4096;
        ht_value v = kind ? P(id) : R(id);
        ht_value got = ht_match_or_insert(t, key, v);
        if (q->n > 0 && q->kind != kind) {
            int want = q->ids[q->head];
            q->head = (q->head + 1) % 64;
            q->n--;
            live--;
            ck_assert_msg(got == (kind ? R(want) : P(want)), "op %d key %d: wrong match", op, k);
            if (q->n == 0) { /* k leaves the waiting set */
                int last = waiting[--nwaiting];
                waiting[where[k]] = last;
                where[last] = where[k];
            }
        } else if (q->n == 64) {
            /* the model is full: undo by matching it away again */
            ck_assert_uint_eq(got, HT_EMPTY);
            ht_value back = ht_match_or_insert(t, key, kind ? R(0) : P(0));
            ck_assert_uint_eq(back, kind ? P(q->ids[q->head]) : R(q->ids[q->head]));
            q->ids[q->head] = id;
            q->head = (q->head + 1) % 64;
        } else {
            ck_assert_msg(got == HT_EMPTY, "op %d key %d: matched nothing waiting", op, k);
            if (q->n == 0) {
                where[k] = nwaiting;
                waiting[nwaiting++] = k;
            }
            q->kind = kind;
            q->ids[(q->head + q->n) % 64] = id;
            q->n++;
            live++;
        }
        if (op % 50000 == 0)
            ck_assert_uint_eq(ht_count(t), live);
    }
    struct ht_stats st;
    ht_stats(t, &st);
    ck_assert_uint_gt(st.grows, 3);
    ck_assert_uint_gt(st.shrinks, 3);
    ck_assert_uint_eq(ht_count(t), live);
    /* drain: every key hands out the rest of its queue in order */
    for (int k = 0; k < NKEYS; k++) {
        struct model_q *q = &m[k];
        ht_key key = ht_make_key((unsigned)k % 3, (uint32_t)k % 11, (uint32_t)k);
        for (; q->n > 0; q->n--, q->head = (q->head + 1) % 64)
            ck_assert_uint_eq(ht_match_or_insert(t, key, q->kind ? R(0) : P(0)),
                              q->kind ? P(q->ids[q->head]) : R(q->ids[q->head]));
    }
    ck_assert_uint_eq(ht_count(t), 0);
    ht_stats(t, &st);
    ck_assert_uint_eq(st.buckets, 2);
    ht_destroy(t);
}
END_TEST

/* MPIV_HT_BUCKETS used to allocate and clear its whole size up front (its
 * maximum, 2^26 buckets, took 4.2 GB and 29 s). Now a size past
 * HT_INIT_BUCKETS_MAX only starts the table at that size. */
START_TEST(huge_initial_size_is_capped)
{
    struct ht_table *t;
    struct ht_stats st;
    ck_assert_int_eq(ht_create(&t, (size_t)1 << 26), MPIV_SUCCESS);
    ht_stats(t, &st);
    ck_assert_uint_eq(st.buckets, HT_INIT_BUCKETS_MAX);
    ck_assert_uint_eq(st.stripes, 4096);
    ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, 1, 2), R(1)), HT_EMPTY);
    ck_assert_uint_eq(ht_match_or_insert(t, ht_make_key(0, 1, 2), P(1)), R(1));
    ht_destroy(t);
}
END_TEST

/* The configuration's range for MPIV_HT_BUCKETS stops where ht_create
 * stops committing memory, and says so. */
START_TEST(config_range_of_ht_buckets)
{
    struct util_config c;
    char big[32];
    snprintf(big, sizeof big, "%zu", HT_INIT_BUCKETS_MAX * 2);
    setenv("MPIV_HT_BUCKETS", big, 1);
    util_err_clear();
    ck_assert_int_eq(util_config_load(&c), MPIV_ERR_CONFIG);
    ck_assert_msg(strstr(mpiv_error_detail(), "MPIV_HT_BUCKETS") != NULL, "detail: %s",
                  mpiv_error_detail());
    snprintf(big, sizeof big, "%zu", HT_INIT_BUCKETS_MAX);
    setenv("MPIV_HT_BUCKETS", big, 1);
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.ht_buckets, (int64_t)HT_INIT_BUCKETS_MAX);
    unsetenv("MPIV_HT_BUCKETS");
}
END_TEST

/* ht_remove_if takes out exactly what its predicate names, of both kinds,
 * inline and queued, hands each to its callback once, and keeps the order
 * of what stays (a key's remaining requests still match oldest first). */
static uint64_t objs[64];

static int odd_reqs(ht_key k, ht_value v, void *arg)
{
    (void)k;
    (void)arg;
    return ht_kind(v) == HT_KIND_REQ && ((uint64_t *)ht_ptr(v) - objs) % 2 == 1;
}
static void count_removed(ht_value v, void *arg)
{
    (void)v;
    ++*(int *)arg;
}

START_TEST(remove_if_keeps_the_rest_in_order)
{
    struct ht_table *t;
    ck_assert_int_eq(ht_create(&t, 16), MPIV_SUCCESS);
    /* key 1: a queue of 10 requests; keys 100..139: one request each;
     * key 2: one packet (never removed: it is not a request) */
    for (int i = 0; i < 10; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, 1, ht_val(&objs[i], HT_KIND_REQ)), HT_EMPTY);
    for (int i = 0; i < 40; i++)
        ck_assert_uint_eq(ht_match_or_insert(t, 100 + (ht_key)i, ht_val(&objs[10 + i], HT_KIND_REQ)),
                          HT_EMPTY);
    ck_assert_uint_eq(ht_match_or_insert(t, 2, ht_val(&objs[50], HT_KIND_PKT)), HT_EMPTY);
    int removed = 0;
    size_t n = ht_remove_if(t, odd_reqs, &removed, count_removed);
    ck_assert_uint_eq(n, 25);
    ck_assert_int_eq(removed, 25);
    ck_assert_uint_eq(ht_count(t), 51 - 25);
    /* key 1: the even ones remain, oldest first */
    for (int i = 0; i < 10; i += 2) {
        ht_value v = ht_match_or_insert(t, 1, ht_val(&objs[60], HT_KIND_PKT));
        ck_assert_ptr_eq(ht_ptr(v), &objs[i]);
    }
    ck_assert_uint_eq(ht_match_or_insert(t, 1, ht_val(&objs[60], HT_KIND_PKT)), HT_EMPTY);
    ck_assert_uint_eq(ht_remove_if(t, odd_reqs, &removed, count_removed), 0);
    ht_destroy(t);
}
END_TEST

static Suite *hashtbl_suite(void)
{
    Suite *s = suite_create("hashtbl");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, create_rejects_bad_sizes);
    tcase_add_test(tc, req_then_pkt_and_pkt_then_req);
    tcase_add_test(tc, keys_differing_in_any_field_do_not_match);
    tcase_add_test(tc, key_packing_fields);
    tcase_add_test(tc, fifo_requests);
    tcase_add_test(tc, fifo_packets);
    tcase_add_test(tc, fifo_interleaved_with_wraparound);
    tcase_add_test(tc, overflow_chains);
    tcase_add_test(tc, destroy_with_queues);
    tcase_add_test(tc, many_keys);
    tcase_add_test(tc, grows_with_keys_and_shrinks_back);
    tcase_add_test(tc, stripes_grow_independently);
    tcase_add_test(tc, random_ops_match_a_model);
    tcase_add_test(tc, huge_initial_size_is_capped);
    tcase_add_test(tc, config_range_of_ht_buckets);
    tcase_add_test(tc, remove_if_keeps_the_rest_in_order);
    tcase_add_test(tc, emptied_queue_is_kept_for_the_next);
    tcase_add_test(tc, big_queue_is_not_kept);
    tcase_add_test(tc, match_many_takes_the_oldest_in_order);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = hashtbl_suite);
