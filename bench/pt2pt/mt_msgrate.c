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
 * Data check: the last message of each pair's last window comes from a
 * buffer of its own carrying the pair's id, into a buffer of its own; it is
 * compared byte for byte, as is the shared receive buffer of the window.
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
    size_t size;
    struct bc_team *team;
} __attribute__((aligned(64)));

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

    for (long i = -p->skip; i < p->iters; i++) {
        if (i == 0)
            bc_team_wait(&p->team->start);
        int final = i == p->iters - 1;
        if (p->me == 0) {
            for (int j = 0; j < w; j++)
                bc_isend(final && j == w - 1 ? last : buf, n, peer, TAG_DATA(p->id), &reqs[j]);
            bc_waitall(w, reqs);
            bc_recv(&ack, sizeof ack, peer, TAG_ACK(p->id));
        } else {
            for (int j = 0; j < w; j++)
                bc_irecv(final && j == w - 1 ? last : buf, n, peer, TAG_DATA(p->id), &reqs[j]);
            bc_waitall(w, reqs);
            bc_send(&ack, sizeof ack, peer, TAG_ACK(p->id));
        }
    }
    bc_team_wait(&p->team->end);

    if (p->me == 1) {
        bc_verify(buf, n, 1000u + (unsigned)p->id, "mt_msgrate (window)");
        bc_verify(last, n, 2000u + (unsigned)p->id, "mt_msgrate (last message)");
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
        printf("# impl %s, ranks %d, one %s per rank per pair%s\n", BC_IMPL, bc_size(),
#ifdef BENCH_MPIV
               "ULT",
#else
               "pthread",
#endif
               opts.quick ? ", quick" : "");
        printf("%-8s %-8s %14s %14s\n", "# Pairs", "Size", "MB/s", "Messages/s");
        fflush(stdout);
    }
    for (int k = 0; k < opts.npairs; k++) {
        int n = opts.pairs[k];
        /* About the same number of messages for every pair count. */
        long total = opts.quick ? 1L << 14 : 1L << 19;
        long iters = opts.iters ? opts.iters : total / ((long)n * opts.window);
        if (iters < 4)
            iters = 4;
        struct pair *ps = bc_alloc((size_t)n * sizeof *ps); /* cache-line aligned */
        struct bc_team team;
        for (int i = 0; i < n; i++)
            ps[i] = (struct pair){.id = i, .me = me, .window = opts.window, .iters = iters,
                                  .skip = iters / 10 + 1, .size = opts.size, .team = &team};
        bc_barrier();
        double wall = bc_team_run(&team, n, pair_main, ps, sizeof *ps);
        double msgs = (double)n * (double)iters * opts.window;
        if (me == 0) {
            printf("%-8d %-8zu %14.2f %14.0f\n", n, opts.size, msgs * (double)opts.size / wall / 1e6,
                   msgs / wall);
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
    bc_run_main(run, NULL);
    bc_finalize();
    return 0;
}
