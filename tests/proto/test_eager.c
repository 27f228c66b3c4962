/*
 * The eager path on one host (shm backend), 2 ranks: rank 0 sends, rank 1
 * receives. On shm a message up to proto_eager_max (MPIV_SHM_EAGER_LIMIT)
 * is copied by the sender straight into the receiver's ring, and by the
 * receiver's server straight into a receive that waits for it (or into a
 * heap copy that waits in the table).
 *
 *  - every size around the packet's eager limit and the shm eager limit,
 *    receive posted first and message first, data and status checked;
 *    and every size from 0 to 1,100 bytes;
 *  - truncation on that path: nothing written past the buffer, both sides
 *    told;
 *  - many small messages of varied sizes and tags, several rings' worth,
 *    so that the byte ring wraps (SKIP records), all data checked, same-key
 *    order kept;
 *  - a flood of tiny messages (no larger than an RTS body), three
 *    credits' worth, before any receive is posted: all go eagerly;
 *  - more early messages than pool packets may hold (I5), each under a
 *    tag of its own: on shm none holds a packet (heap copies), and all
 *    arrive whole; with no heap block to be had, each waits in its lent
 *    packet instead;
 *  - a full ring: the receiver's server is held up (a fault hook that
 *    sleeps) while the sender sends a burst larger than the ring; what
 *    does not fit goes through the server's queue or as an RTS, and
 *    same-key order still holds;
 *  - rendezvous messages longer than a ring, which stream through it on
 *    shm, in both orders and behind a held-up receiver;
 *  - the same hold-up against one-message ULTs until thousands of their
 *    sends no longer fit the ring: those are queued as copies, no sender
 *    blocks (a handful of stacks for all), every message arrives in
 *    order;
 *  - past the cap on queued copies (lowered for the test) a sender waits
 *    for the queue to shrink instead of taking a packet, and every
 *    message still arrives, in order;
 *  - both ranks flooding each other with eager messages and rendezvous
 *    (RTS) sends while one rank's server is held, rings full both ways;
 *    run with a pool of 8 packets, 64 KiB rings and little eager credit
 *    (proto_eager_crossflood) it is the deadlock that Q1 in server.c
 *    rules out: every send and receive completes, in order;
 *  - a window of non-blocking sends larger than the ring, the receiver
 *    held up: the sends past the ring's room wait in the send queue by
 *    reference, pending, and all arrive in order once it is let go;
 *  - the same from four pthreads at once, non-blocking and blocking sends
 *    mixed (case "threads", also run under ThreadSanitizer): each
 *    thread's stream arrives whole and in its order;
 *  - blocking sends past the eager credit before the receiver posts any
 *    (case "burst"): they go as RTS from copies and return at once (I8),
 *    until the copies reach their cap, past which a send waits for its
 *    receive.
 * The same cases run over ofi (no direct path: the packet path and the
 * rendezvous above a packet) as a cross-check.
 */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check_main.h"
#include "common/test_data.h"
#include "common/test_mpiv.h"
#include "mpiv.h"
#include "pktpool/pktcopy.h"
#include "proto/proto.h"
#include "sched/sched.h"
#include "server/srv_int.h"

static int me;

/* EAGER_TRACE=1: how long each case took, on stderr */
static void trace(const char *what)
{
    static double t0;
    double now = mpiv_wtime();
    if (getenv("EAGER_TRACE") && t0 > 0)
        fprintf(stderr, "rank %d: %s after %.3f s\n", me, what, now - t0);
    t0 = now;
}

/* The sizes that matter: small ones, both sides of what a packet carries
 * and of the eager limit towards the other rank. */
static size_t sizes_around(size_t *out)
{
    size_t pkt = proto.eager_limit, max = proto_eager_max(1 - me), n = 0;
    size_t base[] = {0, 1, 8, 63, 64, 65, 1000, pkt, 16384, max};
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
        if (base[i] > 0)
            out[n++] = base[i] - 1;
        out[n++] = base[i];
        out[n++] = base[i] + 1;
    }
    return n;
}

/* One message of `size` bytes from rank 0 to rank 1 with tag 3, the
 * receive posted first (order 0) or the message first (order 1); rank 1
 * checks the status, the data (seed) and that buf[size] stayed. buf holds
 * size + 1 bytes. */
static void transfer(unsigned char *buf, size_t size, unsigned seed, int order)
{
    if (me == 0) {
        fill(buf, size, seed);
        /* order 1: started before the receive is posted (above the
         * eager limit it completes only once it is) */
        mpiv_request_t sreq;
        if (order == 0)
            OK(mpiv_barrier()); /* the receive is posted */
        OK(mpiv_isend(buf, size, 1, 3, &sreq));
        if (order == 1)
            OK(mpiv_barrier());
        OK(mpiv_wait(&sreq, NULL));
        return;
    }
    memset(buf, 0xEE, size + 1);
    mpiv_request_t req;
    mpiv_status_t st;
    if (order == 0) {
        OK(mpiv_irecv(buf, size, 0, 3, &req));
        OK(mpiv_barrier());
    } else {
        OK(mpiv_barrier()); /* sent (eager: at least on its way) */
        OK(mpiv_irecv(buf, size, 0, 3, &req));
    }
    OK(mpiv_wait(&req, &st));
    ck_assert_uint_eq(st.size, size);
    ck_assert_int_eq(st.source, 0);
    ck_assert_int_eq(st.tag, 3);
    check_data(buf, size, seed);
    ck_assert_uint_eq(buf[size], 0xEE);
}

START_TEST(sizes_across_limits)
{
    trace("start sizes_across_limits");
    size_t sizes[32];
    size_t n = sizes_around(sizes);
    size_t max = proto_eager_max(1 - me);
    max = (max > 16384 ? max : 16384) + 2; /* the largest size, one byte more */
    unsigned char *buf = malloc(max);
    ck_assert_ptr_nonnull(buf);
    unsigned seed = 1;
    for (int order = 0; order < 2; order++) /* 0: receive first, 1: message first */
        for (size_t k = 0; k < n; k++, seed++)
            transfer(buf, sizes[k], seed, order);
    free(buf);
    OK(mpiv_barrier());
}
END_TEST

/* Every size from 0 to a little over a KiB, in both orders: the copies
 * into a record past its first line change method with the size (16-byte
 * pieces and a tail that overlaps them under SHM_PIECES_MAX, memcpy above,
 * a string copy past SHM_MOVSB_MIN), so each size is checked byte for
 * byte, with nothing written past the buffer. */
START_TEST(every_size_to_a_kib)
{
    trace("start every_size_to_a_kib");
    const size_t top = 1100;
    unsigned char *buf = malloc(top + 1);
    ck_assert_ptr_nonnull(buf);
    for (size_t size = 0; size <= top; size++)
        transfer(buf, size, (unsigned)size + 7, (int)(size & 1));
    free(buf);
    OK(mpiv_barrier());
}
END_TEST

