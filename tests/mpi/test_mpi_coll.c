/*
 * The MPI face's collectives against a serial reference, under mpiv_run
 * at 2 and 4 ranks. Every rank's contribution is a function of (rank,
 * index), so each rank computes the expected result by itself.
 *
 *  - reductions (reduce, allreduce, scan, exscan, reduce_scatter(_block)
 *    and their non-blocking forms) for every predefined operation on
 *    eight types (MPIv's own kernels and the face's: long double, the
 *    XORs), counts 0, 1, 7 and 1000, in place and not;
 *  - MINLOC / MAXLOC on the pair types, ties included;
 *  - user operations: a non-commutative one (affine maps composed in rank
 *    order) on a contiguous type, a commutative one;
 *  - data movement (bcast, gather(v), scatter(v), allgather(v),
 *    alltoall(v), their non-blocking forms), with a non-contiguous type,
 *    in place, past the eager limit;
 *  - several non-blocking collectives outstanding at once, completed out
 *    of order, with blocking ones between; a communicator with one left
 *    unfreed for MPI_Finalize.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "mpi_test.h"

/* --- typed access through int64 -------------------------------------------- */

enum tix { T_INT, T_DOUBLE, T_LL, T_UCHAR, T_SHORT, T_FLOAT, T_LDOUBLE, T_U64, T_N };
static MPI_Datatype mpitype(enum tix t)
{
    MPI_Datatype m[T_N] = {MPI_INT,   MPI_DOUBLE, MPI_LONG_LONG,   MPI_UNSIGNED_CHAR,
                           MPI_SHORT, MPI_FLOAT,  MPI_LONG_DOUBLE, MPI_UINT64_T};
    return m[t];
}
static size_t tsize(enum tix t)
{
    size_t s[T_N] = {sizeof(int),   sizeof(double), sizeof(long long),   1,
                     sizeof(short), sizeof(float),  sizeof(long double), 8};
    return s[t];
}
static bool tfloat(enum tix t) { return t == T_DOUBLE || t == T_FLOAT || t == T_LDOUBLE; }

static void put(enum tix t, void *b, size_t i, int64_t v)
{
    switch (t) {
    case T_INT: ((int *)b)[i] = (int)v; break;
    case T_DOUBLE: ((double *)b)[i] = (double)v; break;
    case T_LL: ((long long *)b)[i] = v; break;
    case T_UCHAR: ((unsigned char *)b)[i] = (unsigned char)v; break;
    case T_SHORT: ((short *)b)[i] = (short)v; break;
    case T_FLOAT: ((float *)b)[i] = (float)v; break;
    case T_LDOUBLE: ((long double *)b)[i] = (long double)v; break;
    case T_U64: ((uint64_t *)b)[i] = (uint64_t)v; break;
    case T_N: break;
    }
}
static int64_t get(enum tix t, const void *b, size_t i)
{
    switch (t) {
    case T_INT: return ((const int *)b)[i];
    case T_DOUBLE: return (int64_t)((const double *)b)[i];
    case T_LL: return ((const long long *)b)[i];
    case T_UCHAR: return ((const unsigned char *)b)[i];
    case T_SHORT: return ((const short *)b)[i];
    case T_FLOAT: return (int64_t)((const float *)b)[i];
    case T_LDOUBLE: return (int64_t)((const long double *)b)[i];
    case T_U64: return (int64_t)((const uint64_t *)b)[i];
    case T_N: break;
    }
    return 0;
}

enum oix { O_SUM, O_PROD, O_MAX, O_MIN, O_LAND, O_LOR, O_LXOR, O_BAND, O_BOR, O_BXOR, O_N };
static MPI_Op mpiop(enum oix o)
{
    MPI_Op m[O_N] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND,
                     MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
    return m[o];
}
static const char *opname[O_N] = {"SUM", "PROD", "MAX", "MIN", "LAND",
                                  "LOR", "LXOR", "BAND", "BOR", "BXOR"};
static bool defined_on(enum oix o, enum tix t) { return o <= O_MIN || !tfloat(t); }

/* contributions: small, so that PROD of four fits every type exactly;
 * bit patterns for the bitwise ops; zeros for the logical ones */
