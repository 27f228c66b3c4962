/*
 * test_srv_mr.c — the registration cache against a fake backend that
 * counts registrations, in both modes: registrations that pin pages
 * (nothing unreferenced is kept) and registrations that only name virtual
 * addresses (a bounded LRU of unreferenced entries). Plus threads racing
 * on one buffer, and a cache over two backends (a mixed job).
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "server/srv_int.h"

static atomic_int live_regs, total_regs;
static bool fake_pins;
static bool fake_refuses;

struct fake_mr {
    void *buf;
    size_t len;
    uint64_t key;
};

static int fake_reg(struct srv_backend *be, void *buf, size_t len, srv_mr *mr, void **handle)
{
    (void)be;
    if (fake_refuses)
        return util_err(MPIV_ERR_NO_RESOURCES, "refused (test)");
    struct fake_mr *f = malloc(sizeof *f);
    f->buf = buf;
    f->len = len;
    f->key = (uint64_t)atomic_fetch_add(&total_regs, 1) + 1;
    atomic_fetch_add(&live_regs, 1);
    mr->rkey = f->key;
    mr->raddr = (uint64_t)(uintptr_t)buf;
    mr->base = (uintptr_t)buf;
    mr->desc = f;
    *handle = f;
    return MPIV_SUCCESS;
}

static void fake_dereg(struct srv_backend *be, void *handle)
{
    (void)be;
    atomic_fetch_sub(&live_regs, 1);
    free(handle);
}

static bool fake_mr_pins(struct srv_backend *be)
{
    (void)be;
    return fake_pins;
}

static const struct srv_backend_ops fake_ops = {
    .name = "fake", .mr_reg = fake_reg, .mr_dereg = fake_dereg, .mr_pins = fake_mr_pins};

static void start(bool pins)
{
    fake_pins = pins;
    atomic_store(&live_regs, 0);
    atomic_store(&total_regs, 0);
    struct srv_backend *be = (struct srv_backend *)&fake_ops;
    const struct srv_backend_ops *ops = &fake_ops;
    ck_assert_int_eq(srv_mr_cache_init(1, &be, &ops), MPIV_SUCCESS);
}

START_TEST(test_pinning_no_unreferenced)
{
    start(true);
    char *buf = malloc(4096);
    srv_mr *a, *b;
    ck_assert_int_eq(srv_mr_get(buf, 4096, &a), MPIV_SUCCESS);
    ck_assert_int_eq(srv_mr_get(buf, 4096, &b), MPIV_SUCCESS);
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(atomic_load(&total_regs), 1); /* two gets, one registration */
    srv_mr_put(a);
    ck_assert_int_eq(atomic_load(&live_regs), 1); /* still referenced */
    srv_mr_put(b);
    ck_assert_int_eq(atomic_load(&live_regs), 0); /* gone at refcount 0 */
    /* free and reuse: the next get registers anew, with a new key */
    free(buf);
    buf = malloc(4096);
    ck_assert_int_eq(srv_mr_get(buf, 4096, &a), MPIV_SUCCESS);
    ck_assert_int_eq(atomic_load(&total_regs), 2);
    ck_assert_uint_eq(a->rkey, 2);
    srv_mr_put(a);
    free(buf);
    struct srv_mr_stats st;
    srv_mr_cache_stats(&st);
    ck_assert_uint_eq(st.live, 0);
    srv_mr_cache_fini();
    ck_assert_int_eq(atomic_load(&live_regs), 0);
}
END_TEST

START_TEST(test_virtual_lru)
{
    start(false);
    char *buf = malloc(1 << 16);
    srv_mr *a;
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(srv_mr_get(buf, 1 << 16, &a), MPIV_SUCCESS);
        srv_mr_put(a);
    }
    ck_assert_int_eq(atomic_load(&total_regs), 1); /* kept while unreferenced */
    /* a longer buffer at the same address is not covered: a new entry */
    ck_assert_int_eq(srv_mr_get(buf, (1 << 16) + 1, &a), MPIV_SUCCESS);
    ck_assert_int_eq(atomic_load(&total_regs), 2);
    srv_mr_put(a);
    /* many distinct buffers: at most 64 unreferenced stay registered */
    enum { N = 300 };
    static char many[N][64];
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(srv_mr_get(many[i], 64, &a), MPIV_SUCCESS);
        srv_mr_put(a);
    }
    ck_assert_int_le(atomic_load(&live_regs), 64);
    /* the most recently put is still there: a hit */
    int before = atomic_load(&total_regs);
    ck_assert_int_eq(srv_mr_get(many[N - 1], 64, &a), MPIV_SUCCESS);
    ck_assert_int_eq(atomic_load(&total_regs), before);
    srv_mr_put(a);
    /* the oldest was evicted: registers again */
    ck_assert_int_eq(srv_mr_get(many[0], 64, &a), MPIV_SUCCESS);
    ck_assert_int_eq(atomic_load(&total_regs), before + 1);
    srv_mr_put(a);
    srv_mr_cache_fini();
    ck_assert_int_eq(atomic_load(&live_regs), 0);
    free(buf);
}
END_TEST

static char shared_buf[1 << 12];

static void *racer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        srv_mr *m;
        if (srv_mr_get(shared_buf, sizeof shared_buf, &m) != MPIV_SUCCESS ||
            m->base != (uintptr_t)shared_buf)
            return (void *)1;
        srv_mr_put(m);
    }
    return NULL;
}

