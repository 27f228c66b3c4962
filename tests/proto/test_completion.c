/*
 * The completion calls of mpiv.h (waitany, testany, waitsome, testall),
 * cancel, sendrecv and the synchronous send, under mpiv_run with 2 and 4
 * ranks; ranks pair up as (0,1), (2,3).
 */
#include <check.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "common/test_mpiv.h"
#include "mpiv.h"

static int me, nranks, partner;

/* All MPIV_REQUEST_NULL: MPIV_UNDEFINED everywhere, as MPI says. */
START_TEST(all_null_requests)
{
    mpiv_request_t r[3] = {MPIV_REQUEST_NULL, MPIV_REQUEST_NULL, MPIV_REQUEST_NULL};
    int index = 5, flag = 0, out = 5, idx[3];
    mpiv_status_t st;
    OK(mpiv_waitany(3, r, &index, &st));
    ck_assert_int_eq(index, MPIV_UNDEFINED);
    OK(mpiv_testany(3, r, &index, &flag, &st));
    ck_assert_int_eq(flag, 1);
    ck_assert_int_eq(index, MPIV_UNDEFINED);
    OK(mpiv_waitsome(3, r, &out, idx, NULL));
    ck_assert_int_eq(out, MPIV_UNDEFINED);
    flag = 0;
    OK(mpiv_testall(3, r, &flag, NULL));
    ck_assert_int_eq(flag, 1);
    OK(mpiv_waitany(0, NULL, &index, NULL));
    ck_assert_int_eq(index, MPIV_UNDEFINED);
    ck_assert_int_eq(mpiv_waitany(-1, r, &index, NULL), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_waitany(2, NULL, &index, NULL), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_testany(3, r, NULL, &flag, NULL), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_waitsome(3, r, &out, NULL, NULL), MPIV_ERR_ARG);
}
END_TEST

/* Receives of tags 0..3 from the partner; it sends them in the order the
 * receiver asks for, one at a time, so each call sees a known set done. */
START_TEST(any_some_all)
{
    if (partner < 0)
        return;
    int v[4] = {0};
    if (me % 2) {
        /* tag 2 first, then 0 and 3 together, then 1 */
        int order[4] = {2, 0, 3, 1};
        for (int i = 0; i < 4; i++) {
            int x = 100 + order[i];
            if (i == 1 || i == 3) {
                int go;
                OK(mpiv_recv(&go, sizeof go, partner, 50, NULL));
            }
            OK(mpiv_send(&x, sizeof x, partner, order[i]));
        }
        OK(mpiv_barrier());
        return;
    }
    mpiv_request_t r[5];
    for (int i = 0; i < 4; i++)
        OK(mpiv_irecv(&v[i], sizeof v[i], partner, i, &r[i]));
    r[4] = MPIV_REQUEST_NULL;
    int flag = 1, index = -1;
    mpiv_status_t st;
    /* waitany: tag 2 */
    OK(mpiv_waitany(5, r, &index, &st));
    ck_assert_int_eq(index, 2);
    ck_assert_int_eq(st.tag, 2);
    ck_assert_int_eq(v[2], 102);
    ck_assert_ptr_null(r[2]);
    /* nothing else may complete before the go */
    OK(mpiv_testall(5, r, &flag, NULL));
    ck_assert_int_eq(flag, 0);
    ck_assert_ptr_nonnull(r[0]);
    OK(mpiv_testany(5, r, &index, &flag, &st));
    ck_assert_int_eq(flag, 0);
    ck_assert_int_eq(index, MPIV_UNDEFINED);
    int go = 1;
    OK(mpiv_send(&go, sizeof go, partner, 50));
    /* waitsome until both 0 and 3 came */
    int got = 0, idx[5];
    mpiv_status_t sts[5];
    while (got < 2) {
        int out = 0;
        OK(mpiv_waitsome(5, r, &out, idx, sts));
        ck_assert_int_ge(out, 1);
        for (int k = 0; k < out; k++) {
            ck_assert_msg(idx[k] == 0 || idx[k] == 3, "waitsome gave index %d", idx[k]);
            ck_assert_int_eq(sts[k].tag, idx[k]);
            ck_assert_ptr_null(r[idx[k]]);
        }
        got += out;
    }
    ck_assert_int_eq(got, 2);
    ck_assert_int_eq(v[0], 100);
    ck_assert_int_eq(v[3], 103);
    OK(mpiv_send(&go, sizeof go, partner, 50));
    /* testall until tag 1 came: then all are done */
    flag = 0;
    while (!flag)
        OK(mpiv_testall(5, r, &flag, sts));
    ck_assert_int_eq(v[1], 101);
    ck_assert_int_eq(sts[1].tag, 1);
    for (int i = 0; i < 5; i++)
        ck_assert_ptr_null(r[i]);
    OK(mpiv_barrier());
}
END_TEST

