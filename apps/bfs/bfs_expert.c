/*
 * bfs_expert.c — the BFS an expert MPI programmer would write for this
 * problem, in plain MPI-3.1 (no threads: one rank per core), as the
 * baseline MPIv's bfs is measured against.
 *
 * Same graph, roots, validation and report as bfs (driver.c); only the
 * kernel differs. It is level-synchronous over the same 1D cyclic
 * distribution and takes each level one of two ways (Beamer, Asanovic and
 * Patterson, "Direction-optimizing breadth-first search", SC 2012):
 *
 *  - top-down, while the frontier is small: every frontier vertex visits
 *    its local neighbours at once and appends one 64-bit request (owner's
 *    local index << 32 | parent) per remote neighbour to that owner's
 *    segment of one send buffer; one MPI_Alltoall of the counts and one
 *    MPI_Alltoallv of the requests per level, then the owners apply them.
 *    Visited vertices are a bitmap (one bit per local vertex), so the test
 *    that rejects most requests touches 1/64 of the memory of the parent
 *    array;
 *  - bottom-up, while the frontier is large: every rank's frontier bitmap
 *    is gathered on every rank (MPI_Allgather, n bits in all) and each
 *    unvisited local vertex scans its neighbours until it meets one in the
 *    frontier, which becomes its parent; no requests are sent at all.
 *
 * The switch (direction.h) follows the paper's heuristic with its
 * constants: go bottom-up when the frontier's edges m_f exceed the
 * unvisited vertices' edges m_u / alpha (alpha 14) while the frontier
 * grows, come back top-down when the frontier's vertices n_f fall below
 * n / beta (beta 24) while it shrinks. The three sums come from the one allreduce per level that also
 * ends the search (n_f = 0).
 *
 * Requests carry 32-bit vertex numbers: --scale is at most 26.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "direction.h"
#include "driver.h"
#include "layout.h"
#include "opts.h"
#include "par.h"

struct xbfs {
    const struct graph *g;
    int P, me;
    struct bfs_dir_config dc;
    int use_layout;        /* bottom-up scans lay (--layout positions) */
    struct bfs_layout lay;
    int64_t W;             /* words of one rank's bitmap: ceil(max nlocal / 64) */
    uint64_t *visited;     /* W words, bit lv: local vertex lv visited */
    uint64_t *front_bm;    /* W words: this level's frontier (bottom-up) */
    uint64_t *next_bm;     /* W words: the next level's (bottom-up) */
    uint64_t *all_front;   /* P * W words: every rank's frontier bitmap */
    int64_t *front, *next; /* local ids (top-down) */
    uint64_t *sbuf;        /* P segments of seg requests each */
    int64_t seg;
    uint64_t *rbuf;
    int64_t rcap;
    int *scounts, *sdispls, *rcounts, *rdispls;
    int64_t levels_td, levels_bu; /* over all roots, for the report */
};

static void *xbfs_alloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        par_die("bfs_expert: out of memory");
    return p;
}

/* Makes every segment of the send buffer hold at least `need` requests,
 * keeping the first cnt[p] of each. */
static void grow_segments(struct xbfs *x, int64_t need, const int64_t *cnt)
{
    int64_t seg = x->seg ? x->seg : 1024;
    while (seg < need)
        seg *= 2;
    uint64_t *nb = xbfs_alloc((size_t)seg * (size_t)x->P, sizeof *nb);
    for (int p = 0; p < x->P && x->sbuf; p++)
        memcpy(nb + (size_t)p * (size_t)seg, x->sbuf + (size_t)p * (size_t)x->seg, (size_t)cnt[p] * sizeof *nb);
    free(x->sbuf);
    x->sbuf = nb;
    x->seg = seg;
}

/* Marks local vertex lw visited with global parent `par`, if it was not. */
static inline int64_t claim(struct xbfs *x, int64_t *parent, int64_t lw, int64_t par)
{
    if (bm_test(x->visited, lw))
        return 0;
    bm_set(x->visited, lw);
    parent[lw] = par;
    return 1;
}