static int64_t contrib(enum oix o, int r, size_t i)
{
    if (o >= O_BAND)
        return (int64_t)((r * 37 + i * 11) & 0x7f);
    if (o >= O_LAND)
        return (int64_t)((r + i) % 3 == 0 ? 0 : (r + i) % 3);
    return (int64_t)(1 + (r + i) % 3);
}

static int64_t apply(enum oix o, int64_t a, int64_t b)
{
    switch (o) {
    case O_SUM: return a + b;
    case O_PROD: return a * b;
    case O_MAX: return a > b ? a : b;
    case O_MIN: return a < b ? a : b;
    case O_LAND: return a && b;
    case O_LOR: return a || b;
    case O_LXOR: return !a != !b;
    case O_BAND: return a & b;
    case O_BOR: return a | b;
    case O_BXOR: return a ^ b;
    case O_N: break;
    }
    return 0;
}

/* ranks [lo, hi) combined at index i */
static int64_t ref(enum oix o, int lo, int hi, size_t i)
{
    int64_t v = contrib(o, lo, i);
    for (int r = lo + 1; r < hi; r++)
        v = apply(o, v, contrib(o, r, i));
    return v;
}

static void check_range(const char *what, enum tix t, enum oix o, const void *b, size_t n,
                        size_t off, int lo, int hi)
{
    for (size_t i = 0; i < n; i++) {
        int64_t want = ref(o, lo, hi, off + i), got = get(t, b, i);
        if (got != want) {
            FAIL_LATER("%s %s type %d count %zu: element %zu is %lld, not %lld", what,
                       opname[o], (int)t, n, i, (long long)got, (long long)want);
            return;
        }
    }
}

static const size_t counts[] = {0, 1, 7, 1000};
#define NCOUNTS (sizeof counts / sizeof counts[0])

START_TEST(reductions)
{
    enum tix t = (enum tix)_i;
    MPI_Datatype mt = mpitype(t);
    size_t es = tsize(t);
    for (enum oix o = 0; o < O_N; o++) {
        if (!defined_on(o, t))
            continue;
        MPI_Op op = mpiop(o);
        for (size_t ci = 0; ci < NCOUNTS; ci++) {
            size_t n = counts[ci];
            int c = (int)n;
            unsigned char *in = malloc(es * n * (size_t)np + 1), *out = malloc(es * n * (size_t)np + 1);
            for (size_t i = 0; i < n * (size_t)np; i++)
                put(t, in, i, contrib(o, me, i));
            /* reduce at the last rank */
            MOK(MPI_Reduce(in, out, c, mt, op, np - 1, MPI_COMM_WORLD));
            if (me == np - 1)
                check_range("reduce", t, o, out, n, 0, 0, np);
            /* allreduce, then in place */
            MOK(MPI_Allreduce(in, out, c, mt, op, MPI_COMM_WORLD));
            check_range("allreduce", t, o, out, n, 0, 0, np);
            memcpy(out, in, es * n);
            MOK(MPI_Allreduce(MPI_IN_PLACE, out, c, mt, op, MPI_COMM_WORLD));
            check_range("allreduce in place", t, o, out, n, 0, 0, np);
            /* reduce in place at root 0 */
            memcpy(out, in, es * n);
            MOK(MPI_Reduce(me == 0 ? MPI_IN_PLACE : in, out, c, mt, op, 0, MPI_COMM_WORLD));
            if (me == 0)
                check_range("reduce in place", t, o, out, n, 0, 0, np);
            /* scans */
            MOK(MPI_Scan(in, out, c, mt, op, MPI_COMM_WORLD));
            check_range("scan", t, o, out, n, 0, 0, me + 1);
            MOK(MPI_Exscan(in, out, c, mt, op, MPI_COMM_WORLD));
            if (me > 0)
                check_range("exscan", t, o, out, n, 0, 0, me);
            memcpy(out, in, es * n);
            MOK(MPI_Exscan(MPI_IN_PLACE, out, c, mt, op, MPI_COMM_WORLD));
            if (me > 0)
                check_range("exscan in place", t, o, out, n, 0, 0, me);
            /* reduce_scatter_block: n per rank of np * n */
            MOK(MPI_Reduce_scatter_block(in, out, c, mt, op, MPI_COMM_WORLD));
            check_range("reduce_scatter_block", t, o, out, n, n * (size_t)me, 0, np);
            /* reduce_scatter: rank r gets (r + 1) * n / np elements (some 0) */
            int *rc = malloc(sizeof(int) * (size_t)np);
            size_t before = 0, total = 0;
            for (int r = 0; r < np; r++) {
                rc[r] = (int)((size_t)(r + 1) * n / (size_t)np);
                if (r < me)
                    before += (size_t)rc[r];
                total += (size_t)rc[r];
            }
            if (total <= n * (size_t)np) {
                MOK(MPI_Reduce_scatter(in, out, rc, mt, op, MPI_COMM_WORLD));
                check_range("reduce_scatter", t, o, out, (size_t)rc[me], before, 0, np);
            }
            free(rc);
            /* non-blocking forms */
            MPI_Request r;
            MOK(MPI_Iallreduce(in, out, c, mt, op, MPI_COMM_WORLD, &r));
            MOK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            check_range("iallreduce", t, o, out, n, 0, 0, np);
            MOK(MPI_Ireduce(in, out, c, mt, op, 0, MPI_COMM_WORLD, &r));
            MOK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            if (me == 0)
                check_range("ireduce", t, o, out, n, 0, 0, np);
            MOK(MPI_Iscan(in, out, c, mt, op, MPI_COMM_WORLD, &r));
            MOK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            check_range("iscan", t, o, out, n, 0, 0, me + 1);
            MOK(MPI_Iexscan(in, out, c, mt, op, MPI_COMM_WORLD, &r));
            MOK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            if (me > 0)
                check_range("iexscan", t, o, out, n, 0, 0, me);
            MOK(MPI_Ireduce_scatter_block(in, out, c, mt, op, MPI_COMM_WORLD, &r));
            MOK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            check_range("ireduce_scatter_block", t, o, out, n, n * (size_t)me, 0, np);
            int *rc2 = malloc(sizeof(int) * (size_t)np);
            size_t before2 = 0;
            for (int q = 0; q < np; q++) {
                rc2[q] = (int)n; /* n each of np * n */
                if (q < me)
                    before2 += n;
            }
            MOK(MPI_Ireduce_scatter(in, out, rc2, mt, op, MPI_COMM_WORLD, &r));
            MOK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            check_range("ireduce_scatter", t, o, out, n, before2, 0, np);
            free(rc2);
            free(in);
            free(out);
        }
    }
    agree();
}
END_TEST

