/*
 * The communicator forms of the probes, matched probes, sendrecv and
 * synchronous sends (issue 12), under mpiv_run at 2 to 4 ranks (every rank
 * runs the same cases in step, CK_NOFORK). They run on `rev`, a split of
 * the world with the keys reversed (rank r of rev is world rank P-1-r), so
 * that a status naming a world rank instead of a rank of rev shows.
 *
 *  - isolation: messages with the same source and tag on the world and on
 *    another communicator, known to be waiting (blocking probes found
 *    them), are not seen by iprobe / improbe / probe / mprobe on rev, nor
 *    taken by sendrecv on rev, nor match a synchronous send on rev;
 *  - statuses name ranks of rev: from the probes, exact and with
 *    MPIV_ANY_SOURCE, and from mrecv / imrecv of a message that a matched
 *    probe on rev took (eager and rendezvous);
 *  - sendrecv on rev in a ring; a synchronous send on rev does not
 *    complete before its receive is posted;
 *  - bad arguments: the error codes of the other _comm calls.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "common/test_mpiv.h"
#include "common/test_data.h"
#include "mpiv.h"

static int me, P;

/* A rank whose case failed leaves the others waiting in that case's
 * barriers and collectives, and under CK_NOFORK it would go on into the
 * next case's out of step. So it skips the remaining cases and ends
 * (test_mpiv_fini returns 1 without finalizing): mpiv_run then ends the job at
 * once, naming it, instead of at its timeout. */
static bool finished, broken;
static void case_setup(void) { finished = false; }
static void case_teardown(void)
{
    if (!finished)
        broken = true;
}
#define CASE_START()                                                                         \
    do {                                                                                     \
        if (broken)                                                                          \
            return;                                                                          \
    } while (0)
#define CASE_DONE() (finished = true)

/* Past the eager limit of every transport (shm: 64 KiB): a rendezvous. */
#define BIG 300000

#define FAILS(call, err)                                                                     \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        ck_assert_msg(rc_ == (err), "%s -> %s (%s), expected %s", #call, mpiv_strerror(rc_), \
                      mpiv_error_detail(), mpiv_strerror(err));                              \
    } while (0)

/* rev: every rank, keys reversed. */
static mpiv_comm_t make_rev(int *r, int *n)
{
    mpiv_comm_t c;
    OK(mpiv_comm_split(MPIV_COMM_WORLD, 0, -me, &c));
    OK(mpiv_comm_rank(c, r));
    OK(mpiv_comm_size(c, n));
    ck_assert_int_eq(*n, P);
    ck_assert_int_eq(*r, P - 1 - me);
    return c;
}

static int world_of(int r) { return P - 1 - r; }

/* A message of n bytes whose first int is v, the rest the pattern of seed v. */
static unsigned char *make_msg(size_t n, int v)
{
    unsigned char *b = malloc(n < sizeof v ? sizeof v : n);
    fill(b, n, (unsigned)v);
    if (n >= sizeof v)
        memcpy(b, &v, sizeof v);
    return b;
}

static void check_msg(const unsigned char *b, size_t n, int v)
{
    int got;
    memcpy(&got, b, sizeof got);
    ck_assert_int_eq(got, v);
    size_t i = data_mismatch(b, sizeof v, n, (unsigned)v);
    if (i < n)
        ck_abort_msg("byte %zu of %zu is %u, expected %u (message %d)", i, n, b[i],
                     pattern(i, (unsigned)v), v);
}

/* Every rank sends to its successor in rev (from its predecessor it gets):
 * first decoys with the same tag on the world and on `other` (a dup of
 * the world), which the receiver waits for with blocking probes of those
 * communicators; while they wait, the probes on rev see nothing. Then the
 * message on rev: every probe on rev reports it with rev's rank, and
 * mrecv / imrecv of the matched probes' messages too. */
