/*
 * coll.c — collectives on any communicator, built on point-to-point in the
 * communicator's collective context (COMM_CTX_COLL), so they can never
 * match a user's message, nor another communicator's collectives.
 *
 * Every member calls a communicator's collectives in the same order, and
 * its flag (comm.h) keeps one at a time per process, so the communicator's
 * call counter gives every call the same number on all members; it goes
 * into the tag together with a round, so the messages of two calls never
 * mix. Rounds separate the phases of one call where the same two ranks
 * talk more than once in the same direction out of order; messages with
 * equal tags between two ranks are received in the order sent, which the
 * ring and pairwise loops rely on. Every decision that changes which
 * messages flow (the algorithm, how many call numbers a call takes) depends
 * only on arguments all members agree on.
 *
 * Algorithms (P ranks, n bytes per rank's contribution; "small" means
 * below COLL_SMALL bytes for the whole vector, see each line):
 *   barrier        dissemination: ceil(log2 P) rounds of empty messages.
 *   bcast          small (or fewer bytes than ranks): binomial tree,
 *                  log2 P steps. Large: binomial scatter of P chunks then
 *                  a ring allgather (van de Geijn), ~2n bytes per rank.
 *   reduce         binomial tree (log2 P steps), rooted at root for
 *                  commutative ops, at rank 0 in rank order for the others
 *                  (then one message to root). Large and commutative:
 *                  ring reduce-scatter then a gather of the blocks at root.
 *   allreduce      small or non-commutative: recursive doubling (ranks
 *                  beyond a power of two fold into a partner first), which
 *                  combines in rank order. Large and commutative (count >=
 *                  P): ring reduce-scatter + ring allgather, 2(P-1)/P n bytes.
 *   gather,scatter small (P n): binomial tree through a staging buffer.
 *                  Large: linear, the root posts all P-1 transfers at once.
 *   gatherv,
 *   scatterv       linear (counts differ per rank: a tree would need them
 *                  everywhere).
 *   allgather      small (P n): binomial gather to rank 0 + binomial bcast.
 *                  Large: ring, P-1 steps.
 *   allgatherv     ring.
 *   alltoall(v)    small (n per peer below COLL_SMALL / P): every transfer
 *                  posted at once. Large: pairwise exchange, P-1 steps,
 *                  one peer each.
 *   reduce_scatter large and commutative: ring reduce-scatter. Otherwise
 *                  reduce to rank 0 in rank order + scatterv.
 *   scan           recursive doubling (log2 P steps), rank order kept.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util/spinlock.h"

#define COLL_ROUND_BITS 6 /* up to 64 rounds: log2 of MPIV_RANK_MAX fits */
#define COLL_SMALL ((size_t)16384)

static uint32_t coll_tag(uint32_t call, unsigned round)
{
    return ((call << COLL_ROUND_BITS) | round) & 0x7fffffffu;
}

static uint32_t next_call(struct mpiv_comm *c) { return c->coll_seq++; }

/* --- point-to-point in the collective context ---------------------------------- */

static int c_isend(struct mpiv_comm *c, const void *buf, size_t n, int dst, uint32_t tag,
                   struct mpiv_request *r)
{
    return proto_isend(buf, n, comm_to_world(c, dst), (int)tag, (int)COMM_CTX_COLL(c->id), r);
}

static int c_irecv(struct mpiv_comm *c, void *buf, size_t n, int src, uint32_t tag,
                   struct mpiv_request *r)
{
    return proto_irecv(buf, n, comm_to_world(c, src), (int)tag, (int)COMM_CTX_COLL(c->id), r);
}

/* A posted receive on this stack must leave the table before we return. */
static void c_unpost(struct mpiv_request *r)
{
    if (!proto_cancel_recv(r))
        proto_wait(r, NULL);
}

static int c_sendrecv(struct mpiv_comm *c, const void *sbuf, size_t ssize, int dst, void *rbuf,
                      size_t rsize, int src, uint32_t tag)
{
    struct mpiv_request rs, rr;
    int rc = c_irecv(c, rbuf, rsize, src, tag, &rr);
    if (rc)
        return rc;
    rc = c_isend(c, sbuf, ssize, dst, tag, &rs);
    if (rc) {
        c_unpost(&rr);
        return rc;
    }
    int rc2 = proto_wait(&rr, NULL);
    int rc1 = proto_wait(&rs, NULL);
    return rc1 ? rc1 : rc2;
}

static int c_send(struct mpiv_comm *c, const void *buf, size_t n, int dst, uint32_t tag)
{
    struct mpiv_request r;
    int rc = c_isend(c, buf, n, dst, tag, &r);
    return rc ? rc : proto_wait(&r, NULL);
}

static int c_recv(struct mpiv_comm *c, void *buf, size_t n, int src, uint32_t tag)
{
    struct mpiv_request r;
    int rc = c_irecv(c, buf, n, src, tag, &r);
    return rc ? rc : proto_wait(&r, NULL);
}

/* A set of transfers posted at once (the linear algorithms). */
struct c_set {
    struct mpiv_request *r;
    int n;
    int err; /* first failure to start one */
};

static int set_init(struct c_set *s, int max)
{
    s->n = 0;
    s->err = MPIV_SUCCESS;
    s->r = max ? malloc((size_t)max * sizeof *s->r) : NULL;
    if (max && !s->r)
        return util_err(MPIV_ERR_NO_RESOURCES, "out of memory for %d transfers", max);
    return MPIV_SUCCESS;
}

static void set_add(struct mpiv_comm *c, struct c_set *s, bool send, void *buf, size_t n,
                    int peer, uint32_t tag)
{
    if (s->err)
        return;
    struct mpiv_request *r = &s->r[s->n];
    int rc = send ? c_isend(c, buf, n, peer, tag, r) : c_irecv(c, buf, n, peer, tag, r);
    if (rc)
        s->err = rc;
    else
        s->n++;
}

/* Completes every started transfer (after a failure to start one, the
 * receives are taken back where they can be) and frees the set. */
static int set_finish(struct c_set *s)
{
    int first = s->err;
    for (int i = 0; i < s->n; i++) {
        if (s->err && s->r[i].kind == PROTO_REQ_RECV && proto_cancel_recv(&s->r[i]))
            continue;
        int rc = proto_wait(&s->r[i], NULL);
        if (rc && !first)
            first = rc;
    }
    free(s->r);
    return first;
}

/* --- types and operations -------------------------------------------------------- */

