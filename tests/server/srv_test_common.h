/*
 * srv_test_common.h — what the server tests share: bringing a server up
 * over the real network without ULTs (plain pthreads and handlers), and
 * waiting for a condition while driving progress, with a deadline.
 */
#ifndef MPIV_TESTS_SRV_TEST_COMMON_H
#define MPIV_TESTS_SRV_TEST_COMMON_H

#include <check.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "pktpool/pktpool.h"
#include "server/boot.h"
#include "server/server.h"
#include "server/srv_int.h"
#include "util/util.h"

static struct util_config st_cfg;
static struct pkt_pool *st_pool;
static int st_rank, st_size;

static void st_up(void)
{
    ck_assert_int_eq(util_config_load(&st_cfg), MPIV_SUCCESS);
    ck_assert_int_eq(pkt_pool_create(&st_pool, (size_t)st_cfg.packets,
                                     (size_t)st_cfg.packet_size, 1),
                     MPIV_SUCCESS);
    int rc = srv_init(&st_cfg, st_pool, &st_rank, &st_size);
    ck_assert_msg(rc == MPIV_SUCCESS, "srv_init: %s: %s", mpiv_strerror(rc),
                  mpiv_error_detail());
}

static void st_start(void)
{
    int rc = srv_start();
    ck_assert_msg(rc == MPIV_SUCCESS, "srv_start: %s: %s", mpiv_strerror(rc),
                  mpiv_error_detail());
}

static void st_down(void)
{
    int rc = srv_finalize();
    ck_assert_msg(rc == MPIV_SUCCESS, "srv_finalize: %s: %s", mpiv_strerror(rc),
                  mpiv_error_detail());
    pkt_pool_destroy(st_pool);
    st_pool = NULL;
}

/* Spins on `cond` driving progress from this thread too; fails the test
 * after `secs` seconds. */
#define ST_WAIT(cond, secs, ...)                                                \
    do {                                                                        \
        uint64_t st_deadline_ = util_now_ns() + (uint64_t)(secs) * 1000000000ull; \
        while (!(cond)) {                                                       \
            srv_progress();                                                     \
            sched_yield();                                                      \
            if (util_now_ns() > st_deadline_)                                   \
                ck_abort_msg(__VA_ARGS__);                                      \
        }                                                                       \
    } while (0)

/* A packet for a plain pthread, waiting (with progress) if the pool is dry. */
static pkt_t *st_get_pkt(void)
{
    pkt_t *p;
    uint64_t deadline = util_now_ns() + 10ull * 1000000000ull;
    while (!(p = pkt_get(st_pool, -1))) {
        srv_progress();
        sched_yield();
        if (util_now_ns() > deadline)
            ck_abort_msg("no packet came back to the pool in 10 s");
    }
    return p;
}

#endif
