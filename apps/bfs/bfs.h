/*
 * bfs.h — the BFS kernel's state, shared by the kernel and the validator.
 */
#ifndef BFS_BFS_H
#define BFS_BFS_H

#include <stdint.h>

#include "graph.h"

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

/* One BFS from global vertex `root`; returns its time in seconds (the same
 * on every rank: it ends with an allreduce). */
double bfs_run(struct bfs *b, int64_t root);

/* Checks b->parent by the Graph500 rules; returns the number of errors
 * found on all ranks (0: valid) and the input edges of the traversed
 * component in *edges. Collective. */
int64_t bfs_validate(const struct bfs *b, int64_t root, int64_t *edges);

#endif /* BFS_BFS_H */
