/* Unit tests for src/util: error names, configuration parsing (ranges,
 * whitespace, the eager limit against the packet), sizes. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "common/check_main.h"
#include "util/util.h"
#include "common/smaps.h"
#include "common/test_data.h"

static const char *all_vars[] = {
    "MPIV_WORKERS", "MPIV_BIND", "MPIV_STACK_SIZE", "MPIV_MAX_ULTS", "MPIV_LOG",
    "MPIV_PACKET_SIZE", "MPIV_PACKETS", "MPIV_RECV_DEPTH", "MPIV_EAGER_LIMIT",
    "MPIV_HT_BUCKETS", "MPIV_NET", "MPIV_SHM_CMA", "MPIV_BOOT_TIMEOUT", "MPIV_SERVER", "MPIV_SERVER_CORE", "MPIV_IBV_GID_INDEX",
    "MPIV_OFI_PROVIDER", "MPIV_IBV_DEVICE", "MPIV_LOCAL_SIZE", "MPIV_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_LOCALID",
};

static void clean_env(void)
{
    for (size_t i = 0; i < sizeof all_vars / sizeof *all_vars; i++)
        unsetenv(all_vars[i]);
}

START_TEST(strerror_names_every_code)
{
    for (int e = 0; e < MPIV_ERR_LAST_; e++) {
        const char *s = mpiv_strerror(e);
        ck_assert_ptr_nonnull(s);
        ck_assert_str_ne(s, "unknown error code");
    }
    ck_assert_str_eq(mpiv_strerror(-1), "unknown error code");
    ck_assert_str_eq(mpiv_strerror(MPIV_ERR_LAST_), "unknown error code");
    ck_assert_str_eq(mpiv_strerror(MPIV_ERR_TRUNCATE),
                     "message truncated: larger than the receive buffer");
}
END_TEST

START_TEST(err_records_detail)
{
    util_err_clear();
    ck_assert_str_eq(mpiv_error_detail(), "");
    ck_assert_int_eq(util_err(MPIV_ERR_RANK, "rank %d of %d", 7, 2), MPIV_ERR_RANK);
    ck_assert_str_eq(mpiv_error_detail(), "rank 7 of 2");
}
END_TEST

START_TEST(defaults_work_on_a_laptop)
{
    clean_env();
    struct util_config c;
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_ge(c.workers, 1);
    ck_assert_int_eq(c.stack_size, 64 << 10);
    ck_assert_int_eq(c.max_ults, 1 << 20);
    ck_assert_int_eq(c.packet_size, 8192);
    ck_assert_int_lt(c.recv_depth, c.packets);
    ck_assert_int_eq(c.net, UTIL_NET_AUTO);
    ck_assert_int_eq(c.boot_timeout, 60);
    ck_assert_int_eq(c.local_ranks, 1);
    ck_assert_str_eq(c.ofi_provider, "");
}
END_TEST

struct bad_case {
    const char *var, *val, *expect; /* expect: a substring of the detail */
};
static const struct bad_case bad_cases[] = {
    {"MPIV_WORKERS", "abc", "MPIV_WORKERS=abc: expected an integer from 0 to 4096"},
    {"MPIV_WORKERS", "-3", "MPIV_WORKERS=-3"},
    {"MPIV_WORKERS", "5000", "from 0 to 4096"},
    {"MPIV_WORKERS", "12x", "MPIV_WORKERS=12x"},
    {"MPIV_BIND", "socket", "expected one of core|none|workers"},
    {"MPIV_STACK_SIZE", "1K", "expected a size from 16384"},
    {"MPIV_STACK_SIZE", "64Q", "MPIV_STACK_SIZE=64Q"},
    {"MPIV_LOG", "loud", "none|error|warn|info|debug"},
    {"MPIV_NET", "tcp", "auto|ofi|ibv|shm"},
    {"MPIV_SHM_CMA", "maybe", "MPIV_SHM_CMA=maybe: expected one of off|on"},
    {"MPIV_SERVER", "poll", "MPIV_SERVER=poll: expected one of auto|thread|inline"},
    {"MPIV_HT_BUCKETS", "1000", "power of two"},
    {"MPIV_BOOT_TIMEOUT", "0", "MPIV_BOOT_TIMEOUT=0: expected an integer from 1 to 86400"},
    {"MPIV_RECV_DEPTH", "4096", "must be below MPIV_PACKETS"},
    /* the default packet (8 KiB) holds a 32-byte header and 8160 bytes */
    {"MPIV_EAGER_LIMIT", "16K", "MPIV_EAGER_LIMIT=16384 does not fit in a packet: with "
                                "MPIV_PACKET_SIZE=8192 (of which 32 bytes are the header) it "
                                "can be at most 8160"},
    {"MPIV_EAGER_LIMIT", "8161", "MPIV_EAGER_LIMIT=8161 does not fit"},
    {"MPIV_EAGER_LIMIT", "8K", "can be at most 8160"},
    {"MPIV_OFI_PROVIDER", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
     "expected 1 to 63 characters"},
    /* whitespace around a value is ignored, inside it or alone it is not */
    {"MPIV_STACK_SIZE", "64 K", "MPIV_STACK_SIZE=64 K: expected a size"},
    {"MPIV_WORKERS", "1 2", "MPIV_WORKERS=1 2: expected an integer"},
    {"MPIV_WORKERS", " ", "MPIV_WORKERS= : expected an integer"},
    {"MPIV_BIND", " ", "MPIV_BIND= : expected one of core|none|workers"},
    {"MPIV_NET", "o fi", "expected one of auto|ofi|ibv|shm"},
    {"MPIV_OFI_PROVIDER", "  ", "expected 1 to 63 characters"},
};

