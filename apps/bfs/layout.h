/*
 * layout.h — a BFS kernel's own copy of the adjacency, laid out for fast
 * scans; bfs.c always uses it, bfs_expert.c with --layout positions.
 *
 * Each neighbour is a 32-bit position: owner << sbits | owner's local
 * index, where 2^sbits is the largest local vertex count rounded up to a
 * power of two (at least 64). So
 *  - a neighbour's owner and local index are a shift and a mask for any
 *    rank count (graph.h's v % P and v / P are 64-bit divisions);
 *  - the position is the neighbour's bit in the frontier gathered from
 *    every rank, when rank r's bitmap is words [r W, (r + 1) W) of it with
 *    W = 2^sbits / 64;
 *  - a scan reads half the bytes of graph.h's 64-bit ids.
 * Each list is ordered by the neighbours' degrees, highest first: a
 * bottom-up scan stops at the first neighbour in the frontier, and in a
 * Kronecker graph the high-degree vertices are reached in the first
 * levels, so tried first they end most scans after one or two entries.
 * Top-down levels do not care about the order.
 *
 * None of this needs ULTs; it is built once per graph, outside the timed
 * searches.
 */
#ifndef BFS_LAYOUT_H
#define BFS_LAYOUT_H

#include <stdint.h>

#include "graph.h"

struct bfs_layout {
    const struct graph *g;
    int P, sbits;
    uint32_t smask;  /* 2^sbits - 1 */
    int64_t W;       /* words of one rank's bitmap: 2^sbits / 64 */
    int64_t nwords;  /* words that hold this rank's nlocal vertices */
    uint32_t *adj;   /* g->off-indexed positions */
};

/* Builds l for g. Collective (the degrees of all vertices are gathered
 * with par_allgather); ends the job if positions do not fit 32 bits. */
void bfs_layout_build(struct bfs_layout *l, const struct graph *g);
void bfs_layout_free(struct bfs_layout *l);

static inline int layout_owner(const struct bfs_layout *l, uint32_t pos) { return (int)(pos >> l->sbits); }
static inline uint32_t layout_local(const struct bfs_layout *l, uint32_t pos) { return pos & l->smask; }
static inline int64_t layout_global(const struct bfs_layout *l, uint32_t pos)
{
    return (int64_t)(pos & l->smask) * l->P + (int64_t)(pos >> l->sbits);
}

/* Bottom-up over bitmap words [wlo, whi) of this rank: each vertex not in
 * `visited` takes as parent its first neighbour whose bit is set in `all`
 * (every rank's frontier, by position). Sets the found vertices in
 * `visited`, writes words [wlo, whi) of `next` (exactly the found ones) and
 * their parents; returns how many were found and adds their edges to
 * *edges. Words of different calls may be done at once by different
 * threads. */
int64_t bfs_layout_bottom_up(const struct bfs_layout *l, const uint64_t *all, uint64_t *visited, uint64_t *next,
                             int64_t *parent, int64_t wlo, int64_t whi, int64_t *edges);

/* --phases (driver.c): while bfs_layout_timing is set, every call of
 * bfs_layout_bottom_up adds the nanoseconds it took to bfs_layout_ns
 * (atomically: calls on several threads at once add up their CPU time).
 * Off, a call reads no clock. */
extern int bfs_layout_timing;
extern int64_t bfs_layout_ns;

#endif /* BFS_LAYOUT_H */
