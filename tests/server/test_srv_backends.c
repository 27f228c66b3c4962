/*
 * test_srv_backends.c — the backends driven directly (no server thread),
 * one rank talking to itself, with faults injected: what a backend reports
 * when an operation fails, where the source and length of an arrival come
 * from, and what a forged shm cell can (not) do.
 *
 *  - shm: CHUNK records outside every live registration, straddling one,
 *    longer than their record, wrapping around the address space, or aimed
 *    at a range deregistered before; MSG records longer than their record;
 *    unknown kinds: all dropped and counted, nothing written outside the
 *    registered buffer, the ring moves on, and the write they belonged to
 *    completes with an error at the target; records whose size is zero,
 *    runs past the end of the ring or past what its sender wrote (no
 *    copy of its stamp at its end), a SKIP short of the end, a tail off
 *    the record grid: dropped, and reading resumes at the tail;
 *  - shm: a sender asks for ring lines ahead of its tail only where the
 *    receiver is done with them, and not after a long record;
 *  - shm: small messages of varied sizes wrap the byte ring many times
 *    (SKIP records), a full ring says SRV_AGAIN, every byte arrives; the
 *    same with the sender and the reader on two threads at once;
 *  - shm: a write to this rank outside every registration fails; a write
 *    longer than max_write is refused; a peer segment of another mode or
 *    size is refused before it is mapped;
 *  - ofi: a write with a bad key and a failed write announcement complete
 *    with an error; a message whose CQ data claims another rank is dropped
 *    (the source is the transport's); max_write;
 *  - ofi: a stale shm region named after our pid does not stop init;
 *  - the psm provider's libraries left no signal handler of theirs behind.
 *
 * Each test runs in a fork of its own (Check's default), so a backend that
 * writes where it must not fails the test instead of the whole suite.
 */
#include <check.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pktpool/pktpool.h"
#include "boot/boot.h"
#include "server/shm_copy.h"
#include "server/srv_int.h"
#include "common/check_main.h"
#include "common/lib_loaded.h"
#include "server/srv_test_hooks.h"
#include "util/util.h"

enum { CELL_MSG = 1, CELL_CHUNK = 2, CELL_IMM = 3, CELL_SKIP = 4 }; /* shm.c's enum shm_kind */

static struct util_config cfg;
static struct pkt_pool *pool;
static const struct srv_backend_ops *ops;
static struct srv_backend *be;
static int nposted;

static void up(const struct srv_backend_ops *o)
{
    int rank, size;
    ck_assert_int_eq(util_config_load(&cfg), MPIV_SUCCESS);
    ck_assert_int_eq(pkt_pool_create(&pool, 64, (size_t)cfg.packet_size, 1), MPIV_SUCCESS);
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_SUCCESS);
    ck_assert_int_eq(size, 1);
    ops = o;
    int rc = ops->init(&cfg, 0, 1, &be);
    if (rc == MPIV_SUCCESS)
        rc = ops->reg_pool(be, pool);
    if (rc == MPIV_SUCCESS)
        rc = ops->exchange(be);
    ck_assert_msg(rc == MPIV_SUCCESS, "%s: %s", o->name, mpiv_error_detail());
    nposted = 0;
    for (int i = 0; i < 16; i++) {
        pkt_t *p = pkt_get(pool, 0);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(ops->post_recv(be, p), MPIV_SUCCESS);
        nposted++;
    }
}

static void down(void)
{
    ops->finalize(be);
    be = NULL;
}

/* Polls until `want` completions came or 10 s passed (a hang guard),
 * giving sent packets back; returns how many came. */
static int poll_n(struct srv_cqe *ev, int max, int want)
{
    int n = 0;
    uint64_t deadline = util_now_ns() + 10ull * 1000000000ull;
    while (n < want && util_now_ns() < deadline) {
        int k = ops->poll(be, ev + n, max - n);
        ck_assert_int_ge(k, 0);
        n += k;
    }
    return n;
}

/* Polls for `ms` milliseconds more: nothing may arrive. */
static void poll_none(int ms)
{
    struct srv_cqe ev[8];
    uint64_t end = util_now_ns() + (uint64_t)ms * 1000000ull;
    while (util_now_ns() < end) {
        int k = ops->poll(be, ev, 8);
        ck_assert_int_ge(k, 0);
        ck_assert_msg(k == 0, "unexpected completion kind %d err %d src %d", ev[0].kind,
                      ev[0].err, ev[0].src);
    }
}

static struct srv_rdma_op *new_op(const void *buf, size_t len, srv_mr *lmr, uint64_t raddr,
                                  uint64_t rkey, uint32_t imm)
{
    struct srv_rdma_op *op = calloc(1, sizeof *op);
    op->buf = buf;
    op->len = len;
    op->desc = lmr ? lmr->desc : NULL;
    op->peer = 0;
    op->imm = imm;
    op->raddr = raddr;
    op->rkey = rkey;
    return op;
}

/* --- shm ----------------------------------------------------------------- */

enum { PAGE = 4096 };

START_TEST(test_shm_forged_cells)
{
    up(&srv_shm_ops);
    size_t cell = pkt_data_size(pool);
    /* three pages: only the middle one is registered */
    unsigned char *region = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(region, MAP_FAILED);
    memset(region, 0xEE, 3 * PAGE);
    unsigned char *buf = region + PAGE;
    srv_mr mr, gone_mr;
    void *h, *gone_h;
    ck_assert_int_eq(ops->mr_reg(be, buf, PAGE, &mr, &h), MPIV_SUCCESS);
    /* a registration that ends before the cells arrive */
    unsigned char *gone = malloc(PAGE);
    memset(gone, 0xEE, PAGE);
    ck_assert_int_eq(ops->mr_reg(be, gone, PAGE, &gone_mr, &gone_h), MPIV_SUCCESS);
    ops->mr_dereg(be, gone_h);

    (void)cell;
    unsigned char junk[64];
    memset(junk, 0x5A, sizeof junk);
    uint64_t b = (uint64_t)(uintptr_t)buf;
    struct {
        uint32_t kind, len;
        uint64_t raddr;
    } bad[] = {
        {CELL_CHUNK, 32, b - 16},                             /* straddles the start   */
        {CELL_CHUNK, 16, b + PAGE - 6},                       /* straddles the end     */
        {CELL_CHUNK, 89, b}, /* longer than its record (128 B: 8 of address, 88 of data) */
        {CELL_CHUNK, 64, (uint64_t)(uintptr_t)region},        /* not registered        */
        {CELL_CHUNK, 64, (uint64_t)(uintptr_t)region + 2 * PAGE}, /* nor after it      */
        {CELL_CHUNK, 16, UINT64_MAX - 8},                     /* wraps around          */
        {CELL_CHUNK, 64, (uint64_t)(uintptr_t)gone},          /* deregistered          */
        {77, 64, b},                                          /* unknown kind          */
        {CELL_MSG, 97, 0}, /* longer than its record (128 B: 96 of payload) */
        {CELL_MSG, UINT32_MAX, 0},
    };
    size_t nbad = sizeof bad / sizeof bad[0];
    for (size_t i = 0; i < nbad; i++)
        ck_assert_int_eq(srv_shm_test_put_rec(be, 0, bad[i].kind, bad[i].len, 0, bad[i].raddr,
                                              0, junk, sizeof junk),
                         MPIV_SUCCESS);
    /* then a good CHUNK, the IMM closing that (partly dropped) write, a
     * clean write's IMM, and a message */
    ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_CHUNK, 50, 0, b + 100, 0, junk, 50),
                     MPIV_SUCCESS);
    ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_IMM, PAGE, 0, 0, 0x1111, NULL, 0),
                     MPIV_SUCCESS);
    ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_CHUNK, 8, 0, b + 200, 0, junk, 8),
                     MPIV_SUCCESS);
    ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_IMM, 8, 0, 0, 0x2222, NULL, 0),
                     MPIV_SUCCESS);
    ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_MSG, 10, 0, 0, 0, "0123456789", 10),
                     MPIV_SUCCESS);

    struct srv_cqe ev[8];
    ck_assert_int_eq(poll_n(ev, 8, 3), 3);
    ck_assert_int_eq(ev[0].kind, SRV_CQE_IMM);
    ck_assert_int_eq(ev[0].err, MPIV_ERR_NET); /* some of its bytes were refused */
    ck_assert_uint_eq(ev[0].imm, 0x1111);
    ck_assert_int_eq(ev[1].kind, SRV_CQE_IMM);
    ck_assert_int_eq(ev[1].err, MPIV_SUCCESS);
    ck_assert_uint_eq(ev[1].imm, 0x2222);
    ck_assert_int_eq(ev[1].src, 0);
    ck_assert_uint_eq(ev[1].len, 8);
    ck_assert_int_eq(ev[2].kind, SRV_CQE_RECV);
    ck_assert_int_eq(ev[2].err, MPIV_SUCCESS);
    ck_assert_int_eq(ev[2].src, 0);
    ck_assert_uint_eq(ev[2].len, 10);
    ck_assert_ptr_nonnull(ev[2].data); /* lent in place, a packet beside it */
    ck_assert_ptr_nonnull(ev[2].p);
    ck_assert_mem_eq(ev[2].data, "0123456789", 10);
    ck_assert_uint_eq(srv_shm_test_dropped(be), nbad);

    /* nothing outside the registered page, and inside only the good chunks */
    for (size_t i = 0; i < 3 * PAGE; i++) {
        size_t off = i - PAGE;
        int in_good = i >= PAGE && ((off >= 100 && off < 150) || (off >= 200 && off < 208));
        ck_assert_msg(region[i] == (in_good ? 0x5A : 0xEE), "byte %zd of the page: 0x%02x",
                      (ssize_t)i - PAGE, region[i]);
    }
    for (size_t i = 0; i < PAGE; i++)
        ck_assert_msg(gone[i] == 0xEE, "deregistered buffer written at %zu", i);
    ops->mr_dereg(be, h);
    free(gone);
    munmap(region, 3 * PAGE);
    down();
}
END_TEST

