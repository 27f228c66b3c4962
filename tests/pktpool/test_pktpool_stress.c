/* Concurrent stress test of the packet pool: two workers, a plain pthread
 * and a server thread get, hold, pass around and return packets of a small
 * pool (so it runs dry often and the server steals). Checked:
 *  - no packet is handed out twice: a per-packet "held" flag flips 0→1 on
 *    every get and 1→0 on every put, and each holder stamps the payload
 *    and finds its stamp intact when it lets go;
 *  - packets are conserved: at the end every packet comes out exactly once.
 * Packets also travel between threads through mailboxes, as send packets
 * come back through the server and receive packets go to workers.
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "pktpool/pktpool.h"

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond))                                                            \
            ck_abort_msg(__VA_ARGS__);                                          \
    } while (0)

#define NWORKERS 2
#define NTHREADS (NWORKERS + 2) /* + a plain pthread (-1) + the server */
#define HOLD 6                  /* packets a thread holds at most */
#define BOX 16

/* Successful gets per thread; a scarce pool makes threads yield often,
 * which costs whole time slices on a loaded machine: fewer there. */
#if defined(MPIV_TSAN)
#define GETS 20000
#define SCARCE_GETS 3000
#elif defined(__SANITIZE_ADDRESS__)
#define GETS 100000
#define SCARCE_GETS 10000
#else
#define GETS 300000
#define SCARCE_GETS 30000
#endif

struct mailbox {
    pthread_mutex_t mu;
    int n;
    pkt_t *p[BOX];
};

struct shared {
    struct pkt_pool *pool;
    size_t npackets;
    atomic_int *held;
    struct mailbox box[NTHREADS];
    atomic_int bad;
    atomic_int go;
    atomic_long gets, nulls;
    atomic_int done; /* threads past their quota, still emptying mailboxes */
    long quota;      /* successful gets per thread */
};

struct targ {
    struct shared *s;
    int id; /* 0..NWORKERS-1 workers, NWORKERS plain pthread, NWORKERS+1 server */
};

