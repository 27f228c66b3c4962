/*
 * coll.c — the MPI face's collectives.
 *
 * Where MPIv has the collective, the face calls it: data movement as bytes
 * (MPIV_BYTE; counts and displacements in bytes, so any contiguous type
 * goes as it is), reductions with MPIv's element type of the type's basic
 * kind when MPIv has both it and the operation. Non-contiguous types are
 * packed into a temporary buffer first and unpacked after.
 *
 * The rest runs on point-to-point in the communicator's shadow (face.h):
 * reductions MPIv cannot do (MPI_LXOR, MPI_BXOR, MPI_MINLOC, MPI_MAXLOC,
 * user functions, long double and C bool) go up a binomial tree to rank 0
 * that combines in rank order (so non-commutative user functions are
 * right), then down (bcast) or across (scatterv) with MPIv's collectives;
 * the scans that need it pass a running prefix along the ranks; exscan
 * always does. The tags of these messages carry the communicator's call
 * number, so two calls never mix, nor a blocking call and a non-blocking
 * one running beside it.
 *
 * Non-blocking collectives are queued per communicator and run one after
 * another, in the order started, by one ULT, each through its blocking
 * form on the shadow (MPIv's collectives on the shadow, the face's
 * point-to-point on the shadow's own context): they never meet the
 * program's blocking collectives, which use the communicator itself.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "face.h"

/* One call: where its MPIv collectives and its point-to-point go, and its
 * number. */
struct ctx {
    MPI_Comm c;
    mpiv_comm_t coll;
    mpiv_comm_t p2p;
    uint32_t seq;
    const char *fn;
};

#define PHASE_BITS 4
static int tag_of(const struct ctx *x, unsigned phase)
{
    return (int)(((x->seq & 0x00ffffffu) << PHASE_BITS) | phase);
}

static struct ctx blocking(MPI_Comm c, const char *fn)
{
    return (struct ctx){.c = c, .coll = c->native, .p2p = c->shadow, .seq = c->seq++, .fn = fn};
}

static int native_failed(const struct ctx *x, int rc) { return face_fail_native(x->c, rc, x->fn); }
static int no_mem(const struct ctx *x) { return face_fail(x->c, MPI_ERR_NO_MEM, x->fn, "out of memory"); }

static void *alloc(size_t n) { return malloc(n ? n : 1); }

/* --- argument checks ----------------------------------------------------- */

static int check_comm(MPI_Comm c, const char *fn)
{
    return face_comm_ok(c) ? MPI_SUCCESS : face_fail(NULL, MPI_ERR_COMM, fn, "invalid communicator");
}

static int check_buf(const struct ctx *x, int count, MPI_Datatype t)
{
    if (count < 0)
        return face_fail(x->c, MPI_ERR_COUNT, x->fn, "count %d < 0", count);
    if (!face_type_usable(t))
        return face_fail(x->c, MPI_ERR_TYPE, x->fn, "%s",
                         t ? "the datatype is not committed" : "MPI_DATATYPE_NULL");
    return MPI_SUCCESS;
}

static int check_root(const struct ctx *x, int root)
{
    if (root < 0 || root >= x->c->size)
        return face_fail(x->c, MPI_ERR_ROOT, x->fn, "root %d outside [0, %d)", root, x->c->size);
    return MPI_SUCCESS;
}

static int check_op(const struct ctx *x, MPI_Op op, MPI_Datatype t)
{
    if (!op)
        return face_fail(x->c, MPI_ERR_OP, x->fn, "MPI_OP_NULL");
    if (!face_op_valid(op, t->kind))
        return face_fail(x->c, MPI_ERR_OP, x->fn, "this operation is not defined on this datatype");
    if (op->code == OP_USER && !t->contig)
        return face_fail(x->c, MPI_ERR_UNSUPPORTED_OPERATION, x->fn,
                         "a user operation on a non-contiguous datatype is not supported by "
                         "MPIv's MPI face");
    return MPI_SUCCESS;
}

/* --- packed buffers -------------------------------------------------------- */

/* A buffer in packed form: the program's own when its type is contiguous,
 * else a temporary copy. */
struct packed {
    void *p;
    size_t bytes;
    bool owned;
};

static int pack_in(const struct ctx *x, const void *buf, size_t count, MPI_Datatype t,
                   struct packed *out)
{
    out->bytes = count * t->wire;
    out->owned = false;
    if (t->contig) {
        out->p = (void *)buf;
        out->owned = false;
        return MPI_SUCCESS;
    }
    out->p = alloc(out->bytes);
    if (!out->p)
        return no_mem(x);
    out->owned = true;
    face_pack(t, buf, count, out->p);
    return MPI_SUCCESS;
}

/* Room for a result of count elements of t, in packed form. */
static int pack_out(const struct ctx *x, void *buf, size_t count, MPI_Datatype t,
                    struct packed *out)
{
    out->bytes = count * t->wire;
    out->owned = false;
    if (t->contig) {
        out->p = buf;
        out->owned = false;
        return MPI_SUCCESS;
    }
    out->p = alloc(out->bytes);
    out->owned = true;
    return out->p ? MPI_SUCCESS : no_mem(x);
}

/* Moves a result into the program's buffer and releases the packed one. */
static void unpack_out(struct packed *pk, void *buf, size_t count, MPI_Datatype t, bool keep)
{
    if (pk->owned) {
        if (keep)
            face_unpack(t, pk->p, count, buf);
        free(pk->p);
    }
    pk->owned = false;
}