/* A record whose size cannot be right leaves no way to find the next one:
 * it is dropped with all the ring holds, and what comes after it is read. */
START_TEST(test_shm_forged_sizes)
{
    up(&srv_shm_ops);
    size_t ring = srv_shm_test_ring_bytes(be);
    struct srv_cqe ev[8];
    unsigned char junk[64] = {0};
    struct {
        uint32_t kind, lines;
    } bad[] = {
        {CELL_MSG, UINT32_MAX},                 /* past the tail and the ring */
        {CELL_MSG, (uint32_t)(ring / 64) + 1}, /* longer than the ring       */
        {CELL_MSG, 3},                          /* past the tail              */
        {CELL_SKIP, 1},                         /* a SKIP short of the end    */
    };
    size_t nbad = sizeof bad / sizeof bad[0];
    for (size_t i = 0; i < nbad; i++) {
        ck_assert_int_eq(srv_shm_test_put_rec(be, 0, bad[i].kind, 8, bad[i].lines, 0, 0, junk, 8),
                         MPIV_SUCCESS);
        /* what follows it in the ring goes with it */
        ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_MSG, 3, 0, 0, 0, "abc", 3),
                         MPIV_SUCCESS);
        poll_none(5);
        ck_assert_uint_eq(srv_shm_test_dropped(be), i + 1);
        /* the ring is readable again after it */
        ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_MSG, 3, 0, 0, 0, "xyz", 3),
                         MPIV_SUCCESS);
        ck_assert_int_eq(poll_n(ev, 8, 1), 1);
        ck_assert_int_eq(ev[0].kind, SRV_CQE_RECV);
        ck_assert_uint_eq(ev[0].len, 3);
        ck_assert_mem_eq(ev[0].data, "xyz", 3);
        ck_assert_int_eq(ops->post_recv(be, ev[0].p), MPIV_SUCCESS);
    }
    /* a tail off the record grid: nothing read from it, no crash */
    srv_shm_test_set_tail(be, 0, 8);
    poll_none(5);
    ck_assert_uint_eq(srv_shm_test_dropped(be), nbad + 1);
    down();
}
END_TEST

/* Messages of 0 to ~2000 bytes, sent until the ring is full, then read:
 * many times around the ring, through both ways in (post_send and
 * send_inline), short records and long ones (whose first line is written
 * last, rec_put_msg), every byte checked and in order. */
START_TEST(test_shm_ring_wrap)
{
    up(&srv_shm_ops);
    size_t ring = srv_shm_test_ring_bytes(be);
    pkt_t *p = pkt_get(pool, 0);
    ck_assert_ptr_nonnull(p);
    unsigned char hdr[32], body[2000];
    uint32_t sent = 0, got = 0, fulls = 0;
    uint64_t bytes = 0;
    struct srv_cqe ev[16];
    while (bytes < 4 * (uint64_t)ring) {
        for (;;) { /* fill */
            size_t len = (sent * 37u) % 2000u;
            memset(hdr, (int)(sent & 0xff), sizeof hdr);
            memcpy(hdr, &sent, sizeof sent);
            for (size_t i = 0; i < len; i++)
                body[i] = (unsigned char)(sent + i);
            int rc;
            if (sent & 1) {
                rc = ops->send_inline(be, 0, hdr, sizeof hdr, body, len);
            } else {
                memcpy(p->data, hdr, sizeof hdr);
                memcpy(p->data + sizeof hdr, body, len);
                p->len = (uint32_t)(sizeof hdr + len);
                rc = ops->post_send(be, p, 0);
            }
            if (rc == SRV_AGAIN) {
                fulls++;
                break;
            }
            ck_assert_int_eq(rc, SRV_DONE);
            sent++;
            bytes += sizeof hdr + len;
        }
        while (got < sent) { /* drain */
            int n = ops->poll(be, ev, 16);
            ck_assert_int_ge(n, 0);
            for (int i = 0; i < n; i++) {
                ck_assert_int_eq(ev[i].kind, SRV_CQE_RECV);
                size_t len = (got * 37u) % 2000u;
                ck_assert_uint_eq(ev[i].len, 32 + len);
                uint32_t seq;
                memcpy(&seq, ev[i].data, sizeof seq);
                ck_assert_uint_eq(seq, got);
                for (size_t k = 0; k < len; k++)
                    body[k] = (unsigned char)(got + k);
                ck_assert(memcmp(ev[i].data + 32, body, len) == 0);
                ck_assert_int_eq(ops->post_recv(be, ev[i].p), MPIV_SUCCESS);
                got++;
            }
        }
    }
    ck_assert_uint_ge(fulls, 4);
    poll_none(5);
    ck_assert_uint_eq(srv_shm_test_dropped(be), 0);
    pkt_put(pool, 0, p);
    down();
}
END_TEST

/* A sending thread and a polling one at once, as two ranks run (R3, R5):
 * records of 0 to ~2600 bytes (one line and several, the stamp's copy at
 * different offsets, long ones with their first line written last, a gap
 * after them and, from SHM_MOVSB_MIN, copied in with a string copy) go
 * around the ring many times while the other
 * thread reads them as they are published. Every record must arrive
 * whole and in order, and nothing be dropped: a stamp published before
 * the bytes it covers, or a stale stamp of an earlier lap taken for a new
 * one, shows up as a wrong byte here, and as a data race under TSan. */
enum { STAMP_RECORDS = 60000, STAMP_MAX_LEN = 2600, STAMP_LONGEST = 20000 };

static unsigned char stamp_byte(uint32_t seq, size_t k) { return (unsigned char)(seq * 7u + k); }

/* What the sender sends: records of (i * 131) % stamp_max payload bytes. */
static uint32_t stamp_records;
static size_t stamp_max;

static void *stamp_sender(void *arg)
{
    (void)arg;
    static unsigned char body[STAMP_LONGEST];
    unsigned char hdr[32];
    for (uint32_t i = 0; i < stamp_records; i++) {
        size_t len = (i * 131u) % stamp_max;
        memset(hdr, 0, sizeof hdr);
        memcpy(hdr, &i, sizeof i);
        for (size_t k = 0; k < len; k++)
            body[k] = stamp_byte(i, k);
        int rc;
        while ((rc = ops->send_inline(be, 0, hdr, sizeof hdr, body, len)) == SRV_AGAIN)
            sched_yield();
        if (rc != SRV_DONE)
            return (void *)(uintptr_t)1;
    }
    return NULL;
}

/* Runs stamp_sender on a thread of its own and checks every record it
 * sends as this thread reads them. */
