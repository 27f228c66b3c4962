/* Concurrent stress test of the matching table: worker threads post
 * requests and a "server" thread posts packets on overlapping keys, as the
 * protocol layer does. Each object carries its key and sequence number, so
 * afterwards we check that every packet matched exactly once, with a
 * request of its own key, in FIFO order per key:
 *  - "exclusive" keys get their requests from one worker only: the i-th
 *    packet must meet the i-th request;
 *  - "shared" keys get requests from every worker: each worker's requests
 *    must meet packets in increasing sequence order (its own posting order
 *    is a subsequence of the key's FIFO).
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/check_main.h"
#include "hashtbl/hashtbl.h"

#define NWORKERS 3

/* Check's ck_assert writes to a pipe even when it passes: in loops over
 * millions of objects, test first and only call into Check on failure. */
#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond))                                                            \
            ck_abort_msg(__VA_ARGS__);                                          \
    } while (0)

struct msg {
    _Alignas(16) uint32_t key; /* index of the key in keys[] */
    uint32_t seq;              /* packets: per key; requests: per (key, poster) */
    int poster;                /* worker id, or -1 for the server */
    atomic_int matched;
    struct msg *partner;
};

struct run {
    struct ht_table *t;
    int nkeys, nexcl, per_key; /* per_key: packets (and requests) per key */
    ht_key *keys;
    struct msg *reqs; /* [key][per_key] */
    struct msg *pkts; /* [key][per_key] */
    atomic_int bad;   /* count of violations seen by the threads */
    atomic_int go;
};

struct arg {
    struct run *r;
    int id;
};

static void record(struct run *r, struct msg *mine, uintptr_t kind, ht_value m)
{
    if (ht_kind(m) == kind) {
        atomic_fetch_add(&r->bad, 1); /* matched a value of its own kind */
        return;
    }
    struct msg *other = ht_ptr(m);
    struct msg *req = kind == HT_KIND_REQ ? mine : other;
    struct msg *pkt = kind == HT_KIND_REQ ? other : mine;
    if (atomic_fetch_add(&req->matched, 1) != 0 || atomic_fetch_add(&pkt->matched, 1) != 0)
        atomic_fetch_add(&r->bad, 1);
    req->partner = pkt;
    pkt->partner = req;
}

