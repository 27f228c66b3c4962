/*
 * Collectives on communicators, run under mpiv_run at 1 to 4 ranks: every
 * collective, every datatype and every operation defined on it, at counts
 * 0, 1, 7, 1000 and one past the rendezvous and "large algorithm" sizes,
 * checked against a serial reference that each rank computes by itself
 * from the contributions every rank makes (a deterministic function of
 * rank and index). Runs on MPIV_COMM_WORLD and on a communicator whose
 * ranks are the world's reversed (split with key = -rank), so rank
 * translation is exercised too. Also: a non-commutative user operation
 * combines in rank order, and bad operation/type pairs are refused.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "common/test_mpiv.h"
#include "common/test_data.h"
#include "mpiv.h"

static int wme, wsize;
static mpiv_comm_t reversed;

/* A wrong result is recorded, not aborted on at once: the other ranks
 * would wait in the next collective. Each case ends with agree(), which
 * fails it on every rank if any rank saw a wrong result. */
static char fail_msg[256];
static int64_t fail_count;
#define FAIL_LATER(...)                                                                      \
    do {                                                                                     \
        if (!fail_count++)                                                                   \
            snprintf(fail_msg, sizeof fail_msg, __VA_ARGS__);                                \
    } while (0)

/* the byte after a result must be untouched */
#define GUARD(b)                                                                             \
    do {                                                                                     \
        if ((b) != 0xEE)                                                                     \
            FAIL_LATER("line %d: a byte past the result was written", __LINE__);             \
    } while (0)

static void agree(void)
{
    int64_t any = 0;
    if (fail_count)
        fprintf(stderr, "rank %d: %s\n", wme, fail_msg);
    OK(mpiv_allreduce(&fail_count, &any, 1, MPIV_INT64, MPIV_MAX));
    int64_t mine = fail_count;
    fail_count = 0;
    ck_assert_msg(any == 0, "wrong results (%s%s)", mine ? "here: " : "on another rank",
                  mine ? fail_msg : "");
}

#define BIG 20001 /* elements: past the eager limit and coll.c's COLL_SMALL for every type */
static const size_t counts[] = {0, 1, 7, 1000, BIG};
#define NCOUNTS (sizeof counts / sizeof counts[0])

static const mpiv_datatype_t types[] = {MPIV_INT8,   MPIV_INT16,  MPIV_INT32,  MPIV_INT64,
                                        MPIV_UINT8,  MPIV_UINT16, MPIV_UINT32, MPIV_UINT64,
                                        MPIV_FLOAT,  MPIV_DOUBLE, MPIV_BYTE};
#define NTYPES (sizeof types / sizeof types[0])
static const mpiv_op_t ops[] = {MPIV_SUM,  MPIV_PROD, MPIV_MIN,  MPIV_MAX,
                                MPIV_LAND, MPIV_LOR,  MPIV_BAND, MPIV_BOR};
#define NOPS (sizeof ops / sizeof ops[0])

static bool is_float(mpiv_datatype_t t) { return t == MPIV_FLOAT || t == MPIV_DOUBLE; }
static bool is_signed(mpiv_datatype_t t)
{
    return t == MPIV_INT8 || t == MPIV_INT16 || t == MPIV_INT32 || t == MPIV_INT64;
}
static bool is_int(mpiv_datatype_t t) { return !is_float(t) && t != MPIV_BYTE; }

/* mpiv.h's table of which op takes which type */
static bool defined(mpiv_op_t op, mpiv_datatype_t t)
{
    switch (op) {
    case MPIV_LAND:
    case MPIV_LOR: return is_int(t);
    case MPIV_BAND:
    case MPIV_BOR: return is_int(t) || t == MPIV_BYTE;
    default: return t != MPIV_BYTE;
    }
}

/* A value as the reference sees it: exact in all three forms for the small
 * values used (|v| <= 10). */
typedef struct {
    int64_t i;
    uint64_t u;
    double d;
} val;

