/*
 * stencil.c — 2D 5-point Jacobi on MPIv (or MPI + pthreads).
 *
 * The NX x NY grid (fixed values on the boundary around it) is cut into
 * square tiles; rows of tiles are dealt out to ranks in blocks. Each tile
 * keeps its cells with a one-cell halo. Every iteration, a tile
 *   - posts a receive for each neighbour's edge (mpiv_irecv) and sends its
 *     own edges (mpiv_isend) — to a tile of this rank or of another one, the
 *     code does not care;
 *   - waits for them, copies the received edges into its halo and computes
 *     the next values from the current ones.
 * A message's tag names the receiving tile and the side it comes from, so
 * (source rank, tag) identifies one sending tile; same-key messages arrive in
 * order, so successive iterations never mix.
 *
 * A task runs a group of tiles through all iterations: with MPIv one ULT per
 * tile (--tiles-per-task 1), with MPI a team of pthreads sharing the tiles.
 * Posting every exchange of the group before waiting keeps any mix of groups
 * free of deadlock.
 *
 * Check: every rank also runs the whole grid serially with the same
 * arithmetic and compares its own tiles (they should be bitwise equal).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "par.h"

enum { N_, S_, W_, E_ }; /* sides of a tile */
static const int opposite[4] = {S_, N_, E_, W_};

struct tile {
    int id, tx, ty;      /* id = ty * TX + tx */
    int x0, y0;          /* global coordinates of cell (0, 0) */
    int n;               /* cells per side */
    double *cur, *nxt;   /* (n + 2)^2 with halo */
    double *sbuf[4], *rbuf[4];
    int nbr_rank[4];     /* -1: global boundary on that side */
    int nbr_id[4];
};

struct config {
    int nx, ny, tile, iters, tpt, threads, corrupt;
};

struct stencil {
    struct config c;
    int TX, TY, me, P;
    struct tile *tiles;  /* this rank's */
    int ntiles;
};

static double initial(int x, int y)
{
    uint64_t z = (uint64_t)x * 0x9e3779b97f4a7c15ULL ^ (uint64_t)y * 0xc2b2ae3d27d4eb4fULL;
    z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 32;
    return (double)(z & 0xffff) / 65536.0;
}

/* Value of a cell outside the grid. */
static double boundary(int x, int y, int nx, int ny)
{
    (void)nx;
    (void)ny;
    if (y < 0)
        return 1.0;
    if (x < 0)
        return 0.5;
    return 0.0;
}

static int rank_of_row(const struct stencil *s, int ty) { return (int)((int64_t)ty * s->P / s->TY); }

#define AT(t, i, j) ((size_t)((j) + 1) * (size_t)((t)->n + 2) + (size_t)((i) + 1))