/* A message one byte larger than the buffer, in both orders: the receive
 * fails with MPIV_ERR_TRUNCATE and nothing of the buffer changes; the
 * send succeeds. */
START_TEST(truncation_direct)
{
    trace("start truncation_direct");
    size_t pkt = proto.eager_limit, max = proto_eager_max(1 - me);
    size_t sizes[] = {1, 100, pkt, pkt + 1, 20000, max};
    if (max < 20000)
        max = 20000;
    unsigned char *buf = malloc(max + 64);
    ck_assert_ptr_nonnull(buf);
    for (int order = 0; order < 2; order++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t size = sizes[k];
            if (me == 0) {
                fill(buf, size, 9);
                mpiv_request_t sreq;
                if (order == 0)
                    OK(mpiv_barrier());
                OK(mpiv_isend(buf, size, 1, 4, &sreq));
                if (order == 1)
                    OK(mpiv_barrier());
                OK(mpiv_wait(&sreq, NULL));
            } else {
                memset(buf, 0xEE, max + 64);
                mpiv_request_t req;
                mpiv_status_t st;
                if (order == 1)
                    OK(mpiv_barrier());
                OK(mpiv_irecv(buf, size - 1, 0, 4, &req));
                if (order == 0)
                    OK(mpiv_barrier());
                ck_assert_int_eq(mpiv_wait(&req, &st), MPIV_ERR_TRUNCATE);
                ck_assert_uint_eq(st.size, size);
                size_t i = 0;
                while (i < max + 64 && buf[i] == 0xEE)
                    i++;
                ck_assert_msg(i == max + 64, "byte %zu written (message of %zu)", i, size);
            }
        }
    }
    free(buf);
    OK(mpiv_barrier());
}
END_TEST

/* Each message carries its index and key in its first 8 bytes and the
 * pattern of its index after them. */
static size_t flood_size(int i) { return 8 + (size_t)((i * 37) % 300); }

static void flood_fill(unsigned char *b, int i, int tag)
{
    fill(b, flood_size(i), (unsigned)i);
    memcpy(b, &i, 4);
    memcpy(b + 4, &tag, 4);
}

static bool flood_ok(const unsigned char *b, size_t got, int i, int tag)
{
    unsigned char want[320];
    flood_fill(want, i, tag);
    return got == flood_size(i) && memcmp(b, want, got) == 0;
}

/* Many small messages on 4 tags, several rings' worth in rounds that stay
 * within the eager credit (so that all go eagerly), each received after
 * the whole round was sent: the ring wraps many times and every message
 * arrives whole, in order per tag. */
START_TEST(small_flood_wraps)
{
    trace("start small_flood_wraps");
    const int rounds = 8, n = 8000, tags = 4;
    /* The count of eager sends that went as RTS is the process's: only
     * this test's own are asserted on. An earlier test's large eager send
     * may rightly go as an RTS when it finds the ring or the send queue
     * busy (too large for a packet, it cannot wait in one); these small
     * ones cannot, and only lacking credit would make them. */
    struct proto_stats st0;
    OK(mpiv_barrier());
    proto_get_stats(&st0);
    int first_bad = -1, bad_round = -1;
    unsigned char *b = malloc((size_t)n * 320);
    mpiv_request_t *req = malloc((size_t)n * sizeof *req);
    ck_assert(b && req);
    for (int r = 0; r < rounds; r++) {
        if (me == 0) {
            for (int i = 0; i < n; i++) {
                flood_fill(b + (size_t)i * 320, i, i % tags);
                OK(mpiv_isend(b + (size_t)i * 320, flood_size(i), 1, 100 + i % tags, &req[i]));
            }
            OK(mpiv_barrier());
            OK(mpiv_waitall(n, req, NULL));
        } else {
            OK(mpiv_barrier());
            /* tag by tag, so that each key's queue is walked in order */
            int bad = -1;
            for (int t = 0; t < tags; t++)
                for (int i = t; i < n; i += tags) {
                    mpiv_status_t st;
                    unsigned char *m = b + (size_t)i * 320;
                    OK(mpiv_recv(m, 320, 0, 100 + t, &st));
                    if (bad < 0 && !flood_ok(m, st.size, i, t))
                        bad = i;
                }
            if (bad >= 0 && first_bad < 0)
                first_bad = bad, bad_round = r;
        }
        /* A round's sends start once the last round is received: two
         * rounds in flight (2 MB each) plus the credit the receiver has
         * not given back yet (up to a quarter of its 4 MiB) could pass
         * the eager credit, and a send would rightly go as an RTS. */
        OK(mpiv_barrier());
    }
    free(b);
    free(req);
    struct proto_stats st;
    proto_get_stats(&st);
    /* both ranks pass the barrier before either may fail: a rank that
     * left early would take the next test's barriers for this one's */
    OK(mpiv_barrier());
    ck_assert_msg(first_bad < 0, "round %d: message %d came wrong", bad_round, first_bad);
    ck_assert_msg(me != 0 || st.eager_as_rts == st0.eager_as_rts,
                  "%llu small sends went as RTS",
                  (unsigned long long)(st.eager_as_rts - st0.eager_as_rts));
}
END_TEST

/* Messages no larger than an RTS body take no eager credit (I6): a flood
 * of three credits' worth of them, sent before the receiver posts
 * anything, all go eagerly (none as an RTS, which would cost a round trip
 * each and hold as much at the receiver), and all arrive whole and in
 * order. With credit charged for them, most would go as RTS. */
START_TEST(tiny_flood_needs_no_credit)
{
    trace("start tiny_flood_needs_no_credit");
    const size_t tiny = sizeof(struct proto_rts);
    const long each = (long)(tiny + sizeof(struct proto_hdr) + 64); /* p2p.c's eager_cost */
    const int n = (int)(3 * proto.credit_max / each);
    struct proto_stats st0, st;
    OK(mpiv_barrier());
    proto_get_stats(&st0);
    unsigned char *b = malloc((size_t)n * tiny);
    mpiv_request_t *req = malloc((size_t)n * sizeof *req);
    ck_assert(b && req);
    int first_bad = -1;
    if (me == 0) {
        for (int i = 0; i < n; i++) {
            unsigned char *m = b + (size_t)i * tiny;
            fill(m, tiny, (unsigned)i);
            OK(mpiv_isend(m, (size_t)i % (tiny + 1), 1, 9, &req[i]));
        }
        OK(mpiv_barrier()); /* all sent before the receiver posts one */
        OK(mpiv_waitall(n, req, NULL));
    } else {
        OK(mpiv_barrier());
        for (int i = 0; i < n; i++) {
            mpiv_status_t stat;
            unsigned char m[sizeof(struct proto_rts)];
            OK(mpiv_recv(m, tiny, 0, 9, &stat));
            size_t size = (size_t)i % (tiny + 1);
            size_t j = data_mismatch(m, 0, size, (unsigned)i);
            if (first_bad < 0 && (stat.size != size || j != size))
                first_bad = i;
        }
    }
    proto_get_stats(&st);
    free(b);
    free(req);
    OK(mpiv_barrier());
    ck_assert_msg(first_bad < 0, "message %d came wrong", first_bad);
    ck_assert_msg(me != 0 || st.eager_as_rts == st0.eager_as_rts,
                  "%llu of %d tiny sends went as RTS",
                  (unsigned long long)(st.eager_as_rts - st0.eager_as_rts), n);
}
END_TEST

