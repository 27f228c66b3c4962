/*
 * srv_test_common.h — what the server tests share: bringing a server up
 * over the real network without ULTs (plain pthreads and handlers), and
 * waiting for a condition while driving progress, failing on a stall
 * rather than on the clock (tests/common/test_wait.h).
 */
#ifndef MPIV_TESTS_SRV_TEST_COMMON_H
#define MPIV_TESTS_SRV_TEST_COMMON_H

#include <check.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/test_wait.h"
#include "pktpool/pktpool.h"
#include "boot/boot.h"
#include "server/server.h"
#include "server/srv_int.h"
#include "util/util.h"

/* Seconds without any progress after which a wait fails (times
 * MPIV_TEST_TIMEOUT_SCALE). A loaded machine slows the tests down but
 * never stops every rank's progress for this long; a hang does. */
#define ST_STALL_S 30

static struct util_config st_cfg;
static struct pkt_pool *st_pool;
static int st_rank, st_size;

/* Called before a failing wait ends the test: stops and joins the test's
 * helper threads (they must not outlive the test that started them, nor
 * run into the next one or into teardown). */
static void (*st_on_fail)(void);

static void st_up(void)
{
    ck_assert_int_eq(util_config_load(&st_cfg), MPIV_SUCCESS);
    /* These tests check the server thread itself: a rank's handlers answer
     * while its main thread sits in a bootstrap barrier, which no waiting
     * thread progresses. So a thread, whatever MPIV_SERVER=auto would pick
     * on this machine's cores (inline progress is tested through the
     * protocol's tests, tests/proto). */
    st_cfg.server = UTIL_SERVER_THREAD;
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

/* Everything this rank's server has done: sends completed, packets
 * received, writes completed and announced. It grows while any traffic
 * moves, to or from this rank. */
static uint64_t st_net_events(void)
{
    struct srv_stats s;
    srv_get_stats(&s);
    return s.recvs + s.sends_done + s.writes_done + s.imms;
}

/* Main thread: stops the helper threads, then fails the test with a
 * helper's own failure if one was recorded, else with `why`. */
#define ST_FAIL(...)                                                            \
    do {                                                                        \
        if (st_on_fail)                                                         \
            st_on_fail();                                                       \
        st_on_fail = NULL;                                                      \
        TEST_THREAD_CHECK();                                                    \
        ck_abort_msg(__VA_ARGS__);                                              \
    } while (0)

/* Main thread: spins on `cond`, driving progress from this thread too.
 * `progress` is an integer expression that grows while the awaited work
 * advances; the wait fails (with the printf-style message) when it has not
 * changed for ST_STALL_S seconds, or as soon as a helper thread recorded a
 * failure. */
#define ST_WAIT(cond, progress, ...)                                            \
    do {                                                                        \
        struct test_stall st_stall_;                                            \
        test_stall_init(&st_stall_, ST_STALL_S, (uint64_t)(progress));          \
        while (!(cond)) {                                                       \
            srv_progress();                                                     \
            sched_yield();                                                      \
            if (test_thread_failed())                                           \
                ST_FAIL("a helper thread failed");                              \
            if (test_stall_stuck(&st_stall_, (uint64_t)(progress))) {           \
                fprintf(stderr, "rank %d: %s:%d: no progress for %.0f s\n",     \
                        st_rank, __FILE__, __LINE__, test_stall_idle_s(&st_stall_)); \
                ST_FAIL(__VA_ARGS__);                                           \
            }                                                                   \
        }                                                                       \
    } while (0)

/* A packet for a plain pthread, waiting (with progress) while the pool is
 * dry. Any thread: it does not end the test but returns NULL after
 * recording a failure (test_thread_fail) when neither the pool nor the
 * network moved for ST_STALL_S seconds, or when another thread failed. */
static pkt_t *st_try_get_pkt(void)
{
    pkt_t *p;
    struct test_stall stall;
    test_stall_init(&stall, ST_STALL_S, st_net_events());
    uint64_t next_look = test_now_ns();
    while (!(p = pkt_get(st_pool, -1))) {
        srv_progress();
        sched_yield();
        /* the server's counters are read under its progress lock: only
         * every few milliseconds, not on every spin of every thread */
        uint64_t now = test_now_ns();
        if (now < next_look)
            continue;
        next_look = now + 5000000;
        if (test_thread_failed())
            return NULL;
        if (test_stall_stuck(&stall, st_net_events())) {
            test_thread_fail("rank %d: no packet came back to the pool, and no network "
                             "progress, for %.0f s",
                             st_rank, test_stall_idle_s(&stall));
            return NULL;
        }
    }
    return p;
}

/* The same for the main thread: fails the test instead of returning NULL. */
static pkt_t *st_get_pkt(void)
{
    pkt_t *p = st_try_get_pkt();
    if (!p)
        ST_FAIL("no packet");
    return p;
}

#endif
