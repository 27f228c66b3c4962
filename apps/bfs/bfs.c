/*
 * bfs.c — Graph500-style breadth-first search on MPIv, and the same program
 * on MPI + pthreads (bfs_mpi: the twin, which maps this one-task-per-chunk
 * shape onto pthreads; bfs_expert.c is the BFS an MPI programmer would
 * write).
 *
 * Level-synchronous, direction-optimizing BFS (direction.h) over a
 * 1D-distributed Kronecker graph (graph.h). Each level goes one of two ways:
 *
 *  - top-down, while the frontier is small: one task per chunk of the
 *    frontier (par_for: a ULT each on MPIv) visits local neighbours itself
 *    (a bit claimed in the visited bitmap) and batches 64-bit visit requests
 *    for remote neighbours into one buffer per owner, sent as soon as it is
 *    full, so that messages leave while other tasks still compute; `recv`
 *    receiving tasks per peer rank apply the requests as they arrive. Once
 *    its chunk tasks are done a rank sends every receiving task of every
 *    peer an empty message. Messages with the same (source, tag) are matched
 *    in order, so a receiver that got its empty message has all requests of
 *    the level: a per-peer count, no barrier;
 *  - bottom-up, while it is large: the frontier is a bitmap, gathered from
 *    every rank (par_allgather), and one task per run of bitmap words checks
 *    each of its unvisited vertices' neighbours until one is in the
 *    frontier. No requests at all; each task owns its words, so no atomics.
 *
 * One allreduce per level adds up the next frontier's vertices and edges
 * and the unvisited vertices' edges: it ends the search (no frontier left),
 * chooses the next level's direction, and keeps levels apart (no rank sends
 * requests of level k+1 before every rank has joined its receivers of
 * level k).
 *
 * The kernel scans its own copy of the adjacency (layout.h): 32-bit
 * owner/local positions, no division, each list ordered by the
 * neighbours' degrees; none of that needs ULTs, and bfs_expert can use it
 * too (--layout positions).
 *
 * The graph, the roots, the validation and the report are driver.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "direction.h"
#include "driver.h"
#include "layout.h"
#include "opts.h"
#include "par.h"

enum { TAG_VISIT = 1 };

struct bfs {
    const struct graph *g;
    struct bfs_dir_config dc;
    int chunk;          /* frontier vertices per top-down task */
    int words;          /* bitmap words per bottom-up task */
    int recv;           /* receiving tasks per peer rank */
    int bufcap;         /* visit requests per message */
    int P, me;
    struct bfs_layout lay;
    int64_t *parent;    /* per local vertex: global parent id, -1 unvisited */
    uint64_t *visited;  /* lay.W words */
    uint64_t *front_bm; /* lay.W words: this level's frontier, bottom-up */
    uint64_t *next_bm;  /* lay.W words: the next one's */
    uint64_t *all_front;/* P * lay.W words: every rank's front_bm, by position */
    uint32_t *front;    /* local ids of this level's frontier, top-down */
    int64_t nfront;
    uint32_t *next;     /* the next level's, appended atomically */
    int64_t nnext;      /* atomic */
    int64_t mf;         /* atomic: edges of the next frontier */
    int64_t levels_td, levels_bu; /* over all roots, for the report */
};

struct level {
    struct bfs *b;
    int peer;
};

static inline void visit(struct bfs *b, uint32_t lw, int64_t par)
{
    if (!bm_claim(b->visited, lw))
        return;
    b->parent[lw] = par;
    b->next[__atomic_fetch_add(&b->nnext, 1, __ATOMIC_RELAXED)] = lw;
}