START_TEST(probes_isolated_and_in_comm_ranks)
{
    CASE_START();
    int r, n;
    mpiv_comm_t rev = make_rev(&r, &n), other;
    OK(mpiv_comm_dup(MPIV_COMM_WORLD, &other));
    int to = (r + 1) % n, from = (r - 1 + n) % n;
    int wto = world_of(to), wfrom = world_of(from);
    size_t sizes[2] = {64, BIG};
    for (int k = 0; k < 2; k++) {
        size_t sz = sizes[k];
        int tag = 30 + k;
        int dw = 100 + me, dother = 200 + me, real = 300 + me;
        OK(mpiv_send(&dw, sizeof dw, wto, tag));
        OK(mpiv_send_comm(&dother, sizeof dother, wto, tag, other));
        mpiv_status_t st;
        OK(mpiv_probe(wfrom, tag, &st));
        OK(mpiv_probe_comm(wfrom, tag, other, &st));
        ck_assert_int_eq(st.source, wfrom);
        /* both decoys wait here: rev sees neither */
        int flag = 1;
        mpiv_message_t msg = (mpiv_message_t)&flag;
        OK(mpiv_iprobe_comm(from, tag, rev, &flag, &st));
        ck_assert_int_eq(flag, 0);
        flag = 1;
        OK(mpiv_iprobe_comm(MPIV_ANY_SOURCE, MPIV_ANY_TAG, rev, &flag, &st));
        ck_assert_int_eq(flag, 0);
        flag = 1;
        OK(mpiv_improbe_comm(MPIV_ANY_SOURCE, tag, rev, &flag, &msg, &st));
        ck_assert_int_eq(flag, 0);
        ck_assert_ptr_null(msg);
        OK(mpiv_barrier());

        unsigned char *out = make_msg(sz, real), *in = calloc(1, sz);
        mpiv_request_t sr;
        OK(mpiv_isend_comm(out, sz, to, tag, rev, &sr));
        /* the probes: exact, then wildcards; each names rev's rank */
        OK(mpiv_probe_comm(from, tag, rev, &st));
        ck_assert_int_eq(st.source, from);
        ck_assert_int_eq(st.tag, tag);
        ck_assert_uint_eq(st.size, sz);
        OK(mpiv_probe_comm(MPIV_ANY_SOURCE, MPIV_ANY_TAG, rev, &st));
        ck_assert_int_eq(st.source, from);
        ck_assert_int_eq(st.tag, tag);
        OK(mpiv_iprobe_comm(MPIV_ANY_SOURCE, tag, rev, &flag, &st));
        ck_assert_int_eq(flag, 1);
        ck_assert_int_eq(st.source, from);
        ck_assert_uint_eq(st.size, sz);
        /* taken by a matched probe (blocking in one round, not in the
         * other), received with mrecv / imrecv: still rev's rank */
        mpiv_status_t ms, rs;
        if (k == 0) {
            OK(mpiv_mprobe_comm(MPIV_ANY_SOURCE, MPIV_ANY_TAG, rev, &msg, &ms));
        } else {
            flag = 0;
            while (!flag)
                OK(mpiv_improbe_comm(from, MPIV_ANY_TAG, rev, &flag, &msg, &ms));
        }
        ck_assert_ptr_nonnull(msg);
        ck_assert_int_eq(ms.source, from);
        ck_assert_int_eq(ms.tag, tag);
        ck_assert_uint_eq(ms.size, sz);
        /* taken: nothing more on rev */
        OK(mpiv_iprobe_comm(MPIV_ANY_SOURCE, MPIV_ANY_TAG, rev, &flag, &st));
        ck_assert_int_eq(flag, 0);
        if (k == 0) {
            OK(mpiv_mrecv(in, sz, &msg, &rs));
        } else {
            mpiv_request_t rq;
            OK(mpiv_imrecv(in, sz, &msg, &rq));
            OK(mpiv_wait(&rq, &rs));
        }
        ck_assert_ptr_null(msg);
        ck_assert_int_eq(rs.source, from);
        ck_assert_int_eq(rs.tag, tag);
        ck_assert_uint_eq(rs.size, sz);
        check_msg(in, sz, 300 + wfrom);
        OK(mpiv_wait(&sr, NULL));
        /* the decoys are still there, each on its own communicator */
        int got = 0;
        OK(mpiv_recv_comm(&got, sizeof got, wfrom, tag, other, &st));
        ck_assert_int_eq(got, 200 + wfrom);
        OK(mpiv_recv(&got, sizeof got, wfrom, tag, &st));
        ck_assert_int_eq(got, 100 + wfrom);
        free(out);
        free(in);
        OK(mpiv_barrier());
    }
    OK(mpiv_comm_free(&other));
    OK(mpiv_comm_free(&rev));
    CASE_DONE();
}
END_TEST