START_TEST(bad_values_name_the_variable)
{
    clean_env();
    const struct bad_case *b = &bad_cases[_i];
    setenv(b->var, b->val, 1);
    struct util_config c;
    util_err_clear();
    ck_assert_int_eq(util_config_load(&c), MPIV_ERR_CONFIG);
    ck_assert_msg(strstr(mpiv_error_detail(), b->expect) != NULL, "detail '%s' lacks '%s'",
                  mpiv_error_detail(), b->expect);
    unsetenv(b->var);
}
END_TEST

START_TEST(good_values_are_taken)
{
    clean_env();
    setenv("MPIV_WORKERS", "3", 1);
    setenv("MPIV_BIND", "NONE", 1);
    setenv("MPIV_STACK_SIZE", "1M", 1);
    setenv("MPIV_LOG", "debug", 1);
    setenv("MPIV_NET", "ibv", 1);
    setenv("MPIV_HT_BUCKETS", "4096", 1);
    setenv("MPIV_OFI_PROVIDER", "tcp;ofi_rxm", 1);
    setenv("MPIV_STACK_SIZE", "70000", 1); /* rounded up to pages */
    struct util_config c;
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.workers, 3);
    ck_assert_int_eq(c.bind, UTIL_BIND_NONE);
    ck_assert_int_eq(c.stack_size % 4096, 0);
    ck_assert_int_ge(c.stack_size, 70000);
    ck_assert_int_eq(c.log_level, UTIL_LOG_DEBUG);
    ck_assert_int_eq(c.net, UTIL_NET_IBV);
    ck_assert_int_eq(c.ht_buckets, 4096);
    ck_assert_str_eq(c.ofi_provider, "tcp;ofi_rxm");
    clean_env();
    util_log_level = UTIL_LOG_WARN;
}
END_TEST

/* Leading and trailing whitespace alike are ignored, for every kind of
 * value (a trailing one used to be rejected while a leading one was
 * taken). */
static void set_padded(const char *var, const char *val, const char *const pad[2])
{
    char v[64];
    snprintf(v, sizeof v, "%s%s%s", pad[0], val, pad[1]);
    setenv(var, v, 1);
}

