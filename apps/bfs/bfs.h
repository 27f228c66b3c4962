/*
 * bfs.h — the Graph500 validation of a BFS tree (validate.c).
 */
#ifndef BFS_BFS_H
#define BFS_BFS_H

#include <stdint.h>

#include "graph.h"

/* Checks parent[] (per local vertex of g: global parent id, -1 unvisited)
 * by the Graph500 rules; returns the number of errors found on all ranks
 * (0: valid) and the input edges of the traversed component in *edges.
 * Collective. */
int64_t bfs_validate(const struct graph *g, const int64_t *parent, int64_t root, int64_t *edges);

#endif /* BFS_BFS_H */