static void top_down_chunk(void *arg, int64_t c)
{
    struct bfs *b = arg;
    const int64_t *off = b->g->off;
    const struct bfs_layout *l = &b->lay;
    int P = b->P, me = b->me;
    size_t cap = (size_t)b->bufcap;
    int64_t lo = c * b->chunk, hi = lo + b->chunk;
    if (hi > b->nfront)
        hi = b->nfront;
    uint64_t *buf = P > 1 ? malloc((size_t)P * cap * sizeof *buf) : NULL;
    size_t *fill = P > 1 ? calloc((size_t)P, sizeof *fill) : NULL;
    if (P > 1 && (!buf || !fill))
        par_die("bfs: out of memory for send buffers");
    for (int64_t i = lo; i < hi; i++) {
        uint32_t lu = b->front[i];
        int64_t gu = (int64_t)lu * P + me;
        for (int64_t k = off[lu]; k < off[lu + 1]; k++) {
            uint32_t pos = l->adj[k];
            int o = layout_owner(l, pos);
            uint32_t lw = layout_local(l, pos);
            if (o == me) {
                visit(b, lw, gu);
                continue;
            }
            uint64_t *seg = buf + (size_t)o * cap;
            seg[fill[o]] = req_pack(lw, gu);
            if (++fill[o] == cap) {
                par_send(seg, cap * sizeof *buf, o, TAG_VISIT);
                fill[o] = 0;
                /* Let this worker's receivers drain what the peers sent us
                 * before sending more: a worker that only sends lets
                 * unexpected messages pile up and use up packets. */
                par_yield();
            }
        }
    }
    for (int o = 0; o < P && fill; o++)
        if (fill[o])
            par_send(buf + (size_t)o * cap, fill[o] * sizeof *buf, o, TAG_VISIT);
    free(buf);
    free(fill);
}

static void *receiver(void *arg)
{
    struct level *l = arg;
    struct bfs *b = l->b;
    uint64_t *buf = malloc((size_t)b->bufcap * sizeof *buf);
    if (!buf)
        par_die("bfs: out of memory for a receive buffer");
    for (;;) {
        size_t got = par_recv(buf, (size_t)b->bufcap * sizeof *buf, l->peer, TAG_VISIT);
        if (got == 0)
            break;
        for (size_t i = 0; i < got / sizeof *buf; i++)
            visit(b, (uint32_t)req_local(buf[i]), req_parent(buf[i]));
    }
    free(buf);
    return NULL;
}

/* One top-down level: front[] to next[]. */
static void top_down(struct bfs *b, struct level *lv, par_task_t **rt)
{
    static const uint64_t empty = 0;
    int P = b->P, me = b->me, k = 0;
    for (int p = 0; p < P; p++)
        for (int r = 0; r < b->recv && p != me; r++, k++) {
            lv[k] = (struct level){b, p};
            rt[k] = par_spawn(receiver, &lv[k], k + 1);
        }
    par_for((b->nfront + b->chunk - 1) / b->chunk, top_down_chunk, b);
    for (int p = 0; p < P; p++)
        for (int r = 0; r < b->recv && p != me; r++)
            par_send(&empty, 0, p, TAG_VISIT);
    for (int i = 0; i < k; i++)
        par_join(rt[i]);
    const int64_t *off = b->g->off;
    int64_t mf = 0;
    for (int64_t i = 0; i < b->nnext; i++)
        mf += off[b->next[i] + 1] - off[b->next[i]];
    b->mf = mf;
}

static void bottom_up_chunk(void *arg, int64_t c)
{
    struct bfs *b = arg;
    int64_t wlo = c * b->words, whi = wlo + b->words, edges = 0;
    if (whi > b->lay.nwords)
        whi = b->lay.nwords;
    int64_t found = bfs_layout_bottom_up(&b->lay, b->all_front, b->visited, b->next_bm, b->parent, wlo, whi, &edges);
    __atomic_fetch_add(&b->nnext, found, __ATOMIC_RELAXED);
    __atomic_fetch_add(&b->mf, edges, __ATOMIC_RELAXED);
}

/* One bottom-up level: front_bm to next_bm. */
static void bottom_up(struct bfs *b)
{
    par_allgather(b->front_bm, b->all_front, (size_t)b->lay.W * sizeof *b->front_bm);
    par_for((b->lay.nwords + b->words - 1) / b->words, bottom_up_chunk, b);
}