/* rank r's element i, for operation tests: small, some zero, some
 * negative for signed types. */
static val contrib(int r, size_t i, mpiv_datatype_t t, mpiv_op_t op)
{
    int64_t x = (int64_t)((r * 7 + (int64_t)i * 13) % 11);
    if (op == MPIV_LAND || op == MPIV_LOR)
        x = (r + (int64_t)i) % 3 == 0 ? 0 : x; /* zeros in some places */
    if (op == MPIV_PROD)
        x = x % 3 + 1; /* 1..3: the product of 4 stays exact in a float */
    if ((is_signed(t) || is_float(t)) && op != MPIV_BAND && op != MPIV_BOR && op != MPIV_PROD)
        x -= 5;
    return (val){.i = x, .u = (uint64_t)x, .d = (double)x};
}

static void store(mpiv_datatype_t t, void *buf, size_t i, val v)
{
    switch (t) {
    case MPIV_INT8: ((int8_t *)buf)[i] = (int8_t)v.i; break;
    case MPIV_INT16: ((int16_t *)buf)[i] = (int16_t)v.i; break;
    case MPIV_INT32: ((int32_t *)buf)[i] = (int32_t)v.i; break;
    case MPIV_INT64: ((int64_t *)buf)[i] = v.i; break;
    case MPIV_UINT8:
    case MPIV_BYTE: ((uint8_t *)buf)[i] = (uint8_t)v.u; break;
    case MPIV_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v.u; break;
    case MPIV_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v.u; break;
    case MPIV_UINT64: ((uint64_t *)buf)[i] = v.u; break;
    case MPIV_FLOAT: ((float *)buf)[i] = (float)v.d; break;
    default: ((double *)buf)[i] = v.d; break;
    }
}

/* The serial reference of a op b in the type's own arithmetic (wrapping
 * at its width: store then compare the stored bytes). */
static val combine(mpiv_op_t op, mpiv_datatype_t t, val a, val b)
{
    val r = a;
    if (is_float(t)) {
        switch (op) {
        case MPIV_SUM: r.d = a.d + b.d; break;
        case MPIV_PROD: r.d = a.d * b.d; break;
        case MPIV_MIN: r.d = a.d < b.d ? a.d : b.d; break;
        default: r.d = a.d > b.d ? a.d : b.d; break;
        }
        return r;
    }
    switch (op) {
    case MPIV_SUM: r.u = a.u + b.u; break;
    case MPIV_PROD: r.u = a.u * b.u; break;
    case MPIV_MIN: r.u = is_signed(t) ? (uint64_t)(a.i < b.i ? a.i : b.i) : (a.u < b.u ? a.u : b.u); break;
    case MPIV_MAX: r.u = is_signed(t) ? (uint64_t)(a.i > b.i ? a.i : b.i) : (a.u > b.u ? a.u : b.u); break;
    case MPIV_LAND: r.u = a.u && b.u; break;
    case MPIV_LOR: r.u = a.u || b.u; break;
    case MPIV_BAND: r.u = a.u & b.u; break;
    default: r.u = a.u | b.u; break;
    }
    r.i = (int64_t)r.u;
    return r;
}

/* Reference of element i over ranks [0, upto] of the communicator (whose
 * rank k is world rank wr(k)). */
static val reference(mpiv_op_t op, mpiv_datatype_t t, size_t i, int upto, const int *wr)
{
    val acc = contrib(wr[0], i, t, op);
    for (int k = 1; k <= upto; k++)
        acc = combine(op, t, acc, contrib(wr[k], i, t, op));
    return acc;
}

static void expect_reduced(mpiv_op_t op, mpiv_datatype_t t, const void *got, size_t first,
                           size_t n, int upto, const int *wr, const char *what)
{
    size_t es = mpiv_type_size(t);
    unsigned char want[8];
    for (size_t i = 0; i < n; i++) {
        store(t, want, 0, reference(op, t, first + i, upto, wr));
        if (memcmp(want, (const char *)got + i * es, es) != 0) {
            FAIL_LATER("%s: type %d op %d: element %zu of %zu is wrong", what, (int)t, (int)op,
                       first + i, n);
            return;
        }
    }
}