static void drop(struct packed *pk)
{
    if (pk->owned)
        free(pk->p);
    pk->owned = false;
}

/* A private copy (for MPIv's calls, whose buffers must not overlap). */
static int copy_of(const struct ctx *x, const void *src, size_t bytes, struct packed *out)
{
    out->p = alloc(bytes);
    out->bytes = bytes;
    out->owned = true;
    if (!out->p)
        return no_mem(x);
    memcpy(out->p, src, bytes);
    return MPI_SUCCESS;
}

/* --- barrier, bcast ---------------------------------------------------------- */

static int do_barrier(const struct ctx *x)
{
    int rc = mpiv_barrier_comm(x->coll);
    return rc ? native_failed(x, rc) : MPI_SUCCESS;
}

static int do_bcast(const struct ctx *x, void *buf, int count, MPI_Datatype t, int root)
{
    int err = check_buf(x, count, t);
    if (!err)
        err = check_root(x, root);
    if (err)
        return err;
    struct packed pk = {0};
    bool me = x->c->rank == root;
    err = me ? pack_in(x, buf, (size_t)count, t, &pk) : pack_out(x, buf, (size_t)count, t, &pk);
    if (err)
        return err;
    int rc = mpiv_bcast_comm(pk.p, pk.bytes, MPIV_BYTE, root, x->coll);
    unpack_out(&pk, buf, (size_t)count, t, !me && !rc);
    return rc ? native_failed(x, rc) : MPI_SUCCESS;
}

/* --- reductions ----------------------------------------------------------- */

/* MPIv's element type for a reduction of t with op, or 0: the face's own. */
static mpiv_datatype_t native_reduction(MPI_Op op, MPI_Datatype t)
{
    return op->native != MPIV_OP_NULL ? face_native_type(t->kind) : (mpiv_datatype_t)0;
}

/* The face's reduction of n packed elements to rank 0, in rank order:
 * acc holds this rank's contribution and, at rank 0, ends with the
 * result. Rank r folds in the ranks [r + mask, r + 2 mask) at step mask
 * (as the right operand: acc is the lower ranks'). */
static int reduce_to_zero(const struct ctx *x, MPI_Op op, MPI_Datatype t, size_t n, void **acc)
{
    size_t bytes = n * t->wire;
    int me = x->c->rank, size = x->c->size;
    void *other = alloc(bytes);
    if (!other)
        return no_mem(x);
    int rc = MPIV_SUCCESS;
    for (int mask = 1; mask < size; mask <<= 1) {
        if (me & mask) {
            rc = mpiv_send_comm(*acc, bytes, me - mask, tag_of(x, 0), x->p2p);
            break;
        }
        if (me + mask < size) {
            rc = mpiv_recv_comm(other, bytes, me + mask, tag_of(x, 0), x->p2p, NULL);
            if (rc)
                break;
            face_op_apply(op, t, *acc, other, n);
            void *swap = *acc;
            *acc = other;
            other = swap;
        }
    }
    free(other);
    return rc ? native_failed(x, rc) : MPI_SUCCESS;
}

/* reduce (root >= 0) or allreduce (root < 0) of packed buffers. ps is
 * this rank's contribution, pr the result's room (root or everyone). */
static int reduce_packed(const struct ctx *x, const void *ps, void *pr, size_t n, MPI_Datatype t,
                         MPI_Op op, int root)
{
    mpiv_datatype_t nt = native_reduction(op, t);
    int rc;
    if (nt) {
        size_t cnt = n * t->nbasic;
        rc = root >= 0 ? mpiv_reduce(ps, pr, cnt, nt, op->native, root, x->coll)
                       : mpiv_allreduce_comm(ps, pr, cnt, nt, op->native, x->coll);
        return rc ? native_failed(x, rc) : MPI_SUCCESS;
    }
    size_t bytes = n * t->wire;
    void *acc = alloc(bytes);
    if (!acc)
        return no_mem(x);
    memcpy(acc, ps, bytes);
    int err = reduce_to_zero(x, op, t, n, &acc);
    rc = MPIV_SUCCESS;
    if (!err) {
        int me = x->c->rank;
        if (root < 0) {
            if (me == 0)
                memcpy(pr, acc, bytes);
            rc = mpiv_bcast_comm(pr, bytes, MPIV_BYTE, 0, x->coll);
        } else if (root == 0) {
            if (me == 0)
                memcpy(pr, acc, bytes);
        } else if (me == 0) {
            rc = mpiv_send_comm(acc, bytes, root, tag_of(x, 1), x->p2p);
        } else if (me == root) {
            rc = mpiv_recv_comm(pr, bytes, 0, tag_of(x, 1), x->p2p, NULL);
        }
    }
    free(acc);
    return err ? err : rc ? native_failed(x, rc) : MPI_SUCCESS;
}

