/* Unit tests for src/pktpool: layout, LIFO reuse, spill, steal, exhaustion,
 * and (debug builds) the ownership check. Single-threaded; the concurrent
 * checks are in test_pktpool_stress.c. */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "common/smaps.h"
#include "pktpool/pktpool.h"

START_TEST(create_rejects_bad_args)
{
    struct pkt_pool *p = (void *)1;
    ck_assert_int_eq(pkt_pool_create(&p, 0, 64, 1), MPIV_ERR_ARG);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(pkt_pool_create(&p, 8, 64, -1), MPIV_ERR_ARG);
    ck_assert_int_eq(pkt_pool_create(NULL, 8, 64, 1), MPIV_ERR_ARG);
    pkt_pool_destroy(NULL);
}
END_TEST

START_TEST(region_layout)
{
    struct pkt_pool *pool;
    ck_assert_int_eq(pkt_pool_create(&pool, 10, 100, 2), MPIV_SUCCESS);
    void *base;
    size_t len;
    pkt_pool_region(pool, &base, &len);
    ck_assert_uint_eq((uintptr_t)base % 64, 0);
    ck_assert_uint_eq(pkt_stride(pool), 64 + 128);
    ck_assert_uint_eq(len, 10 * pkt_stride(pool));
    ck_assert_uint_eq(pkt_count(pool), 10);
    ck_assert_uint_eq(pkt_data_size(pool), 100);
    /* a header is written when its packet is first handed out (P5) */
    pkt_t *out[10];
    for (uint32_t i = 0; i < 10; i++)
        ck_assert_ptr_nonnull(out[i] = pkt_get(pool, 0));
    for (uint32_t i = 0; i < 10; i++) {
        pkt_t *p = pkt_by_index(pool, i);
        ck_assert_ptr_eq(p, out[i]); /* first gets walk the region forwards */
        ck_assert_ptr_eq(p, (char *)base + i * pkt_stride(pool));
        ck_assert_uint_eq(p->idx, i);
        ck_assert_uint_eq((uintptr_t)p->data % 64, 0);
        ck_assert_ptr_eq(p->data, (char *)p + 64);
    }
    ck_assert_ptr_null(pkt_by_index(pool, 10));
    for (uint32_t i = 0; i < 10; i++)
        pkt_put(pool, 0, out[i]);
    pkt_pool_destroy(pool);

    /* data sizes that are already multiples of 64, and 0 */
    ck_assert_int_eq(pkt_pool_create(&pool, 3, 8192, 1), MPIV_SUCCESS);
    ck_assert_uint_eq(pkt_stride(pool), 64 + 8192);
    pkt_pool_destroy(pool);
    ck_assert_int_eq(pkt_pool_create(&pool, 3, 0, 0), MPIV_SUCCESS);
    ck_assert_uint_eq(pkt_stride(pool), 64);
    pkt_pool_destroy(pool);
}
END_TEST

/* P5: create commits none of the region (the default pool: 1024 packets
 * of 8 KiB, one page per header if written at create); packets handed out
 * for the first time, and again after a put, have their own index and
 * are owned by their getter. */
START_TEST(create_commits_no_headers)
{
    struct pkt_pool *pool;
    assert_commits_below(1024, pkt_pool_create(&pool, 1024, 8192, 1) == MPIV_SUCCESS,
                         "a pool of 1024 packets");
    pkt_t *a = pkt_get(pool, 0), *b = pkt_get(pool, -1);
    ck_assert_ptr_eq(a, pkt_by_index(pool, 0));
    ck_assert_ptr_eq(b, pkt_by_index(pool, 1));
    ck_assert_uint_eq(b->idx, 1);
    ck_assert_int_eq(b->peer, -1);
    pkt_put(pool, 0, a); /* a goes to worker 0's deque, b to the stack */
    pkt_put(pool, -1, b);
    ck_assert_ptr_eq(pkt_get(pool, -1), b); /* from the stack: not fresh */
    ck_assert_uint_eq(b->idx, 1);
    ck_assert_ptr_eq(pkt_get(pool, -1), pkt_by_index(pool, 2)); /* fresh */
    ck_assert_uint_eq(pkt_by_index(pool, 2)->idx, 2);
#ifndef NDEBUG
    ck_assert_int_eq(b->owner, -1);
#endif
    pkt_put(pool, -1, pkt_by_index(pool, 2));
    pkt_put(pool, -1, b);
    pkt_pool_destroy(pool);
}
END_TEST