/* The communicators under test and their ranks' world ranks. */
struct ctest {
    mpiv_comm_t comm;
    int me, size;
    int wr[64];
};

static void ctest_get(int which, struct ctest *c)
{
    c->comm = which ? reversed : MPIV_COMM_WORLD;
    OK(mpiv_comm_rank(c->comm, &c->me));
    OK(mpiv_comm_size(c->comm, &c->size));
    ck_assert_int_le(c->size, 64);
    for (int k = 0; k < c->size; k++)
        c->wr[k] = which ? c->size - 1 - k : k;
}

/* reduce, allreduce, reduce_scatter and scan: every type, op, count. */
START_TEST(reductions)
{
    struct ctest c;
    ctest_get(_i, &c);
    size_t maxb = BIG * 8 * (size_t)c.size + 64;
    unsigned char *sb = malloc(maxb), *rb = malloc(maxb);
    size_t *rcounts = malloc((size_t)c.size * sizeof *rcounts);
    ck_assert_ptr_nonnull(sb);
    for (size_t ti = 0; ti < NTYPES; ti++) {
        mpiv_datatype_t t = types[ti];
        size_t es = mpiv_type_size(t);
        for (size_t oi = 0; oi < NOPS; oi++) {
            mpiv_op_t op = ops[oi];
            if (!defined(op, t)) {
                ck_assert_int_eq(mpiv_allreduce_comm(sb, rb, 1, t, op, c.comm), MPIV_ERR_ARG);
                continue;
            }
            for (size_t ci = 0; ci < NCOUNTS; ci++) {
                size_t n = counts[ci];
                for (size_t i = 0; i < n; i++)
                    store(t, sb, i, contrib(c.wr[c.me], i, t, op));
                /* allreduce */
                memset(rb, 0xEE, n * es + 1);
                OK(mpiv_allreduce_comm(sb, rb, n, t, op, c.comm));
                expect_reduced(op, t, rb, 0, n, c.size - 1, c.wr, "allreduce");
                GUARD(rb[n * es]);
                /* in place */
                memcpy(rb, sb, n * es);
                OK(mpiv_allreduce_comm(rb, rb, n, t, op, c.comm));
                expect_reduced(op, t, rb, 0, n, c.size - 1, c.wr, "allreduce in place");
                /* reduce at both ends */
                int roots[2] = {0, c.size - 1};
                for (int k = 0; k < 2; k++) {
                    memset(rb, 0xEE, n * es + 1);
                    OK(mpiv_reduce(sb, c.me == roots[k] ? rb : NULL, n, t, op, roots[k], c.comm));
                    if (c.me == roots[k]) {
                        expect_reduced(op, t, rb, 0, n, c.size - 1, c.wr, "reduce");
                        GUARD(rb[n * es]);
                    }
                }
                /* scan */
                OK(mpiv_scan(sb, rb, n, t, op, c.comm));
                expect_reduced(op, t, rb, 0, n, c.me, c.wr, "scan");
                /* reduce_scatter: uneven shares (n, n/2, n, n/2, ...) */
                size_t total = 0, mine = 0;
                for (int k = 0; k < c.size; k++) {
                    rcounts[k] = k % 2 ? n / 2 : n;
                    if (k < c.me)
                        mine += rcounts[k];
                    total += rcounts[k];
                }
                for (size_t i = 0; i < total; i++)
                    store(t, sb, i, contrib(c.wr[c.me], i, t, op));
                memset(rb, 0xEE, rcounts[c.me] * es + 1);
                OK(mpiv_reduce_scatter(sb, rb, rcounts, t, op, c.comm));
                expect_reduced(op, t, rb, mine, rcounts[c.me], c.size - 1, c.wr, "reduce_scatter");
                GUARD(rb[rcounts[c.me] * es]);
            }
        }
    }
    agree();
    free(sb);
    free(rb);
    free(rcounts);
}
END_TEST