static int do_reduce(const struct ctx *x, const void *sendbuf, void *recvbuf, int count,
                     MPI_Datatype t, MPI_Op op, int root)
{
    int err = check_buf(x, count, t);
    if (!err && root >= 0)
        err = check_root(x, root);
    if (!err)
        err = check_op(x, op, t);
    if (err)
        return err;
    bool gets = root < 0 || x->c->rank == root;
    if (sendbuf == MPI_IN_PLACE && !gets)
        return face_fail(x->c, MPI_ERR_BUFFER, x->fn, "MPI_IN_PLACE is for the root only");
    /* in place, contiguous: ps and pr are recvbuf itself, which MPIv's
     * reductions allow and the face's own copies before writing */
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    struct packed ps = {0}, pr = {0};
    err = pack_in(x, in, (size_t)count, t, &ps);
    if (err)
        return err;
    if (gets)
        err = pack_out(x, recvbuf, (size_t)count, t, &pr);
    if (!err)
        err = reduce_packed(x, ps.p, pr.p, (size_t)count, t, op, root);
    if (gets)
        unpack_out(&pr, recvbuf, (size_t)count, t, !err);
    drop(&ps);
    return err;
}

/* Inclusive (exclusive = false) or exclusive prefix along the ranks: rank
 * r receives the prefix of ranks [0, r), then passes it op its own on. */
static int scan_chain(const struct ctx *x, const void *ps, void *pr, size_t n, MPI_Datatype t,
                      MPI_Op op, bool exclusive)
{
    size_t bytes = n * t->wire;
    int me = x->c->rank, size = x->c->size;
    void *mine = alloc(bytes), *prev = alloc(bytes);
    int rc = MPIV_SUCCESS;
    if (!mine || !prev) {
        free(mine);
        free(prev);
        return no_mem(x);
    }
    memcpy(mine, ps, bytes);
    if (me > 0) {
        rc = mpiv_recv_comm(prev, bytes, me - 1, tag_of(x, 2), x->p2p, NULL);
        if (!rc) {
            if (exclusive)
                memcpy(pr, prev, bytes);
            face_op_apply(op, t, prev, mine, n);
        }
    }
    if (!rc && !exclusive)
        memcpy(pr, mine, bytes);
    if (!rc && me + 1 < size)
        rc = mpiv_send_comm(mine, bytes, me + 1, tag_of(x, 2), x->p2p);
    free(mine);
    free(prev);
    return rc ? native_failed(x, rc) : MPI_SUCCESS;
}

static int do_scan(const struct ctx *x, const void *sendbuf, void *recvbuf, int count,
                   MPI_Datatype t, MPI_Op op, bool exclusive)
{
    int err = check_buf(x, count, t);
    if (!err)
        err = check_op(x, op, t);
    if (err)
        return err;
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    struct packed ps = {0}, pr = {0};
    err = pack_in(x, in, (size_t)count, t, &ps);
    if (err)
        return err;
    /* in place: the input is read before the result is written */
    struct packed keep = {0};
    if (sendbuf == MPI_IN_PLACE && !ps.owned) {
        err = copy_of(x, ps.p, ps.bytes, &keep);
        ps.p = keep.p;
    }
    if (!err)
        err = pack_out(x, recvbuf, (size_t)count, t, &pr);
    if (err) {
        drop(&ps);
        drop(&keep);
        return err;
    }
    mpiv_datatype_t nt = exclusive ? 0 : native_reduction(op, t);
    if (nt) {
        int rc = mpiv_scan(ps.p, pr.p, (size_t)count * t->nbasic, nt, op->native, x->coll);
        err = rc ? native_failed(x, rc) : MPI_SUCCESS;
    } else {
        err = scan_chain(x, ps.p, pr.p, (size_t)count, t, op, exclusive);
    }
    /* exscan leaves rank 0's buffer as it was */
    unpack_out(&pr, recvbuf, (size_t)count, t, !err && !(exclusive && x->c->rank == 0));
    drop(&ps);
    drop(&keep);
    return err;
}

/* recvcounts in elements of t; sendbuf holds their sum (or is
 * MPI_IN_PLACE: recvbuf holds it). */
static int do_reduce_scatter(const struct ctx *x, const void *sendbuf, void *recvbuf,
                             const int recvcounts[], MPI_Datatype t, MPI_Op op)
{
    int err = check_buf(x, 0, t);
    if (!err)
        err = check_op(x, op, t);
    if (err)
        return err;
    if (!recvcounts)
        return face_fail(x->c, MPI_ERR_ARG, x->fn, "recvcounts is NULL");
    int size = x->c->size, me = x->c->rank;
    size_t total = 0;
    size_t *counts = malloc((size_t)size * sizeof *counts);
    size_t *displs = malloc((size_t)size * sizeof *displs);
    if (!counts || !displs) {
        free(counts);
        free(displs);
        return no_mem(x);
    }
    for (int i = 0; i < size; i++) {
        if (recvcounts[i] < 0) {
            free(counts);
            free(displs);
            return face_fail(x->c, MPI_ERR_COUNT, x->fn, "recvcounts[%d] = %d < 0", i,
                             recvcounts[i]);
        }
        displs[i] = total * t->wire;
        counts[i] = (size_t)recvcounts[i];
        total += counts[i];
    }
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    struct packed ps = {0}, pr = {0};
    err = pack_in(x, in, total, t, &ps);
    if (!err && !ps.owned && sendbuf == MPI_IN_PLACE) {
        struct packed cp = {0};
        err = copy_of(x, ps.p, ps.bytes, &cp);
        ps = cp;
    }
    if (!err)
        err = pack_out(x, recvbuf, counts[me], t, &pr);
    mpiv_datatype_t nt = native_reduction(op, t);
    int rc = MPIV_SUCCESS;
    if (!err && nt) {
        for (int i = 0; i < size; i++)
            counts[i] *= t->nbasic;
        rc = mpiv_reduce_scatter(ps.p, pr.p, counts, nt, op->native, x->coll);
    } else if (!err) {
        void *acc = alloc(total * t->wire);
        if (!acc) {
            err = no_mem(x);
        } else {
            memcpy(acc, ps.p, total * t->wire);
            err = reduce_to_zero(x, op, t, total, &acc);
            if (!err) {
                for (int i = 0; i < size; i++)
                    counts[i] *= t->wire;
                rc = mpiv_scatterv(acc, counts, displs, pr.p, counts[me], MPIV_BYTE, 0, x->coll);
            }
            free(acc);
        }
    }
    if (!err && rc)
        err = native_failed(x, rc);
    unpack_out(&pr, recvbuf, (size_t)recvcounts[me], t, !err);
    drop(&ps);
    free(counts);
    free(displs);
    return err;
}