static uint32_t xs(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void wait_go(struct run *r)
{
    while (!atomic_load(&r->go))
        ;
}

static void *worker(void *p)
{
    struct arg *a = p;
    struct run *r = a->r;
    uint32_t rng = 0x1234567u * (uint32_t)(a->id + 1);
    int share = r->per_key / NWORKERS;
    wait_go(r);
    /* Rounds over the keys in a random rotation; one request per key per
     * round (a worker posts all of an exclusive key's requests, a share of
     * a shared key's). */
    for (int round = 0; round < r->per_key; round++) {
        int start = (int)(xs(&rng) % (uint32_t)r->nkeys);
        for (int i = 0; i < r->nkeys; i++) {
            int k = (start + i) % r->nkeys;
            int slot;
            if (k < r->nexcl) {
                if (k % NWORKERS != a->id)
                    continue;
                slot = round;
            } else {
                if (round >= share)
                    continue;
                slot = a->id * share + round;
            }
            struct msg *m = &r->reqs[(size_t)k * r->per_key + slot];
            ht_value got = ht_match_or_insert(r->t, r->keys[k], ht_val(m, HT_KIND_REQ));
            if (got != HT_EMPTY)
                record(r, m, HT_KIND_REQ, got);
        }
    }
    return NULL;
}

static void *server(void *p)
{
    struct arg *a = p;
    struct run *r = a->r;
    uint32_t rng = 0xdeadbeefu;
    wait_go(r);
    for (int seq = 0; seq < r->per_key; seq++) {
        int start = (int)(xs(&rng) % (uint32_t)r->nkeys);
        for (int i = 0; i < r->nkeys; i++) {
            int k = (start + i) % r->nkeys;
            struct msg *m = &r->pkts[(size_t)k * r->per_key + seq];
            ht_value got = ht_match_or_insert(r->t, r->keys[k], ht_val(m, HT_KIND_PKT));
            if (got != HT_EMPTY)
                record(r, m, HT_KIND_PKT, got);
        }
    }
    return NULL;
}

static void verify(struct run *r)
{
    int per_key = r->per_key;
    CHECK(atomic_load(&r->bad) == 0, "%d bad matches seen by the threads", atomic_load(&r->bad));
    size_t left = ht_count(r->t);
    CHECK(left == 0, "%zu values left in the table", left);
    for (int k = 0; k < r->nkeys; k++) {
        int last[NWORKERS] = {-1, -1, -1};
        for (int j = 0; j < per_key; j++) {
            struct msg *q = &r->reqs[(size_t)k * per_key + j];
            struct msg *s = &r->pkts[(size_t)k * per_key + j];
            CHECK(atomic_load(&q->matched) == 1, "key %d request %d matched %d times", k, j,
                  atomic_load(&q->matched));
            CHECK(atomic_load(&s->matched) == 1, "key %d packet %d matched %d times", k, j,
                  atomic_load(&s->matched));
            CHECK(q->partner && q->partner->key == (uint32_t)k && q->partner->partner == q,
                  "key %d request %d met the wrong packet", k, j);
            if (k < r->nexcl) {
                CHECK(q->partner->seq == (uint32_t)j, "key %d: request %d met packet %u", k, j,
                      q->partner->seq);
            } else {
                /* j runs through each poster's requests in posting order */
                CHECK((int)q->partner->seq > last[q->poster],
                      "key %d: worker %d's request %u met packet %u after %d", k, q->poster,
                      q->seq, q->partner->seq, last[q->poster]);
                last[q->poster] = (int)q->partner->seq;
            }
        }
    }
}

static void stress(size_t nbuckets, int nkeys, int nexcl, int per_key)
{
    struct run r = {.nkeys = nkeys, .nexcl = nexcl, .per_key = per_key};
    ck_assert_int_eq(per_key % NWORKERS, 0);
    ck_assert_int_eq(ht_create(&r.t, nbuckets), MPIV_SUCCESS);
    r.keys = calloc((size_t)nkeys, sizeof *r.keys);
    r.reqs = calloc((size_t)nkeys * per_key, sizeof *r.reqs);
    r.pkts = calloc((size_t)nkeys * per_key, sizeof *r.pkts);
    ck_assert(r.keys && r.reqs && r.pkts);
    int share = per_key / NWORKERS;
    for (int k = 0; k < nkeys; k++) {
        /* Distinct keys that differ in every field, some only by context. */
        r.keys[k] = ht_make_key((unsigned)(k % 3), (uint32_t)(k / 3) % 5, (uint32_t)k / 15);
        for (int j = 0; j < per_key; j++) {
            struct msg *q = &r.reqs[(size_t)k * per_key + j];
            struct msg *s = &r.pkts[(size_t)k * per_key + j];
            q->key = s->key = (uint32_t)k;
            s->seq = (uint32_t)j;
            s->poster = -1;
            q->seq = (uint32_t)(k < nexcl ? j : j % share);
            q->poster = k < nexcl ? k % NWORKERS : j / share;
        }
    }
    pthread_t th[NWORKERS + 1];
    struct arg args[NWORKERS + 1];
    for (int i = 0; i <= NWORKERS; i++) {
        args[i] = (struct arg){&r, i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, i < NWORKERS ? worker : server, &args[i]), 0);
    }
    atomic_store(&r.go, 1);
    for (int i = 0; i <= NWORKERS; i++)
        pthread_join(th[i], NULL);
    verify(&r);
    ht_destroy(r.t);
    free(r.keys);
    free(r.reqs);
    free(r.pkts);
}

/* Under TSan everything runs 5-15x slower, and a lock holder preempted on
 * a 2-core machine makes the others spin out their time slices: do less. */