/* waitall fills in every status (an empty one for MPIV_REQUEST_NULL, a
 * communicator's receive in that communicator's ranks), returns the first
 * error, and leaves every request MPIV_REQUEST_NULL; all to ourselves, so
 * each request's outcome is known. */
START_TEST(waitall_statuses_and_errors)
{
    mpiv_comm_t rev; /* ranks in reverse: a communicator rank is not the world's */
    OK(mpiv_comm_split(MPIV_COMM_WORLD, 0, nranks - me, &rev));
    int crank = -1;
    OK(mpiv_comm_rank(rev, &crank));
    ck_assert_int_eq(crank, nranks - 1 - me);
    int a = 11, b[2] = {21, 22}, c = 31, ra = 0, rb = 0, rc = 0;
    mpiv_request_t r[7];
    OK(mpiv_irecv(&ra, sizeof ra, me, 80, &r[0]));
    r[1] = MPIV_REQUEST_NULL;
    OK(mpiv_irecv(&rb, sizeof rb, me, 81, &r[2])); /* b does not fit */
    OK(mpiv_irecv_comm(&rc, sizeof rc, crank, 82, rev, &r[3]));
    OK(mpiv_isend(&a, sizeof a, me, 80, &r[4]));
    OK(mpiv_isend(b, sizeof b, me, 81, &r[5]));
    OK(mpiv_isend_comm(&c, sizeof c, crank, 82, rev, &r[6]));
    mpiv_status_t st[7];
    memset(st, 0x5a, sizeof st);
    ck_assert_int_eq(mpiv_waitall(7, r, st), MPIV_ERR_TRUNCATE);
    for (int i = 0; i < 7; i++)
        ck_assert_ptr_null(r[i]);
    ck_assert_int_eq(ra, 11);
    ck_assert_int_eq(st[0].source, me);
    ck_assert_int_eq(st[0].tag, 80);
    ck_assert_uint_eq(st[0].size, sizeof ra);
    ck_assert_int_eq(st[0].error, MPIV_SUCCESS);
    ck_assert_int_eq(st[1].source, -1);
    ck_assert_int_eq(st[1].tag, -1);
    ck_assert_uint_eq(st[1].size, 0);
    ck_assert_int_eq(st[1].error, MPIV_SUCCESS);
    ck_assert_int_eq(st[2].error, MPIV_ERR_TRUNCATE);
    ck_assert_uint_eq(st[2].size, sizeof b); /* the message's real size */
    ck_assert_int_eq(rc, 31);
    ck_assert_int_eq(st[3].source, crank);
    ck_assert_int_eq(st[3].tag, 82);
    ck_assert_int_eq(st[3].error, MPIV_SUCCESS);
    for (int i = 4; i < 7; i++)
        ck_assert_int_eq(st[i].error, MPIV_SUCCESS);
    ck_assert_uint_eq(st[5].size, sizeof b);
    ck_assert_int_eq(st[6].source, crank);
    /* every one waited on: nothing is left to complete */
    OK(mpiv_waitall(7, r, NULL));
    OK(mpiv_comm_free(&rev));
}
END_TEST

/* Cancel: a receive nobody sends to is taken back, exact or wildcard; a
 * matched one is not; a send cannot be cancelled. */
START_TEST(cancel)
{
    int x = 0;
    mpiv_request_t r;
    int cancelled = 0;
    int srcs[3] = {me, MPIV_ANY_SOURCE, me};
    int tags[3] = {777, 777, MPIV_ANY_TAG};
    for (int i = 0; i < 3; i++) {
        OK(mpiv_irecv(&x, sizeof x, srcs[i], tags[i], &r));
        OK(mpiv_cancel(&r, &cancelled));
        ck_assert_int_eq(cancelled, 1);
        ck_assert_ptr_null(r);
    }
    /* the cancelled ones are gone: a message to ourselves goes to the
     * next receive */
    int y = 41;
    mpiv_request_t s;
    OK(mpiv_irecv(&x, sizeof x, me, 777, &r));
    OK(mpiv_isend(&y, sizeof y, me, 777, &s));
    OK(mpiv_cancel(&r, &cancelled));
    ck_assert_int_eq(cancelled, 0);
    OK(mpiv_wait(&r, NULL));
    ck_assert_int_eq(x, 41);
    OK(mpiv_wait(&s, NULL));
    /* a send */
    size_t n = 1 << 20;
    char *big = calloc(1, n);
    OK(mpiv_isend(big, n, me, 778, &s));
    ck_assert_int_eq(mpiv_cancel(&s, &cancelled), MPIV_ERR_NOT_IMPLEMENTED);
    ck_assert_int_eq(cancelled, 0);
    char *in = malloc(n);
    OK(mpiv_recv(in, n, me, 778, NULL));
    OK(mpiv_wait(&s, NULL));
    free(big);
    free(in);
    OK(mpiv_cancel(&r, &cancelled)); /* MPIV_REQUEST_NULL */
    ck_assert_int_eq(cancelled, 0);
}
END_TEST

