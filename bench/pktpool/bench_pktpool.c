/*
 * bench_pktpool — cost of getting and returning a packet (ns per get+put
 * pair) on each path of the pool, a check that a worker gets back the
 * packet it returned last, and a contended run (two worker threads and a
 * server thread at once).
 *
 * Paths (single thread):
 *   private hit — worker 0 gets from and returns to its own deque
 *   shared      — a plain pthread (worker -1): the lock-free shared stack
 *   server      — pkt_get_server / pkt_put_server with the shared stack full
 *   steal       — shared stack empty: the server steals a deque's bottom,
 *                 the packet goes back into that worker's deque
 * Contended (three threads at once for 200 ms each run): the server takes
 * packets (shared stack, else a steal) and hands them to the workers, who
 * return them to their deques and also get+put packets of their own.
 * Reported: each thread's CPU ns per successful packet operation.
 *
 * Usage: bench_pktpool [iterations]   (default 5,000,000; best of 5)
 * Times are the measuring thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pktpool/pktpool.h"

static long iters = 5000000;

/* The calling thread's CPU time: on a shared, loaded machine wall time
 * also counts the time other processes had the core. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double per(uint64_t t0, uint64_t t1, long n) { return (double)(t1 - t0) / (double)n; }

static double bench_private(struct pkt_pool *pool)
{
    uint64_t t0 = thread_cpu_ns();
    for (long i = 0; i < iters; i++) {
        pkt_t *p = pkt_get(pool, 0);
        pkt_put(pool, 0, p);
    }
    return per(t0, thread_cpu_ns(), iters);
}

static double bench_shared(struct pkt_pool *pool)
{
    uint64_t t0 = thread_cpu_ns();
    for (long i = 0; i < iters; i++) {
        pkt_t *p = pkt_get(pool, -1);
        pkt_put(pool, -1, p);
    }
    return per(t0, thread_cpu_ns(), iters);
}

static double bench_server(struct pkt_pool *pool)
{
    uint64_t t0 = thread_cpu_ns();
    for (long i = 0; i < iters; i++) {
        pkt_t *p = pkt_get_server(pool);
        pkt_put_server(pool, p);
    }
    return per(t0, thread_cpu_ns(), iters);
}

/* pool of `n` <= deque size packets, all in worker (nworkers-1)'s deque */
static double bench_steal(struct pkt_pool *pool, int nworkers)
{
    int w = nworkers - 1;
    uint64_t t0 = thread_cpu_ns();
    for (long i = 0; i < iters; i++) {
        pkt_t *p = pkt_get_server(pool);
        pkt_put(pool, w, p);
    }
    return per(t0, thread_cpu_ns(), iters);
}

/* --- contended -----------------------------------------------------------
 * As in the runtime: the server takes packets (shared stack, else a steal)
 * and hands them to the workers (a receive), who return them into their
 * own deques; workers also get and return packets of their own (a send).
 * The handoff is a single-producer single-consumer ring per worker. */

#define RING 256
struct ring {
    _Alignas(64) _Atomic long head; /* consumer (worker) */
    _Alignas(64) _Atomic long tail; /* producer (server) */
    pkt_t *slot[RING];
};

struct carg {
    struct pkt_pool *pool;
    int id; /* worker id, or -2 for the server */
    atomic_int *go, *stop;
    struct ring *rings;
    long empty; /* gets that found no packet */
    long ops;   /* successful get+put (worker) or get+handoff (server) */
    double ns;
};

/* Runs until main says stop (200 ms, the same window for all). A worker
 * that finds no packet yields; the server busy-polls as it would the
 * network. Cost is the thread's own CPU time per successful operation, so
 * that time the thread spent descheduled (3 threads, 2 cores, other users)
 * does not count. */

static void *contended(void *arg)
{
    struct carg *a = arg;
    while (!atomic_load(a->go))
        ;
    uint64_t t0 = thread_cpu_ns();
    long ops = 0;
    for (long i = 0;; i++) {
        if ((i & 255) == 0 && atomic_load_explicit(a->stop, memory_order_relaxed))
            break;
        if (a->id >= 0) {
            struct ring *r = &a->rings[a->id];
            long h = atomic_load_explicit(&r->head, memory_order_relaxed);
            /* acquire: the packet pointer the server stored is visible */
            long t = atomic_load_explicit(&r->tail, memory_order_acquire);
            for (; h < t; h++)
                pkt_put(a->pool, a->id, r->slot[h % RING]);
            atomic_store_explicit(&r->head, h, memory_order_release);
            pkt_t *p = pkt_get(a->pool, a->id);
            if (!p) {
                a->empty++;
                sched_yield();
                continue;
            }
            pkt_put(a->pool, a->id, p);
        } else {
            pkt_t *p = pkt_get_server(a->pool);
            if (!p) { /* the server busy-polls, as it would the network */
                a->empty++;
                continue;
            }
            struct ring *r = &a->rings[i & 1];
            long t = atomic_load_explicit(&r->tail, memory_order_relaxed);
            if (t - atomic_load_explicit(&r->head, memory_order_acquire) < RING) {
                r->slot[t % RING] = p;
                atomic_store_explicit(&r->tail, t + 1, memory_order_release);
            } else {
                pkt_put_server(a->pool, p);
            }
        }
        ops++;
    }
    a->ops = ops;
    a->ns = per(t0, thread_cpu_ns(), ops);
    return NULL;
}