static double bfs_run(void *state, int64_t root, int64_t *parent)
{
    struct bfs *b = state;
    const struct graph *g = b->g;
    int P = b->P;
    b->parent = parent;
    for (int64_t i = 0; i < g->nlocal; i++)
        parent[i] = -1;
    memset(b->visited, 0, (size_t)b->lay.W * sizeof *b->visited);
    b->nfront = 0;
    int64_t mu = g->off[g->nlocal]; /* local edges of unvisited vertices */
    if (graph_owner(g, root) == b->me) {
        int64_t lr = graph_local(g, root);
        bm_set(b->visited, lr);
        parent[lr] = root;
        b->front[b->nfront++] = (uint32_t)lr;
        mu -= g->off[lr + 1] - g->off[lr];
    }
    int nrecv = (P - 1) * b->recv;
    struct level *lv = malloc(((size_t)nrecv + 1) * sizeof *lv);
    par_task_t **rt = malloc(((size_t)nrecv + 1) * sizeof *rt);
    if (!lv || !rt)
        par_die("bfs: out of memory");
    int bottom = bfs_dir_first(&b->dc);
    int as_bitmap = 0; /* the frontier is in front_bm, not front[] */
    int64_t nf = 1;

    par_barrier();
    double t0 = par_wtime();
    for (;;) {
        b->nnext = 0;
        b->mf = 0;
        if (bottom) {
            if (!as_bitmap) {
                memset(b->front_bm, 0, (size_t)b->lay.W * sizeof *b->front_bm);
                for (int64_t i = 0; i < b->nfront; i++)
                    bm_set(b->front_bm, b->front[i]);
            }
            bottom_up(b);
            uint64_t *t = b->front_bm;
            b->front_bm = b->next_bm;
            b->next_bm = t;
            as_bitmap = 1;
            b->levels_bu++;
        } else {
            if (as_bitmap) {
                b->nfront = 0;
                for (int64_t wi = 0; wi < b->lay.nwords; wi++)
                    for (uint64_t w = b->front_bm[wi]; w; w &= w - 1)
                        b->front[b->nfront++] = (uint32_t)(wi * 64 + __builtin_ctzll(w));
            }
            top_down(b, lv, rt);
            uint32_t *t = b->front;
            b->front = b->next;
            b->next = t;
            as_bitmap = 0;
            b->levels_td++;
        }
        b->nfront = b->nnext;
        mu -= b->mf;
        int64_t in[3] = {b->nnext, b->mf, mu}, out[3];
        par_allreduce_i64(in, out, 3, PAR_SUM);
        if (out[0] == 0)
            break;
        bottom = bfs_dir_next(&b->dc, bottom, g->n, out[0], nf, out[1], out[2]);
        nf = out[0];
    }
    double t = par_wtime() - t0;
    free(lv);
    free(rt);
    return t;
}

struct config {
    struct bfs_config bc;
    struct bfs_dir_config dc;
    int chunk, words, recv, bufcap, threads;
};

static const char usage[] =
    "Usage: bfs [options]   (start with mpiv_run -n N, or mpiexec for bfs_mpi)\n"
    "Graph500-style BFS on a Kronecker graph (A=.57 B=.19 C=.19), 1D-distributed,\n"
    "direction-optimizing: top-down levels send visit requests, bottom-up levels\n"
    "gather the frontier bitmaps. Every BFS is validated by the Graph500 rules;\n"
    "reports harmonic-mean TEPS.\n"
    "bfs runs on MPIv, one ULT per chunk of the frontier. bfs_mpi is its twin:\n"
    "the same program with pthreads instead of ULTs over MPI_THREAD_MULTIPLE,\n"
    "not the way an MPI programmer would write a BFS (that is bfs_expert).\n"
    BFS_COMMON_USAGE
    BFS_DIR_USAGE
    "  --chunk C        top-down: frontier vertices per task (default 64)\n"
    "  --words N        bottom-up: 64-vertex bitmap words per task (default 64)\n"
    "  --recv R         receiving tasks per peer rank (default: 4 ULTs with MPIv,\n"
    "                   1 pthread with MPI, where each one is a polling thread)\n"
    "  --buf B          visit requests per message (default 512: 4 KiB)\n"
    "  --threads T      bfs_mpi: pthreads per rank (default cores/ranks); ignored by MPIv\n"
    "Exit status: 0 valid, 1 validation or runtime failure, 2 bad arguments.\n";

