/*
 * problem.h — the stencil problem, shared by stencil.c (MPIv, and its
 * pthreads twin) and stencil_expert.c (plain MPI): the grid's initial and
 * boundary values, the update formula and the sweep, the serial reference
 * run, the common options and the report.
 *
 * Every version computes each cell with jacobi() through sweep(), the
 * serial reference too, so a correct run is bitwise equal to it.
 */
#ifndef STENCIL_PROBLEM_H
#define STENCIL_PROBLEM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "opts.h"

/* The common options (a version adds its own). */
struct stencil_config {
    int nx, ny, iters, corrupt, reference;
};

#define STENCIL_CONFIG_DEFAULT {2048, 2048, 100, 0, 0}

#define STENCIL_COMMON_USAGE                                                           \
    "  --n N              grid of N x N cells (default 2048)\n"                       \
    "  --nx X, --ny Y     grid of X x Y cells\n"                                      \
    "  --iters I          iterations (default 100)\n"                                 \
    "  --corrupt          change one cell after the run (tests the check: the run\n" \
    "                     must then fail)\n"                                          \
    "  --reference        after the run, every rank sweeps its share of the rows\n"  \
    "                     as often again, all at once, without communicating,\n"    \
    "                     and rank 0 reports that rate beside the run's\n"           \
    "  --help             this text\n"

/* 1 if argv[o->i] is one of STENCIL_COMMON_USAGE's options but --help
 * (parsed into c; a bad value is recorded in o), else 0. */
int stencil_common_opt(struct opts *o, struct stencil_config *c);

/* Initial value of cell (x, y) of the grid. */
double stencil_initial(int x, int y);
/* Value of a cell outside the grid (it never changes). */
double stencil_boundary(int x, int y, int nx, int ny);

/* The one formula every version and the serial check use. */
static inline double jacobi(double n, double s, double w, double e) { return 0.25 * ((n + s) + (w + e)); }

/* out = one Jacobi step of in, for the w x h cells at rows 1..h, columns
 * 1..w of arrays of row length `stride` (row 0, row h + 1, column 0 and
 * column w + 1 are read only). */
static inline void sweep(double *restrict out, const double *restrict in, int w, int h, size_t stride)
{
    for (int j = 1; j <= h; j++)
        for (int i = 1; i <= w; i++) {
            size_t c = (size_t)j * stride + (size_t)i;
            out[c] = jacobi(in[c - stride], in[c + stride], in[c - 1], in[c + 1]);
        }
}

/* The whole grid after c->iters serial steps, (nx + 2) x (ny + 2) with the
 * boundary: cell (x, y) at [(y + 1) * (nx + 2) + x + 1]. Free with free(). */
double *stencil_serial(const struct stencil_config *c);

/* Largest difference so far, updated with one cell (NaN counts as
 * infinite). */
static inline double stencil_diff(double maxdiff, double ref, double got)
{
    double d = fabs(ref - got);
    if (!(d <= maxdiff))
        maxdiff = isnan(d) ? INFINITY : d;
    return maxdiff;
}

/* Collective: takes the largest difference over the ranks and, on rank 0,
 * prints the setup line, the time, cell_updates_per_s and "result: ...";
 * returns 1 if the run matched the serial one. No rank returns before rank
 * 0 has printed the verdict. */
int stencil_report(const struct stencil_config *c, const char *setup, double t, double maxdiff);

#endif /* STENCIL_PROBLEM_H */