/* --- gather, scatter, allgather, alltoall ------------------------------------- */

enum movement { GATHER, SCATTER, ALLGATHER, ALLTOALL };

/* The fixed-count data movements. Each rank's block is count * wire bytes
 * (the send side's, or the receive side's where the send side is in
 * place); MPIv's call takes it as bytes. */
static int do_move(const struct ctx *x, enum movement kind, const void *sendbuf, int scount,
                   MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype, int root)
{
    int size = x->c->size, me = x->c->rank;
    bool rooted = kind == GATHER || kind == SCATTER;
    int err = rooted ? check_root(x, root) : MPI_SUCCESS;
    if (err)
        return err;
    /* which sides are significant here */
    bool sends = kind != SCATTER || me == root;
    bool recvs = kind != GATHER || me == root;
    bool in_place = (kind == SCATTER ? recvbuf : sendbuf) == MPI_IN_PLACE;
    if (in_place && rooted && me != root)
        return face_fail(x->c, MPI_ERR_BUFFER, x->fn, "MPI_IN_PLACE is for the root only");
    if (sends && !(in_place && kind != SCATTER))
        err = check_buf(x, scount, stype);
    if (!err && recvs && !(in_place && kind == SCATTER))
        err = check_buf(x, rcount, rtype);
    if (err)
        return err;
    /* blocks: how many per side */
    size_t sblocks = kind == SCATTER || kind == ALLTOALL ? (size_t)size : 1;
    size_t rblocks = kind == GATHER || kind == ALLGATHER || kind == ALLTOALL ? (size_t)size : 1;
    size_t block; /* bytes per rank's block */
    struct packed ps = {0}, pr = {0}, scratch = {0};
    if (in_place && kind != SCATTER) {
        /* the send side is this rank's block(s) of recvbuf, in its type */
        block = (size_t)rcount * rtype->wire;
        err = pack_out(x, recvbuf, rblocks * (size_t)rcount, rtype, &pr);
        if (!err && !rtype->contig)
            face_pack(rtype, recvbuf, rblocks * (size_t)rcount, pr.p);
        size_t off = kind == ALLTOALL ? 0 : (size_t)me * block;
        size_t len = kind == ALLTOALL ? (size_t)size * block : block;
        if (!err)
            err = copy_of(x, (char *)pr.p + off, len, &ps);
    } else {
        block = sends ? (size_t)scount * stype->wire : (size_t)rcount * rtype->wire;
        if (sends)
            err = pack_in(x, sendbuf, sblocks * (size_t)scount, stype, &ps);
        if (!err && recvs && !in_place)
            err = pack_out(x, recvbuf, rblocks * (size_t)rcount, rtype, &pr);
        if (!err && in_place) /* scatter's root keeps its block where it is */
            err = copy_of(x, (const char *)ps.p + (size_t)me * block, block, &scratch);
        if (!err && sends && recvs && !in_place &&
            (size_t)rcount * rtype->wire != (size_t)scount * stype->wire)
            err = face_fail(x->c, MPI_ERR_TRUNCATE, x->fn,
                            "the send and receive blocks differ in size (%zu and %zu bytes)",
                            (size_t)scount * stype->wire, (size_t)rcount * rtype->wire);
    }
    int rc = MPIV_SUCCESS;
    if (!err) {
        void *rp = in_place && kind == SCATTER ? scratch.p : pr.p;
        switch (kind) {
        case GATHER: rc = mpiv_gather(ps.p, rp, block, MPIV_BYTE, root, x->coll); break;
        case SCATTER: rc = mpiv_scatter(ps.p, rp, block, MPIV_BYTE, root, x->coll); break;
        case ALLGATHER: rc = mpiv_allgather(ps.p, rp, block, MPIV_BYTE, x->coll); break;
        case ALLTOALL: rc = mpiv_alltoall(ps.p, rp, block, MPIV_BYTE, x->coll); break;
        }
        if (rc)
            err = native_failed(x, rc);
    }
    if (recvs && !(in_place && kind == SCATTER))
        unpack_out(&pr, recvbuf, rblocks * (size_t)rcount, rtype, !err);
    drop(&pr);
    drop(&ps);
    drop(&scratch);
    return err;
}

/* The v forms: contiguous types only (the program's buffers go to MPIv as
 * they are), counts in bytes, displacements in bytes. Every rank checks
 * the types it passes, so that a refused call is refused everywhere the
 * program used the unsupported type. */
