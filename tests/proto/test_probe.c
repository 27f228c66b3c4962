/*
 * Probes and matched probes, under mpiv_run with 2 and 4 ranks; ranks pair
 * up as (0,1), (2,3), the odd rank sends, the even one probes.
 *
 *  - probe / iprobe report the next message's status without taking it,
 *    exact and wildcard, eager and rendezvous;
 *  - mprobe / improbe take the message out of matching: mrecv / imrecv
 *    receive exactly it (a later receive of the same key gets the next);
 *  - threads (ULTs, pthreads) that mprobe the same source and tag at once
 *    receive every message exactly once.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "common/test_mpiv.h"
#include "common/test_data.h"
#include "common/test_wait.h"
#include "mpiv.h"

static int me, nranks, partner;
static size_t eager;

/* Past the eager limit of every transport (shm sends up to 64 KiB eagerly):
 * a rendezvous. */
static size_t big(void) { return 3 * eager + 70000; }

/* A message whose first int is its id, then the pattern. */
static void make(unsigned char *b, size_t n, int id)
{
    fill(b, n, (unsigned)id);
    if (n >= sizeof id)
        memcpy(b, &id, sizeof id);
}

static void check_msg(const unsigned char *b, size_t n, int id)
{
    unsigned char *ref = malloc(n);
    make(ref, n, id);
    ck_assert_msg(memcmp(ref, b, n) == 0, "message %d's bytes differ", id);
    free(ref);
}

static int id_of(const unsigned char *b)
{
    int id;
    memcpy(&id, b, sizeof id);
    return id;
}

START_TEST(probe_reports_without_taking)
{
    if (partner < 0)
        return;
    size_t sizes[2] = {100, big()};
    if (me % 2) {
        unsigned char *b = malloc(big());
        for (int i = 0; i < 2; i++) {
            make(b, sizes[i], i);
            OK(mpiv_send(b, sizes[i], partner, 7 + i));
        }
        free(b);
        OK(mpiv_barrier());
    } else {
        mpiv_status_t st;
        int flag = 1;
        OK(mpiv_iprobe(partner, 99, &flag, &st));
        ck_assert_int_eq(flag, 0);
        /* blocking probe for the rendezvous one (tag 8), then both seen */
        OK(mpiv_probe(partner, 8, &st));
        ck_assert_int_eq(st.source, partner);
        ck_assert_int_eq(st.tag, 8);
        ck_assert_uint_eq(st.size, big());
        /* the oldest that fits a wildcard: tag 7, sent first */
        OK(mpiv_iprobe(MPIV_ANY_SOURCE, MPIV_ANY_TAG, &flag, &st));
        ck_assert_int_eq(flag, 1);
        ck_assert_int_eq(st.tag, 7);
        ck_assert_uint_eq(st.size, 100);
        OK(mpiv_iprobe(partner, MPIV_ANY_TAG, &flag, &st));
        ck_assert_int_eq(st.tag, 7);
        OK(mpiv_iprobe(MPIV_ANY_SOURCE, 8, &flag, &st));
        ck_assert_int_eq(flag, 1);
        ck_assert_uint_eq(st.size, big());
        /* still there: receive both */
        unsigned char *b = malloc(big());
        OK(mpiv_recv(b, big(), MPIV_ANY_SOURCE, MPIV_ANY_TAG, &st));
        ck_assert_int_eq(st.tag, 7);
        check_msg(b, 100, 0);
        OK(mpiv_recv(b, big(), partner, 8, &st));
        check_msg(b, big(), 1);
        OK(mpiv_iprobe(MPIV_ANY_SOURCE, MPIV_ANY_TAG, &flag, &st));
        ck_assert_int_eq(flag, 0);
        free(b);
        OK(mpiv_barrier());
    }
}
END_TEST

START_TEST(mprobe_takes_the_message)
{
    if (partner < 0)
        return;
    /* three messages of one key: eager, rendezvous, eager */
    size_t sizes[3] = {40, big(), 8};
    if (me % 2) {
        /* non-blocking: the rendezvous one completes only once received,
         * after the third is */
        unsigned char *b[4];
        mpiv_request_t r[4];
        for (int i = 0; i < 4; i++) {
            size_t n = i < 3 ? sizes[i] : 500;
            b[i] = malloc(n);
            make(b[i], n, 10 + i);
            OK(mpiv_isend(b[i], n, partner, i < 3 ? 21 : 22, &r[i]));
        }
        OK(mpiv_waitall(4, r, NULL));
        for (int i = 0; i < 4; i++)
            free(b[i]);
    } else {
        unsigned char *b = malloc(big());
        mpiv_message_t m1, m2;
        mpiv_status_t st;
        OK(mpiv_mprobe(partner, 21, &m1, &st));
        ck_assert_ptr_nonnull(m1);
        ck_assert_uint_eq(st.size, 40);
        /* the first is taken: a probe now sees the second */
        OK(mpiv_probe(partner, 21, &st));
        ck_assert_uint_eq(st.size, big());
        int flag = 0;
        OK(mpiv_improbe(MPIV_ANY_SOURCE, 21, &flag, &m2, &st));
        ck_assert_int_eq(flag, 1);
        ck_assert_uint_eq(st.size, big());
        /* a plain receive of the key gets the third */
        OK(mpiv_recv(b, big(), partner, 21, &st));
        ck_assert_int_eq(id_of(b), 12);
        /* the handles receive exactly their messages, in any order */
        mpiv_request_t r;
        OK(mpiv_imrecv(b, big(), &m2, &r));
        ck_assert_ptr_null(m2);
        OK(mpiv_wait(&r, &st));
        ck_assert_int_eq(id_of(b), 11);
        ck_assert_uint_eq(st.size, big());
        check_msg(b, big(), 11);
        OK(mpiv_mrecv(b, big(), &m1, &st));
        ck_assert_int_eq(id_of(b), 10);
        ck_assert_int_eq(st.source, partner);
        ck_assert_int_eq(st.tag, 21);
        /* truncation through a handle */
        mpiv_message_t m3;
        OK(mpiv_mprobe(partner, MPIV_ANY_TAG, &m3, &st));
        ck_assert_uint_eq(st.size, 500);
        memset(b, 0xEE, 200);
        ck_assert_int_eq(mpiv_mrecv(b, 100, &m3, &st), MPIV_ERR_TRUNCATE);
        for (int i = 100; i < 200; i++)
            ck_assert_uint_eq(b[i], 0xEE);
        /* bad handles */
        mpiv_message_t none = MPIV_MESSAGE_NULL;
        ck_assert_int_eq(mpiv_mrecv(b, 10, &none, NULL), MPIV_ERR_ARG);
        ck_assert_int_eq(mpiv_mrecv(b, 10, NULL, NULL), MPIV_ERR_ARG);
        OK(mpiv_improbe(partner, 21, &flag, &m1, NULL));
        ck_assert_int_eq(flag, 0);
        ck_assert_ptr_null(m1);
        free(b);
    }
    OK(mpiv_barrier());
}
END_TEST

