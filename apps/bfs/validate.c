/*
 * validate.c — the Graph500 checks of a BFS parent array.
 *
 * Every rank gathers the whole parent array (an allreduce with MAX over an
 * array that holds -1 where the rank owns nothing) and derives each vertex's
 * depth by following parent links, which finds cycles and links to unvisited
 * vertices. Then each rank checks its own vertices:
 *   1. the root is its own parent; parents are visited; no cycles;
 *   2. each tree edge (v, parent(v)) is an edge of the graph;
 *   3. for every graph edge, both endpoints are visited or neither is, and
 *      their depths differ by at most one.
 * The traversed edge count for TEPS is the input edges (self-loops and
 * duplicates included) with a visited endpoint.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bfs.h"
#include "par.h"

#define MAX_REPORTED 5

static int64_t report(int64_t nerr, const char *fmt, long long a, long long b)
{
    if (nerr < MAX_REPORTED) {
        fprintf(stderr, "[rank %d] validation: ", par_rank());
        fprintf(stderr, fmt, a, b);
        fputc('\n', stderr);
    }
    return nerr + 1;
}

int64_t bfs_validate(const struct graph *g, const int64_t *parent, int64_t root, int64_t *edges)
{
    int64_t n = g->n, nerr = 0;
    int64_t *par = calloc((size_t)n, sizeof *par);
    int64_t *depth = malloc((size_t)n * sizeof *depth);
    int64_t *stack = malloc((size_t)n * sizeof *stack);
    if (!par || !depth || !stack)
        par_die("validate: out of memory for %lld vertices", (long long)n);
    for (int64_t v = 0; v < n; v++)
        par[v] = -1;
    for (int64_t lv = 0; lv < g->nlocal; lv++)
        par[graph_global(g, lv)] = parent[lv];
    par_allreduce_i64(par, par, (size_t)n, PAR_MAX);

    /* Depths: -1 unvisited, -2 not yet known. */
    for (int64_t v = 0; v < n; v++)
        depth[v] = par[v] < 0 ? -1 : -2;
    if (par[root] != root)
        nerr = report(nerr, "root %lld has parent %lld", root, par[root]);
    else
        depth[root] = 0;
    for (int64_t v = 0; v < n && nerr == 0; v++) {
        if (depth[v] != -2)
            continue;
        int64_t sp = 0, x = v;
        while (depth[x] == -2 && sp <= n) {
            if (par[x] < 0 || par[x] >= n) {
                nerr = report(nerr, "vertex %lld has parent %lld, out of range", x, par[x]);
                break;
            }
            stack[sp++] = x;
            depth[x] = -3; /* on the current path: meeting it again is a cycle */
            x = par[x];
        }
        if (nerr)
            break;
        if (depth[x] == -3) {
            nerr = report(nerr, "parent links from %lld form a cycle through %lld", v, x);
            break;
        }
        if (depth[x] == -1) {
            nerr = report(nerr, "vertex %lld has unvisited parent %lld", stack[sp - 1], x);
            break;
        }
        int64_t d = depth[x];
        while (sp > 0)
            depth[stack[--sp]] = ++d;
    }

    /* The edge checks need every depth: skip them if the tree is broken. */
    int64_t sumdeg = 0, loops = 0;
    for (int64_t lu = 0; lu < g->nlocal && nerr == 0; lu++) {
        int64_t u = graph_global(g, lu);
        int visited = depth[u] >= 0;
        int parent_edge = u == root || !visited;
        for (int64_t k = g->off[lu]; k < g->off[lu + 1]; k++) {
            int64_t w = g->adj[k];
            if (w == par[u])
                parent_edge = 1;
            if (nerr >= MAX_REPORTED)
                break;
            if (visited != (depth[w] >= 0))
                nerr = report(nerr, "edge (%lld, %lld) has one endpoint visited, not the other", u, w);
            else if (visited && llabs(depth[u] - depth[w]) > 1)
                nerr = report(nerr, "edge (%lld, %lld) spans more than one level", u, w);
        }
        if (!parent_edge)
            nerr = report(nerr, "tree edge (%lld, %lld) is not in the graph", u, par[u]);
        if (visited) {
            sumdeg += g->off[lu + 1] - g->off[lu];
            loops += g->loops[lu];
        }
    }
    int64_t in[3] = {nerr, sumdeg, loops}, out[3];
    par_allreduce_i64(in, out, 3, PAR_SUM);
    *edges = out[1] / 2 + out[2];
    free(par);
    free(depth);
    free(stack);
    return out[0];
}
