/*
 * tree.c — see tree.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "par.h"
#include "tree.h"

/* Published sample trees (UTS sample_trees.sh). */
static const struct sample samples[] = {
    {"T1", {GEO, FIXED, 10, 0, 19, 4.0, 0.0, 0.0}, 4130071, 3305118, 10},
    {"T2", {GEO, CYCLIC, 16, 0, 502, 6.0, 0.0, 0.0}, 4117769, 2342762, 81},
    {"T3", {BIN, 0, 0, 8, 42, 2000.0, 0.124875, 0.0}, 4112897, 3599034, 1572},
    {"T4", {HYBRID, LINEAR, 16, 4, 1, 6.0, 0.234375, 0.5}, 4132453, 3108986, 134},
    {"T5", {GEO, LINEAR, 20, 0, 34, 4.0, 0.0, 0.0}, 4147582, 2181318, 20},
};
#define NSAMPLES (int)(sizeof samples / sizeof samples[0])


double geo_table[GEO_HEIGHTS];
int geo_ready;

void node_root(const struct tree *t, struct node *n)
{
    uint8_t msg[20] = {0};
    for (int i = 0; i < 4; i++)
        msg[16 + i] = (uint8_t)((uint32_t)t->root_id >> (24 - 8 * i));
    sha1_small(msg, 20, n->state);
    n->height = 0;
}

double geo_log1mp(const struct tree *t, int height)
{
    double b = t->b0, d = height;
    if (height > 0) {
        switch (t->shape) {
        case EXPDEC:
            b = t->b0 * pow(d, -log(t->b0) / log((double)t->gen_mx));
            break;
        case CYCLIC:
            b = height > 5 * t->gen_mx ? 0.0 : pow(t->b0, sin(2.0 * 3.141592653589793 * d / t->gen_mx));
            break;
        case FIXED:
            b = height < t->gen_mx ? t->b0 : 0.0;
            break;
        default: /* LINEAR */
            b = t->b0 * (1.0 - d / t->gen_mx);
            break;
        }
    }
    /* Geometric law with mean b: P(k) = p (1-p)^k, p = 1 / (1 + b). */
    double p = 1.0 / (1.0 + b);
    return log(1.0 - p);
}

void geo_prepare(const struct tree *t)
{
    if (t->type == BIN)
        return;
    for (int h = 0; h < GEO_HEIGHTS; h++)
        geo_table[h] = geo_log1mp(t, h);
    geo_ready = 1;
}

/* --expect NODES[,LEAVES[,DEPTH]] */
static void parse_expect(struct opts *o, struct uts_config *c)
{
    static const char *what[3] = {"NODES", "LEAVES", "DEPTH"};
    static const int64_t lo[3] = {1, 1, 0};
    const char *p = o->val;
    c->nexpect = 0;
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < lo[i] || (*end && *end != ',')) {
            opts_fail(o, "--expect %s: %s must be an integer >= %lld (NODES[,LEAVES[,DEPTH]])", o->val, what[i],
                      (long long)lo[i]);
            return;
        }
        c->expect[c->nexpect++] = v;
        if (!*end)
            return;
        p = end + 1;
    }
    opts_fail(o, "--expect %s: at most three counts, NODES,LEAVES,DEPTH", o->val);
}

void uts_config_start(struct uts_config *c)
{
    memset(c, 0, sizeof *c);
    c->name = "T1";
    c->custom_t = (struct tree){GEO, LINEAR, 6, 4, 0, 4.0, 15.0 / 64.0, 0.5};
}

int uts_tree_opt(struct opts *o, struct uts_config *c)
{
    struct tree *t = &c->custom_t;
    if (opts_match(o, "--tree", 1))
        c->name = o->val;
    else if (opts_match(o, "-t", 1))
        c->custom = 1, t->type = (int)opts_i64(o, "-t", 0, 2);
    else if (opts_match(o, "-f", 1))
        c->custom = 1, t->shift = opts_f64(o, "-f", 0.0, 1e6);
    else if (opts_match(o, "-b", 1))
        c->custom = 1, t->b0 = opts_f64(o, "-b", 0.0, 1e6);
    else if (opts_match(o, "-q", 1))
        c->custom = 1, t->q = opts_f64(o, "-q", 0.0, 1.0);
    else if (opts_match(o, "-m", 1))
        c->custom = 1, t->m = (int)opts_i64(o, "-m", 0, MAX_CHILDREN);
    else if (opts_match(o, "-d", 1))
        c->custom = 1, t->gen_mx = (int)opts_i64(o, "-d", 1, 100000);
    else if (opts_match(o, "-a", 1))
        c->custom = 1, t->shape = (int)opts_i64(o, "-a", 0, 3);
    else if (opts_match(o, "-r", 1))
        c->custom = 1, t->root_id = (int)opts_i64(o, "-r", 0, INT32_MAX);
    else if (opts_match(o, "--expect", 1))
        parse_expect(o, c);
    else if (opts_match(o, "--bound", 0))
        c->bound = 1;
    else if (opts_match(o, "--sha1", 1)) {
        if (sha1_use(o->val) != 0)
            opts_fail(o, "--sha1 %s: expected auto, portable or shani%s", o->val,
                      sha1_have_shani() ? "" : " (shani: not on this processor)");
    } else
        return 0;
    return 1;
}