/* --- MINLOC / MAXLOC -------------------------------------------------------- */

#define PAIRCASE(S, VT, MT)                                                                  \
    do {                                                                                     \
        struct S { VT v; int i; } in[5], out[5];                                             \
        for (int k = 0; k < 5; k++) {                                                        \
            in[k].v = (VT)((me + k) % 3);                                                    \
            in[k].i = me;                                                                    \
        }                                                                                    \
        for (int w = 0; w < 2; w++) {                                                        \
            MOK(MPI_Allreduce(in, out, 5, MT, w ? MPI_MAXLOC : MPI_MINLOC, MPI_COMM_WORLD)); \
            for (int k = 0; k < 5; k++) {                                                    \
                int best = 0;                                                                \
                for (int r = 1; r < np; r++) {                                               \
                    int vr = (r + k) % 3, vb = (best + k) % 3;                               \
                    if (w ? vr > vb : vr < vb)                                               \
                        best = r;                                                            \
                }                                                                            \
                EXPECT(out[k].v == (VT)((best + k) % 3) && out[k].i == best,                 \
                       "%s %s element %d: (%g, %d), not (%d, %d)", #MT,                      \
                       w ? "MAXLOC" : "MINLOC", k, (double)out[k].v, out[k].i,               \
                       (best + k) % 3, best);                                                \
            }                                                                                \
        }                                                                                    \
        MOK(MPI_Reduce(in, out, 5, MT, MPI_MINLOC, np - 1, MPI_COMM_WORLD));                 \
        if (me == np - 1)                                                                    \
            EXPECT(out[0].v == 0 && out[0].i == 0, "%s reduce MINLOC (%g, %d)", #MT,         \
                   (double)out[0].v, out[0].i);                                              \
    } while (0)

START_TEST(minloc_maxloc)
{
    PAIRCASE(fi, float, MPI_FLOAT_INT);
    PAIRCASE(di, double, MPI_DOUBLE_INT);
    PAIRCASE(li, long, MPI_LONG_INT);
    PAIRCASE(ii, int, MPI_2INT);
    PAIRCASE(si, short, MPI_SHORT_INT);
    PAIRCASE(ldi, long double, MPI_LONG_DOUBLE_INT);
    agree();
}
END_TEST

