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
        printf("result: %s\n", ok ? "PASSED" : "FAILED");
        fflush(stdout);
    }
    /* A rank that exits with status 1 ends the job: none may before rank 0
     * has printed the verdict. */
    par_barrier();
    return ok;
}
