/*
 * test_srv_net.c — the server over a real network, no ULTs: plain pthreads
 * and handlers. Runs as one rank (it then talks to itself through the
 * backend) or as N ranks under mpiv_run; every rank runs the same steps.
 *
 *  - ping-pong: every rank pings every rank (itself included) with packets
 *    of several sizes (inject-sized and not); the PING handler turns the
 *    packet around from the server thread; checks sources and payloads;
 *  - ordering: a burst far beyond the backend's queue depth, so sends wait
 *    in the server's queue; per-source sequence numbers must arrive in order;
 *  - the same from 4 pthreads of every rank at once (they share each
 *    destination's queue, ring or QP): every (source, thread) stream
 *    arrives whole, once and in order;
 *  - RDMA write with immediate (64 KiB and 0 bytes) into every rank's
 *    registered buffer; imm, source and length are checked by the handler,
 *    the data after a barrier;
 *  - registration cache: one registration for two gets, correct data after
 *    free and reuse of the same addresses, a bounded number of live entries.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "common/check_main.h"
#include "srv_test_common.h"

enum { T_PING = 1, T_PONG = 2, T_SEQ = 3, T_TSEQ = 4 };

struct msg {
    uint8_t type;
    uint8_t pad[3];
    int32_t from;
    uint32_t seq;
    uint32_t size; /* bytes of the whole packet */
};

static atomic_long pongs, seq_got, bad;
static uint32_t *next_seq; /* per source, touched by handlers only */

static void fill(pkt_t *p, int type, uint32_t seq, uint32_t size)
{
    struct msg m = {.type = (uint8_t)type, .from = st_rank, .seq = seq, .size = size};
    memcpy(p->data, &m, sizeof m);
    for (uint32_t i = sizeof m; i < size; i++)
        p->data[i] = (unsigned char)(seq * 7 + i);
    p->len = size;
}

static int check(pkt_t *p, struct msg *m)
{
    memcpy(m, p->data, sizeof *m);
    if (p->len != m->size || p->len < sizeof *m)
        return 0;
    for (uint32_t i = sizeof *m; i < m->size; i++)
        if (p->data[i] != (unsigned char)(m->seq * 7 + i))
            return 0;
    return 1;
}

static void on_ping(pkt_t *p)
{
    struct msg m;
    if (!check(p, &m) || m.from != p->peer) {
        atomic_fetch_add(&bad, 1);
        pkt_put_server(st_pool, p);
        return;
    }
    p->data[0] = T_PONG;
    m.from = st_rank;
    memcpy(&((struct msg *)(void *)p->data)->from, &m.from, sizeof m.from);
    if (srv_send(p, p->peer) != MPIV_SUCCESS)
        atomic_fetch_add(&bad, 1);
}

static void on_pong(pkt_t *p)
{
    struct msg m;
    if (!check(p, &m) || m.from != p->peer)
        atomic_fetch_add(&bad, 1);
    atomic_fetch_add(&pongs, 1);
    pkt_put_server(st_pool, p);
}

static void on_seq(pkt_t *p)
{
    struct msg m;
    if (!check(p, &m) || m.from != p->peer || m.seq != next_seq[p->peer])
        atomic_fetch_add(&bad, 1);
    next_seq[p->peer] = m.seq + 1;
    atomic_fetch_add(&seq_got, 1);
    pkt_put_server(st_pool, p);
}

/* T_TSEQ: m.pad[0] is the sending thread; one sequence per (source, thread). */
#define BURST_THREADS 4
#define BURST_N 500 /* x 4 threads, with 2 ranks: quick over emulated verbs */

/* The bursts' count from each peer: base with up to 2 ranks, fewer with
 * more, so that what one rank receives in a burst stays the same at any
 * rank count (many senders into one receive queue is what the 4-rank
 * runs are for; over emulated verbs their time is bounded by packets). */
static uint32_t per_peer(uint32_t base)
{
    return st_size > 2 ? base * 2 / (uint32_t)st_size : base;
}
static atomic_long tseq_got;
static uint32_t *next_tseq; /* [source * BURST_THREADS + thread], handlers only */