/* Rank 0 of rev takes one message from every other member with matched
 * probes on MPIV_ANY_SOURCE and MPIV_ANY_TAG, while same-tag decoys from
 * the same ranks wait on the world and on `other`: each status, and the
 * status of its mrecv / imrecv, names the sender's rank in rev. */
START_TEST(matched_probes_any_source)
{
    CASE_START();
    int r, n;
    mpiv_comm_t rev = make_rev(&r, &n), other;
    OK(mpiv_comm_dup(MPIV_COMM_WORLD, &other));
    int head = world_of(0);
    if (r != 0) {
        int d = -1, v = 7000 + r;
        OK(mpiv_send(&d, sizeof d, head, 40 + r));
        OK(mpiv_send_comm(&d, sizeof d, head, 40 + r, other));
        OK(mpiv_barrier());
        OK(mpiv_send_comm(&v, sizeof v, 0, 40 + r, rev));
    } else {
        mpiv_status_t st;
        for (int k = 1; k < n; k++) {
            OK(mpiv_probe(world_of(k), 40 + k, &st));
            OK(mpiv_probe_comm(world_of(k), 40 + k, other, &st));
        }
        OK(mpiv_barrier());
        int seen[64] = {0};
        for (int k = 1; k < n; k++) {
            mpiv_message_t msg;
            mpiv_status_t ms, rs;
            int got = 0;
            if (k % 2) {
                OK(mpiv_mprobe_comm(MPIV_ANY_SOURCE, MPIV_ANY_TAG, rev, &msg, &ms));
                OK(mpiv_mrecv(&got, sizeof got, &msg, &rs));
            } else {
                int flag = 0;
                while (!flag)
                    OK(mpiv_improbe_comm(MPIV_ANY_SOURCE, MPIV_ANY_TAG, rev, &flag, &msg, &ms));
                mpiv_request_t rq;
                OK(mpiv_imrecv(&got, sizeof got, &msg, &rq));
                OK(mpiv_wait(&rq, &rs));
            }
            ck_assert_int_ge(ms.source, 1);
            ck_assert_int_lt(ms.source, n);
            ck_assert_int_eq(ms.tag, 40 + ms.source);
            ck_assert_int_eq(rs.source, ms.source);
            ck_assert_int_eq(rs.tag, ms.tag);
            ck_assert_int_eq(got, 7000 + ms.source);
            ck_assert_int_eq(seen[ms.source]++, 0);
        }
        for (int k = 1; k < n; k++) {
            int got = 0;
            OK(mpiv_recv(&got, sizeof got, world_of(k), 40 + k, NULL));
            ck_assert_int_eq(got, -1);
            OK(mpiv_recv_comm(&got, sizeof got, world_of(k), 40 + k, other, NULL));
            ck_assert_int_eq(got, -1);
        }
    }
    OK(mpiv_barrier());
    OK(mpiv_comm_free(&other));
    OK(mpiv_comm_free(&rev));
    CASE_DONE();
}
END_TEST

/* sendrecv on rev in a ring (to the successor, from the predecessor, exact
 * and MPIV_ANY_SOURCE, eager and rendezvous), with a same-tag decoy from
 * the same rank waiting on the world: the receive takes rev's message and
 * its status names rev's rank. */