static uint32_t xs(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static pkt_t *do_get(struct shared *s, int id)
{
    if (id == NWORKERS + 1)
        return pkt_get_server(s->pool);
    return pkt_get(s->pool, id < NWORKERS ? id : -1);
}

static void do_put(struct shared *s, int id, pkt_t *p)
{
    if (id == NWORKERS + 1)
        pkt_put_server(s->pool, p);
    else
        pkt_put(s->pool, id < NWORKERS ? id : -1, p);
}

static void stamp(pkt_t *p, int id)
{
    memset(p->data, id + 1, 64);
    p->len = (uint32_t)(id + 1);
}

static void let_go(struct shared *s, pkt_t *p, int id)
{
    unsigned char b = p->data[0];
    for (int i = 0; i < 64; i++)
        if (p->data[i] != b || p->len != b)
            atomic_fetch_add(&s->bad, 1); /* two holders wrote it */
    if (atomic_exchange(&s->held[p->idx], 0) != 1)
        atomic_fetch_add(&s->bad, 1);
    do_put(s, id, p);
}

static void *run(void *arg)
{
    struct targ *a = arg;
    struct shared *s = a->s;
    int id = a->id;
    uint32_t rng = 0x9e3779b9u * (uint32_t)(id + 1);
    pkt_t *mine[HOLD];
    int n = 0;
    long gets = 0, nulls = 0;
    while (!atomic_load(&s->go))
        ;
    /* Bounded by time too: on a loaded machine a thread holding packets
     * may sleep for whole time slices while the others find none. */
    uint64_t deadline = util_now_ns() + 8ull * 1000000000ull;
    for (long it = 0; gets < s->quota; it++) {
        if ((it & 1023) == 0 && util_now_ns() > deadline)
            break;
        uint32_t r = xs(&rng) % 16;
        if (r < 7 && n < HOLD) { /* get */
            pkt_t *p = do_get(s, id);
            if (!p) { /* as the protocol layer's blocking get would: yield */
                nulls++;
                sched_yield();
                continue;
            }
            gets++;
            if (atomic_exchange(&s->held[p->idx], 1) != 0)
                atomic_fetch_add(&s->bad, 1); /* handed out twice */
            stamp(p, id);
            mine[n++] = p;
        } else if (r < 13 && n > 0) { /* put the most or least recent */
            int k = (r & 1) ? n - 1 : 0;
            pkt_t *p = mine[k];
            mine[k] = mine[--n];
            let_go(s, p, id);
        } else if (r < 15 && n > 0) { /* hand to another thread */
            int to = (int)(xs(&rng) % NTHREADS);
            struct mailbox *b = &s->box[to];
            pthread_mutex_lock(&b->mu);
            if (b->n < BOX) {
                b->p[b->n++] = mine[--n];
            }
            pthread_mutex_unlock(&b->mu);
        } else { /* take what others handed us */
            struct mailbox *b = &s->box[id];
            pthread_mutex_lock(&b->mu);
            while (b->n > 0 && n < HOLD) {
                pkt_t *p = b->p[--b->n];
                stamp(p, id); /* now ours: the mutex ordered the handoff */
                mine[n++] = p;
            }
            pthread_mutex_unlock(&b->mu);
        }
    }
    while (n > 0)
        let_go(s, mine[--n], id);
    /* Others may still hand us packets: return them until all are done. */
    atomic_fetch_add(&s->done, 1);
    struct mailbox *b = &s->box[id];
    while (atomic_load(&s->done) < NTHREADS) {
        pthread_mutex_lock(&b->mu);
        while (b->n > 0) {
            pkt_t *p = b->p[--b->n];
            stamp(p, id);
            let_go(s, p, id);
        }
        pthread_mutex_unlock(&b->mu);
    }
    atomic_fetch_add(&s->gets, gets);
    atomic_fetch_add(&s->nulls, nulls);
    return NULL;
}

static void stress(size_t npackets, long quota)
{
    struct shared s;
    memset(&s, 0, sizeof s);
    s.quota = quota;
    s.npackets = npackets;
    ck_assert_int_eq(pkt_pool_create(&s.pool, npackets, 64, NWORKERS), MPIV_SUCCESS);
    s.held = calloc(npackets, sizeof *s.held);
    for (int i = 0; i < NTHREADS; i++)
        pthread_mutex_init(&s.box[i].mu, NULL);
    pthread_t th[NTHREADS];
    struct targ args[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        args[i] = (struct targ){&s, i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, run, &args[i]), 0);
    }
    atomic_store(&s.go, 1);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    /* packets still in mailboxes go back through the server */
    for (int i = 0; i < NTHREADS; i++) {
        while (s.box[i].n > 0)
            let_go(&s, s.box[i].p[--s.box[i].n], NWORKERS + 1);
        pthread_mutex_destroy(&s.box[i].mu);
    }
    CHECK(atomic_load(&s.bad) == 0, "%d ownership violations", atomic_load(&s.bad));
    if (getenv("PKT_STRESS_DEBUG"))
        fprintf(stderr, "gets %ld empty %ld\n", atomic_load(&s.gets), atomic_load(&s.nulls));
    CHECK(atomic_load(&s.gets) >= (long)NTHREADS * quota / 10, "only %ld gets (%ld empty)",
          atomic_load(&s.gets), atomic_load(&s.nulls));

    /* conservation: every packet once, then nothing */
    char *seen = calloc(npackets, 1);
    for (size_t i = 0; i < npackets; i++) {
        pkt_t *p = pkt_get_server(s.pool);
        CHECK(p != NULL, "only %zu of %zu packets came back", i, npackets);
        CHECK(!seen[p->idx], "packet %u twice in the pool", p->idx);
        seen[p->idx] = 1;
    }
    CHECK(pkt_get_server(s.pool) == NULL, "more packets than created");
    free(seen);
    free(s.held);
    pkt_pool_destroy(s.pool);
}

/* Fewer packets than the threads can hold: the pool runs dry constantly. */
START_TEST(scarce_pool) { stress(12, SCARCE_GETS); }
END_TEST

/* More packets than fit in the deques: spills and the shared stack. */
START_TEST(spilling_pool) { stress(200, GETS); }
END_TEST

static Suite *pktpool_stress_suite(void)
{
    Suite *s = suite_create("pktpool_stress");
    TCase *tc = tcase_create("concurrent");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, scarce_pool);
    tcase_add_test(tc, spilling_pool);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = pktpool_stress_suite);
