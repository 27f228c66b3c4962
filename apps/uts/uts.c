/*
 * uts.c — Unbalanced Tree Search on MPIv (or MPI + pthreads).
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
 * Parallel search, per rank:
 *  - searcher tasks take nodes from the rank's pool and end when it is empty
 *    (the manager starts them again when work comes back: an idle rank
 *    leaves its worker to the communication server instead of spinning). A
 *    node above the depth
 *    cutoff is expanded by one ULT that spawns one ULT per child and joins
 *    them; below it, a node's subtree is searched depth first with an
 *    explicit stack, which hands its oldest nodes back to the pool when the
 *    pool runs low and yields now and then so that the other ULTs of the
 *    worker (steal servers, the manager) get to run;
 *  - one steal server per peer rank answers that peer's steal requests with
 *    up to --chunk nodes from the bottom of the pool (or none);
 *  - a manager steals from the peers in turn while the rank is idle, and
 *    runs termination detection: Dijkstra, Feijen and van Gasteren's token
 *    ring. A rank that gives work away turns black; the token, passed on by
 *    idle ranks only, picks up their colour; rank 0 ends the search when a
 *    white token comes back to a white, idle rank 0, and sends a "done"
 *    token round the ring. A thief waits for its answer before doing
 *    anything else, so work is never in flight to an idle rank.
 *
 * The check: the standard sample trees' node, leaf and depth counts (T1,
 * T2, T3, T4, T5) are compared with their published values, or with the ones
 * given by --expect; any other tree is recounted serially on rank 0.
 *
 * Per node, the search costs one SHA-1 compression (sha1.c: SHA-NI when the
 * processor has it) and no allocation: the depth-first stacks are reused
 * through a free list, the children's arguments above the cutoff live on
 * the expanding ULT's stack.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "par.h"
#include "sha1.h"

enum { BIN = 0, GEO = 1, HYBRID = 2 };
enum { LINEAR = 0, EXPDEC = 1, CYCLIC = 2, FIXED = 3 };
enum { TAG_REQ = 1, TAG_REP = 2, TAG_TOKEN = 3 };
enum { REQ_STEAL = 0, REQ_QUIT = 1 };
enum { WHITE = 0, BLACK = 1 };
#define MAX_CHILDREN 100
#define POLL_INTERVAL 256 /* nodes between yields in a depth-first search */

struct tree {
    int type, shape, gen_mx, m, root_id;
    double b0, q;
    double shift; /* hybrid: geometric above the height shift * gen_mx */
};

struct node {
    uint8_t state[20];
    int32_t height;
};

/* Published sample trees (UTS sample_trees.sh). */
static const struct sample {
    const char *name;
    struct tree t;
    int64_t nodes, leaves, depth;
} samples[] = {
    {"T1", {GEO, FIXED, 10, 0, 19, 4.0, 0.0, 0.0}, 4130071, 3305118, 10},
    {"T2", {GEO, CYCLIC, 16, 0, 502, 6.0, 0.0, 0.0}, 4117769, 2342762, 81},
    {"T3", {BIN, 0, 0, 8, 42, 2000.0, 0.124875, 0.0}, 4112897, 3599034, 1572},
    {"T4", {HYBRID, LINEAR, 16, 4, 1, 6.0, 0.234375, 0.5}, 4132453, 3108986, 134},
    {"T5", {GEO, LINEAR, 20, 0, 34, 4.0, 0.0, 0.0}, 4147582, 2181318, 20},
};
#define NSAMPLES (int)(sizeof samples / sizeof samples[0])

/* ---- the tree ---- */

static void node_root(const struct tree *t, struct node *n)
{
    uint8_t msg[20] = {0};
    for (int i = 0; i < 4; i++)
        msg[16 + i] = (uint8_t)((uint32_t)t->root_id >> (24 - 8 * i));
    sha1_small(msg, 20, n->state);
    n->height = 0;
}

