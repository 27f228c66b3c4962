/*
 * Unit tests of the slot + generation handles (src/proto/handle.c): a
 * taken handle never names anything again, slots are reused first-in
 * first-out (from a ring that init does not fill), the 32-bit immediate form round-trips only while the handle
 * lives, a walk over live handles (take_if) survives its callback taking
 * and making handles, and threads making and taking handles at once never
 * get one request twice.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "common/smaps.h"
#include "proto/proto.h"

static struct mpiv_request reqs[8];

static void up(void) { ck_assert_int_eq(proto_handle_init(), MPIV_SUCCESS); }
static void down(void) { proto_handle_fini(); }

START_TEST(taken_handle_is_stale)
{
    uint64_t h = proto_handle_make(&reqs[0]);
    ck_assert_uint_ne(h, 0);
    ck_assert_ptr_eq(proto_handle_peek(h), &reqs[0]);
    ck_assert_ptr_eq(proto_handle_take(h), &reqs[0]);
    ck_assert_ptr_null(proto_handle_peek(h));
    ck_assert_ptr_null(proto_handle_take(h)); /* a duplicate */
    ck_assert_ptr_null(proto_handle_take(0));
    ck_assert_ptr_null(proto_handle_take(h + 1)); /* a guessed neighbour */
}
END_TEST

START_TEST(slots_reused_fifo)
{
    /* a freed slot comes back only after every other slot was used */
    uint64_t h0 = proto_handle_make(&reqs[0]);
    uint32_t s0 = (uint32_t)(h0 & (HANDLE_SLOTS - 1));
    ck_assert_ptr_eq(proto_handle_take(h0), &reqs[0]);
    for (uint32_t i = 1; i < HANDLE_SLOTS; i++) {
        uint64_t h = proto_handle_make(&reqs[1]);
        ck_assert_uint_ne((uint32_t)(h & (HANDLE_SLOTS - 1)), s0);
        ck_assert_ptr_eq(proto_handle_take(h), &reqs[1]);
    }
    uint64_t again = proto_handle_make(&reqs[2]);
    ck_assert_uint_eq((uint32_t)(again & (HANDLE_SLOTS - 1)), s0);
    ck_assert_uint_ne(again, h0); /* a new generation */
    ck_assert_ptr_null(proto_handle_peek(h0));
    ck_assert_ptr_eq(proto_handle_take(again), &reqs[2]);
}
END_TEST

START_TEST(full_table_refuses)
{
    uint64_t *hs = malloc(HANDLE_SLOTS * sizeof *hs);
    for (uint32_t i = 0; i < HANDLE_SLOTS; i++) {
        hs[i] = proto_handle_make(&reqs[3]);
        ck_assert_uint_ne(hs[i], 0);
    }
    ck_assert_uint_eq(proto_handle_make(&reqs[4]), 0);
    for (uint32_t i = 0; i < HANDLE_SLOTS; i++)
        ck_assert_ptr_eq(proto_handle_take(hs[i]), &reqs[3]);
    free(hs);
}
END_TEST

START_TEST(init_commits_no_ring)
{
    /* H6: a fresh table commits nothing of its 4 MiB ring; the fixture's
     * table is replaced by one made here */
    proto_handle_fini();
    assert_commits_below(1024, proto_handle_init() == MPIV_SUCCESS, "a fresh handle table");
    /* and its first slots come in order from the unwritten ring */
    for (uint32_t i = 0; i < 3; i++) {
        uint64_t h = proto_handle_make(&reqs[i]);
        ck_assert_uint_eq((uint32_t)(h & (HANDLE_SLOTS - 1)), i);
        ck_assert_ptr_eq(proto_handle_take(h), &reqs[i]);
    }
}
END_TEST

START_TEST(imm_form_round_trip)
{
    uint64_t h = proto_handle_make(&reqs[5]);
    uint32_t imm = proto_handle_imm(h);
    ck_assert_uint_eq(proto_handle_from_imm(imm), h);
    ck_assert_uint_eq(proto_handle_from_imm(imm ^ (1u << 31)), 0); /* other generation */
    ck_assert_ptr_eq(proto_handle_take(h), &reqs[5]);
    ck_assert_uint_eq(proto_handle_from_imm(imm), 0); /* late immediate */
}
END_TEST

static bool is_odd(struct mpiv_request *r, void *arg)
{
    (void)arg;
    return (r - reqs) % 2 == 1;
}
static bool is_any(struct mpiv_request *r, void *arg)
{
    (void)r;
    (void)arg;
    return true;
}
static void count(struct mpiv_request *r, void *arg)
{
    (void)r;
    ++*(int *)arg;
}

START_TEST(take_if_takes_only_matching)
{
    uint64_t h[6];
    for (int i = 0; i < 6; i++)
        h[i] = proto_handle_make(&reqs[i]);
    int n = 0;
    proto_handle_take_if(is_odd, &n, count);
    ck_assert_int_eq(n, 3);
    for (int i = 0; i < 6; i++)
        ck_assert_ptr_eq(proto_handle_peek(h[i]), i % 2 ? NULL : &reqs[i]);
    for (int i = 0; i < 6; i += 2)
        ck_assert_ptr_eq(proto_handle_take(h[i]), &reqs[i]);
}
END_TEST

/* take_if's callback completes requests, which takes and makes other
 * handles: here each call takes the next two live non-matching handles
 * (the walk's cursor among them) and makes one new matching and one non-matching. The
 * walk must take every matching request exactly once that was live when it
 * started, never hand out a freed one, and leave the table whole. */