/* The bytes rank r contributes for block `blk` (seeded by both). */
static unsigned seed_of(int wrank, int blk) { return (unsigned)(wrank * 977 + blk * 31 + 5); }

static void expect_block(const unsigned char *b, size_t n, unsigned seed, const char *what)
{
    size_t i = data_mismatch(b, 0, n, seed);
    if (i < n)
        FAIL_LATER("%s: byte %zu of %zu is wrong (seed %u)", what, i, n, seed);
}

/* bcast, gather(v), scatter(v), allgather(v), alltoall(v): every type and
 * count, roots at both ends. */
START_TEST(movement)
{
    struct ctest c;
    ctest_get(_i, &c);
    int P = c.size, me = c.me;
    size_t maxb = (BIG + 8) * 8 * (size_t)P + 64;
    unsigned char *sb = malloc(maxb), *rb = malloc(maxb);
    size_t *cnt = malloc(4 * (size_t)P * sizeof *cnt), *dsp = cnt + P, *cnt2 = cnt + 2 * P,
           *dsp2 = cnt + 3 * P;
    for (size_t ti = 0; ti < NTYPES; ti++) {
        mpiv_datatype_t t = types[ti];
        size_t es = mpiv_type_size(t);
        for (size_t ci = 0; ci < NCOUNTS; ci++) {
            size_t n = counts[ci], nb = n * es;
            int roots[2] = {0, P - 1};
            for (int k = 0; k < 2; k++) {
                int root = roots[k];
                /* bcast */
                if (me == root)
                    fill(rb, nb, seed_of(c.wr[root], 0));
                else
                    memset(rb, 0, nb);
                OK(mpiv_bcast_comm(rb, n, t, root, c.comm));
                expect_block(rb, nb, seed_of(c.wr[root], 0), "bcast");
                /* gather */
                fill(sb, nb, seed_of(c.wr[me], 1));
                memset(rb, 0xEE, nb * (size_t)P + 1);
                OK(mpiv_gather(sb, me == root ? rb : NULL, n, t, root, c.comm));
                if (me == root) {
                    for (int j = 0; j < P; j++)
                        expect_block(rb + (size_t)j * nb, nb, seed_of(c.wr[j], 1), "gather");
                    GUARD(rb[nb * (size_t)P]);
                }
                /* scatter */
                if (me == root)
                    for (int j = 0; j < P; j++)
                        fill(sb + (size_t)j * nb, nb, seed_of(c.wr[j], 2));
                memset(rb, 0xEE, nb + 1);
                OK(mpiv_scatter(me == root ? sb : NULL, rb, n, t, root, c.comm));
                expect_block(rb, nb, seed_of(c.wr[me], 2), "scatter");
                GUARD(rb[nb]);
                /* gatherv: rank j sends n + j elements, placed with a gap
                 * of 3 elements between blocks, in reverse order */
                size_t o = 0;
                for (int j = P - 1; j >= 0; j--) {
                    cnt[j] = n + (size_t)j;
                    dsp[j] = o;
                    o += cnt[j] + 3;
                }
                fill(sb, cnt[me] * es, seed_of(c.wr[me], 3));
                memset(rb, 0xEE, o * es);
                OK(mpiv_gatherv(sb, cnt[me], me == root ? rb : NULL, cnt, dsp, t, root, c.comm));
                if (me == root)
                    for (int j = 0; j < P; j++) {
                        expect_block(rb + dsp[j] * es, cnt[j] * es, seed_of(c.wr[j], 3),
                                     "gatherv");
                        GUARD(rb[(dsp[j] + cnt[j]) * es]);
                    }
                /* scatterv, the same layout */
                if (me == root)
                    for (int j = 0; j < P; j++)
                        fill(sb + dsp[j] * es, cnt[j] * es, seed_of(c.wr[j], 4));
                memset(rb, 0xEE, cnt[me] * es + 1);
                OK(mpiv_scatterv(me == root ? sb : NULL, cnt, dsp, rb, cnt[me], t, root, c.comm));
                expect_block(rb, cnt[me] * es, seed_of(c.wr[me], 4), "scatterv");
                GUARD(rb[cnt[me] * es]);
            }
            /* allgather */
            fill(sb, nb, seed_of(c.wr[me], 5));
            memset(rb, 0xEE, nb * (size_t)P + 1);
            OK(mpiv_allgather(sb, rb, n, t, c.comm));
            for (int j = 0; j < P; j++)
                expect_block(rb + (size_t)j * nb, nb, seed_of(c.wr[j], 5), "allgather");
            GUARD(rb[nb * (size_t)P]);
            /* allgatherv (the gatherv layout) */
            fill(sb, cnt[me] * es, seed_of(c.wr[me], 6));
            size_t o = 0;
            for (int j = 0; j < P; j++)
                o = dsp[j] + cnt[j] + 3 > o ? dsp[j] + cnt[j] + 3 : o;
            memset(rb, 0xEE, o * es);
            OK(mpiv_allgatherv(sb, cnt[me], rb, cnt, dsp, t, c.comm));
            for (int j = 0; j < P; j++) {
                expect_block(rb + dsp[j] * es, cnt[j] * es, seed_of(c.wr[j], 6), "allgatherv");
                GUARD(rb[(dsp[j] + cnt[j]) * es]);
            }
            /* alltoall: block j of rank r is seeded by (r, j) */
            for (int j = 0; j < P; j++)
                fill(sb + (size_t)j * nb, nb, seed_of(c.wr[me], 100 + c.wr[j]));
            memset(rb, 0xEE, nb * (size_t)P + 1);
            OK(mpiv_alltoall(sb, rb, n, t, c.comm));
            for (int j = 0; j < P; j++)
                expect_block(rb + (size_t)j * nb, nb, seed_of(c.wr[j], 100 + c.wr[me]), "alltoall");
            GUARD(rb[nb * (size_t)P]);
            /* alltoallv: rank r sends n/(1 + (r + j) % 3) + r to rank j;
             * send blocks packed in reverse, receive blocks in order with
             * a one-element gap */
            size_t so = 0, ro = 0;
            for (int j = P - 1; j >= 0; j--) {
                cnt[j] = n / (size_t)(1 + (me + j) % 3) + (size_t)me;
                dsp[j] = so;
                so += cnt[j];
            }
            for (int j = 0; j < P; j++) {
                cnt2[j] = n / (size_t)(1 + (j + me) % 3) + (size_t)j;
                dsp2[j] = ro;
                ro += cnt2[j] + 1;
            }
            for (int j = 0; j < P; j++)
                fill(sb + dsp[j] * es, cnt[j] * es, seed_of(c.wr[me], 200 + c.wr[j]));
            memset(rb, 0xEE, ro * es);
            OK(mpiv_alltoallv(sb, cnt, dsp, rb, cnt2, dsp2, t, c.comm));
            for (int j = 0; j < P; j++) {
                expect_block(rb + dsp2[j] * es, cnt2[j] * es, seed_of(c.wr[j], 200 + c.wr[me]),
                             "alltoallv");
                GUARD(rb[(dsp2[j] + cnt2[j]) * es]);
            }
            if (ci == 0) {
                /* nothing to move at all: NULL buffers are legal (UBSan
                 * stops at a memcpy of our own empty block from NULL) */
                size_t *zero = calloc(2 * (size_t)P, sizeof *zero);
                ck_assert_ptr_nonnull(zero);
                OK(mpiv_alltoallv(NULL, zero, zero + P, NULL, zero, zero + P, t, c.comm));
                free(zero);
            }
            OK(mpiv_barrier_comm(c.comm));
        }
    }
    agree();
    free(sb);
    free(rb);
    free(cnt);
}
END_TEST

