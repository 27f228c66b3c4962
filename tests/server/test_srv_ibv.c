/*
 * test_srv_ibv.c — everything of the verbs backend that needs no device:
 * connection blobs, GID and MTU choice, send-queue credits with selective
 * signalling, what a failed completion means for its peer; and
 * MPIV_NET=ibv / auto on a machine without a device.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "common/check_main.h"
#include "pktpool/pktpool.h"
#include "server/ibv_util.h"
#include "server/server.h"
#include "server/srv_int.h"

START_TEST(test_qpinfo_roundtrip)
{
    struct srv_ibv_qpinfo a = {.qpn = 0xabcdef, .psn = 0x123456, .lid = 0xbeef, .mtu = 3}, b;
    for (int i = 0; i < 16; i++)
        a.gid[i] = (uint8_t)(0xf0 + i);
    unsigned char w[SRV_IBV_QPINFO_WIRE];
    srv_ibv_qpinfo_pack(&a, w);
    ck_assert_int_eq(w[0], SRV_IBV_QPINFO_MAGIC);
    ck_assert_int_eq(w[4], 0xef); /* little-endian on every host */
    ck_assert_int_eq(srv_ibv_qpinfo_unpack(w, &b), 0);
    ck_assert_uint_eq(b.qpn, a.qpn);
    ck_assert_uint_eq(b.psn, a.psn);
    ck_assert_uint_eq(b.lid, a.lid);
    ck_assert_uint_eq(b.mtu, a.mtu);
    ck_assert_mem_eq(b.gid, a.gid, 16);

    unsigned char bad[SRV_IBV_QPINFO_WIRE];
    memcpy(bad, w, sizeof bad);
    bad[0] = 0;
    ck_assert_int_eq(srv_ibv_qpinfo_unpack(bad, &b), -1); /* magic */
    memcpy(bad, w, sizeof bad);
    bad[1] = 9;
    ck_assert_int_eq(srv_ibv_qpinfo_unpack(bad, &b), -1); /* mtu */
    memcpy(bad, w, sizeof bad);
    bad[7] = 1;
    ck_assert_int_eq(srv_ibv_qpinfo_unpack(bad, &b), -1); /* qpn > 24 bits */
    memcpy(bad, w, sizeof bad);
    bad[31] = 1;
    ck_assert_int_eq(srv_ibv_qpinfo_unpack(bad, &b), -1); /* trailing junk */
    memset(bad, 0, sizeof bad);
    ck_assert_int_eq(srv_ibv_qpinfo_unpack(bad, &b), -1); /* a missing blob */
}
END_TEST

static void row(struct srv_ibv_gid_row *r, uint32_t idx, uint32_t type, const char *kind)
{
    memset(r, 0, sizeof *r);
    r->index = idx;
    r->type = type;
    if (!strcmp(kind, "v4")) { /* ::ffff:10.0.2.15 */
        r->gid[10] = r->gid[11] = 0xff;
        r->gid[12] = 10, r->gid[13] = 0, r->gid[14] = 2, r->gid[15] = 15;
    } else if (!strcmp(kind, "ll")) { /* fe80::1 */
        r->gid[0] = 0xfe, r->gid[1] = 0x80, r->gid[15] = 1;
    }
}

