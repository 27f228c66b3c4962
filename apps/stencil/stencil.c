/*
 * stencil.c — 2D 5-point Jacobi on MPIv, and the same program on MPI +
 * pthreads (stencil_mpi: the twin, the same program with pthreads instead
 * of ULTs; stencil_expert.c is the stencil an MPI programmer would write).
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
 * The problem, the serial run and the report are problem.c's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "par.h"
#include "problem.h"

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
    struct stencil_config sc;
    int tile, tpt, threads;
};

struct stencil {
    struct config c;
    int TX, TY, me, P;
    struct tile *tiles;  /* this rank's */
    int ntiles;
};

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
            t->cur[AT(t, i, j)] = stencil_initial(t->x0 + i, t->y0 + j);
    /* Halo cells on the global boundary never change: set them in both. */
    for (int k = 0; k < n; k++) {
        double *arr[2] = {t->cur, t->nxt};
        for (int a = 0; a < 2; a++) {
            if (t->nbr_rank[N_] < 0)
                arr[a][AT(t, k, -1)] = stencil_boundary(t->x0 + k, -1, s->c.sc.nx, s->c.sc.ny);
            if (t->nbr_rank[S_] < 0)
                arr[a][AT(t, k, n)] = stencil_boundary(t->x0 + k, s->c.sc.ny, s->c.sc.nx, s->c.sc.ny);
            if (t->nbr_rank[W_] < 0)
                arr[a][AT(t, -1, k)] = stencil_boundary(-1, t->y0 + k, s->c.sc.nx, s->c.sc.ny);
            if (t->nbr_rank[E_] < 0)
                arr[a][AT(t, n, k)] = stencil_boundary(s->c.sc.nx, t->y0 + k, s->c.sc.nx, s->c.sc.ny);
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
    for (int it = 0; it < s->c.sc.iters; it++) {
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

/* The largest difference of this rank's tiles from the serial run. */
static double check(const struct stencil *s)
{
    double *a = stencil_serial(&s->c.sc);
    size_t stride = (size_t)s->c.sc.nx + 2;
    double maxdiff = 0;
    for (int k = 0; k < s->ntiles; k++) {
        const struct tile *t = &s->tiles[k];
        for (int j = 0; j < t->n; j++)
            for (int i = 0; i < t->n; i++)
                maxdiff = stencil_diff(maxdiff, a[(size_t)(t->y0 + j + 1) * stride + (size_t)(t->x0 + i + 1)],
                                       t->cur[AT(t, i, j)]);
    }
    free(a);
    return maxdiff;
}

static const char usage[] =
    "Usage: stencil [options]   (start with mpiv_run -n N, or mpiexec for stencil_mpi)\n"
    "2D 5-point Jacobi: tiles exchange halos with isend/irecv, one ULT per tile.\n"
    "Checked against a serial run; reports cell updates per second.\n"
    "stencil_mpi is its twin: the same program with pthreads instead of ULTs over\n"
    "MPI_THREAD_MULTIPLE, not the way an MPI programmer would write a stencil\n"
    "(that is stencil_expert).\n"
    STENCIL_COMMON_USAGE
    "  --tile T           tile side in cells; must divide X and Y (default: the\n"
    "                     largest power of two up to 512 that divides both and\n"
    "                     leaves every rank a row of tiles)\n"
    "  --tiles-per-task K MPIv: tiles per ULT (default 1)\n"
    "  --threads T        stencil_mpi: pthreads per rank, tiles shared among them\n"
    "                     (default cores/ranks); ignored by MPIv\n"
    "Exit status: 0 correct, 1 wrong answer or runtime failure, 2 bad arguments.\n";

static int match_opt(struct opts *o, void *ctx)
{
    struct config *c = ctx;
    if (stencil_common_opt(o, &c->sc))
        return 1;
    if (opts_match(o, "--tile", 1))
        c->tile = (int)opts_i64(o, "--tile", 1, 1 << 16);
    else if (opts_match(o, "--tiles-per-task", 1))
        c->tpt = (int)opts_i64(o, "--tiles-per-task", 1, 1 << 24);
    else if (opts_match(o, "--threads", 1))
        c->threads = (int)opts_i64(o, "--threads", 1, 4096);
    else
        return 0;
    return 1;
}

/* Tiles of 512 cells a side: a tile's update and its halos' messages cost
 * a fixed amount per tile, which smaller tiles pay more often (the
 * measurements are in docs/perf/apps.md), and tiles many times larger
 * leave a worker nothing to run while the edge tiles wait for their
 * halos. */
#define TILE_DEFAULT_MAX 512

static int default_tile(const struct config *c)
{
    int t = TILE_DEFAULT_MAX;
    while (t > 1 && (c->sc.nx % t || c->sc.ny % t || c->sc.ny / t < par_size()))
        t /= 2;
    return t;
}

static void check_opts(struct opts *o, void *ctx)
{
    struct config *c = ctx;
    if (c->tile == 0)
        c->tile = default_tile(c);
    if (c->sc.nx % c->tile || c->sc.ny % c->tile)
        opts_fail(o, "--tile %d must divide the grid (%d x %d)", c->tile, c->sc.nx, c->sc.ny);
    else if (c->sc.ny < par_size())
        opts_fail(o, "a grid of %d rows cannot be shared by %d ranks: give each rank a row (--ny)",
                  c->sc.ny, par_size());
    else if (c->sc.ny / c->tile < par_size())
        opts_fail(o, "%d rows of tiles cannot be shared by %d ranks: use a smaller --tile", c->sc.ny / c->tile,
                  par_size());
}

static void parse_args(int argc, char **argv, struct config *c)
{
    opts_parse(argc, argv, "stencil", usage, match_opt, check_opts, c);
    if (c->threads)
        par_set_threads(c->threads);
}

static int stencil_main(void *arg)
{
    struct stencil s = {.c = *(struct config *)arg, .me = par_rank(), .P = par_size()};
    s.TX = s.c.sc.nx / s.c.tile;
    s.TY = s.c.sc.ny / s.c.tile;
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

    if (s.c.sc.corrupt && s.me == s.P - 1 && s.ntiles > 0)
        s.tiles[s.ntiles - 1].cur[AT(&s.tiles[s.ntiles - 1], 0, 0)] += 1e-9;
    char setup[256];
    snprintf(setup, sizeof setup,
             "stencil (%s): %d x %d cells, %d x %d tiles of %d, %d iterations; %d ranks x %d %s, %d tasks on rank 0",
             strcmp(par_name(), "mpiv") == 0 ? "mpiv" : "mpi + pthreads twin", s.c.sc.nx, s.c.sc.ny, s.TX, s.TY,
             s.c.tile, s.c.sc.iters, s.P, par_threads(), strcmp(par_name(), "mpiv") == 0 ? "workers" : "threads",
             ngroups);
    int ok = stencil_report(&s.c.sc, setup, t, check(&s));
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
    struct config c = {STENCIL_CONFIG_DEFAULT, 0, 1, 0}; /* tile 0: default_tile */
    parse_args(argc, argv, &c);
    int rc = par_run(stencil_main, &c);
    par_finalize();
    return rc;
}
