/*
 * mt_latency.c — multi-threaded ping-pong latency with 1, 2, 8, 64, 1024 pairs.
 *
 * A pair is one thread on rank 0 and one on rank 1 — a ULT in MPIv, a
 * pthread in MPI (MPI_THREAD_MULTIPLE) — ping-ponging with a tag of their
 * own. All pairs run at once. Reported per pair count: the one-way latency
 * each thread sees (its round-trip time / 2, averaged over threads), and the
 * rank's aggregate message rate (messages sent by rank 0 per second, from
 * the wall time of the whole team).
 *
 * Every echo is checked (a round stamp in its first and last byte) and the
 * final echo of each pair is compared byte for byte with what it sent; a
 * pair's payload also carries its pair id so that crossed tags show.
 *
 * Each pair count runs a fixed number of round trips per pair, but rank 0
 * ends a pair early once its time budget (-t, 10 s; 2 s with --quick) is
 * spent, and says so on the output line: with 1024 pthreads on one core an
 * MPI can need minutes for a few round trips per pair.
 */
#include "comm.h"

static struct bc_opts opts;

struct pair {
    int id, me;
    long iters, skip;
    double budget; /* seconds; rank 0 ends the pair early past it */
    size_t size;
    struct bc_team *team;
    long rounds;   /* out: timed round trips done */
    double usec;   /* out: one-way latency this thread saw */
} __attribute__((aligned(64)));

static unsigned char stamp(int id, long round) { return (unsigned char)(id * 17 + round * 31 + 7); }

/* The message's first byte is the round's stamp; its last byte is the same
 * stamp, or the stamp ^ 0xa5 in the last round, which is how rank 0 tells
 * rank 1 that the time budget is spent (messages of 2 bytes or more). */
#define LAST_ROUND 0xa5

static void *pair_main(void *arg)
{
    struct pair *p = arg;
    size_t n = p->size;
    char *sbuf = bc_alloc(n), *rbuf = bc_alloc(n);
    bc_fill(sbuf, n, (unsigned)p->id);
    int peer = 1 - p->me, tag = p->id, can_stop = n >= 2;
    double t0 = 0;
    long i;

    for (i = -p->skip;; i++) {
        if (i == 0) {
            if (p->team)
                bc_team_wait(&p->team->start);
            t0 = bc_wtime();
        }
        int last;
        if (p->me == 0) {
            last = i == p->iters - 1 ||
                   (can_stop && i >= 0 && bc_wtime() - t0 > p->budget);
            if (n) {
                sbuf[0] = (char)stamp(p->id, i);
                sbuf[n - 1] = (char)(stamp(p->id, i) ^ (last && can_stop ? LAST_ROUND : 0));
            }
            bc_send(sbuf, n, peer, tag);
            bc_recv(rbuf, n, peer, tag);
            if (n && (rbuf[0] != sbuf[0] || rbuf[n - 1] != sbuf[n - 1]))
                BC_DIE("mt_latency: pair %d round %ld: echo carries a wrong stamp", p->id, i);
        } else {
            bc_recv(rbuf, n, peer, tag);
            bc_send(rbuf, n, peer, tag);
            if (n && (unsigned char)rbuf[0] != stamp(p->id, i))
                BC_DIE("mt_latency: pair %d round %ld: message carries a wrong stamp", p->id, i);
            last = can_stop ? rbuf[0] != rbuf[n - 1] : i == p->iters - 1;
        }
        if (last && i >= 0)
            break;
    }
    double t = bc_wtime() - t0;
    if (p->team)
        bc_team_wait(&p->team->end);

    if (p->me == 0 && memcmp(sbuf, rbuf, n) != 0)
        BC_DIE("mt_latency: pair %d: last echo differs from what was sent", p->id);
    /* rank 1: the body (between the stamps) is this pair's pattern */
    for (size_t k = 1; p->me == 1 && k + 1 < n; k++)
        if ((unsigned char)rbuf[k] != bc_pattern(k, n, (unsigned)p->id))
            BC_DIE("mt_latency: pair %d received another pair's data (byte %zu)", p->id, k);
    p->rounds = i + 1;
    p->usec = t * 1e6 / (2.0 * (double)p->rounds);
    free(sbuf);
    free(rbuf);
    return NULL;
}

static void *run(void *unused)
{
    (void)unused;
    int me = bc_rank();
    if (bc_size() != 2)
        BC_DIE("mt_latency needs exactly 2 ranks, got %d", bc_size());
    if (me == 0) {
        printf("# MPIv pt2pt multi-threaded latency: concurrent ping-pong pairs, %zu-byte messages\n",
               opts.size);
        printf("# impl %s, ranks %d, one %s per rank per pair, %s%s\n", BC_IMPL, bc_size(),
               bc_thread_kind(),
               opts.gated ? "timed between start/stop gates"
                          : "timed by main from the first start to the last join",
               opts.quick ? ", quick" : "");
        printf("%-8s %-8s %14s %14s\n", "# Pairs", "Size", "Latency (us)", "Messages/s");
        fflush(stdout);
    }
    for (int k = 0; k < opts.npairs; k++) {
        int n = opts.pairs[k];
        /* About the same number of round trips for every pair count, within
         * a time budget (1024 pthreads sharing one core are very slow). */
        long total = opts.quick ? 2000 : 20000;
        long iters = opts.iters ? opts.iters : total / n;
        if (iters < 10)
            iters = 10;
        struct pair *ps = bc_alloc((size_t)n * sizeof *ps); /* cache-line aligned */
        struct bc_team team;
        /* Warm-up rounds: fewer where one round of all pairs takes seconds. */
        long warmup = n >= 256 ? 0 : n >= 64 ? 1 : iters / 10 + 1;
        for (int i = 0; i < n; i++)
            ps[i] = (struct pair){.id = i, .me = me, .iters = iters,
                                  .skip = warmup, .budget = opts.budget,
                                  .size = opts.size, .team = &team};
        struct bc_team *tm = opts.gated ? &team : NULL;
        for (int i = 0; i < n; i++)
            ps[i].team = tm;
        bc_barrier();
        if (!tm && warmup > 0) {
            /* The warm-up is a run of its own: nothing but messages
             * between the threads of the timed run. */
            for (int i = 0; i < n; i++)
                ps[i].skip = 0, ps[i].iters = warmup;
            bc_team_run(NULL, n, pair_main, ps, sizeof *ps);
            for (int i = 0; i < n; i++)
                ps[i].iters = iters;
            bc_barrier();
        }
        double wall = bc_team_run(tm, n, pair_main, ps, sizeof *ps);
        double sum = 0, rounds = 0;
        long least = iters;
        for (int i = 0; i < n; i++) {
            sum += ps[i].usec;
            rounds += (double)ps[i].rounds;
            if (ps[i].rounds < least)
                least = ps[i].rounds;
        }
        if (me == 0) {
            printf("%-8d %-8zu %14.2f %14.0f", n, opts.size, sum / n, rounds / wall);
            if (least < iters)
                printf("   # time budget: %ld of %ld round trips for the slowest pair", least, iters);
            printf("\n");
            fflush(stdout);
        }
        free(ps);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bc_init(&argc, &argv, BC_THREADS_MANY);
    bc_parse(argc, argv, &opts);
    /* main's thread drives: it starts and joins the pairs' threads itself,
     * as a program would. */
    run(NULL);
    bc_finalize();
    return 0;
}
