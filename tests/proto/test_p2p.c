/*
 * Multi-rank tests of point-to-point and collectives, run under mpiv_run
 * with 2 and 4 ranks. Every rank runs the same Check cases in the same order
 * (CK_FORK=no: one process, so mpiv_init is done once, in main); ranks pair
 * up as (0,1), (2,3), … for point-to-point, and all take part in
 * collectives.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check_main.h"
#include "common/lib_loaded.h"
#include "common/test_mpiv.h"
#include "common/test_data.h"
#include "mpiv.h"
#include "server/server.h"
#include "server/srv_int.h"
#include "sched/sched.h"

static int me, nranks, partner; /* partner: the other rank of my pair, or -1 */
static size_t eager;            /* a size that is surely eager               */

/* ---------------------------------------------------------------------- */

/* Every size from 0 to 16 MiB in powers of two and ±1 around them, both
 * sides of the eager limit; receiver first (receive posted before a barrier
 * that the sender waits for) and sender first (send started before it).
 * Under ThreadSanitizer up to 4 MiB: past that a message only takes more
 * of the same pieces, and TSan's byte-by-byte cost of filling and checking
 * made the larger sizes most of this file's run. */
#ifdef MPIV_TSAN
#define P2P_ALL_SIZES_MAX ((size_t)4 << 20)
#else
#define P2P_ALL_SIZES_MAX ((size_t)16 << 20)
#endif

START_TEST(all_sizes_both_orders)
{
    if (partner < 0)
        return;
    size_t max = P2P_ALL_SIZES_MAX;
    unsigned char *buf = malloc(max + 1);
    ck_assert_ptr_nonnull(buf);
    int sender = (me % 2) == 0;
    unsigned seed = 0;
    for (int order = 0; order < 2; order++) { /* 0: receiver first, 1: sender first */
        for (size_t p = 1; p <= max; p <<= 1) {
            size_t sizes[3] = {p - 1, p, p + 1};
            for (int k = 0; k < 3; k++) {
                size_t n = sizes[k];
                if (n > max)
                    continue;
                seed++;
                int tag = (int)(seed & 0xffff);
                mpiv_request_t r;
                if (sender) {
                    fill(buf, n, seed);
                    if (order == 0) {
                        OK(mpiv_barrier());
                        OK(mpiv_send(buf, n, partner, tag));
                    } else {
                        OK(mpiv_isend(buf, n, partner, tag, &r));
                        OK(mpiv_barrier());
                        OK(mpiv_wait(&r, NULL));
                    }
                } else {
                    memset(buf, 0xEE, n + 1);
                    mpiv_status_t st;
                    if (order == 0) {
                        OK(mpiv_irecv(buf, n, partner, tag, &r));
                        OK(mpiv_barrier());
                    } else {
                        OK(mpiv_barrier());
                        OK(mpiv_irecv(buf, n, partner, tag, &r));
                    }
                    OK(mpiv_wait(&r, &st));
                    ck_assert_uint_eq(st.size, n);
                    ck_assert_int_eq(st.source, partner);
                    ck_assert_int_eq(st.tag, tag);
                    check_data(buf, n, seed);
                    ck_assert_uint_eq(buf[n], 0xEE);
                }
            }
        }
    }
    free(buf);
}
END_TEST

/* mpiv_ult_spawn_recv: ULTs that start with their message.
 * - posted before the messages exist (after a barrier the sender waits
 *   for), eager and rendezvous sizes: while they wait, no stack is in use
 *   for them; each runs once, with its data and status;
 * - posted after the messages arrived (sender first): they start at once;
 * - a message larger than the buffer: the ULT runs with MPIV_ERR_TRUNCATE;
 * - the wildcards, and bad arguments (nothing posted, no ULT). */
struct started {
    unsigned char *buf;
    size_t cap;
    mpiv_status_t st;
    atomic_int *runs;
    int on_worker; /* the worker it ran on */
};

static void *started_fn(void *p)
{
    struct started *x = p;
    atomic_fetch_add(x->runs, 1);
    x->on_worker = mpiv_worker_id();
    return x;
}

enum { SR_N = 300 };

static size_t sr_size(int i)
{
    return i % 50 == 7 ? 4 * eager + (size_t)i : (size_t)(i * 13 % 97); /* some rendezvous */
}

