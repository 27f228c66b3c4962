/*
 * coll.c — every collective at a few sizes, one source built against MPIv
 * (-DBENCH_MPIV) and against MPI (-DBENCH_MPI, mpicc.mpich / mpicc.openmpi),
 * run by run.sh on 2 ranks side by side.
 *
 * Size = the bytes each rank contributes (a bcast's buffer, a reduction's
 * vector of doubles, each rank's block in gather / allgather / scatter, each
 * block to one peer in alltoall, each rank's share in reduce_scatter).
 * Each line: collective, size, mean time per call in µs (the slowest
 * rank's mean, after warm-up), iterations (as many as last 0.1 s,
 * calibrate()). The results of bcast,
 * allgather, allreduce, reduce_scatter and scan are checked once per size
 * (a wrong one exits with status 1); the others are checked by
 * tests/proto/test_coll.
 *
 * MPIv runs the collectives from a ULT (the way MPIv programs run), or
 * from main's thread with --threads pthread; MPI from main's thread.
 *
 * Usage: coll [-m max_bytes] [-i scale] [--quick] [--threads ult|pthread]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(BENCH_MPIV) == defined(BENCH_MPI)
#error "build with exactly one of -DBENCH_MPIV and -DBENCH_MPI"
#endif

#define DIE(...)                                                                \
    do {                                                                        \
        fprintf(stderr, "coll: %s:%d: ", __FILE__, __LINE__);                   \
        fprintf(stderr, __VA_ARGS__);                                           \
        fputc('\n', stderr);                                                    \
        exit(1);                                                                \
    } while (0)

#ifdef BENCH_MPIV
#include "mpiv.h"
#define CK(call)                                                                \
    do {                                                                        \
        int rc_ = (call);                                                       \
        if (rc_)                                                                \
            DIE("%s: %s (%s)", #call, mpiv_strerror(rc_), mpiv_error_detail()); \
    } while (0)
#define W MPIV_COMM_WORLD
typedef size_t cnt_t;
static double now(void) { return mpiv_wtime(); }
static int rank_, size_;
static void b_init(int *argc, char ***argv)
{
    CK(mpiv_init(argc, argv));
    rank_ = mpiv_rank();
    size_ = mpiv_size();
}
static void b_fini(void) { CK(mpiv_finalize()); }
static double max_of(double x)
{
    double m;
    CK(mpiv_allreduce(&x, &m, 1, MPIV_DOUBLE, MPIV_MAX));
    return m;
}
#define BARRIER() CK(mpiv_barrier_comm(W))
#define BCAST(b, n, root) CK(mpiv_bcast_comm(b, n, MPIV_BYTE, root, W))
#define REDUCE(s, r, n, root) CK(mpiv_reduce(s, r, n, MPIV_DOUBLE, MPIV_SUM, root, W))
#define ALLREDUCE(s, r, n) CK(mpiv_allreduce_comm(s, r, n, MPIV_DOUBLE, MPIV_SUM, W))
#define GATHER(s, r, n, root) CK(mpiv_gather(s, r, n, MPIV_BYTE, root, W))
#define GATHERV(s, n, r, c, d, root) CK(mpiv_gatherv(s, n, r, c, d, MPIV_BYTE, root, W))
#define SCATTER(s, r, n, root) CK(mpiv_scatter(s, r, n, MPIV_BYTE, root, W))
#define SCATTERV(s, c, d, r, n, root) CK(mpiv_scatterv(s, c, d, r, n, MPIV_BYTE, root, W))
#define ALLGATHER(s, r, n) CK(mpiv_allgather(s, r, n, MPIV_BYTE, W))
#define ALLGATHERV(s, n, r, c, d) CK(mpiv_allgatherv(s, n, r, c, d, MPIV_BYTE, W))
#define ALLTOALL(s, r, n) CK(mpiv_alltoall(s, r, n, MPIV_BYTE, W))
#define ALLTOALLV(s, sc, sd, r, rc, rd) CK(mpiv_alltoallv(s, sc, sd, r, rc, rd, MPIV_BYTE, W))
#define REDUCE_SCATTER(s, r, c) CK(mpiv_reduce_scatter(s, r, c, MPIV_DOUBLE, MPIV_SUM, W))
#define SCAN(s, r, n) CK(mpiv_scan(s, r, n, MPIV_DOUBLE, MPIV_SUM, W))
#else
#include <mpi.h>
#define CK(call)                                                                \
    do {                                                                        \
        int rc_ = (call);                                                       \
        if (rc_ != MPI_SUCCESS)                                                 \
            DIE("%s failed (%d)", #call, rc_);                                  \
    } while (0)
#define W MPI_COMM_WORLD
typedef int cnt_t;
static double now(void) { return MPI_Wtime(); }
static int rank_, size_;
static void b_init(int *argc, char ***argv)
{
    CK(MPI_Init(argc, argv));
    MPI_Comm_rank(W, &rank_);
    MPI_Comm_size(W, &size_);
}
static void b_fini(void) { CK(MPI_Finalize()); }
static double max_of(double x)
{
    double m;
    CK(MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, W));
    return m;
}
#define BARRIER() CK(MPI_Barrier(W))
#define BCAST(b, n, root) CK(MPI_Bcast(b, (int)(n), MPI_BYTE, root, W))
#define REDUCE(s, r, n, root) CK(MPI_Reduce(s, r, (int)(n), MPI_DOUBLE, MPI_SUM, root, W))
#define ALLREDUCE(s, r, n) CK(MPI_Allreduce(s, r, (int)(n), MPI_DOUBLE, MPI_SUM, W))
#define GATHER(s, r, n, root)                                                   \
    CK(MPI_Gather(s, (int)(n), MPI_BYTE, r, (int)(n), MPI_BYTE, root, W))
#define GATHERV(s, n, r, c, d, root)                                            \
    CK(MPI_Gatherv(s, (int)(n), MPI_BYTE, r, c, d, MPI_BYTE, root, W))
#define SCATTER(s, r, n, root)                                                  \
    CK(MPI_Scatter(s, (int)(n), MPI_BYTE, r, (int)(n), MPI_BYTE, root, W))
#define SCATTERV(s, c, d, r, n, root)                                           \
    CK(MPI_Scatterv(s, c, d, MPI_BYTE, r, (int)(n), MPI_BYTE, root, W))
#define ALLGATHER(s, r, n) CK(MPI_Allgather(s, (int)(n), MPI_BYTE, r, (int)(n), MPI_BYTE, W))
#define ALLGATHERV(s, n, r, c, d)                                               \
    CK(MPI_Allgatherv(s, (int)(n), MPI_BYTE, r, c, d, MPI_BYTE, W))
#define ALLTOALL(s, r, n) CK(MPI_Alltoall(s, (int)(n), MPI_BYTE, r, (int)(n), MPI_BYTE, W))
#define ALLTOALLV(s, sc, sd, r, rc, rd)                                         \
    CK(MPI_Alltoallv(s, sc, sd, MPI_BYTE, r, rc, rd, MPI_BYTE, W))
#define REDUCE_SCATTER(s, r, c) CK(MPI_Reduce_scatter(s, r, c, MPI_DOUBLE, MPI_SUM, W))
#define SCAN(s, r, n) CK(MPI_Scan(s, r, (int)(n), MPI_DOUBLE, MPI_SUM, W))
#endif

enum {
    C_BARRIER, C_BCAST, C_REDUCE, C_ALLREDUCE, C_GATHER, C_GATHERV, C_SCATTER, C_SCATTERV,
    C_ALLGATHER, C_ALLGATHERV, C_ALLTOALL, C_ALLTOALLV, C_REDUCE_SCATTER, C_SCAN, C_COUNT_
};
static const char *const names[C_COUNT_] = {
    "barrier",   "bcast",      "reduce",   "allreduce", "gather",    "gatherv",
    "scatter",   "scatterv",   "allgather", "allgatherv", "alltoall", "alltoallv",
    "reduce_scatter", "scan"};

static unsigned char *sb, *rb;
static cnt_t *cnts, *dsps;

static void run_one(int c, size_t n)
{
    size_t nd = n / 8; /* doubles in a reduction */
    switch (c) {
    case C_BARRIER: BARRIER(); break;
    case C_BCAST: BCAST(rb, n, 0); break;
    case C_REDUCE: REDUCE(sb, rb, nd, 0); break;
    case C_ALLREDUCE: ALLREDUCE(sb, rb, nd); break;
    case C_GATHER: GATHER(sb, rb, n, 0); break;
    case C_GATHERV: GATHERV(sb, n, rb, cnts, dsps, 0); break;
    case C_SCATTER: SCATTER(sb, rb, n, 0); break;
    case C_SCATTERV: SCATTERV(sb, cnts, dsps, rb, n, 0); break;
    case C_ALLGATHER: ALLGATHER(sb, rb, n); break;
    case C_ALLGATHERV: ALLGATHERV(sb, n, rb, cnts, dsps); break;
    case C_ALLTOALL: ALLTOALL(sb, rb, n); break;
    case C_ALLTOALLV: ALLTOALLV(sb, cnts, dsps, rb, cnts, dsps); break;
    case C_REDUCE_SCATTER: {
        /* each rank's share is nd doubles (cnts holds bytes: reuse as counts) */
        cnt_t rc[64];
        for (int i = 0; i < size_ && i < 64; i++)
            rc[i] = (cnt_t)nd;
        REDUCE_SCATTER(sb, rb, rc);
        break;
    }
    default: SCAN(sb, rb, nd); break;
    }
}

