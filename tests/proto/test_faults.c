/*
 * Fault-injection tests of the protocol (issue: nothing hangs, nothing
 * trusts the wire). Run under mpiv_run with 2 ranks; each case is its own
 * job (CK_RUN_CASE), because some leave a rank's view of the other changed.
 * Rank 0 sends, rank 1 receives. A hook in the server (srv_fault_set) sees
 * every packet and write and forces one ordering or failure; the checks
 * are the outcome on both sides and the protocol's drop counters.
 */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "common/test_mpiv.h"
#include "mpiv.h"
#include "proto/proto.h"

static int me;
static size_t big; /* surely a rendezvous */

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31u + seed);
}

static size_t first_bad(const unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(i * 31u + seed))
            return i;
    return n;
}

/* The hook: on `point`, for packets of `type` (0: any) or any write/imm,
 * applies `action` to the `nth` event (1-based; 0: every one) and passes
 * the rest. */
/* Atomic: the server thread reads the rule while the test thread may be
 * rewriting it for the next exchange. */
static struct {
    atomic_int point;
    atomic_int type;
    atomic_int action;
    atomic_int nth;
    atomic_int seen;
    atomic_int applied;
} rule;

static enum srv_fault_action hook(const struct srv_fault_event *ev, void *arg)
{
    (void)arg;
    if ((int)ev->point != atomic_load(&rule.point))
        return SRV_FAULT_PASS;
    int type = atomic_load(&rule.type), nth = atomic_load(&rule.nth);
    if ((ev->point == SRV_FAULT_SEND || ev->point == SRV_FAULT_RECV) && type &&
        (ev->len == 0 || ev->data[0] != type))
        return SRV_FAULT_PASS;
    if (atomic_fetch_add(&rule.seen, 1) + 1 != nth && nth != 0)
        return SRV_FAULT_PASS;
    atomic_fetch_add(&rule.applied, 1);
    return (enum srv_fault_action)atomic_load(&rule.action);
}

static void arm(enum srv_fault_point point, int type, enum srv_fault_action action, int nth)
{
    atomic_store(&rule.point, (int)point);
    atomic_store(&rule.type, type);
    atomic_store(&rule.action, (int)action);
    atomic_store(&rule.nth, nth);
    atomic_store(&rule.seen, 0);
    atomic_store(&rule.applied, 0);
    srv_fault_set(hook, NULL);
}

/* The cases below that fault the RTR, the writes or their immediates need
 * the write path: on shm with CMA an RTS would offer a read instead. */
static void write_path_only(bool on) { atomic_store(&proto.rdv_write_only, on); }

static uint64_t drops(enum proto_drop why)
{
    struct proto_stats st;
    proto_get_stats(&st);
    return st.dropped[why];
}

/* One message 0 -> 1 with the hook armed on rank `on` (-1: nowhere);
 * returns what this rank's send or receive returned. */
static int exchange(int on, enum srv_fault_point point, int type, enum srv_fault_action action,
                    size_t size)
{
    unsigned char *buf = malloc(size);
    ck_assert_ptr_nonnull(buf);
    /* Armed before the barrier: once the peer is past it, its first packet
     * may already be here. The rules never match a barrier's packets
     * (zero-byte eager messages). */
    if (me == on)
        arm(point, type, action, 1);
    OK(mpiv_barrier());
    int rc;
    mpiv_status_t st;
    if (me == 0) {
        fill(buf, size, 7);
        rc = mpiv_send(buf, size, 1, 5);
    } else {
        memset(buf, 0, size);
        rc = mpiv_recv(buf, size, 0, 5, &st);
        if (rc == MPIV_SUCCESS) {
            ck_assert_uint_eq(st.size, size);
            ck_assert_uint_eq(first_bad(buf, size, 7), size);
        }
    }
    if (getenv("FAULTS_TRACE"))
        fprintf(stderr, "rank %d: exchange (hook on %d, point %d, type %d, action %d): %s\n", me,
                on, (int)point, type, (int)action, mpiv_strerror(rc));
    if (me == on) {
        srv_fault_set(NULL, NULL);
        /* the fault happened, once */
        ck_assert_int_eq(atomic_load(&rule.applied), 1);
    }
    free(buf);
    return rc;
}

