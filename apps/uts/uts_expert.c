/*
 * uts_expert.c — Unbalanced Tree Search as an expert MPI programmer would
 * write it, in plain MPI-3.1 (no threads: one rank per core), as the
 * baseline MPIv's uts is measured against. It follows the classic
 * distributed work-stealing design of the UTS benchmark's MPI versions
 * (Olivier and Prins; Dinan et al.):
 *
 *  - each rank expands nodes from its own depth-first stack (children are
 *    pushed on top, the next node is popped from the top);
 *  - every --poll expansions it tests one pre-posted receive for steal
 *    requests (any source) and answers each with up to --chunk nodes from
 *    the bottom of its stack (the oldest: nearest the root, the largest
 *    subtrees), half of what it holds at most, or with an empty message;
 *  - a rank whose stack is empty asks the other ranks in turn, one request
 *    at a time, and while it waits for the answer it keeps answering the
 *    requests it receives (empty: it has nothing), so that two thieves never
 *    wait for each other;
 *  - termination: Dijkstra, Feijen and van Gasteren's token ring, the same
 *    rule as uts.c. A rank that gives work away turns black; the token is
 *    passed on by idle ranks only, with no steal of theirs outstanding, and
 *    picks up their colour (which turns them white); rank 0 starts a round
 *    when it is idle and ends the search when a white token comes back to
 *    a white, idle rank 0. Since a thief holds the token while its answer
 *    is in flight, work is never in flight past the token.
 *  - shutdown in two rounds: DONE goes round the ring (a rank forwards it
 *    only with no steal of its own outstanding, and stops stealing), then
 *    FINAL. When DONE is back at rank 0 no rank will send a steal request
 *    again and every request sent was answered, so a rank that sees FINAL
 *    may cancel its request receive and leave.
 *
 * Same trees, options, SHA-1 and checks as uts (tree.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "opts.h"
#include "par.h"
#include "tree.h"

enum { TAG_REQ = 1, TAG_REP = 2, TAG_TOKEN = 3 };
enum { WHITE = 0, BLACK = 1 };
enum { TOK_PROBE = 0, TOK_DONE = 1, TOK_FINAL = 2 };

/* The depth-first stack: live nodes are a[base .. top). Thieves take from
 * the base, the search pushes and pops at the top. */
struct wstack {
    struct node *a;
    int64_t base, top, cap;
};

struct xuts {
    struct tree t;
    int me, P, chunk, poll;
    struct wstack s;
    struct counts c;
    MPI_Request req_rq; /* pre-posted: a steal request from anyone */
    int req_buf;
    struct node *give;  /* an answer being sent */
    int color;
    int64_t steals, failed, given;
};

static void ws_push_room(struct wstack *s, int64_t k)
{
    if (s->top + k <= s->cap)
        return;
    int64_t live = s->top - s->base;
    if (s->base > 0) { /* the bottom was stolen: move the live nodes down */
        memmove(s->a, s->a + s->base, (size_t)live * sizeof *s->a);
        s->base = 0;
        s->top = live;
    }
    /* grow unless half the stack is free: so every move above is paid for
     * by at least cap / 2 pushes */
    if (live + k <= s->cap / 2)
        return;
    int64_t cap = s->cap ? s->cap : 1024;
    while (cap < 2 * (live + k))
        cap *= 2;
    struct node *a = realloc(s->a, (size_t)cap * sizeof *a);
    if (!a)
        par_die("uts_expert: out of memory for the stack");
    s->a = a;
    s->cap = cap;
}

/* Answers every steal request that has arrived. */
static void serve(struct xuts *x)
{
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Test(&x->req_rq, &flag, &st);
        if (!flag)
            return;
        int64_t k = (x->s.top - x->s.base) / 2;
        if (k > x->chunk)
            k = x->chunk;
        if (k > 0) {
            memcpy(x->give, x->s.a + x->s.base, (size_t)k * sizeof *x->give);
            x->s.base += k;
            x->color = BLACK;
            x->given += k;
        }
        MPI_Send(x->give, (int)(k * (int64_t)sizeof *x->give), MPI_BYTE, st.MPI_SOURCE, TAG_REP, MPI_COMM_WORLD);
        MPI_Irecv(&x->req_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_REQ, MPI_COMM_WORLD, &x->req_rq);
    }
}