/* sendrecv around a ring (every rank at once: no deadlock), with a
 * wildcard source. */
START_TEST(sendrecv_ring)
{
    int right = (me + 1) % nranks, left = (me - 1 + nranks) % nranks;
    for (int round = 0; round < 3; round++) {
        size_t n = round == 2 ? 200000 : 8;
        int *out = malloc(n), *in = malloc(n);
        out[0] = me * 10 + round;
        mpiv_status_t st;
        OK(mpiv_sendrecv(out, n, right, 60 + round, in, n, round ? MPIV_ANY_SOURCE : left,
                         60 + round, &st));
        ck_assert_int_eq(in[0], left * 10 + round);
        ck_assert_int_eq(st.source, left);
        ck_assert_uint_eq(st.size, n);
        free(out);
        free(in);
    }
    OK(mpiv_barrier());
}
END_TEST

/* A synchronous send does not complete before its receive is posted, even
 * a small one that would go eagerly. */
START_TEST(ssend_waits_for_the_receive)
{
    if (partner < 0)
        return;
    size_t sizes[3] = {0, 8, 100000};
    for (int i = 0; i < 3; i++) {
        int *b = calloc(1, sizes[i] + 4);
        if (me % 2) {
            mpiv_request_t r;
            b[0] = 5;
            OK(mpiv_issend(b, sizes[i], partner, 70, &r));
            int flag = 0;
            for (int k = 0; k < 2000 && !flag; k++)
                OK(mpiv_test(&r, &flag, NULL));
            ck_assert_msg(!flag, "a synchronous send of %zu bytes completed before its "
                          "receive was posted", sizes[i]);
            OK(mpiv_barrier()); /* now the receiver posts */
            OK(mpiv_wait(&r, NULL));
            OK(mpiv_ssend(b, sizes[i], partner, 71));
        } else {
            OK(mpiv_barrier());
            mpiv_status_t st;
            OK(mpiv_recv(b, sizes[i], partner, 70, &st));
            ck_assert_uint_eq(st.size, sizes[i]);
            if (sizes[i])
                ck_assert_int_eq(b[0], 5);
            OK(mpiv_recv(b, sizes[i], MPIV_ANY_SOURCE, 71, NULL));
        }
        free(b);
    }
    OK(mpiv_barrier());
}
END_TEST

/* --- the request cache (src/proto/req.c, C1-C4) ------------------------ */

/* A request returned by a wait is the next one the same pthread gets (the
 * cache is in use at all). */
START_TEST(a_freed_request_is_reused)
{
    if (partner < 0)
        return;
    int out = me, in = -1;
    mpiv_request_t r, again;
    OK(mpiv_irecv(&in, sizeof in, partner, 80, &r));
    mpiv_request_t seen = r;
    OK(mpiv_send(&out, sizeof out, partner, 80));
    OK(mpiv_wait(&r, NULL));
    ck_assert_int_eq(in, partner);
    OK(mpiv_irecv(&in, sizeof in, partner, 81, &again));
    ck_assert_ptr_eq(again, seen);
    OK(mpiv_send(&out, sizeof out, partner, 81));
    OK(mpiv_wait(&again, NULL));
    OK(mpiv_barrier());
}
END_TEST

/* C1: requests taken on one pthread are completed and freed on another,
 * round after round, while every pthread also takes its own: each ends
 * in the list of the pthread that freed it, and no list is shared (TSan
 * sees a race if one were). The payloads say which round and thread. */
enum { RC_THREADS = 4, RC_WINDOW = 64, RC_ROUNDS = 40 };
static mpiv_request_t rc_handed[RC_THREADS][RC_WINDOW];
static int rc_in[RC_THREADS][RC_WINDOW];
static pthread_barrier_t rc_bar;
static int rc_bad;

