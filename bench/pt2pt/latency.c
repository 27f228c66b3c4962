/*
 * latency.c — ping-pong latency, 0 B to 4 MiB, OSU style.
 *
 * Rank 0 sends a message to rank 1, which echoes it back; the one-way
 * latency is half the round trip, averaged over many rounds after a warm-up.
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

static void counts(size_t size, long *iters, long *skip)
{
    if (opts.iters) {
        *iters = opts.iters;
        *skip = opts.iters / 10;
    } else if (size <= 8192) {
        *iters = opts.quick ? 1000 : 10000, *skip = opts.quick ? 20 : 100;
    } else if (size <= (256 << 10)) {
        *iters = opts.quick ? 100 : 1000, *skip = opts.quick ? 5 : 10;
    } else {
        *iters = opts.quick ? 20 : 200, *skip = opts.quick ? 2 : 5;
    }
}

static unsigned char stamp(long round) { return (unsigned char)(round * 31 + 7); }

static double pingpong(int me, size_t size, char *sbuf, char *rbuf)
{
    long iters, skip;
    counts(size, &iters, &skip);
    bc_fill(sbuf, size, (unsigned)size);
    memset(rbuf, 0, size ? size : 1);
    bc_barrier();

    double t0 = 0;
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
    double t = bc_wtime() - t0;

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
            printf("%-12zu %14.2f\n", size, lat);
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
