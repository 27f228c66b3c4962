/*
 * layout.c — see layout.h.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "direction.h"
#include "layout.h"
#include "par.h"

static void *layout_alloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        par_die("bfs: out of memory for the adjacency layout");
    return p;
}

static int cmp_desc(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, c = *(const uint64_t *)y;
    return (a < c) - (a > c);
}

static void order_by_degree(struct bfs_layout *l)
{
    const struct graph *g = l->g;
    size_t S = (size_t)1 << l->sbits;
    uint32_t *mine = layout_alloc(S, sizeof *mine);
    uint32_t *deg = layout_alloc(S * (size_t)l->P, sizeof *deg); /* by position */
    for (int64_t lv = 0; lv < g->nlocal; lv++)
        mine[lv] = (uint32_t)(g->off[lv + 1] - g->off[lv]);
    par_allgather(mine, deg, S * sizeof *mine);
    size_t cap = 0;
    uint64_t *key = NULL;
    for (int64_t lv = 0; lv < g->nlocal; lv++) {
        uint32_t *list = l->adj + g->off[lv];
        size_t d = (size_t)(g->off[lv + 1] - g->off[lv]);
        if (d > cap) {
            free(key);
            cap = d;
            key = layout_alloc(cap, sizeof *key);
        }
        if (d < 2)
            continue; /* nothing to order (and key may still be NULL) */
        for (size_t i = 0; i < d; i++)
            key[i] = (uint64_t)deg[list[i]] << 32 | list[i];
        qsort(key, d, sizeof *key, cmp_desc);
        for (size_t i = 0; i < d; i++)
            list[i] = (uint32_t)key[i];
    }
    free(key);
    free(deg);
    free(mine);
}

void bfs_layout_build(struct bfs_layout *l, const struct graph *g)
{
    *l = (struct bfs_layout){.g = g, .P = g->nranks, .sbits = 6};
    int64_t maxlocal = (g->n + l->P - 1) / l->P;
    while ((1LL << l->sbits) < maxlocal)
        l->sbits++;
    if ((int64_t)l->P << l->sbits > (1LL << 32))
        par_die("bfs: %d ranks x 2^%d local vertices do not fit 32-bit positions", l->P, l->sbits);
    l->smask = (uint32_t)((1ULL << l->sbits) - 1);
    l->W = (1LL << l->sbits) / 64;
    l->nwords = (g->nlocal + 63) / 64;
    int64_t nadj = g->off[g->nlocal];
    l->adj = layout_alloc((size_t)nadj, sizeof *l->adj);
    for (int64_t k = 0; k < nadj; k++) {
        int64_t w = g->adj[k];
        l->adj[k] = (uint32_t)graph_owner(g, w) << l->sbits | (uint32_t)graph_local(g, w);
    }
    order_by_degree(l);
}

void bfs_layout_free(struct bfs_layout *l)
{
    free(l->adj);
    l->adj = NULL;
}

/* The vertices of word wi not in visited. */
static inline uint64_t todo_word(const struct bfs_layout *l, const uint64_t *visited, int64_t wi)
{
    uint64_t todo = ~visited[wi];
    if (wi == l->nwords - 1 && (l->g->nlocal & 63))
        todo &= (1ULL << (l->g->nlocal & 63)) - 1;
    return todo;
}

/* Starts loading the lists of word wi's unvisited vertices. A scan skips
 * from one unvisited vertex to the next, so each one's list is a cache
 * miss the hardware prefetcher does not see coming; issued a word ahead,
 * up to 64 of them overlap instead of stalling one after another. */
static inline void prefetch_word(const struct bfs_layout *l, const uint64_t *visited, int64_t wi)
{
    const int64_t *off = l->g->off;
    for (uint64_t todo = todo_word(l, visited, wi); todo; todo &= todo - 1)
        __builtin_prefetch(&l->adj[off[wi * 64 + __builtin_ctzll(todo)]]);
}

int bfs_layout_timing;
int64_t bfs_layout_ns;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t bfs_layout_bottom_up(const struct bfs_layout *l, const uint64_t *all, uint64_t *visited, uint64_t *next,
                             int64_t *parent, int64_t wlo, int64_t whi, int64_t *edges)
{
    int64_t t0 = bfs_layout_timing ? now_ns() : 0;
    const int64_t *off = l->g->off;
    const uint32_t *adj = l->adj;
    int64_t found_n = 0, e = 0;
    if (wlo < whi)
        prefetch_word(l, visited, wlo);
    for (int64_t wi = wlo; wi < whi; wi++) {
        uint64_t todo = todo_word(l, visited, wi), found = 0;
        if (wi + 1 < whi)
            prefetch_word(l, visited, wi + 1);
        while (todo) {
            int bit = __builtin_ctzll(todo);
            todo &= todo - 1;
            int64_t lv = wi * 64 + bit;
            for (int64_t k = off[lv]; k < off[lv + 1]; k++) {
                if (bm_test(all, adj[k])) {
                    parent[lv] = layout_global(l, adj[k]);
                    found |= 1ULL << bit;
                    found_n++;
                    e += off[lv + 1] - off[lv];
                    break;
                }
            }
        }
        visited[wi] |= found;
        next[wi] = found;
    }
    *edges += e;
    if (bfs_layout_timing)
        __atomic_fetch_add(&bfs_layout_ns, now_ns() - t0, __ATOMIC_RELAXED);
    return found_n;
}