static void on_tseq(pkt_t *p)
{
    struct msg m;
    int ok = check(p, &m) && m.from == p->peer && m.pad[0] < BURST_THREADS;
    uint32_t *want = ok ? &next_tseq[p->peer * BURST_THREADS + m.pad[0]] : NULL;
    if (!ok || m.seq != *want)
        atomic_fetch_add(&bad, 1);
    else
        *want = m.seq + 1;
    atomic_fetch_add(&tseq_got, 1);
    pkt_put_server(st_pool, p);
}

static atomic_bool burst_stop; /* set when the test fails: the threads return */

/* A helper thread: never calls ck_* (see tests/common/test_wait.h). */
static void *burst_thread(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    uint32_t big = (uint32_t)pkt_data_size(st_pool);
    for (uint32_t i = 0; i < per_peer(BURST_N); i++) {
        for (int peer = 0; peer < st_size; peer++) {
            if (atomic_load(&burst_stop))
                return NULL;
            pkt_t *p = st_try_get_pkt();
            if (!p)
                return NULL;
            fill(p, T_TSEQ, i, (i + t) % 5 == 0 ? big : 48 + (i * 13 + t) % 200);
            ((struct msg *)(void *)p->data)->pad[0] = (uint8_t)t;
            if (srv_send(p, peer) != MPIV_SUCCESS)
                atomic_fetch_add(&bad, 1);
        }
    }
    return NULL;
}

/* One handler for every packet, by type, as the protocol layer has. */
static void on_pkt(pkt_t *p)
{
    switch (p->len ? p->data[0] : 0) {
    case T_PING: on_ping(p); break;
    case T_PONG: on_pong(p); break;
    case T_SEQ: on_seq(p); break;
    case T_TSEQ: on_tseq(p); break;
    default:
        atomic_fetch_add(&bad, 1);
        pkt_put_server(st_pool, p);
    }
}

static pthread_t burst_th[BURST_THREADS];

static void burst_stop_join(void)
{
    atomic_store(&burst_stop, true);
    for (int t = 0; t < BURST_THREADS; t++)
        pthread_join(burst_th[t], NULL);
}

/* --- RDMA ---------------------------------------------------------------- */

#define SEG (64 * 1024)
static atomic_long imms_got, writes_done;

static void on_imm(uint32_t imm, int src, size_t len, int err)
{
    if (err)
        atomic_fetch_add(&bad, 1);
    uint32_t kind = imm >> 28, from = imm & 0xffffff;
    if ((int)from != src || (kind == 0xA && len != SEG) || (kind == 0xB && len != 0) ||
        (kind != 0xA && kind != 0xB && kind != 0xC)) {
        fprintf(stderr, "bad immediate %#x from rank %d, %zu bytes\n", imm, src, len);
        atomic_fetch_add(&bad, 1);
    }
    atomic_fetch_add(&imms_got, 1);
}

static void on_done(void *ctx, int err)
{
    if (err || ctx != (void *)&writes_done)
        atomic_fetch_add(&bad, 1);
    atomic_fetch_add(&writes_done, 1);
}

struct remote {
    uint64_t raddr, rkey, base;
};

/* --- fixture ------------------------------------------------------------- */

static uint64_t t_start;

/* Per-test wall time on rank 0, for docs/perf/server.md. */
static void tick(const char *what)
{
    uint64_t now = util_now_ns();
    if (st_rank == 0 && getenv("SRV_TEST_TIMES"))
        fprintf(stderr, "time %-16s %8.1f ms\n", what, (double)(now - t_start) / 1e6);
    t_start = util_now_ns();
}