static int v_contig(const struct ctx *x, MPI_Datatype t)
{
    if (t->contig)
        return MPI_SUCCESS;
    return face_fail(x->c, MPI_ERR_UNSUPPORTED_OPERATION, x->fn,
                     "non-contiguous datatypes in the v collectives are not supported by "
                     "MPIv's MPI face");
}

static int v_arrays(const struct ctx *x, const int counts[], const int displs[], MPI_Datatype t,
                    size_t **bc, size_t **bd)
{
    int size = x->c->size;
    int err = check_buf(x, 0, t);
    if (!err)
        err = v_contig(x, t);
    if (err)
        return err;
    if (!counts || !displs)
        return face_fail(x->c, MPI_ERR_ARG, x->fn, "counts or displacements NULL");
    *bc = malloc((size_t)size * sizeof **bc);
    *bd = malloc((size_t)size * sizeof **bd);
    if (!*bc || !*bd) {
        free(*bc);
        free(*bd);
        return no_mem(x);
    }
    for (int i = 0; i < size; i++) {
        if (counts[i] < 0 || displs[i] < 0) {
            free(*bc);
            free(*bd);
            return face_fail(x->c, counts[i] < 0 ? MPI_ERR_COUNT : MPI_ERR_ARG, x->fn,
                             "count %d or displacement %d of rank %d < 0", counts[i], displs[i],
                             i);
        }
        (*bc)[i] = (size_t)counts[i] * t->wire;
        (*bd)[i] = (size_t)displs[i] * t->extent;
    }
    return MPI_SUCCESS;
}

/* The checks of gatherv and scatterv; the root's counts and
 * displacements in bytes. */
static int rooted_v(const struct ctx *x, int root, bool in_place, const int counts[],
                    const int displs[], MPI_Datatype t, size_t **bc, size_t **bd)
{
    int err = check_root(x, root);
    if (err)
        return err;
    if (in_place && x->c->rank != root)
        return face_fail(x->c, MPI_ERR_BUFFER, x->fn, "MPI_IN_PLACE is for the root only");
    return x->c->rank == root ? v_arrays(x, counts, displs, t, bc, bd) : MPI_SUCCESS;
}

/* What a rank contributes to a gatherv or allgatherv: under MPI_IN_PLACE
 * a copy of its own block of recvbuf (bc and bd: the byte counts and
 * displacements, which only a rank that receives has), else its send
 * buffer, checked and packed. */
static int v_own_block(const struct ctx *x, const void *sendbuf, int scount, MPI_Datatype stype,
                       const void *recvbuf, const size_t *bc, const size_t *bd,
                       struct packed *ps)
{
    int me = x->c->rank;
    if (sendbuf == MPI_IN_PLACE)
        return copy_of(x, (const char *)recvbuf + bd[me], bc[me], ps);
    int err = check_buf(x, scount, stype);
    if (!err)
        err = v_contig(x, stype);
    if (!err)
        err = pack_in(x, sendbuf, (size_t)scount, stype, ps);
    return err;
}

static int do_gatherv(const struct ctx *x, const void *sendbuf, int scount, MPI_Datatype stype,
                      void *recvbuf, const int rcounts[], const int displs[], MPI_Datatype rtype,
                      int root)
{
    bool in_place = sendbuf == MPI_IN_PLACE;
    size_t *bc = NULL, *bd = NULL;
    int err = rooted_v(x, root, in_place, rcounts, displs, rtype, &bc, &bd);
    if (err)
        return err;
    struct packed ps = {0};
    err = v_own_block(x, sendbuf, scount, stype, recvbuf, bc, bd, &ps);
    if (!err) {
        int rc = mpiv_gatherv(ps.p, ps.bytes, recvbuf, bc, bd, MPIV_BYTE, root, x->coll);
        if (rc)
            err = native_failed(x, rc);
    }
    drop(&ps);
    free(bc);
    free(bd);
    return err;
}

static int do_scatterv(const struct ctx *x, const void *sendbuf, const int scounts[],
                       const int displs[], MPI_Datatype stype, void *recvbuf, int rcount,
                       MPI_Datatype rtype, int root)
{
    int me = x->c->rank;
    bool in_place = recvbuf == MPI_IN_PLACE;
    size_t *bc = NULL, *bd = NULL;
    int err = rooted_v(x, root, in_place, scounts, displs, stype, &bc, &bd);
    if (err)
        return err;
    struct packed pr = {0};
    if (in_place) {
        pr.p = alloc(bc[me]);
        pr.bytes = bc[me];
        pr.owned = true;
        if (!pr.p)
            err = no_mem(x);
    } else if (!(err = check_buf(x, rcount, rtype)) && !(err = v_contig(x, rtype))) {
        err = pack_out(x, recvbuf, (size_t)rcount, rtype, &pr);
    }
    if (!err) {
        int rc = mpiv_scatterv(sendbuf, bc, bd, pr.p, pr.bytes, MPIV_BYTE, root, x->coll);
        if (rc)
            err = native_failed(x, rc);
    }
    if (!in_place)
        unpack_out(&pr, recvbuf, (size_t)rcount, rtype, !err);
    drop(&pr);
    free(bc);
    free(bd);
    return err;
}

