/*
 * mt_msgrate.c — multi-threaded message rate with 1, 2, 8, 64, 1024 pairs.
 *
 * A pair is one thread on rank 0 and one on rank 1 — a ULT in MPIv, a
 * pthread in MPI (MPI_THREAD_MULTIPLE) — with a tag of their own. The sender
 * starts a window of non-blocking sends (64 by default), the receiver has a
 * window of non-blocking receives posted; after each window the receiver
 * sends a small ack (OSU's mbw_mr pattern, with threads instead of ranks).
 * All pairs run at once; the rate is the messages rank 0 sent per second,
 * from the wall time of the whole team.
 *
 * First comes the rate anchor: the same window loop on one thread per rank
 * and no other thread (MPI: main's thread at MPI_THREAD_MULTIPLE; MPIv: one
 * ULT, or main's thread with --threads pthread), timed by that thread. It is
 * the best single-thread message rate an MPI reaches in this pattern, the
 * fair number to hold MPIv's many-thread rates against.
 *
 * Data check: the last message of every window comes from a buffer of its
 * own, stamped with the window's number in its first byte, into a buffer of
 * its own; the receiver checks the stamp after each window, and both
 * receive buffers byte for byte (patterns carry the pair's id) at the end.
 *
 * Each pair count runs a fixed number of windows per pair, but the receiver
 * ends a pair early (its ack says so) once the time budget (-t, 10 s; 2 s
 * with --quick) is spent, and the output line says so: with 1024 pthreads
 * on one core an MPI can need minutes for a few windows per pair.
 */
#include "comm.h"

/* Pair i uses tag 2i for data and 2i+1 for acks: MPI only promises tags up
 * to 32767, which still leaves room for 16383 pairs. */
#define TAG_DATA(id) (2 * (id))
#define TAG_ACK(id) (2 * (id) + 1)

static struct bc_opts opts;

struct pair {
    int id, me, window;
    long iters, skip;
    double budget; /* seconds; rank 1 ends the pair early past it */
    size_t size;
    struct bc_team *team;
    long rounds;   /* out: timed windows done */
    double secs;   /* out: how long they took, as this thread saw it */
} __attribute__((aligned(64)));

static unsigned char stamp(int id, long round) { return (unsigned char)(id * 17 + round * 31 + 7); }

static void *pair_main(void *arg)
{
    struct pair *p = arg;
    size_t n = p->size;
    int w = p->window, peer = 1 - p->me, ack = 0;
    char *buf = bc_alloc(n), *last = bc_alloc(n);
    bc_req_t *reqs = calloc((size_t)w, sizeof *reqs);
    if (!reqs)
        BC_DIE("out of memory");
    if (p->me == 0) {
        bc_fill(buf, n, 1000u + (unsigned)p->id);
        bc_fill(last, n, 2000u + (unsigned)p->id);
    }
    double t0 = 0;
    long i;

    for (i = -p->skip;; i++) {
        if (i == 0) {
            if (p->team)
                bc_team_wait(&p->team->start);
            t0 = bc_wtime();
        }
        if (p->me == 0) {
            if (n)
                last[0] = (char)stamp(p->id, i);
            for (int j = 0; j < w; j++)
                bc_isend(j == w - 1 ? last : buf, n, peer, TAG_DATA(p->id), &reqs[j]);
            bc_waitall(w, reqs);
            bc_recv(&ack, sizeof ack, peer, TAG_ACK(p->id));
        } else {
            for (int j = 0; j < w; j++)
                bc_irecv(j == w - 1 ? last : buf, n, peer, TAG_DATA(p->id), &reqs[j]);
            bc_waitall(w, reqs);
            if (n && (unsigned char)last[0] != stamp(p->id, i))
                BC_DIE("mt_msgrate: pair %d window %ld: its last message carries a wrong stamp",
                       p->id, i);
            ack = i == p->iters - 1 || (i >= 0 && bc_wtime() - t0 > p->budget);
            bc_send(&ack, sizeof ack, peer, TAG_ACK(p->id));
        }
        if (ack && i >= 0)
            break;
    }
    p->rounds = i + 1;
    p->secs = bc_wtime() - t0;
    if (p->team)
        bc_team_wait(&p->team->end);

    if (p->me == 1) {
        if (w > 1)
            bc_verify(buf, n, 1000u + (unsigned)p->id, "mt_msgrate (window)");
        for (size_t k = 1; k < n; k++) /* byte 0 is the window's stamp */
            if ((unsigned char)last[k] != bc_pattern(k, n, 2000u + (unsigned)p->id))
                BC_DIE("mt_msgrate: pair %d: last message wrong at byte %zu", p->id, k);
    }
    free(buf);
    free(last);
    free(reqs);
    return NULL;
}