static void node_child(const struct node *p, int i, struct node *c)
{
    uint8_t msg[24];
    memcpy(msg, p->state, 20);
    for (int k = 0; k < 4; k++)
        msg[20 + k] = (uint8_t)((uint32_t)i >> (24 - 8 * k));
    sha1_small(msg, 24, c->state);
    c->height = p->height + 1;
}

static double node_prob(const struct node *n)
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
static double geo_table[GEO_HEIGHTS];
static int geo_ready;

static double geo_log1mp(const struct tree *t, int height)
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

/* Fills the table for the tree of this run (every thread reads it after). */
static void geo_prepare(const struct tree *t)
{
    if (t->type == BIN)
        return;
    for (int h = 0; h < GEO_HEIGHTS; h++)
        geo_table[h] = geo_log1mp(t, h);
    geo_ready = 1;
}

static int num_children(const struct tree *t, const struct node *n)
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

/* ---- per-rank search state ---- */

struct counts {
    int64_t nodes, leaves, depth;
};

/* A depth-first search's stack of nodes. They are reused: a search takes
 * one from the rank's free list and gives it back, grown or not, so that
 * after the first few searches no node costs an allocation. */
struct dfs_stack {
    struct node *st;
    int64_t cap;
    struct dfs_stack *next; /* in the free list */
};

struct uts {
    struct tree t;
    int cutoff, chunk, nsearch, me, P;
    par_mutex_t lock; /* guards pool, npool, cap, slot[].running */
    struct node *pool;
    int64_t npool, cap;
    struct slot {
        par_task_t *task; /* a searcher started by the manager, not yet joined */
        int running;      /* it has not yet found the pool empty */
    } *slot;              /* nsearch of them */
    int64_t npool_hint; /* npool, read without the lock to decide on releasing work */
    int color;          /* WHITE / BLACK, exchanged atomically */
    struct counts total;
    int64_t steals, failed_steals, given;
    par_mutex_t stack_lock;         /* guards free_stacks */
    struct dfs_stack *free_stacks;  /* stacks of finished searches */
};

