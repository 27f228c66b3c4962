/*
 * uts.c — Unbalanced Tree Search on MPIv, and the same program on MPI +
 * pthreads (uts_mpi: the twin, the same program with pthreads instead of
 * ULTs; uts_expert.c is the work-stealing UTS an MPI programmer would
 * write).
 *
 * The tree, its options and the check of the counts are tree.c's.
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
 * Per node, the search costs one SHA-1 compression (sha1.c: SHA-NI when the
 * processor has it) and no allocation: the depth-first stacks are reused
 * through a free list, the children's arguments above the cutoff live on
 * the expanding ULT's stack.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "par.h"
#include "tree.h"

enum { TAG_REQ = 1, TAG_REP = 2, TAG_TOKEN = 3 };
enum { REQ_STEAL = 0, REQ_QUIT = 1 };
enum { WHITE = 0, BLACK = 1 };
#define POLL_INTERVAL 256 /* nodes between yields in a depth-first search */

/* ---- per-rank search state ---- */

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

/* Searches the subtree of `start` on the stack `s` (which it may grow). */
static void dfs(struct uts *u, const struct node *start, struct counts *c, struct dfs_stack *s)
{
    int64_t cap = s->cap, sp = 0, since = 0;
    struct node *st = s->st;
    st[sp++] = *start;
    while (sp > 0) {
        struct node n = st[--sp];
        int k = num_children(&u->t, &n);
        count_node(&n, k, c);
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
    count_node(n, k, c);
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

/* ---- main ---- */

struct config {
    struct uts_config uc;
    int cutoff, chunk, searchers, threads;
};

static const char usage[] =
    "Usage: uts [options]   (start with mpiv_run -n N, or mpiexec for uts_mpi)\n"
    "Unbalanced Tree Search with the SHA-1 splittable random stream; one ULT per\n"
    "node expansion above a depth cutoff, work stealing between ranks by messages.\n"
    "uts_mpi is its twin: the same program with pthreads instead of ULTs over\n"
    "MPI_THREAD_MULTIPLE, not the way an MPI programmer would write UTS (that is\n"
    "uts_expert).\n"
    UTS_TREE_USAGE
    "  --cutoff C       depth below which nodes are searched depth first instead\n"
    "                   of one ULT per expansion (default 2 on MPIv, 0 on MPI)\n"
    "  --chunk K        nodes per steal and per hand-back to the pool (default 32)\n"
    "  --searchers S    searching tasks per rank (default: workers or threads)\n"
    "  --threads T      uts_mpi: pthreads per rank; ignored by MPIv\n"
    "  --help           this text\n"
    "Exit status: 0 correct counts, 1 a wrong count or runtime failure, 2 bad arguments.\n";

static int match_opt(struct opts *o, void *ctx)
{
    struct config *c = ctx;
    if (uts_tree_opt(o, &c->uc))
        return 1;
    if (opts_match(o, "--cutoff", 1))
        c->cutoff = (int)opts_i64(o, "--cutoff", 0, 64);
    else if (opts_match(o, "--chunk", 1))
        c->chunk = (int)opts_i64(o, "--chunk", 1, 256);
    else if (opts_match(o, "--searchers", 1))
        c->searchers = (int)opts_i64(o, "--searchers", 1, 1 << 16);
    else if (opts_match(o, "--threads", 1))
        c->threads = (int)opts_i64(o, "--threads", 1, 4096);
    else
        return 0;
    return 1;
}

static void uts_check(struct opts *o, void *ctx)
{
    uts_tree_settle(o, &((struct config *)ctx)->uc);
}

static void parse_args(int argc, char **argv, struct config *c)
{
    uts_config_start(&c->uc);
    opts_parse(argc, argv, "uts", usage, match_opt, uts_check, c);
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
    u->t = c->uc.t;
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
        int mpiv = strcmp(par_name(), "mpiv") == 0;
        uts_print_tree(&c->uc, mpiv ? "mpiv" : "mpi + pthreads twin");
        printf("%d ranks x %d %s, %d searchers per rank, cutoff %d, chunk %d, sha1 %s\n", u->P, par_threads(),
               mpiv ? "workers" : "threads", u->nsearch, u->cutoff, u->chunk, sha1_impl_name());
        printf("steals: %lld successful (%lld nodes), %lld empty\n", (long long)sum[2], (long long)sum[4],
               (long long)sum[3]);
        struct counts all = {sum[0], sum[1], depth};
        /* flushed before any rank can exit: a failing rank's exit ends the
         * job, and a buffered verdict would die with it */
        ok = uts_check_print(&c->uc, &all, tmax);
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
    geo_prepare(&c.uc.t);
    int rc = par_run(uts_main, &c);
    par_finalize();
    return rc;
}