static const size_t type_sizes[MPIV_DATATYPE_LAST_] = {
    [MPIV_INT8] = 1,  [MPIV_UINT8] = 1,  [MPIV_BYTE] = 1,   [MPIV_INT16] = 2,
    [MPIV_UINT16] = 2, [MPIV_INT32] = 4, [MPIV_UINT32] = 4, [MPIV_FLOAT] = 4,
    [MPIV_INT64] = 8, [MPIV_UINT64] = 8, [MPIV_DOUBLE] = 8,
};

size_t mpiv_type_size(mpiv_datatype_t type)
{
    return (int)type > 0 && type < MPIV_DATATYPE_LAST_ ? type_sizes[type] : 0;
}

static bool type_is_int(mpiv_datatype_t t)
{
    return t != MPIV_FLOAT && t != MPIV_DOUBLE && t != MPIV_BYTE;
}

#define USER_OPS 64
#define USER_OP_BASE 256

static struct {
    mpiv_user_fn fn;
    bool commutative;
    atomic_bool live; /* release by create: fn and commutative before it */
} user_ops[USER_OPS];
static util_spinlock user_ops_lock = UTIL_SPINLOCK_INIT;

static int user_index(mpiv_op_t op)
{
    int i = op - USER_OP_BASE;
    if (i < 0 || i >= USER_OPS || !atomic_load_explicit(&user_ops[i].live, memory_order_acquire))
        return -1;
    return i;
}

int mpiv_op_create(mpiv_user_fn fn, int commutative, mpiv_op_t *op)
{
    if (!fn || !op)
        return util_err(MPIV_ERR_ARG, "mpiv_op_create: NULL %s", fn ? "op" : "function");
    util_spin_lock(&user_ops_lock);
    for (int i = 0; i < USER_OPS; i++) {
        if (!atomic_load_explicit(&user_ops[i].live, memory_order_relaxed)) {
            user_ops[i].fn = fn;
            user_ops[i].commutative = commutative != 0;
            atomic_store_explicit(&user_ops[i].live, true, memory_order_release);
            util_spin_unlock(&user_ops_lock);
            *op = USER_OP_BASE + i;
            return MPIV_SUCCESS;
        }
    }
    util_spin_unlock(&user_ops_lock);
    return util_err(MPIV_ERR_NO_RESOURCES, "mpiv_op_create: %d user operations exist already "
                    "(the most there may be): free one with mpiv_op_free", USER_OPS);
}

int mpiv_op_free(mpiv_op_t *op)
{
    if (!op)
        return util_err(MPIV_ERR_ARG, "mpiv_op_free: op is NULL");
    int i = user_index(*op);
    if (i < 0)
        return util_err(MPIV_ERR_ARG, "mpiv_op_free: %d is not a user operation (built-ins "
                        "cannot be freed)", *op);
    util_spin_lock(&user_ops_lock);
    atomic_store_explicit(&user_ops[i].live, false, memory_order_relaxed);
    util_spin_unlock(&user_ops_lock);
    *op = MPIV_OP_NULL;
    return MPIV_SUCCESS;
}

static const char *const op_names[] = {"MPIV_OP_NULL", "MPIV_SUM",  "MPIV_MIN",
                                       "MPIV_MAX",     "MPIV_PROD", "MPIV_LAND",
                                       "MPIV_LOR",     "MPIV_BAND", "MPIV_BOR"};

/* MPIV_SUCCESS if op applies to type (mpiv.h's table), else MPIV_ERR_ARG
 * naming both. */
static int op_check(mpiv_op_t op, mpiv_datatype_t type, const char *fn)
{
    if (user_index(op) >= 0)
        return MPIV_SUCCESS;
    if (op < MPIV_SUM || op > MPIV_BOR)
        return util_err(MPIV_ERR_ARG, "%s: %d is not an operation (a built-in or one from "
                        "mpiv_op_create)", fn, op);
    bool ok;
    switch (op) {
    case MPIV_LAND:
    case MPIV_LOR:
        ok = type_is_int(type);
        break;
    case MPIV_BAND:
    case MPIV_BOR:
        ok = type_is_int(type) || type == MPIV_BYTE;
        break;
    default:
        ok = type != MPIV_BYTE;
        break;
    }
    if (!ok)
        return util_err(MPIV_ERR_ARG, "%s: %s is not defined on datatype %d (%s)", fn,
                        op_names[op], (int)type,
                        op == MPIV_BAND || op == MPIV_BOR ? "integers and bytes only"
                        : op == MPIV_LAND || op == MPIV_LOR ? "integers only"
                                                            : "not on bytes");
    return MPIV_SUCCESS;
}

static bool op_commutative(mpiv_op_t op)
{
    int i = user_index(op);
    return i < 0 || user_ops[i].commutative;
}

/* Integer arithmetic goes through uint64_t: wraps modulo 2^bits for signed
 * types too, never signed overflow (conversion back is modular in GCC and
 * Clang). */
#define INT_KERNEL(T, NAME)                                                                   \
    static void NAME(mpiv_op_t op, const void *in_, void *io_, size_t n)                      \
    {                                                                                         \
        const T *a = in_;                                                                     \
        T *b = io_;                                                                           \
        switch (op) {                                                                         \
        case MPIV_SUM:                                                                        \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = (T)((uint64_t)a[i] + (uint64_t)b[i]);                                  \
            break;                                                                            \
        case MPIV_PROD:                                                                       \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = (T)((uint64_t)a[i] * (uint64_t)b[i]);                                  \
            break;                                                                            \
        case MPIV_MIN:                                                                        \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = a[i] < b[i] ? a[i] : b[i];                                             \
            break;                                                                            \
        case MPIV_MAX:                                                                        \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = a[i] > b[i] ? a[i] : b[i];                                             \
            break;                                                                            \
        case MPIV_LAND:                                                                       \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = (T)(a[i] && b[i]);                                                     \
            break;                                                                            \
        case MPIV_LOR:                                                                        \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = (T)(a[i] || b[i]);                                                     \
            break;                                                                            \
        case MPIV_BAND:                                                                       \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = (T)(a[i] & b[i]);                                                      \
            break;                                                                            \
        default: /* MPIV_BOR (op_check let nothing else through) */                          \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = (T)(a[i] | b[i]);                                                      \
            break;                                                                            \
        }                                                                                     \
    }