/* One check per collective and size: the ones with a simple expected value. */
static void check(int c, size_t n)
{
    double *s = (double *)sb, *r = (double *)rb;
    size_t nd = n / 8;
    for (size_t i = 0; i < n * (size_t)size_; i++)
        sb[i] = (unsigned char)(i * 7 + (size_t)rank_);
    if (c == C_ALLREDUCE || c == C_SCAN || c == C_REDUCE_SCATTER)
        for (size_t i = 0; i < nd * (size_t)size_; i++)
            s[i] = (double)(rank_ + 1);
    memset(rb, 0, n * (size_t)size_);
    if (c == C_BCAST && rank_ == 0)
        for (size_t i = 0; i < n; i++)
            rb[i] = (unsigned char)(i * 3);
    run_one(c, n);
    double tot = (double)size_ * (size_ + 1) / 2, pre = (double)(rank_ + 1) * (rank_ + 2) / 2;
    for (size_t i = 0; i < nd && (c == C_ALLREDUCE || c == C_REDUCE_SCATTER || c == C_SCAN); i++)
        if (r[i] != (c == C_SCAN ? pre : tot))
            DIE("%s of %zu bytes: element %zu is %g", names[c], n, i, r[i]);
    if (c == C_BCAST)
        for (size_t i = 0; i < n; i++)
            if (rb[i] != (unsigned char)(i * 3))
                DIE("bcast of %zu bytes: byte %zu is wrong", n, i);
    if (c == C_ALLGATHER)
        for (int j = 0; j < size_; j++)
            for (size_t i = 0; i < n; i++)
                if (rb[(size_t)j * n + i] != (unsigned char)(i * 7 + (size_t)j))
                    DIE("allgather of %zu bytes: byte %zu from rank %d is wrong", n, i, j);
}

