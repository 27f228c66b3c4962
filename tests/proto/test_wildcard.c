/*
 * Wildcard receives (MPIV_ANY_SOURCE, MPIV_ANY_TAG) against a serial model
 * of MPI matching, under mpiv_run with 2 and 4 ranks. Ranks pair up as
 * (0,1), (2,3): the even rank receives, the odd one sends; the receiver
 * also sends to itself, so a receive has two sources to choose from.
 *
 * Each round is a random plan made from a seed every rank knows (printed
 * by rank 0): arrivals and receive posts in an order the test controls, so
 * that the model knows the real arrival and post order:
 *   1. the partner sends a batch, then a fence with a tag of its own; the
 *      receiver takes the fence with an exact receive, so the whole batch
 *      has arrived (one source's messages arrive in the order sent);
 *   2. the receiver, at random, posts receives (source: any, itself, the
 *      partner; tag: any or one of three) and sends messages to itself
 *      (each is in the table or matched when the send returns);
 *   3. the partner sends a second batch and fence while receives are
 *      pending: the model says which receive each message goes to, and
 *      the receiver waits for the fence where the model says it went;
 *   4. receives for what the model says is still waiting (each with
 *      MPIV_ANY_SOURCE and MPIV_ANY_TAG: the oldest first), and a cancel of
 *      each receive the model says is still pending.
 * Every message carries its id in its first bytes; every receive must get
 * the message the model gives it, with the right status. Sizes are eager
 * and rendezvous at random.
 *
 * A second case: ULTs and pthreads of the receiver each post wildcard
 * receives while the partner sends; every message is received exactly once.
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
#include "common/test_data.h"
#include "common/test_wait.h"
#include "mpiv.h"

static int me, nranks, partner;
static size_t eager;
static unsigned base_seed;

/* --- the serial model ----------------------------------------------------- */

enum { MAXM = 128, MAXR = 128, NTAGS = 3 };

struct msg {
    int src, tag, id;
    size_t size;
    int recv; /* the receive the model gives it, or -1 */
};
struct rcv {
    int src, tag; /* may be wildcards */
    int msg;      /* the message the model gives it, or -1 */
    mpiv_request_t req;
    unsigned char *buf;
    bool done;
};

static struct msg msgs[MAXM];
static struct rcv rcvs[MAXR];
static int nmsg, nrcv;
static int unexp[MAXM], nunexp;  /* unexpected messages, arrival order */
static int posted[MAXR], nposted; /* pending receives, post order       */

static bool fits(const struct rcv *r, const struct msg *m)
{
    return (r->src == MPIV_ANY_SOURCE || r->src == m->src) &&
           (r->tag == MPIV_ANY_TAG || r->tag == m->tag);
}

static void model_arrive(int mi)
{
    for (int i = 0; i < nposted; i++) {
        int ri = posted[i];
        if (fits(&rcvs[ri], &msgs[mi])) {
            rcvs[ri].msg = mi;
            msgs[mi].recv = ri;
            memmove(&posted[i], &posted[i + 1], (size_t)(nposted - i - 1) * sizeof *posted);
            nposted--;
            return;
        }
    }
    unexp[nunexp++] = mi;
}

static void model_post(int ri)
{
    for (int i = 0; i < nunexp; i++) {
        int mi = unexp[i];
        if (fits(&rcvs[ri], &msgs[mi])) {
            rcvs[ri].msg = mi;
            msgs[mi].recv = ri;
            memmove(&unexp[i], &unexp[i + 1], (size_t)(nunexp - i - 1) * sizeof *unexp);
            nunexp--;
            return;
        }
    }
    posted[nposted++] = ri;
}

/* --- messages --------------------------------------------------------------- */

/* Past the eager limit of every transport (shm sends up to 64 KiB eagerly):
 * a rendezvous. */
static size_t big(void) { return 3 * eager + 70000; }

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 16) & 0x7fff;
}

static int new_msg(int src, int tag, size_t size)
{
    ck_assert_int_lt(nmsg, MAXM);
    msgs[nmsg] = (struct msg){.src = src, .tag = tag, .id = nmsg, .size = size, .recv = -1};
    return nmsg++;
}

static unsigned char *payload(int mi)
{
    size_t n = msgs[mi].size;
    unsigned char *b = malloc(n);
    ck_assert_ptr_nonnull(b);
    fill(b, n, (unsigned)mi + 77u);
    memcpy(b, &msgs[mi].id, sizeof(int));
    return b;
}