/* Asks `victim` for work and waits for the answer, serving requests
 * meanwhile; the nodes received go on the stack. */
static void steal(struct xuts *x, int victim, struct node *in)
{
    MPI_Request rep;
    MPI_Status st;
    int flag = 0, one = 1, bytes = 0;
    MPI_Irecv(in, (int)(x->chunk * (int64_t)sizeof *in), MPI_BYTE, victim, TAG_REP, MPI_COMM_WORLD, &rep);
    MPI_Send(&one, 1, MPI_INT, victim, TAG_REQ, MPI_COMM_WORLD);
    for (;;) {
        MPI_Test(&rep, &flag, &st);
        if (flag)
            break;
        serve(x);
    }
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    int64_t k = bytes / (int64_t)sizeof *in;
    if (k == 0) {
        x->failed++;
        return;
    }
    x->steals++;
    ws_push_room(&x->s, k);
    memcpy(x->s.a + x->s.top, in, (size_t)k * sizeof *in);
    x->s.top += k;
}

/* Expands nodes until the stack is empty, serving steal requests every
 * x->poll expansions. */
static void work(struct xuts *x)
{
    struct wstack *s = &x->s;
    int since = 0;
    while (s->top > s->base) {
        struct node n = s->a[--s->top];
        int k = num_children(&x->t, &n);
        count_node(&n, k, &x->c);
        ws_push_room(s, k);
        for (int i = 0; i < k; i++)
            node_child(&n, i, &s->a[s->top++]);
        if (++since == x->poll) {
            since = 0;
            if (x->P > 1)
                serve(x);
        }
    }
}

static void search(struct xuts *x)
{
    int P = x->P, me = x->me, left = (me + P - 1) % P, right = (me + 1) % P;
    if (P == 1) {
        work(x);
        return;
    }
    struct node *in = malloc((size_t)x->chunk * sizeof *in);
    if (!in)
        par_die("uts_expert: out of memory");
    int64_t tok[2], out[2];
    MPI_Request tok_rq;
    MPI_Irecv(tok, 2, MPI_INT64_T, left, TAG_TOKEN, MPI_COMM_WORLD, &tok_rq);
    MPI_Irecv(&x->req_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_REQ, MPI_COMM_WORLD, &x->req_rq);
    int token_out = 0, ending = 0, victim = right;
    for (;;) {
        work(x);
        /* idle, no steal outstanding */
        serve(x);
        int flag = 0;
        MPI_Test(&tok_rq, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            if (tok[1] == TOK_FINAL) {
                if (me != 0)
                    MPI_Send(tok, 2, MPI_INT64_T, right, TAG_TOKEN, MPI_COMM_WORLD);
                break;
            }
            out[0] = WHITE;
            out[1] = tok[1];
            if (tok[1] == TOK_DONE) {
                ending = 1;
                if (me == 0)
                    out[1] = TOK_FINAL; /* DONE went round: nobody steals any more */
            } else if (me == 0) {
                if (tok[0] == WHITE && x->color == WHITE) {
                    out[1] = TOK_DONE;
                    ending = 1;
                }
                x->color = WHITE;
            } else {
                out[0] = tok[0] | x->color;
                x->color = WHITE;
            }
            MPI_Send(out, 2, MPI_INT64_T, right, TAG_TOKEN, MPI_COMM_WORLD);
            MPI_Irecv(tok, 2, MPI_INT64_T, left, TAG_TOKEN, MPI_COMM_WORLD, &tok_rq);
        } else if (me == 0 && !token_out) {
            x->color = WHITE;
            out[0] = WHITE;
            out[1] = TOK_PROBE;
            token_out = 1;
            MPI_Send(out, 2, MPI_INT64_T, right, TAG_TOKEN, MPI_COMM_WORLD);
        }
        if (ending)
            continue;
        steal(x, victim, in);
        do
            victim = (victim + 1) % P;
        while (victim == me);
    }
    MPI_Cancel(&x->req_rq);
    MPI_Wait(&x->req_rq, MPI_STATUS_IGNORE);
    free(in);
}