START_TEST(test_gid_pick)
{
    enum { IB = 0, V1 = 1, V2 = 2 };
    struct srv_ibv_gid_row t[5];
    /* rxe-like: 0 = link-local v1, 1 = link-local v2, 2 = IPv4 v1, 3 = IPv4 v2 */
    row(&t[0], 0, V1, "ll");
    row(&t[1], 1, V2, "ll");
    row(&t[2], 2, V1, "v4");
    row(&t[3], 3, V2, "v4");
    ck_assert_int_eq(srv_ibv_pick_gid(t, 4, false, -1), 3);
    /* the soft-roce notes' table: index 1 is the IPv4 v2 one */
    row(&t[0], 0, V2, "ll");
    row(&t[1], 1, V2, "v4");
    ck_assert_int_eq(srv_ibv_pick_gid(t, 2, false, -1), 1);
    /* no IPv4: the first v2 */
    row(&t[0], 0, V1, "ll");
    row(&t[1], 1, V2, "ll");
    ck_assert_int_eq(srv_ibv_pick_gid(t, 2, false, -1), 1);
    /* only v1: nothing */
    ck_assert_int_eq(srv_ibv_pick_gid(t, 1, false, -1), -1);
    /* InfiniBand: index 0 */
    row(&t[0], 0, IB, "ll");
    ck_assert_int_eq(srv_ibv_pick_gid(t, 1, true, -1), 0);
    ck_assert_int_eq(srv_ibv_pick_gid(t, 0, true, -1), -1);
    /* explicit index: honoured if present and not zero */
    row(&t[0], 0, V1, "ll");
    row(&t[1], 5, V1, "v4");
    row(&t[2], 6, V2, "zero");
    ck_assert_int_eq(srv_ibv_pick_gid(t, 3, false, 5), 5);
    ck_assert_int_eq(srv_ibv_pick_gid(t, 3, false, 6), -1);
    ck_assert_int_eq(srv_ibv_pick_gid(t, 3, false, 7), -1);
    /* sparse tables (ibv_query_gid_table skips empty rows) */
    row(&t[0], 4, V2, "ll");
    row(&t[1], 9, V2, "v4");
    ck_assert_int_eq(srv_ibv_pick_gid(t, 2, false, -1), 9);
}
END_TEST

START_TEST(test_mtu)
{
    ck_assert_int_eq(srv_ibv_mtu_bytes(1), 256);
    ck_assert_int_eq(srv_ibv_mtu_bytes(3), 1024);
    ck_assert_int_eq(srv_ibv_mtu_bytes(5), 4096);
    ck_assert_int_eq(srv_ibv_mtu_bytes(0), 0);
    ck_assert_int_eq(srv_ibv_mtu_bytes(6), 0);
    ck_assert_int_eq(srv_ibv_mtu_enum(2048), 4);
    ck_assert_int_eq(srv_ibv_mtu_enum(1500), -1);
    for (int e = 1; e <= 5; e++)
        ck_assert_int_eq(srv_ibv_mtu_enum(srv_ibv_mtu_bytes(e)), e);
    ck_assert_int_eq(srv_ibv_path_mtu(5, 3), 3); /* rxe (1024) to a 4096 port */
    ck_assert_int_eq(srv_ibv_path_mtu(2, 4), 2);
}
END_TEST

START_TEST(test_sq_signalling)
{
    struct srv_ibv_sq sq;
    srv_ibv_sq_init(&sq, 16, 4);
    /* every 4th WR is signalled and carries its batch */
    int sig = 0;
    for (int i = 0; i < 8; i++) {
        int b = srv_ibv_sq_reserve(&sq, false);
        if (i % 4 == 3) {
            ck_assert_int_eq(b, 4);
            sig++;
        } else {
            ck_assert_int_eq(b, 0);
        }
    }
    ck_assert_int_eq(sig, 2);
    ck_assert_uint_eq(sq.free, 8);
    /* a forced signal carries what is pending */
    ck_assert_int_eq(srv_ibv_sq_reserve(&sq, false), 0);
    ck_assert_int_eq(srv_ibv_sq_reserve(&sq, true), 2);
    srv_ibv_sq_complete(&sq, 4);
    srv_ibv_sq_complete(&sq, 4);
    srv_ibv_sq_complete(&sq, 2);
    ck_assert_uint_eq(sq.free, 16);
    /* interval is capped at depth / 2 */
    srv_ibv_sq_init(&sq, 8, 100);
    ck_assert_uint_eq(sq.interval, 4);
}
END_TEST