/* Every packet comes out exactly once, then the pool is empty (NULL). */
static void drain_all(struct pkt_pool *pool, int worker, size_t n)
{
    char *seen = calloc(n, 1);
    for (size_t i = 0; i < n; i++) {
        pkt_t *p = worker == -2 ? pkt_get_server(pool) : pkt_get(pool, worker);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_lt(p->idx, n);
        ck_assert_int_eq(seen[p->idx], 0);
        seen[p->idx] = 1;
    }
    ck_assert_ptr_null(worker == -2 ? pkt_get_server(pool) : pkt_get(pool, worker));
    for (size_t i = 0; i < n; i++) {
        pkt_t *p = pkt_by_index(pool, (uint32_t)i);
        if (worker == -2)
            pkt_put_server(pool, p);
        else
            pkt_put(pool, worker, p);
    }
    free(seen);
}

START_TEST(get_until_empty_returns_null)
{
    struct pkt_pool *pool;
    ck_assert_int_eq(pkt_pool_create(&pool, 100, 64, 2), MPIV_SUCCESS);
    drain_all(pool, 0, 100);   /* fills worker 0's deque, spills the rest */
    drain_all(pool, 1, 100);   /* worker 1 finds them shared and in 0's deque */
    drain_all(pool, -1, 100);  /* a plain pthread */
    drain_all(pool, -2, 100);  /* the server */
    pkt_pool_destroy(pool);
}
END_TEST

/* A worker gets back the packet it returned last (it is warm in its
 * cache), even after other traffic went through the shared stack. */
START_TEST(lifo_reuse)
{
    struct pkt_pool *pool;
    ck_assert_int_eq(pkt_pool_create(&pool, 64, 256, 2), MPIV_SUCCESS);
    pkt_t *a = pkt_get(pool, 0), *b = pkt_get(pool, 0);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_ne(a, b);
    pkt_put(pool, 0, a);
    pkt_put(pool, 0, b);
    ck_assert_ptr_eq(pkt_get(pool, 0), b);
    pkt_t *s = pkt_get_server(pool); /* shared, not 0's deque */
    ck_assert_ptr_ne(s, a);
    pkt_put_server(pool, s);
    ck_assert_ptr_eq(pkt_get(pool, 0), a);
    pkt_put(pool, 0, a);
    pkt_put(pool, 0, b);
    /* worker 1 does not see worker 0's packets while shared has some */
    pkt_t *c = pkt_get(pool, 1);
    ck_assert_ptr_ne(c, a);
    ck_assert_ptr_ne(c, b);
    pkt_put(pool, 1, c);
    ck_assert_ptr_eq(pkt_get(pool, 1), c);
    pkt_put(pool, 1, c);
    pkt_pool_destroy(pool);
}
END_TEST

/* A full deque spills its bottom (least recently returned) packet to the
 * shared stack, where the server finds it first. */
START_TEST(full_deque_spills_bottom)
{
    struct pkt_pool *pool;
    enum { N = 200 };
    ck_assert_int_eq(pkt_pool_create(&pool, N, 64, 1), MPIV_SUCCESS);
    pkt_t *held[N];
    for (int i = 0; i < N; i++)
        ck_assert_ptr_nonnull(held[i] = pkt_get_server(pool));
    ck_assert_ptr_null(pkt_get(pool, 0));
    /* worker 0 returns them in order: the deque keeps the newest */
    for (int i = 0; i < N; i++)
        pkt_put(pool, 0, held[i]);
    /* server: the shared stack holds the spilled oldest, most recent spill
     * on top; held[0] was spilled first */
    pkt_t *p = pkt_get_server(pool);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_lt(p->idx, N);
    ck_assert_ptr_ne(p, held[N - 1]);
    int spilled = 1;
    pkt_t *q;
    pkt_t *got[N];
    got[0] = p;
    /* the newest packets are still in worker 0's deque: the worker's own
     * gets return them newest first */
    pkt_t *w = pkt_get(pool, 0);
    ck_assert_ptr_eq(w, held[N - 1]);
    pkt_put(pool, 0, w);
    while ((q = pkt_get_server(pool)) != NULL)
        got[spilled++] = q;
    ck_assert_int_eq(spilled, N);
    /* the last packets the server got came from the deque's bottom by
     * stealing, oldest first; the very last is the newest one */
    ck_assert_ptr_eq(got[N - 1], held[N - 1]);
    for (int i = 0; i < N; i++)
        pkt_put_server(pool, got[i]);
    pkt_pool_destroy(pool);
}
END_TEST

/* The server steals from a worker's bottom when the shared stack is empty;
 * a worker with an empty deque and an empty shared stack steals too. */