START_TEST(spawn_recv)
{
    if (partner < 0)
        return;
    int sender = (me % 2) == 0;
    const int base = 7000;
    if (sender) {
        /* non-blocking: a rendezvous send started before its receive is
         * posted (order 1) completes only once it is */
        unsigned char **b = calloc(SR_N, sizeof *b);
        mpiv_request_t *rq = calloc(SR_N, sizeof *rq);
        ck_assert(b && rq);
        for (int order = 0; order < 2; order++) {
            if (order == 0)
                OK(mpiv_barrier()); /* the receiver posted them all */
            for (int i = 0; i < SR_N; i++) {
                b[i] = malloc(sr_size(i) + 1);
                ck_assert_ptr_nonnull(b[i]);
                fill(b[i], sr_size(i), (unsigned)(base + order * SR_N + i));
                OK(mpiv_isend(b[i], sr_size(i), partner, base + order * SR_N + i, &rq[i]));
            }
            if (order == 1)
                OK(mpiv_barrier()); /* started before the receiver posts */
            OK(mpiv_waitall(SR_N, rq, NULL));
            for (int i = 0; i < SR_N; i++)
                free(b[i]);
        }
        free(b);
        free(rq);
        /* truncated, then one for a wildcard receive */
        unsigned char m[100];
        fill(m, 100, 1);
        OK(mpiv_send(m, 100, partner, base + 2 * SR_N));
        fill(m, 10, 2);
        OK(mpiv_send(m, 10, partner, base + 2 * SR_N + 1));
        OK(mpiv_barrier());
        return;
    }
    atomic_int runs;
    atomic_init(&runs, 0);
    struct started *x = calloc(SR_N, sizeof *x);
    mpiv_ult_t *u = calloc(SR_N, sizeof *u);
    ck_assert(x && u);
    for (int order = 0; order < 2; order++) {
        atomic_store(&runs, 0);
        if (order == 1)
            OK(mpiv_barrier()); /* every message is on its way or here */
        struct sched_stack_stats before, posted;
        sched_stack_stats(&before);
        for (int i = 0; i < SR_N; i++) {
            x[i] = (struct started){.cap = sr_size(i) + 1, .runs = &runs, .on_worker = -2};
            x[i].buf = malloc(x[i].cap);
            ck_assert_ptr_nonnull(x[i].buf);
            memset(x[i].buf, 0xEE, x[i].cap);
            OK(mpiv_ult_spawn_recv(started_fn, &x[i], i % mpiv_num_workers(), x[i].buf, x[i].cap - 1,
                                   partner, base + order * SR_N + i, &x[i].st, &u[i]));
        }
        if (order == 0) {
            /* Nothing has been sent yet: none may have run, and none holds
             * a stack (ULTs of earlier tests are all joined: in_use counts
             * only the callers' own). */
            sched_stack_stats(&posted);
            ck_assert_int_eq(atomic_load(&runs), 0);
            ck_assert_msg(posted.in_use <= before.in_use,
                          "%d posted receives hold stacks: %llu in use, %llu before", SR_N,
                          (unsigned long long)posted.in_use, (unsigned long long)before.in_use);
            OK(mpiv_barrier());
        }
        for (int i = 0; i < SR_N; i++) {
            void *ret = NULL;
            OK(mpiv_ult_join(u[i], &ret));
            ck_assert_ptr_eq(ret, &x[i]);
            ck_assert_int_eq(x[i].on_worker, i % mpiv_num_workers());
            ck_assert_int_eq(x[i].st.error, MPIV_SUCCESS);
            ck_assert_int_eq(x[i].st.source, partner);
            ck_assert_int_eq(x[i].st.tag, base + order * SR_N + i);
            ck_assert_uint_eq(x[i].st.size, sr_size(i));
            check_data(x[i].buf, sr_size(i), (unsigned)(base + order * SR_N + i));
            ck_assert_uint_eq(x[i].buf[sr_size(i)], 0xEE);
            free(x[i].buf);
        }
        ck_assert_int_eq(atomic_load(&runs), SR_N);
    }
    /* truncated: the ULT runs, its status says so, nothing past the buffer */
    unsigned char small[11];
    memset(small, 0xEE, sizeof small);
    struct started t = {.buf = small, .cap = sizeof small, .runs = &runs};
    mpiv_ult_t tu;
    OK(mpiv_ult_spawn_recv(started_fn, &t, MPIV_WORKER_ANY, small, 10, partner, base + 2 * SR_N, &t.st,
                           &tu));
    OK(mpiv_ult_join(tu, NULL));
    ck_assert_int_eq(t.st.error, MPIV_ERR_TRUNCATE);
    ck_assert_uint_eq(small[10], 0xEE);
    /* wildcards */
    OK(mpiv_ult_spawn_recv(started_fn, &t, MPIV_WORKER_ANY, small, 10, MPIV_ANY_SOURCE, MPIV_ANY_TAG,
                           &t.st, &tu));
    OK(mpiv_ult_join(tu, NULL));
    ck_assert_int_eq(t.st.error, MPIV_SUCCESS);
    ck_assert_int_eq(t.st.source, partner);
    ck_assert_int_eq(t.st.tag, base + 2 * SR_N + 1);
    check_data(small, 10, 2);
    /* bad arguments: an error, nothing posted, no ULT */
    int before_runs = atomic_load(&runs);
    ck_assert_int_eq(mpiv_ult_spawn_recv(NULL, &t, 0, small, 10, partner, 1, &t.st, &tu), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_spawn_recv(started_fn, &t, 0, small, 10, partner, 1, NULL, &tu),
                     MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_spawn_recv(started_fn, &t, 0, small, 10, partner, 1, &t.st, NULL),
                     MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_spawn_recv(started_fn, &t, mpiv_num_workers(), small, 10, partner, 1,
                                         &t.st, &tu),
                     MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_spawn_recv(started_fn, &t, 0, small, 10, nranks, 1, &t.st, &tu),
                     MPIV_ERR_RANK);
    ck_assert_int_eq(mpiv_ult_spawn_recv(started_fn, &t, 0, small, 10, partner, -5, &t.st, &tu),
                     MPIV_ERR_TAG);
    ck_assert_int_eq(mpiv_ult_spawn_recv(started_fn, &t, 0, NULL, 10, partner, 1, &t.st, &tu),
                     MPIV_ERR_ARG);
    ck_assert_int_eq(atomic_load(&runs), before_runs);
    free(x);
    free(u);
    OK(mpiv_barrier());
}
END_TEST