static void setup(void)
{
    st_up();
    /* Experiments: SRV_TEST_BACKOFF=spin_ns,max_sleep_ns */
    const char *b = getenv("SRV_TEST_BACKOFF");
    unsigned long long spin, slp;
    if (b && sscanf(b, "%llu,%llu", &spin, &slp) == 2)
        srv_set_backoff(spin, slp);
    next_seq = calloc((size_t)st_size, sizeof *next_seq);
    next_tseq = calloc((size_t)st_size * BURST_THREADS, sizeof *next_tseq);
    srv_set_handlers(on_pkt, on_imm, NULL);
    st_start();
    ck_assert_int_eq(srv_boot_barrier_all(), MPIV_SUCCESS);
    t_start = util_now_ns();
}

static void teardown(void)
{
    st_down();
    free(next_seq);
    free(next_tseq);
}

/* --- tests --------------------------------------------------------------- */

START_TEST(test_ping_pong)
{
    const uint32_t sizes[] = {sizeof(struct msg), 100, 2000, 5000,
                              (uint32_t)pkt_data_size(st_pool)};
    const int iters = 50;
    long expect = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int i = 0; i < iters; i++) {
            for (int peer = 0; peer < st_size; peer++) {
                pkt_t *p = st_get_pkt();
                fill(p, T_PING, (uint32_t)i, sizes[s]);
                ck_assert_int_eq(srv_send(p, peer), MPIV_SUCCESS);
                expect++;
            }
            ST_WAIT(atomic_load(&pongs) == expect, atomic_load(&pongs),
                    "rank %d: %ld of %ld pongs (size %u)", st_rank, atomic_load(&pongs), expect,
                    sizes[s]);
        }
    }
    ck_assert_int_eq(atomic_load(&bad), 0);
    /* Errors are errors, not queued: bad ranks. A failed send still takes
     * its packet (the pool's ownership check catches a leak or a double
     * put, in Debug builds). */
    ck_assert_int_eq(srv_send(st_get_pkt(), st_size), MPIV_ERR_RANK);
    ck_assert_int_eq(srv_send(st_get_pkt(), -1), MPIV_ERR_RANK);
    ck_assert_int_eq(srv_boot_barrier_all(), MPIV_SUCCESS);
    tick("ping_pong");
}
END_TEST

START_TEST(test_order_burst)
{
    const int n = (int)per_peer(3000);
    uint32_t big = (uint32_t)pkt_data_size(st_pool);
    for (int i = 0; i < n; i++) {
        for (int peer = 0; peer < st_size; peer++) {
            pkt_t *p = st_get_pkt();
            fill(p, T_SEQ, (uint32_t)i, i % 3 == 0 ? big : 64);
            ck_assert_int_eq(srv_send(p, peer), MPIV_SUCCESS);
        }
    }
    ST_WAIT(atomic_load(&seq_got) == (long)n * st_size, atomic_load(&seq_got),
            "rank %d: %ld of %ld in order", st_rank, atomic_load(&seq_got), (long)n * st_size);
    ck_assert_int_eq(atomic_load(&bad), 0);
    ck_assert_int_eq(srv_boot_barrier_all(), MPIV_SUCCESS);
    struct srv_stats st;
    srv_get_stats(&st);
    if (getenv("SRV_TEST_TIMES"))
        fprintf(stderr, "rank %d: %llu operations waited in the send queue, %llu sleeps\n",
                st_rank, (unsigned long long)st.queued_posted, (unsigned long long)st.sleeps);
    tick("order_burst");
}
END_TEST

START_TEST(test_threads_burst)
{
    atomic_store(&burst_stop, false);
    for (uintptr_t t = 0; t < BURST_THREADS; t++)
        ck_assert_int_eq(pthread_create(&burst_th[t], NULL, burst_thread, (void *)t), 0);
    st_on_fail = burst_stop_join;
    long want = (long)BURST_THREADS * per_peer(BURST_N) * st_size;
    ST_WAIT(atomic_load(&tseq_got) == want, atomic_load(&tseq_got),
            "rank %d: %ld of %ld from the threads", st_rank, atomic_load(&tseq_got), want);
    st_on_fail = NULL;
    for (int t = 0; t < BURST_THREADS; t++)
        pthread_join(burst_th[t], NULL);
    TEST_THREAD_CHECK();
    ck_assert_int_eq(atomic_load(&bad), 0);
    for (int src = 0; src < st_size; src++)
        for (int t = 0; t < BURST_THREADS; t++)
            ck_assert_uint_eq(next_tseq[src * BURST_THREADS + t], per_peer(BURST_N));
    ck_assert_int_eq(srv_boot_barrier_all(), MPIV_SUCCESS);
    tick("threads_burst");
}
END_TEST