START_TEST(test_threads_one_buffer)
{
    for (int mode = 0; mode < 2; mode++) {
        start(mode == 0);
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            pthread_create(&t[i], NULL, racer, NULL);
        for (int i = 0; i < 4; i++) {
            void *r;
            pthread_join(t[i], &r);
            ck_assert_ptr_null(r);
        }
        struct srv_mr_stats st;
        srv_mr_cache_stats(&st);
        ck_assert_uint_eq(st.regs, st.deregs + st.live);
        srv_mr_cache_fini();
        ck_assert_int_eq(atomic_load(&live_regs), 0);
    }
}
END_TEST

START_TEST(test_bad_args)
{
    start(true);
    srv_mr *m;
    ck_assert_int_eq(srv_mr_get(NULL, 10, &m), MPIV_ERR_ARG);
    ck_assert_int_eq(srv_mr_get(shared_buf, 0, &m), MPIV_SUCCESS); /* zero bytes: fine */
    srv_mr_put(m);
    srv_mr_put(NULL);
    srv_mr_cache_fini();
    ck_assert_int_eq(srv_mr_get(shared_buf, 10, &m), MPIV_ERR_STATE);
}
END_TEST

/* A second backend for the mixed cache (mr.c M1-M3): shm's part, which
 * pins nothing but says it does, and can be told to refuse. */
static atomic_int other_live;
static bool other_refuses;

static int other_reg(struct srv_backend *be, void *buf, size_t len, srv_mr *mr, void **handle)
{
    (void)be;
    (void)len;
    if (other_refuses)
        return util_err(MPIV_ERR_NO_RESOURCES, "refused (test)");
    atomic_fetch_add(&other_live, 1);
    mr->rkey = 0xdead; /* must not be what the cache hands out (M2) */
    mr->raddr = (uint64_t)(uintptr_t)buf;
    mr->base = (uintptr_t)buf;
    mr->desc = NULL;
    *handle = buf;
    return MPIV_SUCCESS;
}

static void other_dereg(struct srv_backend *be, void *handle)
{
    (void)be;
    (void)handle;
    atomic_fetch_sub(&other_live, 1);
}

static bool other_pins(struct srv_backend *be)
{
    (void)be;
    return true;
}

static const struct srv_backend_ops other_ops = {
    .name = "other", .mr_reg = other_reg, .mr_dereg = other_dereg, .mr_pins = other_pins};

/* Two backends: each registration is made with both and undone with both
 * (M1), the handle is the last backend's (M2), nothing unreferenced is
 * kept when one pins (M3), and a refusal by one undoes the other's. */
START_TEST(test_two_backends)
{
    fake_pins = false; /* alone it would keep unreferenced entries */
    atomic_store(&live_regs, 0);
    atomic_store(&total_regs, 0);
    atomic_store(&other_live, 0);
    other_refuses = false;
    struct srv_backend *be[2] = {(struct srv_backend *)&other_ops,
                                 (struct srv_backend *)&fake_ops};
    const struct srv_backend_ops *ops[2] = {&other_ops, &fake_ops};
    ck_assert_int_eq(srv_mr_cache_init(2, be, ops), MPIV_SUCCESS);
    char *buf = malloc(4096);
    srv_mr *a;
    ck_assert_int_eq(srv_mr_get(buf, 4096, &a), MPIV_SUCCESS);
    ck_assert_int_eq(atomic_load(&live_regs), 1);
    ck_assert_int_eq(atomic_load(&other_live), 1);
    ck_assert_uint_eq(a->rkey, 1); /* the fake's first key, not 0xdead */
    ck_assert_ptr_nonnull(a->desc);
    ck_assert_uint_eq(a->raddr, (uint64_t)(uintptr_t)buf);
    srv_mr_put(a);
    ck_assert_int_eq(atomic_load(&live_regs), 0);
    ck_assert_int_eq(atomic_load(&other_live), 0);
    other_refuses = true; /* the first refuses: nothing made */
    ck_assert_int_eq(srv_mr_get(buf, 4096, &a), MPIV_ERR_NO_RESOURCES);
    ck_assert_int_eq(atomic_load(&live_regs), 0);
    ck_assert_int_eq(atomic_load(&other_live), 0);
    other_refuses = false;
    fake_refuses = true; /* the last refuses: the first's is undone */
    ck_assert_int_eq(srv_mr_get(buf, 4096, &a), MPIV_ERR_NO_RESOURCES);
    ck_assert_int_eq(atomic_load(&live_regs), 0);
    ck_assert_int_eq(atomic_load(&other_live), 0);
    fake_refuses = false;
    srv_mr_cache_fini();
    free(buf);
    ck_assert_int_eq(srv_mr_cache_init(3, be, ops), MPIV_ERR_ARG);
}
END_TEST

static Suite *srv_mr_suite(void)
{
    Suite *s = suite_create("server_mr");
    TCase *tc = tcase_create("mr");
    tcase_add_test(tc, test_pinning_no_unreferenced);
    tcase_add_test(tc, test_virtual_lru);
    tcase_add_test(tc, test_threads_one_buffer);
    tcase_add_test(tc, test_bad_args);
    tcase_add_test(tc, test_two_backends);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = srv_mr_suite);