#define FLOAT_KERNEL(T, NAME)                                                                 \
    static void NAME(mpiv_op_t op, const void *in_, void *io_, size_t n)                      \
    {                                                                                         \
        const T *a = in_;                                                                     \
        T *b = io_;                                                                           \
        switch (op) {                                                                         \
        case MPIV_SUM:                                                                        \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = a[i] + b[i];                                                           \
            break;                                                                            \
        case MPIV_PROD:                                                                       \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = a[i] * b[i];                                                           \
            break;                                                                            \
        case MPIV_MIN:                                                                        \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = a[i] < b[i] ? a[i] : b[i];                                             \
            break;                                                                            \
        default: /* MPIV_MAX */                                                               \
            for (size_t i = 0; i < n; i++)                                                    \
                b[i] = a[i] > b[i] ? a[i] : b[i];                                             \
            break;                                                                            \
        }                                                                                     \
    }

INT_KERNEL(int8_t, k_i8)
INT_KERNEL(int16_t, k_i16)
INT_KERNEL(int32_t, k_i32)
INT_KERNEL(int64_t, k_i64)
INT_KERNEL(uint8_t, k_u8)
INT_KERNEL(uint16_t, k_u16)
INT_KERNEL(uint32_t, k_u32)
INT_KERNEL(uint64_t, k_u64)
FLOAT_KERNEL(float, k_f32)
FLOAT_KERNEL(double, k_f64)

/* inout[i] = in[i] (op) inout[i]: `in` is the left operand (lower ranks). */
static void apply(mpiv_op_t op, mpiv_datatype_t type, const void *in, void *inout, size_t n)
{
    int u = user_index(op);
    if (u >= 0) {
        user_ops[u].fn(in, inout, n, type);
        return;
    }
    switch (type) {
    case MPIV_INT8: k_i8(op, in, inout, n); break;
    case MPIV_INT16: k_i16(op, in, inout, n); break;
    case MPIV_INT32: k_i32(op, in, inout, n); break;
    case MPIV_INT64: k_i64(op, in, inout, n); break;
    case MPIV_UINT8:
    case MPIV_BYTE: k_u8(op, in, inout, n); break;
    case MPIV_UINT16: k_u16(op, in, inout, n); break;
    case MPIV_UINT32: k_u32(op, in, inout, n); break;
    case MPIV_UINT64: k_u64(op, in, inout, n); break;
    case MPIV_FLOAT: k_f32(op, in, inout, n); break;
    default: k_f64(op, in, inout, n); break;
    }
}

/* --- argument checks ------------------------------------------------------------------ */

/* Checks the communicator and type and that count elements fit a size_t;
 * *bytes gets their size. */
static int check_common(struct mpiv_comm *c, mpiv_datatype_t type, size_t count, size_t *bytes,
                        const char *fn)
{
    int rc = comm_check(c, fn);
    if (rc)
        return rc;
    size_t es = mpiv_type_size(type);
    if (!es)
        return util_err(MPIV_ERR_ARG, "%s: %d is not a datatype", fn, (int)type);
    if (count > SIZE_MAX / es / (size_t)c->size)
        return util_err(MPIV_ERR_ARG, "%s: count %zu is too large", fn, count);
    *bytes = count * es;
    return MPIV_SUCCESS;
}

static int check_buf(const void *buf, size_t bytes, const char *what, const char *fn)
{
    if (!buf && bytes)
        return util_err(MPIV_ERR_ARG, "%s: %s is NULL with %zu bytes to move", fn, what, bytes);
    return MPIV_SUCCESS;
}

static int check_root(struct mpiv_comm *c, int root, const char *fn)
{
    if (root < 0 || root >= c->size)
        return util_err(MPIV_ERR_RANK, "%s: root %d is outside [0, %d)", fn, root, c->size);
    return MPIV_SUCCESS;
}

static void *xmalloc(size_t n, int *rc)
{
    void *p = calloc(1, n ? n : 1); /* zeroed: index arrays are read only where written */
    if (!p && !*rc)
        *rc = util_err(MPIV_ERR_NO_RESOURCES, "collective: out of memory for %zu bytes", n);
    return p;
}

/* --- algorithms (no checks, the caller holds the flag) ------------------------------------ */

static int barrier_alg(struct mpiv_comm *c)
{
    uint32_t call = next_call(c);
    int P = c->size, me = c->rank;
    unsigned round = 0;
    for (int k = 1; k < P; k <<= 1, round++) {
        int rc = c_sendrecv(c, NULL, 0, (me + k) % P, NULL, 0, (me - k + P) % P,
                            coll_tag(call, round));
        if (rc)
            return rc;
    }
    return MPIV_SUCCESS;
}