static void two_threads_run(uint32_t records, size_t max_len)
{
    stamp_records = records;
    stamp_max = max_len;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, stamp_sender, NULL), 0);
    struct srv_cqe ev[16];
    uint32_t want = 0, bad_seq = UINT32_MAX;
    size_t bad_at = 0;
    uint64_t deadline = util_now_ns() + 60ull * 1000000000ull;
    while (want < records && util_now_ns() < deadline) {
        int n = ops->poll(be, ev, 16);
        ck_assert_int_ge(n, 0);
        for (int i = 0; i < n; i++) {
            size_t len = (want * 131u) % max_len;
            uint32_t seq;
            memcpy(&seq, ev[i].data, sizeof seq);
            if (bad_seq == UINT32_MAX && (ev[i].kind != SRV_CQE_RECV || seq != want ||
                                          ev[i].len != 32 + len))
                bad_seq = want;
            for (size_t k = 0; k < len && bad_seq == UINT32_MAX; k++)
                if (ev[i].data[32 + k] != stamp_byte(want, k)) {
                    bad_seq = want;
                    bad_at = k;
                }
            ck_assert_int_eq(ops->post_recv(be, ev[i].p), MPIV_SUCCESS);
            want++;
        }
        if (ops->release)
            ops->release(be);
    }
    void *ret;
    ck_assert_int_eq(pthread_join(t, &ret), 0);
    ck_assert_ptr_null(ret);
    ck_assert_msg(want == records, "%u of %u records arrived", want, records);
    ck_assert_msg(bad_seq == UINT32_MAX, "record %u is wrong (first at payload byte %zu)",
                  bad_seq, bad_at);
    ck_assert_uint_eq(srv_shm_test_dropped(be), 0);
    poll_none(5);
}

START_TEST(test_shm_two_threads)
{
    up(&srv_shm_ops);
    two_threads_run(STAMP_RECORDS, STAMP_MAX_LEN);
    down();
}
END_TEST

/* The same with payloads of 0 to 8 bytes only: every record one line,
 * written by the sender's short_put, whose stamp (R3) must follow its
 * bytes as rec_publish's does. */
START_TEST(test_shm_two_threads_lines)
{
    up(&srv_shm_ops);
    two_threads_run(2 * STAMP_RECORDS, 9);
    down();
}
END_TEST

/* The two ways a long payload is copied in (src/server/shm_copy.h), each
 * fixed with MPIV_SHM_COPY, and the choice between them (auto), with
 * records of up to 20 KB from a second thread (one piece, several, a last
 * piece short of a line, and past SHM_COPY_PIECES_MAX), every byte
 * checked as above. Fixed, the way never changes and nothing is sampled;
 * in auto, where a choice is made (a string copy and a usable clock), the
 * sender sampled the head's line and uses the way its mean says (C2, C4). */
static const char *const copy_ways[] = {"auto", "whole", "pieces"};

START_TEST(test_shm_copy_ways)
{
    setenv("MPIV_SHM_COPY", copy_ways[_i], 1);
    up(&srv_shm_ops);
    two_threads_run(20000, STAMP_LONGEST);
    unsigned lat, samples, near;
    int way = srv_shm_test_copy(be, 0, &lat, &samples, &near);
    if (_i > 0) {
        ck_assert_int_eq(way, _i - 1);
        ck_assert_uint_eq(samples, 0);
    } else if (near) {
        ck_assert_uint_gt(samples, 0);
        ck_assert_int_eq(way, lat < near ? 1 : 0);
    } else {
        ck_assert_int_eq(way, 0); /* no choice made: whole, as a string copy does */
    }
    down();
    unsetenv("MPIV_SHM_COPY");
}
END_TEST

/* The choice's rule by itself (shm_copy.h), on made-up samples. */
START_TEST(test_shm_copy_rule)
{
    const uint32_t near = 200;
    struct shm_copy_choice c = shm_copy_choice_init(-1);
    ck_assert_int_eq(c.way, SHM_COPY_WHOLE); /* C1 */
    shm_copy_learn(&c, 50, 0);               /* C4: no threshold, no choice */
    ck_assert_int_eq(c.way, SHM_COPY_WHOLE);
    ck_assert_uint_eq(c.samples, 0);
    shm_copy_learn(&c, 100, near); /* the first sample is the mean */
    ck_assert_uint_eq(c.lat, 100);
    ck_assert_int_eq(c.way, SHM_COPY_PIECES);
    /* C3: one stretched sample moves the mean by under 2x, not across */
    shm_copy_learn(&c, 1000000, near);
    ck_assert_uint_lt(c.lat, 200);
    ck_assert_int_eq(c.way, SHM_COPY_PIECES);
    for (int i = 0; i < 20; i++)
        shm_copy_learn(&c, 100, near);
    ck_assert_uint_le(c.lat, 102);
    /* a far peer from now on: followed within 3 samples */
    int k = 0;
    while (c.way == SHM_COPY_PIECES && k < 10) {
        shm_copy_learn(&c, 700, near);
        k++;
    }
    ck_assert_int_le(k, 3);
    ck_assert_int_eq(c.way, SHM_COPY_WHOLE);
    for (int i = 0; i < 40; i++)
        shm_copy_learn(&c, 700, near);
    ck_assert_uint_ge(c.lat, 690);
    /* and back, the mean saturating at neither end */
    for (int i = 0; i < 40; i++)
        shm_copy_learn(&c, 0, near);
    ck_assert_uint_le(c.lat, 2);
    ck_assert_uint_ge(c.lat, 1);
    ck_assert_int_eq(c.way, SHM_COPY_PIECES);
    struct shm_copy_choice big = shm_copy_choice_init(-1);
    for (int i = 0; i < 40; i++)
        shm_copy_learn(&big, UINT64_MAX / 2, near);
    ck_assert_uint_eq(big.lat, UINT16_MAX);
    ck_assert_int_eq(big.way, SHM_COPY_WHOLE);
    ck_assert_uint_eq(big.samples, 40);
    /* C6: near, but past SHM_COPY_PIECES_MAX a copy is whole */
    ck_assert(shm_copy_in_pieces(&c, SHM_COPY_PIECE + 1));
    ck_assert(shm_copy_in_pieces(&c, SHM_COPY_PIECES_MAX));
    ck_assert(!shm_copy_in_pieces(&c, SHM_COPY_PIECES_MAX + 1));
    ck_assert(!shm_copy_in_pieces(&big, SHM_COPY_PIECE + 1));
    /* C5: fixed, samples change nothing, and pieces means every length */
    for (int w = SHM_COPY_WHOLE; w <= SHM_COPY_PIECES; w++) {
        struct shm_copy_choice f = shm_copy_choice_init(w);
        shm_copy_learn(&f, w == SHM_COPY_WHOLE ? 1 : 5000, near);
        ck_assert_int_eq(f.way, w);
        ck_assert_uint_eq(f.samples, 0);
        ck_assert_int_eq(shm_copy_in_pieces(&f, (size_t)1 << 20), w == SHM_COPY_PIECES);
    }
}
END_TEST

/* Sends windows of `window` records (`records` in all, payloads of
 * (i * 53) % max_len bytes) to ourselves, polling each window back before
 * the next one, checks every record, and returns the farthest ring offset
 * the writes reached. */
static size_t stream_windows_of(int window, uint32_t records, size_t max_len)
{
    size_t ring = srv_shm_test_ring_bytes(be);
    unsigned char hdr[32], body[200];
    ck_assert_uint_le(max_len, sizeof body);
    struct srv_cqe ev[8];
    size_t far = 0;
    for (uint32_t i = 0; i < records;) {
        uint32_t first = i;
        for (int w = 0; w < window && i < records; w++, i++) {
            size_t len = (i * 53u) % max_len;
            memset(hdr, 0, sizeof hdr);
            memcpy(hdr, &i, sizeof i);
            memset(body, (int)(i & 0xff), len);
            ck_assert_int_eq(ops->send_inline(be, 0, hdr, sizeof hdr, body, len), SRV_DONE);
            size_t off = (size_t)(srv_shm_test_tail(be, 0) % ring);
            if (off > far)
                far = off;
        }
        for (uint32_t want = first; want < i;) {
            int n = ops->poll(be, ev, 1);
            ck_assert_int_ge(n, 0);
            if (n == 0)
                continue;
            ck_assert_int_eq(ev[0].kind, SRV_CQE_RECV);
            size_t len = (want * 53u) % max_len;
            ck_assert_uint_eq(ev[0].len, 32 + len);
            uint32_t seq;
            memcpy(&seq, ev[0].data, sizeof seq);
            ck_assert_uint_eq(seq, want);
            /* one check per record: Check reports every assertion's
             * place to its parent process, a system call each */
            size_t bad = len;
            for (size_t k = 0; k < len && bad == len; k++)
                if (ev[0].data[32 + k] != (want & 0xff))
                    bad = k;
            ck_assert_msg(bad == len, "record %u: byte %zu is wrong", want, bad);
            ck_assert_int_eq(ops->post_recv(be, ev[0].p), MPIV_SUCCESS);
            if (ops->release)
                ops->release(be);
            want++;
        }
    }
    ck_assert_uint_eq(srv_shm_test_dropped(be), 0);
    return far;
}