/* One top-down level: front[0..nfront) to next[], returns the next
 * frontier's size and its edges in *mf. */
static int64_t top_down(struct xbfs *x, int64_t *parent, int64_t nfront, int64_t *mf)
{
    const struct graph *g = x->g;
    int P = x->P, me = x->me;
    int64_t nnext = 0, edges = 0;
    int64_t cnt[P];
    memset(cnt, 0, sizeof cnt);
    for (int64_t i = 0; i < nfront; i++) {
        int64_t lu = x->front[i], gu = graph_global(g, lu);
        for (int64_t k = g->off[lu]; k < g->off[lu + 1]; k++) {
            int64_t w = g->adj[k];
            int o = graph_owner(g, w);
            int64_t lw = graph_local(g, w);
            if (o == me) {
                if (claim(x, parent, lw, gu)) {
                    x->next[nnext++] = lw;
                    edges += g->off[lw + 1] - g->off[lw];
                }
                continue;
            }
            if (cnt[o] == x->seg)
                grow_segments(x, cnt[o] + 1, cnt);
            x->sbuf[(size_t)o * (size_t)x->seg + (size_t)cnt[o]++] = req_pack(lw, gu);
        }
    }
    if (P > 1) {
        if ((int64_t)P * x->seg > INT_MAX)
            par_die("bfs_expert: %lld requests per rank exceed MPI's int displacements", (long long)x->seg);
        for (int p = 0; p < P; p++) {
            x->scounts[p] = (int)cnt[p];
            x->sdispls[p] = (int)((int64_t)p * x->seg);
        }
        MPI_Alltoall(x->scounts, 1, MPI_INT, x->rcounts, 1, MPI_INT, MPI_COMM_WORLD);
        int64_t total = 0;
        for (int p = 0; p < P; p++) {
            x->rdispls[p] = (int)total;
            total += x->rcounts[p];
        }
        if (total > x->rcap) {
            free(x->rbuf);
            x->rcap = total * 2;
            x->rbuf = xbfs_alloc((size_t)x->rcap, sizeof *x->rbuf);
        }
        MPI_Alltoallv(x->sbuf, x->scounts, x->sdispls, MPI_UINT64_T, x->rbuf, x->rcounts, x->rdispls, MPI_UINT64_T,
                      MPI_COMM_WORLD);
        for (int64_t i = 0; i < total; i++) {
            int64_t lw = req_local(x->rbuf[i]), gu = req_parent(x->rbuf[i]);
            if (claim(x, parent, lw, gu)) {
                x->next[nnext++] = lw;
                edges += g->off[lw + 1] - g->off[lw];
            }
        }
    }
    *mf = edges;
    return nnext;
}

/* One bottom-up level: front_bm to next_bm, returns the next frontier's
 * size and its edges in *mf. */
static int64_t bottom_up(struct xbfs *x, int64_t *parent, int64_t *mf)
{
    const struct graph *g = x->g;
    int64_t W = x->W, nnext = 0, edges = 0;
    MPI_Allgather(x->front_bm, (int)W, MPI_UINT64_T, x->all_front, (int)W, MPI_UINT64_T, MPI_COMM_WORLD);
    if (x->use_layout) {
        nnext = bfs_layout_bottom_up(&x->lay, x->all_front, x->visited, x->next_bm, parent, 0, x->lay.nwords, &edges);
        *mf = edges;
        return nnext;
    }
    memset(x->next_bm, 0, (size_t)W * sizeof *x->next_bm);
    for (int64_t wi = 0; wi < W; wi++) {
        uint64_t todo = ~x->visited[wi];
        while (todo) {
            int64_t lv = wi * 64 + __builtin_ctzll(todo);
            todo &= todo - 1;
            if (lv >= g->nlocal)
                break;
            for (int64_t k = g->off[lv]; k < g->off[lv + 1]; k++) {
                int64_t w = g->adj[k];
                if (bm_test(x->all_front + (size_t)graph_owner(g, w) * (size_t)W, graph_local(g, w))) {
                    bm_set(x->visited, lv);
                    bm_set(x->next_bm, lv);
                    parent[lv] = w;
                    nnext++;
                    edges += g->off[lv + 1] - g->off[lv];
                    break;
                }
            }
        }
    }
    *mf = edges;
    return nnext;
}

