/*
 * stencil_expert.c — the 2D 5-point Jacobi stencil as an expert MPI
 * programmer would write it, in plain MPI-3.1 (no threads: one rank per
 * core), as the baseline MPIv's stencil is measured against.
 *
 * The grid is cut into blocks of whole rows, one per rank (rank r owns rows
 * ny * r / P .. ny * (r + 1) / P - 1), each stored with a one-cell halo:
 * with rows of full width a halo is a contiguous row, sent and received in
 * place without packing, and a rank talks to two neighbours at most. (A 2D
 * decomposition sends fewer bytes per cell once there are many ranks; at
 * the rank counts of one node, row blocks send fewer, larger messages.)
 *
 * Every iteration overlaps the halo exchange with the interior update:
 *   1. post the receives of the two halo rows and send the two edge rows
 *      (MPI_Irecv / MPI_Isend, straight from and into the arrays);
 *   2. update the rows that need no halo (rows 2 .. h - 1);
 *   3. MPI_Waitall, then update the two edge rows.
 * The sends read rows of the current array, which step 2 only reads too;
 * the receives write its halo rows, which step 2 does not read.
 *
 * Same problem, serial check and report as stencil (problem.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "opts.h"
#include "par.h"
#include "problem.h"

enum { TAG_TO_NEXT = 1, TAG_TO_PREV = 2 }; /* rank r + 1 / rank r - 1 receives it */

static const char usage[] =
    "Usage: stencil_expert [options]   (start with mpiexec -n N)\n"
    "2D 5-point Jacobi written as an expert MPI programmer would: one\n"
    "single-threaded rank per core, a block of rows each, nonblocking halo\n"
    "exchange overlapped with the interior update.\n"
    "Same problem and check as stencil; reports cell updates per second.\n"
    STENCIL_COMMON_USAGE
    "Exit status: 0 correct, 1 wrong answer or runtime failure, 2 bad arguments.\n";

static int match_opt(struct opts *o, void *ctx) { return stencil_common_opt(o, ctx); }

static void check_opts(struct opts *o, void *ctx)
{
    const struct stencil_config *c = ctx;
    if (c->ny < par_size())
        opts_fail(o, "%d rows cannot be shared by %d ranks", c->ny, par_size());
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    par_init(&argc, &argv); /* for opts.c and problem.c */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    int me, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &P);

    struct stencil_config c = STENCIL_CONFIG_DEFAULT;
    opts_parse(argc, argv, "stencil_expert", usage, match_opt, check_opts, &c);

    int nx = c.nx, ny = c.ny;
    int y0 = (int)((int64_t)ny * me / P), h = (int)((int64_t)ny * (me + 1) / P) - y0;
    int prev = me > 0 ? me - 1 : -1, next = me < P - 1 ? me + 1 : -1;
    size_t stride = (size_t)nx + 2, cells = stride * ((size_t)h + 2);
    double *cur = malloc(cells * sizeof *cur), *nxt = malloc(cells * sizeof *nxt);
    if (!cur || !nxt)
        par_die("stencil_expert: out of memory for %zu cells", cells);
    /* Row j of the block is global row y0 + j - 1; rows 0 and h + 1 are the
     * halo, or the fixed boundary at the grid's top and bottom. Columns 0
     * and nx + 1 are the fixed boundary. */
    for (int j = 0; j <= h + 1; j++)
        for (int x = -1; x <= nx; x++) {
            int y = y0 + j - 1;
            int in = x >= 0 && x < nx && y >= 0 && y < ny;
            size_t k = (size_t)j * stride + (size_t)(x + 1);
            cur[k] = nxt[k] = in ? stencil_initial(x, y) : stencil_boundary(x, y, nx, ny);
        }

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < c.iters; it++) {
        MPI_Request req[4];
        MPI_Status st[4];
        int nr = 0;
        if (prev >= 0) {
            MPI_Irecv(cur + 1, nx, MPI_DOUBLE, prev, TAG_TO_NEXT, MPI_COMM_WORLD, &req[nr++]);
            MPI_Isend(cur + stride + 1, nx, MPI_DOUBLE, prev, TAG_TO_PREV, MPI_COMM_WORLD, &req[nr++]);
        }
        if (next >= 0) {
            MPI_Irecv(cur + (size_t)(h + 1) * stride + 1, nx, MPI_DOUBLE, next, TAG_TO_PREV, MPI_COMM_WORLD,
                      &req[nr++]);
            MPI_Isend(cur + (size_t)h * stride + 1, nx, MPI_DOUBLE, next, TAG_TO_NEXT, MPI_COMM_WORLD, &req[nr++]);
        }
        if (h > 2)
            sweep(nxt + stride, cur + stride, nx, h - 2, stride);
        MPI_Waitall(nr, req, st);
        sweep(nxt, cur, nx, 1, stride);
        if (h > 1)
            sweep(nxt + (size_t)(h - 1) * stride, cur + (size_t)(h - 1) * stride, nx, 1, stride);
        double *x = cur;
        cur = nxt;
        nxt = x;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;

    if (c.corrupt && me == P - 1)
        cur[(size_t)h * stride + 1] += 1e-9;
    double *ref = stencil_serial(&c), maxdiff = 0;
    for (int j = 1; j <= h; j++)
        for (int x = 0; x < nx; x++)
            maxdiff = stencil_diff(maxdiff, ref[(size_t)(y0 + j) * stride + (size_t)(x + 1)],
                                   cur[(size_t)j * stride + (size_t)(x + 1)]);
    free(ref);
    char setup[160];
    snprintf(setup, sizeof setup, "stencil (expert MPI, row blocks, overlapped halos): %d x %d cells, "
             "%d iterations; %d ranks x 1 thread", nx, ny, c.iters, P);
    int ok = stencil_report(&c, setup, t, maxdiff);
    free(cur);
    free(nxt);
    par_finalize();
    return ok ? 0 : 1;
}
