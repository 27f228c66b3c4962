/*
 * comm.h — communicators (comm.c) and the internal collectives they are
 * built with (coll.c).
 *
 * A communicator with id c matches its point-to-point messages in context
 * COMM_CTX_USER(c) and its collectives in COMM_CTX_COLL(c); the world is id
 * 0 (HT_CTX_USER, HT_CTX_COLL). Keys carry the source's world rank (what
 * the wire header and the transport know), so a communicator translates
 * its ranks to world ranks to send, and back to fill a status.
 */
#ifndef MPIV_PROTO_COMM_H
#define MPIV_PROTO_COMM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "proto.h"

#define COMM_MAX ((int)(HT_CTX_COUNT / 2))
_Static_assert(COMM_MAX == MPIV_COMM_MAX, "mpiv.h's limit is what the key holds");
#define COMM_CTX_USER(id) (2u * (unsigned)(id))
#define COMM_CTX_COLL(id) (2u * (unsigned)(id) + 1u)
#define COMM_MASK_WORDS (COMM_MAX / 64)

struct comm_rev {
    int world, rank; /* sorted by world */
};

struct mpiv_comm {
    int id;             /* contexts COMM_CTX_USER(id), COMM_CTX_COLL(id)    */
    int rank, size;     /* this process's rank in it, its number of ranks  */
    int *world;         /* world rank of each rank; NULL for the world     */
    struct comm_rev *rev; /* world -> rank, sorted; NULL for the world     */
    /* 1 while a caller is inside a collective on it: the second caller
     * fails instead of mixing its messages into the first's (mpiv.h). */
    atomic_bool busy;
    /* Collective calls so far: the same sequence on every member, since
     * members call collectives in the same order and busy keeps one at a
     * time per process. Only the holder of busy touches it. */
    uint32_t coll_seq;
    atomic_bool live;   /* a handle to it may be used                      */
};

/* The world's rank `r` of comm c (r in [0, c->size)). */
static inline int comm_to_world(const struct mpiv_comm *c, int r)
{
    return c->world ? c->world[r] : r;
}
/* comm c's rank of world rank w, or -1 if w is not a member (a binary
 * search; inline so that p2p.c needs nothing else of comm.c). */
static inline int comm_from_world(const struct mpiv_comm *c, int w)
{
    if (!c->rev)
        return w;
    int lo = 0, hi = c->size; /* rev[lo .. hi) may hold w */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (c->rev[mid].world < w)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->size && c->rev[lo].world == w ? c->rev[lo].rank : -1;
}

/* What a request's comm field (proto.h) holds for a status in c's ranks:
 * NULL when they are world ranks already (the world, or no communicator). */
static inline const struct mpiv_comm *comm_status_map(const struct mpiv_comm *c)
{
    return c && c->world ? c : NULL;
}

/* MPIV_SUCCESS if c is a live communicator handle (and MPIv is up), else
 * the error (MPIV_ERR_STATE, MPIV_ERR_ARG) after util_err naming fn. */
int comm_check(const struct mpiv_comm *c, const char *fn);

/* Checks a point-to-point call's arguments on c (the handle, *peer in
 * [0, size) of c, tag, buf NULL only with size 0; a receive or probe
 * (recv) may pass MPIV_ANY_SOURCE and MPIV_ANY_TAG), then turns *peer into
 * a world rank (a wildcard stays) and gives c's user context in *ctx.
 * Errors as comm_check, MPIV_ERR_RANK, MPIV_ERR_TAG, MPIV_ERR_ARG. */
int comm_target(struct mpiv_comm *c, bool recv, const void *buf, size_t size, int *peer, int tag,
                int *ctx, const char *fn);

/* The communicator whose context ctx is, as comm_status_map gives it:
 * NULL for the world's, or a slot not live. A message taken by a matched
 * probe is its packet, whose header names the context: mpiv_mrecv's
 * status is in the ranks of the communicator it was probed on. */
static inline const struct mpiv_comm *comm_of_ctx(unsigned ctx)
{
    unsigned id = ctx / 2;
    if (id == 0 || id >= (unsigned)COMM_MAX || !proto.comms)
        return NULL;
    const struct mpiv_comm *c = &proto.comms[id];
    /* acquire: its maps were written before live (comm.c) */
    if (!atomic_load_explicit(&c->live, memory_order_acquire))
        return NULL;
    return comm_status_map(c);
}

/* The bodies of the probes and of mpiv_sendrecv (p2p.c), for the world
 * calls and the communicator calls (comm.c). `checked` is the caller's
 * check of the source, tag (and communicator): returned, if an error,
 * once the outputs are checked and cleared as every such call does.
 * Ranks are world ranks (or wildcards), ctx the matching context; c is
 * where statuses' sources are translated to (comm_status_map: NULL for
 * world ranks). */
int proto_iprobe_on(int checked, const struct mpiv_comm *c, int source, int tag, int ctx,
                    int *flag, mpiv_status_t *status, const char *fn);
int proto_probe_on(int checked, const struct mpiv_comm *c, int source, int tag, int ctx,
                   mpiv_status_t *status);
int proto_improbe_on(int checked, const struct mpiv_comm *c, int source, int tag, int ctx,
                     int *flag, mpiv_message_t *msg, mpiv_status_t *status, const char *fn);
int proto_mprobe_on(int checked, const struct mpiv_comm *c, int source, int tag, int ctx,
                    mpiv_message_t *msg, mpiv_status_t *status, const char *fn);
/* A non-blocking send, synchronous send or receive (op) in a request from
 * the cache, handed out in *req, its status in c's ranks (NULL: world);
 * arguments checked already, ranks world ranks, ctx the context. On
 * failure *req is left alone and nothing is pending. */
int proto_start_new(enum proto_op op, void *buf, size_t size, int peer, int tag, int ctx,
                    const struct mpiv_comm *c, mpiv_request_t *req, const char *fn);
/* Arguments checked already. */
int proto_sendrecv_on(const struct mpiv_comm *c, const void *sendbuf, size_t sendsize, int dest,
                      int sendtag, int sendctx, void *recvbuf, size_t recvsize, int source,
                      int recvtag, int recvctx, mpiv_status_t *status);

/* Takes c's collective flag; MPIV_ERR_ARG if another caller holds it. */
int comm_enter(struct mpiv_comm *c, const char *fn);
void comm_leave(struct mpiv_comm *c);

int proto_comm_init(void);
void proto_comm_fini(void);

/* Collectives without the flag and argument checks, for callers that hold
 * the flag already (comm.c's dup and split). */
int coll_allreduce(struct mpiv_comm *c, const void *sbuf, void *rbuf, size_t count,
                   mpiv_datatype_t type, mpiv_op_t op);
int coll_allgather(struct mpiv_comm *c, const void *sbuf, void *rbuf, size_t count,
                   mpiv_datatype_t type);

#endif