START_TEST(surrounding_whitespace_is_ignored)
{
    static const char *const pad[][2] = {{" ", ""}, {"", " "}, {"\t ", " \n"}};
    for (size_t i = 0; i < sizeof pad / sizeof *pad; i++) {
        clean_env();
        set_padded("MPIV_WORKERS", "3", pad[i]);
        set_padded("MPIV_STACK_SIZE", "1M", pad[i]);
        set_padded("MPIV_PACKET_SIZE", "4KiB", pad[i]);
        set_padded("MPIV_EAGER_LIMIT", "4064", pad[i]);
        set_padded("MPIV_BIND", "none", pad[i]);
        set_padded("MPIV_NET", "shm", pad[i]);
        set_padded("MPIV_OFI_PROVIDER", "tcp;ofi_rxm", pad[i]);
        struct util_config c;
        ck_assert_msg(util_config_load(&c) == MPIV_SUCCESS, "padding %zu: %s", i,
                      mpiv_error_detail());
        ck_assert_int_eq(c.workers, 3);
        ck_assert_int_eq(c.stack_size, 1 << 20);
        ck_assert_int_eq(c.packet_size, 4096);
        ck_assert_int_eq(c.eager_limit, 4064); /* the largest a 4 KiB packet holds */
        ck_assert_int_eq(c.bind, UTIL_BIND_NONE);
        ck_assert_int_eq(c.net, UTIL_NET_SHM);
        ck_assert_str_eq(c.ofi_provider, "tcp;ofi_rxm");
        int64_t t;
        setenv("MPIV_BOOT_TIMEOUT", i ? "7 " : " 7", 1);
        ck_assert_int_eq(util_config_int("MPIV_BOOT_TIMEOUT", &t), MPIV_SUCCESS);
        ck_assert_int_eq(t, 7);
    }
    int64_t v;
    ck_assert_int_eq(util_parse_size(" 64K ", &v), 0);
    ck_assert_int_eq(v, 64 << 10);
    ck_assert_int_eq(util_parse_size("64K\n", &v), 0);
    ck_assert_int_eq(util_parse_size(" ", &v), -1);
    clean_env();
}
END_TEST

START_TEST(local_ranks_shrink_default_workers)
{
    clean_env();
    setenv("MPIV_LOCAL_SIZE", "64", 1);
    setenv("MPIV_LOCAL_RANK", "5", 1);
    struct util_config c;
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.local_ranks, 64);
    ck_assert_int_eq(c.local_rank, 5);
    ck_assert_int_eq(c.workers, 1);
    clean_env();
}
END_TEST

/* A nap is unchanged while a few threads nap at once, then lengthens in
 * proportion to how many do (their polls serve each other), up to a cap
 * (idle.c). */
START_TEST(naps_lengthen_when_many_nap)
{
    ck_assert_uint_eq(util_idle_nap_ns(64000, 1), 64000);
    ck_assert_uint_eq(util_idle_nap_ns(64000, UTIL_IDLE_SHARED_NAPPERS), 64000);
    ck_assert_uint_eq(util_idle_nap_ns(1000, 2 * UTIL_IDLE_SHARED_NAPPERS), 2000);
    ck_assert_uint_eq(util_idle_nap_ns(64000, 64 * UTIL_IDLE_SHARED_NAPPERS), 64 * 64000);
    ck_assert_uint_eq(util_idle_nap_ns(64000, 1024), UTIL_IDLE_SHARED_NAP_MAX_NS);
    ck_assert_uint_eq(util_idle_nap_ns(64000, 1u << 31), UTIL_IDLE_SHARED_NAP_MAX_NS);
    ck_assert_uint_eq(util_idle_nap_ns(UINT64_MAX / 2, 4 * UTIL_IDLE_SHARED_NAPPERS),
                      UTIL_IDLE_SHARED_NAP_MAX_NS); /* saturates */
}
END_TEST

/* Under srun the ranks on this host come from SLURM_TASKS_PER_NODE, which
 * every step has (SLURM_NTASKS_PER_NODE only with --ntasks-per-node):
 * `srun -n 4` on one node is 4 local ranks, not 1. */

START_TEST(slurm_tasks_per_node)
{
    clean_env();
    struct util_config c;
    setenv("SLURM_TASKS_PER_NODE", "4", 1);
    setenv("SLURM_LOCALID", "3", 1);
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.local_ranks, 4);
    ck_assert_int_eq(c.local_rank, 3);
    setenv("SLURM_TASKS_PER_NODE", "2(x3),1", 1);
    setenv("SLURM_LOCALID", "1", 1);
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.local_ranks, 2);
    ck_assert_int_eq(c.local_rank, 1);
    /* unreadable: the --ntasks-per-node variable, else one rank */
    setenv("SLURM_TASKS_PER_NODE", "x4", 1);
    setenv("SLURM_NTASKS_PER_NODE", "8", 1);
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.local_ranks, 8);
    unsetenv("SLURM_NTASKS_PER_NODE");
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.local_ranks, 1);
    clean_env();
}
END_TEST

/* MPIV_SERVER=auto: a server thread only where a rank has a core for it
 * beyond its workers; an explicit choice is kept whatever the cores. */