/* The race a review found in the first version: a worker whose idle spell
 * began with no live ULT decided not to poll, and a ULT counted live just
 * after (mpiv_ult_spawn_recv, then the join: nothing runnable) was never
 * polled for. Round after round, post one onto each worker in turn and
 * join it, while the sender sends each message after a random pause of up
 * to 300 us: a hang here is that bug. */
enum { SR_ROUNDS = 2000 };

static void *round_fn(void *p)
{
    return p;
}

START_TEST(spawn_recv_rounds)
{
    if (partner < 0)
        return;
    const int base = 9000;
    OK(mpiv_barrier());
    if (me % 2 == 0) {
        unsigned seed = 12345u;
        for (int i = 0; i < SR_ROUNDS; i++) {
            seed = seed * 1103515245u + 12345u;
            usleep((seed >> 16) % 300);
            uint32_t v = (uint32_t)i;
            OK(mpiv_send(&v, sizeof v, partner, base + i % 1000));
        }
    } else {
        for (int i = 0; i < SR_ROUNDS; i++) {
            uint32_t v = UINT32_MAX;
            mpiv_status_t st;
            mpiv_ult_t u;
            void *ret = NULL;
            OK(mpiv_ult_spawn_recv(round_fn, &v, i % mpiv_num_workers(), &v, sizeof v, partner,
                                   base + i % 1000, &st, &u));
            OK(mpiv_ult_join(u, &ret));
            ck_assert_ptr_eq(ret, &v);
            ck_assert_int_eq(st.error, MPIV_SUCCESS);
            ck_assert_uint_eq(v, (uint32_t)i);
        }
    }
    OK(mpiv_barrier());
}
END_TEST

/* Receive buffers larger than the message on both sides of the eager limit
 * (the status tells the real size), and messages larger than the buffer
 * (MPIV_ERR_TRUNCATE, not one byte written past the buffer, and the sender
 * still completes). */
struct mm_case {
    size_t msg, buf;
};
static struct mm_case mm_cases[8];
static void init_mm_cases(void)
{
    size_t big = 4 * eager + 1000;
    struct mm_case c[8] = {
        {10, 100},             /* eager into a larger eager-sized buffer  */
        {10, big},             /* eager message into a rendezvous buffer  */
        {eager, big},          /* largest eager into a rendezvous buffer  */
        {big, 2 * big},        /* rendezvous into a larger buffer         */
        {100, 10},             /* eager, truncated                        */
        {big, 100},            /* rendezvous into an eager-sized buffer   */
        {2 * big, big},        /* rendezvous, truncated                   */
        {eager + 1, eager},    /* just over the limit, buffer at it      */
    };
    memcpy(mm_cases, c, sizeof c);
}