struct config {
    struct uts_config uc;
    int chunk, poll;
};

static const char usage[] =
    "Usage: uts_expert [options]   (start with mpiexec -n N)\n"
    "Unbalanced Tree Search with the SHA-1 splittable random stream, written as\n"
    "an expert MPI programmer would: one single-threaded rank per core, each\n"
    "searching depth first from its own stack and polling for steal requests,\n"
    "chunks stolen from the bottom of the stack, token-ring termination.\n"
    "Same trees, options and checks as uts.\n"
    UTS_TREE_USAGE
    "  --chunk K        nodes per steal at most (default 32)\n"
    "  --poll N         node expansions between tests for steal requests\n"
    "                   (default 16)\n"
    "  --help           this text\n"
    "Exit status: 0 correct counts, 1 a wrong count or runtime failure, 2 bad arguments.\n";

static int match_opt(struct opts *o, void *ctx)
{
    struct config *c = ctx;
    if (uts_tree_opt(o, &c->uc))
        return 1;
    if (opts_match(o, "--chunk", 1))
        c->chunk = (int)opts_i64(o, "--chunk", 1, 1 << 16);
    else if (opts_match(o, "--poll", 1))
        c->poll = (int)opts_i64(o, "--poll", 1, 1 << 24);
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
    opts_parse(argc, argv, "uts_expert", usage, match_opt, uts_check, c);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    par_init(&argc, &argv); /* for opts.c and tree.c */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    if (sha1_selftest() != 0)
        par_die("uts_expert: the SHA-1 implementation fails its self-test");
    struct config c = {.chunk = 32, .poll = 16};
    parse_args(argc, argv, &c);
    geo_prepare(&c.uc.t);

    struct xuts *x = calloc(1, sizeof *x);
    if (!x)
        par_die("uts_expert: out of memory");
    x->t = c.uc.t;
    MPI_Comm_rank(MPI_COMM_WORLD, &x->me);
    MPI_Comm_size(MPI_COMM_WORLD, &x->P);
    x->chunk = c.chunk;
    x->poll = c.poll;
    x->give = malloc((size_t)c.chunk * sizeof *x->give);
    if (!x->give)
        par_die("uts_expert: out of memory");
    ws_push_room(&x->s, 1);
    if (x->me == 0)
        node_root(&x->t, &x->s.a[x->s.top++]);

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    search(x);
    double t = MPI_Wtime() - t0, tmax;

    int64_t mine[5] = {x->c.nodes, x->c.leaves, x->steals, x->failed, x->given}, sum[5], depth;
    MPI_Reduce(mine, sum, 5, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&x->c.depth, &depth, 1, MPI_INT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    int ok = 1;
    if (x->me == 0) {
        uts_print_tree(&c.uc, "expert MPI, work stealing");
        printf("%d ranks x 1 thread, chunk %d, poll every %d nodes, sha1 %s\n", x->P, x->chunk, x->poll,
               sha1_impl_name());
        printf("steals: %lld successful (%lld nodes), %lld empty\n", (long long)sum[2], (long long)sum[4],
               (long long)sum[3]);
        struct counts all = {sum[0], sum[1], depth};
        ok = uts_check_print(&c.uc, &all, tmax);
    }
    /* also keeps every rank here until rank 0 has printed the verdict */
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(x->s.a);
    free(x->give);
    free(x);
    par_finalize();
    return ok ? 0 : 1;
}