static size_t max = 1u << 20;
static double scale = 1;

/* As many calls as last 0.1 s times the scale (-i; 0.01 s with --quick):
 * runs of 4, 32, 256, ... calls, which are also the warm-up, until one
 * lasts an eighth of that. Every rank takes the slowest rank's time
 * (max_of), so all decide alike. Fixed counts made small collectives
 * last milliseconds and measure start-up transients as much as the
 * collective. */
static int calibrate(int c, size_t n)
{
    double target = 0.1 * scale;
    long k = 4;
    for (;;) {
        BARRIER();
        double t0 = now();
        for (long it = 0; it < k; it++)
            run_one(c, n);
        double t = max_of(now() - t0);
        if (t >= target / 8 || k >= (1L << 24)) {
            double want = (double)k * target / (t > 1e-9 ? t : 1e-9);
            return want < 3 ? 3 : want > 1e8 ? 100000000 : (int)want;
        }
        k *= 8;
    }
}

static void *body(void *arg)
{
    (void)arg;
    if (size_ > 64)
        DIE("at most 64 ranks");
    static const size_t sizes[] = {8, 1024, 65536, 1048576};
    sb = malloc(max * (size_t)size_ + 64);
    rb = malloc(max * (size_t)size_ + 64);
    cnts = malloc((size_t)size_ * sizeof *cnts);
    dsps = malloc((size_t)size_ * sizeof *dsps);
    if (!sb || !rb || !cnts || !dsps)
        DIE("out of memory");
    memset(sb, 1, max * (size_t)size_ + 64);
    if (rank_ == 0)
        printf("# collective size_bytes mean_us iterations (%d ranks)\n", size_);
    for (int c = 0; c < C_COUNT_; c++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = c == C_BARRIER ? 0 : sizes[k];
            if (n > max || (c == C_BARRIER && k > 0))
                continue;
            for (int i = 0; i < size_; i++) {
                cnts[i] = (cnt_t)n;
                dsps[i] = (cnt_t)((size_t)i * n);
            }
            check(c, n);
            int iters = calibrate(c, n);
            BARRIER();
            double t0 = now();
            for (int it = 0; it < iters; it++)
                run_one(c, n);
            double us = max_of((now() - t0) / iters * 1e6);
            if (rank_ == 0)
                printf("%s %zu %.3f %d\n", names[c], n, us, iters);
            fflush(stdout);
        }
    }
    free(sb);
    free(rb);
    free(cnts);
    free(dsps);
    return NULL;
}

int main(int argc, char **argv)
{
    int ult = 1;
    b_init(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            max = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc)
            scale = atof(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            scale = 0.1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            ult = !strcmp(argv[++i], "ult");
        else
            DIE("unknown argument %s (usage: coll [-m max_bytes] [-i scale] [--quick] "
                "[--threads ult|pthread])", argv[i]);
    }
#ifdef BENCH_MPIV
    if (ult) {
        mpiv_ult_t u;
        CK(mpiv_ult_spawn(body, NULL, MPIV_WORKER_ANY, &u));
        CK(mpiv_ult_join(u, NULL));
    } else {
        body(NULL);
    }
#else
    (void)ult;
    body(NULL);
#endif
    b_fini();
    return 0;
}