static int match_opt(struct opts *o, void *ctx)
{
    struct config *c = ctx;
    if (bfs_common_opt(o, &c->bc) || bfs_dir_opt(o, &c->dc))
        return 1;
    if (opts_match(o, "--chunk", 1))
        c->chunk = (int)opts_i64(o, "--chunk", 1, 1 << 24);
    else if (opts_match(o, "--words", 1))
        c->words = (int)opts_i64(o, "--words", 1, 1 << 24);
    else if (opts_match(o, "--recv", 1))
        c->recv = (int)opts_i64(o, "--recv", 1, 1024);
    else if (opts_match(o, "--buf", 1))
        c->bufcap = (int)opts_i64(o, "--buf", 1, 1 << 20);
    else if (opts_match(o, "--threads", 1))
        c->threads = (int)opts_i64(o, "--threads", 1, 4096);
    else
        return 0;
    return 1;
}

static void parse_args(int argc, char **argv, struct config *c)
{
    opts_parse(argc, argv, "bfs", usage, match_opt, NULL, c);
    if (c->threads)
        par_set_threads(c->threads);
    if (c->recv == 0)
        c->recv = strcmp(par_name(), "mpiv") == 0 ? 4 : 1;
}

static void *bfs_alloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        par_die("bfs: out of memory");
    return p;
}

static void *bfs_setup(const struct graph *g, void *arg)
{
    const struct config *c = arg;
    struct bfs *b = bfs_alloc(1, sizeof *b);
    *b = (struct bfs){.g = g, .dc = c->dc, .chunk = c->chunk, .words = c->words, .recv = c->recv,
                      .bufcap = c->bufcap, .P = g->nranks, .me = g->me};
    bfs_layout_build(&b->lay, g);
    b->visited = bfs_alloc((size_t)b->lay.W, sizeof *b->visited);
    b->front_bm = bfs_alloc((size_t)b->lay.W, sizeof *b->front_bm);
    b->next_bm = bfs_alloc((size_t)b->lay.W, sizeof *b->next_bm);
    b->all_front = bfs_alloc((size_t)b->lay.W * (size_t)b->P, sizeof *b->all_front);
    b->front = bfs_alloc((size_t)g->nlocal + 1, sizeof *b->front);
    b->next = bfs_alloc((size_t)g->nlocal + 1, sizeof *b->next);
    return b;
}

static void bfs_teardown(void *state)
{
    struct bfs *b = state;
    if (b->me == 0)
        printf("levels: %lld top-down, %lld bottom-up (all roots)\n", (long long)b->levels_td,
               (long long)b->levels_bu);
    bfs_layout_free(&b->lay);
    free(b->visited);
    free(b->front_bm);
    free(b->next_bm);
    free(b->all_front);
    free(b->front);
    free(b->next);
    free(b);
}

static int bfs_main(void *arg)
{
    struct config *c = arg;
    int mpiv = strcmp(par_name(), "mpiv") == 0;
    struct bfs_kernel k = {mpiv ? "mpiv" : "mpi + pthreads twin", bfs_setup, bfs_run, bfs_teardown, c};
    char threads[64];
    snprintf(threads, sizeof threads, "%d %s", par_threads(), mpiv ? "workers" : "threads");
    return bfs_drive(&c->bc, &k, threads);
}

int main(int argc, char **argv)
{
    par_init(&argc, &argv);
    struct config c = {BFS_CONFIG_DEFAULT, BFS_DIR_CONFIG_DEFAULT, 64, 64, 0, 512, 0};
    parse_args(argc, argv, &c);
    int rc = par_run(bfs_main, &c);
    par_finalize();
    return rc;
}