START_TEST(test_rdma_write_imm)
{
    size_t total = (size_t)SEG * (size_t)st_size;
    unsigned char *dst = calloc(1, total), *src = malloc(SEG);
    for (int i = 0; i < SEG; i++)
        src[i] = (unsigned char)(st_rank * 31 + i * 3);
    srv_mr *dmr, *smr;
    ck_assert_int_eq(srv_mr_get(dst, total, &dmr), MPIV_SUCCESS);
    ck_assert_int_eq(srv_mr_get(src, SEG, &smr), MPIV_SUCCESS);
    ck_assert_uint_eq(dmr->base, (uintptr_t)dst);

    struct remote mine = {dmr->raddr, dmr->rkey, dmr->base}, *all = calloc((size_t)st_size, sizeof mine);
    ck_assert_int_eq(boot_allgather(&mine, sizeof mine, all), MPIV_SUCCESS);

    for (int peer = 0; peer < st_size; peer++) {
        uint64_t raddr = all[peer].raddr + (uint64_t)SEG * (uint64_t)st_rank;
        ck_assert_int_eq(srv_rdma_write_imm(src, SEG, smr, peer, raddr, all[peer].rkey,
                                            0xA0000000u | (uint32_t)st_rank, on_done,
                                            &writes_done),
                         MPIV_SUCCESS);
        ck_assert_int_eq(srv_rdma_write_imm(src, 0, smr, peer, raddr, all[peer].rkey,
                                            0xB0000000u | (uint32_t)st_rank, on_done,
                                            &writes_done),
                         MPIV_SUCCESS);
    }
    ST_WAIT(atomic_load(&writes_done) == 2L * st_size && atomic_load(&imms_got) == 2L * st_size,
            atomic_load(&writes_done) + atomic_load(&imms_got),
            "rank %d: %ld writes done, %ld immediates", st_rank, atomic_load(&writes_done),
            atomic_load(&imms_got));
    ck_assert_int_eq(srv_boot_barrier_all(), MPIV_SUCCESS);
    long wrong = 0;
    for (int r = 0; r < st_size; r++)
        for (int i = 0; i < SEG; i++)
            wrong += dst[(size_t)r * SEG + (size_t)i] != (unsigned char)(r * 31 + i * 3);
    ck_assert_msg(wrong == 0, "%ld bytes wrong after the writes", wrong);
    ck_assert_int_eq(atomic_load(&bad), 0);
    srv_mr_put(smr);
    srv_mr_put(dmr);
    free(all);
    free(src);
    free(dst);
    atomic_store(&writes_done, 0);
    atomic_store(&imms_got, 0);
    tick("rdma_write_imm");
}
END_TEST

START_TEST(test_mr_cache_once)
{
    char *buf = malloc(1 << 20);
    struct srv_mr_stats a, b;
    srv_mr_cache_stats(&a);
    srv_mr *m1, *m2, *m3;
    ck_assert_int_eq(srv_mr_get(buf, 1 << 20, &m1), MPIV_SUCCESS);
    ck_assert_int_eq(srv_mr_get(buf, 1 << 20, &m2), MPIV_SUCCESS);
    ck_assert_int_eq(srv_mr_get(buf, 4096, &m3), MPIV_SUCCESS); /* a prefix */
    srv_mr_cache_stats(&b);
    ck_assert_ptr_eq(m1, m2);
    ck_assert_ptr_eq(m1, m3);
    ck_assert_uint_eq(b.regs - a.regs, 1);
    ck_assert_uint_eq(b.hits - a.hits, 2);
    srv_mr_put(m1);
    srv_mr_put(m2);
    srv_mr_put(m3);
    srv_mr_cache_stats(&b);
    /* released: either cached (non-pinning backend) or deregistered */
    ck_assert_uint_eq(b.live - a.live, (b.deregs - a.deregs) ? 0 : 1);
    free(buf);

    /* a bounded number of unreferenced entries stay */
    enum { N = 200 };
    char *bufs[N];
    for (int i = 0; i < N; i++) {
        bufs[i] = malloc(1000);
        ck_assert_int_eq(srv_mr_get(bufs[i], 1000, &m1), MPIV_SUCCESS);
        srv_mr_put(m1);
    }
    srv_mr_cache_stats(&b);
    ck_assert_uint_le(b.live, 64 + 1 + a.live);
    for (int i = 0; i < N; i++)
        free(bufs[i]);
}
END_TEST