START_TEST(steal_when_shared_empty)
{
    struct pkt_pool *pool;
    ck_assert_int_eq(pkt_pool_create(&pool, 4, 64, 3), MPIV_SUCCESS);
    pkt_t *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = pkt_get_server(pool);
    ck_assert_ptr_null(pkt_get_server(pool));
    pkt_put(pool, 2, p[0]);
    pkt_put(pool, 2, p[1]);
    ck_assert_ptr_eq(pkt_get_server(pool), p[0]); /* bottom = oldest */
    ck_assert_ptr_eq(pkt_get(pool, 1), p[1]);     /* worker 1 steals */
    ck_assert_ptr_null(pkt_get(pool, 0));
    ck_assert_ptr_null(pkt_get(pool, -1));
    for (int i = 0; i < 4; i++)
        pkt_put(pool, -1, p[i]);
    pkt_pool_destroy(pool);
}
END_TEST

/* Data written into a packet survives the trip through the pool and back
 * (the pool never writes into data[]). */
START_TEST(payload_untouched)
{
    struct pkt_pool *pool;
    ck_assert_int_eq(pkt_pool_create(&pool, 8, 512, 1), MPIV_SUCCESS);
    pkt_t *p = pkt_get(pool, 0);
    memset(p->data, 0xab, 512);
    pkt_put(pool, 0, p);
    p = pkt_get(pool, 0);
    for (int i = 0; i < 512; i++)
        if (p->data[i] != 0xab)
            ck_abort_msg("byte %d changed", i);
    pkt_put(pool, 0, p);
    pkt_pool_destroy(pool);
}
END_TEST

#ifndef NDEBUG
/* Ownership check: these abort with a message (debug builds only). */
START_TEST(double_put_aborts)
{
    struct pkt_pool *pool;
    ck_assert_int_eq(pkt_pool_create(&pool, 4, 64, 1), MPIV_SUCCESS);
    pkt_t *p = pkt_get(pool, 0);
    pkt_put(pool, 0, p);
    pkt_put(pool, 0, p);
}
END_TEST

START_TEST(put_of_free_packet_aborts)
{
    struct pkt_pool *pool;
    ck_assert_int_eq(pkt_pool_create(&pool, 4, 64, 1), MPIV_SUCCESS);
    pkt_put_server(pool, pkt_by_index(pool, 2));
}
END_TEST

START_TEST(put_of_foreign_pointer_aborts)
{
    struct pkt_pool *pool;
    ck_assert_int_eq(pkt_pool_create(&pool, 4, 64, 1), MPIV_SUCCESS);
    static _Alignas(64) unsigned char fake[128];
    pkt_put(pool, 0, (pkt_t *)fake);
}
END_TEST

START_TEST(owner_records_holder)
{
    struct pkt_pool *pool;
    ck_assert_int_eq(pkt_pool_create(&pool, 4, 64, 2), MPIV_SUCCESS);
    pkt_t *a = pkt_get(pool, 1), *b = pkt_get(pool, -1), *c = pkt_get_server(pool);
    ck_assert_int_eq(a->owner, 1);
    ck_assert_int_eq(b->owner, -1);
    ck_assert_int_eq(c->owner, -2);
    /* a packet may be returned by someone else than its getter (a send
     * packet comes back through the server) */
    pkt_put_server(pool, a);
    pkt_put(pool, 0, b);
    pkt_put(pool, 1, c);
    pkt_pool_destroy(pool);
}
END_TEST
#endif

static Suite *pktpool_suite(void)
{
    Suite *s = suite_create("pktpool");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, create_rejects_bad_args);
    tcase_add_test(tc, region_layout);
    tcase_add_test(tc, create_commits_no_headers);
    tcase_add_test(tc, get_until_empty_returns_null);
    tcase_add_test(tc, lifo_reuse);
    tcase_add_test(tc, full_deque_spills_bottom);
    tcase_add_test(tc, steal_when_shared_empty);
    tcase_add_test(tc, payload_untouched);
    suite_add_tcase(s, tc);
#ifndef NDEBUG
    TCase *own = tcase_create("ownership");
    tcase_add_test_raise_signal(own, double_put_aborts, SIGABRT);
    tcase_add_test_raise_signal(own, put_of_free_packet_aborts, SIGABRT);
    tcase_add_test_raise_signal(own, put_of_foreign_pointer_aborts, SIGABRT);
    tcase_add_test(own, owner_records_holder);
    suite_add_tcase(s, own);
#endif
    return s;
}

CHECK_MAIN(.suite = pktpool_suite);