static double xbfs_run(void *state, int64_t root, int64_t *parent)
{
    struct xbfs *x = state;
    const struct graph *g = x->g;
    for (int64_t i = 0; i < g->nlocal; i++)
        parent[i] = -1;
    memset(x->visited, 0, (size_t)x->W * sizeof *x->visited);
    int64_t nfront = 0;      /* local frontier size */
    int64_t mu = g->off[g->nlocal]; /* local edges of unvisited vertices */
    if (graph_owner(g, root) == x->me) {
        int64_t lr = graph_local(g, root);
        bm_set(x->visited, lr);
        parent[lr] = root;
        x->front[nfront++] = lr;
        mu -= g->off[lr + 1] - g->off[lr];
    }
    int bottom = bfs_dir_first(&x->dc); /* this level goes bottom-up */
    int as_bitmap = 0; /* the frontier is in front_bm, not front[] */
    int64_t nf_global = 1, prev_nf = 0, mf_global = 0, mu_global = 0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (;;) {
        int64_t mf, nnext;
        if (bottom) {
            if (!as_bitmap) {
                memset(x->front_bm, 0, (size_t)x->W * sizeof *x->front_bm);
                for (int64_t i = 0; i < nfront; i++)
                    bm_set(x->front_bm, x->front[i]);
            }
            nnext = bottom_up(x, parent, &mf);
            uint64_t *t = x->front_bm;
            x->front_bm = x->next_bm;
            x->next_bm = t;
            as_bitmap = 1;
            x->levels_bu++;
        } else {
            if (as_bitmap) {
                nfront = 0;
                for (int64_t lv = 0; lv < g->nlocal; lv++)
                    if (bm_test(x->front_bm, lv))
                        x->front[nfront++] = lv;
            }
            nnext = top_down(x, parent, nfront, &mf);
            int64_t *t = x->front;
            x->front = x->next;
            x->next = t;
            as_bitmap = 0;
            x->levels_td++;
        }
        nfront = nnext;
        mu -= mf;
        int64_t in[3] = {nnext, mf, mu}, out[3];
        MPI_Allreduce(in, out, 3, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        prev_nf = nf_global;
        nf_global = out[0];
        mf_global = out[1];
        mu_global = out[2];
        if (nf_global == 0)
            break;
        bottom = bfs_dir_next(&x->dc, bottom, g->n, nf_global, prev_nf, mf_global, mu_global);
    }
    return MPI_Wtime() - t0;
}

struct config {
    struct bfs_config bc;
    struct bfs_dir_config dc;
    int use_layout;
};

static void *xbfs_setup(const struct graph *g, void *arg)
{
    const struct config *c = arg;
    struct xbfs *x = xbfs_alloc(1, sizeof *x);
    x->g = g;
    x->P = g->nranks;
    x->me = g->me;
    x->dc = c->dc;
    int64_t maxlocal = (g->n + g->nranks - 1) / g->nranks;
    x->W = (maxlocal + 63) / 64;
    x->use_layout = c->use_layout;
    if (x->use_layout) {
        bfs_layout_build(&x->lay, g);
        x->W = x->lay.W; /* bitmaps by position */
    }
    x->visited = xbfs_alloc((size_t)x->W, sizeof *x->visited);
    x->front_bm = xbfs_alloc((size_t)x->W, sizeof *x->front_bm);
    x->next_bm = xbfs_alloc((size_t)x->W, sizeof *x->next_bm);
    x->all_front = xbfs_alloc((size_t)x->W * (size_t)x->P, sizeof *x->all_front);
    x->front = xbfs_alloc((size_t)g->nlocal, sizeof *x->front);
    x->next = xbfs_alloc((size_t)g->nlocal, sizeof *x->next);
    x->scounts = xbfs_alloc((size_t)x->P, sizeof(int));
    x->sdispls = xbfs_alloc((size_t)x->P, sizeof(int));
    x->rcounts = xbfs_alloc((size_t)x->P, sizeof(int));
    x->rdispls = xbfs_alloc((size_t)x->P, sizeof(int));
    int64_t zero[x->P];
    memset(zero, 0, sizeof zero);
    grow_segments(x, 1024, zero);
    x->rcap = 1024;
    x->rbuf = xbfs_alloc((size_t)x->rcap, sizeof *x->rbuf);
    return x;
}

static void xbfs_teardown(void *state)
{
    struct xbfs *x = state;
    if (x->me == 0)
        printf("levels: %lld top-down, %lld bottom-up (all roots)\n", (long long)x->levels_td,
               (long long)x->levels_bu);
    if (x->use_layout)
        bfs_layout_free(&x->lay);
    free(x->visited);
    free(x->front_bm);
    free(x->next_bm);
    free(x->all_front);
    free(x->front);
    free(x->next);
    free(x->sbuf);
    free(x->rbuf);
    free(x->scounts);
    free(x->sdispls);
    free(x->rcounts);
    free(x->rdispls);
    free(x);
}

static const char usage[] =
    "Usage: bfs_expert [options]   (start with mpiexec -n N)\n"
    "Graph500-style BFS on a Kronecker graph (A=.57 B=.19 C=.19), 1D-distributed,\n"
    "written as an expert MPI programmer would: one single-threaded rank per core,\n"
    "requests coalesced per level into one MPI_Alltoallv, a visited bitmap, and\n"
    "bottom-up levels (frontier bitmaps gathered with MPI_Allgather) when the\n"
    "frontier is large (direction-optimizing BFS, Beamer et al. 2012).\n"
    "Same graph, roots and Graph500 validation as bfs; reports harmonic-mean TEPS.\n"
    BFS_COMMON_USAGE
    BFS_DIR_USAGE
    "  --layout L       positions (default): bottom-up levels scan a copy of the\n"
    "                   adjacency as 32-bit positions, lists ordered by degree,\n"
    "                   prefetched (layout.h, the MPIv kernel's); ids: they scan\n"
    "                   the graph's 64-bit ids, owner and local index by division\n"
    "Exit status: 0 valid, 1 validation or runtime failure, 2 bad arguments.\n";

static int match_opt(struct opts *o, void *ctx)
{
    struct config *c = ctx;
    if (bfs_common_opt(o, &c->bc) || bfs_dir_opt(o, &c->dc))
        return 1;
    if (!opts_match(o, "--layout", 1))
        return 0;
    if (strcmp(o->val, "ids") == 0)
        c->use_layout = 0;
    else if (strcmp(o->val, "positions") == 0)
        c->use_layout = 1;
    else
        opts_fail(o, "--layout %s: expected ids or positions", o->val);
    return 1;
}

static void parse_args(int argc, char **argv, struct config *c)
{
    opts_parse(argc, argv, "bfs_expert", usage, match_opt, NULL, c);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    par_init(&argc, &argv); /* for driver.c and validate.c */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    /* positions by default: the faster layout is what an expert would
     * use, and the baseline must be the strongest MPI code we know */
    struct config c = {BFS_CONFIG_DEFAULT, BFS_DIR_CONFIG_DEFAULT, 1};
    parse_args(argc, argv, &c);
    struct bfs_kernel k = {"expert MPI, Alltoallv + direction-optimizing", xbfs_setup, xbfs_run, xbfs_teardown, &c};
    int rc = bfs_drive(&c.bc, &k, "1 thread");
    par_finalize();
    return rc;
}
