/*
 * Unit tests of the slot + generation handles (src/proto/handle.c): a
 * taken handle never names anything again, slots are reused first-in
 * first-out, the 32-bit immediate form round-trips only while the handle
 * lives, and threads making and taking handles at once never get one
 * request twice.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/check_main.h"
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
    tcase_add_test(tc, imm_form_round_trip);
    tcase_add_test(tc, take_if_takes_only_matching);
    tcase_add_test(tc, concurrent_make_take);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = test_suite);