/* A duplicated RTR reaches the sender: the second names a taken handle. */
START_TEST(dup_rtr)
{
    write_path_only(true);
    uint64_t before = drops(PROTO_DROP_HANDLE);
    OK(exchange(0, SRV_FAULT_RECV, PROTO_RTR, SRV_FAULT_DUP, big));
    OK(mpiv_barrier()); /* the duplicate is handled by now on rank 0 */
    if (me == 0)
        ck_assert_uint_eq(drops(PROTO_DROP_HANDLE), before + 1);
    write_path_only(false);
}
END_TEST

/* A duplicated immediate reaches the receiver: dropped, not counted twice. */
START_TEST(dup_imm)
{
    write_path_only(true);
    uint64_t before = drops(PROTO_DROP_IMM);
    OK(exchange(1, SRV_FAULT_IMM, 0, SRV_FAULT_DUP, big));
    OK(mpiv_barrier());
    if (me == 1)
        ck_assert_uint_eq(drops(PROTO_DROP_IMM), before + 1);
    write_path_only(false);
}
END_TEST

/* Held-back control packets and immediates still complete. */
START_TEST(delayed_rtr_and_imm)
{
    write_path_only(true);
    OK(exchange(0, SRV_FAULT_RECV, PROTO_RTR, SRV_FAULT_DELAY, big));
    OK(exchange(1, SRV_FAULT_IMM, 0, SRV_FAULT_DELAY, big));
    OK(exchange(1, SRV_FAULT_RECV, PROTO_RTS, SRV_FAULT_DELAY, big));
    OK(mpiv_barrier());
    write_path_only(false);
}
END_TEST

/* The sender's write fails: its send fails, and the receiver hears of it
 * (ABORT) instead of waiting forever. */
START_TEST(write_fails)
{
    write_path_only(true);
    int rc = exchange(0, SRV_FAULT_WRITE, 0, SRV_FAULT_FAIL, big);
    ck_assert_msg(rc != MPIV_SUCCESS, "rank %d: the failed rendezvous reported success", me);
    /* both sides go on working */
    OK(exchange(-1, SRV_FAULT_SEND, 0, SRV_FAULT_PASS, big));
    write_path_only(false);
}
END_TEST

/* The receiver cannot send its RTR: its receive fails, and the refusal it
 * sends next fails the sender's send instead of leaving it waiting. */
START_TEST(rtr_send_fails)
{
    write_path_only(true);
    int rc = exchange(1, SRV_FAULT_SEND, PROTO_RTR, SRV_FAULT_FAIL, big);
    ck_assert_msg(rc != MPIV_SUCCESS, "rank %d: the failed rendezvous reported success", me);
    OK(exchange(-1, SRV_FAULT_SEND, 0, SRV_FAULT_PASS, big));
    write_path_only(false);
}
END_TEST

/* Sends that fail give their packets back: many more failed sends than
 * the pool holds, then normal traffic. */
START_TEST(failed_sends_keep_the_pool)
{
    const int n = 4000; /* > MPIV_PACKETS of this job */
    char msg[64] = "x";
    OK(mpiv_barrier());
    if (me == 0) {
        arm(SRV_FAULT_SEND, PROTO_EAGER, SRV_FAULT_FAIL, 0); /* every eager send fails */
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(mpiv_send(msg, sizeof msg, 1, 9), MPIV_ERR_NET);
        ck_assert_int_eq(atomic_load(&rule.applied), n);
        srv_fault_set(NULL, NULL);
        OK(mpiv_send(msg, sizeof msg, 1, 9));
    } else {
        OK(mpiv_recv(msg, sizeof msg, 0, 9, NULL));
    }
    OK(mpiv_barrier());
}
END_TEST

/* Forged packets: every field that disagrees with the transport or with
 * the others is caught by the decode layer, counted, and changes nothing. */