/* Free and reuse: big buffers come from mmap and go back with munmap, so
 * the next one usually sits at the same address over new pages. Each round
 * writes a new pattern through whatever registration the cache hands out;
 * the new buffer must see it. */
START_TEST(test_mr_free_reuse)
{
    const size_t len = 256 * 1024;
    unsigned char *src = malloc(len);
    srv_mr *smr, *dmr;
    ck_assert_int_eq(srv_mr_get(src, len, &smr), MPIV_SUCCESS);
    struct srv_mr_stats a, b;
    srv_mr_cache_stats(&a);
    int same_addr = 0;
    void *prev = NULL;
    for (int round = 0; round < 40; round++) {
        unsigned char *dst = malloc(len);
        memset(dst, 0, len);
        same_addr += dst == prev;
        prev = dst;
        memset(src, round + 1, len);
        ck_assert_int_eq(srv_mr_get(dst, len, &dmr), MPIV_SUCCESS);
        long w0 = atomic_load(&writes_done), i0 = atomic_load(&imms_got);
        uint64_t raddr = dmr->raddr + ((uintptr_t)dst - dmr->base);
        ck_assert_int_eq(srv_rdma_write_imm(src, len, smr, st_rank, raddr, dmr->rkey,
                                            0xC0000000u | (uint32_t)st_rank, on_done,
                                            &writes_done),
                         MPIV_SUCCESS);
        ST_WAIT(atomic_load(&writes_done) == w0 + 1 && atomic_load(&imms_got) == i0 + 1,
                atomic_load(&writes_done) + atomic_load(&imms_got),
                "round %d: write to self did not complete", round);
        for (size_t i = 0; i < len; i += 997)
            ck_assert_msg(dst[i] == (unsigned char)(round + 1), "round %d byte %zu: %u", round,
                          i, dst[i]);
        ck_assert_int_eq(dst[len - 1], (unsigned char)(round + 1));
        srv_mr_put(dmr);
        free(dst);
    }
    srv_mr_cache_stats(&b);
    util_log_info("free/reuse: %d of 40 rounds at the same address, %llu registrations",
                  same_addr, (unsigned long long)(b.regs - a.regs));
    srv_mr_put(smr);
    free(src);
    ck_assert_int_eq(atomic_load(&bad), 0);
    atomic_store(&writes_done, 0);
    atomic_store(&imms_got, 0);
}
END_TEST

static Suite *srv_net_suite(void)
{
    Suite *s = suite_create("server_net");
    TCase *tc = tcase_create("net");
    /* no tcase_set_timeout: Check has no timeouts without fork; the
     * waits fail on a stall (ST_WAIT) and the launcher bounds the job */
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_ping_pong);
    tcase_add_test(tc, test_order_burst);
    tcase_add_test(tc, test_threads_burst);
    tcase_add_test(tc, test_rdma_write_imm);
    tcase_add_test(tc, test_mr_cache_once);
    tcase_add_test(tc, test_mr_free_reuse);
    suite_add_tcase(s, tc);
    return s;
}

/* One process holds the network endpoint: no fork per test. */
CHECK_MAIN(.suite = srv_net_suite, .fork = CK_NOFORK);
