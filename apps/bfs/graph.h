/*
 * graph.h — the Graph500-style Kronecker graph and its 1D distribution.
 *
 * Vertices are numbered 0 .. 2^SCALE - 1 and dealt out cyclically: vertex v
 * belongs to rank v % P and is local vertex v / P there. Each rank keeps, in
 * CSR form, the adjacency of its own vertices (both directions of every
 * edge, self-loops counted apart since they never matter to a BFS).
 */
#ifndef BFS_GRAPH_H
#define BFS_GRAPH_H

#include <stdint.h>

struct graph {
    int scale;
    int64_t n;       /* vertices */
    int64_t m;       /* generated (undirected) edges, n * edgefactor */
    int nranks, me;
    int64_t nlocal;  /* vertices owned here */
    int64_t *off;    /* nlocal + 1: adjacency of local u is adj[off[u] .. off[u+1]) */
    int64_t *adj;    /* global vertex ids */
    int32_t *loops;  /* self-loops on each local vertex */
};

static inline int graph_owner(const struct graph *g, int64_t v) { return (int)(v % g->nranks); }
static inline int64_t graph_local(const struct graph *g, int64_t v) { return v / g->nranks; }
static inline int64_t graph_global(const struct graph *g, int64_t lv) { return lv * g->nranks + g->me; }

/* Kronecker edge number e of the graph of `scale` with initiator
 * A=0.57, B=0.19, C=0.19 (D=0.05) and vertex labels permuted, from seed. */
void kron_edge(int scale, uint64_t seed, int64_t e, int64_t *u, int64_t *v);

/* Builds this rank's part. Every rank generates the whole edge list (cheap
 * up to SCALE ~22) and keeps the endpoints it owns. */
void graph_build(struct graph *g, int scale, int edgefactor, uint64_t seed, int nranks, int me);
void graph_free(struct graph *g);

/* splitmix64: a small counter-based generator shared by the generator and
 * the root picker. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#endif /* BFS_GRAPH_H */