/* Early messages lent by the transport (shm) wait in heap copies, not in
 * pool packets (on_eager_data): more of them than I5 lets packets hold,
 * each under a tag of its own, sent before the receiver posts anything,
 * leave every pool packet free once all are in; then each is received
 * whole. Were they kept in packets, the server would post a fresh packet
 * for each, and the first use of each fresh packet is a page fault. The
 * messages are 8-16 bytes, which take no eager credit (I6), so that the
 * tests after this one find the sender's credit whole. */
static size_t early_size(int i) { return 8 + (size_t)(i % 9); }

static void early_fill(unsigned char *m, int i, int tag)
{
    fill(m, early_size(i), (unsigned)i);
    memcpy(m, &i, 4);
    memcpy(m + 4, &tag, 4);
}

/* Sends n early messages (as above) and receives them; returns how many
 * pool packets rank 1 held once all were in (-1 on rank 0). With `fail`,
 * rank 1's next that many heap blocks cannot be had (pktcopy's test
 * knob), as when out of memory. */
static long early_stream(int n, unsigned fail)
{
    const int tag0 = 20000;
    unsigned char *b = malloc((size_t)n * 16);
    ck_assert(b);
    if (me == 1)
        pkt_copy_test_fail(fail);
    OK(mpiv_barrier());
    long held = -1;
    int first_bad = -1;
    if (me == 0) {
        for (int i = 0; i < n; i++) {
            early_fill(b + (size_t)i * 16, i, tag0 + i);
            OK(mpiv_send(b + (size_t)i * 16, early_size(i), 1, tag0 + i));
        }
        OK(mpiv_barrier());
    } else {
        OK(mpiv_barrier());
        /* one ring keeps its order: the last one in means all are */
        mpiv_status_t st;
        OK(mpiv_probe(0, tag0 + n - 1, &st));
        held = atomic_load(&proto.unexpected);
        pkt_copy_test_fail(0);
        for (int i = n - 1; i >= 0; i--) {
            unsigned char m[16], want[16];
            memset(m, 0, sizeof m);
            OK(mpiv_recv(m, sizeof m, 0, tag0 + i, &st));
            early_fill(want, i, tag0 + i);
            if (first_bad < 0 && (st.size != early_size(i) || memcmp(m, want, st.size) != 0))
                first_bad = i;
        }
    }
    /* shm: all were received, and nothing else holds a packet (on ofi the
     * next barrier's message may already wait in one) */
    long after = me == 1 && srv_inline_max(0) > 0 ? atomic_load(&proto.unexpected) : 0;
    free(b);
    OK(mpiv_barrier());
    ck_assert_msg(first_bad < 0, "early message %d came wrong", first_bad);
    ck_assert_int_eq(after, 0);
    return held;
}

START_TEST(early_messages_hold_no_packets)
{
    trace("start early_messages_hold_no_packets");
    const int n = (int)proto.unexpected_max + 64;
    long held = early_stream(n, 0);
    if (me == 1 && srv_inline_max(0) > 0) /* shm: arrivals are lent */
        ck_assert_msg(held == 0, "%ld pool packets held %d early messages", held, n);
}
END_TEST

/* The same when no heap block can be had: each early message waits in
 * the pool packet lent with it instead, and still arrives whole. (A
 * barrier's message that comes before its receive may take one of the
 * failures too: hence "nearly all".) */
START_TEST(early_messages_without_heap_use_packets)
{
    trace("start early_messages_without_heap_use_packets");
    const int n = 40;
    long held = early_stream(n, (unsigned)n);
    if (me == 1 && srv_inline_max(0) > 0)
        ck_assert_msg(held >= n - 4 && held <= n, "%ld pool packets held %d early messages", held, n);
}
END_TEST

/* The receiver's server is held up for a while at its first arrival, so
 * the sender's burst fills the ring; what does not fit takes the queued
 * packet path or an RTS, in order. */
static atomic_int stalled;