static int bcast_binomial(struct mpiv_comm *c, void *buf, size_t bytes, int root, uint32_t tag)
{
    int P = c->size;
    int rel = (c->rank - root + P) % P;
    int mask = 1;
    while (mask < P) {
        if (rel & mask) {
            int rc = c_recv(c, buf, bytes, (rel - mask + root) % P, tag);
            if (rc)
                return rc;
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (rel + mask < P) {
            int rc = c_send(c, buf, bytes, (rel + mask + root) % P, tag);
            if (rc)
                return rc;
        }
    }
    return MPIV_SUCCESS;
}

/* Ring allgather of P blocks in buf (block i: off[i], len[i] bytes), where
 * block index i is held by comm rank (i + rot) % P; `me` is our index.
 * P-1 steps, each sends one block to the next index and receives one. */
static int ring_allgather(struct mpiv_comm *c, char *buf, const size_t *off, const size_t *len,
                          int me, int rot, uint32_t tag)
{
    int P = c->size;
    int next = (me + 1 + rot) % P, prev = (me - 1 + P + rot) % P;
    for (int s = 0; s < P - 1; s++) {
        int sb = (me - s + P) % P, rb = (me - s - 1 + P) % P;
        int rc = c_sendrecv(c, buf + off[sb], len[sb], next, buf + off[rb], len[rb], prev, tag);
        if (rc)
            return rc;
    }
    return MPIV_SUCCESS;
}

/* Large bcast: a binomial scatter of P chunks from root, then a ring
 * allgather of them (indices relative to root). */
static int bcast_scatter_ring(struct mpiv_comm *c, char *buf, size_t bytes, int root,
                              uint32_t call)
{
    int P = c->size;
    int rel = (c->rank - root + P) % P;
    int rc = MPIV_SUCCESS;
    size_t *off = xmalloc(2 * (size_t)P * sizeof *off, &rc);
    if (!off)
        return rc;
    size_t *len = off + P;
    size_t chunk = (bytes + (size_t)P - 1) / (size_t)P;
    for (int i = 0; i < P; i++) {
        size_t a = (size_t)i * chunk, b = a + chunk;
        off[i] = a < bytes ? a : bytes;
        len[i] = (b < bytes ? b : bytes) - off[i];
    }
    /* chunks [lo, hi) (relative indices) as a byte range */
#define RANGE(lo, hi) (buf + off[lo]), (off[(hi) - 1] + len[(hi) - 1] - off[lo])
    int mask = 1;
    while (mask < P) {
        if (rel & mask) {
            int hi = rel + mask < P ? rel + mask : P;
            rc = c_recv(c, RANGE(rel, hi), (rel - mask + root) % P, coll_tag(call, 0));
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0 && !rc; mask >>= 1) {
        if (rel + mask < P) {
            int lo = rel + mask, hi = rel + 2 * mask < P ? rel + 2 * mask : P;
            rc = c_send(c, RANGE(lo, hi), (lo + root) % P, coll_tag(call, 0));
        }
    }
#undef RANGE
    if (!rc)
        rc = ring_allgather(c, buf, off, len, rel, root, coll_tag(call, 1));
    free(off);
    return rc;
}

static int bcast_alg(struct mpiv_comm *c, void *buf, size_t bytes, int root)
{
    uint32_t call = next_call(c);
    if (c->size == 1 || bytes == 0)
        return MPIV_SUCCESS;
    if (bytes < COLL_SMALL || bytes < (size_t)c->size)
        return bcast_binomial(c, buf, bytes, root, coll_tag(call, 0));
    return bcast_scatter_ring(c, buf, bytes, root, call);
}

/* Ring reduce-scatter (commutative ops only: blocks combine in ring
 * order). work: every rank's full vector, blocks at off[i] / cnt[i]
 * elements; afterwards block `me` of work holds the reduction. */
static int ring_reduce_scatter(struct mpiv_comm *c, char *work, const size_t *off,
                               const size_t *cnt, size_t es, mpiv_datatype_t type, mpiv_op_t op,
                               uint32_t tag)
{
    int P = c->size, me = c->rank;
    size_t maxb = 0;
    for (int i = 0; i < P; i++)
        maxb = cnt[i] > maxb ? cnt[i] : maxb;
    int rc = MPIV_SUCCESS;
    char *tmp = xmalloc(maxb * es, &rc);
    if (!tmp)
        return rc;
    int next = (me + 1) % P, prev = (me - 1 + P) % P;
    for (int s = 0; s < P - 1 && !rc; s++) {
        int sb = (me - s - 1 + P) % P, rb = (me - s - 2 + 2 * P) % P;
        rc = c_sendrecv(c, work + off[sb] * es, cnt[sb] * es, next, tmp, cnt[rb] * es, prev, tag);
        if (!rc)
            apply(op, type, tmp, work + off[rb] * es, cnt[rb]);
    }
    free(tmp);
    return rc;
}

/* Even blocks of count elements over P ranks: off/cnt in elements. */
static void even_blocks(size_t count, int P, size_t *off, size_t *cnt)
{
    size_t q = count / (size_t)P, r = count % (size_t)P;
    size_t o = 0;
    for (int i = 0; i < P; i++) {
        cnt[i] = q + ((size_t)i < r);
        off[i] = o;
        o += cnt[i];
    }
}

/* Binomial reduce: the result lands at tree root `top` (commutative: the
 * tree is rooted there; otherwise rank 0 in rank order, then moved). */
static int reduce_tree(struct mpiv_comm *c, const void *sbuf, void *rbuf, size_t count,
                       mpiv_datatype_t type, mpiv_op_t op, int root, uint32_t call)
{
    int P = c->size, me = c->rank;
    size_t bytes = count * mpiv_type_size(type);
    bool comm = op_commutative(op);
    int top = comm ? root : 0;
    int rel = (me - top + P) % P;
    int rc = MPIV_SUCCESS;
    char *acc = xmalloc(bytes, &rc), *tmp = xmalloc(bytes, &rc);
    if (rc) {
        free(acc);
        free(tmp);
        return rc;
    }
    memcpy(acc, sbuf, bytes);
    for (int mask = 1; mask < P && !rc; mask <<= 1) {
        if (rel & mask) {
            rc = c_send(c, acc, bytes, (rel - mask + top) % P, coll_tag(call, 0));
            break;
        }
        if (rel + mask < P) {
            rc = c_recv(c, tmp, bytes, (rel + mask + top) % P, coll_tag(call, 0));
            if (rc)
                break;
            /* acc holds ranks [rel, rel + mask), tmp the next ones */
            apply(op, type, acc, tmp, count);
            char *t = acc;
            acc = tmp;
            tmp = t;
        }
    }
    if (!rc && top != root) {
        if (me == top)
            rc = c_send(c, acc, bytes, root, coll_tag(call, 1));
        else if (me == root)
            rc = c_recv(c, acc, bytes, top, coll_tag(call, 1));
    }
    if (!rc && me == root)
        memcpy(rbuf, acc, bytes);
    free(acc);
    free(tmp);
    return rc;
}

static int reduce_alg(struct mpiv_comm *c, const void *sbuf, void *rbuf, size_t count,
                      mpiv_datatype_t type, mpiv_op_t op, int root)
{
    uint32_t call = next_call(c);
    int P = c->size;
    size_t es = mpiv_type_size(type), bytes = count * es;
    if (count == 0)
        return MPIV_SUCCESS;
    if (P == 1) {
        memmove(rbuf, sbuf, bytes);
        return MPIV_SUCCESS;
    }
    if (bytes < COLL_SMALL || !op_commutative(op) || count < (size_t)P)
        return reduce_tree(c, sbuf, rbuf, count, type, op, root, call);
    /* ring reduce-scatter, then every block to root */
    int rc = MPIV_SUCCESS;
    size_t *off = xmalloc(2 * (size_t)P * sizeof *off, &rc);
    char *work = xmalloc(bytes, &rc);
    if (rc) {
        free(off);
        free(work);
        return rc;
    }
    size_t *cnt = off + P;
    even_blocks(count, P, off, cnt);
    memcpy(work, sbuf, bytes);
    int me = c->rank;
    rc = ring_reduce_scatter(c, work, off, cnt, es, type, op, coll_tag(call, 0));
    if (!rc) {
        if (me != root) {
            rc = c_send(c, work + off[me] * es, cnt[me] * es, root, coll_tag(call, 1));
        } else {
            struct c_set s;
            rc = set_init(&s, P - 1);
            if (!rc) {
                for (int i = 0; i < P; i++)
                    if (i != me)
                        set_add(c, &s, false, (char *)rbuf + off[i] * es, cnt[i] * es, i,
                                coll_tag(call, 1));
                memcpy((char *)rbuf + off[me] * es, work + off[me] * es, cnt[me] * es);
                rc = set_finish(&s);
            }
        }
    }
    free(off);
    free(work);
    return rc;
}

/* Recursive doubling in rank order; rbuf holds our contribution already. */
static int allreduce_rd(struct mpiv_comm *c, void *rbuf, size_t count, mpiv_datatype_t type,
                        mpiv_op_t op, uint32_t call)
{
    int P = c->size, me = c->rank;
    size_t bytes = count * mpiv_type_size(type);
    int rc = MPIV_SUCCESS;
    char *tmp = xmalloc(bytes, &rc);
    if (!tmp)
        return rc;
    int pof2 = 1;
    while (pof2 * 2 <= P)
        pof2 *= 2;
    int rem = P - pof2;
    unsigned round = 0;
    int newrank;
    /* fold: among the first 2*rem ranks, even ones hand their data to the
     * next odd one and sit out the doubling */
    if (me < 2 * rem) {
        if (me % 2 == 0) {
            rc = c_send(c, rbuf, bytes, me + 1, coll_tag(call, round));
            newrank = -1;
        } else {
            rc = c_recv(c, tmp, bytes, me - 1, coll_tag(call, round));
            if (!rc)
                apply(op, type, tmp, rbuf, count); /* lower rank on the left */
            newrank = me / 2;
        }
    } else {
        newrank = me - rem;
    }
    round++;
    for (int mask = 1; mask < pof2; mask <<= 1, round++) {
        if (rc || newrank < 0)
            continue;
        int newdst = newrank ^ mask;
        int dst = newdst < rem ? newdst * 2 + 1 : newdst + rem;
        rc = c_sendrecv(c, rbuf, bytes, dst, tmp, bytes, dst, coll_tag(call, round));
        if (rc)
            break;
        /* both sides compute lower (op) higher, so all agree */
        if (dst < me) {
            apply(op, type, tmp, rbuf, count);
        } else {
            apply(op, type, rbuf, tmp, count);
            memcpy(rbuf, tmp, bytes);
        }
    }
    /* unfold: odd ranks give the result back to their even partner */
    if (!rc && me < 2 * rem) {
        if (me % 2)
            rc = c_send(c, rbuf, bytes, me - 1, coll_tag(call, round));
        else
            rc = c_recv(c, rbuf, bytes, me + 1, coll_tag(call, round));
    }
    free(tmp);
    return rc;
}

int coll_allreduce(struct mpiv_comm *c, const void *sbuf, void *rbuf, size_t count,
                   mpiv_datatype_t type, mpiv_op_t op)
{
    uint32_t call = next_call(c);
    int P = c->size;
    size_t es = mpiv_type_size(type), bytes = count * es;
    if (sbuf != rbuf && bytes)
        memmove(rbuf, sbuf, bytes);
    if (P == 1 || count == 0)
        return MPIV_SUCCESS;
    if (bytes < COLL_SMALL || !op_commutative(op) || count < (size_t)P)
        return allreduce_rd(c, rbuf, count, type, op, call);
    /* ring reduce-scatter + ring allgather */
    int rc = MPIV_SUCCESS;
    size_t *off = xmalloc(4 * (size_t)P * sizeof *off, &rc);
    if (!off)
        return rc;
    size_t *cnt = off + P, *boff = off + 2 * P, *blen = off + 3 * P;
    even_blocks(count, P, off, cnt);
    rc = ring_reduce_scatter(c, rbuf, off, cnt, es, type, op, coll_tag(call, 0));
    for (int i = 0; i < P; i++) {
        boff[i] = off[i] * es;
        blen[i] = cnt[i] * es;
    }
    if (!rc)
        rc = ring_allgather(c, rbuf, boff, blen, c->rank, 0, coll_tag(call, 1));
    free(off);
    return rc;
}

/* Binomial gather of `bytes` per rank to root (staging in rank order
 * relative to root). */
static int gather_tree(struct mpiv_comm *c, const void *sbuf, void *rbuf, size_t bytes, int root,
                       uint32_t tag)
{
    int P = c->size, me = c->rank;
    int rel = (me - root + P) % P;
    int rc = MPIV_SUCCESS;
    char *tmp = xmalloc(bytes * (size_t)P, &rc);
    if (!tmp)
        return rc;
    memcpy(tmp, sbuf, bytes);
    int have = 1; /* blocks of relative ranks [rel, rel + have) */
    for (int mask = 1; mask < P && !rc; mask <<= 1) {
        if (rel & mask) {
            rc = c_send(c, tmp, bytes * (size_t)have, (rel - mask + root) % P, tag);
            break;
        }
        if (rel + mask < P) {
            int k = P - rel - mask < mask ? P - rel - mask : mask;
            rc = c_recv(c, tmp + (size_t)mask * bytes, (size_t)k * bytes,
                        (rel + mask + root) % P, tag);
            have = mask + k;
        }
    }
    if (!rc && me == root)
        for (int j = 0; j < P; j++)
            memcpy((char *)rbuf + (size_t)((j + root) % P) * bytes, tmp + (size_t)j * bytes,
                   bytes);
    free(tmp);
    return rc;
}

static int gather_alg(struct mpiv_comm *c, const void *sbuf, void *rbuf, size_t bytes, int root)
{
    uint32_t call = next_call(c);
    int P = c->size, me = c->rank;
    if (bytes == 0)
        return MPIV_SUCCESS;
    if (bytes * (size_t)P < COLL_SMALL)
        return gather_tree(c, sbuf, rbuf, bytes, root, coll_tag(call, 0));
    if (me != root)
        return c_send(c, sbuf, bytes, root, coll_tag(call, 0));
    struct c_set s;
    int rc = set_init(&s, P - 1);
    if (rc)
        return rc;
    for (int i = 0; i < P; i++)
        if (i != me)
            set_add(c, &s, false, (char *)rbuf + (size_t)i * bytes, bytes, i, coll_tag(call, 0));
    memcpy((char *)rbuf + (size_t)me * bytes, sbuf, bytes);
    return set_finish(&s);
}

static int scatter_alg(struct mpiv_comm *c, const void *sbuf, void *rbuf, size_t bytes, int root)
{
    uint32_t call = next_call(c), tag = coll_tag(call, 0);
    int P = c->size, me = c->rank;
    if (bytes == 0)
        return MPIV_SUCCESS;
    int rc = MPIV_SUCCESS;
    if (bytes * (size_t)P >= COLL_SMALL) {
        if (me != root)
            return c_recv(c, rbuf, bytes, root, tag);
        struct c_set s;
        rc = set_init(&s, P - 1);
        if (rc)
            return rc;
        for (int i = 0; i < P; i++)
            if (i != me)
                set_add(c, &s, true, (char *)sbuf + (size_t)i * bytes, bytes, i, tag);
        memcpy(rbuf, (const char *)sbuf + (size_t)me * bytes, bytes);
        return set_finish(&s);
    }
    int rel = (me - root + P) % P;
    char *tmp = xmalloc(bytes * (size_t)P, &rc);
    if (!tmp)
        return rc;
    if (me == root)
        for (int j = 0; j < P; j++)
            memcpy(tmp + (size_t)j * bytes, (const char *)sbuf + (size_t)((j + root) % P) * bytes,
                   bytes);
    int mask = 1;
    while (mask < P) {
        if (rel & mask) {
            int k = P - rel < mask ? P - rel : mask;
            rc = c_recv(c, tmp, (size_t)k * bytes, (rel - mask + root) % P, tag);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0 && !rc; mask >>= 1) {
        if (rel + mask < P) {
            int k = P - rel - mask < mask ? P - rel - mask : mask;
            rc = c_send(c, tmp + (size_t)mask * bytes, (size_t)k * bytes, (rel + mask + root) % P,
                        tag);
        }
    }
    if (!rc)
        memcpy(rbuf, tmp, bytes);
    free(tmp);
    return rc;
}

int coll_allgather(struct mpiv_comm *c, const void *sbuf, void *rbuf, size_t count,
                   mpiv_datatype_t type)
{
    int P = c->size, me = c->rank;
    size_t bytes = count * mpiv_type_size(type);
    if (bytes * (size_t)P < COLL_SMALL) {
        int rc = gather_alg(c, sbuf, rbuf, bytes, 0);
        int rc2 = bcast_alg(c, rbuf, bytes * (size_t)P, 0);
        return rc ? rc : rc2;
    }
    uint32_t call = next_call(c);
    int rc = MPIV_SUCCESS;
    size_t *off = xmalloc(2 * (size_t)P * sizeof *off, &rc);
    if (!off)
        return rc;
    size_t *len = off + P;
    for (int i = 0; i < P; i++) {
        off[i] = (size_t)i * bytes;
        len[i] = bytes;
    }
    memcpy((char *)rbuf + (size_t)me * bytes, sbuf, bytes);
    rc = ring_allgather(c, rbuf, off, len, me, 0, coll_tag(call, 0));
    free(off);
    return rc;
}

/* --- public calls ----------------------------------------------------------------------- */

/* Every public collective: check the handle, take the flag, run, leave. */
#define ENTER(c, fn)                                                                         \
    do {                                                                                     \
        int rc_ = comm_enter((c), (fn));                                                     \
        if (rc_)                                                                             \
            return rc_;                                                                      \
    } while (0)

int mpiv_barrier_comm(mpiv_comm_t comm)
{
    int rc = comm_check(comm, __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    rc = barrier_alg(comm);
    comm_leave(comm);
    return rc;
}

int mpiv_barrier(void) { return mpiv_barrier_comm(MPIV_COMM_WORLD); }

int mpiv_bcast_comm(void *buf, size_t count, mpiv_datatype_t type, int root, mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, count, &bytes, __func__);
    if (!rc)
        rc = check_root(comm, root, __func__);
    if (!rc)
        rc = check_buf(buf, bytes, "buf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    rc = bcast_alg(comm, buf, bytes, root);
    comm_leave(comm);
    return rc;
}

int mpiv_bcast(void *buf, size_t size, int root)
{
    return mpiv_bcast_comm(buf, size, MPIV_BYTE, root, MPIV_COMM_WORLD);
}

int mpiv_reduce(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                mpiv_op_t op, int root, mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, count, &bytes, __func__);
    if (!rc)
        rc = check_root(comm, root, __func__);
    if (!rc)
        rc = op_check(op, type, __func__);
    if (!rc)
        rc = check_buf(sendbuf, bytes, "sendbuf", __func__);
    if (!rc && comm->rank == root)
        rc = check_buf(recvbuf, bytes, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    rc = reduce_alg(comm, sendbuf, recvbuf, count, type, op, root);
    comm_leave(comm);
    return rc;
}

int mpiv_allreduce_comm(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                        mpiv_op_t op, mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, count, &bytes, __func__);
    if (!rc)
        rc = op_check(op, type, __func__);
    if (!rc)
        rc = check_buf(sendbuf, bytes, "sendbuf", __func__);
    if (!rc)
        rc = check_buf(recvbuf, bytes, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    rc = coll_allreduce(comm, sendbuf, recvbuf, count, type, op);
    comm_leave(comm);
    return rc;
}

int mpiv_allreduce(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                   mpiv_op_t op)
{
    return mpiv_allreduce_comm(sendbuf, recvbuf, count, type, op, MPIV_COMM_WORLD);
}

int mpiv_gather(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type, int root,
                mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, count, &bytes, __func__);
    if (!rc)
        rc = check_root(comm, root, __func__);
    if (!rc)
        rc = check_buf(sendbuf, bytes, "sendbuf", __func__);
    if (!rc && comm->rank == root)
        rc = check_buf(recvbuf, bytes, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    rc = gather_alg(comm, sendbuf, recvbuf, bytes, root);
    comm_leave(comm);
    return rc;
}

int mpiv_scatter(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type, int root,
                 mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, count, &bytes, __func__);
    if (!rc)
        rc = check_root(comm, root, __func__);
    if (!rc)
        rc = check_buf(recvbuf, bytes, "recvbuf", __func__);
    if (!rc && comm->rank == root)
        rc = check_buf(sendbuf, bytes, "sendbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    rc = scatter_alg(comm, sendbuf, recvbuf, bytes, root);
    comm_leave(comm);
    return rc;
}

/* Checks counts[] and displs[] of P ranks (NULL, overflow) and the buffer
 * they describe. */
static int check_v(const void *buf, const size_t *counts, const size_t *displs, int P, size_t es,
                   const char *what, const char *fn)
{
    if (!counts || !displs)
        return util_err(MPIV_ERR_ARG, "%s: %s's counts or displacements are NULL", fn, what);
    bool any = false;
    for (int i = 0; i < P; i++) {
        if (counts[i] > SIZE_MAX / es || displs[i] > SIZE_MAX / es ||
            displs[i] * es > SIZE_MAX - counts[i] * es)
            return util_err(MPIV_ERR_ARG, "%s: %s's block %d (%zu elements at %zu) is too large",
                            fn, what, i, counts[i], displs[i]);
        any |= counts[i] != 0;
    }
    if (any && !buf)
        return util_err(MPIV_ERR_ARG, "%s: %s is NULL", fn, what);
    return MPIV_SUCCESS;
}

int mpiv_gatherv(const void *sendbuf, size_t sendcount, void *recvbuf, const size_t recvcounts[],
                 const size_t displs[], mpiv_datatype_t type, int root, mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, sendcount, &bytes, __func__);
    if (!rc)
        rc = check_root(comm, root, __func__);
    if (!rc)
        rc = check_buf(sendbuf, bytes, "sendbuf", __func__);
    size_t es = mpiv_type_size(type);
    if (!rc && comm->rank == root)
        rc = check_v(recvbuf, recvcounts, displs, comm->size, es, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    uint32_t tag = coll_tag(next_call(comm), 0);
    int P = comm->size, me = comm->rank;
    if (me != root) {
        rc = c_send(comm, sendbuf, bytes, root, tag);
    } else {
        struct c_set s;
        rc = set_init(&s, P - 1);
        if (!rc) {
            for (int i = 0; i < P; i++)
                if (i != me)
                    set_add(comm, &s, false, (char *)recvbuf + displs[i] * es, recvcounts[i] * es,
                            i, tag);
            /* our own block: as a receive would, a larger one is an error */
            size_t n = bytes < recvcounts[me] * es ? bytes : recvcounts[me] * es;
            memcpy((char *)recvbuf + displs[me] * es, sendbuf, n);
            rc = set_finish(&s);
            if (!rc && bytes > recvcounts[me] * es)
                rc = util_err(MPIV_ERR_TRUNCATE, "mpiv_gatherv: the root's sendcount %zu is "
                              "larger than its recvcounts[%d] = %zu", sendcount, me,
                              recvcounts[me]);
        }
    }
    comm_leave(comm);
    return rc;
}

int mpiv_scatterv(const void *sendbuf, const size_t sendcounts[], const size_t displs[],
                  void *recvbuf, size_t recvcount, mpiv_datatype_t type, int root,
                  mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, recvcount, &bytes, __func__);
    if (!rc)
        rc = check_root(comm, root, __func__);
    if (!rc)
        rc = check_buf(recvbuf, bytes, "recvbuf", __func__);
    size_t es = mpiv_type_size(type);
    if (!rc && comm->rank == root)
        rc = check_v(sendbuf, sendcounts, displs, comm->size, es, "sendbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    uint32_t tag = coll_tag(next_call(comm), 0);
    int P = comm->size, me = comm->rank;
    if (me != root) {
        rc = c_recv(comm, recvbuf, bytes, root, tag);
    } else {
        struct c_set s;
        rc = set_init(&s, P - 1);
        if (!rc) {
            for (int i = 0; i < P; i++)
                if (i != me)
                    set_add(comm, &s, true, (char *)sendbuf + displs[i] * es, sendcounts[i] * es,
                            i, tag);
            size_t n = sendcounts[me] * es;
            memcpy(recvbuf, (const char *)sendbuf + displs[me] * es, n < bytes ? n : bytes);
            rc = set_finish(&s);
            if (!rc && n > bytes)
                rc = util_err(MPIV_ERR_TRUNCATE, "mpiv_scatterv: sendcounts[%d] = %zu is larger "
                              "than the root's recvcount %zu", me, sendcounts[me], recvcount);
        }
    }
    comm_leave(comm);
    return rc;
}

int mpiv_allgather(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                   mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, count, &bytes, __func__);
    if (!rc)
        rc = check_buf(sendbuf, bytes, "sendbuf", __func__);
    if (!rc)
        rc = check_buf(recvbuf, bytes, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    rc = coll_allgather(comm, sendbuf, recvbuf, count, type);
    comm_leave(comm);
    return rc;
}

int mpiv_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                    const size_t recvcounts[], const size_t displs[], mpiv_datatype_t type,
                    mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, sendcount, &bytes, __func__);
    if (!rc)
        rc = check_buf(sendbuf, bytes, "sendbuf", __func__);
    size_t es = mpiv_type_size(type);
    if (!rc)
        rc = check_v(recvbuf, recvcounts, displs, comm->size, es, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    uint32_t call = next_call(comm);
    int P = comm->size, me = comm->rank;
    size_t *off = xmalloc(2 * (size_t)P * sizeof *off, &rc);
    if (off) {
        size_t *len = off + P;
        for (int i = 0; i < P; i++) {
            off[i] = displs[i] * es;
            len[i] = recvcounts[i] * es;
        }
        memcpy((char *)recvbuf + off[me], sendbuf, bytes < len[me] ? bytes : len[me]);
        rc = ring_allgather(comm, recvbuf, off, len, me, 0, coll_tag(call, 0));
        /* after the ring, so that the others do not wait for us */
        if (!rc && bytes != len[me])
            rc = util_err(MPIV_ERR_ARG, "mpiv_allgatherv: sendcount %zu differs from "
                          "recvcounts[%d] = %zu", sendcount, me, recvcounts[me]);
        free(off);
    }
    comm_leave(comm);
    return rc;
}

/* alltoall(v) core: block i of sbuf (soff[i], slen[i] bytes) to rank i,
 * block j of rbuf from rank j. */
static int alltoall_alg(struct mpiv_comm *c, const char *sbuf, const size_t *soff,
                        const size_t *slen, char *rbuf, const size_t *roff, const size_t *rlen,
                        bool small)
{
    uint32_t tag = coll_tag(next_call(c), 0);
    int P = c->size, me = c->rank;
    size_t n = slen[me] < rlen[me] ? slen[me] : rlen[me];
    if (n) /* an empty block may come with a NULL buffer (legal in MPI) */
        memcpy(rbuf + roff[me], sbuf + soff[me], n);
    int rc = MPIV_SUCCESS;
    if (small) {
        struct c_set s;
        rc = set_init(&s, 2 * (P - 1));
        if (rc)
            return rc;
        for (int k = 1; k < P; k++) {
            int src = (me - k + P) % P;
            set_add(c, &s, false, rbuf + roff[src], rlen[src], src, tag);
        }
        for (int k = 1; k < P; k++) {
            int dst = (me + k) % P;
            set_add(c, &s, true, (void *)(sbuf + soff[dst]), slen[dst], dst, tag);
        }
        rc = set_finish(&s);
    } else {
        for (int k = 1; k < P && !rc; k++) {
            int dst = (me + k) % P, src = (me - k + P) % P;
            rc = c_sendrecv(c, sbuf + soff[dst], slen[dst], dst, rbuf + roff[src], rlen[src], src,
                            tag);
        }
    }
    if (!rc && slen[me] > rlen[me])
        rc = util_err(MPIV_ERR_TRUNCATE, "alltoall: our block to ourselves (%zu bytes) is larger "
                      "than its place (%zu bytes)", slen[me], rlen[me]);
    return rc;
}

int mpiv_alltoall(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                  mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, count, &bytes, __func__);
    if (!rc)
        rc = check_buf(sendbuf, bytes, "sendbuf", __func__);
    if (!rc)
        rc = check_buf(recvbuf, bytes, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    int P = comm->size;
    size_t *off = xmalloc(2 * (size_t)P * sizeof *off, &rc);
    if (off) {
        size_t *len = off + P;
        for (int i = 0; i < P; i++) {
            off[i] = (size_t)i * bytes;
            len[i] = bytes;
        }
        rc = alltoall_alg(comm, sendbuf, off, len, recvbuf, off, len,
                          bytes * (size_t)P < COLL_SMALL);
        free(off);
    }
    comm_leave(comm);
    return rc;
}

int mpiv_alltoallv(const void *sendbuf, const size_t sendcounts[], const size_t sdispls[],
                   void *recvbuf, const size_t recvcounts[], const size_t rdispls[],
                   mpiv_datatype_t type, mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, 0, &bytes, __func__);
    size_t es = mpiv_type_size(type);
    if (!rc)
        rc = check_v(sendbuf, sendcounts, sdispls, comm->size, es, "sendbuf", __func__);
    if (!rc)
        rc = check_v(recvbuf, recvcounts, rdispls, comm->size, es, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    int P = comm->size;
    size_t *v = xmalloc(4 * (size_t)P * sizeof *v, &rc);
    if (v) {
        for (int i = 0; i < P; i++) {
            v[i] = sdispls[i] * es;
            v[P + i] = sendcounts[i] * es;
            v[2 * P + i] = rdispls[i] * es;
            v[3 * P + i] = recvcounts[i] * es;
        }
        /* pairwise always: counts may differ per rank, and the choice must
         * be the same on all */
        rc = alltoall_alg(comm, sendbuf, v, v + P, recvbuf, v + 2 * P, v + 3 * P, false);
        free(v);
    }
    comm_leave(comm);
    return rc;
}

int mpiv_reduce_scatter(const void *sendbuf, void *recvbuf, const size_t recvcounts[],
                        mpiv_datatype_t type, mpiv_op_t op, mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, 0, &bytes, __func__);
    if (rc)
        return rc;
    if (!recvcounts)
        return util_err(MPIV_ERR_ARG, "mpiv_reduce_scatter: recvcounts is NULL");
    size_t es = mpiv_type_size(type), total = 0;
    int P = comm->size, me = comm->rank;
    for (int i = 0; i < P; i++) {
        if (recvcounts[i] > SIZE_MAX / es - total)
            return util_err(MPIV_ERR_ARG, "mpiv_reduce_scatter: the counts add up to more than "
                            "a size_t holds");
        total += recvcounts[i];
    }
    rc = op_check(op, type, __func__);
    if (!rc)
        rc = check_buf(sendbuf, total * es, "sendbuf", __func__);
    if (!rc)
        rc = check_buf(recvbuf, recvcounts[me] * es, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    size_t *off = xmalloc(2 * (size_t)P * sizeof *off, &rc);
    char *work = xmalloc(total * es, &rc);
    if (!rc) {
        size_t *disp = off + P;
        size_t o = 0;
        for (int i = 0; i < P; i++) {
            disp[i] = o;
            o += recvcounts[i];
        }
        if (P > 1 && total * es >= COLL_SMALL && op_commutative(op)) {
            uint32_t call = next_call(comm);
            memcpy(work, sendbuf, total * es);
            rc = ring_reduce_scatter(comm, work, disp, recvcounts, es, type, op,
                                     coll_tag(call, 0));
            if (!rc)
                memcpy(recvbuf, work + disp[me] * es, recvcounts[me] * es);
        } else {
            /* rank order: a tree to rank 0, then its blocks out */
            uint32_t call = next_call(comm), call2 = next_call(comm);
            if (total)
                rc = reduce_tree(comm, sendbuf, work, total, type, op, 0, call);
            if (!rc && P == 1)
                memcpy(recvbuf, work, recvcounts[0] * es);
            else if (!rc && me == 0) {
                struct c_set s;
                rc = set_init(&s, P - 1);
                if (!rc) {
                    for (int i = 1; i < P; i++)
                        set_add(comm, &s, true, work + disp[i] * es, recvcounts[i] * es, i,
                                coll_tag(call2, 0));
                    memcpy(recvbuf, work, recvcounts[0] * es);
                    rc = set_finish(&s);
                }
            } else if (!rc) {
                rc = c_recv(comm, recvbuf, recvcounts[me] * es, 0, coll_tag(call2, 0));
            }
        }
    }
    free(off);
    free(work);
    comm_leave(comm);
    return rc;
}

int mpiv_scan(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
              mpiv_op_t op, mpiv_comm_t comm)
{
    size_t bytes = 0;
    int rc = check_common(comm, type, count, &bytes, __func__);
    if (!rc)
        rc = op_check(op, type, __func__);
    if (!rc)
        rc = check_buf(sendbuf, bytes, "sendbuf", __func__);
    if (!rc)
        rc = check_buf(recvbuf, bytes, "recvbuf", __func__);
    if (rc)
        return rc;
    ENTER(comm, __func__);
    uint32_t call = next_call(comm);
    int P = comm->size, me = comm->rank;
    char *partial = xmalloc(bytes, &rc), *tmp = xmalloc(bytes, &rc);
    if (!rc) {
        memcpy(partial, sendbuf, bytes);
        if (recvbuf != sendbuf)
            memcpy(recvbuf, sendbuf, bytes);
        /* partial: the reduction of our block of 2*mask ranks; recvbuf:
         * of every rank up to us */
        unsigned round = 0;
        for (int mask = 1; mask < P && !rc && count; mask <<= 1, round++) {
            int dst = me ^ mask;
            if (dst >= P)
                continue;
            rc = c_sendrecv(comm, partial, bytes, dst, tmp, bytes, dst, coll_tag(call, round));
            if (rc)
                break;
            if (dst < me) {
                apply(op, type, tmp, partial, count);
                apply(op, type, tmp, recvbuf, count);
            } else {
                apply(op, type, partial, tmp, count);
                char *t = partial;
                partial = tmp;
                tmp = t;
            }
        }
    }
    free(partial);
    free(tmp);
    comm_leave(comm);
    return rc;
}