START_TEST(buffer_size_mismatch)
{
    if (partner < 0)
        return;
    struct mm_case c = mm_cases[_i];
    int sender = (me % 2) == 0;
    for (int order = 0; order < 2; order++) {
        unsigned seed = 1000u + (unsigned)_i * 2 + (unsigned)order;
        int tag = 5000 + _i * 2 + order;
        if (sender) {
            unsigned char *b = malloc(c.msg);
            fill(b, c.msg, seed);
            mpiv_request_t r;
            if (order == 0) {
                OK(mpiv_barrier());
                OK(mpiv_send(b, c.msg, partner, tag));
            } else {
                OK(mpiv_isend(b, c.msg, partner, tag, &r));
                OK(mpiv_barrier());
                OK(mpiv_wait(&r, NULL));
            }
            free(b);
        } else {
            unsigned char *b = malloc(c.buf + 64);
            memset(b, 0xEE, c.buf + 64);
            mpiv_request_t r;
            mpiv_status_t st;
            if (order == 0) {
                OK(mpiv_irecv(b, c.buf, partner, tag, &r));
                OK(mpiv_barrier());
            } else {
                OK(mpiv_barrier());
                OK(mpiv_irecv(b, c.buf, partner, tag, &r));
            }
            int rc = mpiv_wait(&r, &st);
            ck_assert_uint_eq(st.size, c.msg);
            if (c.msg <= c.buf) {
                ck_assert_int_eq(rc, MPIV_SUCCESS);
                check_data(b, c.msg, seed);
                for (size_t i = c.msg; i < c.buf + 64; i++)
                    ck_assert_uint_eq(b[i], 0xEE);
            } else {
                ck_assert_int_eq(rc, MPIV_ERR_TRUNCATE);
                ck_assert_int_eq(st.error, MPIV_ERR_TRUNCATE);
                for (size_t i = c.buf; i < c.buf + 64; i++)
                    ck_assert_uint_eq(b[i], 0xEE);
            }
            free(b);
        }
    }
    /* the channel still works after a truncation */
    int x = 42, y = 0;
    if (sender)
        OK(mpiv_send(&x, sizeof x, partner, 9999));
    else {
        OK(mpiv_recv(&y, sizeof y, partner, 9999, NULL));
        ck_assert_int_eq(y, 42);
    }
}
END_TEST

/* 1,000 messages with one (source, tag), alternating eager and rendezvous
 * sizes and receive buffers of both kinds, arrive in the order sent: the
 * stale-RTR hazard would show here as a message landing in the wrong
 * buffer. */
START_TEST(same_tag_in_order)
{
    if (partner < 0)
        return;
    enum { N = 1000 };
    int sender = (me % 2) == 0;
    size_t big = eager * 2 + 8;
    size_t sizes[4] = {8, big, eager, big + 1};
    if (sender) {
        unsigned char *b = malloc(big + 1);
        mpiv_request_t *r = calloc(N, sizeof *r);
        unsigned char **bufs = calloc(N, sizeof *bufs);
        for (int i = 0; i < N; i++) {
            size_t n = sizes[i % 4];
            bufs[i] = malloc(n);
            fill(bufs[i], n, (unsigned)i);
            OK(mpiv_isend(bufs[i], n, partner, 77, &r[i]));
        }
        OK(mpiv_waitall(N, r, NULL));
        for (int i = 0; i < N; i++)
            free(bufs[i]);
        free(bufs);
        free(r);
        free(b);
    } else {
        /* receive buffers alternate small and large, out of step with the
         * message sizes, so every combination meets */
        mpiv_request_t *r = calloc(N, sizeof *r);
        unsigned char **bufs = calloc(N, sizeof *bufs);
        for (int i = 0; i < N; i++) {
            bufs[i] = malloc(big + 1);
            size_t cap = (i % 3 == 0 && sizes[i % 4] <= eager) ? eager : big + 1;
            OK(mpiv_irecv(bufs[i], cap, partner, 77, &r[i]));
        }
        for (int i = 0; i < N; i++) {
            mpiv_status_t st;
            OK(mpiv_wait(&r[i], &st));
            ck_assert_uint_eq(st.size, sizes[i % 4]);
            check_data(bufs[i], st.size, (unsigned)i);
            free(bufs[i]);
        }
        free(bufs);
        free(r);
    }
}
END_TEST

/* Many ULTs per rank in concurrent ping-pong with distinct tags. */
struct pp_arg {
    int id, rounds;
    size_t size;
};

static void *pingpong_ult(void *p)
{
    struct pp_arg *a = p;
    unsigned char out[256], in[256];
    int first = (me % 2) == 0;
    for (int i = 0; i < a->rounds; i++) {
        unsigned seed = (unsigned)(a->id * 31 + i);
        if (first) {
            fill(out, a->size, seed);
            if (mpiv_send(out, a->size, partner, a->id) != MPIV_SUCCESS)
                return (void *)1;
            mpiv_status_t st;
            if (mpiv_recv(in, sizeof in, partner, a->id, &st) != MPIV_SUCCESS || st.size != a->size)
                return (void *)2;
            if (data_mismatch(in, 0, a->size, seed + 1) != a->size)
                return (void *)3;
        } else {
            mpiv_status_t st;
            if (mpiv_recv(in, sizeof in, partner, a->id, &st) != MPIV_SUCCESS || st.size != a->size)
                return (void *)2;
            if (data_mismatch(in, 0, a->size, seed) != a->size)
                return (void *)3;
            fill(out, a->size, seed + 1);
            if (mpiv_send(out, a->size, partner, a->id) != MPIV_SUCCESS)
                return (void *)1;
        }
    }
    return NULL;
}

