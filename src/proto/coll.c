/*
 * coll.c — collectives built on point-to-point in the collective context
 * (HT_CTX_COLL), so they can never match a user's message.
 *
 * Every rank calls collectives in the same order (one caller per rank at a
 * time, as documented in mpiv.h), so a per-process call counter gives every
 * call the same number on all ranks; it goes into the tag together with the
 * round, so the messages of two consecutive calls never mix.
 *
 *   barrier   — dissemination: ceil(log2 P) rounds of zero-byte messages.
 *   bcast     — binomial tree rooted at `root`.
 *   allreduce — recursive doubling; with P not a power of two the first
 *               2*(P - 2^k) ranks fold pairwise first and get the result
 *               back at the end.
 */
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define COLL_ROUND_BITS 6 /* up to 64 rounds: log2 of MPIV_RANK_MAX fits */

static uint32_t coll_tag(uint32_t call, unsigned round)
{
    return ((call << COLL_ROUND_BITS) | round) & 0x7fffffffu;
}

static int coll_sendrecv(const void *sbuf, size_t ssize, int dest, void *rbuf, size_t rsize,
                         int src, uint32_t tag)
{
    struct mpiv_request rs, rr;
    int rc = proto_irecv(rbuf, rsize, src, (int)tag, HT_CTX_COLL, &rr);
    if (rc)
        return rc;
    rc = proto_isend(sbuf, ssize, dest, (int)tag, HT_CTX_COLL, &rs);
    if (rc) {
        /* rr lives on this stack: it must not stay in the table */
        if (!proto_cancel_recv(&rr))
            proto_wait(&rr, NULL);
        return rc;
    }
    int rc2 = proto_wait(&rr, NULL);
    int rc1 = proto_wait(&rs, NULL);
    return rc1 ? rc1 : rc2;
}

static int coll_send(const void *buf, size_t size, int dest, uint32_t tag)
{
    struct mpiv_request r;
    int rc = proto_isend(buf, size, dest, (int)tag, HT_CTX_COLL, &r);
    return rc ? rc : proto_wait(&r, NULL);
}

static int coll_recv(void *buf, size_t size, int src, uint32_t tag)
{
    struct mpiv_request r;
    int rc = proto_irecv(buf, size, src, (int)tag, HT_CTX_COLL, &r);
    return rc ? rc : proto_wait(&r, NULL);
}

static uint32_t coll_next_call(void)
{
    return atomic_fetch_add_explicit(&proto.coll_seq, 1, memory_order_relaxed);
}

int mpiv_barrier(void)
{
    PROTO_CHECK_INIT();
    uint32_t call = coll_next_call();
    int P = proto.size, me = proto.rank;
    unsigned round = 0;
    for (int k = 1; k < P; k <<= 1, round++) {
        int rc = coll_sendrecv(NULL, 0, (me + k) % P, NULL, 0, (me - k + P) % P,
                               coll_tag(call, round));
        if (rc)
            return rc;
    }
    return MPIV_SUCCESS;
}

int mpiv_bcast(void *buf, size_t size, int root)
{
    PROTO_CHECK_INIT();
    if (root < 0 || root >= proto.size)
        return util_err(MPIV_ERR_RANK, "mpiv_bcast: root %d is outside [0, %d)", root, proto.size);
    if (!buf && size)
        return util_err(MPIV_ERR_ARG, "mpiv_bcast: NULL buffer with size %zu", size);
    uint32_t tag = coll_tag(coll_next_call(), 0);
    int P = proto.size;
    int rel = (proto.rank - root + P) % P;
    /* receive from the parent: clear the lowest set bit of rel */
    int mask = 1;
    while (mask < P) {
        if (rel & mask) {
            int rc = coll_recv(buf, size, (rel - mask + root) % P, tag);
            if (rc)
                return rc;
            break;
        }
        mask <<= 1;
    }
    /* send to children rel + m for every m below the bit we received on */
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (rel + mask < P) {
            int rc = coll_send(buf, size, (rel + mask + root) % P, tag);
            if (rc)
                return rc;
        }
    }
    return MPIV_SUCCESS;
}