static void run_contended(int npackets, double out[3], long empty[3], long ops[3])
{
    struct pkt_pool *pool;
    if (pkt_pool_create(&pool, (size_t)npackets, 8192, 2) != MPIV_SUCCESS)
        util_fatal("pkt_pool_create failed");
    struct ring *rings = aligned_alloc(64, 2 * sizeof *rings);
    for (int i = 0; i < 2; i++) {
        atomic_init(&rings[i].head, 0);
        atomic_init(&rings[i].tail, 0);
    }
    atomic_int go = 0, stop = 0;
    struct carg a[3] = {{pool, 0, &go, &stop, rings, 0, 0, 0}, {pool, 1, &go, &stop, rings, 0, 0, 0},
                        {pool, -2, &go, &stop, rings, 0, 0, 0}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, contended, &a[i]);
    atomic_store(&go, 1);
    /* one window for all three threads: main sleeps, they share the cores */
    nanosleep(&(struct timespec){0, 200000000}, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        out[i] = a[i].ns;
        empty[i] = a[i].empty;
        ops[i] = a[i].ops;
    }
    /* packets left in the rings go back before the pool goes away */
    for (int i = 0; i < 2; i++)
        for (long h = rings[i].head; h < rings[i].tail; h++)
            pkt_put(pool, i, rings[i].slot[h % RING]);
    free(rings);
    pkt_pool_destroy(pool);
}

static double best(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv)
{
    if (argc > 1)
        iters = strtol(argv[1], NULL, 0);
    struct pkt_pool *pool, *small;
    if (pkt_pool_create(&pool, 4096, 8192, 2) != MPIV_SUCCESS ||
        pkt_pool_create(&small, 16, 8192, 2) != MPIV_SUCCESS)
        util_fatal("pkt_pool_create failed");
    /* put all of `small` into worker 1's deque: the shared stack is empty */
    pkt_t *held[16];
    for (int i = 0; i < 16; i++)
        held[i] = pkt_get_server(small);
    for (int i = 0; i < 16; i++)
        pkt_put(small, 1, held[i]);

    /* LIFO reuse: with other traffic in between, worker 0 gets back the
     * packet it returned last. */
    long reused = 0, checks = 100000;
    for (long i = 0; i < checks; i++) {
        pkt_t *a = pkt_get(pool, 0), *b = pkt_get(pool, 0);
        pkt_t *s = pkt_get_server(pool);
        pkt_put(pool, 0, a);
        pkt_put(pool, 0, b);
        pkt_put_server(pool, s);
        pkt_t *c = pkt_get(pool, 0);
        reused += c == b;
        pkt_put(pool, 0, c);
    }

    double priv = 1e30, shared = 1e30, server = 1e30, steal = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        priv = best(priv, bench_private(pool));
        shared = best(shared, bench_shared(pool));
        server = best(server, bench_server(pool));
        steal = best(steal, bench_steal(small, 2));
    }
    printf("# bench_pktpool: CPU ns per get+put pair, best of 5, %ld iterations\n", iters);
    printf("%-34s %8.1f\n", "private hit (worker deque)", priv);
    printf("%-34s %8.1f\n", "shared stack (worker -1)", shared);
    printf("%-34s %8.1f\n", "server, shared stack", server);
    printf("%-34s %8.1f\n", "server steal + worker put back", steal);
    printf("%-34s %ld/%ld\n", "LIFO reuse (got back last put)", reused, checks);

    /* 4096 packets: deques overflow and spill, the server lives on the
     * shared stack. 48 packets: the deques hold them all, the shared stack
     * runs dry and the server steals. */
    int sizes[2] = {4096, 48};
    for (int k = 0; k < 2; k++) {
        double c[3] = {1e30, 1e30, 1e30}, cr[3];
        long e[3] = {0, 0, 0}, o[3] = {0, 0, 0};
        for (int rep = 0; rep < 5; rep++) {
            run_contended(sizes[k], cr, e, o);
            for (int i = 0; i < 3; i++)
                c[i] = best(c[i], cr[i]);
        }
        printf("contended, %4d packets: worker0 %.1f  worker1 %.1f  server %.1f CPU ns/packet"
               "\n    (last run, 200 ms: server moved %ld packets and found none %ld times;"
               " workers did %ld/%ld)\n",
               sizes[k], c[0], c[1], c[2], o[2], e[2], o[0], o[1]);
    }
    for (int i = 0; i < 16; i++)
        held[i] = NULL;
    pkt_pool_destroy(small);
    pkt_pool_destroy(pool);
    return 0;
}