static void run_ults(int n, int rounds, size_t size)
{
    mpiv_ult_t *u = malloc(sizeof *u * (size_t)n);
    struct pp_arg *a = malloc(sizeof *a * (size_t)n);
    for (int i = 0; i < n; i++) {
        a[i] = (struct pp_arg){.id = i, .rounds = rounds, .size = size};
        OK(mpiv_ult_spawn(pingpong_ult, &a[i], MPIV_WORKER_ANY, &u[i]));
    }
    for (int i = 0; i < n; i++) {
        void *ret = (void *)-1;
        OK(mpiv_ult_join(u[i], &ret));
        ck_assert_msg(ret == NULL, "ULT %d failed with %ld", i, (long)ret);
    }
    free(u);
    free(a);
}

/* Under ThreadSanitizer each stack a blocked ULT holds carries a TSan fiber
 * (about a megabyte of its state, zeroed when made) until finalize, so
 * 10,000 blocked ULTs in each of two ranks, with a second test running
 * beside them, exhaust the CI machine's memory, and even 1,000 spent most
 * of this file's run making fibers (perf: TSan's memset and thread
 * contexts, and their page faults). 256 still keep both workers switching
 * among blocked ULTs, which is what TSan is here to watch. */
#ifdef MPIV_TSAN
#define P2P_MANY_ULTS 256
#else
#define P2P_MANY_ULTS 10000
#endif

START_TEST(ten_thousand_ults_pingpong)
{
    if (partner < 0)
        return;
    run_ults(P2P_MANY_ULTS, 2, 64);
    OK(mpiv_barrier());
}
END_TEST

/* Plain pthreads (not ULTs) as callers: they block without a scheduler. */
static void *pingpong_pthread(void *p) { return pingpong_ult(p); }

