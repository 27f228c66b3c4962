/*
 * problem.c — see problem.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "par.h"
#include "problem.h"

int stencil_common_opt(struct opts *o, struct stencil_config *c)
{
    if (opts_match(o, "--n", 1))
        c->nx = c->ny = (int)opts_i64(o, "--n", 1, 1 << 16);
    else if (opts_match(o, "--nx", 1))
        c->nx = (int)opts_i64(o, "--nx", 1, 1 << 16);
    else if (opts_match(o, "--ny", 1))
        c->ny = (int)opts_i64(o, "--ny", 1, 1 << 16);
    else if (opts_match(o, "--iters", 1))
        c->iters = (int)opts_i64(o, "--iters", 0, 1 << 24);
    else if (opts_match(o, "--corrupt", 0))
        c->corrupt = 1;
    else if (opts_match(o, "--reference", 0))
        c->reference = 1;
    else
        return 0;
    return 1;
}

double stencil_initial(int x, int y)
{
    uint64_t z = (uint64_t)x * 0x9e3779b97f4a7c15ULL ^ (uint64_t)y * 0xc2b2ae3d27d4eb4fULL;
    z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 32;
    return (double)(z & 0xffff) / 65536.0;
}

double stencil_boundary(int x, int y, int nx, int ny)
{
    (void)nx;
    (void)ny;
    if (y < 0)
        return 1.0;
    if (x < 0)
        return 0.5;
    return 0.0;
}

double *stencil_serial(const struct stencil_config *c)
{
    int nx = c->nx, ny = c->ny;
    size_t stride = (size_t)nx + 2, cells = stride * ((size_t)ny + 2);
    double *a = malloc(cells * sizeof *a), *b = malloc(cells * sizeof *b);
    if (!a || !b)
        par_die("stencil: out of memory for the serial check (%zu cells)", cells);
    for (int y = -1; y <= ny; y++)
        for (int x = -1; x <= nx; x++) {
            size_t k = (size_t)(y + 1) * stride + (size_t)(x + 1);
            int in = x >= 0 && x < nx && y >= 0 && y < ny;
            a[k] = b[k] = in ? stencil_initial(x, y) : stencil_boundary(x, y, nx, ny);
        }
    for (int it = 0; it < c->iters; it++) {
        sweep(b, a, nx, ny, stride);
        double *x = a;
        a = b;
        b = x;
    }
    free(b);
    return a;
}

/* --reference: this rank's share of the rows (an even split, as the
 * expert's), swept c->iters times with sweep() between two arrays and no
 * halo exchange, started on every rank at once; returns its time. What a
 * run costs beyond that is what communicating and waiting cost it, as far
 * as its own sweeps run at the speed of these row-by-row ones (a version
 * that sweeps in another order, tile by tile, may run faster or slower
 * than them: it is a reference, not a bound). */
static double reference_time(const struct stencil_config *c)
{
    int P = par_size(), me = par_rank();
    int rows = c->ny / P + (me < c->ny % P);
    size_t stride = (size_t)c->nx + 2, cells = stride * ((size_t)rows + 2);
    double *a = malloc(cells * sizeof *a), *b = malloc(cells * sizeof *b);
    if (!a || !b)
        par_die("stencil: out of memory for --reference (%zu cells)", cells);
    for (size_t k = 0; k < cells; k++)
        a[k] = b[k] = stencil_initial((int)(k % stride), (int)(k / stride));
    par_barrier();
    double t0 = par_wtime();
    for (int it = 0; it < c->iters; it++) {
        sweep(b, a, c->nx, rows, stride);
        double *x = a;
        a = b;
        b = x;
    }
    double t = par_wtime() - t0;
    volatile double sink = a[stride + 1]; /* the sweeps' result is used */
    (void)sink;
    free(a);
    free(b);
    return t;
}

int stencil_report(const struct stencil_config *c, const char *setup, double t, double diff)
{
    double maxdiff;
    par_allreduce_f64(&diff, &maxdiff, 1, PAR_MAX);
    int ok = maxdiff <= 1e-12;
    if (par_rank() == 0) {
        double updates = (double)c->nx * c->ny * c->iters;
        printf("%s\n", setup);
        printf("time: %.4f s\n", t);
        printf("cell_updates_per_s: %.6g\n", t > 0 ? updates / t : 0.0);
        printf("max difference from the serial run: %g\n", maxdiff);
        fflush(stdout);
    }
    if (c->reference && ok) {
        double mine = reference_time(c), slowest;
        par_allreduce_f64(&mine, &slowest, 1, PAR_MAX);
        if (par_rank() == 0) {
            double updates = (double)c->nx * c->ny * c->iters, run = t > 0 ? updates / t : 0.0;
            double ref = slowest > 0 ? updates / slowest : 0.0;
            printf("reference: the same sweeps row by row without communicating, every rank at once: %.6g "
                   "cell_updates_per_s; this run %.3g%% of it\n",
                   ref, ref > 0 ? 100.0 * run / ref : 0.0);
        }
    }
    if (par_rank() == 0) {
        printf("result: %s\n", ok ? "PASSED" : "FAILED");
        fflush(stdout);
    }
    /* A rank that exits with status 1 ends the job: none may before rank 0
     * has printed the verdict. */
    par_barrier();
    return ok;
}
