/*
 * Communicators, run under mpiv_run at 1 to 4 ranks (every rank runs the
 * same cases in step, CK_NOFORK): isolation of matching between
 * communicators (the same source and tag on two communicators never
 * cross), split by parity with reversed keys, dup / split / free
 * lifetimes and the limit on how many may exist, collectives and
 * creations on different communicators at once from different ULTs, and a
 * second caller in a collective on one communicator reported as an error.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "common/test_mpiv.h"
#include "mpiv.h"
#include "proto/comm.h"

static int me, P;

/* The same (source, tag) on the world and on a dup: each receive gets its
 * own communicator's message, whichever order they were sent and posted
 * in. Without separate contexts the first receive would take the first
 * message sent. */
START_TEST(dup_isolates_matching)
{
    mpiv_comm_t d;
    OK(mpiv_comm_dup(MPIV_COMM_WORLD, &d));
    int r, n;
    OK(mpiv_comm_rank(d, &r));
    OK(mpiv_comm_size(d, &n));
    ck_assert_int_eq(r, me);
    ck_assert_int_eq(n, P);
    int to = (me + 1) % P, from = (me - 1 + P) % P;
    for (int order = 0; order < 2; order++) {
        int64_t vw = 1000 + me, vd = 2000 + me, gw = -1, gd = -1;
        mpiv_request_t rw, rd;
        mpiv_status_t sw, sd;
        /* post the dup's receive first: it must not take the world's message */
        if (order == 0) {
            OK(mpiv_irecv_comm(&gd, sizeof gd, from, 7, d, &rd));
            OK(mpiv_irecv(&gw, sizeof gw, from, 7, &rw));
        }
        OK(mpiv_send(&vw, sizeof vw, to, 7));
        OK(mpiv_send_comm(&vd, sizeof vd, to, 7, d));
        if (order == 1) {
            /* both messages wait unexpected: the dup's receive first */
            OK(mpiv_barrier());
            OK(mpiv_irecv_comm(&gd, sizeof gd, from, 7, d, &rd));
            OK(mpiv_irecv(&gw, sizeof gw, from, 7, &rw));
        }
        OK(mpiv_wait(&rd, &sd));
        OK(mpiv_wait(&rw, &sw));
        ck_assert_int_eq(gw, 1000 + from);
        ck_assert_int_eq(gd, 2000 + from);
        ck_assert_int_eq(sd.source, from);
        ck_assert_int_eq(sd.tag, 7);
        OK(mpiv_barrier());
    }
    /* collectives of the dup and user messages of the dup do not mix
     * either: user messages with every small tag wait unexpected while
     * the dup runs collectives (whose tags are small numbers too) */
    int64_t x = me, sum = 0;
    int64_t v[64], g[64];
    mpiv_request_t sr[64];
    for (int t = 0; t < 64; t++) {
        v[t] = -(int64_t)t;
        OK(mpiv_isend_comm(&v[t], sizeof v[t], to, t, d, &sr[t]));
    }
    for (int k = 0; k < 3; k++) {
        OK(mpiv_allreduce_comm(&x, &sum, 1, MPIV_INT64, MPIV_SUM, d));
        ck_assert_int_eq(sum, (int64_t)P * (P - 1) / 2);
        int64_t b = k == 0 ? 99 : 0;
        OK(mpiv_bcast_comm(&b, 1, MPIV_INT64, 0, d));
        ck_assert_int_eq(b, k == 0 ? 99 : 0);
        OK(mpiv_barrier_comm(d));
    }
    for (int t = 0; t < 64; t++) {
        OK(mpiv_recv_comm(&g[t], sizeof g[t], from, t, d, NULL));
        ck_assert_int_eq(g[t], -(int64_t)t);
    }
    OK(mpiv_waitall(64, sr, NULL));
    OK(mpiv_barrier_comm(d));
    OK(mpiv_comm_free(&d));
    ck_assert_ptr_null(d);
}
END_TEST

/* Split by parity with keys reversed: ranks in each half are ordered by
 * descending world rank; messages on the halves and on the world with one
 * tag stay apart, and status.source is a rank of the half. */
