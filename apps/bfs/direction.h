/*
 * direction.h — what the two direction-optimizing BFS kernels share: bfs.c
 * (on par.h: MPIv, or the pthreads twin) and bfs_expert.c (plain MPI).
 *
 *  - bitmaps of local vertices (visited, frontier), one bit per vertex;
 *  - the top-down visit request: one 64-bit word, the owner's local index
 *    of the visited vertex above the global id of its parent (both fit in 32
 *    bits: --scale is at most 26);
 *  - the top-down / bottom-up switch of Beamer, Asanovic and Patterson
 *    ("Direction-optimizing breadth-first search", SC 2012) and the options
 *    that steer it (--direction, --alpha, --beta).
 */
#ifndef BFS_DIRECTION_H
#define BFS_DIRECTION_H

#include <stdint.h>

#include "opts.h"

enum bfs_dir { BFS_DIR_AUTO, BFS_DIR_TOP_DOWN, BFS_DIR_BOTTOM_UP };

struct bfs_dir_config {
    enum bfs_dir dir;
    double alpha, beta;
};

#define BFS_DIR_CONFIG_DEFAULT {BFS_DIR_AUTO, 14.0, 24.0}

#define BFS_DIR_USAGE                                                                     \
    "  --direction D    auto (default): top-down while the frontier is small,\n"         \
    "                   bottom-up while it is large (Beamer et al. 2012);\n"             \
    "                   top-down or bottom-up: every level that way\n"                   \
    "  --top-down-only  same as --direction top-down\n"                                  \
    "  --alpha A        auto: go bottom-up when frontier edges > unvisited edges / A\n" \
    "                   (default 14)\n"                                                  \
    "  --beta B         auto: go top-down when frontier vertices < vertices / B\n"      \
    "                   (default 24)\n"

/* 1 if argv[o->i] is one of the options of BFS_DIR_USAGE (parsed into c; a
 * bad value is recorded in o), else 0. */
int bfs_dir_opt(struct opts *o, struct bfs_dir_config *c);

/* Whether the first level (the root alone) goes bottom-up. */
static inline int bfs_dir_first(const struct bfs_dir_config *c) { return c->dir == BFS_DIR_BOTTOM_UP; }

/* Whether the next level goes bottom-up, from this level's direction and
 * the global sums after it: nf vertices in the next frontier (prev_nf in
 * this one), mf edges of the next frontier, mu edges of the vertices still
 * unvisited, n vertices in all. The paper's rule: go bottom-up when the
 * frontier's edges exceed the unvisited edges / alpha while the frontier
 * grows; come back when the frontier falls below n / beta vertices while it
 * shrinks. */
static inline int bfs_dir_next(const struct bfs_dir_config *c, int bottom, int64_t n, int64_t nf, int64_t prev_nf,
                               int64_t mf, int64_t mu)
{
    if (c->dir != BFS_DIR_AUTO)
        return c->dir == BFS_DIR_BOTTOM_UP;
    if (!bottom)
        return mf > (double)mu / c->alpha && nf > prev_nf;
    return !(nf < (double)n / c->beta && nf < prev_nf);
}

static inline int bm_test(const uint64_t *bm, int64_t i) { return (int)(bm[i >> 6] >> (i & 63)) & 1; }
static inline void bm_set(uint64_t *bm, int64_t i) { bm[i >> 6] |= 1ULL << (i & 63); }

/* Sets bit i where other threads may set bits of the same word; 1 if this
 * call set it. The plain load first keeps the common case (already set) a
 * read: a locked read-modify-write per edge would cost more than the test.
 * Relaxed: what the bit guards (parent[], the next frontier) is read only
 * after the tasks that wrote it have been joined. */
static inline int bm_claim(uint64_t *bm, int64_t i)
{
    uint64_t bit = 1ULL << (i & 63);
    if (__atomic_load_n(&bm[i >> 6], __ATOMIC_RELAXED) & bit)
        return 0;
    return !(__atomic_fetch_or(&bm[i >> 6], bit, __ATOMIC_RELAXED) & bit);
}

static inline uint64_t req_pack(int64_t local, int64_t parent) { return (uint64_t)local << 32 | (uint64_t)parent; }
static inline int64_t req_local(uint64_t r) { return (int64_t)(r >> 32); }
static inline int64_t req_parent(uint64_t r) { return (int64_t)(r & 0xffffffffu); }

#endif /* BFS_DIRECTION_H */
