/*
 * graph.c — Kronecker generator and CSR construction.
 *
 * The generator is counter based: edge e draws its random numbers from
 * splitmix64 seeded with (seed, e), so any rank can produce any edge without
 * coordination and all ranks agree on the graph. Each of the SCALE levels of
 * the recursion picks a quadrant of the adjacency matrix with probabilities
 * A, B, C, D (the Graph500 specification's initiator); the row bit is set
 * with probability C + D, the column bit then with D/(C+D) or B/(A+B).
 * Labels are then scrambled by a bijection on SCALE bits (odd multiplies and
 * xor-shifts, each invertible modulo 2^SCALE), so that vertex numbers carry
 * no information about degree, as the specification's permutation intends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "par.h"

#define KRON_A 0.57
#define KRON_B 0.19
#define KRON_C 0.19

static inline double unit(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ULL;
    return (double)(mix64(*s) >> 11) * 0x1.0p-53;
}

static int64_t permute(int scale, uint64_t seed, int64_t x)
{
    uint64_t mask = scale >= 64 ? ~0ULL : (1ULL << scale) - 1;
    int sh = (scale + 1) / 2;
    uint64_t y = (uint64_t)x;
    for (int r = 0; r < 3; r++) {
        uint64_t k = mix64(seed + 0x1234567ULL * (uint64_t)(r + 1));
        y = (y * (k | 1)) & mask;
        y = (y + (k >> 17)) & mask;
        y ^= y >> sh;
    }
    return (int64_t)y;
}

void kron_edge(int scale, uint64_t seed, int64_t e, int64_t *u, int64_t *v)
{
    const double ab = KRON_A + KRON_B;
    const double c_norm = KRON_C / (1.0 - ab);
    const double a_norm = KRON_A / ab;
    uint64_t s = mix64(seed ^ mix64((uint64_t)e + 0x5851f42d4c957f2dULL));
    int64_t i = 0, j = 0;
    for (int b = 0; b < scale; b++) {
        int ib = unit(&s) > ab;
        int jb = unit(&s) > (ib ? c_norm : a_norm);
        i |= (int64_t)ib << b;
        j |= (int64_t)jb << b;
    }
    *u = permute(scale, seed, i);
    *v = permute(scale, seed, j);
}

void graph_build(struct graph *g, int scale, int edgefactor, uint64_t seed, int nranks, int me)
{
    memset(g, 0, sizeof *g);
    g->scale = scale;
    g->n = (int64_t)1 << scale;
    g->m = g->n * edgefactor;
    g->nranks = nranks;
    g->me = me;
    g->nlocal = (g->n - me + nranks - 1) / nranks;
    g->off = calloc((size_t)g->nlocal + 1, sizeof *g->off);
    g->loops = calloc((size_t)g->nlocal + 1, sizeof *g->loops);
    if (!g->off || !g->loops)
        par_die("graph: out of memory for %lld vertices", (long long)g->nlocal);

    /* Pass 1: degrees of owned vertices. */
    for (int64_t e = 0; e < g->m; e++) {
        int64_t u, v;
        kron_edge(scale, seed, e, &u, &v);
        if (u == v) {
            if (graph_owner(g, u) == me)
                g->loops[graph_local(g, u)]++;
            continue;
        }
        if (graph_owner(g, u) == me)
            g->off[graph_local(g, u) + 1]++;
        if (graph_owner(g, v) == me)
            g->off[graph_local(g, v) + 1]++;
    }
    for (int64_t i = 0; i < g->nlocal; i++)
        g->off[i + 1] += g->off[i];
    g->adj = malloc(((size_t)g->off[g->nlocal] + 1) * sizeof *g->adj);
    int64_t *fill = malloc(((size_t)g->nlocal + 1) * sizeof *fill);
    if (!g->adj || !fill)
        par_die("graph: out of memory for %lld adjacencies", (long long)g->off[g->nlocal]);
    memcpy(fill, g->off, (size_t)g->nlocal * sizeof *fill);

    /* Pass 2: fill. */
    for (int64_t e = 0; e < g->m; e++) {
        int64_t u, v;
        kron_edge(scale, seed, e, &u, &v);
        if (u == v)
            continue;
        if (graph_owner(g, u) == me)
            g->adj[fill[graph_local(g, u)]++] = v;
        if (graph_owner(g, v) == me)
            g->adj[fill[graph_local(g, v)]++] = u;
    }
    free(fill);
}

void graph_free(struct graph *g)
{
    free(g->off);
    free(g->adj);
    free(g->loops);
    memset(g, 0, sizeof *g);
}