/* A ring read about as fast as it is written starts over at its beginning
 * once past the hot part, so its lines stay in cache; nothing is lost or
 * reordered on the way (the SKIP that wraps it early is read as any
 * other). A ping-pong leaves the ring empty at each check; a window of
 * small messages (the bandwidth pattern) leaves a few in it, which must
 * not keep the writes sweeping the whole ring either. With the early
 * start-over removed (or, for the window, limited to an empty ring), the
 * writes reach far past the hot part and the offset check fails. */
/* Payloads of up to 199 bytes (one to four lines), and of up to 8 (one
 * line each), both for each window: all through the sender's short_put,
 * which must leave the look to rec_begin. */
START_TEST(test_shm_pingpong_stays_hot)
{
    up(&srv_shm_ops);
    size_t ring = srv_shm_test_ring_bytes(be), hot = srv_shm_test_hot_bytes();
    ck_assert_uint_gt(ring, hot); /* else there is nothing to stay in */
    static const int windows[] = {1, 64};
    static const size_t max_lens[] = {200, 9};
    for (size_t m = 0; m < sizeof max_lens / sizeof max_lens[0]; m++)
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
            /* a lap and a quarter: without the early start-over the writes
             * reach the end of the ring within the first lap */
            uint32_t per = max_lens[m] > 9 ? 256 : 64;
            size_t far = stream_windows_of(windows[w], (uint32_t)(5 * ring / 4 / per), max_lens[m]);
            ck_assert_msg(far <= hot + 256 + 64,
                          "a window of %d (payloads under %zu bytes) wrote up to byte %zu of a "
                          "%zu-byte ring (the hot part is %zu bytes)",
                          windows[w], max_lens[m], far, ring, hot);
        }
    down();
}
END_TEST

/* Short records (header and payload of SHORT_MAX bytes or fewer: the
 * sender's short_put) and a few just past them (the general path), around
 * the ring four times, filled until it is full and then drained, with
 * every header length from 0 to 40 and payloads of every length class
 * (0 to 3 bytes, 4 to 7 and 8 or more take different small copies; a
 * record of one line, of several, and of exactly 16 lines with the
 * stamp's copy in its last 8 bytes), every byte checked: a copy that
 * writes a byte short, or one too far (into the stamp's copy or the next
 * record's header), shows up as a wrong byte or a dropped record. */
START_TEST(test_shm_short_records)
{
    up(&srv_shm_ops);
    size_t ring = srv_shm_test_ring_bytes(be);
    enum { HDR_MAX = 40, SHORT_MAX = 16 * 64 - 24 - 8, TOTAL_MAX = SHORT_MAX + 64 };
    static unsigned char hdr[HDR_MAX], body[TOTAL_MAX];
    uint32_t sent = 0, got = 0, fulls = 0;
    uint64_t bytes = 0, at_most = 0, past = 0;
    struct srv_cqe ev[16];
    /* record i: a header of i % 41 bytes; a total of up to 40 bytes for
     * even i, of up to TOTAL_MAX for odd i, both sweeping their range */
#define SHORT_HLEN(i) ((size_t)(i) % (HDR_MAX + 1))
#define SHORT_TOTAL(i) ((i) % 2 ? (size_t)((i) * 131u) % (TOTAL_MAX + 1) : (size_t)((i) / 2) % (HDR_MAX + 1))
#define SHORT_LEN(i) (SHORT_TOTAL(i) > SHORT_HLEN(i) ? SHORT_TOTAL(i) - SHORT_HLEN(i) : 0)
    while (bytes < 4 * (uint64_t)ring) {
        for (;;) { /* fill */
            size_t hlen = SHORT_HLEN(sent), len = SHORT_LEN(sent);
            for (size_t k = 0; k < hlen; k++)
                hdr[k] = (unsigned char)(sent * 3u + k);
            for (size_t k = 0; k < len; k++)
                body[k] = (unsigned char)(sent * 5u + 100u + k);
            int rc = ops->send_inline(be, 0, hdr, hlen, body, len);
            if (rc == SRV_AGAIN) {
                fulls++;
                break;
            }
            ck_assert_int_eq(rc, SRV_DONE);
            if (hlen + len == SHORT_MAX)
                at_most++;
            if (hlen + len > SHORT_MAX)
                past++;
            bytes += hlen + len;
            sent++;
        }
        while (got < sent) { /* drain */
            int n = ops->poll(be, ev, 16);
            ck_assert_int_ge(n, 0);
            for (int i = 0; i < n; i++) {
                size_t hlen = SHORT_HLEN(got), len = SHORT_LEN(got), bad = hlen + len;
                ck_assert_int_eq(ev[i].kind, SRV_CQE_RECV);
                ck_assert_uint_eq(ev[i].len, hlen + len);
                for (size_t k = 0; k < hlen + len && bad == hlen + len; k++) {
                    unsigned char want = k < hlen ? (unsigned char)(got * 3u + k)
                                                  : (unsigned char)(got * 5u + 100u + (k - hlen));
                    if (ev[i].data[k] != want)
                        bad = k;
                }
                ck_assert_msg(bad == hlen + len,
                              "record %u (%zu + %zu bytes): byte %zu is wrong", got, hlen, len,
                              bad);
                ck_assert_int_eq(ops->post_recv(be, ev[i].p), MPIV_SUCCESS);
                got++;
            }
            if (ops->release)
                ops->release(be);
        }
    }
#undef SHORT_HLEN
#undef SHORT_TOTAL
#undef SHORT_LEN
    /* each fill ran until the ring was full; the longest short record
     * and records past it were among those sent */
    ck_assert_uint_ge(fulls, 4);
    ck_assert_uint_gt(at_most, 0);
    ck_assert_uint_gt(past, 0);
    poll_none(5);
    ck_assert_uint_eq(srv_shm_test_dropped(be), 0);
    down();
}
END_TEST

/* One message of a ping-pong through our own ring: a header of
 * PINGPONG_HDR bytes that starts with `i`, and len bytes of body (i's low
 * byte), sent, then taken back off the ring and checked byte by byte. */
enum { PINGPONG_HDR = 32 };
static void pingpong_message(uint32_t i, size_t len, unsigned char *body)
{
    unsigned char hdr[PINGPONG_HDR] = {0};
    memcpy(hdr, &i, sizeof i);
    memset(body, (int)(i & 0xff), len);
    ck_assert_int_eq(ops->send_inline(be, 0, hdr, sizeof hdr, body, len), SRV_DONE);
    struct srv_cqe ev[1];
    ck_assert_int_eq(poll_n(ev, 1, 1), 1);
    ck_assert_int_eq(ev[0].kind, SRV_CQE_RECV);
    ck_assert_uint_eq(ev[0].len, PINGPONG_HDR + len);
    uint32_t seq;
    memcpy(&seq, ev[0].data, sizeof seq);
    ck_assert_uint_eq(seq, i);
    size_t bad = len;
    for (size_t k = 0; k < len && bad == len; k++)
        if (ev[0].data[PINGPONG_HDR + k] != (i & 0xff))
            bad = k;
    ck_assert_msg(bad == len, "%zu-byte message %u: byte %zu is wrong", len, i, bad);
    ck_assert_int_eq(ops->post_recv(be, ev[0].p), MPIV_SUCCESS);
    if (ops->release)
        ops->release(be);
}