/* --- user operations -------------------------------------------------------- */

/* x -> m x + c; in op inout = inout after in (apply in first) */
struct affine { long long m, c; };
static void compose(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    struct affine *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        struct affine r = {a[i].m * b[i].m, a[i].c * b[i].m + b[i].c};
        b[i] = r;
    }
}
static void add_ints(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}
static struct affine aff_of(int r, int k) { return (struct affine){2 + (r + k) % 2, r + k}; }
static struct affine aff_ref(int lo, int hi, int k)
{
    struct affine v = aff_of(lo, k);
    for (int r = lo + 1; r < hi; r++) {
        struct affine b = aff_of(r, k);
        v = (struct affine){v.m * b.m, v.c * b.m + b.c};
    }
    return v;
}

START_TEST(user_operations)
{
    MPI_Datatype aff;
    MOK(MPI_Type_contiguous(2, MPI_LONG_LONG, &aff));
    MOK(MPI_Type_commit(&aff));
    MPI_Op comp, add;
    MOK(MPI_Op_create(compose, 0, &comp));
    MOK(MPI_Op_create(add_ints, 1, &add));
    int commute = 1;
    MOK(MPI_Op_commutative(comp, &commute));
    EXPECT(commute == 0, "commutative flag %d", commute);
    enum { K = 9 };
    struct affine in[K * 4], out[K * 4];
    for (int k = 0; k < K * np; k++)
        in[k] = aff_of(me, k);
    MOK(MPI_Allreduce(in, out, K, aff, comp, MPI_COMM_WORLD));
    for (int k = 0; k < K; k++) {
        struct affine w = aff_ref(0, np, k);
        EXPECT(out[k].m == w.m && out[k].c == w.c, "allreduce element %d: %lld,%lld", k,
               out[k].m, out[k].c);
    }
    MOK(MPI_Reduce(in, out, K, aff, comp, 1, MPI_COMM_WORLD));
    if (me == 1)
        for (int k = 0; k < K; k++) {
            struct affine w = aff_ref(0, np, k);
            EXPECT(out[k].m == w.m && out[k].c == w.c, "reduce element %d", k);
        }
    MOK(MPI_Scan(in, out, K, aff, comp, MPI_COMM_WORLD));
    for (int k = 0; k < K; k++) {
        struct affine w = aff_ref(0, me + 1, k);
        EXPECT(out[k].m == w.m && out[k].c == w.c, "scan element %d", k);
    }
    MOK(MPI_Exscan(in, out, K, aff, comp, MPI_COMM_WORLD));
    for (int k = 0; me > 0 && k < K; k++) {
        struct affine w = aff_ref(0, me, k);
        EXPECT(out[k].m == w.m && out[k].c == w.c, "exscan element %d", k);
    }
    MOK(MPI_Reduce_scatter_block(in, out, K, aff, comp, MPI_COMM_WORLD));
    for (int k = 0; k < K; k++) {
        struct affine w = aff_ref(0, np, me * K + k);
        EXPECT(out[k].m == w.m && out[k].c == w.c, "reduce_scatter_block element %d", k);
    }
    int iv[3] = {me, 2 * me, 3 * me}, io[3];
    MOK(MPI_Allreduce(iv, io, 3, MPI_INT, add, MPI_COMM_WORLD));
    int s = np * (np - 1) / 2;
    EXPECT(io[0] == s && io[2] == 3 * s, "commutative user sum %d %d", io[0], io[2]);
    MOK(MPI_Op_free(&comp));
    MOK(MPI_Op_free(&add));
    EXPECT(comp == MPI_OP_NULL, "op_free left the handle");
    MOK(MPI_Type_free(&aff));
    agree();
}
END_TEST