START_TEST(forged_packets)
{
    struct proto_stats before, after;
    proto_get_stats(&before);
    OK(mpiv_barrier());
    if (me == 0) {
        for (int k = 0; k < 9; k++) {
            pkt_t *p = pkt_get(proto.pool, -1);
            ck_assert_ptr_nonnull(p);
            struct proto_hdr *h = proto_hdr_of(p);
            memset(h, 0, sizeof *h + 64);
            h->type = PROTO_EAGER;
            h->src = 0;
            h->tag = 77;
            h->size = 16;
            p->len = sizeof *h + 16;
            switch (k) {
            case 0: p->len = 8; break;                        /* short */
            case 1: h->type = 200; break;                     /* type */
            case 2: h->src = 1; break;                        /* src */
            case 3: h->size = 1u << 30; break;                /* size > eager */
            case 4: h->size = 8; break;                       /* len != size */
            case 5: h->ctx = PROTO_CTX_COUNT; break;          /* ctx */
            case 6: h->type = PROTO_RTR; h->handle = 12345; h->status = PROTO_RTR_NONE;
                    p->len = sizeof *h; break;                /* stale handle */
            case 7: h->type = PROTO_RTR; h->handle = 12345; h->status = 77;
                    p->len = sizeof *h; break;                /* status */
            case 8: h->type = PROTO_ABORT; h->handle = 12345; h->status = MPIV_ERR_NET;
                    p->len = sizeof *h; break;                /* stale handle */
            }
            OK(srv_send(p, 1));
        }
        /* then a real message on the same key */
        char ok[16] = "real";
        OK(mpiv_send(ok, sizeof ok, 1, 77));
    } else {
        char got[16] = {0};
        OK(mpiv_recv(got, sizeof got, 0, 77, NULL));
        ck_assert_str_eq(got, "real");
        proto_get_stats(&after);
        ck_assert_uint_eq(after.dropped[PROTO_DROP_SHORT], before.dropped[PROTO_DROP_SHORT] + 1);
        ck_assert_uint_eq(after.dropped[PROTO_DROP_TYPE], before.dropped[PROTO_DROP_TYPE] + 1);
        ck_assert_uint_eq(after.dropped[PROTO_DROP_SRC], before.dropped[PROTO_DROP_SRC] + 1);
        ck_assert_uint_eq(after.dropped[PROTO_DROP_LEN], before.dropped[PROTO_DROP_LEN] + 1);
        ck_assert_uint_eq(after.dropped[PROTO_DROP_FIELD], before.dropped[PROTO_DROP_FIELD] + 3);
        ck_assert_uint_eq(after.dropped[PROTO_DROP_HANDLE], before.dropped[PROTO_DROP_HANDLE] + 2);
    }
    OK(mpiv_barrier());
}
END_TEST

/* Rendezvous writes split into pieces (proto.max_write made small here):
 * every byte lands, in both arrival orders. */
START_TEST(split_writes)
{
    write_path_only(true);
    size_t saved = proto.max_write;
    proto.max_write = 4096 + 64;
    size_t n = (1u << 20) + 123;
    unsigned char *buf = malloc(n);
    ck_assert_ptr_nonnull(buf);
    for (int order = 0; order < 2; order++) {
        mpiv_request_t r;
        if (me == 0) {
            fill(buf, n, (unsigned)order);
            if (order == 0) {
                OK(mpiv_barrier());
                OK(mpiv_send(buf, n, 1, 3));
            } else {
                OK(mpiv_isend(buf, n, 1, 3, &r));
                OK(mpiv_barrier());
                OK(mpiv_wait(&r, NULL));
            }
        } else {
            memset(buf, 0, n);
            if (order == 0) {
                OK(mpiv_irecv(buf, n, 0, 3, &r));
                OK(mpiv_barrier());
            } else {
                OK(mpiv_barrier());
                OK(mpiv_irecv(buf, n, 0, 3, &r));
            }
            OK(mpiv_wait(&r, NULL));
            ck_assert_uint_eq(first_bad(buf, n, (unsigned)order), n);
        }
    }
    proto.max_write = saved;
    free(buf);
    OK(mpiv_barrier());
    write_path_only(false);
}
END_TEST

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* Flow control: a receiver that lags a fast sender holds at most its
 * credit per peer of message data, not everything the sender sent. */