static void check_recv(int ri)
{
    struct rcv *r = &rcvs[ri];
    mpiv_status_t st;
    OK(mpiv_wait(&r->req, &st));
    r->done = true;
    int id;
    memcpy(&id, r->buf, sizeof id);
    ck_assert_msg(id == r->msg,
                  "receive %d (source %d, tag %d) got message %d, the model says %d "
                  "(seed %u)",
                  ri, r->src, r->tag, id, r->msg, base_seed);
    const struct msg *m = &msgs[id];
    ck_assert_int_eq(st.source, m->src);
    ck_assert_int_eq(st.tag, m->tag);
    ck_assert_uint_eq(st.size, m->size);
    unsigned char *ref = payload(id);
    ck_assert_msg(memcmp(ref, r->buf, m->size) == 0, "message %d's bytes differ", id);
    free(ref);
    free(r->buf);
    r->buf = NULL;
}

static int post(int src, int tag)
{
    ck_assert_int_lt(nrcv, MAXR);
    int ri = nrcv++;
    struct rcv *r = &rcvs[ri];
    *r = (struct rcv){.src = src, .tag = tag, .msg = -1};
    r->buf = malloc(big());
    ck_assert_ptr_nonnull(r->buf);
    OK(mpiv_irecv(r->buf, big(), src, tag, &r->req));
    model_post(ri);
    return ri;
}

/* The plan both sides draw from one seed: batch sizes, tags and sizes. */
struct batch {
    int n;
    int tag[24];
    size_t size[24];
};

static void draw_batch(unsigned *s, struct batch *b)
{
    b->n = 4 + (int)(rnd(s) % 16);
    for (int i = 0; i < b->n; i++) {
        b->tag[i] = 1 + (int)(rnd(s) % NTAGS);
        b->size[i] = rnd(s) % 4 == 0 ? big() - rnd(s) % 100 : 4 + rnd(s) % 200;
    }
}

enum { TAG_FENCE1 = 1000, TAG_FENCE2 = 1001, TAG_GO = 1002 };

/* The sender's side of a round: two batches and their fences. */
static void sender_round(unsigned seed)
{
    unsigned s = seed;
    struct batch b1, b2;
    draw_batch(&s, &b1);
    draw_batch(&s, &b2);
    enum { MAXS = 2 * 24 + 2 };
    mpiv_request_t reqs[MAXS];
    unsigned char *bufs[MAXS];
    int n = 0;
    nmsg = 0;
    for (int phase = 0; phase < 2; phase++) {
        struct batch *b = phase ? &b2 : &b1;
        if (phase) {
            int go;
            OK(mpiv_recv(&go, sizeof go, partner, TAG_GO, NULL));
        }
        for (int i = 0; i <= b->n; i++) {
            bool fence = i == b->n;
            int tag = fence ? (phase ? TAG_FENCE2 : TAG_FENCE1) : b->tag[i];
            int mi = new_msg(me, tag, fence ? 4 : b->size[i]);
            bufs[n] = payload(mi);
            OK(mpiv_isend(bufs[n], msgs[mi].size, partner, tag, &reqs[n]));
            n++;
        }
    }
    OK(mpiv_waitall(n, reqs, NULL));
    for (int i = 0; i < n; i++)
        free(bufs[i]);
}

/* The partner's messages get the same ids on both sides: the receiver
 * numbers them as the sender does, in the order of the plan. */