START_TEST(sendrecv_ring)
{
    CASE_START();
    int r, n;
    mpiv_comm_t rev = make_rev(&r, &n);
    int to = (r + 1) % n, from = (r - 1 + n) % n;
    for (int round = 0; round < 3; round++) {
        size_t sz = round == 2 ? BIG : 64;
        int tag = 60 + round, d = -1;
        OK(mpiv_send(&d, sizeof d, world_of(to), tag));
        mpiv_status_t st;
        OK(mpiv_probe(world_of(from), tag, &st));
        unsigned char *out = make_msg(sz, 10 * r + round), *in = calloc(1, sz);
        OK(mpiv_sendrecv_comm(out, sz, to, tag, in, sz, round ? MPIV_ANY_SOURCE : from, tag, rev,
                              &st));
        check_msg(in, sz, 10 * from + round);
        ck_assert_int_eq(st.source, from);
        ck_assert_int_eq(st.tag, tag);
        ck_assert_uint_eq(st.size, sz);
        OK(mpiv_recv(&d, sizeof d, world_of(from), tag, NULL));
        ck_assert_int_eq(d, -1);
        free(out);
        free(in);
    }
    OK(mpiv_barrier());
    OK(mpiv_comm_free(&rev));
    CASE_DONE();
}
END_TEST

/* Pairs (0,1), (2,3) of rev; the odd one sends. A synchronous send on rev
 * does not complete before its receive on rev is posted, though a world
 * receive with the same source and tag is posted already (it must not
 * match it); ssend_comm then completes against a MPIV_ANY_SOURCE receive,
 * whose status names rev's rank. */
START_TEST(ssend_waits_for_the_receive)
{
    CASE_START();
    int r, n;
    mpiv_comm_t rev = make_rev(&r, &n);
    int partner = (r ^ 1) < n ? (r ^ 1) : -1;
    size_t sizes[3] = {0, 8, 100000};
    for (int i = 0; i < 3; i++) {
        unsigned char *b = make_msg(sizes[i] + 4, 5);
        mpiv_request_t wr = MPIV_REQUEST_NULL;
        if (partner >= 0 && r % 2 == 0)
            OK(mpiv_irecv(b, sizes[i] + 4, world_of(partner), 70, &wr));
        OK(mpiv_barrier()); /* the world receive is posted */
        if (partner >= 0 && r % 2) {
            mpiv_request_t q;
            OK(mpiv_issend_comm(b, sizes[i], partner, 70, rev, &q));
            int flag = 0;
            double t0 = mpiv_wtime();
            while (!flag && mpiv_wtime() - t0 < 0.2)
                OK(mpiv_test(&q, &flag, NULL));
            ck_assert_msg(!flag, "a synchronous send of %zu bytes on a communicator completed "
                          "before its receive was posted", sizes[i]);
            OK(mpiv_barrier()); /* now the receiver posts */
            OK(mpiv_wait(&q, NULL));
            OK(mpiv_ssend_comm(b, sizes[i], partner, 71, rev));
        } else {
            OK(mpiv_barrier());
        }
        if (partner >= 0 && r % 2 == 0) {
            int flag = 1, cancelled = 0;
            OK(mpiv_test(&wr, &flag, NULL));
            ck_assert_msg(!flag, "the world receive took a message sent on a communicator");
            OK(mpiv_cancel(&wr, &cancelled));
            ck_assert_int_eq(cancelled, 1);
            unsigned char *in = calloc(1, sizes[i] + 4);
            mpiv_status_t st;
            OK(mpiv_recv_comm(in, sizes[i] + 4, partner, 70, rev, &st));
            ck_assert_int_eq(st.source, partner);
            ck_assert_uint_eq(st.size, sizes[i]);
            if (sizes[i])
                check_msg(in, sizes[i], 5);
            OK(mpiv_recv_comm(in, sizes[i] + 4, MPIV_ANY_SOURCE, 71, rev, &st));
            ck_assert_int_eq(st.source, partner);
            ck_assert_int_eq(st.tag, 71);
            free(in);
        }
        free(b);
    }
    OK(mpiv_barrier());
    OK(mpiv_comm_free(&rev));
    CASE_DONE();
}
END_TEST