static void *rc_thread(void *arg)
{
    int t = (int)(intptr_t)arg, from = (t + RC_THREADS - 1) % RC_THREADS;
    int out[RC_WINDOW];
    for (int round = 0; round < RC_ROUNDS; round++) {
        mpiv_request_t sends[RC_WINDOW];
        for (int i = 0; i < RC_WINDOW; i++) {
            int tag = 1000 + t * RC_WINDOW + i;
            out[i] = round * 100000 + t * 1000 + i;
            if (mpiv_irecv(&rc_in[t][i], sizeof(int), partner, tag, &rc_handed[t][i]) ||
                mpiv_isend(&out[i], sizeof(int), partner, tag, &sends[i]))
                __atomic_store_n(&rc_bad, 1, __ATOMIC_RELAXED);
        }
        if (mpiv_waitall(RC_WINDOW, sends, NULL))
            __atomic_store_n(&rc_bad, 1, __ATOMIC_RELAXED);
        pthread_barrier_wait(&rc_bar); /* every thread's receives posted */
        for (int i = 0; i < RC_WINDOW; i++) {
            if (mpiv_wait(&rc_handed[from][i], NULL) ||
                rc_in[from][i] != round * 100000 + from * 1000 + i)
                __atomic_store_n(&rc_bad, 1, __ATOMIC_RELAXED);
        }
        pthread_barrier_wait(&rc_bar); /* their buffers are free again */
    }
    return NULL;
}

START_TEST(requests_change_pthreads)
{
    if (partner < 0)
        return;
    pthread_t th[RC_THREADS];
    rc_bad = 0;
    pthread_barrier_init(&rc_bar, NULL, RC_THREADS);
    for (int t = 0; t < RC_THREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, rc_thread, (void *)(intptr_t)t), 0);
    for (int t = 0; t < RC_THREADS; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&rc_bar);
    ck_assert_msg(!rc_bad, "a request handed between pthreads failed or carried the wrong "
                           "payload");
    OK(mpiv_barrier());
}
END_TEST

/* C4: pthreads that fill their cache and exit give it back. 48 of them
 * would leave about 48 x 256 requests (2 MB and more) behind if not. */
enum { LP_THREADS = 48, LP_WINDOW = 300 };

static void *lp_thread(void *arg)
{
    int *bad = arg;
    static _Thread_local int in[LP_WINDOW], out[LP_WINDOW];
    mpiv_request_t r[2 * LP_WINDOW];
    for (int i = 0; i < LP_WINDOW; i++) {
        out[i] = i;
        if (mpiv_irecv(&in[i], sizeof(int), partner, 2000 + i, &r[i]) ||
            mpiv_isend(&out[i], sizeof(int), partner, 2000 + i, &r[LP_WINDOW + i]))
            *bad = 1;
    }
    if (mpiv_waitall(2 * LP_WINDOW, r, NULL))
        *bad = 1;
    for (int i = 0; i < LP_WINDOW; i++)
        if (in[i] != i)
            *bad = 1;
    return NULL;
}

static size_t heap_in_use(void) { return mallinfo2().uordblks; }

START_TEST(exiting_pthreads_return_their_requests)
{
    if (partner < 0)
        return;
    int bad = 0;
    size_t before = 0;
    for (int t = 0; t < LP_THREADS; t++) {
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, lp_thread, &bad), 0);
        pthread_join(th, NULL);
        OK(mpiv_barrier()); /* the partner's thread is done with the tags */
        if (t == 1)
            before = heap_in_use(); /* after the pool and tables grew */
    }
    ck_assert_msg(!bad, "a short-lived pthread's messages failed");
    size_t after = heap_in_use();
    /* mallinfo2 reads 0 under a sanitizer's malloc; LeakSanitizer checks
     * the same there */
    ck_assert_msg(after < before + ((size_t)1 << 20),
                  "the heap grew by %zu bytes over %d pthreads that exited", after - before,
                  LP_THREADS - 2);
    OK(mpiv_barrier());
}
END_TEST

static int cp_init(int *argc, char ***argv)
{
    if (test_mpiv_init(argc, argv))
        return 1;
    me = mpiv_rank();
    nranks = mpiv_size();
    partner = (me ^ 1) < nranks ? (me ^ 1) : -1;
    return 0;
}

static Suite *cp_suite(void)
{
    Suite *s = suite_create("completion");
    TCase *tc = tcase_create("completion");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, all_null_requests);
    tcase_add_test(tc, any_some_all);
    tcase_add_test(tc, waitall_statuses_and_errors);
    tcase_add_test(tc, cancel);
    tcase_add_test(tc, sendrecv_ring);
    tcase_add_test(tc, ssend_waits_for_the_receive);
    tcase_add_test(tc, a_freed_request_is_reused);
    tcase_add_test(tc, requests_change_pthreads);
    tcase_add_test(tc, exiting_pthreads_return_their_requests);
    suite_add_tcase(s, tc);
    return s;
}

static bool cp_quiet(void) { return me != 0; }


CHECK_MAIN(.suite = cp_suite, .fork = CK_NOFORK, .init = cp_init, .quiet = cp_quiet,
           .fini = test_mpiv_fini);