static void receiver_round(unsigned seed)
{
    unsigned s = seed;
    struct batch b1, b2;
    draw_batch(&s, &b1);
    draw_batch(&s, &b2);
    unsigned r = seed ^ 0x9e3779b9u;
    nmsg = nrcv = nunexp = nposted = 0;

    /* 1: the first batch, all unexpected (no receive is pending) */
    int ids1[25], ids2[25];
    for (int i = 0; i <= b1.n; i++)
        ids1[i] = new_msg(partner, i == b1.n ? TAG_FENCE1 : b1.tag[i], i == b1.n ? 4 : b1.size[i]);
    for (int i = 0; i <= b2.n; i++)
        ids2[i] = new_msg(partner, i == b2.n ? TAG_FENCE2 : b2.tag[i], i == b2.n ? 4 : b2.size[i]);
    int f1 = post(partner, TAG_FENCE1); /* exact, before the batch arrives or after */
    OK(mpiv_wait(&rcvs[f1].req, NULL));
    free(rcvs[f1].buf);
    rcvs[f1].buf = NULL;
    rcvs[f1].done = true;
    /* the model: posted first or not, the fence is the only one it fits */
    nposted = 0;
    for (int i = 0; i < b1.n; i++)
        model_arrive(ids1[i]);
    msgs[ids1[b1.n]].recv = f1;
    rcvs[f1].msg = ids1[b1.n];

    /* 2: posts and sends to ourselves, at random */
    mpiv_request_t self_reqs[64];
    unsigned char *self_bufs[64];
    int nself = 0;
    int steps = 10 + (int)(rnd(&r) % 30);
    for (int i = 0; i < steps; i++) {
        if (rnd(&r) % 2 && nself < 64) {
            int tag = 1 + (int)(rnd(&r) % NTAGS);
            size_t size = rnd(&r) % 4 == 0 ? big() - rnd(&r) % 100 : 4 + rnd(&r) % 200;
            int mi = new_msg(me, tag, size);
            self_bufs[nself] = payload(mi);
            OK(mpiv_isend(self_bufs[nself], size, me, tag, &self_reqs[nself]));
            nself++;
            model_arrive(mi);
        } else {
            unsigned a = rnd(&r) % 4, b = rnd(&r) % 5;
            int src = a < 2 ? MPIV_ANY_SOURCE : a == 2 ? me : partner;
            int tag = b < 2 ? MPIV_ANY_TAG : (int)b - 1;
            post(src, tag);
        }
    }
    /* every receive the model matched so far must have its message */
    for (int ri = 0; ri < nrcv; ri++)
        if (!rcvs[ri].done && rcvs[ri].msg >= 0)
            check_recv(ri);

    /* 3: the second batch arrives while receives are pending */
    int go = 1;
    OK(mpiv_send(&go, sizeof go, partner, TAG_GO));
    for (int i = 0; i <= b2.n; i++)
        model_arrive(ids2[i]);
    const struct msg *fence = &msgs[ids2[b2.n]];
    if (fence->recv >= 0) {
        check_recv(fence->recv); /* it went to a wildcard receive */
    } else {
        /* it waits unexpected: a probe sees it once it is there (the
         * launcher's timeout ends a test that waits for ever) */
        mpiv_status_t st;
        OK(mpiv_probe(partner, TAG_FENCE2, &st));
        ck_assert_int_eq(st.tag, TAG_FENCE2);
    }
    for (int ri = 0; ri < nrcv; ri++)
        if (!rcvs[ri].done && rcvs[ri].msg >= 0)
            check_recv(ri);

    /* 4: what still waits, oldest first, and cancel what is still posted */
    int left = nunexp;
    for (int i = 0; i < left; i++)
        post(MPIV_ANY_SOURCE, MPIV_ANY_TAG);
    for (int ri = 0; ri < nrcv; ri++) {
        if (rcvs[ri].done)
            continue;
        if (rcvs[ri].msg >= 0) {
            check_recv(ri);
            continue;
        }
        int cancelled = 0;
        OK(mpiv_cancel(&rcvs[ri].req, &cancelled));
        ck_assert_msg(cancelled, "receive %d (source %d, tag %d) should still be pending, "
                      "but a message matched it (seed %u)",
                      ri, rcvs[ri].src, rcvs[ri].tag, base_seed);
        ck_assert_ptr_null(rcvs[ri].req);
        free(rcvs[ri].buf);
        rcvs[ri].buf = NULL;
        rcvs[ri].done = true;
    }
    OK(mpiv_waitall(nself, self_reqs, NULL));
    for (int i = 0; i < nself; i++)
        free(self_bufs[i]);
}

START_TEST(wildcard_order_matches_model)
{
    if (partner < 0)
        return;
    int rounds = 60;
    for (int round = 0; round < rounds; round++) {
        unsigned seed = base_seed + (unsigned)round * 7919u;
        if (me % 2)
            sender_round(seed);
        else
            receiver_round(seed);
        OK(mpiv_barrier());
    }
}
END_TEST

/* --- many wildcard receivers at once -------------------------------------------- */

enum { RACE_MSGS = 400, RACE_THREADS = 4 };
static _Atomic int got[RACE_MSGS];

struct racer {
    int n; /* receives to do */
    int any_tag;
};

