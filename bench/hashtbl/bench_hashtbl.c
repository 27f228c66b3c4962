/*
 * bench_hashtbl — cost of one match (insert a request, then the packet that
 * matches it: insert + empty) in the matching table, with 1, 1K, 100K and
 * 1M other values waiting, side by side with a mutex-protected linked-list
 * match queue (how MPI libraries keep posted and unexpected queues).
 *
 * Columns:
 *   table hot   — the matched keys rotate over 1024 keys: their buckets stay
 *                 in cache, the live entries sit elsewhere in the table.
 *   table cold  — every match uses a fresh random key among 4M: its bucket
 *                 is a cache miss once the table outgrows the cache.
 *   list        — one posted queue, one unexpected queue, each a list under
 *                 one mutex; the live entries wait in the posted queue, so
 *                 the arriving packet walks past all of them.
 *   same key    — table, a burst of 8 requests under one key then 8 packets
 *                 (the per-key FIFO path), per match.
 *
 *   fill        — ns per insert while the live values went in (each a
 *                 request under a new key, as posted receives are).
 *   drain       — ns per match when they all left (a packet for each).
 *
 * Usage: bench_hashtbl [max_live [load [init]]]   (defaults 1048576, 1.0, 0)
 *   init 0: the table is created with the smallest power-of-two bucket
 *   count (>= 1024) that keeps the live values per bucket at or under
 *   `load` (3 fit a bucket): sized for its load in advance. init N: it is
 *   created with N buckets whatever the load (2048 is what mpiv_init picks
 *   for the default MPIV_PACKETS), so a table that cannot grow shows it.
 * Each figure is the best of 5 repetitions (ns per request+packet pair) of
 * the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall time; each
 * repetition runs for at least 50 ms of it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hashtbl/hashtbl.h"

struct obj {
    _Alignas(8) uint64_t id;
};

/* --- the baseline: MPI-style match lists ------------------------------- */

struct lnode {
    struct lnode *next;
    ht_key key;
    ht_value val;
};

struct lqueue {
    struct lnode *head, *tail;
};

struct mlist {
    pthread_mutex_t mu;
    struct lqueue posted, unexpected;
    struct lnode *freelist; /* nodes come from a pool, as requests would */
};

static struct lnode *lq_remove_match(struct lqueue *q, ht_key k)
{
    struct lnode *prev = NULL;
    for (struct lnode *n = q->head; n; prev = n, n = n->next) {
        if (n->key != k)
            continue;
        if (prev)
            prev->next = n->next;
        else
            q->head = n->next;
        if (q->tail == n)
            q->tail = prev;
        return n;
    }
    return NULL;
}

static void lq_append(struct lqueue *q, struct lnode *n)
{
    n->next = NULL;
    if (q->tail)
        q->tail->next = n;
    else
        q->head = n;
    q->tail = n;
}

static ht_value ml_match_or_insert(struct mlist *m, ht_key k, ht_value v)
{
    ht_value ret = HT_EMPTY;
    pthread_mutex_lock(&m->mu);
    int req = ht_kind(v) == HT_KIND_REQ;
    struct lnode *n = lq_remove_match(req ? &m->unexpected : &m->posted, k);
    if (n) {
        ret = n->val;
        n->next = m->freelist;
        m->freelist = n;
    } else {
        n = m->freelist;
        m->freelist = n->next;
        n->key = k;
        n->val = v;
        lq_append(req ? &m->posted : &m->unexpected, n);
    }
    pthread_mutex_unlock(&m->mu);
    return ret;
}

/* --- helpers ------------------------------------------------------------ */

/* The calling thread's CPU time: on a shared, loaded machine wall time
 * also counts the time other processes had the core. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct obj the_req, the_pkt;
static volatile ht_value sink;

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Live keys use context 1 so they never equal a measured key (context 0). */
static ht_key live_key(size_t i) { return ht_make_key(1, (uint32_t)(i >> 20), (uint32_t)(i & 0xfffff)); }

/* Smallest power of two >= 1024 with at most `load` live values per
 * bucket on average (a bucket has three entries). */
static size_t table_buckets(size_t live, double load)
{
    size_t n = 1024;
    while ((double)n * load < (double)live)
        n *= 2;
    return n;
}

#define NKEYS_COLD (1u << 20)
static ht_key cold_keys[NKEYS_COLD];

/* Repeats body(i) for i = 0, 1, ... in chunks of 256 until `budget_ns` of
 * CPU time has passed, and returns the CPU ns per call. */
#define TIMED(budget_ns, body)                                                  \
    do {                                                                        \
        uint64_t t0_ = thread_cpu_ns(), t1_;                                    \
        long n_ = 0;                                                            \
        do {                                                                    \
            for (long c_ = 0; c_ < 256; c_++, n_++) {                           \
                long i = n_;                                                    \
                body;                                                           \
            }                                                                   \
            t1_ = thread_cpu_ns();                                              \
        } while (t1_ - t0_ < (budget_ns));                                      \
        ns_per_ = (double)(t1_ - t0_) / (double)n_;                             \
    } while (0)

#define BUDGET_NS 50000000ull

static double bench_table(struct ht_table *t, int cold)
{
    ht_value r = ht_val(&the_req, HT_KIND_REQ), p = ht_val(&the_pkt, HT_KIND_PKT);
    double ns_per_;
    if (cold)
        TIMED(BUDGET_NS, {
            ht_key k = cold_keys[i & (NKEYS_COLD - 1)];
            sink = ht_match_or_insert(t, k, r);
            sink = ht_match_or_insert(t, k, p);
        });
    else
        TIMED(BUDGET_NS, {
            ht_key k = ht_make_key(0, 7, (uint32_t)(i & 1023));
            sink = ht_match_or_insert(t, k, r);
            sink = ht_match_or_insert(t, k, p);
        });
    return ns_per_;
}