START_TEST(server_auto_needs_a_spare_core)
{
    clean_env();
    struct util_config c;
    /* more ranks than cores: a share of one core, one worker, no thread */
    setenv("MPIV_LOCAL_SIZE", "64", 1);
    setenv("MPIV_LOCAL_RANK", "5", 1);
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.rank_cores, 1);
    ck_assert_int_eq(c.server, UTIL_SERVER_INLINE);
    /* as many workers as the rank's cores: still no core for a thread */
    clean_env();
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    char w[32];
    snprintf(w, sizeof w, "%d", c.rank_cores);
    setenv("MPIV_WORKERS", w, 1);
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.server, UTIL_SERVER_INLINE);
    /* one worker on a rank of two or more cores: a thread */
    setenv("MPIV_WORKERS", "1", 1);
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.server, c.rank_cores >= 2 ? UTIL_SERVER_THREAD : UTIL_SERVER_INLINE);
    /* what the user says wins */
    setenv("MPIV_SERVER", "thread", 1);
    setenv("MPIV_LOCAL_SIZE", "64", 1);
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.server, UTIL_SERVER_THREAD);
    setenv("MPIV_SERVER", "inline", 1);
    unsetenv("MPIV_LOCAL_SIZE");
    ck_assert_int_eq(util_config_load(&c), MPIV_SUCCESS);
    ck_assert_int_eq(c.server, UTIL_SERVER_INLINE);
    clean_env();
}
END_TEST

START_TEST(sizes_parse)
{
    int64_t v;
    ck_assert_int_eq(util_parse_size("4096", &v), 0);
    ck_assert_int_eq(v, 4096);
    ck_assert_int_eq(util_parse_size("64K", &v), 0);
    ck_assert_int_eq(v, 65536);
    ck_assert_int_eq(util_parse_size("8MiB", &v), 0);
    ck_assert_int_eq(v, 8 << 20);
    ck_assert_int_eq(util_parse_size("2g", &v), 0);
    ck_assert_int_eq(v, 2LL << 30);
    ck_assert_int_eq(util_parse_size("", &v), -1);
    ck_assert_int_eq(util_parse_size("-1", &v), -1);
    ck_assert_int_eq(util_parse_size("1T", &v), -1);
    ck_assert_int_eq(util_parse_size("99999999999999999999", &v), -1);
    ck_assert_int_eq(util_parse_size("9223372036854775807G", &v), -1);
}
END_TEST

/* One variable read on its own (the bootstrap's way) is checked exactly as
 * the whole table is: same default, same range, same message. */
START_TEST(one_variable_parses_like_the_table)
{
    clean_env();
    int64_t v = 0;
    ck_assert_int_eq(util_config_int("MPIV_BOOT_TIMEOUT", &v), MPIV_SUCCESS);
    ck_assert_int_eq(v, 60);
    setenv("MPIV_BOOT_TIMEOUT", "7", 1);
    ck_assert_int_eq(util_config_int("MPIV_BOOT_TIMEOUT", &v), MPIV_SUCCESS);
    ck_assert_int_eq(v, 7);
    setenv("MPIV_BOOT_TIMEOUT", "0", 1);
    ck_assert_int_eq(util_config_int("MPIV_BOOT_TIMEOUT", &v), MPIV_ERR_CONFIG);
    ck_assert_str_eq(mpiv_error_detail(), "MPIV_BOOT_TIMEOUT=0: expected an integer from 1 to 86400");
    setenv("MPIV_BOOT_TIMEOUT", "12x", 1);
    ck_assert_int_eq(util_config_int("MPIV_BOOT_TIMEOUT", &v), MPIV_ERR_CONFIG);
    setenv("MPIV_STACK_SIZE", "1M", 1);
    ck_assert_int_eq(util_config_int("MPIV_STACK_SIZE", &v), MPIV_SUCCESS);
    ck_assert_int_eq(v, 1 << 20);
    /* strings and unknown names are not numeric variables */
    ck_assert_int_eq(util_config_int("MPIV_OFI_PROVIDER", &v), MPIV_ERR_INTERNAL);
    ck_assert_int_eq(util_config_int("MPIV_NO_SUCH_THING", &v), MPIV_ERR_INTERNAL);
    clean_env();
}
END_TEST

START_TEST(wtime_is_monotonic)
{
    double a = mpiv_wtime(), b = mpiv_wtime();
    ck_assert(b >= a);
    ck_assert(a > 0);
}
END_TEST