/* A predefined op on a non-contiguous type: packed, reduced, unpacked. */
START_TEST(reduction_on_vector_type)
{
    MPI_Datatype v;
    MOK(MPI_Type_vector(3, 1, 2, MPI_INT, &v));
    MOK(MPI_Type_commit(&v));
    int in[12], out[12];
    for (int i = 0; i < 12; i++) {
        in[i] = me + i;
        out[i] = -1;
    }
    MOK(MPI_Allreduce(in, out, 2, v, MPI_SUM, MPI_COMM_WORLD));
    /* elements at 0, 2, 4 and 6, 8, 10 (extent 5 ints: 5, 7, 9) */
    int s = np * (np - 1) / 2;
    for (int i = 0; i < 12; i++) {
        bool in_type = i == 0 || i == 2 || i == 4 || i == 5 || i == 7 || i == 9;
        int want = in_type ? s + np * i : -1;
        EXPECT(out[i] == want, "int %d is %d, not %d", i, out[i], want);
    }
    int sz;
    MPI_Aint lb, ext;
    MOK(MPI_Type_size(v, &sz));
    MOK(MPI_Type_get_extent(v, &lb, &ext));
    EXPECT(sz == 3 * (int)sizeof(int) && ext == 5 * (MPI_Aint)sizeof(int), "size %d extent %ld",
           sz, (long)ext);
    MOK(MPI_Type_free(&v));
    agree();
}
END_TEST

/* --- data movement ------------------------------------------------------------ */

static int val(int from, int to, int k) { return from * 100000 + to * 1000 + k; }

static void check_ints(const char *what, const int *b, int n, int from, int to)
{
    for (int k = 0; k < n; k++)
        if (b[k] != val(from, to, k)) {
            FAIL_LATER("%s: int %d from %d is %d, not %d", what, k, from, b[k],
                       val(from, to, k));
            return;
        }
}

START_TEST(movement)
{
    int n = (int)counts[_i % NCOUNTS];
    if (_i == NCOUNTS)
        n = 70000; /* past the eager limit */
    size_t N = (size_t)n * (size_t)np;
    int *s = malloc(sizeof(int) * N + 4), *r = malloc(sizeof(int) * N + 4);
    int root = np - 1;
    MPI_Request q;
    for (int nb = 0; nb < 2; nb++) {
        /* bcast */
        for (int k = 0; k < n; k++)
            r[k] = me == root ? val(root, 0, k) : -1;
        if (nb) {
            MOK(MPI_Ibcast(r, n, MPI_INT, root, MPI_COMM_WORLD, &q));
            MOK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        } else {
            MOK(MPI_Bcast(r, n, MPI_INT, root, MPI_COMM_WORLD));
        }
        check_ints("bcast", r, n, root, 0);
        /* gather */
        for (int k = 0; k < n; k++)
            s[k] = val(me, root, k);
        if (nb) {
            MOK(MPI_Igather(s, n, MPI_INT, r, n, MPI_INT, root, MPI_COMM_WORLD, &q));
            MOK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        } else {
            MOK(MPI_Gather(s, n, MPI_INT, r, n, MPI_INT, root, MPI_COMM_WORLD));
        }
        if (me == root)
            for (int f = 0; f < np; f++)
                check_ints("gather", r + (size_t)f * (size_t)n, n, f, root);
        /* scatter */
        for (int t = 0; t < np; t++)
            for (int k = 0; k < n; k++)
                s[(size_t)t * (size_t)n + (size_t)k] = val(root, t, k);
        if (nb) {
            MOK(MPI_Iscatter(s, n, MPI_INT, r, n, MPI_INT, root, MPI_COMM_WORLD, &q));
            MOK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        } else {
            MOK(MPI_Scatter(s, n, MPI_INT, r, n, MPI_INT, root, MPI_COMM_WORLD));
        }
        check_ints("scatter", r, n, root, me);
        /* allgather */
        for (int k = 0; k < n; k++)
            s[k] = val(me, 0, k);
        if (nb) {
            MOK(MPI_Iallgather(s, n, MPI_INT, r, n, MPI_INT, MPI_COMM_WORLD, &q));
            MOK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        } else {
            MOK(MPI_Allgather(s, n, MPI_INT, r, n, MPI_INT, MPI_COMM_WORLD));
        }
        for (int f = 0; f < np; f++)
            check_ints("allgather", r + (size_t)f * (size_t)n, n, f, 0);
        /* alltoall */
        for (int t = 0; t < np; t++)
            for (int k = 0; k < n; k++)
                s[(size_t)t * (size_t)n + (size_t)k] = val(me, t, k);
        if (nb) {
            MOK(MPI_Ialltoall(s, n, MPI_INT, r, n, MPI_INT, MPI_COMM_WORLD, &q));
            MOK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        } else {
            MOK(MPI_Alltoall(s, n, MPI_INT, r, n, MPI_INT, MPI_COMM_WORLD));
        }
        for (int f = 0; f < np; f++)
            check_ints("alltoall", r + (size_t)f * (size_t)n, n, f, me);
    }
    /* in place: gather at root, allgather, alltoall, scatter at root */
    for (int f = 0; f < np; f++)
        for (int k = 0; k < n; k++)
            r[(size_t)f * (size_t)n + (size_t)k] = f == me ? val(me, 0, k) : -1;
    MOK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r, n, MPI_INT, MPI_COMM_WORLD));
    for (int f = 0; f < np; f++)
        check_ints("allgather in place", r + (size_t)f * (size_t)n, n, f, 0);
    for (int f = 0; f < np; f++)
        for (int k = 0; k < n; k++)
            r[(size_t)f * (size_t)n + (size_t)k] = f == me ? val(me, 0, k) : -1;
    MOK(MPI_Gather(me == root ? MPI_IN_PLACE : r + (size_t)me * (size_t)n, n, MPI_INT, r, n,
                   MPI_INT, root, MPI_COMM_WORLD));
    if (me == root)
        for (int f = 0; f < np; f++)
            check_ints("gather in place", r + (size_t)f * (size_t)n, n, f, 0);
    for (int t = 0; t < np; t++)
        for (int k = 0; k < n; k++)
            r[(size_t)t * (size_t)n + (size_t)k] = val(me, t, k);
    MOK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r, n, MPI_INT, MPI_COMM_WORLD));
    for (int f = 0; f < np; f++)
        check_ints("alltoall in place", r + (size_t)f * (size_t)n, n, f, me);
    for (int t = 0; t < np; t++)
        for (int k = 0; k < n; k++)
            s[(size_t)t * (size_t)n + (size_t)k] = val(root, t, k);
    MOK(MPI_Scatter(s, n, MPI_INT, me == root ? MPI_IN_PLACE : r, n, MPI_INT, root,
                    MPI_COMM_WORLD));
    if (me != root)
        check_ints("scatter in place", r, n, root, me);
    free(s);
    free(r);
    agree();
}
END_TEST