/* arg: how long in ms, (void *)(intptr_t)ms; NULL: 300 ms */
static enum srv_fault_action stall(const struct srv_fault_event *ev, void *arg)
{
    if (ev->point == SRV_FAULT_RECV && !atomic_exchange(&stalled, 1)) {
        long ms = arg ? (long)(intptr_t)arg : 300;
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return SRV_FAULT_PASS;
}

/* The 8 bytes of message i of a numbered stream: i, then fill's 4 bytes. */
static void numbered(unsigned char m[8], unsigned i)
{
    memcpy(m, &i, sizeof i);
    fill(m + 4, 4, i);
}

/* Receives n numbered messages from rank 0 with `tag`: the first that
 * failed or came wrong, or -1. */
static int recv_numbered(unsigned n, int tag)
{
    int bad = -1;
    for (unsigned i = 0; i < n; i++) {
        unsigned char m[8], want[8];
        mpiv_status_t st;
        OK(mpiv_recv(m, sizeof m, 0, tag, &st));
        numbered(want, i);
        if (bad < 0 && (st.size != 8 || memcmp(m, want, 8) != 0))
            bad = (int)i;
    }
    return bad;
}

/* A file both ranks name after mpiv_run's pid (the tests' parent): rank 0
 * creates it to release a held server (hold_until_file). */
static void go_file(char *name, size_t n, const char *what)
{
    snprintf(name, n, "/tmp/mpiv-test-eager-%s-%d", what, (int)getppid());
}

struct hold {
    const char *what; /* go_file's */
    int max_ms;       /* held at most this long */
};

/* Holds the server at its first arrival until the go file exists. */
static enum srv_fault_action hold_until_file(const struct srv_fault_event *ev, void *arg)
{
    const struct hold *h = arg;
    if (ev->point == SRV_FAULT_RECV && !atomic_exchange(&stalled, 1)) {
        char name[64];
        go_file(name, sizeof name, h->what);
        struct timespec ts = {0, 1000 * 1000};
        for (int ms = 0; ms < h->max_ms && access(name, F_OK) != 0; ms++)
            nanosleep(&ts, NULL);
    }
    return SRV_FAULT_PASS;
}

/* Holds this rank's server at its next arrival until h's go file exists
 * (or h->max_ms have passed). */
static void hold_server(const struct hold *h)
{
    atomic_store(&stalled, 0);
    srv_fault_set(hold_until_file, (void *)h);
}

/* Whether message i of a stream arrived whole: got bytes of the size
 * sent, its first int i, the rest filled with seed. */
static bool numbered_ok(const unsigned char *m, size_t got, size_t size, int i, unsigned seed)
{
    int n;
    memcpy(&n, m, sizeof n);
    size_t j = data_mismatch(m, sizeof n, size, seed);
    return got == size && n == i && j == size;
}

START_TEST(full_ring_in_order)
{
    trace("start full_ring_in_order");
    size_t max = proto_eager_max(1 - me);
    /* sizes that cycle over small, packet-sized and above a packet */
    size_t cyc[] = {8, proto.eager_limit, max, 100, max / 2 + 3};
    const int n = 400;
    unsigned char *buf = malloc(max);
    ck_assert_ptr_nonnull(buf);
    struct srv_stats before, after;
    srv_get_stats(&before);
    after = before;
    if (me == 1) {
        atomic_store(&stalled, 0);
        srv_fault_set(stall, NULL);
    }
    OK(mpiv_barrier());
    if (me == 0) {
        for (int i = 0; i < n; i++) {
            size_t size = cyc[i % 5];
            fill(buf, size, (unsigned)i);
            if (size >= 4)
                memcpy(buf, &i, 4);
            OK(mpiv_send(buf, size, 1, 7));
        }
        srv_get_stats(&after);
        OK(mpiv_barrier());
    } else {
        for (int i = 0; i < n; i++) {
            size_t size = cyc[i % 5];
            mpiv_status_t st;
            memset(buf, 0, size);
            OK(mpiv_recv(buf, max, 0, 7, &st));
            ck_assert_msg(st.size == size, "message %d: %zu bytes, expected %zu", i, st.size,
                          size);
            int gi;
            memcpy(&gi, buf, 4);
            ck_assert_msg(gi == i, "message %d arrived as number %d", i, gi);
            size_t j = data_mismatch(buf, 4, size, (unsigned)i);
            ck_assert_msg(j == size, "message %d, byte %zu", i, j);
        }
        srv_fault_set(NULL, NULL);
        OK(mpiv_barrier());
    }
    free(buf);
    OK(mpiv_barrier());
    /* on shm some did not fit the held-up ring: up to a packet they
     * waited in the send queue as copies, above it by reference (on ofi
     * those are RTS anyway); asserted after the barriers, which a failure
     * would otherwise leave the other rank waiting in */
    if (me == 0 && max > proto.eager_limit)
        ck_assert_msg(after.copies + after.refs > before.copies + before.refs,
                      "the ring never filled: no send waited in the queue");
}
END_TEST

/* Rendezvous messages longer than a ring (on shm their bytes stream
 * through it in pieces: the sender must wait for room the receiver frees
 * piece by piece), and around the piece size, in both orders; and, while
 * the receiver's server is held up, two of them back to back with small
 * messages of the same key between: all data, sizes and the order kept.
 * On shm without MPIV_SHM_CMA=on nothing is read: every byte went
 * through the ring. */
START_TEST(rendezvous_streams)
{
    trace("start rendezvous_streams");
    size_t max = proto_eager_max(1 - me), piece = (size_t)64 << 10;
    size_t sizes[] = {max + 1, 3 * piece - 1, 3 * piece, 3 * piece + 1, ((size_t)9 << 20) + 5};
    size_t big = sizes[4];
    unsigned char *buf = malloc(big + 1);
    ck_assert_ptr_nonnull(buf);
    struct proto_stats before, after;
    proto_get_stats(&before);
    unsigned seed = 7000;
    for (int order = 0; order < 2; order++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++, seed++)
            if (sizes[k] > max)
                transfer(buf, sizes[k], seed, order);
    /* held-up receiver: big, small, big, small on one key */
    if (me == 1) {
        atomic_store(&stalled, 0);
        srv_fault_set(stall, NULL);
    }
    OK(mpiv_barrier());
    size_t seq[] = {big, 8, big - 3, 100};
    for (int i = 0; i < 4; i++, seed++) {
        if (me == 0) {
            fill(buf, seq[i], seed);
            OK(mpiv_send(buf, seq[i], 1, 6));
        } else {
            mpiv_status_t st;
            memset(buf, 0xEE, big + 1);
            OK(mpiv_recv(buf, big, 0, 6, &st));
            ck_assert_msg(st.size == seq[i], "message %d: %zu bytes, expected %zu", i, st.size,
                          seq[i]);
            check_data(buf, seq[i], seed);
            ck_assert_uint_eq(buf[seq[i]], 0xEE);
        }
    }
    if (me == 1)
        srv_fault_set(NULL, NULL);
    proto_get_stats(&after);
    const char *net = getenv("MPIV_NET"), *cma = getenv("MPIV_SHM_CMA");
    if (me == 1 && net && strcmp(net, "shm") == 0 && !(cma && strcmp(cma, "on") == 0))
        ck_assert_uint_eq(after.reads, before.reads);
    free(buf);
    OK(mpiv_barrier());
}
END_TEST

/* One message per ULT towards a receiver whose server is held up: the
 * ring fills, and what does not fit must join the send queue as copies
 * (srv_send_copy) instead of waiting for a packet, so that every sender
 * ends at once and gives its stack back: a handful of stacks for all of
 * them. Waiting for packets, most would block (the pool holds far fewer
 * packets than there are senders) and keep a stack each. Every message
 * arrives, in order. The receiver's server is held until the sender has
 * queued a few thousand copies (a file both ranks name after mpiv_run's
 * pid says so), however slow the machine. On ofi, which has no such path
 * (and whose sends wait for a held receiver), nothing is held and only
 * the messages are checked. */
enum { COPIES_WANTED = 3000, ONE_MSG_MAX = 1 << 20 };

static const struct hold hold_go = {"go", 60000};

static void *one_message(void *arg)
{
    unsigned i = (unsigned)(uintptr_t)arg;
    unsigned char m[8];
    numbered(m, i);
    int rc = mpiv_send(m, sizeof m, 1, 12);
    return (void *)(intptr_t)rc;
}

START_TEST(one_message_ults_never_block)
{
    trace("start one_message_ults_never_block");
    char go[64];
    go_file(go, sizeof go, hold_go.what);
    struct srv_stats s0, s1;
    struct sched_stack_stats k0, k1;
    bool copying = srv_inline_max(1 - me) > 0; /* shm */
    if (me == 1 && copying) {
        hold_server(&hold_go);
    }
    OK(mpiv_barrier());
    int bad = -1;
    unsigned n = 0;
    if (me == 0) {
        srv_get_stats(&s0);
        sched_stack_stats(&k0);
        /* one at a time from main: each ULT's send keeps the order */
        for (s1 = s0; n < ONE_MSG_MAX; n++) {
            if (n % 256 == 0) {
                srv_get_stats(&s1);
                if (!copying ? n >= 2000 : s1.copies - s0.copies >= COPIES_WANTED)
                    break;
            }
            mpiv_ult_t u;
            void *rc;
            OK(mpiv_ult_spawn(one_message, (void *)(uintptr_t)n, 0, &u));
            OK(mpiv_ult_join(u, &rc));
            if (bad < 0 && (intptr_t)rc != MPIV_SUCCESS)
                bad = (int)n;
        }
        sched_stack_stats(&k1);
        FILE *f = fopen(go, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
        OK(mpiv_send(&n, sizeof n, 1, 13));
    } else {
        OK(mpiv_recv(&n, sizeof n, 0, 13, NULL));
        bad = recv_numbered(n, 12);
        srv_fault_set(NULL, NULL);
    }
    OK(mpiv_barrier());
    if (me == 0)
        unlink(go);
    ck_assert_msg(bad < 0, "message %d failed or came wrong", bad);
    if (me == 0 && copying) {
        ck_assert_msg(s1.copies - s0.copies >= COPIES_WANTED,
                      "%u sends and only %llu queued as copies", n,
                      (unsigned long long)(s1.copies - s0.copies));
        ck_assert_msg(k1.made - k0.made <= 16,
                      "%llu stacks made for %u one-message ULTs (%llu sends queued as copies)",
                      (unsigned long long)(k1.made - k0.made), n,
                      (unsigned long long)(s1.copies - s0.copies));
    }
}
END_TEST

/* The cap on queued copies, lowered to CAP_BYTES on rank 0 (about 128
 * tiny messages), while rank 1's server is held for CAP_HOLD_MS at its
 * first arrival: rank 0's CAP_N tiny sends fill the ring, then the
 * queue up to the cap, and the rest must wait (eager_copy) until rank 1
 * drains, then go, in order. On ofi there are no copies: only the
 * messages are checked. */
enum { CAP_N = 80000, CAP_BYTES = 16 << 10, CAP_HOLD_MS = 1000 };

START_TEST(copy_cap_waits_in_order)
{
    trace("start copy_cap_waits_in_order");
    bool copying = srv_inline_max(1 - me) > 0; /* shm */
    struct proto_stats p0, p1;
    struct srv_stats s0, s1;
    OK(mpiv_barrier());
    int bad = -1;
    if (me == 0) {
        srv_set_copy_cap(CAP_BYTES);
        proto_get_stats(&p0);
        srv_get_stats(&s0);
        for (unsigned i = 0; i < CAP_N; i++) {
            unsigned char m[8];
            numbered(m, i);
            int rc = mpiv_send(m, sizeof m, 1, 14);
            if (rc != MPIV_SUCCESS && bad < 0)
                bad = (int)i;
        }
        proto_get_stats(&p1);
        srv_get_stats(&s1);
        srv_set_copy_cap(0);
    } else {
        if (copying) {
            atomic_store(&stalled, 0);
            srv_fault_set(stall, (void *)(intptr_t)CAP_HOLD_MS);
        }
        bad = recv_numbered(CAP_N, 14);
        srv_fault_set(NULL, NULL);
    }
    OK(mpiv_barrier());
    ck_assert_msg(bad < 0, "message %d failed or came wrong", bad);
    if (me == 0 && copying) {
        ck_assert_msg(s1.copies > s0.copies, "no send was queued as a copy");
        ck_assert_msg(p1.copy_waits > p0.copy_waits,
                      "no sender waited at the cap (%llu copies)",
                      (unsigned long long)(s1.copies - s0.copies));
        if (getenv("EAGER_TRACE"))
            fprintf(stderr, "rank 0: %llu copies, %llu rounds waited at the cap\n",
                    (unsigned long long)(s1.copies - s0.copies),
                    (unsigned long long)(p1.copy_waits - p0.copy_waits));
    }
}
END_TEST

/* I8 (src/proto/p2p.c): blocking sends past the eager credit, before the
 * receiver posts anything (it waits in a barrier). It also runs on its
 * own (case "burst", proto_eager_burst_*, with less credit), where the
 * credit is whole and nothing is owed; after the other cases some credit
 * may still be owed, which only sends more of the burst as copies. The
 * first credit_max / cost sends go eagerly, the rest as RTS from copies,
 * and every one returns at once, so the sender reaches the barrier; the
 * one buffer is refilled for every message, and each arrives as it was
 * when sent. Then the cap: sends go on completing at once until their
 * copies cost buffered_max, and the next one waits for its receive. Once
 * all are received every copy is given back. */
START_TEST(burst_past_credit_completes)
{
    trace("start burst_past_credit_completes");
    size_t max = proto_eager_max(1 - me);
    const size_t size = max < 8000 ? max : 8000;
    /* past the credit by 10 messages whatever a message costs in it */
    int n = (int)(proto.credit_max / (long)size) + 10, more = 0;
    unsigned char *b = malloc(size);
    ck_assert_ptr_nonnull(b);
    mpiv_request_t last;
    int last_done = -1;
    long held_after_burst = 0;
    struct proto_stats st0, st;
    proto_get_stats(&st0);
    if (me == 0) {
        for (int i = 0; i < n; i++) {
            fill(b, size, (unsigned)i);
            OK(mpiv_send(b, size, 1, 9));
        }
        held_after_burst = atomic_load(&proto.buffered[1]);
        /* fill the cap: each of these completes at once */
        while (atomic_load(&proto.buffered[1]) + proto_buffered_cost(size) <= proto.buffered_max) {
            mpiv_request_t r;
            int done = 0;
            fill(b, size, (unsigned)(n + more));
            OK(mpiv_isend(b, size, 1, 9, &r));
            OK(mpiv_test(&r, &done, NULL));
            ck_assert_msg(done, "send %d of the cap's fill did not complete at once", more);
            more++;
        }
        /* past the cap: a plain RTS, complete only once received */
        unsigned char *own = malloc(size);
        ck_assert_ptr_nonnull(own);
        fill(own, size, (unsigned)(n + more));
        OK(mpiv_isend(own, size, 1, 9, &last));
        OK(mpiv_test(&last, &last_done, NULL));
        OK(mpiv_bcast(&more, sizeof more, 0));
        OK(mpiv_barrier());
        OK(mpiv_wait(&last, NULL));
        free(own);
        /* every copy goes back once its receive took it */
        while (atomic_load(&proto.buffered[1]) != 0) {
            srv_progress();
            sched_yield();
        }
    } else {
        OK(mpiv_bcast(&more, sizeof more, 0));
        OK(mpiv_barrier());
        for (int i = 0; i < n + more + 1; i++) {
            mpiv_status_t s;
            memset(b, 0, size);
            OK(mpiv_recv(b, size, 0, 9, &s));
            ck_assert_uint_eq(s.size, size);
            check_data(b, size, (unsigned)i);
        }
    }
    proto_get_stats(&st);
    OK(mpiv_barrier());
    free(b);
    if (me == 0) {
        ck_assert_msg(st.eager_as_rts > st0.eager_as_rts, "the burst never ran out of credit");
        ck_assert_msg(held_after_burst > 0, "no send of the burst was buffered");
        ck_assert_msg(last_done == 0, "a send past the cap completed before its receive");
    }
}
END_TEST

/* The largest message of the full-ring cases: the eager limit towards the
 * other rank, at most 16 KiB (a window of them must outgrow a small ring
 * without outgrowing the eager credit). */
static size_t window_max(void)
{
    size_t max = proto_eager_max(1 - me);
    return max < ((size_t)16 << 10) ? max : (size_t)16 << 10;
}

/* Whether a window of eager messages fills the ring to the other rank:
 * only with direct sends (shm) and a ring smaller than the eager credit
 * (the default ring of two ranks is as large as the default credit, and
 * past the credit sends go as RTS): the small-ring runs'. */
static bool window_fills_ring(void)
{
    const char *ring = getenv("MPIV_SHM_RING");
    return srv_inline_max(1 - me) > 0 && ring && *ring;
}

/* A window of non-blocking sends larger than the ring while the receiver
 * is held up: once the ring is full, each send waits in the send queue by
 * reference (srv_send_ref) instead of being copied or turned into an RTS.
 * The sends return at once, the last ones are still pending while the
 * receiver is held (their payload has nowhere to go yet), and once it is
 * let go every message arrives whole and in order, and every send
 * completes. Sizes cycle over small, a packet, and above a packet, so
 * that references and the packet path's order are mixed. On ofi
 * (no direct path) only the messages are checked. */
enum { WIN_N = 320 };

static const struct hold hold_window = {"window", 3000};

START_TEST(window_waits_for_room)
{
    trace("start window_waits_for_room");
    char go[64];
    go_file(go, sizeof go, hold_window.what);
    bool direct = srv_inline_max(1 - me) > 0; /* shm */
    bool fills = window_fills_ring();
    size_t max = window_max();
    size_t cyc[] = {max, 8, proto.eager_limit, max - 1, 100};
    unsigned char *msgs = malloc((size_t)WIN_N * max);
    mpiv_request_t *req = malloc(WIN_N * sizeof *req);
    mpiv_status_t *st = malloc(WIN_N * sizeof *st);
    ck_assert(msgs && req && st);
    if (me == 1) {
        for (int i = 0; i < WIN_N; i++)
            OK(mpiv_irecv(msgs + (size_t)i * max, max, 0, 23, &req[i]));
        if (direct) {
            hold_server(&hold_window);
        }
    }
    struct srv_stats s0, s1;
    srv_get_stats(&s0);
    s1 = s0;
    int done = 1;
    OK(mpiv_barrier());
    if (me == 0) {
        for (int i = 0; i < WIN_N; i++) {
            unsigned char *m = msgs + (size_t)i * max;
            size_t size = cyc[i % 5];
            fill(m, size, (unsigned)i);
            memcpy(m, &i, sizeof i);
            OK(mpiv_isend(m, size, 1, 23, &req[i]));
        }
        OK(mpiv_test(&req[WIN_N - 1], &done, NULL));
        srv_get_stats(&s1);
        FILE *f = fopen(go, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
        OK(mpiv_waitall(WIN_N, req, NULL));
    } else {
        OK(mpiv_waitall(WIN_N, req, st));
        srv_fault_set(NULL, NULL);
        for (int i = 0; i < WIN_N; i++) {
            const unsigned char *m = msgs + (size_t)i * max;
            ck_assert_msg(numbered_ok(m, st[i].size, cyc[i % 5], i, (unsigned)i),
                          "message %d came wrong or out of order", i);
        }
    }
    OK(mpiv_barrier());
    free(msgs);
    free(req);
    free(st);
    if (me == 0) {
        unlink(go);
        /* after the barrier: a failure here leaves the ranks in step */
        if (fills) {
            ck_assert_msg(!done, "the last send completed while the receiver was held up");
            ck_assert_msg(s1.refs > s0.refs, "no send waited in the queue by reference");
        }
    }
}
END_TEST

/* The same from several threads at once: each of THR_N pthreads of rank
 * 0 sends its own stream (its own tag) of THR_MSGS messages while rank 1
 * is held up, most of them non-blocking (queued by reference once the
 * ring is full), every fifth blocking (up to a packet: a copy that
 * joins the queue; above it: by reference, and the thread waits). The
 * send queue interleaves the threads' items; each stream must still
 * arrive whole and in its own order (same source and tag: in order).
 * Run under ThreadSanitizer as a concurrency test (case "threads"). */
enum { THR_N = 4, THR_MSGS = 120 };

static const struct hold hold_threads = {"threads", 3000};

struct thr_stream {
    int t;
    size_t max;
    unsigned char *msgs;
    int rc;
};

static size_t thr_size(size_t max, int i)
{
    size_t cyc[] = {max, 8, 1000, max / 2 + 1, proto.eager_limit};
    return cyc[i % 5] < max ? cyc[i % 5] : max;
}

static void *thr_send(void *p)
{
    struct thr_stream *ts = p;
    mpiv_request_t req[THR_MSGS];
    int n = 0;
    for (int i = 0; i < THR_MSGS && ts->rc == 0; i++) {
        unsigned char *m = ts->msgs + (size_t)i * ts->max;
        size_t size = thr_size(ts->max, i);
        fill(m, size, (unsigned)(i + 1000 * ts->t));
        memcpy(m, &i, sizeof i);
        if (i % 5 == 4)
            ts->rc = mpiv_send(m, size, 1, 40 + ts->t);
        else
            ts->rc = mpiv_isend(m, size, 1, 40 + ts->t, &req[n++]);
    }
    int rc = mpiv_waitall(n, req, NULL);
    if (ts->rc == 0)
        ts->rc = rc;
    return NULL;
}

START_TEST(threads_keep_their_order)
{
    trace("start threads_keep_their_order");
    char go[64];
    go_file(go, sizeof go, hold_threads.what);
    bool direct = srv_inline_max(1 - me) > 0;
    size_t max = window_max();
    struct thr_stream ts[THR_N];
    for (int t = 0; t < THR_N; t++) {
        ts[t] = (struct thr_stream){.t = t, .max = max, .rc = 0};
        ts[t].msgs = malloc((size_t)THR_MSGS * max);
        ck_assert_ptr_nonnull(ts[t].msgs);
    }
    mpiv_request_t *req = malloc(THR_N * THR_MSGS * sizeof *req);
    mpiv_status_t *st = malloc(THR_N * THR_MSGS * sizeof *st);
    ck_assert(req && st);
    if (me == 1) {
        for (int t = 0; t < THR_N; t++)
            for (int i = 0; i < THR_MSGS; i++)
                OK(mpiv_irecv(ts[t].msgs + (size_t)i * max, max, 0, 40 + t,
                              &req[t * THR_MSGS + i]));
        if (direct) {
            hold_server(&hold_threads);
        }
    }
    struct srv_stats s0, s1;
    srv_get_stats(&s0);
    s1 = s0;
    OK(mpiv_barrier());
    int bad_t = -1, bad_i = -1, rc = 0;
    if (me == 0) {
        pthread_t th[THR_N];
        for (int t = 0; t < THR_N; t++)
            ck_assert_int_eq(pthread_create(&th[t], NULL, thr_send, &ts[t]), 0);
        /* let the threads fill the ring and the queue, then let rank 1 go
         * (it also goes by itself after the hold's 3 s) */
        struct timespec nap = {0, 200 * 1000 * 1000};
        nanosleep(&nap, NULL);
        srv_get_stats(&s1);
        FILE *f = fopen(go, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
        for (int t = 0; t < THR_N; t++) {
            pthread_join(th[t], NULL);
            if (ts[t].rc && !rc)
                rc = ts[t].rc;
        }
    } else {
        rc = mpiv_waitall(THR_N * THR_MSGS, req, st);
        srv_fault_set(NULL, NULL);
        for (int t = 0; t < THR_N && bad_t < 0; t++)
            for (int i = 0; i < THR_MSGS && bad_t < 0; i++) {
                const unsigned char *m = ts[t].msgs + (size_t)i * max;
                if (!numbered_ok(m, st[t * THR_MSGS + i].size, thr_size(max, i), i,
                                 (unsigned)(i + 1000 * t)))
                    bad_t = t, bad_i = i;
            }
    }
    OK(mpiv_barrier());
    for (int t = 0; t < THR_N; t++)
        free(ts[t].msgs);
    free(req);
    free(st);
    if (me == 0)
        unlink(go);
    /* after the barrier: a failure leaves the ranks in step */
    ck_assert_msg(rc == 0, "rank %d: %s", me, mpiv_strerror(rc));
    ck_assert_msg(bad_t < 0, "thread %d's message %d came wrong or out of order", bad_t, bad_i);
    if (me == 0 && window_fills_ring())
        ck_assert_msg(s1.refs > s0.refs, "no send waited in the queue by reference");
}
END_TEST

/* Both ranks post FLOOD_N receives, then send each other FLOOD_N messages
 * of one key: three eager ones of FLOOD_EAGER bytes, then a synchronous
 * one (always an RTS), and so on, all non-blocking, from one thread; then
 * wait for everything. Rank 1's server is held at its first arrival until
 * rank 0 has started all its sends (a file says so) or HOLD_MS have
 * passed, so that rank 0's ring to it fills, rank 0's sends and its FINs
 * answering rank 1's RTSs wait in rank 0's queue, rank 0's server stops
 * draining rank 1's ring if it runs out of packets, and rank 1's sends
 * back up behind that in turn. With pool packets queued behind full rings
 * (the copy path without Q1) both pools end up in the two queues and
 * neither server can drain its rings: the job hangs. On ofi nothing is
 * held (its sends wait for a held receiver); only the messages are
 * checked. */
enum { FLOOD_N = 3000, FLOOD_EAGER = 100, FLOOD_MAX = 256, HOLD_MS = 3000 };

static const struct hold hold_flood = {"flood", HOLD_MS};

START_TEST(cross_flood_completes)
{
    trace("start cross_flood_completes");
    char go[64];
    go_file(go, sizeof go, hold_flood.what);
    bool copying = srv_inline_max(1 - me) > 0; /* shm */
    unsigned char *out = malloc((size_t)FLOOD_N * FLOOD_MAX);
    unsigned char *in = malloc((size_t)FLOOD_N * FLOOD_MAX);
    mpiv_request_t *sreq = malloc(FLOOD_N * sizeof *sreq);
    mpiv_request_t *rreq = malloc(FLOOD_N * sizeof *rreq);
    mpiv_status_t *st = malloc(FLOOD_N * sizeof *st);
    ck_assert(out && in && sreq && rreq && st);
    for (int i = 0; i < FLOOD_N; i++)
        OK(mpiv_irecv(in + (size_t)i * FLOOD_MAX, FLOOD_MAX, 1 - me, 21, &rreq[i]));
    OK(mpiv_barrier());
    if (me == 1 && copying) {
        hold_server(&hold_flood);
    }
    for (int i = 0; i < FLOOD_N; i++) {
        unsigned char *m = out + (size_t)i * FLOOD_MAX;
        bool rdv = i % 4 == 3;
        size_t size = rdv ? FLOOD_MAX : FLOOD_EAGER;
        fill(m, size, (unsigned)i);
        memcpy(m, &i, sizeof i);
        if (rdv)
            OK(mpiv_issend(m, size, 1 - me, 21, &sreq[i]));
        else
            OK(mpiv_isend(m, size, 1 - me, 21, &sreq[i]));
    }
    if (me == 0) {
        FILE *f = fopen(go, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
    }
    OK(mpiv_waitall(FLOOD_N, sreq, NULL));
    OK(mpiv_waitall(FLOOD_N, rreq, st));
    if (me == 1)
        srv_fault_set(NULL, NULL);
    if (getenv("EAGER_TRACE")) {
        struct srv_stats ss;
        struct proto_stats ps;
        srv_get_stats(&ss);
        proto_get_stats(&ps);
        fprintf(stderr, "rank %d: %llu sends queued as copies, %llu queued in all, %llu eager as RTS\n",
                me, (unsigned long long)ss.copies, (unsigned long long)ss.queued_posted,
                (unsigned long long)ps.eager_as_rts);
    }
    int bad = -1;
    for (int i = 0; i < FLOOD_N && bad < 0; i++) {
        const unsigned char *m = in + (size_t)i * FLOOD_MAX;
        size_t size = i % 4 == 3 ? FLOOD_MAX : FLOOD_EAGER;
        if (!numbered_ok(m, st[i].size, size, i, (unsigned)i))
            bad = i;
    }
    OK(mpiv_barrier());
    if (me == 0)
        unlink(go);
    free(out);
    free(in);
    free(sreq);
    free(rreq);
    free(st);
    ck_assert_msg(bad < 0, "message %d came wrong or out of order", bad);
}
END_TEST

/* Batches of arrivals matched ahead (p2p.c, proto_on_batch). The
 * receiver's progress is held up while the sender streams messages of
 * one key into the ring, then let go, so that its polls hand over full
 * batches of lent arrivals (the hold-up hook itself is cleared first: it
 * copies arrivals out of the ring). Message i carries i in its first 4
 * bytes; every receive must get its own message in posting order:
 *   - plain: more messages than receives posted at the hold-up (the run
 *     outgrows the receives waiting: the rest wait in the table and are
 *     taken by receives posted later), sizes 8 and 100;
 *   - mixed: every 13th message above the eager limit (an RTS within a
 *     run), receive 20 too short (truncated in the run) and receive 45
 *     from MPIV_ANY_SOURCE (the gate is open until it matches).
 * On shm the plain stream must have matched some arrivals ahead. */
enum { BATCH_POSTED = 64, BATCH_N = 96 };

static size_t batch_size(int i, bool mixed, size_t big)
{
    if (mixed && i % 13 == 12)
        return big;
    return i % 3 ? 100 : 8;
}

/* What batch_stream found wrong with the server's arrival counts, if
 * anything. */
static char count_err[256];

/* Arrivals and their bytes over all of this rank's backends. */
static void net_totals(uint64_t *msgs, uint64_t *bytes)
{
    struct srv_net_stats st[4];
    int n = srv_get_net_stats(st, 4);
    *msgs = *bytes = 0;
    for (int k = 0; k < n; k++) {
        *msgs += st[k].msgs;
        *bytes += st[k].bytes;
    }
}

static void batch_stream(bool mixed)
{
    size_t big = proto_eager_max(1 - me) + 1;
    size_t slot = mixed ? big : 100;
    unsigned char *bufs = malloc((size_t)BATCH_N * slot);
    mpiv_request_t *req = malloc(BATCH_N * sizeof *req);
    ck_assert(bufs && req);
    int tag = mixed ? 24 : 23;
    if (me == 0) {
        OK(mpiv_barrier());
        for (int i = 0; i < BATCH_N; i++) {
            unsigned char *m = bufs + (size_t)i * slot;
            size_t size = batch_size(i, mixed, big);
            fill(m, size, (unsigned)i);
            if (size >= 4)
                memcpy(m, &i, 4);
            OK(mpiv_isend(m, size, 1, tag, &req[i]));
        }
        OK(mpiv_waitall(BATCH_N, req, NULL));
    } else {
        uint64_t from0 = srv_peer_arrivals(0), msgs = 0, bytes = 0;
        net_totals(&msgs, &bytes);
        for (int i = 0; i < BATCH_POSTED; i++) {
            size_t cap = mixed && i == 20 ? 4 : slot;
            int src = mixed && i == 45 ? MPIV_ANY_SOURCE : 0;
            OK(mpiv_irecv(bufs + (size_t)i * slot, cap, src, tag, &req[i]));
        }
        atomic_store(&stalled, 0);
        srv_fault_set(stall, (void *)(intptr_t)200);
        OK(mpiv_barrier()); /* held up while the sender streams */
        srv_fault_set(NULL, NULL);
        for (int i = 0; i < BATCH_N; i++) {
            unsigned char *m = bufs + (size_t)i * slot;
            size_t size = batch_size(i, mixed, big);
            mpiv_status_t st;
            if (i >= BATCH_POSTED) {
                OK(mpiv_recv(m, slot, 0, tag, &st));
            } else if (mixed && i == 20) {
                /* its message's size says which it was; nothing is copied */
                ck_assert_int_eq(mpiv_wait(&req[i], &st), MPIV_ERR_TRUNCATE);
                ck_assert_int_eq(st.error, MPIV_ERR_TRUNCATE);
                ck_assert_uint_eq(st.size, size);
                continue;
            } else {
                OK(mpiv_wait(&req[i], &st));
            }
            int got = -1;
            if (size >= 4)
                memcpy(&got, m, 4);
            ck_assert_msg(st.size == size, "receive %d: %zu bytes, expected %zu", i, st.size,
                          size);
            ck_assert_int_eq(st.source, 0);
            ck_assert_msg(size < 4 || got == i, "receive %d got message %d", i, got);
            size_t j = data_mismatch(m, 4, size, (unsigned)i);
            ck_assert_msg(size < 4 || j == size, "message %d, byte %zu", i, j);
        }
        /* Every arrival counted once, also those handled as a batch: the
         * stream's, and at most a few more (the barrier's, credit). Told
         * at the end of the test, where a failure does not leave the other
         * rank waiting in this one. */
        uint64_t got = srv_peer_arrivals(0) - from0, msgs2 = 0, bytes2 = 0, least = 0;
        net_totals(&msgs2, &bytes2);
        for (int i = 0; i < BATCH_N; i++)
            least += batch_size(i, mixed, big) > proto_eager_max(0) ? 0 : batch_size(i, mixed, big);
        if (got < BATCH_N || got > BATCH_N + 16 || msgs2 - msgs != got ||
            (!mixed && bytes2 - bytes < least))
            snprintf(count_err, sizeof count_err,
                     "%s stream: %" PRIu64 " arrivals counted from rank 0, %" PRIu64
                     " by the backends, %" PRIu64 " bytes (at least %" PRIu64 " came)",
                     mixed ? "mixed" : "plain", got, msgs2 - msgs, bytes2 - bytes, least);
    }
    free(bufs);
    free(req);
    OK(mpiv_barrier());
}

START_TEST(batches_match_ahead_in_order)
{
    trace("start batches_match_ahead_in_order");
    struct proto_stats before, after;
    proto_get_stats(&before);
    batch_stream(false);
    proto_get_stats(&after);
    if (me == 1 && srv_inline_max(0) > 0) /* shm: arrivals are lent in batches */
        ck_assert_msg(after.matched_ahead > before.matched_ahead,
                      "no arrival of the stream was matched with its batch");
    batch_stream(true);
    ck_assert_msg(count_err[0] == '\0', "%s", count_err);
}
END_TEST

static int eager_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (mpiv_init(NULL, NULL) != MPIV_SUCCESS) {
        fprintf(stderr, "mpiv_init: %s\n", mpiv_error_detail());
        return 1;
    }
    me = mpiv_rank();
    if (mpiv_size() != 2) {
        fprintf(stderr, "test_eager runs on exactly 2 ranks\n");
        mpiv_finalize();
        return 1;
    }
    return 0;
}

static Suite *eager_suite(void)
{
    Suite *s = suite_create("eager");
    TCase *tc = tcase_create("eager");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, sizes_across_limits);
    tcase_add_test(tc, every_size_to_a_kib);
    tcase_add_test(tc, truncation_direct);
    tcase_add_test(tc, small_flood_wraps);
    tcase_add_test(tc, tiny_flood_needs_no_credit);
    tcase_add_test(tc, early_messages_hold_no_packets);
    tcase_add_test(tc, early_messages_without_heap_use_packets);
    tcase_add_test(tc, full_ring_in_order);
    tcase_add_test(tc, rendezvous_streams);
    tcase_add_test(tc, one_message_ults_never_block);
    tcase_add_test(tc, copy_cap_waits_in_order);
    tcase_add_test(tc, batches_match_ahead_in_order);
    tcase_add_test(tc, window_waits_for_room);
    suite_add_tcase(s, tc);
    TCase *flood = tcase_create("crossflood");
    tcase_set_timeout(flood, 300);
    tcase_add_test(flood, cross_flood_completes);
    suite_add_tcase(s, flood);
    TCase *threads = tcase_create("threads");
    tcase_set_timeout(threads, 300);
    tcase_add_test(threads, threads_keep_their_order);
    suite_add_tcase(s, threads);
    TCase *burst = tcase_create("burst");
    tcase_set_timeout(burst, 300);
    tcase_add_test(burst, burst_past_credit_completes);
    suite_add_tcase(s, burst);
    return s;
}

static int eager_fini(int failed)
{
    trace("end");
    int rc = mpiv_finalize();
    return failed == 0 && rc == MPIV_SUCCESS ? 0 : 1;
}

CHECK_MAIN(.suite = eager_suite, .fork = CK_NOFORK, .init = eager_init, .fini = eager_fini);