START_TEST(pthread_callers)
{
    if (partner < 0)
        return;
    enum { T = 4 };
    pthread_t t[T];
    struct pp_arg a[T];
    for (int i = 0; i < T; i++) {
        a[i] = (struct pp_arg){.id = 20000 + i, .rounds = 200, .size = 200};
        ck_assert_int_eq(pthread_create(&t[i], NULL, pingpong_pthread, &a[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        ck_assert_msg(ret == NULL, "pthread %d failed with %ld", i, (long)ret);
    }
}
END_TEST

/* MPIV_SERVER, when set, is what the job runs with (the runs below
 * exercise both kinds of progress, whatever this machine's cores). */
START_TEST(progress_as_configured)
{
    const char *m = getenv("MPIV_SERVER");
    if (m && strcmp(m, "inline") == 0)
        ck_assert_msg(srv_inline(), "MPIV_SERVER=inline, yet a server thread runs");
    else if (m && strcmp(m, "thread") == 0)
        ck_assert_msg(!srv_inline(), "MPIV_SERVER=thread, yet no server thread runs");
}
END_TEST

/* libfabric is loaded only by the ofi backend (src/server/ofi.c, ofi_load):
 * a job whose ranks share one host runs on shm unless MPIV_NET says
 * otherwise, and never pays libfabric's dependencies' constructors. */
START_TEST(libfabric_only_for_ofi)
{
    bool loaded = lib_loaded("libfabric.so");
    const char *net = getenv("MPIV_NET");
    bool one_host = false;
    ck_assert_int_eq(srv_all_on_one_host(&one_host), MPIV_SUCCESS);
    if (net && strcmp(net, "ofi") == 0)
        ck_assert_msg(loaded, "MPIV_NET=ofi, yet libfabric is not loaded");
    else if ((net && strcmp(net, "shm") == 0) || (!net && one_host && mpiv_size() > 1))
        ck_assert_msg(!loaded, "the job runs on shm (MPIV_NET=%s), yet libfabric is loaded",
                      net ? net : "unset");
}
END_TEST

/* ULTs that never block must not starve ULTs that wait for the network:
 * without a server thread, the worker that keeps running the first kind
 * never idles, and the network still has to move for the second kind. One
 * ULT waits in mpiv_recv while another, on the same worker, yields until
 * it is done; a third tests its request in a loop of yields. */
struct starve {
    int tag;
    atomic_int done;
    int failed;
};

static void *starve_receiver(void *p)
{
    struct starve *s = p;
    unsigned char b[64];
    if (mpiv_recv(b, sizeof b, partner, s->tag, NULL) != MPIV_SUCCESS)
        s->failed = 1;
    else
        for (size_t i = 0; i < sizeof b; i++)
            if (b[i] != pattern(i, (unsigned)s->tag))
                s->failed = 1;
    atomic_store(&s->done, 1);
    return NULL;
}

static void *starve_spinner(void *p)
{
    struct starve *s = p;
    while (!atomic_load(&s->done))
        mpiv_ult_yield();
    return NULL;
}

static void *starve_tester(void *p)
{
    struct starve *s = p;
    unsigned char b[64];
    mpiv_request_t r;
    if (mpiv_irecv(b, sizeof b, partner, s->tag + 1, &r) != MPIV_SUCCESS) {
        s->failed = 1;
        return NULL;
    }
    int flag = 0;
    while (!flag) {
        if (mpiv_test(&r, &flag, NULL) != MPIV_SUCCESS) {
            s->failed = 1;
            return NULL;
        }
        if (!flag)
            mpiv_ult_yield();
    }
    for (size_t i = 0; i < sizeof b; i++)
        if (b[i] != pattern(i, (unsigned)s->tag + 1))
            s->failed = 1;
    return NULL;
}

START_TEST(yielding_ults_do_not_starve_the_network)
{
    if (partner < 0)
        return;
    struct starve s = {.tag = 31000};
    atomic_init(&s.done, 0);
    if (me < partner) {
        mpiv_ult_t u[3];
        OK(mpiv_ult_spawn(starve_spinner, &s, 0, &u[0]));
        OK(mpiv_ult_spawn(starve_receiver, &s, 0, &u[1]));
        OK(mpiv_ult_spawn(starve_tester, &s, 0, &u[2]));
        OK(mpiv_barrier()); /* the three run before anything is sent */
        for (int i = 0; i < 3; i++)
            OK(mpiv_ult_join(u[i], NULL));
        ck_assert_msg(!s.failed, "a receive failed or brought wrong bytes");
    } else {
        unsigned char b[64];
        OK(mpiv_barrier());
        fill(b, sizeof b, (unsigned)s.tag);
        OK(mpiv_send(b, sizeof b, partner, s.tag));
        fill(b, sizeof b, (unsigned)s.tag + 1);
        OK(mpiv_send(b, sizeof b, partner, s.tag + 1));
    }
    OK(mpiv_barrier());
}
END_TEST

/* Invalid arguments fail before anything is sent. */
START_TEST(bad_arguments)
{
    char b[8] = {0};
    mpiv_request_t r = (mpiv_request_t)0x1;
    ck_assert_int_eq(mpiv_send(b, 8, nranks, 0), MPIV_ERR_RANK);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "outside"));
    ck_assert_int_eq(mpiv_send(b, 8, -1, 0), MPIV_ERR_RANK);
    ck_assert_int_eq(mpiv_recv(b, 8, nranks + 5, 0, NULL), MPIV_ERR_RANK);
    ck_assert_int_eq(mpiv_send(b, 8, 0, -1), MPIV_ERR_TAG);
    ck_assert_int_eq(mpiv_isend(b, 8, 0, -7, &r), MPIV_ERR_TAG);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(mpiv_send(NULL, 8, 0, 0), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_irecv(NULL, 1, 0, 0, &r), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_irecv(b, 1, 0, 0, NULL), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_bcast(b, 8, nranks), MPIV_ERR_RANK);
    ck_assert_int_eq(mpiv_allreduce(b, b, 1, (mpiv_datatype_t)99, MPIV_SUM), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_allreduce(b, b, 1, MPIV_INT64, (mpiv_op_t)9), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_init(NULL, NULL), MPIV_ERR_STATE);
    /* NULL buffer with size 0 is a valid empty message */
    r = MPIV_REQUEST_NULL;
    ck_assert_int_eq(mpiv_wait(&r, NULL), MPIV_SUCCESS);
    OK(mpiv_barrier());
}
END_TEST

/* Far more unexpected messages than the pool has packets: one rank sends
 * 4,096 eager messages before the other posts a single receive, then both
 * meet in a barrier. Unexpected messages must not keep the packets a rank
 * needs to send (the barrier) or to receive with. */
START_TEST(unexpected_flood)
{
    if (partner < 0)
        return;
    enum { N = 4096 };
    unsigned char b[100];
    if ((me % 2) == 0) {
        for (int i = 0; i < N; i++) {
            fill(b, sizeof b, (unsigned)i);
            OK(mpiv_send(b, sizeof b, partner, 40000 + (i % 7)));
        }
        OK(mpiv_barrier());
    } else {
        OK(mpiv_barrier());
        for (int i = 0; i < N; i++) {
            mpiv_status_t st;
            OK(mpiv_recv(b, sizeof b, partner, 40000 + (i % 7), &st));
            ck_assert_uint_eq(st.size, sizeof b);
            check_data(b, sizeof b, (unsigned)i);
        }
    }
    OK(mpiv_barrier());
}
END_TEST

/* The same with rendezvous messages: 256 non-blocking sends above the eager
 * limit reach the other rank (as RTS packets) before it posts any receive.
 * Held RTS packets must not starve the barrier either; each receive then
 * turns its RTS back into an RTR and the data arrives intact. */
START_TEST(unexpected_rendezvous_flood)
{
    if (partner < 0)
        return;
    enum { N = 256 };
    size_t size = eager + 100;
    unsigned char *b = malloc((size_t)N * size);
    mpiv_request_t *req = malloc(N * sizeof *req);
    if ((me % 2) == 0) {
        for (int i = 0; i < N; i++) {
            fill(b + (size_t)i * size, size, (unsigned)(7 * i + 1));
            OK(mpiv_isend(b + (size_t)i * size, size, partner, 41000 + (i % 5), &req[i]));
        }
        OK(mpiv_barrier());
        OK(mpiv_waitall(N, req, NULL));
    } else {
        OK(mpiv_barrier());
        memset(b, 0, (size_t)N * size);
        for (int i = 0; i < N; i++)
            OK(mpiv_irecv(b + (size_t)i * size, size, partner, 41000 + (i % 5), &req[i]));
        OK(mpiv_waitall(N, req, NULL));
        for (int i = 0; i < N; i++)
            check_data(b + (size_t)i * size, size, (unsigned)(7 * i + 1));
    }
    OK(mpiv_barrier());
    free(req);
    free(b);
}
END_TEST

/* Messages to one's own rank (they skip the network: the sender runs the
 * arrival handler). Eager and rendezvous sizes alternate on one tag, so a
 * shortcut that let a later small message overtake an earlier large one
 * would deliver them out of order. Case 0: every send starts before any
 * receive (non-blocking: a large one waits for its receive); case 1:
 * every receive is posted first. */
START_TEST(own_rank_in_order)
{
    enum { N = 24 };
    size_t sizes[N];
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        size_t pick[] = {0, 1, 100, eager, eager + 1, 3 * eager + 17};
        sizes[i] = pick[(i * 5) % 6];
        total += sizes[i] + 1;
    }
    unsigned char *sb = malloc(total), *rb = malloc(total);
    mpiv_request_t sr[N], rr[N];
    mpiv_status_t st[N];
    memset(rb, 0, total);
    size_t off = 0;
    for (int i = 0; i < N; i++) {
        fill(sb + off, sizes[i], (unsigned)(me * 1000 + i));
        off += sizes[i] + 1;
    }
    for (int phase = 0; phase < 2; phase++) {
        int sends_first = _i == 0 ? phase == 0 : phase == 1;
        off = 0;
        for (int i = 0; i < N; i++, off += sizes[i - 1] + 1) {
            if (sends_first)
                OK(mpiv_isend(sb + off, sizes[i], me, 42, &sr[i]));
            else
                OK(mpiv_irecv(rb + off, sizes[i], me, 42, &rr[i]));
        }
        off = 0;
        for (int i = 0; i < N; i++, off += sizes[i - 1] + 1) {
            if (sends_first)
                OK(mpiv_irecv(rb + off, sizes[i], me, 42, &rr[i]));
            else
                OK(mpiv_isend(sb + off, sizes[i], me, 42, &sr[i]));
        }
        OK(mpiv_waitall(N, rr, st));
        OK(mpiv_waitall(N, sr, NULL));
        off = 0;
        for (int i = 0; i < N; i++) {
            ck_assert_int_eq(st[i].source, me);
            ck_assert_uint_eq(st[i].size, sizes[i]);
            check_data(rb + off, sizes[i], (unsigned)(me * 1000 + i));
            off += sizes[i] + 1;
        }
        memset(rb, 0, total);
    }
    free(sb);
    free(rb);
    OK(mpiv_barrier());
}
END_TEST