/* The blocking call, or its non-blocking form (whose request is q_)
 * waited for at once. */
#define BLOCKING_OR_NOT(nb, blocking, nonblocking)                                           \
    do {                                                                                     \
        if (nb) {                                                                            \
            MPI_Request q_;                                                                  \
            MOK(nonblocking);                                                                \
            MOK(MPI_Wait(&q_, MPI_STATUS_IGNORE));                                           \
        } else {                                                                             \
            MOK(blocking);                                                                   \
        }                                                                                    \
    } while (0)

/* The v forms, blocking and not: rank f contributes n + f ints, with gaps. */
START_TEST(movement_v)
{
    int n = (int)counts[_i % NCOUNTS];
    bool nb = _i >= (int)NCOUNTS;
    int *cnt = malloc(sizeof(int) * (size_t)np), *dis = malloc(sizeof(int) * (size_t)np);
    int total = 0;
    for (int f = 0; f < np; f++) {
        cnt[f] = n + f;
        dis[f] = total + 1; /* one int of gap before each block */
        total += cnt[f] + 1;
    }
    int root = 0;
    int *s = malloc(sizeof(int) * (size_t)(total + n + np)), *r = malloc(sizeof(int) * (size_t)total);
    /* gatherv */
    for (int k = 0; k < cnt[me]; k++)
        s[k] = val(me, root, k);
    for (int k = 0; k < total; k++)
        r[k] = -1;
    BLOCKING_OR_NOT(nb, MPI_Gatherv(s, cnt[me], MPI_INT, r, cnt, dis, MPI_INT, root, MPI_COMM_WORLD),
                    MPI_Igatherv(s, cnt[me], MPI_INT, r, cnt, dis, MPI_INT, root, MPI_COMM_WORLD, &q_));
    if (me == root)
        for (int f = 0; f < np; f++) {
            check_ints("gatherv", r + dis[f], cnt[f], f, root);
            EXPECT(r[dis[f] - 1] == -1, "gatherv wrote a gap");
        }
    /* allgatherv, and in place */
    for (int k = 0; k < total; k++)
        r[k] = -1;
    for (int k = 0; k < cnt[me]; k++)
        s[k] = val(me, 0, k);
    BLOCKING_OR_NOT(nb, MPI_Allgatherv(s, cnt[me], MPI_INT, r, cnt, dis, MPI_INT, MPI_COMM_WORLD),
                    MPI_Iallgatherv(s, cnt[me], MPI_INT, r, cnt, dis, MPI_INT, MPI_COMM_WORLD, &q_));
    for (int f = 0; f < np; f++)
        check_ints("allgatherv", r + dis[f], cnt[f], f, 0);
    for (int f = 0; f < np; f++)
        if (f != me)
            for (int k = 0; k < cnt[f]; k++)
                r[dis[f] + k] = -1;
    BLOCKING_OR_NOT(nb, MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_INT, r, cnt, dis, MPI_INT, MPI_COMM_WORLD),
                    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_INT, r, cnt, dis, MPI_INT, MPI_COMM_WORLD, &q_));
    for (int f = 0; f < np; f++)
        check_ints("allgatherv in place", r + dis[f], cnt[f], f, 0);
    /* scatterv */
    for (int t = 0; t < np; t++)
        for (int k = 0; k < cnt[t]; k++)
            s[dis[t] + k] = val(root, t, k);
    BLOCKING_OR_NOT(nb, MPI_Scatterv(s, cnt, dis, MPI_INT, r, cnt[me], MPI_INT, root, MPI_COMM_WORLD),
                    MPI_Iscatterv(s, cnt, dis, MPI_INT, r, cnt[me], MPI_INT, root, MPI_COMM_WORLD, &q_));
    check_ints("scatterv", r, cnt[me], root, me);
    /* alltoallv: rank f sends cnt[t] ints to t... so t receives cnt[t]
     * from everyone: symmetric counts per receiver */
    int *sc = malloc(sizeof(int) * (size_t)np), *sd = malloc(sizeof(int) * (size_t)np);
    int *rcn = malloc(sizeof(int) * (size_t)np), *rd = malloc(sizeof(int) * (size_t)np);
    int so = 0, ro = 0;
    for (int t = 0; t < np; t++) {
        sc[t] = n + t;
        sd[t] = so;
        so += sc[t] + 2;
        rcn[t] = n + me;
        rd[t] = ro + 1;
        ro += rcn[t] + 1;
    }
    int *s2 = malloc(sizeof(int) * (size_t)so + 4), *r2 = malloc(sizeof(int) * (size_t)ro + 4);
    for (int t = 0; t < np; t++)
        for (int k = 0; k < sc[t]; k++)
            s2[sd[t] + k] = val(me, t, k);
    BLOCKING_OR_NOT(nb, MPI_Alltoallv(s2, sc, sd, MPI_INT, r2, rcn, rd, MPI_INT, MPI_COMM_WORLD),
                    MPI_Ialltoallv(s2, sc, sd, MPI_INT, r2, rcn, rd, MPI_INT, MPI_COMM_WORLD, &q_));
    for (int f = 0; f < np; f++)
        check_ints("alltoallv", r2 + rd[f], rcn[f], f, me);
    free(s2);
    free(r2);
    free(sc);
    free(sd);
    free(rcn);
    free(rd);
    free(s);
    free(r);
    free(cnt);
    free(dis);
    agree();
}
END_TEST