/* Affine maps x -> m x + c (mod 2^32) packed as m << 32 | c; a (op) b is
 * "a, then b": associative, not commutative, so any combination out of
 * rank order gives a different map. */
static void compose(const void *in, void *inout, size_t n, mpiv_datatype_t type)
{
    ck_assert_int_eq(type, MPIV_UINT64);
    const uint64_t *a = in;
    uint64_t *b = inout;
    for (size_t i = 0; i < n; i++) {
        uint32_t m1 = (uint32_t)(a[i] >> 32), c1 = (uint32_t)a[i];
        uint32_t m2 = (uint32_t)(b[i] >> 32), c2 = (uint32_t)b[i];
        b[i] = (uint64_t)(m1 * m2) << 32 | (uint32_t)(m2 * c1 + c2);
    }
}

static uint64_t affine(int wrank, size_t i)
{
    return (uint64_t)(wrank * 2 + 3 + (uint32_t)i % 5) << 32 | (uint32_t)(wrank * 11 + i);
}

static void expect_ordered(const uint64_t *got, size_t n, int upto, const int *wr,
                           const char *what)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t acc = affine(wr[0], i);
        for (int k = 1; k <= upto; k++) {
            uint64_t x = affine(wr[k], i);
            compose(&acc, &x, 1, MPIV_UINT64);
            acc = x;
        }
        if (got[i] != acc) {
            FAIL_LATER("%s: element %zu is %#llx, rank order gives %#llx", what, i,
                       (unsigned long long)got[i], (unsigned long long)acc);
            return;
        }
    }
}

