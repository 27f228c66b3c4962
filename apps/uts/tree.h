/*
 * tree.h — the UTS tree, shared by uts.c (MPIv, and its pthreads twin) and
 * uts_expert.c (plain MPI): the node and its children, the sample trees and
 * their published counts, the tree options and the check of a search's
 * counts.
 *
 * The tree (Olivier et al., LCPC 2006) is implicit: a node is the 20-byte
 * state of a SHA-1 splittable random stream plus its height. The root's
 * state is SHA-1 of 16 zero bytes and the big-endian seed; child i's is
 * SHA-1 of the parent's state and big-endian i; a node's random number is
 * the last 4 state bytes, big-endian, top bit cleared. Geometric trees draw
 * the number of children from a geometric law whose mean b_i follows the
 * shape function of the depth; binomial trees give the root floor(b0)
 * children and every other node m children with probability q; hybrid
 * trees are geometric above the depth shift * gen_mx (parent's height <
 * shift * gen_mx; shift 0.5 by default) and binomial below it. Counts are
 * capped at 100 (except a binomial root), as in the reference definition.
 *
 * The per-node functions are inline here: they are the search's inner loop.
 */
#ifndef UTS_TREE_H
#define UTS_TREE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "opts.h"
#include "sha1.h"

enum { BIN = 0, GEO = 1, HYBRID = 2 };
enum { LINEAR = 0, EXPDEC = 1, CYCLIC = 2, FIXED = 3 };
#define MAX_CHILDREN 100

struct tree {
    int type, shape, gen_mx, m, root_id;
    double b0, q;
    double shift; /* hybrid: geometric above the height shift * gen_mx */
};

struct node {
    uint8_t state[20];
    int32_t height;
};

struct counts {
    int64_t nodes, leaves, depth;
};

struct sample {
    const char *name;
    struct tree t;
    int64_t nodes, leaves, depth;
};

void node_root(const struct tree *t, struct node *n);

static inline void node_child(const struct node *p, int i, struct node *c)
{
    uint8_t msg[24];
    memcpy(msg, p->state, 20);
    for (int k = 0; k < 4; k++)
        msg[20 + k] = (uint8_t)((uint32_t)i >> (24 - 8 * k));
    sha1_small(msg, 24, c->state);
    c->height = p->height + 1;
}

static inline double node_prob(const struct node *n)
{
    uint32_t r = (uint32_t)n->state[16] << 24 | (uint32_t)n->state[17] << 16 | (uint32_t)n->state[18] << 8 |
                 n->state[19];
    return (double)(r & 0x7fffffff) / 2147483648.0;
}

/* Geometric trees: log(1 - p) of the law at each height, which depends on
 * the height only (the shape function); computed once per run by
 * geo_prepare() with the same expressions, so the same bits, as
 * geo_log1mp() computes them for a height past the table. */
#define GEO_HEIGHTS 4096
extern double geo_table[GEO_HEIGHTS];
extern int geo_ready;

double geo_log1mp(const struct tree *t, int height);
/* Fills the table for the tree of this run (every thread reads it after). */
void geo_prepare(const struct tree *t);

static inline int num_children(const struct tree *t, const struct node *n)
{
    int k;
    if (t->type == BIN && n->height == 0) {
        k = (int)floor(t->b0);
    } else if (t->type == BIN || (t->type == HYBRID && n->height >= t->shift * t->gen_mx)) {
        k = node_prob(n) < t->q ? t->m : 0;
    } else {
        /* the geometric law drawn by inverting its distribution function */
        double lp = geo_ready && n->height < GEO_HEIGHTS ? geo_table[n->height] : geo_log1mp(t, n->height);
        double u = node_prob(n);
        double x = floor(log(1.0 - u) / lp);
        k = x >= 1e9 ? MAX_CHILDREN + 1 : x > 0 ? (int)x : 0; /* NaN: 0 */
    }
    if (n->height == 0 && t->type == BIN) {
        int cap = (int)ceil(t->b0);
        if (k > cap)
            k = cap;
    } else if (k > MAX_CHILDREN) {
        k = MAX_CHILDREN;
    }
    return k;
}


/* Counts a node with k children into c. */
static inline void count_node(const struct node *n, int k, struct counts *c)
{
    c->nodes++;
    if (k == 0)
        c->leaves++;
    if (n->height > c->depth)
        c->depth = n->height;
}

/* The tree of a run and what its counts are checked against. */
struct uts_config {
    struct tree t;
    const struct sample *sample; /* NULL: a custom tree */
    int64_t expect[3];           /* --expect: nodes, leaves, depth to check instead */
    int nexpect;                 /* how many of them were given, 0 if no --expect */
    int bound;                   /* --bound */
    /* while parsing */
    const char *name;
    struct tree custom_t;
    int custom;
};

#define UTS_TREE_USAGE                                                                  \
    "  --tree NAME      a published sample tree: T1 (default), T2, T3, T4 or T5;\n"    \
    "                   its node, leaf and depth counts are checked against\n"         \
    "                   the published ones\n"                                          \
    "  -t TYPE          0 binomial, 1 geometric, 2 hybrid (a custom tree, recounted\n" \
    "  -b B0            root branching factor             serially on rank 0 to\n"    \
    "  -q Q             binomial: non-leaf probability    check the answer)\n"        \
    "  -m M             binomial: children of a non-leaf\n"                            \
    "  -d D             geometric: depth limit (gen_mx)\n"                             \
    "  -a SHAPE         geometric: 0 linear, 1 expdec, 2 cyclic, 3 fixed\n"            \
    "  -f F             hybrid: geometric above the height F * D, binomial\n"          \
    "                   below (default 0.5)\n"                                         \
    "  -r SEED          root seed\n"                                                   \
    "  --expect NODES[,LEAVES[,DEPTH]]\n"                                              \
    "                   check the counts against these instead; the ones left\n"      \
    "                   out are not checked (e.g. a published large tree, T1L\n"       \
    "                   -t 1 -a 3 -d 13 -b 4 -r 29: 102181082,81746377,13)\n"         \
    "  --sha1 IMPL      auto (default: shani if the processor has it), portable\n"     \
    "                   or shani\n"                                                     \
    "  --bound          after the run, time the same tree searched serially on\n"     \
    "                   rank 0's core, and report the rate P ranks would have if\n"   \
    "                   each searched at that speed with nothing else to do\n"

void uts_config_start(struct uts_config *c);
/* 1 if argv[o->i] is one of the options of UTS_TREE_USAGE (parsed into c; a
 * bad value is recorded in o), else 0. */
int uts_tree_opt(struct opts *o, struct uts_config *c);
/* After the options: settles the tree (sample or custom) and records in o
 * what is wrong with it, if anything. */
void uts_tree_settle(struct opts *o, struct uts_config *c);

/* The whole tree searched depth first on one thread. */
struct counts uts_serial_count(const struct tree *t);

/* Rank 0: prints "uts (IMPL): tree ...: <description>". */
void uts_print_tree(const struct uts_config *c, const char *impl);
/* Rank 0: prints the counts, the time, nodes_per_s, the check against the
 * published, --expect or serial counts and "result: PASSED/FAILED";
 * returns 1 if the counts are right. */
int uts_check_print(const struct uts_config *c, const struct counts *sum, double t);

#endif /* UTS_TREE_H */