START_TEST(lagging_receiver_is_bounded)
{
    const int n = 12000;
    const size_t size = 4000; /* eager */
    unsigned char *buf = calloc((size_t)n, size);
    mpiv_request_t *req = calloc((size_t)n, sizeof *req);
    ck_assert(buf && req);
    OK(mpiv_barrier());
    long rss0 = rss_kib();
    if (me == 0) {
        for (int i = 0; i < n; i++) {
            fill(buf + (size_t)i * size, size, (unsigned)i);
            OK(mpiv_isend(buf + (size_t)i * size, size, 1, 11, &req[i]));
        }
        OK(mpiv_barrier()); /* all sent (or waiting for credit) */
        OK(mpiv_barrier()); /* the receiver measured */
        OK(mpiv_waitall(n, req, NULL));
        struct proto_stats st;
        proto_get_stats(&st);
        ck_assert_msg(st.eager_as_rts > 0, "no send ever ran out of credit");
    } else {
        OK(mpiv_barrier());
        /* let what can arrive arrive */
        double t0 = mpiv_wtime();
        while (mpiv_wtime() - t0 < 0.5)
            mpiv_ult_yield();
        long grew = rss_kib() - rss0;
        OK(mpiv_barrier());
        /* 12,000 x 4 KB = 48 MB sent; the credit is 4 MiB. Sanitizers'
         * shadow memory multiplies what the receiver holds (TSan about
         * fourfold); unbounded, it would still be far past this. */
        long bound = 24 * 1024;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
        bound *= 4;
#endif
        ck_assert_msg(grew < bound, "the receiver grew by %ld KiB before receiving", grew);
        /* a buffer each: a reused one is written for message i + 1 after
         * it was read for i only through the other rank (which TSan
         * cannot see) */
        for (int i = 0; i < n; i++) {
            unsigned char *b = buf + (size_t)i * size;
            OK(mpiv_recv(b, size, 0, 11, NULL));
            ck_assert_uint_eq(first_bad(b, size, (unsigned)i), size);
        }
    }
    free(buf);
    free(req);
    OK(mpiv_barrier());
}
END_TEST

/* --- the receiver-driven rendezvous (reads) ------------------------------ */

/* Whether this job's RTS offer reads to the other rank: on shm with CMA
 * on (MPIV_NET=auto is shm here: one host; CMA is off by default). From
 * the environment, not from the library, so that a library that never
 * reads, or always does, fails the checks. */
static bool reads_expected(void)
{
    const char *net = getenv("MPIV_NET"), *cma = getenv("MPIV_SHM_CMA");
    if (net && *net && strcmp(net, "shm") != 0 && strcmp(net, "auto") != 0)
        return false;
    return cma && (strcmp(cma, "on") == 0 || strcmp(cma, "1") == 0);
}

static struct proto_stats stats_now(void)
{
    struct proto_stats st;
    proto_get_stats(&st);
    return st;
}

/* After n rendezvous 0 -> 1 that fit: on rank 1, n more reads, no
 * fallback, no failure; on rank 0, n more FINs. Without reads: none. */
static void check_reads(const struct proto_stats *before, uint64_t n)
{
    struct proto_stats now = stats_now();
    uint64_t want = reads_expected() ? n : 0;
    if (me == 1) {
        ck_assert_uint_eq(now.reads - before->reads, want);
        ck_assert_uint_eq(now.read_fallbacks, before->read_fallbacks);
        ck_assert_uint_eq(now.read_failures, before->read_failures);
    } else {
        ck_assert_uint_eq(now.fins_received - before->fins_received, want);
    }
}

/* One rendezvous 0 -> 1 of `size` bytes at `off` bytes into the buffers,
 * in the given order: 0 = the receive is posted before the RTS arrives,
 * 1 = the RTS waits in the table for the receive. The order is forced by
 * the barrier: what rank 0 sent before it reaches rank 1 before the
 * barrier's own message (one ring, in order). `cap` is the receive
 * buffer's size (< size: truncation). Returns what this rank's operation
 * returned; checks the data when it fits, and that nothing past cap was
 * written. */
