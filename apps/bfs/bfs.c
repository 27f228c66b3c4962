/*
 * bfs.c — Graph500-style breadth-first search on MPIv, and the same program
 * on MPI + pthreads (bfs_mpi: the twin, which maps this one-task-per-chunk
 * shape onto pthreads; bfs_expert.c is the BFS an MPI programmer would
 * write).
 *
 * Level-synchronous BFS over a 1D-distributed Kronecker graph (graph.h).
 * In every level each rank
 *   - runs one task per chunk of its frontier (par_for: a ULT each on MPIv):
 *     the task visits local neighbours itself (a compare-and-swap on the
 *     parent array) and batches (vertex, parent) visit requests for remote
 *     neighbours into one buffer per owner rank, sent when full;
 *   - runs `recv` receiving tasks per peer rank that apply visit requests as
 *     they arrive;
 *   - once its chunk tasks are done, sends every receiving task of every peer
 *     an empty message. Messages with the same (source, tag) are matched in
 *     order, so all requests of the level reach the receivers before the
 *     empty ones: a receiver that got an empty message has nothing more to
 *     wait for this level;
 *   - adds up the next frontier over all ranks (allreduce): zero ends the BFS.
 * The allreduce also keeps levels apart: no rank starts sending level k+1
 * before every rank has joined its receivers of level k.
 *
 * The graph, the roots, the validation and the report are driver.c's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "opts.h"
#include "par.h"

enum { TAG_VISIT = 1 };

struct bfs {
    const struct graph *g;
    int chunk;        /* frontier vertices per task */
    int recv;         /* receiving tasks per peer rank */
    int bufcap;       /* visit requests per message */
    int64_t *parent;  /* per local vertex: global parent id, -1 unvisited */
    int64_t *front;   /* local ids of this level's frontier */
    int64_t nfront;
    int64_t *next;    /* local ids of the next level, appended atomically */
    int64_t nnext;
};

struct level {
    struct bfs *b;
    int peer;
};