/* Bad arguments: the codes of the other _comm calls (MPIV_ERR_ARG for a
 * NULL or freed communicator and NULL outputs, MPIV_ERR_RANK for a rank
 * outside the communicator or a wildcard where none is allowed,
 * MPIV_ERR_TAG), the outputs cleared, nothing sent. */
START_TEST(bad_arguments)
{
    CASE_START();
    int r, n;
    mpiv_comm_t rev = make_rev(&r, &n), stale;
    OK(mpiv_comm_dup(rev, &stale));
    mpiv_comm_t freed = stale;
    OK(mpiv_comm_free(&stale));
    mpiv_comm_t bad[2] = {MPIV_COMM_NULL, freed};
    int x = 0, flag;
    mpiv_status_t st;
    mpiv_message_t msg;
    mpiv_request_t q;
    for (int i = 0; i < 2; i++) {
        mpiv_comm_t c = bad[i];
        /* what the existing calls say, then the new ones the same */
        FAILS(mpiv_send_comm(&x, sizeof x, 0, 1, c), MPIV_ERR_ARG);
        flag = 1;
        FAILS(mpiv_iprobe_comm(0, 1, c, &flag, &st), MPIV_ERR_ARG);
        ck_assert_int_eq(flag, 0);
        if (i == 1)
            ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "freed"));
        FAILS(mpiv_probe_comm(0, 1, c, &st), MPIV_ERR_ARG);
        flag = 1;
        msg = (mpiv_message_t)&x;
        FAILS(mpiv_improbe_comm(0, 1, c, &flag, &msg, &st), MPIV_ERR_ARG);
        ck_assert_int_eq(flag, 0);
        ck_assert_ptr_null(msg);
        msg = (mpiv_message_t)&x;
        FAILS(mpiv_mprobe_comm(0, 1, c, &msg, &st), MPIV_ERR_ARG);
        ck_assert_ptr_null(msg);
        FAILS(mpiv_sendrecv_comm(&x, sizeof x, 0, 1, &x, sizeof x, 0, 1, c, &st), MPIV_ERR_ARG);
        FAILS(mpiv_ssend_comm(&x, sizeof x, 0, 1, c), MPIV_ERR_ARG);
        q = (mpiv_request_t)&x;
        FAILS(mpiv_issend_comm(&x, sizeof x, 0, 1, c, &q), MPIV_ERR_ARG);
        ck_assert_ptr_null(q);
    }
    /* ranks: n is outside rev, -1 is no rank, MPIV_ANY_SOURCE is for
     * receives and probes only */
    int outside[2] = {n, -1};
    for (int i = 0; i < 2; i++) {
        int p = outside[i];
        FAILS(mpiv_send_comm(&x, sizeof x, p, 1, rev), MPIV_ERR_RANK);
        flag = 1;
        FAILS(mpiv_iprobe_comm(p, 1, rev, &flag, &st), MPIV_ERR_RANK);
        ck_assert_int_eq(flag, 0);
        FAILS(mpiv_probe_comm(p, 1, rev, &st), MPIV_ERR_RANK);
        msg = (mpiv_message_t)&x;
        FAILS(mpiv_improbe_comm(p, 1, rev, &flag, &msg, &st), MPIV_ERR_RANK);
        ck_assert_ptr_null(msg);
        FAILS(mpiv_mprobe_comm(p, 1, rev, &msg, &st), MPIV_ERR_RANK);
        FAILS(mpiv_sendrecv_comm(&x, sizeof x, p, 1, &x, sizeof x, 0, 1, rev, &st),
              MPIV_ERR_RANK);
        FAILS(mpiv_sendrecv_comm(&x, sizeof x, 0, 1, &x, sizeof x, p, 1, rev, &st),
              MPIV_ERR_RANK);
        FAILS(mpiv_ssend_comm(&x, sizeof x, p, 1, rev), MPIV_ERR_RANK);
        q = (mpiv_request_t)&x;
        FAILS(mpiv_issend_comm(&x, sizeof x, p, 1, rev, &q), MPIV_ERR_RANK);
        ck_assert_ptr_null(q);
    }
    FAILS(mpiv_sendrecv_comm(&x, sizeof x, MPIV_ANY_SOURCE, 1, &x, sizeof x, 0, 1, rev, &st),
          MPIV_ERR_RANK);
    FAILS(mpiv_ssend_comm(&x, sizeof x, MPIV_ANY_SOURCE, 1, rev), MPIV_ERR_RANK);
    FAILS(mpiv_issend_comm(&x, sizeof x, MPIV_ANY_SOURCE, 1, rev, &q), MPIV_ERR_RANK);
    /* tags */
    FAILS(mpiv_iprobe_comm(0, -7, rev, &flag, &st), MPIV_ERR_TAG);
    FAILS(mpiv_probe_comm(0, -7, rev, &st), MPIV_ERR_TAG);
    FAILS(mpiv_improbe_comm(0, -7, rev, &flag, &msg, &st), MPIV_ERR_TAG);
    FAILS(mpiv_mprobe_comm(0, -7, rev, &msg, &st), MPIV_ERR_TAG);
    FAILS(mpiv_sendrecv_comm(&x, sizeof x, 0, MPIV_ANY_TAG, &x, sizeof x, 0, 1, rev, &st),
          MPIV_ERR_TAG);
    FAILS(mpiv_ssend_comm(&x, sizeof x, 0, MPIV_ANY_TAG, rev), MPIV_ERR_TAG);
    /* NULL outputs and buffers */
    FAILS(mpiv_iprobe_comm(0, 1, rev, NULL, &st), MPIV_ERR_ARG);
    FAILS(mpiv_improbe_comm(0, 1, rev, NULL, &msg, &st), MPIV_ERR_ARG);
    FAILS(mpiv_improbe_comm(0, 1, rev, &flag, NULL, &st), MPIV_ERR_ARG);
    FAILS(mpiv_mprobe_comm(0, 1, rev, NULL, &st), MPIV_ERR_ARG);
    FAILS(mpiv_issend_comm(&x, sizeof x, 0, 1, rev, NULL), MPIV_ERR_ARG);
    FAILS(mpiv_ssend_comm(NULL, 4, 0, 1, rev), MPIV_ERR_ARG);
    FAILS(mpiv_sendrecv_comm(&x, sizeof x, 0, 1, NULL, 4, 0, 1, rev, &st), MPIV_ERR_ARG);
    /* none of them sent anything */
    OK(mpiv_barrier());
    OK(mpiv_iprobe_comm(MPIV_ANY_SOURCE, MPIV_ANY_TAG, rev, &flag, &st));
    ck_assert_int_eq(flag, 0);
    OK(mpiv_barrier());
    OK(mpiv_comm_free(&rev));
    CASE_DONE();
}
END_TEST

static int cp_init(int *argc, char ***argv)
{
    if (test_mpiv_init(argc, argv))
        return 1;
    me = mpiv_rank();
    P = mpiv_size();
    return 0;
}

static Suite *cp_suite(void)
{
    Suite *s = suite_create("comm_p2p");
    TCase *tc = tcase_create("comm_p2p");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, case_setup, case_teardown);
    tcase_add_test(tc, probes_isolated_and_in_comm_ranks);
    tcase_add_test(tc, matched_probes_any_source);
    tcase_add_test(tc, sendrecv_ring);
    tcase_add_test(tc, ssend_waits_for_the_receive);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

/* Every rank reports: a failure on any rank then shows its message. */
static bool cp_quiet(void) { return false; }


CHECK_MAIN(.suite = cp_suite, .fork = CK_NOFORK, .init = cp_init, .quiet = cp_quiet,
           .fini = test_mpiv_fini);