START_TEST(user_op_rank_order)
{
    struct ctest c;
    ctest_get(_i, &c);
    mpiv_op_t op;
    OK(mpiv_op_create(compose, 0, &op));
    uint64_t *sb = malloc(BIG * 8 * (size_t)c.size), *rb = malloc(BIG * 8 * (size_t)c.size);
    size_t *rc = malloc((size_t)c.size * sizeof *rc);
    for (size_t ci = 0; ci < NCOUNTS; ci++) {
        size_t n = counts[ci];
        for (size_t i = 0; i < n * (size_t)c.size; i++)
            sb[i] = affine(c.wr[c.me], i);
        OK(mpiv_allreduce_comm(sb, rb, n, MPIV_UINT64, op, c.comm));
        expect_ordered(rb, n, c.size - 1, c.wr, "allreduce");
        for (int root = 0; root < c.size; root++) {
            OK(mpiv_reduce(sb, rb, n, MPIV_UINT64, op, root, c.comm));
            if (c.me == root)
                expect_ordered(rb, n, c.size - 1, c.wr, "reduce");
        }
        OK(mpiv_scan(sb, rb, n, MPIV_UINT64, op, c.comm));
        expect_ordered(rb, n, c.me, c.wr, "scan");
        size_t mine = 0;
        for (int k = 0; k < c.size; k++) {
            rc[k] = n;
            if (k < c.me)
                mine += n;
        }
        OK(mpiv_reduce_scatter(sb, rb, rc, MPIV_UINT64, op, c.comm));
        /* the reference of my share, elements [mine, mine + n) */
        for (size_t i = 0; i < n; i++) {
            uint64_t acc = affine(c.wr[0], mine + i);
            for (int k = 1; k < c.size; k++) {
                uint64_t x = affine(c.wr[k], mine + i);
                compose(&acc, &x, 1, MPIV_UINT64);
                acc = x;
            }
            if (rb[i] != acc) {
                FAIL_LATER("reduce_scatter: element %zu out of rank order", i);
                break;
            }
        }
    }
    OK(mpiv_op_free(&op));
    ck_assert_int_eq(op, MPIV_OP_NULL);
    ck_assert_int_eq(mpiv_op_free(&op), MPIV_ERR_ARG);
    agree();
    free(sb);
    free(rb);
    free(rc);
}
END_TEST