/* util_map_dense: zeroed, writable to its end, aligned for a 2 MiB page;
 * huge pages asked for past the head only (the "hg" flag of its mapping:
 * the advice, which does not depend on whether the kernel could find a
 * free 2 MiB page at the moment). */
START_TEST(dense_mapping_asks_for_huge_pages_past_its_head)
{
    ck_assert_ptr_null(util_map_dense(0, 0));
    ck_assert_ptr_null(util_map_dense(SIZE_MAX - 4096, 0));

    size_t len = 3 * UTIL_HUGE_PAGE + 100;
    unsigned char *p = util_map_dense(len, UTIL_HUGE_PAGE);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % UTIL_HUGE_PAGE, 0);
    for (size_t i = 0; i < len; i += 4096)
        ck_assert_uint_eq(p[i], 0);
    ck_assert_uint_eq(p[len - 1], 0);
    memset(p, 0xa5, len);
    ck_assert_uint_eq(p[len - 1], 0xa5);

    char flags[512];
    ck_assert_msg(vmflags_at(p, flags, sizeof flags), "no mapping holds %p", (void *)p);
    ck_assert_msg(!strstr(flags, " hg"), "the head asks for huge pages: %s", flags);
    ck_assert_msg(vmflags_at(p + UTIL_HUGE_PAGE, flags, sizeof flags),
                  "no mapping holds the part past the head");
    ck_assert_msg(strstr(flags, " hg"), "no huge-page advice past the head: %s", flags);
    util_unmap_dense(p, len);

    /* no head: the whole mapping asks */
    p = util_map_dense(UTIL_HUGE_PAGE, 0);
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(vmflags_at(p, flags, sizeof flags) && strstr(flags, " hg"),
                  "no huge-page advice: %s", flags);
    p[UTIL_HUGE_PAGE - 1] = 1;
    util_unmap_dense(p, UTIL_HUGE_PAGE);
    util_unmap_dense(NULL, 1); /* a no-op, as free(NULL) */
}
END_TEST

/* The protocol tests' data helpers (tests/common/test_data.h): fill
 * writes pattern() at every length, and data_mismatch names exactly the
 * first wrong byte wherever it is (inside a period compared by memcmp,
 * in the tail, before or after `from`). */
START_TEST(test_data_finds_every_wrong_byte)
{
    enum { MAX = 3 * PATTERN_PERIOD + 77 };
    static unsigned char b[MAX + 1];
    const size_t lens[] = {0, 1, 63, 256, 511, 512, 513, 700, MAX};
    const size_t froms[] = {0, 4, 255, 300};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        size_t n = lens[l];
        unsigned seed = (unsigned)(n * 7 + 3);
        memset(b, 0x5A, sizeof b);
        fill(b, n, seed);
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(b[i], pattern(i, seed));
        ck_assert_uint_eq(b[n], 0x5A); /* nothing past n */
        for (size_t f = 0; f < sizeof froms / sizeof froms[0]; f++) {
            size_t from = froms[f];
            ck_assert_uint_eq(data_mismatch(b, from, n, seed), from >= n ? from : n);
            for (size_t bad = 0; bad < n; bad++) {
                b[bad] ^= 0x10;
                size_t want = from >= n ? from : bad >= from ? bad : n;
                ck_assert_uint_eq(data_mismatch(b, from, n, seed), want);
                b[bad] ^= 0x10;
            }
        }
        if (n > 0)
            ck_assert_uint_eq(data_mismatch(b, 0, n, seed + 1), 0); /* another message */
    }
}
END_TEST

static Suite *util_suite(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, strerror_names_every_code);
    tcase_add_test(tc, err_records_detail);
    tcase_add_test(tc, defaults_work_on_a_laptop);
    tcase_add_loop_test(tc, bad_values_name_the_variable, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(tc, good_values_are_taken);
    tcase_add_test(tc, surrounding_whitespace_is_ignored);
    tcase_add_test(tc, local_ranks_shrink_default_workers);
    tcase_add_test(tc, slurm_tasks_per_node);
    tcase_add_test(tc, naps_lengthen_when_many_nap);
    tcase_add_test(tc, server_auto_needs_a_spare_core);
    tcase_add_test(tc, sizes_parse);
    tcase_add_test(tc, one_variable_parses_like_the_table);
    tcase_add_test(tc, wtime_is_monotonic);
    tcase_add_test(tc, dense_mapping_asks_for_huge_pages_past_its_head);
    tcase_add_test(tc, test_data_finds_every_wrong_byte);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = util_suite);