void uts_tree_settle(struct opts *o, struct uts_config *c)
{
    if (c->custom) {
        const struct tree *t = &c->custom_t;
        c->t = *t;
        c->sample = NULL;
        if (t->type != GEO && t->q * t->m >= 1.0)
            opts_fail(o, "binomial tree with q * m = %g >= 1 is infinite in expectation", t->q * t->m);
        if (t->type != BIN && t->shape == LINEAR && t->b0 <= 0)
            opts_fail(o, "-b must be positive");
    } else {
        for (int i = 0; i < NSAMPLES; i++)
            if (strcmp(c->name, samples[i].name) == 0)
                c->sample = &samples[i];
        if (!c->sample)
            opts_fail(o, "--tree %s: expected T1, T2, T3, T4 or T5", c->name);
        else
            c->t = c->sample->t;
    }
}

struct counts uts_serial_count(const struct tree *t)
{
    struct counts c = {0, 0, 0};
    int64_t cap = 1024, sp = 0;
    struct node *st = malloc((size_t)cap * sizeof *st);
    if (!st)
        par_die("uts: out of memory for the serial count");
    node_root(t, &st[sp++]);
    while (sp > 0) {
        struct node n = st[--sp];
        int k = num_children(t, &n);
        count_node(&n, k, &c);
        if (sp + k > cap) {
            while (cap < sp + k)
                cap *= 2;
            st = realloc(st, (size_t)cap * sizeof *st);
            if (!st)
                par_die("uts: out of memory for the serial count");
        }
        for (int i = 0; i < k; i++)
            node_child(&n, i, &st[sp++]);
    }
    free(st);
    return c;
}

void uts_print_tree(const struct uts_config *c, const char *impl)
{
    const struct tree *tr = &c->t;
    if (c->sample)
        printf("uts (%s): tree %s: ", impl, c->sample->name);
    else
        printf("uts (%s): custom tree: ", impl);
    if (tr->type == BIN)
        printf("binomial, b0 %g, q %g, m %d, seed %d\n", tr->b0, tr->q, tr->m, tr->root_id);
    else if (tr->type == HYBRID)
        printf("hybrid, geometric above height %g (shape %d, depth %d, b0 %g), then binomial (q %g, m %d), "
               "seed %d\n",
               tr->shift * tr->gen_mx, tr->shape, tr->gen_mx, tr->b0, tr->q, tr->m, tr->root_id);
    else
        printf("geometric, shape %d, depth %d, b0 %g, seed %d\n", tr->shape, tr->gen_mx, tr->b0, tr->root_id);
}

/* --bound: every node costs its expansion (a SHA-1 per child) whatever
 * balances the work; searched serially, with no runtime at all, that is
 * all a node costs. P ranks, one per core, each searching at that speed
 * with nothing else to do (no polling, no steals, no idle time) is a rate
 * no parallel search of this tree can pass on such cores. */
static void print_bound(const struct uts_config *c, double rate)
{
    double t0 = par_wtime();
    struct counts n = uts_serial_count(&c->t);
    double t = par_wtime() - t0, serial = t > 0 ? (double)n.nodes / t : 0.0;
    int P = par_size();
    printf("bound: serial search %.4g nodes/s on one core (%.1f ns a node); %d ranks at that speed: %.4g "
           "nodes/s; this run %.3g%% of it\n",
           serial, serial > 0 ? 1e9 / serial : 0.0, P, serial * P, serial > 0 ? 100.0 * rate / (serial * P) : 0.0);
}

int uts_check_print(const struct uts_config *c, const struct counts *sum, double t)
{
    printf("nodes %lld, leaves %lld, depth %lld\n", (long long)sum->nodes, (long long)sum->leaves,
           (long long)sum->depth);
    printf("time: %.4f s\n", t);
    printf("nodes_per_s: %.6g\n", t > 0 ? (double)sum->nodes / t : 0.0);
    struct counts want;
    const char *what;
    if (c->nexpect) {
        /* the counts left out of --expect are not checked */
        want = (struct counts){c->expect[0], c->nexpect > 1 ? c->expect[1] : sum->leaves,
                               c->nexpect > 2 ? c->expect[2] : sum->depth};
        what = "expected (--expect)";
    } else if (c->sample) {
        want = (struct counts){c->sample->nodes, c->sample->leaves, c->sample->depth};
        what = "published";
    } else {
        want = uts_serial_count(&c->t);
        what = "serial";
    }
    int ok = sum->nodes == want.nodes && sum->leaves == want.leaves && sum->depth == want.depth;
    printf("%s count: nodes %lld, leaves %lld%s, depth %lld%s: %s\n", what, (long long)want.nodes,
           (long long)want.leaves, c->nexpect == 1 ? " (not checked)" : "", (long long)want.depth,
           c->nexpect == 1 || c->nexpect == 2 ? " (not checked)" : "", ok ? "match" : "MISMATCH");
    if (c->bound && ok)
        print_bound(c, (double)sum->nodes / t);
    printf("result: %s\n", ok ? "PASSED" : "FAILED");
    fflush(stdout);
    return ok;
}