/* A non-contiguous type in the fixed-count movements: every other int. */
START_TEST(movement_vector_type)
{
    enum { B = 5 };
    MPI_Datatype v;
    MOK(MPI_Type_vector(B, 1, 2, MPI_INT, &v));
    MOK(MPI_Type_commit(&v));
    MPI_Aint lb, ext;
    MOK(MPI_Type_get_extent(v, &lb, &ext));
    int stride = (int)(ext / (MPI_Aint)sizeof(int)); /* 2B - 1 */
    int *s = malloc(sizeof(int) * (size_t)(stride * np + 2));
    int *r = malloc(sizeof(int) * (size_t)(stride * np + 2));
    for (int i = 0; i < stride * np + 2; i++) {
        s[i] = val(me, 0, i);
        r[i] = -1;
    }
    MOK(MPI_Allgather(s, 1, v, r, 1, v, MPI_COMM_WORLD));
    for (int f = 0; f < np; f++)
        for (int k = 0; k < stride; k++) {
            int want = k % 2 ? -1 : val(f, 0, k);
            EXPECT(r[f * stride + k] == want, "allgather vector: rank %d int %d is %d", f, k,
                   r[f * stride + k]);
        }
    for (int i = 0; i < stride; i++)
        r[i] = me == 0 ? val(0, 1, i) : -1;
    MOK(MPI_Bcast(r, 1, v, 0, MPI_COMM_WORLD));
    for (int k = 0; k < stride; k++)
        EXPECT(r[k] == (k % 2 ? (me == 0 ? val(0, 1, k) : -1) : val(0, 1, k)),
               "bcast vector int %d is %d", k, r[k]);
    /* the send side as B plain ints, the receive side as the vector */
    int plain[B];
    for (int k = 0; k < B; k++)
        plain[k] = val(me, 2, k);
    MOK(MPI_Gather(plain, B, MPI_INT, r, 1, v, 0, MPI_COMM_WORLD));
    if (me == 0)
        for (int f = 0; f < np; f++)
            for (int k = 0; k < B; k++)
                EXPECT(r[f * stride + 2 * k] == val(f, 2, k), "gather into vector: %d %d", f, k);
    MOK(MPI_Type_free(&v));
    free(s);
    free(r);
    agree();
}
END_TEST