static void user_sum(const void *in, void *inout, size_t n, mpiv_datatype_t type)
{
    (void)type;
    const int32_t *a = in;
    int32_t *b = inout;
    for (size_t i = 0; i < n; i++)
        b[i] = a[i] + b[i];
}

START_TEST(user_op_commutative)
{
    mpiv_op_t op;
    OK(mpiv_op_create(user_sum, 1, &op));
    size_t n = BIG;
    int32_t *sb = malloc(n * 4), *rb = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        sb[i] = (int32_t)(wme * 3 + (int)(i % 100));
    OK(mpiv_allreduce_comm(sb, rb, n, MPIV_INT32, op, MPIV_COMM_WORLD));
    for (size_t i = 0; i < n; i++)
        if (rb[i] != 3 * wsize * (wsize - 1) / 2 + wsize * (int)(i % 100)) {
            FAIL_LATER("user sum: element %zu is %d", i, (int)rb[i]);
            break;
        }
    OK(mpiv_op_free(&op));
    agree();
    free(sb);
    free(rb);
}
END_TEST

START_TEST(bad_arguments)
{
    int b[4] = {0};
    ck_assert_int_eq(mpiv_allreduce_comm(b, b, 1, MPIV_DOUBLE, MPIV_BAND, MPIV_COMM_WORLD),
                     MPIV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "MPIV_BAND"));
    ck_assert_int_eq(mpiv_allreduce_comm(b, b, 1, MPIV_FLOAT, MPIV_LOR, MPIV_COMM_WORLD),
                     MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_allreduce_comm(b, b, 1, MPIV_BYTE, MPIV_SUM, MPIV_COMM_WORLD),
                     MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_reduce(b, b, 1, MPIV_INT32, 77, 0, MPIV_COMM_WORLD), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_bcast_comm(b, 1, (mpiv_datatype_t)0, 0, MPIV_COMM_WORLD), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_bcast_comm(b, 1, MPIV_INT32, wsize, MPIV_COMM_WORLD), MPIV_ERR_RANK);
    ck_assert_int_eq(mpiv_gather(NULL, b, 1, MPIV_INT32, 0, MPIV_COMM_WORLD), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_barrier_comm(MPIV_COMM_NULL), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_op_create(NULL, 1, NULL), MPIV_ERR_ARG);
    mpiv_op_t op = MPIV_SUM;
    ck_assert_int_eq(mpiv_op_free(&op), MPIV_ERR_ARG);
    OK(mpiv_barrier());
}
END_TEST

static int coll_init(int *argc, char ***argv)
{
    if (test_mpiv_init(argc, argv))
        return 1;
    wme = mpiv_rank();
    wsize = mpiv_size();
    int rc = mpiv_comm_split(MPIV_COMM_WORLD, 0, -wme, &reversed);
    if (rc) {
        fprintf(stderr, "mpiv_comm_split: %s: %s\n", mpiv_strerror(rc), mpiv_error_detail());
        return 1;
    }
    return 0;
}

static Suite *coll_suite(void)
{
    Suite *s = suite_create("coll");
    TCase *tc = tcase_create("coll");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, bad_arguments);
    tcase_add_loop_test(tc, reductions, 0, 2); /* 0: world, 1: reversed */
    tcase_add_loop_test(tc, movement, 0, 2);
    tcase_add_loop_test(tc, user_op_rank_order, 0, 2);
    tcase_add_test(tc, user_op_commutative);
    suite_add_tcase(s, tc);
    return s;
}

static bool coll_quiet(void) { return wme != 0; }

static int coll_fini(int failed)
{
    if (!failed)
        mpiv_comm_free(&reversed);
    return test_mpiv_fini(failed);
}

CHECK_MAIN(.suite = coll_suite, .fork = CK_NOFORK, .init = coll_init, .quiet = coll_quiet,
           .fini = coll_fini);