START_TEST(split_parity_reversed)
{
    mpiv_comm_t h;
    OK(mpiv_comm_split(MPIV_COMM_WORLD, me % 2, -me, &h));
    int r, n;
    OK(mpiv_comm_rank(h, &r));
    OK(mpiv_comm_size(h, &n));
    int members = (P - me % 2 + 1) / 2; /* world ranks of my parity */
    ck_assert_int_eq(n, members);
    /* the highest world rank of my parity is rank 0 */
    int top = (P - 1) % 2 == me % 2 ? P - 1 : P - 2;
    ck_assert_int_eq(r, (top - me) / 2);
    /* ring in the half and in the world, same tag, dup receive first */
    int to = (r + 1) % n, from = (r - 1 + n) % n;
    int wto = (me + 1) % P, wfrom = (me - 1 + P) % P;
    int64_t vh = 5000 + me, vw = 6000 + me, gh = -1, gw = -1;
    mpiv_request_t rh, rw, sh;
    mpiv_status_t st;
    OK(mpiv_irecv_comm(&gh, sizeof gh, from, 3, h, &rh));
    OK(mpiv_irecv(&gw, sizeof gw, wfrom, 3, &rw));
    OK(mpiv_send(&vw, sizeof vw, wto, 3));
    OK(mpiv_isend_comm(&vh, sizeof vh, to, 3, h, &sh));
    OK(mpiv_wait(&rh, &st));
    OK(mpiv_wait(&rw, NULL));
    OK(mpiv_wait(&sh, NULL));
    int from_world = top - 2 * from; /* world rank of half rank `from` */
    ck_assert_int_eq(gh, 5000 + from_world);
    ck_assert_int_eq(gw, 6000 + wfrom);
    ck_assert_int_eq(st.source, from);
    /* ranks outside the half are refused */
    ck_assert_int_eq(mpiv_send_comm(&vh, sizeof vh, n, 3, h), MPIV_ERR_RANK);
    /* a collective of the half sees only the half */
    int64_t x = me, sum = 0;
    OK(mpiv_allreduce_comm(&x, &sum, 1, MPIV_INT64, MPIV_SUM, h));
    int64_t want = 0;
    for (int w = me % 2; w < P; w += 2)
        want += w;
    ck_assert_int_eq(sum, want);
    /* gather at half rank 0 is in half order: descending world ranks */
    int64_t all[64];
    OK(mpiv_gather(&x, all, 1, MPIV_INT64, 0, h));
    if (r == 0)
        for (int k = 0; k < n; k++)
            ck_assert_int_eq(all[k], top - 2 * k);
    OK(mpiv_comm_free(&h));
    OK(mpiv_barrier());
}
END_TEST

/* Wildcard receives on a split communicator: half rank 0 takes one
 * message from every other member with MPIV_ANY_SOURCE and MPIV_ANY_TAG;
 * each status names the sender's rank in the half (not its world rank)
 * and its tag, and a same-tag message on the world, sent to the same rank
 * first, never matches. Without the wildcards passed through, the
 * receives fail with MPIV_ERR_RANK. */
START_TEST(wildcards_on_a_split)
{
    mpiv_comm_t h;
    OK(mpiv_comm_split(MPIV_COMM_WORLD, me % 2, -me, &h));
    int r, n;
    OK(mpiv_comm_rank(h, &r));
    OK(mpiv_comm_size(h, &n));
    int top = (P - 1) % 2 == me % 2 ? P - 1 : P - 2;
    int head = top; /* world rank of half rank 0 */
    int64_t v = 7000 + r;
    if (r != 0) {
        /* a decoy on the world, same tag, to the same rank, sent first */
        int64_t decoy = -1;
        OK(mpiv_send(&decoy, sizeof decoy, head, 40 + r));
        OK(mpiv_send_comm(&v, sizeof v, 0, 40 + r, h));
    } else {
        int seen[64] = {0};
        for (int k = 1; k < n; k++) {
            int64_t got = 0;
            mpiv_status_t st;
            OK(mpiv_recv_comm(&got, sizeof got, MPIV_ANY_SOURCE, MPIV_ANY_TAG, h, &st));
            ck_assert_int_ge(st.source, 1);
            ck_assert_int_lt(st.source, n);
            ck_assert_int_eq(st.tag, 40 + st.source);
            ck_assert_int_eq(got, 7000 + st.source);
            ck_assert_int_eq(seen[st.source]++, 0);
        }
        for (int k = 1; k < n; k++) { /* the decoys, from world ranks */
            int64_t got = 0;
            OK(mpiv_recv(&got, sizeof got, top - 2 * k, 40 + k, NULL));
            ck_assert_int_eq(got, -1);
        }
    }
    OK(mpiv_comm_free(&h));
    OK(mpiv_barrier());
}
END_TEST