/* Simulates a QP: posts until full, completes signalled WRs in order,
 * and checks that the queue never wedges (full with nothing signalled in
 * flight) and that the credits always add up. */
START_TEST(test_sq_never_wedges)
{
    for (uint32_t depth = 2; depth <= 64; depth *= 2) {
        for (uint32_t interval = 1; interval <= depth; interval++) {
            struct srv_ibv_sq sq;
            srv_ibv_sq_init(&sq, depth, interval);
            uint32_t inflight[128]; /* batches of signalled WRs, FIFO */
            size_t head = 0, tail = 0;
            unsigned seed = depth * 131 + interval;
            uint32_t posted = 0, returned = 0;
            for (int step = 0; step < 5000; step++) {
                seed = seed * 1103515245u + 12345u;
                bool post = (seed >> 16) % 3 != 0;
                if (post) {
                    int b = srv_ibv_sq_reserve(&sq, ((seed >> 8) & 15) == 0);
                    if (b < 0) {
                        if (head == tail)
                            ck_abort_msg("depth %u interval %u: full with no signalled WR "
                                         "in flight", depth, interval);
                        continue;
                    }
                    posted++;
                    if (b > 0)
                        inflight[tail++ % 128] = (uint32_t)b;
                } else if (head != tail) {
                    uint32_t b = inflight[head++ % 128];
                    returned += b;
                    srv_ibv_sq_complete(&sq, b);
                }
                if (sq.free + (posted - returned) != depth)
                    ck_abort_msg("depth %u interval %u: credits do not add up", depth,
                                 interval);
            }
        }
    }
}
END_TEST

START_TEST(test_sq_unreserve)
{
    struct srv_ibv_sq sq;
    srv_ibv_sq_init(&sq, 8, 4);
    uint32_t saved = sq.unsignaled;
    int b = srv_ibv_sq_reserve(&sq, false);
    srv_ibv_sq_unreserve(&sq, b, saved);
    ck_assert_uint_eq(sq.free, 8);
    ck_assert_uint_eq(sq.unsignaled, 0);
    srv_ibv_sq_reserve(&sq, false);
    saved = sq.unsignaled;
    b = srv_ibv_sq_reserve(&sq, true);
    ck_assert_int_eq(b, 2);
    srv_ibv_sq_unreserve(&sq, b, saved);
    ck_assert_uint_eq(sq.unsignaled, 1);
    ck_assert_uint_eq(sq.free, 7);
}
END_TEST

START_TEST(test_default_core)
{
    ck_assert_int_eq(srv_default_core(2, 1, 0), 1);
    ck_assert_int_eq(srv_default_core(2, 2, 0), 0);
    ck_assert_int_eq(srv_default_core(2, 2, 1), 1);
    ck_assert_int_eq(srv_default_core(8, 2, 0), 3);
    ck_assert_int_eq(srv_default_core(8, 2, 1), 7);
    ck_assert_int_eq(srv_default_core(2, 4, 3), 1); /* more ranks than cores */
    ck_assert_int_eq(srv_default_core(0, 0, 0), 0);
}
END_TEST

/* What an RC QP reports when a transfer fails: the failing WR completes
 * with its status (even unsignalled), everything behind it is flushed. The
 * peer keeps the first status; real failures are MPIV_ERR_NET, flushes
 * MPIV_ERR_PEER. */