#define NWALK 600
static struct mpiv_request walk_reqs[NWALK + 2 * NWALK];
static uint64_t walk_h[NWALK + 2 * NWALK];
static int walk_taken[NWALK + 2 * NWALK], walk_made, walk_next_even;

static bool walk_match(struct mpiv_request *r, void *arg)
{
    (void)arg;
    return (r - walk_reqs) % 2 == 1;
}
static void walk_fn(struct mpiv_request *r, void *arg)
{
    (void)arg;
    walk_taken[r - walk_reqs]++;
    for (int k = 0; k < 2; k++) { /* faster than the walk: past its cursor */
        while (walk_next_even < walk_made && !proto_handle_take(walk_h[walk_next_even]))
            walk_next_even += 2;
        walk_next_even += 2;
    }
    for (int k = 0; k < 2 && walk_made < NWALK + 2 * NWALK; k++, walk_made++)
        walk_h[walk_made] = proto_handle_make(&walk_reqs[walk_made]);
}

START_TEST(take_if_survives_its_callback)
{
    for (walk_made = 0; walk_made < NWALK; walk_made++)
        walk_h[walk_made] = proto_handle_make(&walk_reqs[walk_made]);
    proto_handle_take_if(walk_match, NULL, walk_fn);
    for (int i = 0; i < walk_made; i++) {
        ck_assert_int_le(walk_taken[i], 1);
        if (i < NWALK && i % 2 == 1)
            ck_assert_int_eq(walk_taken[i], 1);
        /* what the walk took is gone; the rest is still there, once */
        struct mpiv_request *left = proto_handle_take(walk_h[i]);
        if (walk_taken[i])
            ck_assert_ptr_null(left);
        else if (i % 2 == 1)
            ck_assert_ptr_eq(left, &walk_reqs[i]);
    }
    /* the live list is whole: a walk over it finds exactly what is live */
    for (int i = 0; i < 1000; i++)
        ck_assert_uint_ne(proto_handle_make(&reqs[7]), 0);
    int n = 0;
    proto_handle_take_if(is_any, &n, count);
    ck_assert_int_eq(n, 1000);
    proto_handle_take_if(is_any, &n, count);
    ck_assert_int_eq(n, 1000);
}
END_TEST

/* Threads make and take handles at once, each taking its own and one
 * guessed stale handle: every take of a live handle returns its own
 * request exactly once, and no stale one ever returns anything. */
#define NT 4
#define ROUNDS 20000
static atomic_long wrong;

static void *churn(void *arg)
{
    struct mpiv_request *mine = &reqs[(uintptr_t)arg];
    uint64_t last = 0;
    for (int i = 0; i < ROUNDS; i++) {
        uint64_t h = proto_handle_make(mine);
        if (!h || proto_handle_take(last) != NULL || proto_handle_take(h) != mine)
            atomic_fetch_add(&wrong, 1);
        last = h;
    }
    return NULL;
}

START_TEST(concurrent_make_take)
{
    pthread_t th[NT];
    for (uintptr_t t = 0; t < NT; t++)
        pthread_create(&th[t], NULL, churn, (void *)t);
    for (int t = 0; t < NT; t++)
        pthread_join(th[t], NULL);
    ck_assert_int_eq(atomic_load(&wrong), 0);
}
END_TEST

/* A walk beside threads that make and take their own handles: it takes
 * each of its own live requests once and never one of theirs. */
#define NMINE 5000
static struct mpiv_request mine_reqs[NMINE];
static atomic_int churn_stop;

static void *churn_until_stopped(void *arg)
{
    struct mpiv_request *r = &reqs[(uintptr_t)arg];
    while (!atomic_load(&churn_stop))
        if (proto_handle_take(proto_handle_make(r)) != r)
            atomic_fetch_add(&wrong, 1);
    return NULL;
}
static bool is_mine(struct mpiv_request *r, void *arg)
{
    (void)arg;
    return r >= mine_reqs && r < mine_reqs + NMINE;
}
static void count_mine(struct mpiv_request *r, void *arg)
{
    ((int *)arg)[r - mine_reqs]++;
}

START_TEST(take_if_beside_churn)
{
    static int seen[NMINE];
    pthread_t th[2];
    for (uintptr_t t = 0; t < 2; t++)
        pthread_create(&th[t], NULL, churn_until_stopped, (void *)t);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < NMINE; i++)
            ck_assert_uint_ne(proto_handle_make(&mine_reqs[i]), 0);
        memset(seen, 0, sizeof seen);
        proto_handle_take_if(is_mine, seen, count_mine);
        for (int i = 0; i < NMINE; i++)
            ck_assert_int_eq(seen[i], 1);
    }
    atomic_store(&churn_stop, 1);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    ck_assert_int_eq(atomic_load(&wrong), 0);
}
END_TEST

Suite *test_suite(void);
Suite *test_suite(void)
{
    Suite *s = suite_create("handle");
    TCase *tc = tcase_create("handle");
    tcase_add_checked_fixture(tc, up, down);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, taken_handle_is_stale);
    tcase_add_test(tc, slots_reused_fifo);
    tcase_add_test(tc, full_table_refuses);
    tcase_add_test(tc, init_commits_no_ring);
    tcase_add_test(tc, imm_form_round_trip);
    tcase_add_test(tc, take_if_takes_only_matching);
    tcase_add_test(tc, take_if_survives_its_callback);
    tcase_add_test(tc, concurrent_make_take);
    tcase_add_test(tc, take_if_beside_churn);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = test_suite);