static void reduce_into(void *acc, const void *in, size_t count, mpiv_datatype_t type, mpiv_op_t op)
{
    if (type == MPIV_INT64) {
        int64_t *a = acc;
        const int64_t *b = in;
        for (size_t i = 0; i < count; i++)
            a[i] = op == MPIV_SUM ? a[i] + b[i] : op == MPIV_MIN ? (b[i] < a[i] ? b[i] : a[i])
                                                                   : (b[i] > a[i] ? b[i] : a[i]);
    } else {
        double *a = acc;
        const double *b = in;
        for (size_t i = 0; i < count; i++)
            a[i] = op == MPIV_SUM ? a[i] + b[i] : op == MPIV_MIN ? (b[i] < a[i] ? b[i] : a[i])
                                                                   : (b[i] > a[i] ? b[i] : a[i]);
    }
}

int mpiv_allreduce(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                   mpiv_op_t op)
{
    PROTO_CHECK_INIT();
    if (type != MPIV_INT64 && type != MPIV_DOUBLE)
        return util_err(MPIV_ERR_ARG, "mpiv_allreduce: unknown datatype %d", (int)type);
    if (op != MPIV_SUM && op != MPIV_MIN && op != MPIV_MAX)
        return util_err(MPIV_ERR_ARG, "mpiv_allreduce: unknown operation %d", (int)op);
    if (count && (!sendbuf || !recvbuf))
        return util_err(MPIV_ERR_ARG, "mpiv_allreduce: NULL buffer with count %zu", count);
    size_t bytes = count * 8; /* both types are 8 bytes */
    if (count > SIZE_MAX / 8)
        return util_err(MPIV_ERR_ARG, "mpiv_allreduce: count %zu is too large", count);
    uint32_t call = coll_next_call();
    if (sendbuf != recvbuf && bytes)
        memmove(recvbuf, sendbuf, bytes);
    int P = proto.size, me = proto.rank;
    if (P == 1)
        return MPIV_SUCCESS;
    void *tmp = bytes ? malloc(bytes) : NULL;
    if (bytes && !tmp)
        return util_err(MPIV_ERR_NO_RESOURCES, "mpiv_allreduce: out of memory (%zu bytes)", bytes);

    int pof2 = 1;
    while (pof2 * 2 <= P)
        pof2 *= 2;
    int rem = P - pof2;
    int rc = MPIV_SUCCESS;
    unsigned round = 0;
    int newrank;
    /* fold: among the first 2*rem ranks, even ones hand their data to the
     * next odd one and sit out the doubling */
    if (me < 2 * rem) {
        if (me % 2 == 0) {
            rc = coll_send(recvbuf, bytes, me + 1, coll_tag(call, round));
            newrank = -1;
        } else {
            rc = coll_recv(tmp, bytes, me - 1, coll_tag(call, round));
            if (!rc)
                reduce_into(recvbuf, tmp, count, type, op);
            newrank = me / 2;
        }
    } else {
        newrank = me - rem;
    }
    round++;
    if (!rc && newrank >= 0) {
        for (int mask = 1; mask < pof2; mask <<= 1, round++) {
            int newdst = newrank ^ mask;
            int dst = newdst < rem ? newdst * 2 + 1 : newdst + rem;
            rc = coll_sendrecv(recvbuf, bytes, dst, tmp, bytes, dst, coll_tag(call, round));
            if (rc)
                break;
            /* combine in rank order so every rank computes the same sums */
            if (dst < me) {
                reduce_into(tmp, recvbuf, count, type, op);
                memcpy(recvbuf, tmp, bytes);
            } else {
                reduce_into(recvbuf, tmp, count, type, op);
            }
        }
    } else {
        for (int mask = 1; mask < pof2; mask <<= 1)
            round++;
    }
    /* unfold: odd ranks give the result back to their even partner */
    if (!rc && me < 2 * rem) {
        if (me % 2)
            rc = coll_send(recvbuf, bytes, me - 1, coll_tag(call, round));
        else
            rc = coll_recv(recvbuf, bytes, me + 1, coll_tag(call, round));
    }
    free(tmp);
    return rc;
}