static int rdv_ordered(size_t size, size_t cap, size_t off, int order, unsigned seed)
{
    size_t n = (size > cap ? size : cap) + off + 64;
    unsigned char *mem = malloc(n), *buf = mem + off;
    ck_assert_ptr_nonnull(mem);
    mpiv_request_t r;
    mpiv_status_t st;
    int rc;
    if (me == 0) {
        fill(buf, size, seed);
        if (order == 0) {
            OK(mpiv_barrier());
            rc = mpiv_send(buf, size, 1, 21);
        } else {
            OK(mpiv_isend(buf, size, 1, 21, &r));
            OK(mpiv_barrier());
            rc = mpiv_wait(&r, NULL);
        }
    } else {
        memset(mem, 0xee, n);
        if (order == 0) {
            OK(mpiv_irecv(buf, cap, 0, 21, &r));
            OK(mpiv_barrier());
        } else {
            OK(mpiv_barrier());
            OK(mpiv_irecv(buf, cap, 0, 21, &r));
        }
        rc = mpiv_wait(&r, &st);
        if (rc == MPIV_SUCCESS) {
            ck_assert_uint_eq(st.size, size);
            ck_assert_uint_eq(first_bad(buf, size, seed), size);
        }
        for (size_t i = cap; i < n - off; i++)
            ck_assert_msg(buf[i] == 0xee, "byte %zu past a %zu-byte buffer was written", i, cap);
        for (size_t i = 0; i < off; i++)
            ck_assert_msg(mem[i] == 0xee, "byte %zu before the buffer was written", i);
    }
    free(mem);
    return rc;
}

/* The read path in both arrival orders, at sizes across the eager limit
 * and across page boundaries (the buffers start mid-page), data checked. */
START_TEST(read_both_orders)
{
    size_t e = proto_eager_max(1 - me); /* the same on both ranks */
    const size_t sizes[] = {e + 1, e + 3 * 4096 + 17, 2 * e + 64 * 1024 + 5,
                            e + (1u << 20) + 123};
    const size_t offs[] = {0, 4000, 1, 4095};
    struct proto_stats before = stats_now();
    uint64_t n = 0;
    OK(mpiv_barrier());
    for (int order = 0; order < 2; order++)
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++, n++)
            OK(rdv_ordered(sizes[i], sizes[i], offs[i], order, (unsigned)(n + 1)));
    OK(mpiv_barrier()); /* every FIN handled */
    check_reads(&before, n);
    ck_assert(srv_can_read(1 - me) == reads_expected());
}
END_TEST

/* A rendezvous larger than the receive buffer: nothing is read, the
 * receive fails with MPIV_ERR_TRUNCATE, the send succeeds; both orders. */
START_TEST(read_truncated)
{
    size_t e = proto_eager_max(1 - me);
    size_t size = 4 * e + 100;
    struct proto_stats before = stats_now();
    OK(mpiv_barrier());
    for (int order = 0; order < 2; order++) {
        int rc = rdv_ordered(size, e + 1, 100, order, 3);
        if (me == 0)
            OK(rc);
        else
            ck_assert_int_eq(rc, MPIV_ERR_TRUNCATE);
    }
    OK(mpiv_barrier());
    check_reads(&before, 0);
}
END_TEST

/* A read the system refuses (injected here, as EPERM would): the receiver
 * answers with an RTR, the sender writes, the data arrives; the next
 * message reads again (one refusal turns reads off only when the kernel
 * refuses, not when a test does). */
START_TEST(read_refused_falls_back)
{
    if (!reads_expected())
        return;
    struct proto_stats before = stats_now();
    OK(exchange(1, SRV_FAULT_READ, 0, SRV_FAULT_REFUSE, big));
    OK(mpiv_barrier());
    struct proto_stats mid = stats_now();
    if (me == 1) {
        ck_assert_uint_eq(mid.read_fallbacks, before.read_fallbacks + 1);
        ck_assert_uint_eq(mid.reads, before.reads);
    } else {
        ck_assert_uint_eq(mid.fins_received, before.fins_received);
    }
    OK(exchange(-1, SRV_FAULT_READ, 0, SRV_FAULT_PASS, big));
    OK(mpiv_barrier());
    check_reads(&mid, 1);
}
END_TEST

/* A read that fails: the receive fails with MPIV_ERR_NET, and the sender's
 * send fails too (FIN_FAILED) instead of waiting forever; then both sides
 * go on working. */