START_TEST(lifetimes)
{
    /* MPIV_UNDEFINED gives no communicator, the others get one */
    mpiv_comm_t s = (mpiv_comm_t)0x1;
    int color = me == 0 ? MPIV_UNDEFINED : 1;
    OK(mpiv_comm_split(MPIV_COMM_WORLD, color, 0, &s));
    if (me == 0) {
        ck_assert_ptr_null(s);
    } else {
        int n;
        OK(mpiv_comm_size(s, &n));
        ck_assert_int_eq(n, P - 1);
    }
    /* dup of a dup, split of a split, freed in another order than made */
    mpiv_comm_t a, b, c;
    OK(mpiv_comm_dup(MPIV_COMM_WORLD, &a));
    OK(mpiv_comm_dup(a, &b));
    OK(mpiv_comm_split(b, me % 2, me, &c));
    OK(mpiv_comm_free(&a));
    OK(mpiv_barrier_comm(b)); /* b lives on without its parent */
    OK(mpiv_barrier_comm(c));
    mpiv_comm_t stale = c;
    OK(mpiv_comm_free(&c));
    OK(mpiv_comm_free(&b));
    OK(mpiv_comm_free(&s)); /* MPIV_COMM_NULL on rank 0: a no-op */
    /* misuse is refused with MPIV_ERR_ARG, without a hang */
    ck_assert_int_eq(mpiv_barrier_comm(stale), MPIV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "freed"));
    ck_assert_int_eq(mpiv_comm_free(&stale), MPIV_ERR_ARG);
    mpiv_comm_t w = MPIV_COMM_WORLD;
    ck_assert_int_eq(mpiv_comm_free(&w), MPIV_ERR_ARG);
    int x;
    ck_assert_int_eq(mpiv_comm_rank(MPIV_COMM_NULL, &x), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_comm_rank((mpiv_comm_t)&x, &x), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_comm_split(MPIV_COMM_WORLD, -5, 0, &s), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_comm_dup(MPIV_COMM_WORLD, NULL), MPIV_ERR_ARG);
    OK(mpiv_barrier());
}
END_TEST

/* Dups until the limit: every rank gets MPIV_ERR_NO_RESOURCES at the same
 * point (MPIV_COMM_MAX - 1 besides the world), with a detail naming the
 * limit; after freeing them all, a dup works again. */
START_TEST(limit)
{
    static mpiv_comm_t made[MPIV_COMM_MAX];
    int n = 0, rc;
    while ((rc = mpiv_comm_dup(MPIV_COMM_WORLD, &made[n])) == MPIV_SUCCESS) {
        n++;
        ck_assert_int_lt(n, MPIV_COMM_MAX);
    }
    ck_assert_int_eq(rc, MPIV_ERR_NO_RESOURCES);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "MPIV_COMM_MAX"));
    ck_assert_int_eq(n, MPIV_COMM_MAX - 1);
    /* every one of them works, and they are all different */
    int64_t one = 1, sum = 0;
    OK(mpiv_allreduce_comm(&one, &sum, 1, MPIV_INT64, MPIV_SUM, made[n - 1]));
    ck_assert_int_eq(sum, P);
    for (int i = 0; i < n; i++)
        OK(mpiv_comm_free(&made[i]));
    mpiv_comm_t d;
    OK(mpiv_comm_dup(MPIV_COMM_WORLD, &d));
    OK(mpiv_comm_free(&d));
}
END_TEST

/* --- concurrency ----------------------------------------------------------------- */

#define K 4
#define ROUNDS 40

struct job {
    mpiv_comm_t comm;
    int idx;
};

static void *coll_loop(void *arg)
{
    struct job *j = arg;
    int64_t buf[300], out[300];
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < 300; i++)
            buf[i] = me * 1000 + j->idx * 100 + round + i;
        if (mpiv_allreduce_comm(buf, out, 300, MPIV_INT64, MPIV_SUM, j->comm))
            return (void *)1;
        for (int i = 0; i < 300; i++)
            if (out[i] != (int64_t)P * (j->idx * 100 + round + i) + 1000 * (int64_t)P * (P - 1) / 2)
                return (void *)2;
        int64_t b = round * 10 + j->idx;
        if (mpiv_bcast_comm(&b, 1, MPIV_INT64, round % P, j->comm) || b != round * 10 + j->idx)
            return (void *)3;
        if (mpiv_barrier_comm(j->comm))
            return (void *)4;
    }
    return NULL;
}

/* K communicators running collectives at the same time, the first half
 * from one ULT each, the second half from one plain pthread each. */
START_TEST(concurrent_collectives)
{
    mpiv_comm_t c[K];
    struct job jobs[K];
    mpiv_ult_t u[K];
    pthread_t t[K];
    for (int i = 0; i < K; i++)
        OK(mpiv_comm_dup(MPIV_COMM_WORLD, &c[i]));
    for (int i = 0; i < K; i++) {
        jobs[i] = (struct job){.comm = c[i], .idx = i};
        if (i < K / 2)
            OK(mpiv_ult_spawn(coll_loop, &jobs[i], MPIV_WORKER_ANY, &u[i]));
        else
            ck_assert_int_eq(pthread_create(&t[i], NULL, coll_loop, &jobs[i]), 0);
    }
    for (int i = 0; i < K; i++) {
        void *ret;
        if (i < K / 2)
            OK(mpiv_ult_join(u[i], &ret));
        else
            ck_assert_int_eq(pthread_join(t[i], &ret), 0);
        ck_assert_msg(ret == NULL, "%s %d failed at step %ld", i < K / 2 ? "ULT" : "pthread",
                      i, (long)(intptr_t)ret);
    }
    for (int i = 0; i < K; i++)
        OK(mpiv_comm_free(&c[i]));
    OK(mpiv_barrier());
}
END_TEST