static double bench_same_key(struct ht_table *t)
{
    ht_value p = ht_val(&the_pkt, HT_KIND_PKT);
    static struct obj reqs[8];
    ht_key k = ht_make_key(0, 9, 9);
    double ns_per_;
    TIMED(BUDGET_NS, {
        (void)i;
        for (int j = 0; j < 8; j++)
            sink = ht_match_or_insert(t, k, ht_val(&reqs[j], HT_KIND_REQ));
        for (int j = 0; j < 8; j++)
            if (ht_match_or_insert(t, k, p) != ht_val(&reqs[j], HT_KIND_REQ))
                util_fatal("FIFO order broken");
    });
    return ns_per_ / 8;
}

static double bench_list(struct mlist *m)
{
    ht_value r = ht_val(&the_req, HT_KIND_REQ), p = ht_val(&the_pkt, HT_KIND_PKT);
    double ns_per_;
    TIMED(BUDGET_NS, {
        ht_key k = ht_make_key(0, 7, (uint32_t)(i & 1023));
        sink = ml_match_or_insert(m, k, r);
        sink = ml_match_or_insert(m, k, p);
    });
    return ns_per_;
}

static double best(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv)
{
    size_t max_live = argc > 1 ? strtoull(argv[1], NULL, 0) : 1u << 20;
    double load = argc > 2 ? strtod(argv[2], NULL) : 1.0;
    size_t init = argc > 3 ? strtoull(argv[3], NULL, 0) : 0;
    if (max_live < 1 || !(load > 0) || (init & (init - 1)))
        util_fatal("usage: bench_hashtbl [max_live >= 1 [load > 0 [init: 0 or a power of two]]]");
    size_t lives[] = {1, 1024, 100000, 1u << 20};
    static struct obj live_obj;
    for (size_t i = 0; i < NKEYS_COLD; i++)
        cold_keys[i] = ht_make_key(0, (uint32_t)(rnd() & 0x3ff), (uint32_t)(rnd() & 0xfff));
    printf("# bench_hashtbl: CPU ns per match (insert request + insert matching packet), best of 5;"
           " table created with %s", init ? "" : "buckets for");
    if (init)
        printf("%zu buckets\n", init);
    else
        printf(" <= %.2f live values per bucket\n", load);
    printf("%10s %10s %10s %10s %10s %10s %10s %12s %8s\n", "live", "buckets", "table hot",
           "table cold", "same key", "fill", "drain", "list+mutex", "grown to");
    for (int li = 0; li < 4; li++) {
        size_t live = lives[li];
        if (live > max_live)
            break;
        size_t nb = init ? init : table_buckets(live, load);
        struct ht_table *t;
        if (ht_create(&t, nb) != MPIV_SUCCESS)
            util_fatal("ht_create failed");
        uint64_t f0 = thread_cpu_ns();
        for (size_t i = 0; i < live; i++)
            ht_match_or_insert(t, live_key(i), ht_val(&live_obj, HT_KIND_REQ));
        double fill = (double)(thread_cpu_ns() - f0) / (double)live;
        /* the table's size with the live values in (where it can grow) */
        size_t grown = nb;
#ifdef HT_INIT_BUCKETS_MAX
        struct ht_stats st;
        ht_stats(t, &st);
        grown = st.buckets;
#endif

        struct mlist m = {.mu = PTHREAD_MUTEX_INITIALIZER};
        struct lnode *nodes = calloc(live + 16, sizeof *nodes);
        for (size_t i = 0; i < live + 16; i++) {
            nodes[i].next = m.freelist;
            m.freelist = &nodes[i];
        }
        for (size_t i = 0; i < live; i++)
            ml_match_or_insert(&m, live_key(i), ht_val(&live_obj, HT_KIND_REQ));

        double hot = 1e30, cold = 1e30, same = 1e30, list = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            hot = best(hot, bench_table(t, 0));
            cold = best(cold, bench_table(t, 1));
            same = best(same, bench_same_key(t));
            list = best(list, bench_list(&m));
        }
        if (ht_count(t) != live)
            util_fatal("table holds %zu values, expected %zu", ht_count(t), live);
        ht_value pkt = ht_val(&the_pkt, HT_KIND_PKT);
        uint64_t d0 = thread_cpu_ns();
        for (size_t i = 0; i < live; i++)
            if (ht_match_or_insert(t, live_key(i), pkt) != ht_val(&live_obj, HT_KIND_REQ))
                util_fatal("live value %zu did not match", i);
        double drain = (double)(thread_cpu_ns() - d0) / (double)live;
        if (ht_count(t) != 0)
            util_fatal("table holds %zu values after the drain", ht_count(t));
        /* one or a few inserts time page faults, not the table */
        if (live < 1024)
            printf("%10zu %10zu %10.1f %10.1f %10.1f %10s %10s %12.1f %8zu\n", live, nb, hot, cold,
                   same, "-", "-", list, grown);
        else
            printf("%10zu %10zu %10.1f %10.1f %10.1f %10.1f %10.1f %12.1f %8zu\n", live, nb, hot,
                   cold, same, fill, drain, list, grown);
        fflush(stdout);
        ht_destroy(t);
        free(nodes);
    }
    return 0;
}