static void tile_init(struct stencil *s, struct tile *t, int tx, int ty)
{
    int n = s->c.tile;
    size_t cells = (size_t)(n + 2) * (size_t)(n + 2);
    *t = (struct tile){.id = ty * s->TX + tx, .tx = tx, .ty = ty, .x0 = tx * n, .y0 = ty * n, .n = n};
    t->cur = calloc(cells, sizeof(double));
    t->nxt = calloc(cells, sizeof(double));
    for (int d = 0; d < 4; d++) {
        t->sbuf[d] = malloc((size_t)n * sizeof(double));
        t->rbuf[d] = malloc((size_t)n * sizeof(double));
        if (!t->sbuf[d] || !t->rbuf[d])
            par_die("stencil: out of memory");
    }
    if (!t->cur || !t->nxt)
        par_die("stencil: out of memory");
    int ntx[4] = {tx, tx, tx - 1, tx + 1}, nty[4] = {ty - 1, ty + 1, ty, ty};
    for (int d = 0; d < 4; d++) {
        int inside = ntx[d] >= 0 && ntx[d] < s->TX && nty[d] >= 0 && nty[d] < s->TY;
        t->nbr_rank[d] = inside ? rank_of_row(s, nty[d]) : -1;
        t->nbr_id[d] = inside ? nty[d] * s->TX + ntx[d] : -1;
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            t->cur[AT(t, i, j)] = initial(t->x0 + i, t->y0 + j);
    /* Halo cells on the global boundary never change: set them in both. */
    for (int k = 0; k < n; k++) {
        double *arr[2] = {t->cur, t->nxt};
        for (int a = 0; a < 2; a++) {
            if (t->nbr_rank[N_] < 0)
                arr[a][AT(t, k, -1)] = boundary(t->x0 + k, -1, s->c.nx, s->c.ny);
            if (t->nbr_rank[S_] < 0)
                arr[a][AT(t, k, n)] = boundary(t->x0 + k, s->c.ny, s->c.nx, s->c.ny);
            if (t->nbr_rank[W_] < 0)
                arr[a][AT(t, -1, k)] = boundary(-1, t->y0 + k, s->c.nx, s->c.ny);
            if (t->nbr_rank[E_] < 0)
                arr[a][AT(t, n, k)] = boundary(s->c.nx, t->y0 + k, s->c.nx, s->c.ny);
        }
    }
}

static void tile_free(struct tile *t)
{
    free(t->cur);
    free(t->nxt);
    for (int d = 0; d < 4; d++) {
        free(t->sbuf[d]);
        free(t->rbuf[d]);
    }
}

/* The edge of cur that side d's neighbour needs, and back into the halo. */
static void pack(struct tile *t, int d)
{
    int n = t->n;
    for (int k = 0; k < n; k++) {
        int i = d == W_ ? 0 : d == E_ ? n - 1 : k;
        int j = d == N_ ? 0 : d == S_ ? n - 1 : k;
        t->sbuf[d][k] = t->cur[AT(t, i, j)];
    }
}

static void unpack(struct tile *t, int d)
{
    int n = t->n;
    for (int k = 0; k < n; k++) {
        int i = d == W_ ? -1 : d == E_ ? n : k;
        int j = d == N_ ? -1 : d == S_ ? n : k;
        t->cur[AT(t, i, j)] = t->rbuf[d][k];
    }
}

/* The one formula both the tiles and the serial check use. */
static inline double jacobi(double n, double s, double w, double e) { return 0.25 * ((n + s) + (w + e)); }

static void sweep(double *restrict out, const double *restrict in, int w, int h, size_t stride)
{
    for (int j = 1; j <= h; j++)
        for (int i = 1; i <= w; i++) {
            size_t c = (size_t)j * stride + (size_t)i;
            out[c] = jacobi(in[c - stride], in[c + stride], in[c - 1], in[c + 1]);
        }
}

struct group {
    struct stencil *s;
    int first, step; /* tiles first, first + step, ... */
};

static void *run_group(void *arg)
{
    struct group *g = arg;
    struct stencil *s = g->s;
    int nt = 0;
    for (int k = g->first; k < s->ntiles; k += g->step)
        nt++;
    par_req_t *req = malloc((size_t)nt * 8 * sizeof *req + 1);
    if (!req)
        par_die("stencil: out of memory");
    for (int it = 0; it < s->c.iters; it++) {
        int nr = 0;
        for (int k = g->first; k < s->ntiles; k += g->step) {
            struct tile *t = &s->tiles[k];
            for (int d = 0; d < 4; d++) {
                if (t->nbr_rank[d] < 0)
                    continue;
                size_t bytes = (size_t)t->n * sizeof(double);
                par_irecv(t->rbuf[d], bytes, t->nbr_rank[d], t->id * 4 + d, &req[nr++]);
                pack(t, d);
                par_isend(t->sbuf[d], bytes, t->nbr_rank[d], t->nbr_id[d] * 4 + opposite[d], &req[nr++]);
            }
        }
        par_waitall(nr, req);
        for (int k = g->first; k < s->ntiles; k += g->step) {
            struct tile *t = &s->tiles[k];
            for (int d = 0; d < 4; d++)
                if (t->nbr_rank[d] >= 0)
                    unpack(t, d);
            sweep(t->nxt, t->cur, t->n, t->n, (size_t)t->n + 2);
            double *x = t->cur;
            t->cur = t->nxt;
            t->nxt = x;
        }
    }
    free(req);
    return NULL;
}

/* Serial run of the whole grid; returns the largest difference from this
 * rank's tiles. */
static double check(const struct stencil *s)
{
    int nx = s->c.nx, ny = s->c.ny;
    size_t stride = (size_t)nx + 2, cells = stride * ((size_t)ny + 2);
    double *a = malloc(cells * sizeof *a), *b = malloc(cells * sizeof *b);
    if (!a || !b)
        par_die("stencil: out of memory for the serial check (%zu cells)", cells);
    for (int y = -1; y <= ny; y++)
        for (int x = -1; x <= nx; x++) {
            size_t c = (size_t)(y + 1) * stride + (size_t)(x + 1);
            int in = x >= 0 && x < nx && y >= 0 && y < ny;
            a[c] = b[c] = in ? initial(x, y) : boundary(x, y, nx, ny);
        }
    for (int it = 0; it < s->c.iters; it++) {
        sweep(b, a, nx, ny, stride);
        double *x = a;
        a = b;
        b = x;
    }
    double maxdiff = 0;
    for (int k = 0; k < s->ntiles; k++) {
        const struct tile *t = &s->tiles[k];
        for (int j = 0; j < t->n; j++)
            for (int i = 0; i < t->n; i++) {
                double ref = a[(size_t)(t->y0 + j + 1) * stride + (size_t)(t->x0 + i + 1)];
                double d = fabs(ref - t->cur[AT(t, i, j)]);
                if (!(d <= maxdiff)) /* also catches NaN */
                    maxdiff = isnan(d) ? INFINITY : d;
            }
    }
    free(a);
    free(b);
    return maxdiff;
}

static const char usage[] =
    "Usage: stencil [options]   (start with mpiv_run -n N, or mpiexec for stencil_mpi)\n"
    "2D 5-point Jacobi: tiles exchange halos with isend/irecv, one ULT per tile.\n"
    "Checked against a serial run; reports cell updates per second.\n"
    "  --n N              grid of N x N cells (default 2048)\n"
    "  --nx X, --ny Y     grid of X x Y cells\n"
    "  --tile T           tile side in cells (default 128); must divide X and Y\n"
    "  --iters I          iterations (default 100)\n"
    "  --tiles-per-task K MPIv: tiles per ULT (default 1)\n"
    "  --threads T        MPI version: pthreads per rank, tiles shared among them\n"
    "                     (default cores/ranks); ignored by MPIv\n"
    "  --corrupt          change one cell after the run (tests the check: the run\n"
    "                     must then fail)\n"
    "  --help             this text\n"
    "Exit status: 0 correct, 1 wrong answer or runtime failure, 2 bad arguments.\n";

static void parse_args(int argc, char **argv, struct config *c)
{
    struct opts o;
    int help = 0;
    opts_start(&o, argc, argv);
    for (; o.i < argc && !o.err[0]; o.i++) {
        if (opts_match(&o, "--help", 0) || opts_match(&o, "-h", 0))
            help = 1;
        else if (opts_match(&o, "--n", 1))
            c->nx = c->ny = (int)opts_i64(&o, "--n", 1, 1 << 16);
        else if (opts_match(&o, "--nx", 1))
            c->nx = (int)opts_i64(&o, "--nx", 1, 1 << 16);
        else if (opts_match(&o, "--ny", 1))
            c->ny = (int)opts_i64(&o, "--ny", 1, 1 << 16);
        else if (opts_match(&o, "--tile", 1))
            c->tile = (int)opts_i64(&o, "--tile", 1, 1 << 16);
        else if (opts_match(&o, "--iters", 1))
            c->iters = (int)opts_i64(&o, "--iters", 0, 1 << 24);
        else if (opts_match(&o, "--tiles-per-task", 1))
            c->tpt = (int)opts_i64(&o, "--tiles-per-task", 1, 1 << 24);
        else if (opts_match(&o, "--corrupt", 0))
            c->corrupt = 1;
        else if (opts_match(&o, "--threads", 1))
            c->threads = (int)opts_i64(&o, "--threads", 1, 4096);
        else if (!o.err[0])
            opts_fail(&o, "unknown argument '%s'", argv[o.i]);
    }
    if (!o.err[0] && !help) {
        if (c->nx % c->tile || c->ny % c->tile)
            opts_fail(&o, "--tile %d must divide the grid (%d x %d)", c->tile, c->nx, c->ny);
        else if (c->ny / c->tile < par_size())
            opts_fail(&o, "%d rows of tiles cannot be shared by %d ranks: use a smaller --tile", c->ny / c->tile,
                      par_size());
    }
    opts_finish(&o, help, "stencil", usage);
    if (c->threads)
        par_set_threads(c->threads);
}

static int stencil_main(void *arg)
{
    struct stencil s = {.c = *(struct config *)arg, .me = par_rank(), .P = par_size()};
    s.TX = s.c.nx / s.c.tile;
    s.TY = s.c.ny / s.c.tile;
    int rows = 0;
    for (int ty = 0; ty < s.TY; ty++)
        rows += rank_of_row(&s, ty) == s.me;
    s.ntiles = rows * s.TX;
    s.tiles = calloc((size_t)s.ntiles + 1, sizeof *s.tiles);
    if (!s.tiles)
        par_die("stencil: out of memory");
    int k = 0;
    for (int ty = 0; ty < s.TY; ty++)
        for (int tx = 0; tx < s.TX && rank_of_row(&s, ty) == s.me; tx++)
            tile_init(&s, &s.tiles[k++], tx, ty);

    int ngroups = strcmp(par_name(), "mpiv") == 0 ? (s.ntiles + s.c.tpt - 1) / s.c.tpt : par_threads();
    if (ngroups > s.ntiles)
        ngroups = s.ntiles;
    struct group *gr = malloc((size_t)ngroups * sizeof *gr + 1);
    par_task_t **tasks = malloc((size_t)ngroups * sizeof *tasks + 1);
    if (!gr || !tasks)
        par_die("stencil: out of memory");

    par_barrier();
    double t0 = par_wtime();
    for (int g = 0; g < ngroups; g++) {
        gr[g] = (struct group){&s, g, ngroups};
        tasks[g] = par_spawn(run_group, &gr[g], g);
    }
    for (int g = 0; g < ngroups; g++)
        par_join(tasks[g]);
    par_barrier();
    double t = par_wtime() - t0;

    if (s.c.corrupt && s.me == s.P - 1 && s.ntiles > 0)
        s.tiles[s.ntiles - 1].cur[AT(&s.tiles[s.ntiles - 1], 0, 0)] += 1e-9;
    double diff = check(&s), maxdiff;
    par_allreduce_f64(&diff, &maxdiff, 1, PAR_MAX);
    int ok = maxdiff <= 1e-12;
    if (s.me == 0) {
        double updates = (double)s.c.nx * s.c.ny * s.c.iters;
        printf("stencil (%s): %d x %d cells, %d x %d tiles of %d, %d iterations; %d ranks x %d %s, %d tasks on rank 0\n",
               par_name(), s.c.nx, s.c.ny, s.TX, s.TY, s.c.tile, s.c.iters, s.P, par_threads(),
               strcmp(par_name(), "mpiv") == 0 ? "workers" : "threads", ngroups);
        printf("time: %.4f s\n", t);
        printf("cell_updates_per_s: %.6g\n", t > 0 ? updates / t : 0.0);
        printf("max difference from the serial run: %g\n", maxdiff);
        printf("result: %s\n", ok ? "PASSED" : "FAILED");
        /* before any rank can exit: a failing rank's exit ends the job, and
         * a buffered verdict would die with it */
        fflush(stdout);
    }
    for (int i = 0; i < s.ntiles; i++)
        tile_free(&s.tiles[i]);
    free(s.tiles);
    free(gr);
    free(tasks);
    return !ok;
}

int main(int argc, char **argv)
{
    par_init(&argc, &argv);
    struct config c = {2048, 2048, 128, 100, 1, 0, 0};
    parse_args(argc, argv, &c);
    int rc = par_run(stencil_main, &c);
    par_finalize();
    return rc;
}