/* In a ring of 256 KiB (MPIV_SHM_RING; the default from 32 ranks on),
 * shorter than half of any look_far, once a look found the ring empty, a
 * ping-pong of long records starts over at each SHM_NEAR bytes, not
 * SHM_HOT nor look_far: its records then stay in the first-level cache
 * (shm.c). Messages of 2, 4 and 8 KiB, each a lap and a quarter of the
 * ring, every byte checked; past the first SHM_HOT bytes (where the first
 * look is) the writes reach no further than SHM_NEAR and one record. With
 * the look at SHM_HOT only, or the far rule of longer rings, they reach
 * SHM_HOT or the ring's end and the check fails. */
START_TEST(test_shm_small_ring_pingpong_stays_near)
{
    ck_assert_int_eq(setenv("MPIV_SHM_RING", "262144", 1), 0);
    up(&srv_shm_ops);
    ck_assert_int_eq(unsetenv("MPIV_SHM_RING"), 0);
    size_t ring = srv_shm_test_ring_bytes(be), hot = srv_shm_test_hot_bytes(),
           near = srv_shm_test_near_bytes();
    ck_assert_uint_eq(ring, 262144);
    ck_assert_uint_lt(near, hot);
    static const size_t sizes[] = {2048, 4096, 8192};
    unsigned char *body = malloc(8192);
    ck_assert_ptr_nonnull(body);
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        size_t len = sizes[z], far = 0, span = 0;
        uint64_t start = srv_shm_test_tail(be, 0);
        uint32_t records = (uint32_t)(5 * ring / 4 / (len + 64));
        for (uint32_t i = 0; i < records; i++) {
            uint64_t before = srv_shm_test_tail(be, 0);
            pingpong_message(i, len, body);
            size_t off = (size_t)(srv_shm_test_tail(be, 0) % ring);
            if (before - start >= 2 * hot && off > far)
                far = off;
            if (off && (span == 0 || off < span))
                span = off; /* where a record at the start of the ring ends */
        }
        ck_assert_uint_gt(span, 0);
        ck_assert_msg(far <= near + span,
                      "a ping-pong of %zu-byte messages wrote up to byte %zu of a %zu-byte ring "
                      "(near part %zu bytes, records of %zu)", len, far, ring, near, span);
    }
    ck_assert_uint_eq(srv_shm_test_dropped(be), 0);
    free(body);
    down();
}
END_TEST

/* A ping-pong of long records (SHM_LOOK_LONG bytes or more: messages of
 * 2 to 16 KiB) never starts over before look_far, and does once past it:
 * its records go into lines the reader read look_far bytes before (shm.c).
 * Each size a lap and a quarter of the ring, every byte checked; every
 * start-over comes after a record that ended at look_far or less than two
 * records past it, and there is at least one. With the start-over at
 * SHM_HOT (or nearer) for these records, a start-over comes before
 * look_far; with none, the writes reach the end of the ring. look_far is
 * set to a quarter of the ring, whatever this machine's caches chose. */
START_TEST(test_shm_long_pingpong_goes_far)
{
    up(&srv_shm_ops);
    size_t ring = srv_shm_test_ring_bytes(be), far_look = ring / 4;
    srv_shm_test_set_look_far(be, far_look);
    ck_assert_uint_ge(far_look, 4 * srv_shm_test_hot_bytes());
    ck_assert_uint_le(srv_shm_test_look_long_bytes(), 2048); /* every size below is long */
    static const size_t sizes[] = {2048, 4096, 8192, 16384};
    unsigned char *body = malloc(16384);
    ck_assert_ptr_nonnull(body);
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        /* a record's span: header, payload, stamp's copy and gap, rounded
         * up to lines, is less than this */
        size_t len = sizes[z], span = PINGPONG_HDR + len + 1024;
        size_t prev = (size_t)(srv_shm_test_tail(be, 0) % ring);
        int overs = 0;
        uint32_t records = (uint32_t)(5 * ring / 4 / (len + 64));
        for (uint32_t i = 0; i < records; i++) {
            pingpong_message(i, len, body);
            size_t off = (size_t)(srv_shm_test_tail(be, 0) % ring);
            if (off < prev) { /* started over (or wrapped at the ring's end) */
                ck_assert_msg(prev >= far_look && prev <= far_look + 2 * span,
                              "a ping-pong of %zu-byte messages started over after byte %zu "
                              "of a %zu-byte ring (look_far %zu, records under %zu bytes)",
                              len, prev, ring, far_look, span);
                overs++;
            }
            prev = off;
        }
        ck_assert_msg(overs > 0, "a ping-pong of %zu-byte messages never started over", len);
    }
    ck_assert_uint_eq(srv_shm_test_dropped(be), 0);
    free(body);
    down();
}
END_TEST

/* A rendezvous ping-pong starts over too, once past look_far, and not
 * before: each message is a short record (the RTS), two CHUNKs written
 * back to back, then the IMM, and the next message comes once all of it
 * was read; CHUNKs of 16, 32 and 64 KiB. The RTS and the IMM are short
 * records, which would start over at an SHM_HOT boundary with the reader
 * less than SHM_HOT / 2 behind (a CHUNK of 16 KiB): then the writes stay
 * within the first messages and the check that they reach look_far
 * fails; without the look of long records they sweep the whole ring and
 * the other check fails. Every byte still arrives where its CHUNK says.
 * look_far is set to a quarter of the ring, whatever this machine's
 * caches chose. */
START_TEST(test_shm_rendezvous_pingpong_goes_far)
{
    up(&srv_shm_ops);
    size_t ring = srv_shm_test_ring_bytes(be), far_look = ring / 4;
    srv_shm_test_set_look_far(be, far_look);
    static const size_t chunks[] = {16 << 10, 32 << 10, 64 << 10};
    enum { MSG_MAX = 2 * (64 << 10) };
    /* else the ring bounds it anyway */
    ck_assert_uint_ge(ring, far_look + 8 * (size_t)MSG_MAX);
    unsigned char *dst = malloc(MSG_MAX), *src = malloc(MSG_MAX);
    srv_mr mr;
    void *h;
    ck_assert_int_eq(ops->mr_reg(be, dst, MSG_MAX, &mr, &h), MPIV_SUCCESS);
    uint64_t b = (uint64_t)(uintptr_t)dst;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        size_t chunk = chunks[c], msg = 2 * chunk, far = 0;
        /* a lap and a quarter of the ring */
        int rounds = (int)(5 * ring / 4 / msg);
        for (int r = 0; r < rounds; r++) {
            memset(src, r + 1, msg);
            struct srv_cqe ev[4];
            ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_MSG, 8, 0, 0, 0, "rts-rts-", 8),
                             MPIV_SUCCESS);
            ck_assert_int_eq(poll_n(ev, 1, 1), 1);
            ck_assert_int_eq(ev[0].kind, SRV_CQE_RECV);
            ck_assert_int_eq(ops->post_recv(be, ev[0].p), MPIV_SUCCESS);
            if (ops->release)
                ops->release(be);
            /* the reader copies each CHUNK out while the next is written,
             * so it is one CHUNK behind when the IMM comes */
            for (size_t off = 0; off < msg; off += chunk) {
                if (off) {
                    ck_assert_int_eq(ops->poll(be, ev, 4), 0);
                    if (ops->release)
                        ops->release(be);
                }
                ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_CHUNK, (uint32_t)chunk, 0,
                                                      b + off, 0, src + off, chunk),
                                 MPIV_SUCCESS);
                size_t end = (size_t)(srv_shm_test_tail(be, 0) % ring);
                if (end > far)
                    far = end;
            }
            ck_assert_int_eq(srv_shm_test_put_rec(be, 0, CELL_IMM, (uint32_t)msg, 0, 0,
                                                  (uint32_t)r, NULL, 0),
                             MPIV_SUCCESS);
            size_t off = (size_t)(srv_shm_test_tail(be, 0) % ring);
            if (off > far)
                far = off;
            ck_assert_int_eq(poll_n(ev, 1, 1), 1);
            ck_assert_int_eq(ev[0].kind, SRV_CQE_IMM);
            ck_assert_int_eq(ev[0].err, MPIV_SUCCESS);
            ck_assert_uint_eq(ev[0].imm, (uint32_t)r);
            ck_assert_msg(dst[0] == (unsigned char)(r + 1) &&
                              dst[msg - 1] == (unsigned char)(r + 1),
                          "CHUNKs of %zu bytes, round %d: the bytes did not arrive", chunk, r);
        }
        ck_assert_msg(far <= far_look + 2 * msg,
                      "a rendezvous ping-pong with CHUNKs of %zu bytes wrote up to byte %zu of "
                      "a %zu-byte ring (its CHUNKs look from byte %zu on)",
                      chunk, far, ring, far_look);
        ck_assert_msg(far >= far_look,
                      "a rendezvous ping-pong with CHUNKs of %zu bytes wrote up to byte %zu "
                      "only: it starts over before byte %zu", chunk, far, far_look);
    }
    ck_assert_uint_eq(srv_shm_test_dropped(be), 0);
    ops->mr_dereg(be, h);
    free(src);
    free(dst);
    down();
}
END_TEST