static void count_add(struct uts *u, const struct counts *c)
{
    __atomic_fetch_add(&u->total.nodes, c->nodes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&u->total.leaves, c->leaves, __ATOMIC_RELAXED);
    int64_t d = __atomic_load_n(&u->total.depth, __ATOMIC_RELAXED);
    while (c->depth > d &&
           !__atomic_compare_exchange_n(&u->total.depth, &d, c->depth, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

static void pool_push(struct uts *u, const struct node *n, int64_t k)
{
    par_mutex_lock(&u->lock);
    if (u->npool + k > u->cap) {
        int64_t cap = u->cap ? u->cap : 1024;
        while (cap < u->npool + k)
            cap *= 2;
        struct node *p = realloc(u->pool, (size_t)cap * sizeof *p);
        if (!p)
            par_die("uts: out of memory for the pool");
        u->pool = p;
        u->cap = cap;
    }
    memcpy(u->pool + u->npool, n, (size_t)k * sizeof *n);
    u->npool += k;
    __atomic_store_n(&u->npool_hint, u->npool, __ATOMIC_RELAXED);
    par_mutex_unlock(&u->lock);
}

/* Takes up to `max` of the oldest nodes of the pool (the ones nearest the
 * root, likely the largest subtrees) for a thief: half of them, rounded
 * down, so that a rank never gives its last node away. Otherwise a node
 * just stolen could be stolen back before this rank starts on it, and two
 * idle ranks could pass it to and fro. */
static int64_t pool_take_bottom(struct uts *u, struct node *out, int64_t max)
{
    par_mutex_lock(&u->lock);
    int64_t k = u->npool / 2;
    if (k > max)
        k = max;
    /* Turn black before the lock is released: the manager decides that the
     * rank is idle under this lock and reads the colour after it, so it
     * either sees this work in the pool or sees black. */
    if (k > 0)
        __atomic_store_n(&u->color, BLACK, __ATOMIC_SEQ_CST);
    if (k > 0) {
        memcpy(out, u->pool, (size_t)k * sizeof *out);
        memmove(u->pool, u->pool + k, (size_t)(u->npool - k) * sizeof *out);
        u->npool -= k;
    }
    __atomic_store_n(&u->npool_hint, u->npool, __ATOMIC_RELAXED);
    par_mutex_unlock(&u->lock);
    return k;
}

static int rank_idle(struct uts *u)
{
    par_mutex_lock(&u->lock);
    int idle = u->npool == 0;
    for (int i = 0; i < u->nsearch && idle; i++)
        idle = !u->slot[i].running;
    par_mutex_unlock(&u->lock);
    return idle;
}

/* ---- search ---- */

static void stack_init(struct dfs_stack *s)
{
    s->cap = 1024;
    s->next = NULL;
    s->st = malloc((size_t)s->cap * sizeof *s->st);
    if (!s->st)
        par_die("uts: out of memory for a search stack");
}

static struct dfs_stack *stack_get(struct uts *u)
{
    par_mutex_lock(&u->stack_lock);
    struct dfs_stack *s = u->free_stacks;
    if (s)
        u->free_stacks = s->next;
    par_mutex_unlock(&u->stack_lock);
    if (!s) {
        s = malloc(sizeof *s);
        if (!s)
            par_die("uts: out of memory for a search stack");
        stack_init(s);
    }
    return s;
}

static void stack_put(struct uts *u, struct dfs_stack *s)
{
    par_mutex_lock(&u->stack_lock);
    s->next = u->free_stacks;
    u->free_stacks = s;
    par_mutex_unlock(&u->stack_lock);
}

static void stacks_free(struct uts *u)
{
    while (u->free_stacks) {
        struct dfs_stack *s = u->free_stacks;
        u->free_stacks = s->next;
        free(s->st);
        free(s);
    }
}

static void visit(const struct uts *u, const struct node *n, int k, struct counts *c)
{
    (void)u;
    c->nodes++;
    if (k == 0)
        c->leaves++;
    if (n->height > c->depth)
        c->depth = n->height;
}

/* Searches the subtree of `start` on the stack `s` (which it may grow). */
static void dfs(struct uts *u, const struct node *start, struct counts *c, struct dfs_stack *s)
{
    int64_t cap = s->cap, sp = 0, since = 0;
    struct node *st = s->st;
    st[sp++] = *start;
    while (sp > 0) {
        struct node n = st[--sp];
        int k = num_children(&u->t, &n);
        visit(u, &n, k, c);
        if (sp + k > cap) {
            while (cap < sp + k)
                cap *= 2;
            st = realloc(st, (size_t)cap * sizeof *st);
            if (!st)
                par_die("uts: out of memory for a search stack");
            s->st = st;
            s->cap = cap;
        }
        for (int i = 0; i < k; i++)
            node_child(&n, i, &st[sp++]);
        if (++since == POLL_INTERVAL) {
            since = 0;
            if (sp > 1 && __atomic_load_n(&u->npool_hint, __ATOMIC_RELAXED) < u->chunk) {
                int64_t give = sp / 2 < u->chunk ? sp / 2 : u->chunk;
                pool_push(u, st, give);
                memmove(st, st + give, (size_t)(sp - give) * sizeof *st);
                sp -= give;
            }
            par_yield();
        }
    }
}

struct spawned {
    struct uts *u;
    const struct node *parent;
    int index;
    struct counts c;
};

static void expand(struct uts *u, const struct node *n, struct counts *c);

static void *child_ult(void *arg)
{
    struct spawned *s = arg;
    struct node n;
    node_child(s->parent, s->index, &n);
    expand(s->u, &n, &s->c);
    return NULL;
}

/* One ULT per child of n. The children's arguments live on this ULT's
 * stack (MAX_CHILDREN of them, about 5.6 KB); only a binomial root may have
 * more children than that, and its arrays come from the heap. */
static __attribute__((noinline)) void expand_spawn(struct uts *u, const struct node *n, int k, struct counts *c)
{
    struct spawned sbuf[MAX_CHILDREN];
    par_task_t *tbuf[MAX_CHILDREN];
    struct spawned *s = sbuf;
    par_task_t **t = tbuf;
    if (k > MAX_CHILDREN) {
        s = malloc((size_t)k * sizeof *s);
        t = malloc((size_t)k * sizeof *t);
        if (!s || !t)
            par_die("uts: out of memory");
    }
    for (int i = 0; i < k; i++) {
        s[i] = (struct spawned){u, n, i, {0, 0, 0}};
        t[i] = par_spawn(child_ult, &s[i], i);
    }
    for (int i = 0; i < k; i++) {
        par_join(t[i]);
        c->nodes += s[i].c.nodes;
        c->leaves += s[i].c.leaves;
        if (s[i].c.depth > c->depth)
            c->depth = s[i].c.depth;
    }
    if (s != sbuf) {
        free(s);
        free(t);
    }
}

/* Above the cutoff: one ULT per child. Below: depth first. */
static void expand(struct uts *u, const struct node *n, struct counts *c)
{
    if (n->height >= u->cutoff) {
        struct dfs_stack *s = stack_get(u);
        dfs(u, n, c, s);
        stack_put(u, s);
        return;
    }
    int k = num_children(&u->t, n);
    visit(u, n, k, c);
    if (k > 0)
        expand_spawn(u, n, k, c);
}

struct searcher_arg {
    struct uts *u;
    int slot;
};

static void *searcher(void *arg)
{
    struct searcher_arg *a = arg;
    struct uts *u = a->u;
    struct counts c = {0, 0, 0};
    for (;;) {
        struct node n;
        par_mutex_lock(&u->lock);
        if (u->npool == 0) {
            /* Under the lock, so that rank_idle() never sees an empty pool
             * and no running searcher while this one still holds work. */
            u->slot[a->slot].running = 0;
            par_mutex_unlock(&u->lock);
            break;
        }
        n = u->pool[--u->npool];
        __atomic_store_n(&u->npool_hint, u->npool, __ATOMIC_RELAXED);
        par_mutex_unlock(&u->lock);
        expand(u, &n, &c);
    }
    count_add(u, &c);
    return NULL;
}

/* Joins the searchers that are done and starts new ones while the pool has
 * work. Only the manager calls it. */
static void searchers_update(struct uts *u, struct searcher_arg *args)
{
    for (int i = 0; i < u->nsearch; i++) {
        par_mutex_lock(&u->lock);
        int done = u->slot[i].task && !u->slot[i].running;
        int start = !u->slot[i].task && u->npool > 0;
        if (start)
            u->slot[i].running = 1;
        par_mutex_unlock(&u->lock);
        if (done) {
            par_join(u->slot[i].task);
            u->slot[i].task = NULL;
        } else if (start) {
            args[i] = (struct searcher_arg){u, i};
            u->slot[i].task = par_spawn(searcher, &args[i], i);
        }
    }
}

static void searchers_join(struct uts *u)
{
    for (int i = 0; i < u->nsearch; i++)
        if (u->slot[i].task) {
            par_join(u->slot[i].task);
            u->slot[i].task = NULL;
        }
}

struct server_arg {
    struct uts *u;
    int peer;
};

static void *steal_server(void *arg)
{
    struct server_arg *a = arg;
    struct uts *u = a->u;
    struct node *buf = malloc((size_t)u->chunk * sizeof *buf);
    if (!buf)
        par_die("uts: out of memory");
    for (;;) {
        int64_t req;
        par_recv(&req, sizeof req, a->peer, TAG_REQ);
        if (req == REQ_QUIT)
            break;
        int64_t k = pool_take_bottom(u, buf, u->chunk);
        __atomic_fetch_add(&u->given, k, __ATOMIC_RELAXED);
        par_send(buf, (size_t)k * sizeof *buf, a->peer, TAG_REP);
    }
    free(buf);
    return NULL;
}

static void steal_once(struct uts *u, int victim, struct node *buf, struct searcher_arg *sargs)
{
    int64_t req = REQ_STEAL;
    par_send(&req, sizeof req, victim, TAG_REQ);
    size_t got = par_recv(buf, (size_t)u->chunk * sizeof *buf, victim, TAG_REP);
    int64_t k = (int64_t)(got / sizeof *buf);
    if (k > 0) {
        pool_push(u, buf, k);
        searchers_update(u, sargs);
        u->steals++;
    } else {
        u->failed_steals++;
    }
}

/* Stealing and termination detection (see the top of the file). */
static void manager(struct uts *u)
{
    int P = u->P, me = u->me, left = (me + P - 1) % P, right = (me + 1) % P;
    struct searcher_arg *sargs = calloc((size_t)u->nsearch, sizeof *sargs);
    if (!sargs)
        par_die("uts: out of memory");
    if (P == 1) {
        for (;;) {
            searchers_update(u, sargs);
            if (rank_idle(u))
                break;
            par_yield();
        }
        searchers_join(u);
        free(sargs);
        return;
    }
    struct node *buf = malloc((size_t)u->chunk * sizeof *buf);
    if (!buf)
        par_die("uts: out of memory");
    int64_t tok[2] = {WHITE, 0}; /* colour, done */
    par_req_t treq;
    par_irecv(tok, sizeof tok, left, TAG_TOKEN, &treq);
    int have_token = 0, token_out = 0, ending = 0, victim = right;
    for (;;) {
        if (treq && par_test(&treq, NULL)) {
            if (tok[1]) { /* done */
                if (me != 0)
                    par_send(tok, sizeof tok, right, TAG_TOKEN);
                break;
            }
            have_token = 1;
        }
        searchers_update(u, sargs);
        if (ending || !rank_idle(u)) {
            par_yield();
            continue;
        }
        if (me == 0 && have_token) {
            int mine = __atomic_exchange_n(&u->color, WHITE, __ATOMIC_SEQ_CST);
            int64_t out[2] = {WHITE, 0};
            if (tok[0] == WHITE && mine == WHITE) {
                out[1] = 1; /* white token back at a white idle rank 0: done */
                ending = 1;
            }
            have_token = 0;
            par_send(out, sizeof out, right, TAG_TOKEN);
            /* After "done" this receives it back from the last rank. */
            par_irecv(tok, sizeof tok, left, TAG_TOKEN, &treq);
            continue;
        } else if (me == 0 && !token_out) {
            int64_t out[2] = {WHITE, 0};
            __atomic_store_n(&u->color, WHITE, __ATOMIC_SEQ_CST);
            token_out = 1;
            par_send(out, sizeof out, right, TAG_TOKEN);
        } else if (me != 0 && have_token) {
            int mine = __atomic_exchange_n(&u->color, WHITE, __ATOMIC_SEQ_CST);
            int64_t out[2] = {tok[0] | mine, 0};
            have_token = 0;
            par_send(out, sizeof out, right, TAG_TOKEN);
            par_irecv(tok, sizeof tok, left, TAG_TOKEN, &treq);
        }
        steal_once(u, victim, buf, sargs);
        do
            victim = (victim + 1) % P;
        while (victim == me);
    }
    if (me == 0 && treq)
        par_die("uts: token receive still pending at the end");
    searchers_join(u);
    free(sargs);
    /* My steal requests are over: let the peers' servers for me finish. */
    for (int p = 0; p < P; p++) {
        int64_t quit = REQ_QUIT;
        if (p != me)
            par_send(&quit, sizeof quit, p, TAG_REQ);
    }
    free(buf);
}

static struct counts serial_count(const struct tree *t)
{
    struct counts c = {0, 0, 0};
    struct uts u = {.t = *t, .cutoff = 0, .chunk = 1 << 30};
    struct node root;
    node_root(t, &root);
    /* dfs() without a pool to feed: npool_hint stays above the chunk. */
    u.npool_hint = (int64_t)1 << 40;
    struct dfs_stack s;
    stack_init(&s);
    dfs(&u, &root, &c, &s);
    free(s.st);
    return c;
}

/* ---- main ---- */

struct config {
    struct tree t;
    const struct sample *sample;
    int cutoff, chunk, searchers, threads;
    int64_t expect[3]; /* --expect: nodes, leaves, depth to check instead */
    int nexpect;       /* how many of them were given, 0 if no --expect */
};

static const char usage[] =
    "Usage: uts [options]   (start with mpiv_run -n N)\n"
    "Unbalanced Tree Search with the SHA-1 splittable random stream; one ULT per\n"
    "node expansion above a depth cutoff, work stealing between ranks by messages.\n"
    "  --tree NAME      a published sample tree: T1 (default), T2, T3, T4 or T5;\n"
    "                   its node, leaf and depth counts are checked against\n"
    "                   the published ones\n"
    "  -t TYPE          0 binomial, 1 geometric, 2 hybrid (a custom tree, recounted\n"
    "  -b B0            root branching factor             serially on rank 0 to\n"
    "  -q Q             binomial: non-leaf probability    check the answer)\n"
    "  -m M             binomial: children of a non-leaf\n"
    "  -d D             geometric: depth limit (gen_mx)\n"
    "  -a SHAPE         geometric: 0 linear, 1 expdec, 2 cyclic, 3 fixed\n"
    "  -f F             hybrid: geometric above the height F * D, binomial\n"
    "                   below (default 0.5)\n"
    "  -r SEED          root seed\n"
    "  --expect NODES[,LEAVES[,DEPTH]]\n"
    "                   check the counts against these instead; the ones left\n"
    "                   out are not checked (e.g. a published large tree, T1L\n"
    "                   -t 1 -a 3 -d 13 -b 4 -r 29: 102181082,81746377,13)\n"
    "  --cutoff C       depth below which nodes are searched depth first instead\n"
    "                   of one ULT per expansion (default 2 on MPIv, 0 on MPI)\n"
    "  --chunk K        nodes per steal and per hand-back to the pool (default 32)\n"
    "  --searchers S    searching tasks per rank (default: workers or threads)\n"
    "  --threads T      MPI version: pthreads per rank; ignored by MPIv\n"
    "  --sha1 IMPL      auto (default: shani if the processor has it), portable\n"
    "                   or shani\n"
    "  --help           this text\n"
    "Exit status: 0 correct counts, 1 a wrong count or runtime failure, 2 bad arguments.\n";

/* --expect NODES[,LEAVES[,DEPTH]] */
static void parse_expect(struct opts *o, struct config *c)
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

static void parse_args(int argc, char **argv, struct config *c)
{
    struct opts o;
    int help = 0, custom = 0;
    const char *name = "T1";
    struct tree t = {GEO, LINEAR, 6, 4, 0, 4.0, 15.0 / 64.0, 0.5};
    opts_start(&o, argc, argv);
    for (; o.i < argc && !o.err[0]; o.i++) {
        if (opts_match(&o, "--help", 0) || opts_match(&o, "-h", 0))
            help = 1;
        else if (opts_match(&o, "--tree", 1))
            name = o.val;
        else if (opts_match(&o, "-t", 1))
            custom = 1, t.type = (int)opts_i64(&o, "-t", 0, 2);
        else if (opts_match(&o, "-f", 1))
            custom = 1, t.shift = opts_f64(&o, "-f", 0.0, 1e6);
        else if (opts_match(&o, "-b", 1))
            custom = 1, t.b0 = opts_f64(&o, "-b", 0.0, 1e6);
        else if (opts_match(&o, "-q", 1))
            custom = 1, t.q = opts_f64(&o, "-q", 0.0, 1.0);
        else if (opts_match(&o, "-m", 1))
            custom = 1, t.m = (int)opts_i64(&o, "-m", 0, MAX_CHILDREN);
        else if (opts_match(&o, "-d", 1))
            custom = 1, t.gen_mx = (int)opts_i64(&o, "-d", 1, 100000);
        else if (opts_match(&o, "-a", 1))
            custom = 1, t.shape = (int)opts_i64(&o, "-a", 0, 3);
        else if (opts_match(&o, "-r", 1))
            custom = 1, t.root_id = (int)opts_i64(&o, "-r", 0, INT32_MAX);
        else if (opts_match(&o, "--expect", 1))
            parse_expect(&o, c);
        else if (opts_match(&o, "--sha1", 1)) {
            if (sha1_use(o.val) != 0)
                opts_fail(&o, "--sha1 %s: expected auto, portable or shani%s", o.val,
                          sha1_have_shani() ? "" : " (shani: not on this processor)");
        }
        else if (opts_match(&o, "--cutoff", 1))
            c->cutoff = (int)opts_i64(&o, "--cutoff", 0, 64);
        else if (opts_match(&o, "--chunk", 1))
            c->chunk = (int)opts_i64(&o, "--chunk", 1, 256);
        else if (opts_match(&o, "--searchers", 1))
            c->searchers = (int)opts_i64(&o, "--searchers", 1, 1 << 16);
        else if (opts_match(&o, "--threads", 1))
            c->threads = (int)opts_i64(&o, "--threads", 1, 4096);
        else if (!o.err[0])
            opts_fail(&o, "unknown argument '%s'", argv[o.i]);
    }
    if (custom) {
        c->t = t;
        c->sample = NULL;
        if (t.type != GEO && t.q * t.m >= 1.0)
            opts_fail(&o, "binomial tree with q * m = %g >= 1 is infinite in expectation", t.q * t.m);
        if (t.type != BIN && t.shape == LINEAR && t.b0 <= 0)
            opts_fail(&o, "-b must be positive");
    } else {
        for (int i = 0; i < NSAMPLES; i++)
            if (strcmp(name, samples[i].name) == 0)
                c->sample = &samples[i];
        if (!c->sample)
            opts_fail(&o, "--tree %s: expected T1, T2, T3, T4 or T5", name);
        else
            c->t = c->sample->t;
    }
    opts_finish(&o, help, "uts", usage);
    if (c->threads)
        par_set_threads(c->threads);
    if (c->cutoff < 0)
        c->cutoff = strcmp(par_name(), "mpiv") == 0 ? 2 : 0;
    if (c->searchers == 0)
        c->searchers = par_threads();
}

static int uts_main(void *arg)
{
    struct config *c = arg;
    struct uts *u = calloc(1, sizeof *u);
    if (!u)
        par_die("uts: out of memory");
    u->t = c->t;
    u->cutoff = c->cutoff;
    u->chunk = c->chunk;
    u->nsearch = c->searchers;
    u->me = par_rank();
    u->P = par_size();
    par_mutex_init(&u->lock);
    par_mutex_init(&u->stack_lock);
    if (u->me == 0) {
        struct node root;
        node_root(&u->t, &root);
        pool_push(u, &root, 1);
    }
    int nserv = u->P - 1;
    struct server_arg *sa = malloc(((size_t)nserv + 1) * sizeof *sa);
    par_task_t **tasks = malloc(((size_t)nserv + 1) * sizeof *tasks);
    u->slot = calloc((size_t)u->nsearch, sizeof *u->slot);
    if (!sa || !tasks || !u->slot)
        par_die("uts: out of memory");

    par_barrier();
    double t0 = par_wtime();
    int nt = 0;
    for (int p = 0, k = 0; p < u->P; p++)
        if (p != u->me) {
            sa[k] = (struct server_arg){u, p};
            tasks[nt++] = par_spawn(steal_server, &sa[k], k);
            k++;
        }
    manager(u);
    for (int i = 0; i < nt; i++)
        par_join(tasks[i]);
    double t = par_wtime() - t0;

    int64_t mine[5] = {u->total.nodes, u->total.leaves, u->steals, u->failed_steals, u->given}, sum[5];
    par_allreduce_i64(mine, sum, 5, PAR_SUM);
    int64_t depth;
    par_allreduce_i64(&u->total.depth, &depth, 1, PAR_MAX);
    double tmax;
    par_allreduce_f64(&t, &tmax, 1, PAR_MAX);

    int ok = 1;
    if (u->me == 0) {
        const struct tree *tr = &u->t;
        if (c->sample)
            printf("uts (%s): tree %s: ", par_name(), c->sample->name);
        else
            printf("uts (%s): custom tree: ", par_name());
        if (tr->type == BIN)
            printf("binomial, b0 %g, q %g, m %d, seed %d\n", tr->b0, tr->q, tr->m, tr->root_id);
        else if (tr->type == HYBRID)
            printf("hybrid, geometric above height %g (shape %d, depth %d, b0 %g), then binomial (q %g, m %d), "
                   "seed %d\n",
                   tr->shift * tr->gen_mx, tr->shape, tr->gen_mx, tr->b0, tr->q, tr->m, tr->root_id);
        else
            printf("geometric, shape %d, depth %d, b0 %g, seed %d\n", tr->shape, tr->gen_mx, tr->b0, tr->root_id);
        printf("%d ranks x %d %s, %d searchers per rank, cutoff %d, chunk %d, sha1 %s\n", u->P, par_threads(),
               strcmp(par_name(), "mpiv") == 0 ? "workers" : "threads", u->nsearch, u->cutoff, u->chunk,
               sha1_impl_name());
        printf("nodes %lld, leaves %lld, depth %lld\n", (long long)sum[0], (long long)sum[1], (long long)depth);
        printf("steals: %lld successful (%lld nodes), %lld empty\n", (long long)sum[2], (long long)sum[4],
               (long long)sum[3]);
        printf("time: %.4f s\n", tmax);
        printf("nodes_per_s: %.6g\n", tmax > 0 ? (double)sum[0] / tmax : 0.0);
        struct counts want;
        const char *what;
        if (c->nexpect) {
            /* the counts left out of --expect are not checked */
            want = (struct counts){c->expect[0], c->nexpect > 1 ? c->expect[1] : sum[1],
                                   c->nexpect > 2 ? c->expect[2] : depth};
            what = "expected (--expect)";
        } else if (c->sample) {
            want = (struct counts){c->sample->nodes, c->sample->leaves, c->sample->depth};
            what = "published";
        } else {
            want = serial_count(&u->t);
            what = "serial";
        }
        ok = sum[0] == want.nodes && sum[1] == want.leaves && depth == want.depth;
        printf("%s count: nodes %lld, leaves %lld%s, depth %lld%s: %s\n", what, (long long)want.nodes,
               (long long)want.leaves, c->nexpect == 1 ? " (not checked)" : "", (long long)want.depth,
               c->nexpect == 1 || c->nexpect == 2 ? " (not checked)" : "", ok ? "match" : "MISMATCH");
        printf("result: %s\n", ok ? "PASSED" : "FAILED");
        /* before any rank can exit: a failing rank's exit ends the job, and
         * a buffered verdict would die with it */
        fflush(stdout);
    }
    int64_t okv = ok, okall;
    par_allreduce_i64(&okv, &okall, 1, PAR_MIN);
    par_mutex_destroy(&u->lock);
    stacks_free(u);
    par_mutex_destroy(&u->stack_lock);
    free(u->pool);
    free(u->slot);
    free(u);
    free(sa);
    free(tasks);
    return okall ? 0 : 1;
}

int main(int argc, char **argv)
{
    par_init(&argc, &argv);
    if (sha1_selftest() != 0)
        par_die("uts: the SHA-1 implementation fails its self-test");
    struct config c = {.cutoff = -1, .chunk = 32};
    parse_args(argc, argv, &c);
    geo_prepare(&c.t);
    int rc = par_run(uts_main, &c);
    par_finalize();
    return rc;
}