START_TEST(read_fails)
{
    if (!reads_expected())
        return;
    struct proto_stats before = stats_now();
    int rc = exchange(1, SRV_FAULT_READ, 0, SRV_FAULT_FAIL, big);
    ck_assert_int_eq(rc, MPIV_ERR_NET);
    OK(mpiv_barrier());
    struct proto_stats mid = stats_now();
    if (me == 1)
        ck_assert_uint_eq(mid.read_failures, before.read_failures + 1);
    else
        ck_assert_uint_eq(mid.fins_received, before.fins_received + 1);
    OK(exchange(-1, SRV_FAULT_READ, 0, SRV_FAULT_PASS, big));
    OK(mpiv_barrier());
    check_reads(&mid, 1);
}
END_TEST

/* A duplicated FIN reaches the sender: the second names a taken handle. */
START_TEST(dup_fin)
{
    if (!reads_expected())
        return;
    uint64_t before = drops(PROTO_DROP_HANDLE);
    OK(exchange(0, SRV_FAULT_RECV, PROTO_RTR, SRV_FAULT_DUP, big));
    OK(mpiv_barrier());
    if (me == 0)
        ck_assert_uint_eq(drops(PROTO_DROP_HANDLE), before + 1);
}
END_TEST

/* A rendezvous to our own rank reads too (a copy, on every backend), in
 * both orders, and completes the send on the spot. */
START_TEST(read_self)
{
    size_t n = (1u << 20) + 77;
    unsigned char *a = malloc(n), *b = malloc(n);
    ck_assert(a && b);
    struct proto_stats before = stats_now();
    for (int order = 0; order < 2; order++) {
        mpiv_request_t rs, rr;
        fill(a, n, (unsigned)order + 40);
        memset(b, 0, n);
        if (order == 0) {
            OK(mpiv_irecv(b, n, me, 8, &rr));
            OK(mpiv_isend(a, n, me, 8, &rs));
        } else {
            OK(mpiv_isend(a, n, me, 8, &rs));
            OK(mpiv_irecv(b, n, me, 8, &rr));
        }
        OK(mpiv_wait(&rs, NULL));
        OK(mpiv_wait(&rr, NULL));
        ck_assert_uint_eq(first_bad(b, n, (unsigned)order + 40), n);
    }
    struct proto_stats now = stats_now();
    ck_assert_uint_eq(now.reads - before.reads, 2);
    ck_assert_uint_eq(now.fins_received - before.fins_received, 2);
    free(a);
    free(b);
    OK(mpiv_barrier());
}
END_TEST

static int faults_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (mpiv_init(NULL, NULL) != MPIV_SUCCESS) {
        fprintf(stderr, "mpiv_init: %s\n", mpiv_error_detail());
        return 1;
    }
    me = mpiv_rank();
    if (mpiv_size() != 2) {
        fprintf(stderr, "test_faults runs on exactly 2 ranks\n");
        mpiv_finalize();
        return 1;
    }
    big = proto_eager_max(1 - me) * 4 + 100; /* above the eager limit of either transport */
    return 0;
}

static Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, dup_rtr);
    tcase_add_test(tc, dup_imm);
    tcase_add_test(tc, delayed_rtr_and_imm);
    tcase_add_test(tc, write_fails);
    tcase_add_test(tc, rtr_send_fails);
    tcase_add_test(tc, failed_sends_keep_the_pool);
    tcase_add_test(tc, forged_packets);
    tcase_add_test(tc, split_writes);
    tcase_add_test(tc, lagging_receiver_is_bounded);
    tcase_add_test(tc, read_both_orders);
    tcase_add_test(tc, read_truncated);
    tcase_add_test(tc, read_refused_falls_back);
    tcase_add_test(tc, read_fails);
    tcase_add_test(tc, dup_fin);
    tcase_add_test(tc, read_self);
    suite_add_tcase(s, tc);
    return s;
}

static int faults_fini(int failed)
{
    int rc = mpiv_finalize();
    return failed == 0 && rc == MPIV_SUCCESS ? 0 : 1;
}

CHECK_MAIN(.suite = faults_suite, .fork = CK_NOFORK, .init = faults_init, .fini = faults_fini);