static inline void visit(struct bfs *b, int64_t lw, int64_t par)
{
    int64_t expected = -1;
    if (__atomic_load_n(&b->parent[lw], __ATOMIC_RELAXED) != -1)
        return;
    /* Relaxed is enough: next[] and parent[] are read only after the tasks
     * that wrote them have been joined. */
    if (__atomic_compare_exchange_n(&b->parent[lw], &expected, par, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        int64_t k = __atomic_fetch_add(&b->nnext, 1, __ATOMIC_RELAXED);
        b->next[k] = lw;
    }
}

static void expand_chunk(void *arg, int64_t c)
{
    struct bfs *b = arg;
    const struct graph *g = b->g;
    int P = g->nranks, me = g->me;
    int64_t lo = c * b->chunk, hi = lo + b->chunk;
    if (hi > b->nfront)
        hi = b->nfront;
    int64_t *buf = P > 1 ? malloc((size_t)P * (size_t)b->bufcap * 2 * sizeof *buf) : NULL;
    int64_t *fill = P > 1 ? calloc((size_t)P, sizeof *fill) : NULL;
    if (P > 1 && (!buf || !fill))
        par_die("bfs: out of memory for send buffers");
    for (int64_t i = lo; i < hi; i++) {
        int64_t lu = b->front[i];
        int64_t gu = graph_global(g, lu);
        for (int64_t k = g->off[lu]; k < g->off[lu + 1]; k++) {
            int64_t w = g->adj[k];
            int o = graph_owner(g, w);
            if (o == me) {
                visit(b, graph_local(g, w), gu);
                continue;
            }
            int64_t *p = buf + ((size_t)o * (size_t)b->bufcap + (size_t)fill[o]) * 2;
            p[0] = w;
            p[1] = gu;
            if (++fill[o] == b->bufcap) {
                par_send(buf + (size_t)o * (size_t)b->bufcap * 2, (size_t)fill[o] * 2 * sizeof *buf, o, TAG_VISIT);
                fill[o] = 0;
                /* Let this worker's receivers drain what the peers sent us
                 * before sending more: a worker that only sends lets
                 * unexpected messages pile up and use up packets. */
                par_yield();
            }
        }
    }
    for (int o = 0; o < P; o++)
        if (o != me && fill && fill[o])
            par_send(buf + (size_t)o * (size_t)b->bufcap * 2, (size_t)fill[o] * 2 * sizeof *buf, o, TAG_VISIT);
    free(buf);
    free(fill);
}

static void *receiver(void *arg)
{
    struct level *l = arg;
    struct bfs *b = l->b;
    const struct graph *g = b->g;
    int64_t *buf = malloc((size_t)b->bufcap * 2 * sizeof *buf);
    if (!buf)
        par_die("bfs: out of memory for a receive buffer");
    for (;;) {
        size_t got = par_recv(buf, (size_t)b->bufcap * 2 * sizeof *buf, l->peer, TAG_VISIT);
        if (got == 0)
            break;
        size_t npairs = got / (2 * sizeof *buf);
        for (size_t i = 0; i < npairs; i++)
            visit(b, graph_local(g, buf[2 * i]), buf[2 * i + 1]);
    }
    free(buf);
    return NULL;
}

static double bfs_run(void *state, int64_t root, int64_t *parent)
{
    struct bfs *b = state;
    const struct graph *g = b->g;
    b->parent = parent;
    int P = g->nranks, me = g->me;
    for (int64_t i = 0; i < g->nlocal; i++)
        b->parent[i] = -1;
    b->nfront = 0;
    b->nnext = 0;
    if (graph_owner(g, root) == me) {
        b->parent[graph_local(g, root)] = root;
        b->front[b->nfront++] = graph_local(g, root);
    }
    int nrecv = (P - 1) * b->recv;
    struct level *lv = malloc(((size_t)nrecv + 1) * sizeof *lv);
    par_task_t **rt = malloc(((size_t)nrecv + 1) * sizeof *rt);
    if (!lv || !rt)
        par_die("bfs: out of memory");
    static const int64_t dummy = 0;

    par_barrier();
    double t0 = par_wtime();
    for (;;) {
        int k = 0;
        for (int p = 0; p < P; p++)
            for (int r = 0; r < b->recv && p != me; r++, k++) {
                lv[k] = (struct level){b, p};
                rt[k] = par_spawn(receiver, &lv[k], k + 1);
            }
        par_for((b->nfront + b->chunk - 1) / b->chunk, expand_chunk, b);
        for (int p = 0; p < P; p++)
            for (int r = 0; r < b->recv && p != me; r++)
                par_send(&dummy, 0, p, TAG_VISIT);
        for (int i = 0; i < nrecv; i++)
            par_join(rt[i]);

        int64_t *t = b->front;
        b->front = b->next;
        b->next = t;
        b->nfront = b->nnext;
        b->nnext = 0;
        int64_t total;
        par_allreduce_i64(&b->nfront, &total, 1, PAR_SUM);
        if (total == 0)
            break;
    }
    double t = par_wtime() - t0;
    free(lv);
    free(rt);
    return t;
}

struct config {
    struct bfs_config bc;
    int chunk, recv, bufcap, threads;
};

static const char usage[] =
    "Usage: bfs [options]   (start with mpiv_run -n N, or mpiexec for bfs_mpi)\n"
    "Graph500-style BFS on a Kronecker graph (A=.57 B=.19 C=.19), 1D-distributed.\n"
    "Every BFS is validated by the Graph500 rules; reports harmonic-mean TEPS.\n"
    "bfs runs on MPIv, one ULT per chunk of the frontier. bfs_mpi is its twin:\n"
    "the same program with pthreads instead of ULTs over MPI_THREAD_MULTIPLE,\n"
    "not the way an MPI programmer would write a BFS (that is bfs_expert).\n"
    BFS_COMMON_USAGE
    "  --chunk C        frontier vertices per task (default 64)\n"
    "  --recv R         receiving tasks per peer rank (default: 4 ULTs with MPIv,\n"
    "                   1 pthread with MPI, where each one is a polling thread)\n"
    "  --buf B          visit requests per message (default 256: 4 KiB)\n"
    "  --threads T      bfs_mpi: pthreads per rank (default cores/ranks); ignored by MPIv\n"
    "Exit status: 0 valid, 1 validation or runtime failure, 2 bad arguments.\n";

static int match_opt(struct opts *o, void *ctx)
{
    struct config *c = ctx;
    if (bfs_common_opt(o, &c->bc))
        return 1;
    if (opts_match(o, "--chunk", 1))
        c->chunk = (int)opts_i64(o, "--chunk", 1, 1 << 24);
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

static void *bfs_setup(const struct graph *g, void *arg)
{
    const struct config *c = arg;
    struct bfs *b = calloc(1, sizeof *b);
    if (!b)
        par_die("bfs: out of memory");
    *b = (struct bfs){.g = g, .chunk = c->chunk, .recv = c->recv, .bufcap = c->bufcap};
    b->front = malloc(((size_t)g->nlocal + 1) * sizeof *b->front);
    b->next = malloc(((size_t)g->nlocal + 1) * sizeof *b->next);
    if (!b->front || !b->next)
        par_die("bfs: out of memory");
    return b;
}

static void bfs_teardown(void *state)
{
    struct bfs *b = state;
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
    struct config c = {BFS_CONFIG_DEFAULT, 64, 0, 256, 0};
    parse_args(argc, argv, &c);
    int rc = par_run(bfs_main, &c);
    par_finalize();
    return rc;
}