/* Collectives against a serial reference. */
START_TEST(collectives)
{
    for (int round = 0; round < 20; round++)
        OK(mpiv_barrier());
    size_t sizes[] = {0, 1, 100, eager, eager + 1, 3 * eager + 17};
    for (int root = 0; root < nranks; root++) {
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            size_t n = sizes[k];
            unsigned char *b = malloc(n + 1);
            unsigned seed = (unsigned)(root * 100 + (int)k);
            if (me == root)
                fill(b, n, seed);
            else
                memset(b, 0, n + 1);
            OK(mpiv_bcast(b, n, root));
            check_data(b, n, seed);
            free(b);
        }
    }
    size_t counts[] = {1, 7, 1000, 5000};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        size_t n = counts[c];
        int64_t *ai = malloc(n * 8), *ri = malloc(n * 8);
        double *ad = malloc(n * 8), *rd = malloc(n * 8);
        for (int op = MPIV_SUM; op <= MPIV_MAX; op++) {
            for (size_t i = 0; i < n; i++) {
                ai[i] = (int64_t)(me * 1000003 + (int)i) * ((me + (int)i) % 2 ? -1 : 1);
                ad[i] = (double)ai[i] * 0.5;
            }
            OK(mpiv_allreduce(ai, ri, n, MPIV_INT64, (mpiv_op_t)op));
            OK(mpiv_allreduce(ad, ad, n, MPIV_DOUBLE, (mpiv_op_t)op)); /* in place */
            for (size_t i = 0; i < n; i++) {
                int64_t ref = 0;
                for (int r = 0; r < nranks; r++) {
                    int64_t v = (int64_t)(r * 1000003 + (int)i) * ((r + (int)i) % 2 ? -1 : 1);
                    if (r == 0)
                        ref = v;
                    else if (op == MPIV_SUM)
                        ref += v;
                    else if (op == MPIV_MIN)
                        ref = v < ref ? v : ref;
                    else
                        ref = v > ref ? v : ref;
                }
                ck_assert_int_eq(ri[i], ref);
                ck_assert_double_eq_tol(ad[i], (double)ref * 0.5, 1e-6);
            }
        }
        free(ai);
        free(ri);
        free(ad);
        free(rd);
    }
}
END_TEST