static void *dup_loop(void *arg)
{
    struct job *j = arg;
    for (int round = 0; round < 10; round++) {
        mpiv_comm_t d;
        if (mpiv_comm_dup(j->comm, &d))
            return (void *)1;
        int64_t x = 1, s = 0;
        if (mpiv_allreduce_comm(&x, &s, 1, MPIV_INT64, MPIV_SUM, d) || s != P)
            return (void *)2;
        if (mpiv_comm_free(&d))
            return (void *)3;
    }
    return NULL;
}

/* Creations on K different parents at once compete for the id bitmap: all
 * complete, and their communicators work. */
START_TEST(concurrent_creations)
{
    mpiv_comm_t c[K];
    struct job jobs[K];
    mpiv_ult_t u[K];
    for (int i = 0; i < K; i++)
        OK(mpiv_comm_dup(MPIV_COMM_WORLD, &c[i]));
    for (int i = 0; i < K; i++) {
        jobs[i] = (struct job){.comm = c[i], .idx = i};
        OK(mpiv_ult_spawn(dup_loop, &jobs[i], MPIV_WORKER_ANY, &u[i]));
    }
    for (int i = 0; i < K; i++) {
        void *ret;
        OK(mpiv_ult_join(u[i], &ret));
        ck_assert_msg(ret == NULL, "ULT %d failed at step %ld: %s", i, (long)(intptr_t)ret,
                      mpiv_error_detail());
    }
    for (int i = 0; i < K; i++)
        OK(mpiv_comm_free(&c[i]));
    OK(mpiv_barrier());
}
END_TEST

static mpiv_comm_t shared;
static void *barrier_on_shared(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)mpiv_barrier_comm(shared);
}

/* A ULT sits in a barrier on `shared` (rank 0 has not entered it yet);
 * another caller on the same communicator gets MPIV_ERR_ARG at once. */
START_TEST(second_caller_reported)
{
    OK(mpiv_comm_dup(MPIV_COMM_WORLD, &shared));
    if (P > 1 && me != 0) {
        mpiv_ult_t u;
        OK(mpiv_ult_spawn(barrier_on_shared, NULL, MPIV_WORKER_ANY, &u));
        /* wait until it is inside (it cannot leave before rank 0 enters) */
        while (!atomic_load(&shared->busy))
            mpiv_ult_yield();
        ck_assert_int_eq(mpiv_barrier_comm(shared), MPIV_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "already in a collective"));
        int64_t x = 0;
        ck_assert_int_eq(mpiv_allreduce_comm(&x, &x, 1, MPIV_INT64, MPIV_SUM, shared),
                         MPIV_ERR_ARG);
        mpiv_comm_t d;
        ck_assert_int_eq(mpiv_comm_dup(shared, &d), MPIV_ERR_ARG);
        ck_assert_int_eq(mpiv_comm_free(&shared), MPIV_ERR_ARG);
        OK(mpiv_barrier()); /* the world is free: rank 0 now enters */
        void *ret;
        OK(mpiv_ult_join(u, &ret));
        ck_assert_int_eq((int)(intptr_t)ret, MPIV_SUCCESS);
    } else {
        OK(mpiv_barrier());
        OK(mpiv_barrier_comm(shared));
    }
    OK(mpiv_comm_free(&shared));
    OK(mpiv_barrier());
}
END_TEST

static int comm_init(int *argc, char ***argv)
{
    if (test_mpiv_init(argc, argv))
        return 1;
    me = mpiv_rank();
    P = mpiv_size();
    return 0;
}

static Suite *comm_suite(void)
{
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("comm");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, dup_isolates_matching);
    tcase_add_test(tc, split_parity_reversed);
    tcase_add_test(tc, wildcards_on_a_split);
    tcase_add_test(tc, lifetimes);
    tcase_add_test(tc, concurrent_collectives);
    tcase_add_test(tc, concurrent_creations);
    tcase_add_test(tc, second_caller_reported);
    tcase_add_test(tc, limit);
    suite_add_tcase(s, tc);
    return s;
}

static bool comm_quiet(void) { return me != 0; }


CHECK_MAIN(.suite = comm_suite, .fork = CK_NOFORK, .init = comm_init, .quiet = comm_quiet,
           .fini = test_mpiv_fini);