/* A burst that outruns the reader (records written while nothing is read)
 * still has the whole ring: the early start-over must not shrink it. */
START_TEST(test_shm_burst_has_the_whole_ring)
{
    up(&srv_shm_ops);
    size_t ring = srv_shm_test_ring_bytes(be);
    /* 232-byte records (256 with the header, four lines): a burst of 3/4
     * of the ring fits in it whatever the early start-over does */
    uint32_t n = (uint32_t)(3 * ring / 4 / 256);
    ck_assert_uint_ge(n, 16);
    for (int lap = 0; lap < 3; lap++) {
        unsigned char hdr[32] = {0}, body[200] = {0};
        for (uint32_t i = 0; i < n; i++)
            ck_assert_msg(ops->send_inline(be, 0, hdr, sizeof hdr, body, sizeof body) == SRV_DONE,
                          "lap %d: record %u of a %u-record burst did not fit in a %zu-byte ring",
                          lap, i, n, ring);
        struct srv_cqe ev[8];
        for (uint32_t got = 0; got < n;) {
            int k = ops->poll(be, ev, 1);
            ck_assert_int_ge(k, 0);
            if (k == 0)
                continue;
            ck_assert_int_eq(ev[0].kind, SRV_CQE_RECV);
            ck_assert_int_eq(ops->post_recv(be, ev[0].p), MPIV_SUCCESS);
            if (ops->release)
                ops->release(be);
            got++;
        }
    }
    down();
}
END_TEST

/* The sender asks for the ring's lines ahead of its tail for short records
 * (rec_begin), but never for one the receiver may still have to read: a
 * burst into a ring nobody reads fills it, and at every send the asked-for
 * mark stays within a ring of the receiver's head as the sender saw it.
 * Without that bound the mark runs SHM_AHEAD_LINES past it once the ring
 * is nearly full. A long record asks for nothing. */
START_TEST(test_shm_sender_asks_ahead_of_read_lines_only)
{
    up(&srv_shm_ops);
    uint64_t ring = srv_shm_test_ring_bytes(be), seen;
    unsigned char hdr[32] = {0}, body[8] = {0};
    ck_assert_int_eq(ops->send_inline(be, 0, hdr, sizeof hdr, body, sizeof body), SRV_DONE);
    uint64_t tail = srv_shm_test_tail(be, 0);
    uint64_t ahead = srv_shm_test_ahead(be, 0, &seen);
    ck_assert_uint_gt(ahead, tail); /* an empty ring: lines asked for ahead */
    uint64_t sends = 1;
    for (;;) {
        int rc = ops->send_inline(be, 0, hdr, sizeof hdr, body, sizeof body);
        if (rc == SRV_AGAIN)
            break;
        ck_assert_int_eq(rc, SRV_DONE);
        sends++;
        ck_assert_uint_le(sends, ring / 64); /* one line each: the ring fills */
        ahead = srv_shm_test_ahead(be, 0, &seen);
        ck_assert_msg(ahead <= seen + ring,
                      "send %" PRIu64 ": lines asked for up to %" PRIu64 ", but the receiver "
                      "may still read what lies past %" PRIu64, sends, ahead, seen + ring);
    }
    ck_assert_uint_eq(srv_shm_test_tail(be, 0), srv_shm_test_ahead(be, 0, &seen)); /* full */

    /* read it all, then a long record: nothing asked for past its end */
    struct srv_cqe ev[8];
    for (uint64_t got = 0; got < sends;) {
        int k = ops->poll(be, ev, 8);
        ck_assert_int_ge(k, 0);
        for (int i = 0; i < k; i++)
            ck_assert_int_eq(ops->post_recv(be, ev[i].p), MPIV_SUCCESS);
        if (ops->release)
            ops->release(be);
        got += (uint64_t)k;
    }
    static unsigned char big[4096];
    uint64_t before = srv_shm_test_ahead(be, 0, &seen);
    ck_assert_int_eq(ops->send_inline(be, 0, hdr, sizeof hdr, big, sizeof big), SRV_DONE);
    ck_assert_uint_eq(srv_shm_test_ahead(be, 0, &seen), before);
    down();
}
END_TEST

/* A record of 17 lines or more is followed by unused lines (shm.c,
 * SHM_GAP_LINES: the reader's prefetch past a long record must not take
 * lines the sender writes next), a shorter one by none; the reader finds
 * the record after the gap. */
START_TEST(test_shm_long_record_leaves_a_gap)
{
    up(&srv_shm_ops);
    unsigned char hdr[32], body[961];
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (unsigned char)(i * 7 + 1);
    memset(hdr, 0x33, sizeof hdr);
    /* 24-byte record header + 32 + 960 + 8-byte stamp copy: 16 lines */
    uint64_t t0 = srv_shm_test_tail(be, 0);
    ck_assert_int_eq(ops->send_inline(be, 0, hdr, sizeof hdr, body, 960), SRV_DONE);
    uint64_t t1 = srv_shm_test_tail(be, 0);
    ck_assert_uint_eq(t1 - t0, 16 * 64);
    /* one byte more: 17 lines, and the gap after them */
    ck_assert_int_eq(ops->send_inline(be, 0, hdr, sizeof hdr, body, 961), SRV_DONE);
    uint64_t t2 = srv_shm_test_tail(be, 0);
    ck_assert_msg(t2 - t1 > 17 * 64 && (t2 - t1) % 64 == 0,
                  "a 17-line record took %" PRIu64 " bytes of the ring", t2 - t1);
    ck_assert_int_eq(ops->send_inline(be, 0, hdr, sizeof hdr, "abc", 3), SRV_DONE);
    ck_assert_uint_eq(srv_shm_test_tail(be, 0) - t2, 64);
    size_t want[] = {960, 961, 3};
    struct srv_cqe ev[4];
    for (size_t got = 0; got < 3;) {
        int k = ops->poll(be, ev, 1);
        ck_assert_int_ge(k, 0);
        if (k == 0)
            continue;
        ck_assert_int_eq(ev[0].kind, SRV_CQE_RECV);
        ck_assert_uint_eq(ev[0].len, sizeof hdr + want[got]);
        ck_assert_mem_eq(ev[0].data, hdr, sizeof hdr);
        ck_assert_mem_eq(ev[0].data + sizeof hdr, got == 2 ? (const void *)"abc" : body,
                         want[got]);
        ck_assert_int_eq(ops->post_recv(be, ev[0].p), MPIV_SUCCESS);
        if (ops->release)
            ops->release(be);
        got++;
    }
    poll_none(5);
    ck_assert_uint_eq(srv_shm_test_dropped(be), 0);
    down();
}
END_TEST

START_TEST(test_shm_write_self_unregistered)
{
    up(&srv_shm_ops);
    unsigned char *dst = malloc(PAGE), src[64];
    memset(dst, 0xEE, PAGE);
    memset(src, 0x5A, sizeof src);
    struct srv_rdma_op *op = new_op(src, sizeof src, NULL, (uint64_t)(uintptr_t)dst, 0, 7);
    ck_assert_int_eq(ops->rdma_write_imm(be, op), MPIV_SUCCESS);
    struct srv_cqe ev[4];
    ck_assert_int_eq(poll_n(ev, 4, 1), 1);
    ck_assert_int_eq(ev[0].kind, SRV_CQE_WRITE);
    ck_assert_ptr_eq(ev[0].op, op);
    ck_assert_int_eq(ev[0].err, MPIV_ERR_NET);
    ck_assert_int_eq(ev[0].src, 0);
    poll_none(100); /* and no immediate */
    for (size_t i = 0; i < PAGE; i++)
        ck_assert_msg(dst[i] == 0xEE, "unregistered buffer written at %zu", i);
    free(op);
    free(dst);
    down();
}
END_TEST