static void *race_recv(void *p)
{
    struct racer *a = p;
    unsigned char *buf = malloc(big());
    for (int i = 0; i < a->n; i++) {
        mpiv_status_t st;
        int src = a->any_tag ? partner : MPIV_ANY_SOURCE;
        int tag = a->any_tag ? MPIV_ANY_TAG : 5;
        int rc = mpiv_recv(buf, big(), src, tag, &st);
        if (rc != MPIV_SUCCESS) {
            test_thread_fail("wildcard receive: %s (%s)", mpiv_strerror(rc), mpiv_error_detail());
            break;
        }
        int id;
        memcpy(&id, buf, sizeof id);
        if (id < 0 || id >= RACE_MSGS || st.source != partner || st.tag != 5) {
            test_thread_fail("wildcard receive got id %d from %d tag %d", id, st.source, st.tag);
            break;
        }
        atomic_fetch_add(&got[id], 1);
    }
    free(buf);
    return NULL;
}

START_TEST(wildcard_receivers_race)
{
    if (partner < 0)
        return;
    /* _i: 0 ULTs with ANY_SOURCE, 1 pthreads with ANY_TAG */
    if (me % 2) {
        unsigned char *b = malloc(big());
        for (int i = 0; i < RACE_MSGS; i++) {
            size_t n = i % 7 == 0 ? big() : 16;
            fill(b, n, 3);
            memcpy(b, &i, sizeof i);
            OK(mpiv_send(b, n, partner, 5));
        }
        free(b);
    } else {
        for (int i = 0; i < RACE_MSGS; i++)
            atomic_store(&got[i], 0);
        struct racer a[RACE_THREADS];
        mpiv_ult_t u[RACE_THREADS];
        pthread_t t[RACE_THREADS];
        for (int i = 0; i < RACE_THREADS; i++) {
            a[i] = (struct racer){.n = RACE_MSGS / RACE_THREADS, .any_tag = _i};
            if (_i == 0)
                OK(mpiv_ult_spawn(race_recv, &a[i], MPIV_WORKER_ANY, &u[i]));
            else
                ck_assert_int_eq(pthread_create(&t[i], NULL, race_recv, &a[i]), 0);
        }
        for (int i = 0; i < RACE_THREADS; i++) {
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

/* Bad wildcard arguments: a wildcard where only a rank or tag is allowed. */
START_TEST(wildcard_bad_arguments)
{
    int x = 0;
    ck_assert_int_eq(mpiv_send(&x, sizeof x, MPIV_ANY_SOURCE, 1), MPIV_ERR_RANK);
    ck_assert_int_eq(mpiv_send(&x, sizeof x, 0, MPIV_ANY_TAG), MPIV_ERR_TAG);
    ck_assert_int_eq(mpiv_recv(&x, sizeof x, -7, 1, NULL), MPIV_ERR_RANK);
    ck_assert_int_eq(mpiv_recv(&x, sizeof x, 0, -7, NULL), MPIV_ERR_TAG);
    int flag;
    ck_assert_int_eq(mpiv_iprobe(nranks, 1, &flag, NULL), MPIV_ERR_RANK);
}
END_TEST

static int wc_init(int *argc, char ***argv)
{
    if (test_mpiv_init(argc, argv))
        return 1;
    me = mpiv_rank();
    nranks = mpiv_size();
    partner = (me ^ 1) < nranks ? (me ^ 1) : -1;
    const char *ps = getenv("MPIV_PACKET_SIZE");
    eager = (ps ? (size_t)atol(ps) : 8192) - 32;
    const char *sd = getenv("MPIV_TEST_SEED");
    unsigned seed = sd ? (unsigned)strtoul(sd, NULL, 0) : (unsigned)test_now_ns();
    int rc = mpiv_bcast(&seed, sizeof seed, 0);
    if (rc)
        return 1;
    base_seed = seed;
    if (me == 0)
        printf("test_wildcard: seed %u (MPIV_TEST_SEED=%u repeats it)\n", seed, seed);
    return 0;
}

static Suite *wc_suite(void)
{
    Suite *s = suite_create("wildcard");
    TCase *tc = tcase_create("wildcard");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, wildcard_bad_arguments);
    tcase_add_test(tc, wildcard_order_matches_model);
    tcase_add_loop_test(tc, wildcard_receivers_race, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

static bool wc_quiet(void) { return me != 0; }

static int wc_fini(int failed)
{
    if (failed) {
        fprintf(stderr, "rank %d: %d test(s) failed (seed %u)\n", me, failed, base_seed);
        return 1;
    }
    return mpiv_finalize() == MPIV_SUCCESS ? 0 : 1;
}

CHECK_MAIN(.suite = wc_suite, .fork = CK_NOFORK, .init = wc_init, .quiet = wc_quiet,
           .fini = wc_fini);