static int do_allgatherv(const struct ctx *x, const void *sendbuf, int scount,
                         MPI_Datatype stype, void *recvbuf, const int rcounts[],
                         const int displs[], MPI_Datatype rtype)
{
    size_t *bc = NULL, *bd = NULL;
    int err = v_arrays(x, rcounts, displs, rtype, &bc, &bd);
    if (err)
        return err;
    struct packed ps = {0};
    err = v_own_block(x, sendbuf, scount, stype, recvbuf, bc, bd, &ps);
    if (!err) {
        int rc = mpiv_allgatherv(ps.p, ps.bytes, recvbuf, bc, bd, MPIV_BYTE, x->coll);
        if (rc)
            err = native_failed(x, rc);
    }
    drop(&ps);
    free(bc);
    free(bd);
    return err;
}

static int do_alltoallv(const struct ctx *x, const void *sendbuf, const int scounts[],
                        const int sdispls[], MPI_Datatype stype, void *recvbuf,
                        const int rcounts[], const int rdispls[], MPI_Datatype rtype)
{
    bool in_place = sendbuf == MPI_IN_PLACE;
    size_t *sc = NULL, *sd = NULL, *rc_ = NULL, *rd = NULL;
    int err = v_arrays(x, rcounts, rdispls, rtype, &rc_, &rd);
    if (err)
        return err;
    struct packed copy = {0};
    const void *sp = sendbuf;
    if (in_place) {
        /* the send side is recvbuf as it is now, with the receive layout */
        size_t end = 0;
        for (int i = 0; i < x->c->size; i++)
            if (rd[i] + rc_[i] > end)
                end = rd[i] + rc_[i];
        err = copy_of(x, recvbuf, end, &copy);
        sp = copy.p;
        sc = rc_;
        sd = rd;
    } else {
        err = v_arrays(x, scounts, sdispls, stype, &sc, &sd);
    }
    if (!err) {
        int rc = mpiv_alltoallv(sp, sc, sd, recvbuf, rc_, rd, MPIV_BYTE, x->coll);
        if (rc)
            err = native_failed(x, rc);
    }
    drop(&copy);
    if (!in_place) {
        free(sc);
        free(sd);
    }
    free(rc_);
    free(rd);
    return err;
}

/* --- the blocking calls ----------------------------------------------------------- */

#define BLOCKING(fn, comm)                                                                   \
    int err_ = check_comm(comm, fn);                                                         \
    if (err_)                                                                                \
        return err_;                                                                         \
    struct ctx x_ = blocking(comm, fn)

int MPI_Barrier(MPI_Comm comm)
{
    BLOCKING("MPI_Barrier", comm);
    return do_barrier(&x_);
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    BLOCKING("MPI_Bcast", comm);
    return do_bcast(&x_, buffer, count, datatype, root);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm)
{
    BLOCKING("MPI_Reduce", comm);
    if (root < 0)
        return check_root(&x_, root);
    return do_reduce(&x_, sendbuf, recvbuf, count, datatype, op, root);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm)
{
    BLOCKING("MPI_Allreduce", comm);
    return do_reduce(&x_, sendbuf, recvbuf, count, datatype, op, -1);
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    BLOCKING("MPI_Gather", comm);
    return do_move(&x_, GATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root);
}

int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    BLOCKING("MPI_Scatter", comm);
    return do_move(&x_, SCATTER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                   root);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    BLOCKING("MPI_Allgather", comm);
    return do_move(&x_, ALLGATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0);
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    BLOCKING("MPI_Alltoall", comm);
    return do_move(&x_, ALLTOALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0);
}

int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm)
{
    BLOCKING("MPI_Gatherv", comm);
    return do_gatherv(&x_, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                      root);
}

int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm)
{
    BLOCKING("MPI_Scatterv", comm);
    return do_scatterv(&x_, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype,
                       root);
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm)
{
    BLOCKING("MPI_Allgatherv", comm);
    return do_allgatherv(&x_, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                         recvtype);
}

int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)
{
    BLOCKING("MPI_Alltoallv", comm);
    return do_alltoallv(&x_, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                        rdispls, recvtype);
}

int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    BLOCKING("MPI_Reduce_scatter", comm);
    return do_reduce_scatter(&x_, sendbuf, recvbuf, recvcounts, datatype, op);
}

static int reduce_scatter_block(const struct ctx *x, const void *sendbuf, void *recvbuf,
                                int recvcount, MPI_Datatype t, MPI_Op op)
{
    if (recvcount < 0)
        return face_fail(x->c, MPI_ERR_COUNT, x->fn, "recvcount %d < 0", recvcount);
    int *counts = malloc((size_t)x->c->size * sizeof *counts);
    if (!counts)
        return no_mem(x);
    for (int i = 0; i < x->c->size; i++)
        counts[i] = recvcount;
    int err = do_reduce_scatter(x, sendbuf, recvbuf, counts, t, op);
    free(counts);
    return err;
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    BLOCKING("MPI_Reduce_scatter_block", comm);
    return reduce_scatter_block(&x_, sendbuf, recvbuf, recvcount, datatype, op);
}

int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
             MPI_Comm comm)
{
    BLOCKING("MPI_Scan", comm);
    return do_scan(&x_, sendbuf, recvbuf, count, datatype, op, false);
}

int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               MPI_Comm comm)
{
    BLOCKING("MPI_Exscan", comm);
    return do_scan(&x_, sendbuf, recvbuf, count, datatype, op, true);
}

/* --- non-blocking collectives ------------------------------------------------------ */