START_TEST(test_shm_max_write)
{
    up(&srv_shm_ops);
    ck_assert_uint_eq(ops->max_write(be), (size_t)1 << 30);
    static unsigned char one;
    struct srv_rdma_op *op = new_op(&one, ((size_t)1 << 30) + 1, NULL, 0, 0, 7);
    ck_assert_int_eq(ops->rdma_write_imm(be, op), MPIV_ERR_ARG);
    poll_none(50);
    free(op);
    down();
}
END_TEST

START_TEST(test_shm_foreign_segment)
{
    up(&srv_shm_ops);
    size_t len = srv_shm_test_segment_size(be);
    char name[64];
    /* not the pid alone: a killed run of this test leaves the file, and
     * pids come round again */
    snprintf(name, sizeof name, "/mpiv-test-%d-%" PRIx64, (int)getpid(), util_now_ns());
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fchmod(fd, 0600), 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
    ck_assert_int_eq(srv_shm_test_open_segment(be, name), MPIV_SUCCESS);
    /* readable by others: someone else may have made it, or may read it */
    ck_assert_int_eq(fchmod(fd, 0644), 0);
    ck_assert_int_eq(srv_shm_test_open_segment(be, name), MPIV_ERR_NET);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "mode 0644"));
    /* too short: mapping it would fault past its end */
    ck_assert_int_eq(fchmod(fd, 0600), 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)len / 2), 0);
    ck_assert_int_eq(srv_shm_test_open_segment(be, name), MPIV_ERR_NET);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "bytes"));
    close(fd);
    shm_unlink(name);
    down();
}
END_TEST

/* --- ofi ----------------------------------------------------------------- */

/* Only where the provider checks keys: libfabric's shm provider (the
 * default on one host) neither checks them nor reports a bad address. */
START_TEST(test_ofi_write_bad_key)
{
    const char *prov = getenv("MPIV_OFI_PROVIDER");
    if (!prov || strncmp(prov, "tcp", 3) != 0)
        return;
    up(&srv_ofi_ops);
    unsigned char *src = calloc(1, PAGE), *dst = calloc(1, PAGE);
    srv_mr smr, dmr;
    void *sh, *dh;
    ck_assert_int_eq(ops->mr_reg(be, src, PAGE, &smr, &sh), MPIV_SUCCESS);
    ck_assert_int_eq(ops->mr_reg(be, dst, PAGE, &dmr, &dh), MPIV_SUCCESS);
    struct srv_rdma_op *op = new_op(src, PAGE, &smr, dmr.raddr, dmr.rkey + 1000003, 7);
    ck_assert_int_eq(ops->rdma_write_imm(be, op), MPIV_SUCCESS);
    struct srv_cqe ev[4];
    ck_assert_int_eq(poll_n(ev, 4, 1), 1);
    ck_assert_int_eq(ev[0].kind, SRV_CQE_WRITE);
    ck_assert_ptr_eq(ev[0].op, op);
    ck_assert_int_ne(ev[0].err, MPIV_SUCCESS);
    free(op);
    ops->mr_dereg(be, sh);
    ops->mr_dereg(be, dh);
    free(src);
    free(dst);
    down();
}
END_TEST

START_TEST(test_ofi_note_fails)
{
    up(&srv_ofi_ops);
    srv_ofi_test_set_notify(be, true);
    unsigned char *src = calloc(1, PAGE), *dst = calloc(1, PAGE);
    srv_mr smr, dmr;
    void *sh, *dh;
    ck_assert_int_eq(ops->mr_reg(be, src, PAGE, &smr, &sh), MPIV_SUCCESS);
    ck_assert_int_eq(ops->mr_reg(be, dst, PAGE, &dmr, &dh), MPIV_SUCCESS);
    /* a good announced write first: the path works */
    struct srv_rdma_op *op = new_op(src, PAGE, &smr, dmr.raddr, dmr.rkey, 0x77);
    ck_assert_int_eq(ops->rdma_write_imm(be, op), MPIV_SUCCESS);
    struct srv_cqe ev[8];
    ck_assert_int_eq(poll_n(ev, 8, 2), 2);
    int w = ev[0].kind == SRV_CQE_WRITE ? 0 : 1;
    ck_assert_int_eq(ev[w].kind, SRV_CQE_WRITE);
    ck_assert_int_eq(ev[w].err, MPIV_SUCCESS);
    ck_assert_int_eq(ev[1 - w].kind, SRV_CQE_IMM);
    ck_assert_int_eq(ev[1 - w].src, 0);
    ck_assert_uint_eq(ev[1 - w].imm, 0x77);
    ck_assert_uint_eq(ev[1 - w].len, PAGE);
    ck_assert_int_eq(ops->post_recv(be, ev[1 - w].p), MPIV_SUCCESS);
    /* then one whose announcement fails: its completion must say so */
    srv_ofi_test_fail_notes(be, 1);
    op->note[0] = op->note[1] = 0;
    ck_assert_int_eq(ops->rdma_write_imm(be, op), MPIV_SUCCESS);
    int n = poll_n(ev, 8, 1);
    ck_assert_int_ge(n, 1);
    ck_assert_int_eq(ev[0].kind, SRV_CQE_WRITE);
    ck_assert_ptr_eq(ev[0].op, op);
    ck_assert_int_eq(ev[0].err, MPIV_ERR_NET);
    ck_assert_int_eq(ev[0].src, 0);
    free(op);
    ops->mr_dereg(be, sh);
    ops->mr_dereg(be, dh);
    free(src);
    free(dst);
    down();
}
END_TEST

START_TEST(test_ofi_source_is_the_transports)
{
    up(&srv_ofi_ops);
    struct srv_cqe ev[8];
    uint64_t claims[] = {5, 0, UINT32_MAX};
    for (size_t i = 0; i < sizeof claims / sizeof claims[0]; i++) {
        pkt_t *p = pkt_get(pool, 0);
        memset(p->data, 0x33, 200);
        p->len = 200; /* above inject sizes of some providers: either path */
        p->peer = 0;
        int rc = srv_ofi_test_send_data(be, p, 0, claims[i]);
        ck_assert_int_eq(rc, MPIV_SUCCESS);
        int got = 0;
        struct srv_cqe *recv = NULL;
        uint64_t deadline = util_now_ns() + 10ull * 1000000000ull;
        while (!recv && util_now_ns() < deadline) {
            int k = ops->poll(be, ev, 8);
            ck_assert_int_ge(k, 0);
            for (int j = 0; j < k; j++) {
                if (ev[j].kind == SRV_CQE_SEND)
                    pkt_put(pool, 0, ev[j].p);
                else if (ev[j].kind == SRV_CQE_RECV)
                    recv = &ev[j], got++;
            }
        }
        ck_assert_ptr_nonnull(recv);
        if (claims[i] == 0) {
            ck_assert_int_eq(recv->err, MPIV_SUCCESS);
            ck_assert_int_eq(recv->src, 0);
            ck_assert_uint_eq(recv->len, 200);
        } else {
            /* dropped: the packet comes back with an error, never with a
             * source the transport did not see */
            ck_assert_msg(recv->err != MPIV_SUCCESS, "claimed rank %llu accepted as src %d",
                          (unsigned long long)claims[i], recv->src);
        }
        ck_assert_int_eq(ops->post_recv(be, recv->p), MPIV_SUCCESS);
    }
    ck_assert_uint_eq(srv_ofi_test_dropped(be), 2);
    down();
}
END_TEST

START_TEST(test_ofi_max_write)
{
    up(&srv_ofi_ops);
    size_t m = ops->max_write(be);
    ck_assert_uint_gt(m, 0);
    ck_assert_uint_le(m, (size_t)1 << 30);
    static unsigned char one;
    struct srv_rdma_op *op = new_op(&one, m + 1, NULL, 0, 0, 7);
    ck_assert_int_eq(ops->rdma_write_imm(be, op), MPIV_ERR_ARG);
    free(op);
    down();
}
END_TEST

/* A region libfabric's shm provider left behind when a process with our
 * pid was killed: named as the provider names its regions by default
 * ("<pid>:<uid>:<n>"), filled with our pid so that whatever field the
 * provider reads the owner's pid from names a live process (us). Before
 * endpoints got names of their own, fi_enable failed with EBUSY on it. */