/* --- races ---------------------------------------------------------------- */

enum { RACE_MSGS = 600, RACERS = 4 };
static _Atomic int got[RACE_MSGS];

struct racer {
    int n, mode; /* mode: 0 mprobe exact, 1 mprobe wildcard, 2 improbe polling */
};

static void *racer(void *p)
{
    struct racer *a = p;
    unsigned char *b = malloc(big());
    for (int i = 0; i < a->n; i++) {
        mpiv_message_t m = MPIV_MESSAGE_NULL;
        mpiv_status_t st;
        int rc;
        if (a->mode == 2) {
            int flag = 0;
            while (!flag) {
                rc = mpiv_improbe(partner, 31, &flag, &m, &st);
                if (rc)
                    break;
                if (!flag)
                    mpiv_ult_yield();
            }
        } else {
            rc = mpiv_mprobe(a->mode ? MPIV_ANY_SOURCE : partner, a->mode ? MPIV_ANY_TAG : 31,
                             &m, &st);
        }
        if (rc != MPIV_SUCCESS) {
            test_thread_fail("probe: %s (%s)", mpiv_strerror(rc), mpiv_error_detail());
            break;
        }
        size_t probed = st.size;
        rc = mpiv_mrecv(b, big(), &m, &st);
        if (rc != MPIV_SUCCESS || st.size != probed) {
            test_thread_fail("mrecv: %s, size %zu, probed %zu", mpiv_strerror(rc), st.size,
                             probed);
            break;
        }
        int id = id_of(b);
        if (id < 0 || id >= RACE_MSGS) {
            test_thread_fail("message id %d", id);
            break;
        }
        atomic_fetch_add(&got[id], 1);
    }
    free(b);
    return NULL;
}

/* _i: 0 ULTs, 1 pthreads; the racers mix the three modes. */
START_TEST(mprobe_race)
{
    if (partner < 0)
        return;
    if (me % 2) {
        unsigned char *b = malloc(big());
        for (int i = 0; i < RACE_MSGS; i++) {
            size_t n = i % 9 == 0 ? big() : 8 + (size_t)i % 64;
            make(b, n, i);
            OK(mpiv_send(b, n, partner, 31));
        }
        free(b);
    } else {
        for (int i = 0; i < RACE_MSGS; i++)
            atomic_store(&got[i], 0);
        struct racer a[RACERS];
        mpiv_ult_t u[RACERS];
        pthread_t t[RACERS];
        for (int i = 0; i < RACERS; i++) {
            a[i] = (struct racer){.n = RACE_MSGS / RACERS, .mode = i % 3};
            if (_i == 0)
                OK(mpiv_ult_spawn(racer, &a[i], MPIV_WORKER_ANY, &u[i]));
            else
                ck_assert_int_eq(pthread_create(&t[i], NULL, racer, &a[i]), 0);
        }
        for (int i = 0; i < RACERS; i++) {
            if (_i == 0)
                OK(mpiv_ult_join(u[i], NULL));
            else
                pthread_join(t[i], NULL);
        }
        TEST_THREAD_CHECK();
        for (int i = 0; i < RACE_MSGS; i++)
            ck_assert_msg(atomic_load(&got[i]) == 1, "message %d received %d times", i,
                          atomic_load(&got[i]));
    }
    OK(mpiv_barrier());
}
END_TEST

static int pr_init(int *argc, char ***argv)
{
    if (test_mpiv_init(argc, argv))
        return 1;
    me = mpiv_rank();
    nranks = mpiv_size();
    partner = (me ^ 1) < nranks ? (me ^ 1) : -1;
    const char *ps = getenv("MPIV_PACKET_SIZE");
    eager = (ps ? (size_t)atol(ps) : 8192) - 32;
    return 0;
}

static Suite *pr_suite(void)
{
    Suite *s = suite_create("probe");
    TCase *tc = tcase_create("probe");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, probe_reports_without_taking);
    tcase_add_test(tc, mprobe_takes_the_message);
    tcase_add_loop_test(tc, mprobe_race, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

static bool pr_quiet(void) { return me != 0; }


CHECK_MAIN(.suite = pr_suite, .fork = CK_NOFORK, .init = pr_init, .quiet = pr_quiet,
           .fini = test_mpiv_fini);