START_TEST(test_wc_errors)
{
    atomic_int peer = 0;
    bool first = true;
    ck_assert_int_eq(srv_ibv_wc_error(IBV_WC_SUCCESS, &peer, &first), MPIV_SUCCESS);
    ck_assert(!first);
    ck_assert_int_eq(atomic_load(&peer), 0);

    /* an unsignalled send runs out of retries: the first failure */
    ck_assert_int_eq(srv_ibv_wc_error(IBV_WC_RETRY_EXC_ERR, &peer, &first), MPIV_ERR_NET);
    ck_assert(first);
    ck_assert_int_eq(atomic_load(&peer), IBV_WC_RETRY_EXC_ERR);
    /* the signalled send behind it is flushed: the cause stays */
    ck_assert_int_eq(srv_ibv_wc_error(IBV_WC_WR_FLUSH_ERR, &peer, &first), MPIV_ERR_PEER);
    ck_assert(!first);
    ck_assert_int_eq(atomic_load(&peer), IBV_WC_RETRY_EXC_ERR);
    /* a second real failure is reported but is not the first */
    ck_assert_int_eq(srv_ibv_wc_error(IBV_WC_REM_ACCESS_ERR, &peer, &first), MPIV_ERR_NET);
    ck_assert(!first);
    ck_assert_int_eq(atomic_load(&peer), IBV_WC_RETRY_EXC_ERR);
    /* a late success does not revive the peer */
    ck_assert_int_eq(srv_ibv_wc_error(IBV_WC_SUCCESS, &peer, &first), MPIV_SUCCESS);
    ck_assert_int_eq(atomic_load(&peer), IBV_WC_RETRY_EXC_ERR);

    /* a QP broken by something else: the first news is a flush */
    atomic_int other = 0;
    ck_assert_int_eq(srv_ibv_wc_error(IBV_WC_WR_FLUSH_ERR, &other, &first), MPIV_ERR_PEER);
    ck_assert(first);
    ck_assert_int_eq(atomic_load(&other), IBV_WC_WR_FLUSH_ERR);

    /* what the logs and mpiv_error_detail() print (no device needed) */
    ck_assert_ptr_nonnull(strstr(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), "retry"));
}
END_TEST

/* No device here: MPIV_NET=ibv fails with a clear message; auto, with every
 * rank on one host (a single rank is), uses MPIv's shared-memory rings. */
START_TEST(test_no_device)
{
    if (srv_ibv_available())
        return; /* a machine with a device: nothing to check here */
    struct util_config cfg;
    struct pkt_pool *pool;
    setenv("MPIV_NET", "ibv", 1);
    ck_assert_int_eq(util_config_load(&cfg), MPIV_SUCCESS);
    ck_assert_int_eq(pkt_pool_create(&pool, (size_t)cfg.packets, (size_t)cfg.packet_size, 1),
                     MPIV_SUCCESS);
    int rank, size;
    int rc = srv_init(&cfg, pool, &rank, &size);
    ck_assert_int_eq(rc, MPIV_ERR_NET);
    ck_assert_msg(strstr(mpiv_error_detail(), "no verbs device") != NULL, "detail: %s",
                  mpiv_error_detail());

    setenv("MPIV_NET", "auto", 1);
    ck_assert_int_eq(util_config_load(&cfg), MPIV_SUCCESS);
    rc = srv_init(&cfg, pool, &rank, &size);
    ck_assert_msg(rc == MPIV_SUCCESS, "auto: %s", mpiv_error_detail());
    ck_assert_str_eq(srv_backend_name(), "shm");
    ck_assert_int_eq(srv_finalize(), MPIV_SUCCESS);
    pkt_pool_destroy(pool);
    unsetenv("MPIV_NET");
}
END_TEST

static Suite *srv_ibv_suite(void)
{
    Suite *s = suite_create("server_ibv");
    TCase *tc = tcase_create("ibv");
    tcase_add_test(tc, test_qpinfo_roundtrip);
    tcase_add_test(tc, test_gid_pick);
    tcase_add_test(tc, test_mtu);
    tcase_add_test(tc, test_sq_signalling);
    tcase_add_test(tc, test_sq_never_wedges);
    tcase_add_test(tc, test_sq_unreserve);
    tcase_add_test(tc, test_default_core);
    tcase_add_test(tc, test_wc_errors);
    tcase_add_test(tc, test_no_device);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = srv_ibv_suite);