START_TEST(test_ofi_shm_stale_region_of_our_pid)
{
    const char *prov = getenv("MPIV_OFI_PROVIDER");
    if (prov && strcmp(prov, "shm") != 0)
        return;
    enum { NSTALE = 8 };
    char names[NSTALE][64];
    int32_t fill[PAGE / sizeof(int32_t)];
    for (size_t i = 0; i < sizeof fill / sizeof fill[0]; i++)
        fill[i] = (int32_t)getpid();
    for (int n = 0; n < NSTALE; n++) {
        snprintf(names[n], sizeof names[n], "/%d:%d:%d", (int)getpid(), (int)getuid(), n);
        int fd = shm_open(names[n], O_RDWR | O_CREAT | O_TRUNC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, fill, sizeof fill), (ssize_t)sizeof fill);
        close(fd);
    }
    int rank, size;
    ck_assert_int_eq(util_config_load(&cfg), MPIV_SUCCESS);
    ck_assert_int_eq(pkt_pool_create(&pool, 64, (size_t)cfg.packet_size, 1), MPIV_SUCCESS);
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_SUCCESS);
    int rc = srv_ofi_ops.init(&cfg, 0, 1, &be);
    for (int n = 0; n < NSTALE; n++)
        shm_unlink(names[n]);
    ck_assert_msg(rc == MPIV_SUCCESS, "init beside a stale region: %s", mpiv_error_detail());
    srv_ofi_ops.finalize(be);
    be = NULL;
}
END_TEST

/* The shared object a signal's handler lives in, or NULL for none. */
static const char *handler_owner(int sig)
{
    struct sigaction sa;
    ck_assert_int_eq(sigaction(sig, NULL, &sa), 0);
    void *fn = (sa.sa_flags & SA_SIGINFO) ? (void *)sa.sa_sigaction : (void *)sa.sa_handler;
    Dl_info di;
    if (fn == (void *)SIG_DFL || fn == (void *)SIG_IGN || !dladdr(fn, &di))
        return NULL;
    return di.dli_fname;
}

/* libinfinipath's constructor installs handlers that turn a crash into
 * exit(1); loading libmpiv must have put the default action back. (Check
 * has handlers of its own for SIGINT and SIGTERM: only the psm libraries'
 * are looked for.) */
static void own_sigill(int sig) { (void)sig; }

START_TEST(test_no_psm_signal_handlers)
{
    const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE, SIGINT, SIGTERM};
    /* libmpiv exported IPATH_NO_BACKTRACE=1 when it loaded, which makes
     * libinfinipath install nothing: without it, the handlers it installs
     * when the backend loads libfabric must go, and a handler of the
     * program's own (SIGILL here) must be back in place. */
    const char *fork = getenv("CK_FORK");
    bool fresh = !fork || strcmp(fork, "no") != 0;
    if (fresh)
        unsetenv("IPATH_NO_BACKTRACE");
    struct sigaction mine = {.sa_handler = own_sigill};
    sigemptyset(&mine.sa_mask);
    ck_assert_int_eq(sigaction(SIGILL, &mine, NULL), 0);
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            up(&srv_ofi_ops); /* loads libfabric; fi_getinfo may load providers */
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
            const char *o = handler_owner(sigs[i]);
            ck_assert_msg(!o || (!strstr(o, "libinfinipath") && !strstr(o, "libpsm")),
                          "signal %d is handled by %s", sigs[i], o);
        }
    }
    struct sigaction now;
    ck_assert_int_eq(sigaction(SIGILL, NULL, &now), 0);
    if (fresh)
        ck_assert_msg(now.sa_handler == own_sigill, "the program's SIGILL handler was not put back");
    down();
}
END_TEST

static bool fabric_loaded(void) { return lib_loaded("libfabric.so"); }

/* libfabric is loaded when an ofi backend starts, and only then (ofi.c,
 * ofi_load): the shm backend, and a process that never starts ofi, do not
 * run its dependencies' constructors. (Each test runs in a fresh child
 * unless CK_FORK=no, where an earlier test may have loaded it.) */
START_TEST(test_fabric_loaded_on_demand)
{
    const char *fork = getenv("CK_FORK");
    if (!fork || strcmp(fork, "no") != 0)
        ck_assert_msg(!fabric_loaded(), "libfabric was loaded before any backend started");
    up(&srv_shm_ops);
    if (!fork || strcmp(fork, "no") != 0)
        ck_assert_msg(!fabric_loaded(), "the shm backend loaded libfabric");
    down();
    pkt_pool_destroy(pool);
    boot_finalize();
    up(&srv_ofi_ops);
    ck_assert_msg(fabric_loaded(), "an ofi backend runs, yet libfabric is not loaded");
    down();
}
END_TEST

/* An ofi backend whose library cannot be loaded (_i 0), or lacks
 * libfabric's functions (_i 1, libm), fails with MPIV_ERR_NET naming the
 * library; the failure is not kept: with the real library the next start
 * works. MPIV_TEST_OFI_LIBRARY is ofi_load's test hook. */
START_TEST(test_ofi_without_libfabric)
{
    const char *fork = getenv("CK_FORK");
    if (fork && strcmp(fork, "no") == 0)
        return; /* an earlier test loaded libfabric: nothing is loaded again */
    const char *lib = _i == 0 ? "/nonexistent/libfabric.so.1" : "libm.so.6";
    setenv("MPIV_TEST_OFI_LIBRARY", lib, 1);
    int rank, size;
    ck_assert_int_eq(util_config_load(&cfg), MPIV_SUCCESS);
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_SUCCESS);
    struct srv_backend *b = NULL;
    int rc = srv_ofi_ops.init(&cfg, 0, 1, &b);
    unsetenv("MPIV_TEST_OFI_LIBRARY");
    ck_assert_int_eq(rc, MPIV_ERR_NET);
    ck_assert_ptr_null(b);
    const char *why = mpiv_error_detail();
    ck_assert_msg(strstr(why, lib) && strstr(why, _i == 0 ? "cannot load" : "lacks a libfabric function"),
                  "detail: %s", why);
    boot_finalize();
    up(&srv_ofi_ops);
    down();
}
END_TEST

static Suite *srv_backends_suite(void)
{
    Suite *s = suite_create("server_backends");
    TCase *shm = tcase_create("shm");
    tcase_set_timeout(shm, 30);
    tcase_add_test(shm, test_shm_forged_cells);
    tcase_add_test(shm, test_shm_forged_sizes);
    tcase_add_test(shm, test_shm_ring_wrap);
    tcase_add_test(shm, test_shm_two_threads);
    tcase_add_test(shm, test_shm_two_threads_lines);
    tcase_add_test(shm, test_shm_short_records);
    tcase_add_loop_test(shm, test_shm_copy_ways, 0, 3);
    tcase_add_test(shm, test_shm_copy_rule);
    tcase_add_test(shm, test_shm_pingpong_stays_hot);
    tcase_add_test(shm, test_shm_small_ring_pingpong_stays_near);
    tcase_add_test(shm, test_shm_long_pingpong_goes_far);
    tcase_add_test(shm, test_shm_rendezvous_pingpong_goes_far);
    tcase_add_test(shm, test_shm_burst_has_the_whole_ring);
    tcase_add_test(shm, test_shm_sender_asks_ahead_of_read_lines_only);
    tcase_add_test(shm, test_shm_long_record_leaves_a_gap);
    tcase_add_test(shm, test_shm_write_self_unregistered);
    tcase_add_test(shm, test_shm_max_write);
    tcase_add_test(shm, test_shm_foreign_segment);
    suite_add_tcase(s, shm);
    TCase *ofi = tcase_create("ofi");
    tcase_set_timeout(ofi, 30);
    tcase_add_test(ofi, test_ofi_write_bad_key);
    tcase_add_test(ofi, test_ofi_note_fails);
    tcase_add_test(ofi, test_ofi_source_is_the_transports);
    tcase_add_test(ofi, test_ofi_max_write);
    tcase_add_test(ofi, test_no_psm_signal_handlers);
    tcase_add_test(ofi, test_fabric_loaded_on_demand);
    tcase_add_loop_test(ofi, test_ofi_without_libfabric, 0, 2);
    tcase_add_test(ofi, test_ofi_shm_stale_region_of_our_pid);
    suite_add_tcase(s, ofi);
    return s;
}

CHECK_MAIN(.suite = srv_backends_suite);
