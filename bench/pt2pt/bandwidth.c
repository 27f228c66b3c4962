/*
 * bandwidth.c — uni-directional bandwidth with a window, OSU style.
 *
 * Rank 0 starts a window of non-blocking sends (64 by default) to rank 1,
 * which has a window of non-blocking receives posted; both wait for all of
 * them, then rank 1 answers with a 4-byte ack before the next window.
 * Bandwidth = bytes moved / time, in MB/s (10^6 bytes).
 *
 * As in OSU, the messages of a window share one send and one receive buffer;
 * the last message of the last window uses buffers of its own, filled with a
 * different pattern, so a message that was not delivered, delivered twice or
 * delivered into the wrong buffer fails the run (all of each receive buffer
 * is checked after each size).
 */
#include "comm.h"

#define TAG_DATA 1
#define TAG_ACK 2

static struct bc_opts opts;

struct bufs {
    char *s, *s_last, *r, *r_last;
    bc_req_t *reqs;
};

struct bw {
    int me;
    size_t size;
    struct bufs *b;
};

/* skip windows of warm-up, then iters timed windows; returns their
 * seconds. The last timed window's last message is the checked one. */
static double bw_loop(long skip, long iters, void *arg)
{
    struct bw *a = arg;
    struct bufs *b = a->b;
    size_t size = a->size;
    int w = opts.window, ack = 0;
    bc_barrier();
    double t0 = bc_wtime();
    for (long i = -skip; i < iters; i++) {
        if (i == 0)
            t0 = bc_wtime();
        int last = i == iters - 1;
        if (a->me == 0) {
            for (int j = 0; j < w; j++)
                bc_isend(last && j == w - 1 ? b->s_last : b->s, size, 1, TAG_DATA, &b->reqs[j]);
            bc_waitall(w, b->reqs);
            bc_recv(&ack, sizeof ack, 1, TAG_ACK);
        } else {
            for (int j = 0; j < w; j++)
                bc_irecv(last && j == w - 1 ? b->r_last : b->r, size, 0, TAG_DATA, &b->reqs[j]);
            bc_waitall(w, b->reqs);
            bc_send(&ack, sizeof ack, 0, TAG_ACK);
        }
    }
    return bc_wtime() - t0;
}

static double window_bw(int me, size_t size, struct bufs *b)
{
    bc_fill(b->s, size, (unsigned)size);
    bc_fill(b->s_last, size, (unsigned)size + 1);
    memset(b->r, 0, size);
    memset(b->r_last, 0, size);
    struct bw a = {.me = me, .size = size, .b = b};
    long iters = opts.iters, skip = opts.iters / 10;
    if (!iters) {
        /* the calibration's runs were the warm-up */
        iters = bc_calibrate(me, 1, opts.min_time, bw_loop, &a);
        skip = 2;
    }
    memset(b->r_last, 0, size); /* the measured run's last message, checked below */
    double t = bw_loop(skip, iters, &a);

    if (me == 1) {
        bc_verify(b->r, size, (unsigned)size, "bandwidth (window)");
        bc_verify(b->r_last, size, (unsigned)size + 1, "bandwidth (last message)");
    }
    return (double)size * (double)opts.window * (double)iters / t / 1e6;
}

static void *run(void *unused)
{
    (void)unused;
    int me = bc_rank();
    if (bc_size() < 2)
        BC_DIE("bandwidth needs 2 ranks, got %d", bc_size());
    struct bufs b = {
        .s = bc_alloc(opts.max_size), .s_last = bc_alloc(opts.max_size),
        .r = bc_alloc(opts.max_size), .r_last = bc_alloc(opts.max_size),
        .reqs = calloc((size_t)opts.window, sizeof(bc_req_t)),
    };
    if (!b.reqs)
        BC_DIE("out of memory");
    if (me == 0) {
        printf("# MPIv pt2pt bandwidth: window of %d non-blocking sends, then an ack\n",
               opts.window);
        printf("# impl %s, ranks %d, on one %s per rank%s\n", BC_IMPL, bc_size(), bc_thread_kind(),
               opts.quick ? ", quick" : "");
        printf("%-12s %14s\n", "# Size", "Bandwidth (MB/s)");
        fflush(stdout);
    }
    size_t first = opts.min_size ? opts.min_size : 1;
    for (size_t size = first; size <= opts.max_size; size *= 2) {
        if (me > 1) {
            bc_barrier();
            continue;
        }
        double bw = window_bw(me, size, &b);
        if (me == 0) {
            printf("%-12zu %14.2f\n", size, bw);
            fflush(stdout);
        }
    }
    free(b.s);
    free(b.s_last);
    free(b.r);
    free(b.r_last);
    free(b.reqs);
    return NULL;
}

int main(int argc, char **argv)
{
    /* MPI at MPI_THREAD_SINGLE: what a single-threaded MPI program runs
     * at, and MPI's fastest mode, so that MPIv is held against the
     * strongest baseline a user would pick for this pattern. */
    bc_init(&argc, &argv, BC_THREADS_ONE);
    bc_parse(argc, argv, &opts);
    bc_run_main(run, NULL);
    bc_finalize();
    return 0;
}