enum nbc_kind {
    N_BARRIER, N_BCAST, N_REDUCE, N_ALLREDUCE, N_MOVE, N_RSB, N_SCAN, N_EXSCAN,
    N_GATHERV, N_SCATTERV, N_ALLGATHERV, N_ALLTOALLV, N_REDUCE_SCATTER
};

struct face_nbc {
    struct face_nbc *next;
    struct face_req *req;
    struct ctx x;
    enum nbc_kind kind;
    enum movement move;
    const void *sbuf;
    void *rbuf;
    int scount, rcount, root;
    MPI_Datatype stype, rtype;
    MPI_Op op;
    /* the v forms' arrays: the program's own, which MPI leaves alone until
     * the request completes */
    const int *scounts, *sdispls, *rcounts, *rdispls;
};

static int nbc_run(struct face_nbc *n)
{
    const struct ctx *x = &n->x;
    switch (n->kind) {
    case N_BARRIER: return do_barrier(x);
    case N_BCAST: return do_bcast(x, n->rbuf, n->rcount, n->rtype, n->root);
    case N_REDUCE: return do_reduce(x, n->sbuf, n->rbuf, n->rcount, n->rtype, n->op, n->root);
    case N_ALLREDUCE: return do_reduce(x, n->sbuf, n->rbuf, n->rcount, n->rtype, n->op, -1);
    case N_MOVE:
        return do_move(x, n->move, n->sbuf, n->scount, n->stype, n->rbuf, n->rcount, n->rtype,
                       n->root);
    case N_RSB: return reduce_scatter_block(x, n->sbuf, n->rbuf, n->rcount, n->rtype, n->op);
    case N_SCAN: return do_scan(x, n->sbuf, n->rbuf, n->rcount, n->rtype, n->op, false);
    case N_EXSCAN: return do_scan(x, n->sbuf, n->rbuf, n->rcount, n->rtype, n->op, true);
    case N_GATHERV:
        return do_gatherv(x, n->sbuf, n->scount, n->stype, n->rbuf, n->rcounts, n->rdispls,
                          n->rtype, n->root);
    case N_SCATTERV:
        return do_scatterv(x, n->sbuf, n->scounts, n->sdispls, n->stype, n->rbuf, n->rcount,
                           n->rtype, n->root);
    case N_ALLGATHERV:
        return do_allgatherv(x, n->sbuf, n->scount, n->stype, n->rbuf, n->rcounts, n->rdispls,
                             n->rtype);
    case N_ALLTOALLV:
        return do_alltoallv(x, n->sbuf, n->scounts, n->sdispls, n->stype, n->rbuf, n->rcounts,
                            n->rdispls, n->rtype);
    case N_REDUCE_SCATTER:
        return do_reduce_scatter(x, n->sbuf, n->rbuf, n->rcounts, n->rtype, n->op);
    }
    return MPI_ERR_INTERN;
}

/* The ULT that runs a communicator's queue until it is empty. Errors go
 * to the request (MPI_ERRORS_ARE_FATAL still ends the job in the call). */
static void *nbc_runner(void *arg)
{
    MPI_Comm c = arg;
    for (;;) {
        pthread_mutex_lock(&c->nbc_lock);
        struct face_nbc *n = c->nbc_head;
        if (!n) {
            c->nbc_running = false;
            pthread_mutex_unlock(&c->nbc_lock);
            return NULL;
        }
        c->nbc_head = n->next;
        if (!c->nbc_head)
            c->nbc_tail = NULL;
        pthread_mutex_unlock(&c->nbc_lock);
        int err = nbc_run(n);
        face_type_release(n->stype);
        face_type_release(n->rtype);
        struct face_req *f = n->req;
        free(n);
        f->rc = err;
        /* the waiter may release f as soon as this lands */
        mpiv_counter_add(&f->done, -1);
    }
}

void face_nbc_drain(MPI_Comm c)
{
    pthread_mutex_lock(&c->nbc_lock);
    while (c->nbc_running) {
        pthread_mutex_unlock(&c->nbc_lock);
        mpiv_ult_yield();
        pthread_mutex_lock(&c->nbc_lock);
    }
    pthread_mutex_unlock(&c->nbc_lock);
    if (c->nbc_runner) {
        mpiv_ult_join(c->nbc_runner, NULL);
        c->nbc_runner = NULL;
    }
}

/* Queues n (its kind and arguments filled in) on comm and hands out its
 * request; starts a runner if none is running. */