/* Several non-blocking collectives outstanding on two communicators,
 * completed in reverse, with a blocking one started between. */
START_TEST(nonblocking_overlap)
{
    MPI_Comm dup;
    MOK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    enum { R = 6 };
    MPI_Request q[R];
    int a = me, sa = -1, b[3] = {0}, c = me + 1, sc = -1, d = me, sd = -1;
    if (me == 0)
        b[0] = 7, b[1] = 8, b[2] = 9;
    MOK(MPI_Ibarrier(MPI_COMM_WORLD, &q[0]));
    MOK(MPI_Iallreduce(&a, &sa, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[1]));
    MOK(MPI_Ibcast(b, 3, MPI_INT, 0, MPI_COMM_WORLD, &q[2]));
    MOK(MPI_Iallreduce(&c, &sc, 1, MPI_INT, MPI_PROD, dup, &q[3]));
    MOK(MPI_Iexscan(&d, &sd, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[4]));
    MOK(MPI_Ibarrier(dup, &q[5]));
    int e = 1, se = 0;
    MOK(MPI_Allreduce(&e, &se, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = R - 1; i >= 2; i--)
        MOK(MPI_Wait(&q[i], MPI_STATUS_IGNORE));
    int flag = 0;
    while (!flag)
        MOK(MPI_Testall(2, q, &flag, MPI_STATUSES_IGNORE));
    int fact = 1;
    for (int r = 1; r <= np; r++)
        fact *= r;
    EXPECT(sa == np * (np - 1) / 2, "iallreduce %d", sa);
    EXPECT(b[0] == 7 && b[2] == 9, "ibcast %d %d", b[0], b[2]);
    EXPECT(sc == fact, "iallreduce on dup %d", sc);
    EXPECT(me == 0 || sd == me * (me - 1) / 2, "iexscan %d", sd);
    EXPECT(se == np, "allreduce between %d", se);
    MOK(MPI_Comm_free(&dup));
    /* a communicator left to MPI_Finalize, its collectives' ULT with it */
    static MPI_Comm kept;
    MOK(MPI_Comm_dup(MPI_COMM_WORLD, &kept));
    MOK(MPI_Ibarrier(kept, &q[0]));
    MOK(MPI_Wait(&q[0], MPI_STATUS_IGNORE));
    agree();
}
END_TEST

static Suite *coll_suite(void)
{
    Suite *s = suite_create("mpi_coll");
    TCase *tc = tcase_create("coll");
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, reductions, 0, T_N);
    tcase_add_test(tc, minloc_maxloc);
    tcase_add_test(tc, user_operations);
    tcase_add_test(tc, reduction_on_vector_type);
    tcase_add_loop_test(tc, movement, 0, NCOUNTS + 1);
    tcase_add_loop_test(tc, movement_v, 0, 2 * NCOUNTS);
    tcase_add_test(tc, movement_vector_type);
    tcase_add_test(tc, nonblocking_overlap);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = coll_suite, .fork = CK_NOFORK, .init = mt_init, .quiet = mt_quiet,
           .fini = mt_fini);
