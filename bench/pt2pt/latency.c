/*
 * latency.c — ping-pong latency, 0 B to 4 MiB, OSU style.
 *
 * Rank 0 sends a message to rank 1, which echoes it back; the one-way
 * latency is half the round trip, averaged over many rounds after a warm-up:
 * as many rounds as last -T seconds (bc_calibrate), or -i of them.
 * In MPIv the ping-pong runs in one ULT per rank, or on main's thread with
 * --threads pthread; in MPI on main's thread at MPI_THREAD_SINGLE.
 *
 * Data is checked: the first and last byte of every message carry the round
 * number (so a stale buffer shows at once), and the whole echoed buffer is
 * compared with what was sent after the last round of each size.
 */
#include "comm.h"

#define TAG_PING 1

static struct bc_opts opts;

static unsigned char stamp(long round) { return (unsigned char)(round * 31 + 7); }

struct pp {
    int me;
    size_t size;
    char *sbuf, *rbuf;
};

/* skip rounds of warm-up, then iters timed rounds; returns their seconds */
static double pp_loop(long skip, long iters, void *arg)
{
    struct pp *a = arg;
    int me = a->me;
    size_t size = a->size;
    char *sbuf = a->sbuf, *rbuf = a->rbuf;
    bc_barrier();
    double t0 = bc_wtime();
    for (long i = -skip; i < iters; i++) {
        if (i == 0)
            t0 = bc_wtime();
        if (me == 0) {
            if (size) {
                sbuf[0] = (char)stamp(i);
                sbuf[size - 1] = (char)stamp(i);
            }
            bc_send(sbuf, size, 1, TAG_PING);
            bc_recv(rbuf, size, 1, TAG_PING);
            if (size && ((unsigned char)rbuf[0] != stamp(i) ||
                         (unsigned char)rbuf[size - 1] != stamp(i)))
                BC_DIE("latency: %zu-byte echo of round %ld carries a stale stamp", size, i);
        } else {
            bc_recv(rbuf, size, 0, TAG_PING);
            bc_send(rbuf, size, 0, TAG_PING);
        }
    }
    return bc_wtime() - t0;
}

static double pingpong(int me, size_t size, char *sbuf, char *rbuf)
{
    bc_fill(sbuf, size, (unsigned)size);
    memset(rbuf, 0, size ? size : 1);
    struct pp a = {.me = me, .size = size, .sbuf = sbuf, .rbuf = rbuf};
    long iters = opts.iters, skip = opts.iters / 10;
    if (!iters) {
        /* the calibration's runs were the warm-up */
        iters = bc_calibrate(me, 16, opts.min_time, pp_loop, &a);
        skip = 10;
    }
    double t = pp_loop(skip, iters, &a);

    /* rank 0 got back exactly what it sent last (pattern + last stamps) */
    if (me == 0 && size && memcmp(sbuf, rbuf, size) != 0) {
        sbuf[0] = sbuf[size - 1] = rbuf[0] = rbuf[size - 1] = 0;
        for (size_t k = 0; k < size; k++)
            if (sbuf[k] != rbuf[k])
                BC_DIE("latency: %zu-byte echo differs from what was sent at byte %zu", size, k);
        BC_DIE("latency: %zu-byte echo differs in its first or last byte", size);
    }
    return t * 1e6 / (2.0 * (double)iters);
}

static void *run(void *unused)
{
    (void)unused;
    int me = bc_rank();
    if (bc_size() < 2)
        BC_DIE("latency needs 2 ranks, got %d", bc_size());
    char *sbuf = bc_alloc(opts.max_size), *rbuf = bc_alloc(opts.max_size);
    if (me == 0) {
        printf("# MPIv pt2pt latency: ping-pong, one-way latency\n");
        printf("# impl %s, ranks %d, on one %s per rank%s\n", BC_IMPL, bc_size(), bc_thread_kind(),
               opts.quick ? ", quick" : "");
        printf("%-12s %14s\n", "# Size", "Latency (us)");
        fflush(stdout);
    }
    for (size_t size = opts.min_size; size <= opts.max_size; size = size ? size * 2 : 1) {
        if (me > 1) { /* extra ranks only take part in the barriers */
            bc_barrier();
            continue;
        }
        double lat = pingpong(me, size, sbuf, rbuf);
        if (me == 0) {
            printf("%-12zu %14.3f\n", size, lat);
            fflush(stdout);
        }
    }
    free(sbuf);
    free(rbuf);
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