/* 64 ULTs per rank send and receive through a pool that may hold only a
 * few packets (run again with MPIV_PACKETS=4): a ULT that finds no packet
 * waits for one instead of failing, and nothing deadlocks. */
static void *pool_sender(void *p)
{
    struct pp_arg *a = p;
    unsigned char b[512];
    for (int i = 0; i < a->rounds; i++) {
        fill(b, a->size, (unsigned)(a->id + i));
        if (mpiv_send(b, a->size, partner, a->id) != MPIV_SUCCESS)
            return (void *)1;
    }
    return NULL;
}

static void *pool_receiver(void *p)
{
    struct pp_arg *a = p;
    unsigned char b[512];
    for (int i = 0; i < a->rounds; i++) {
        mpiv_status_t st;
        if (mpiv_recv(b, sizeof b, partner, a->id, &st) != MPIV_SUCCESS || st.size != a->size)
            return (void *)2;
        if (data_mismatch(b, 0, a->size, (unsigned)(a->id + i)) != a->size)
            return (void *)3;
    }
    return NULL;
}

START_TEST(pool_pressure)
{
    if (partner < 0)
        return;
    enum { U = 64 };
    mpiv_ult_t u[U];
    struct pp_arg a[U];
    int sender = (me % 2) == 0;
    for (int i = 0; i < U; i++) {
        a[i] = (struct pp_arg){.id = 30000 + i, .rounds = 50, .size = (size_t)(i * 7) % 500};
        OK(mpiv_ult_spawn(sender ? pool_sender : pool_receiver, &a[i], MPIV_WORKER_ANY, &u[i]));
    }
    for (int i = 0; i < U; i++) {
        void *ret = (void *)-1;
        OK(mpiv_ult_join(u[i], &ret));
        ck_assert_msg(ret == NULL, "ULT %d failed with %ld", i, (long)ret);
    }
    OK(mpiv_barrier());
}
END_TEST

/* Every rank starts MPIv and runs the same cases in step (CK_NOFORK). */
static int p2p_init(int *argc, char ***argv)
{
    if (test_mpiv_init(argc, argv))
        return 1;
    me = mpiv_rank();
    nranks = mpiv_size();
    partner = (me ^ 1) < nranks ? (me ^ 1) : -1;
    /* the eager limit is a packet's payload: its size less the 32-byte header */
    const char *ps = getenv("MPIV_PACKET_SIZE");
    eager = (ps ? (size_t)atol(ps) : 8192) - 32;
    init_mm_cases();
    return 0;
}

static Suite *p2p_suite(void)
{
    Suite *s = suite_create("p2p");
    TCase *tc = tcase_create("p2p");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, progress_as_configured);
    tcase_add_test(tc, libfabric_only_for_ofi);
    tcase_add_test(tc, bad_arguments);
    tcase_add_test(tc, yielding_ults_do_not_starve_the_network);
    tcase_add_test(tc, all_sizes_both_orders);
    tcase_add_loop_test(tc, buffer_size_mismatch, 0, 8);
    tcase_add_test(tc, same_tag_in_order);
    tcase_add_test(tc, unexpected_flood);
    tcase_add_test(tc, pthread_callers);
    tcase_add_test(tc, ten_thousand_ults_pingpong);
    tcase_add_test(tc, collectives);
    tcase_add_loop_test(tc, own_rank_in_order, 0, 2);
    suite_add_tcase(s, tc);
    TCase *sr = tcase_create("spawn_recv");
    tcase_set_timeout(sr, 300);
    tcase_add_test(sr, spawn_recv);
    tcase_add_test(sr, spawn_recv_rounds);
    suite_add_tcase(s, sr);
    TCase *pool = tcase_create("pool");
    tcase_set_timeout(pool, 300);
    tcase_add_test(pool, pool_pressure);
    tcase_add_test(pool, unexpected_flood);
    tcase_add_test(pool, unexpected_rendezvous_flood);
    /* with 4 packets, messages to oneself take the heap-copy path too */
    tcase_add_loop_test(pool, own_rank_in_order, 0, 2);
    suite_add_tcase(s, pool);
    return s;
}

/* Rank 0 prints Check's results for the job. */
static bool p2p_quiet(void) { return me != 0; }


CHECK_MAIN(.suite = p2p_suite, .fork = CK_NOFORK, .init = p2p_init, .quiet = p2p_quiet,
           .fini = test_mpiv_fini);