static void *run(void *unused)
{
    (void)unused;
    int me = bc_rank();
    if (bc_size() != 2)
        BC_DIE("mt_msgrate needs exactly 2 ranks, got %d", bc_size());
    if (me == 0) {
        printf("# MPIv pt2pt multi-threaded message rate: window of %d, %zu-byte messages\n",
               opts.window, opts.size);
        printf("# impl %s, ranks %d, one %s per rank per pair, %s%s\n", BC_IMPL, bc_size(),
               bc_thread_kind(),
               opts.gated ? "timed between start/stop gates"
                          : "timed by main from the first start to the last join",
               opts.quick ? ", quick" : "");
        printf("%-8s %-8s %14s %14s\n", "# Pairs", "Size", "MB/s", "Messages/s");
        fflush(stdout);
    }
    /* Enough messages that a row at a fast single-thread rate lasts a
     * good part of a second, past start-up transients (docs/perf/pt2pt.md);
     * the budget (-t) ends slow rows early. */
    long total = opts.quick ? 1L << 14 : 1L << 22;
    {
        /* The anchor: as many windows as one pair gets below. */
        long iters = opts.iters ? opts.iters : total / opts.window;
        if (iters < 4)
            iters = 4;
        struct pair a = {.id = 0, .me = me, .window = opts.window, .iters = iters,
                         .skip = iters / 10 + 1, .budget = opts.budget, .size = opts.size};
        bc_barrier();
        bc_run_main(pair_main, &a);
        double msgs = (double)a.rounds * opts.window;
        if (me == 0) {
            printf("%-8s %-8zu %14.2f %14.0f   # rate anchor: one thread per rank, no other\n",
                   "anchor", opts.size, msgs * (double)opts.size / a.secs / 1e6, msgs / a.secs);
            fflush(stdout);
        }
    }
    for (int k = 0; k < opts.npairs; k++) {
        int n = opts.pairs[k];
        /* About the same number of messages for every pair count, within a
         * time budget (1024 pthreads sharing one core are very slow). */
        long iters = opts.iters ? opts.iters : total / ((long)n * opts.window);
        if (iters < 4)
            iters = 4;
        struct pair *ps = bc_alloc((size_t)n * sizeof *ps); /* cache-line aligned */
        struct bc_team team;
        /* Warm-up rounds: fewer where one round of all pairs takes seconds. */
        long warmup = n >= 256 ? 0 : n >= 64 ? 1 : iters / 10 + 1;
        for (int i = 0; i < n; i++)
            ps[i] = (struct pair){.id = i, .me = me, .window = opts.window, .iters = iters,
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
        double msgs = 0;
        long least = iters;
        for (int i = 0; i < n; i++) {
            msgs += (double)ps[i].rounds * opts.window;
            if (ps[i].rounds < least)
                least = ps[i].rounds;
        }
        if (me == 0) {
            printf("%-8d %-8zu %14.2f %14.0f", n, opts.size, msgs * (double)opts.size / wall / 1e6,
                   msgs / wall);
            if (least < iters)
                printf("   # time budget: %ld of %ld windows for the slowest pair", least, iters);
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
