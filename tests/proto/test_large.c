/*
 * One message larger than any single transfer a backend can make (verbs
 * and the shm cell length stop at 2^31 bytes, libfabric at its provider's
 * max_msg_size): 5 GiB by default (MPIV_TEST_LARGE_MIB), rank 0 to rank 1,
 * both arrival orders, every byte checked. Run under mpiv_run -n 2.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "mpiv.h"

static int me;
static size_t size;

static uint64_t word(size_t i, uint64_t seed) { return (i * 0x9e3779b97f4a7c15ull) ^ seed; }

START_TEST(one_huge_message)
{
    size_t n = size / 8;
    uint64_t *buf = malloc(n * 8);
    ck_assert_msg(buf != NULL, "cannot allocate %zu bytes", n * 8);
    for (int order = 0; order < 2; order++) {
        uint64_t seed = 0x1234u + (uint64_t)order;
        mpiv_request_t r;
        mpiv_status_t st;
        if (me == 0) {
            for (size_t i = 0; i < n; i++)
                buf[i] = word(i, seed);
            if (order == 1) {
                ck_assert_int_eq(mpiv_isend(buf, n * 8, 1, 1, &r), MPIV_SUCCESS);
                ck_assert_int_eq(mpiv_barrier(), MPIV_SUCCESS);
                ck_assert_int_eq(mpiv_wait(&r, NULL), MPIV_SUCCESS);
            } else {
                ck_assert_int_eq(mpiv_barrier(), MPIV_SUCCESS);
                ck_assert_int_eq(mpiv_send(buf, n * 8, 1, 1), MPIV_SUCCESS);
            }
        } else {
            memset(buf, 0, n * 8);
            if (order == 0) {
                ck_assert_int_eq(mpiv_irecv(buf, n * 8, 0, 1, &r), MPIV_SUCCESS);
                ck_assert_int_eq(mpiv_barrier(), MPIV_SUCCESS);
            } else {
                ck_assert_int_eq(mpiv_barrier(), MPIV_SUCCESS);
                ck_assert_int_eq(mpiv_irecv(buf, n * 8, 0, 1, &r), MPIV_SUCCESS);
            }
            int rc = mpiv_wait(&r, &st);
            ck_assert_msg(rc == MPIV_SUCCESS, "receive: %s (%s)", mpiv_strerror(rc),
                          mpiv_error_detail());
            ck_assert_uint_eq(st.size, n * 8);
            for (size_t i = 0; i < n; i++)
                if (buf[i] != word(i, seed))
                    ck_abort_msg("word %zu of %zu is wrong (order %d)", i, n, order);
        }
    }
    free(buf);
    ck_assert_int_eq(mpiv_barrier(), MPIV_SUCCESS);
}
END_TEST

static int large_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (mpiv_init(NULL, NULL) != MPIV_SUCCESS || mpiv_size() != 2) {
        fprintf(stderr, "test_large: needs mpiv_init on 2 ranks: %s\n", mpiv_error_detail());
        return 1;
    }
    me = mpiv_rank();
    const char *mib = getenv("MPIV_TEST_LARGE_MIB");
    size = (size_t)(mib ? strtoull(mib, NULL, 10) : 5120) << 20;
    return 0;
}

static Suite *large_suite(void)
{
    Suite *s = suite_create("large");
    TCase *tc = tcase_create("large");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, one_huge_message);
    suite_add_tcase(s, tc);
    return s;
}

static int large_fini(int failed)
{
    int rc = mpiv_finalize();
    return failed == 0 && rc == MPIV_SUCCESS ? 0 : 1;
}

CHECK_MAIN(.suite = large_suite, .fork = CK_NOFORK, .init = large_init, .fini = large_fini);