static int nbc_post(MPI_Comm comm, struct face_nbc *n, MPI_Request *request, const char *fn)
{
    if (!request) {
        free(n);
        return face_fail(comm, MPI_ERR_ARG, fn, "request is NULL");
    }
    struct face_req *f = face_req_new(FR_NBC);
    if (!f) {
        free(n);
        return face_fail(comm, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    mpiv_counter_init(&f->done, 1);
    n->req = f;
    n->x = (struct ctx){.c = comm, .coll = comm->shadow, .p2p = comm->shadow,
                        .seq = comm->seq++, .fn = fn};
    face_type_hold(n->stype);
    face_type_hold(n->rtype);
    pthread_mutex_lock(&comm->nbc_lock);
    if (comm->nbc_tail)
        comm->nbc_tail->next = n;
    else
        comm->nbc_head = n;
    comm->nbc_tail = n;
    bool start = !comm->nbc_running;
    comm->nbc_running = true;
    pthread_mutex_unlock(&comm->nbc_lock);
    if (start) {
        /* the previous runner left its loop: joining it does not wait */
        if (comm->nbc_runner)
            mpiv_ult_join(comm->nbc_runner, NULL);
        int rc = mpiv_ult_spawn(nbc_runner, comm, MPIV_WORKER_ANY, &comm->nbc_runner);
        if (rc) {
            comm->nbc_runner = NULL;
            return face_fail_native(comm, rc, fn);
        }
    }
    *request = face_req_handle(f);
    return MPI_SUCCESS;
}

#define NBC(fn, comm, ...)                                                                    \
    do {                                                                                      \
        int e_ = check_comm(comm, fn);                                                        \
        if (e_)                                                                               \
            return e_;                                                                        \
        struct face_nbc *n_ = calloc(1, sizeof *n_);                                          \
        if (!n_)                                                                              \
            return face_fail(comm, MPI_ERR_NO_MEM, fn, "out of memory");                      \
        *n_ = (struct face_nbc){__VA_ARGS__};                                                 \
        return nbc_post(comm, n_, request, fn);                                               \
    } while (0)

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request)
{
    NBC("MPI_Ibarrier", comm, .kind = N_BARRIER);
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
               MPI_Request *request)
{
    NBC("MPI_Ibcast", comm, .kind = N_BCAST, .rbuf = buffer, .rcount = count, .rtype = datatype,
        .root = root);
}

int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request *request)
{
    if (root < 0 && face_comm_ok(comm))
        return face_fail(comm, MPI_ERR_ROOT, "MPI_Ireduce", "root %d < 0", root);
    NBC("MPI_Ireduce", comm, .kind = N_REDUCE, .sbuf = sendbuf, .rbuf = recvbuf, .rcount = count,
        .rtype = datatype, .op = op, .root = root);
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    NBC("MPI_Iallreduce", comm, .kind = N_ALLREDUCE, .sbuf = sendbuf, .rbuf = recvbuf,
        .rcount = count, .rtype = datatype, .op = op);
}

#define NBC_MOVE(fn, m, rt)                                                                   \
    NBC(fn, comm, .kind = N_MOVE, .move = (m), .sbuf = sendbuf, .scount = sendcount,          \
        .stype = sendtype, .rbuf = recvbuf, .rcount = recvcount, .rtype = recvtype, .root = (rt))

int MPI_Igather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                MPI_Request *request)
{
    NBC_MOVE("MPI_Igather", GATHER, root);
}

int MPI_Iscatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                 MPI_Request *request)
{
    NBC_MOVE("MPI_Iscatter", SCATTER, root);
}

int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
    NBC_MOVE("MPI_Iallgather", ALLGATHER, 0);
}

int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
    NBC_MOVE("MPI_Ialltoall", ALLTOALL, 0);
}

int MPI_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                              MPI_Request *request)
{
    NBC("MPI_Ireduce_scatter_block", comm, .kind = N_RSB, .sbuf = sendbuf, .rbuf = recvbuf,
        .rcount = recvcount, .rtype = datatype, .op = op);
}

int MPI_Iscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
              MPI_Comm comm, MPI_Request *request)
{
    NBC("MPI_Iscan", comm, .kind = N_SCAN, .sbuf = sendbuf, .rbuf = recvbuf, .rcount = count,
        .rtype = datatype, .op = op);
}

int MPI_Iexscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                MPI_Comm comm, MPI_Request *request)
{
    NBC("MPI_Iexscan", comm, .kind = N_EXSCAN, .sbuf = sendbuf, .rbuf = recvbuf,
        .rcount = count, .rtype = datatype, .op = op);
}

int MPI_Igatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                 MPI_Comm comm, MPI_Request *request)
{
    NBC("MPI_Igatherv", comm, .kind = N_GATHERV, .sbuf = sendbuf, .scount = sendcount,
        .stype = sendtype, .rbuf = recvbuf, .rcounts = recvcounts, .rdispls = displs,
        .rtype = recvtype, .root = root);
}

int MPI_Iscatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                  MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                  int root, MPI_Comm comm, MPI_Request *request)
{
    NBC("MPI_Iscatterv", comm, .kind = N_SCATTERV, .sbuf = sendbuf, .scounts = sendcounts,
        .sdispls = displs, .stype = sendtype, .rbuf = recvbuf, .rcount = recvcount,
        .rtype = recvtype, .root = root);
}

int MPI_Iallgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                    const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                    MPI_Comm comm, MPI_Request *request)
{
    NBC("MPI_Iallgatherv", comm, .kind = N_ALLGATHERV, .sbuf = sendbuf, .scount = sendcount,
        .stype = sendtype, .rbuf = recvbuf, .rcounts = recvcounts, .rdispls = displs,
        .rtype = recvtype);
}

int MPI_Ialltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                   MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                   const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request *request)
{
    NBC("MPI_Ialltoallv", comm, .kind = N_ALLTOALLV, .sbuf = sendbuf, .scounts = sendcounts,
        .sdispls = sdispls, .stype = sendtype, .rbuf = recvbuf, .rcounts = recvcounts,
        .rdispls = rdispls, .rtype = recvtype);
}

int MPI_Ireduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    NBC("MPI_Ireduce_scatter", comm, .kind = N_REDUCE_SCATTER, .sbuf = sendbuf,
        .rbuf = recvbuf, .rcounts = recvcounts, .rtype = datatype, .op = op);
}