#if defined(MPIV_TSAN)
#define SCALE 16
#elif defined(__SANITIZE_ADDRESS__)
#define SCALE 4
#else
#define SCALE 1
#endif

/* A tiny table: every key collides, chains and queues everywhere. */
START_TEST(tiny_table_many_keys) { stress(8, 96, 48, 9600 / SCALE); }
END_TEST

/* A roomy table: the unique-key inline path dominates. */
START_TEST(roomy_table) { stress(4096, 900, 450, 1920 / SCALE); }
END_TEST

/* Few keys, deep queues: ring growth and wrap-around under contention. */
START_TEST(deep_queues) { stress(64, 4, 2, 240000 / SCALE); }
END_TEST


/* --- resizing under contention ------------------------------------------
 * NT threads each post requests for some keys and packets for others, so
 * every key is touched by two threads at once: key g gets its requests from
 * thread g % NT and its packets from thread (g + 1) % NT, per_key of each,
 * the n-th request with sequence n and likewise for packets. Since each
 * side of a key has one poster, FIFO per key means exactly: the n-th
 * request meets the n-th packet. Batches of keys are separated by a
 * barrier; inside a batch, even threads post their requests first and odd
 * threads their packets first, so values of both kinds pile up under
 * thousands of keys (the stripes grow) and then leave (they shrink), while
 * other threads insert and match in the same stripes. Between batches the
 * table must be empty. A rehash that lost, duplicated or reordered an
 * entry or its queue, or a reader that looked at a stripe being moved,
 * shows up as a wrong pair, a count, or a sanitizer report. */
#define NT 4

struct rmsg {
    _Alignas(16) uint32_t key; /* global key index */
    uint32_t seq;
    atomic_int matched;
    struct rmsg *partner;
};

struct rrun {
    struct ht_table *t;
    int nbatch, nkeys, per_key; /* keys per batch */
    struct rmsg *reqs, *pkts;   /* [global key][per_key] */
    pthread_barrier_t bar;
    atomic_int bad;
    atomic_size_t left_between; /* values found in the table between batches */
};

struct rarg {
    struct rrun *r;
    int id;
};

static ht_key rkey(int g)
{
    return ht_make_key((unsigned)g % 3, (uint32_t)(g / 3) % 1000, (uint32_t)(g / 3000));
}

static void rrecord(struct rrun *r, struct rmsg *mine, uintptr_t kind, ht_value got)
{
    if (ht_kind(got) == kind) {
        atomic_fetch_add(&r->bad, 1);
        return;
    }
    struct rmsg *other = ht_ptr(got);
    struct rmsg *req = kind == HT_KIND_REQ ? mine : other;
    struct rmsg *pkt = kind == HT_KIND_REQ ? other : mine;
    if (atomic_fetch_add(&req->matched, 1) != 0 || atomic_fetch_add(&pkt->matched, 1) != 0)
        atomic_fetch_add(&r->bad, 1);
    req->partner = pkt;
    pkt->partner = req;
}

/* Posts, for each sequence number in turn, this thread's values of `kind`
 * under every key of the batch it posts that kind for, in a random
 * rotation. */
static void rpost(struct rrun *r, int id, int batch, uintptr_t kind, uint32_t *rng)
{
    int off = kind == HT_KIND_REQ ? 0 : 1;
    for (int seq = 0; seq < r->per_key; seq++) {
        int start = (int)(xs(rng) % (uint32_t)r->nkeys);
        for (int i = 0; i < r->nkeys; i++) {
            int g = batch * r->nkeys + (start + i) % r->nkeys;
            if ((g + off) % NT != id)
                continue;
            struct rmsg *arr = kind == HT_KIND_REQ ? r->reqs : r->pkts;
            struct rmsg *m = &arr[(size_t)g * r->per_key + seq];
            ht_value got = ht_match_or_insert(r->t, rkey(g), ht_val(m, kind));
            if (got != HT_EMPTY)
                rrecord(r, m, kind, got);
        }
    }
}

