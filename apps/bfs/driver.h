/*
 * driver.h — what the BFS programs share around their kernels: the common
 * options, the graph, the roots, the Graph500 validation of every tree and
 * the TEPS report.
 *
 * bfs.c (on par.h: MPIv, or the pthreads twin) and bfs_expert.c (plain MPI)
 * differ only in the kernel they hand to bfs_drive(); so both search the
 * same graph from the same roots and are judged by the same checks.
 */
#ifndef BFS_DRIVER_H
#define BFS_DRIVER_H

#include <stdint.h>

#include "graph.h"
#include "opts.h"

struct bfs_config {
    int scale, edgefactor, roots, corrupt;
    uint64_t seed;
    int phases; /* --phases */
};

#define BFS_CONFIG_DEFAULT {16, 16, 64, 0, 1, 0}

#define BFS_COMMON_USAGE                                                              \
    "  --scale S        2^S vertices (default 16, 1..26)\n"                           \
    "  --edgefactor E   edges per vertex (default 16)\n"                              \
    "  --roots K        BFS roots (default 64)\n"                                     \
    "  --seed X         graph and root seed (default 1)\n"                            \
    "  --corrupt        damage the first BFS tree before validating it (tests the\n" \
    "                   validator: the run must then fail)\n"                         \
    "  --phases         also report each rank's time in the bottom-up kernel that\n"  \
    "                   every version shares (layout.c), and the speed-up over\n"    \
    "                   this run that the slowest rank's kernel time leaves\n"        \
    "  --help           this text\n"

/* 1 if argv[o->i] is one of the options of BFS_COMMON_USAGE but --help
 * (parsed into c; a bad value is recorded in o), else 0. */
int bfs_common_opt(struct opts *o, struct bfs_config *c);

struct bfs_kernel {
    /* Printed after "bfs (NAME): ...; P ranks x ": e.g. "1 workers". */
    const char *name;
    /* Prepares the kernel's state for graph g (called once, collectively). */
    void *(*setup)(const struct graph *g, void *arg);
    /* One BFS from global vertex root: fills parent[] (per local vertex,
     * its global parent id, -1 if unvisited; the root is its own parent)
     * and returns its time in seconds, the same on every rank. Collective. */
    double (*run)(void *state, int64_t root, int64_t *parent);
    void (*teardown)(void *state);
    void *arg;
};

/* Builds the graph, runs and validates one BFS per root, prints the report
 * on rank 0 (ending with "result: PASSED" or "result: FAILED"); returns 0
 * if every tree was valid. Collective. */
int bfs_drive(const struct bfs_config *c, const struct bfs_kernel *k, const char *threads);

#endif /* BFS_DRIVER_H */