static void *rthread(void *p)
{
    struct rarg *a = p;
    struct rrun *r = a->r;
    uint32_t rng = 0x9e3779b9u * (uint32_t)(a->id + 1);
    for (int b = 0; b < r->nbatch; b++) {
        pthread_barrier_wait(&r->bar);
        uintptr_t first = a->id % 2 ? HT_KIND_PKT : HT_KIND_REQ;
        rpost(r, a->id, b, first, &rng);
        rpost(r, a->id, b, first ^ 1u, &rng);
        pthread_barrier_wait(&r->bar);
        if (a->id == 0)
            atomic_fetch_add(&r->left_between, ht_count(r->t));
    }
    return NULL;
}

static void resize_stress(size_t nbuckets, int nbatch, int nkeys, int per_key)
{
    struct rrun r = {.nbatch = nbatch, .nkeys = nkeys, .per_key = per_key};
    ck_assert_int_eq(ht_create(&r.t, nbuckets), MPIV_SUCCESS);
    size_t n = (size_t)nbatch * nkeys * per_key;
    r.reqs = calloc(n, sizeof *r.reqs);
    r.pkts = calloc(n, sizeof *r.pkts);
    ck_assert(r.reqs && r.pkts);
    for (size_t i = 0; i < n; i++) {
        r.reqs[i].key = r.pkts[i].key = (uint32_t)(i / (size_t)per_key);
        r.reqs[i].seq = r.pkts[i].seq = (uint32_t)(i % (size_t)per_key);
    }
    ck_assert_int_eq(pthread_barrier_init(&r.bar, NULL, NT), 0);
    pthread_t th[NT];
    struct rarg args[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (struct rarg){&r, i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, rthread, &args[i]), 0);
    }
    for (int i = 0; i < NT; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&r.bar);

    CHECK(atomic_load(&r.bad) == 0, "%d bad matches seen by the threads", atomic_load(&r.bad));
    CHECK(atomic_load(&r.left_between) == 0, "%zu values left between batches",
          atomic_load(&r.left_between));
    for (size_t i = 0; i < n; i++) {
        struct rmsg *q = &r.reqs[i];
        CHECK(atomic_load(&q->matched) == 1 && atomic_load(&r.pkts[i].matched) == 1,
              "key %u seq %u: matched %d and %d times", q->key, q->seq, atomic_load(&q->matched),
              atomic_load(&r.pkts[i].matched));
        CHECK(q->partner->key == q->key && q->partner->seq == q->seq,
              "key %u: request %u met packet %u of key %u", q->key, q->seq, q->partner->seq,
              q->partner->key);
    }
    struct ht_stats st;
    ht_stats(r.t, &st);
    CHECK(st.keys == 0 && ht_count(r.t) == 0, "the table is not empty at the end");
    /* The test is about resizes: make sure there were plenty. */
    CHECK(st.grows >= st.stripes && st.shrinks >= st.stripes,
          "only %zu grows and %zu shrinks over %zu stripes", st.grows, st.shrinks, st.stripes);
    ht_destroy(r.t);
    free(r.reqs);
    free(r.pkts);
}

/* One stripe: every thread on one lock, the array doubling from one
 * bucket to thousands and back in every batch. */
START_TEST(resize_one_stripe) { resize_stress(1, 6, 8192 / SCALE, 3); }
END_TEST

/* 16 stripes that resize at different moments while the others work. */
START_TEST(resize_many_stripes) { resize_stress(64, 6, 16384 / SCALE, 3); }
END_TEST

static Suite *hashtbl_stress_suite(void)
{
    Suite *s = suite_create("hashtbl_stress");
    TCase *tc = tcase_create("concurrent");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, tiny_table_many_keys);
    tcase_add_test(tc, roomy_table);
    tcase_add_test(tc, deep_queues);
    tcase_add_test(tc, resize_one_stripe);
    tcase_add_test(tc, resize_many_stripes);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = hashtbl_stress_suite);
