/*
 * p2p.c — point-to-point: the eager and rendezvous protocols and the public
 * send/receive/wait calls.
 *
 * Every message, whatever its size, first reaches the receiver as one packet
 * that goes through the matching table under the key (context, source, tag):
 *
 *   EAGER (size <= eager limit): the header and the whole payload.
 *   RTS   (size >  eager limit): the header only; the payload stays in the
 *                                sender's buffer, registered for RDMA.
 *
 * Matching (Algorithms 1 and 2 of the MPIv paper, made FIFO per key by the
 * table): a receive inserts its request, the server inserts each arrived
 * packet; whichever of the two reaches the table second gets the other's
 * value back and completes the match (proto_match). For EAGER that copies
 * the payload and completes the receive. For RTS the receiver answers with
 * an RTR naming its buffer (address, key, rendezvous slot) and the sender's
 * request taken from the RTS; the sender's server RDMA-writes the payload
 * with the slot as immediate data; the immediate completes the receive, the
 * local write completion completes the send.
 *
 * Why an RTS and not the paper's receiver-initiated RTR alone: a receiver
 * does not know the size of the message it will match. Sending an RTR for
 * every receive with a large buffer leaves a stale RTR at the sender whenever
 * the matching message goes eagerly, and with equal keys matched first-in,
 * first-out that stale RTR would steer a later large send into a buffer the
 * user already got back; a large message meeting a small buffer would wait
 * for an RTR that never comes. With the RTS every RTR is the answer to one
 * matched RTS and names its send request, so no RTR can be stale. Cost: one
 * extra one-way trip, only above the eager limit (measured in
 * docs/PERFORMANCE.md).
 *
 * What a receiver-initiated RTR would need instead (worked out, not built):
 * with no wildcards the n-th send on a key matches the n-th receive, so
 * per-key sequence numbers on both sides let the sender pair RTR n with
 * send n and drop a stale one (its send went eagerly) by number. That
 * takes (1) a counter per (context, peer, tag) ever used, on both sides,
 * that can never be freed: a late stale RTR would find a freed counter
 * restarted at 0 and steer the next send on that key. Collectives use a
 * fresh tag per call (coll.c), and many codes use a step number as tag, so
 * this state grows without bound; (2) the sequence number assigned under a
 * per-key lock together with the network post (sender) and the table
 * insert (receiver), on the eager path too; (3) a header-only packet after
 * each direct write, to take the receive out of the table in FIFO place.
 * All of that buys one trip on messages that already cost several.
 *
 * States of a request:
 *   send eager:  posted -> complete (at once, the payload was copied)
 *   send large:  posted (RTS sent) -> RTR arrived -> write done -> complete
 *                               \-> RTR "truncated" arrived -> complete
 *   receive:     posted (in table) -> matched EAGER -> complete
 *                                  \-> matched RTS -> RTR sent -> imm -> complete
 *                                  \-> matched RTS too large -> complete(TRUNCATE)
 *
 * Invariants:
 *  I1 A request is completed exactly once, by proto_complete, which signals
 *     its sync object and only then publishes done = 1; after that store no
 *     MPIv thread touches the request, so its owner may free it as soon as it
 *     sees done == 1.
 *  I2 A packet has exactly one owner: the network, the server, the table, or
 *     one matching thread; whoever matches it returns it to the pool or
 *     reuses it (the RTR is written into the matched RTS packet, so the
 *     server never has to wait for a free packet).
 *  I3 Nothing is written past a receive buffer: an EAGER or RTS message
 *     larger than the buffer completes the receive with MPIV_ERR_TRUNCATE
 *     and copies nothing; the sender is then told by an RTR marked truncated
 *     and completes without writing.
 *  I4 A rendezvous slot maps an immediate to a receive request from the RTR
 *     until the immediate arrives; a generation count in the immediate's top
 *     bits catches a late or duplicated immediate.
 *  I5 Unexpected messages (EAGER and RTS) never hold more than half of the
 *     packets the posted receives leave (proto.unexpected_max): past that,
 *     the server offers the table a heap block shaped like a packet
 *     (idx == PROTO_HEAP_IDX) and gives the packet back at once. So a
 *     sender always finds packets that only sends hold, and sends give
 *     theirs back without waiting for anything. Otherwise a rank whose
 *     packets sit in the table (messages nobody has asked for yet) or in
 *     posted receives could not send, not even the barrier its peer waits
 *     in, and both ranks would wait forever (it happened with 4 packets, 2
 *     posted: 2 held + 2 posted = all). A heap RTS is turned back into a
 *     pool packet for its RTR by the receiving thread that matches it.
 */
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "util/atomic.h"
#include "util/spinlock.h"

struct proto_state proto;

/* --- completion ------------------------------------------------------------ */

static void proto_complete(struct mpiv_request *r, int err)
{
    r->status.error = err;
    sched_signal(&r->sync);
    /* Release: the status written above is visible to whoever sees done. I1:
     * this is the last access to r by the completing thread. */
    atomic_store_explicit(&r->done, 1, memory_order_release);
}

int proto_wait(struct mpiv_request *r, mpiv_status_t *status)
{
    if (!atomic_load_explicit(&r->done, memory_order_acquire)) {
        sched_wait(&r->sync);
        /* The signal comes just before done is published (I1); the gap is a
         * handful of instructions on the completing thread. */
        while (!atomic_load_explicit(&r->done, memory_order_acquire))
            util_cpu_relax();
    }
    if (status)
        *status = r->status;
    return r->status.error;
}

/* --- packets --------------------------------------------------------------- */

/* A free packet for a send from user context; waits (a ULT yields, a pthread
 * drives progress) while the pool is empty instead of failing. */
static pkt_t *proto_pkt_alloc(void)
{
    int w = sched_worker_id();
    for (;;) {
        pkt_t *p = pkt_get(proto.pool, w);
        if (p)
            return p;
        if (!sched_in_ult())
            srv_progress();
        sched_yield_now();
    }
}

#define PROTO_HEAP_IDX UINT32_MAX

/* Gives back a matched packet, or frees its heap copy (I5). */
static void proto_pkt_release(pkt_t *p, bool server)
{
    if (p->idx == PROTO_HEAP_IDX) {
        free(p);
        return;
    }
    /* relaxed: a statistic that only steers copying, never correctness */
    atomic_fetch_sub_explicit(&proto.unexpected, 1, memory_order_relaxed);
    if (server)
        pkt_put_server(proto.pool, p);
    else
        pkt_put(proto.pool, sched_worker_id(), p);
}

/* The server, about to offer an arrived pool packet to the table: past the
 * watermark, a heap copy shaped like a packet (idx == PROTO_HEAP_IDX) is
 * offered instead, so that the pool packet can go back at once (I5).
 * Returns NULL (and counts p as held) below the watermark. */
static pkt_t *proto_copy_if_crowded(pkt_t *p)
{
    /* Reserve first, give back if over: a load then an add would let every
     * thread that arrives here at once (the server, and senders to their
     * own rank) pass the mark together. Relaxed: a count that only steers
     * copying; the table's locks order the packets themselves. */
    long held = atomic_fetch_add_explicit(&proto.unexpected, 1, memory_order_relaxed);
    if (held < proto.unexpected_max)
        return NULL;
    pkt_t *copy = aligned_alloc(64, (sizeof(pkt_t) + p->len + 63) / 64 * 64);
    if (!copy)
        return NULL; /* keep the packet (counted): slower, not wrong */
    atomic_fetch_sub_explicit(&proto.unexpected, 1, memory_order_relaxed);
    memcpy(copy, p, sizeof(pkt_t) + p->len);
    copy->idx = PROTO_HEAP_IDX;
    return copy;
}

/* --- rendezvous slots (I4) --------------------------------------------------- */

#define RDV_SLOT_BITS 20
#define RDV_SLOTS (1u << RDV_SLOT_BITS)
#define RDV_SLOT_MASK (RDV_SLOTS - 1)

static struct {
    util_spinlock lock;
    struct mpiv_request **req; /* slot -> request, NULL when free          */
    uint16_t *gen;             /* generation, bumped at every release       */
    uint32_t *free;            /* stack of free slots                       */
    uint32_t nfree;
} rdv;

int proto_rdv_init(void)
{
    util_spin_init(&rdv.lock);
    /* calloc'ed pages are committed only when touched: the table costs
     * memory in proportion to the rendezvous receives in flight. */
    rdv.req = calloc(RDV_SLOTS, sizeof *rdv.req);
    rdv.gen = calloc(RDV_SLOTS, sizeof *rdv.gen);
    rdv.free = malloc(RDV_SLOTS * sizeof *rdv.free);
    if (!rdv.req || !rdv.gen || !rdv.free) {
        proto_rdv_fini();
        return util_err(MPIV_ERR_NO_RESOURCES, "cannot allocate the rendezvous slot table");
    }
    for (uint32_t i = 0; i < RDV_SLOTS; i++)
        rdv.free[i] = RDV_SLOTS - 1 - i;
    rdv.nfree = RDV_SLOTS;
    return MPIV_SUCCESS;
}

void proto_rdv_fini(void)
{
    free(rdv.req);
    free(rdv.gen);
    free(rdv.free);
    memset(&rdv, 0, sizeof rdv);
}

/* Returns the immediate naming r, or UINT32_MAX when every slot is taken. */
static uint32_t rdv_slot_get(struct mpiv_request *r)
{
    util_spin_lock(&rdv.lock);
    if (rdv.nfree == 0) {
        util_spin_unlock(&rdv.lock);
        return UINT32_MAX;
    }
    uint32_t s = rdv.free[--rdv.nfree];
    rdv.req[s] = r;
    uint32_t imm = ((uint32_t)(rdv.gen[s] & 0xfff) << RDV_SLOT_BITS) | s;
    util_spin_unlock(&rdv.lock);
    return imm;
}

static struct mpiv_request *rdv_slot_take(uint32_t imm)
{
    uint32_t s = imm & RDV_SLOT_MASK;
    struct mpiv_request *r = NULL;
    util_spin_lock(&rdv.lock);
    if (rdv.req[s] && (rdv.gen[s] & 0xfff) == imm >> RDV_SLOT_BITS) {
        r = rdv.req[s];
        rdv.req[s] = NULL;
        rdv.gen[s]++;
        rdv.free[rdv.nfree++] = s;
    }
    util_spin_unlock(&rdv.lock);
    return r;
}

/* --- matching ---------------------------------------------------------------- */

/* Turns the matched RTS packet p into an RTR for its sender and sends it. */
static void proto_send_rtr(pkt_t *p, uint16_t flags, uint32_t rslot, uint64_t raddr,
                           uint64_t rkey)
{
    struct proto_hdr *h = proto_hdr_of(p);
    int sender = h->src;
    h->type = PROTO_RTR;
    h->flags = flags;
    h->src = proto.rank;
    h->rslot = rslot;
    struct proto_rtr *body = (struct proto_rtr *)(h + 1);
    body->raddr = raddr;
    body->rkey = rkey;
    p->len = sizeof *h + sizeof *body;
    int rc = srv_send(p, sender);
    if (rc != MPIV_SUCCESS)
        util_log_warn("cannot answer rank %d's rendezvous: %s", sender, mpiv_strerror(rc));
}

/* Completes the match of receive r with packet p (EAGER or RTS). Called by
 * the second of the receiving thread and the server; `server` tells which,
 * for where p goes back to. */
static void proto_match(struct mpiv_request *r, pkt_t *p, bool server)
{
    struct proto_hdr *h = proto_hdr_of(p);
    r->status.source = h->src;
    r->status.tag = (int)h->tag;
    r->status.size = (size_t)h->size;

    if (h->type == PROTO_EAGER) {
        int err = MPIV_SUCCESS;
        if (h->size > r->size)
            err = MPIV_ERR_TRUNCATE;
        else if (h->size)
            memcpy(r->buf, h + 1, (size_t)h->size);
        proto_pkt_release(p, server);
        proto_complete(r, err);
        return;
    }

    /* RTS: the RTR is written into it, so it must be a pool packet. A heap
     * copy (I5) sat in the table, so the caller is a receiving thread,
     * which may wait for a packet (the server never waits: it matches with
     * the arrived packet itself). */
    if (p->idx == PROTO_HEAP_IDX) {
        pkt_t *q = proto_pkt_alloc();
        memcpy(q->data, p->data, p->len);
        q->len = p->len;
        free(p);
        p = q;
        h = proto_hdr_of(p);
    } else {
        atomic_fetch_sub_explicit(&proto.unexpected, 1, memory_order_relaxed);
    }
    if (h->size > r->size) {
        proto_send_rtr(p, PROTO_RTR_TRUNCATED, 0, 0, 0);
        proto_complete(r, MPIV_ERR_TRUNCATE);
        return;
    }
    int rc = srv_mr_get(r->buf, (size_t)h->size, &r->mr);
    uint64_t raddr = 0, rkey = 0;
    if (rc == MPIV_SUCCESS) {
        raddr = r->mr->raddr + ((uintptr_t)r->buf - r->mr->base);
        rkey = r->mr->rkey;
    }
    /* Publishing the slot hands r to the imm handler: r is not touched
     * after it (the slot lock orders everything written before). */
    uint32_t imm = rc == MPIV_SUCCESS ? rdv_slot_get(r) : UINT32_MAX;
    if (imm == UINT32_MAX) {
        if (rc == MPIV_SUCCESS) {
            srv_mr_put(r->mr);
            rc = MPIV_ERR_NO_RESOURCES;
        }
        r->mr = NULL;
        /* Refuse: the sender completes without writing; our receive fails. */
        proto_send_rtr(p, PROTO_RTR_TRUNCATED, 0, 0, 0);
        proto_complete(r, rc);
        return;
    }
    proto_send_rtr(p, PROTO_RTR_OK, imm, raddr, rkey);
}

/* Server: an EAGER or RTS packet arrived. */
void proto_on_eager_or_rts(pkt_t *p)
{
    struct proto_hdr *h = proto_hdr_of(p);
    ht_key k = ht_make_key(h->ctx, (uint32_t)h->src, h->tag);
    pkt_t *copy = proto_copy_if_crowded(p);
    ht_value v = ht_match_or_insert(proto.ht, k, ht_val(copy ? copy : p, HT_KIND_PKT));
    if (copy) {
        if (v == HT_EMPTY) {
            /* the table owns the copy until a receive takes it */
            pkt_put_server(proto.pool, p);
            return;
        }
        /* a receive was waiting: the copy was never shared */
        free(copy);
        atomic_fetch_add_explicit(&proto.unexpected, 1, memory_order_relaxed);
    }
    if (v != HT_EMPTY)
        proto_match(ht_ptr(v), p, true);
    /* else the table owns p until a receive takes it (I2) */
}

static void proto_send_done(void *ctx, int err)
{
    struct mpiv_request *r = ctx;
    if (r->mr)
        srv_mr_put(r->mr);
    r->mr = NULL;
    proto_complete(r, err);
}

/* Server, at the sender: the receiver matched our RTS. */
void proto_on_rtr(pkt_t *p)
{
    struct proto_hdr *h = proto_hdr_of(p);
    struct mpiv_request *r = (struct mpiv_request *)(uintptr_t)h->sreq;
    if (util_unlikely(!atomic_load_explicit(&r->armed, memory_order_acquire)))
        util_fatal("RTR from rank %d names a send request that was never sent", h->src);
    if (h->flags != PROTO_RTR_OK) {
        pkt_put_server(proto.pool, p);
        /* The receiver refused (its buffer was too small): the send is over
         * and the receiver reports the truncation. */
        proto_send_done(r, MPIV_SUCCESS);
        return;
    }
    struct proto_rtr *body = (struct proto_rtr *)(h + 1);
    int peer = h->src;
    uint32_t imm = h->rslot;
    uint64_t raddr = body->raddr, rkey = body->rkey;
    pkt_put_server(proto.pool, p);
    int rc = srv_rdma_write_imm(r->buf, r->size, r->mr, peer, raddr, rkey, imm,
                                proto_send_done, r);
    if (rc != MPIV_SUCCESS)
        proto_send_done(r, rc);
}

/* Server, at the receiver: the payload of a rendezvous has landed. */
void proto_on_imm(uint32_t imm, int src, size_t len)
{
    struct mpiv_request *r = rdv_slot_take(imm);
    if (!r) {
        util_log_error("rendezvous write from rank %d names unknown slot %#x", src, imm);
        return;
    }
    int err = MPIV_SUCCESS;
    if (len != r->status.size)
        err = util_err(MPIV_ERR_INTERNAL, "rendezvous from rank %d: %zu bytes landed, %zu expected",
                       src, len, r->status.size);
    srv_mr_put(r->mr);
    r->mr = NULL;
    proto_complete(r, err);
}

/* --- operations --------------------------------------------------------------- */

static void req_init(struct mpiv_request *r, int kind, void *buf, size_t size, int peer,
                     int tag, int ctx)
{
    sched_sync_init(&r->sync);
    atomic_init(&r->done, 0);
    atomic_init(&r->armed, 0);
    r->kind = kind;
    r->buf = buf;
    r->size = size;
    r->peer = peer;
    r->tag = tag;
    r->ctx = ctx;
    r->mr = NULL;
    r->rslot = 0;
    r->status.source = kind == PROTO_REQ_SEND ? proto.rank : peer;
    r->status.tag = tag;
    r->status.size = kind == PROTO_REQ_SEND ? size : 0;
    r->status.error = MPIV_SUCCESS;
}

/* Sends an EAGER or RTS packet. To our own rank it skips the network: the
 * sending thread runs the arrival handler itself, as the server would once
 * the packet came back (a halo between two tiles of one rank costs a table
 * insert, not a trip through the provider). Every EAGER and RTS to
 * ourselves goes this way, so same-key messages stay in order; the RTR and
 * the write that follow an RTS do go through the network's loopback, but
 * they never pass the table. */
static int proto_deliver(pkt_t *p, int dest)
{
    if (dest != proto.rank)
        return srv_send(p, dest);
    p->peer = dest;
    proto_on_eager_or_rts(p);
    return MPIV_SUCCESS;
}

int proto_isend(const void *buf, size_t size, int dest, int tag, int ctx, struct mpiv_request *r)
{
    req_init(r, PROTO_REQ_SEND, (void *)buf, size, dest, tag, ctx);
    if (size > proto.eager_limit) {
        int rc = srv_mr_get((void *)buf, size, &r->mr);
        if (rc != MPIV_SUCCESS)
            return rc;
    }
    pkt_t *p = proto_pkt_alloc();
    struct proto_hdr *h = proto_hdr_of(p);
    h->ctx = (uint8_t)ctx;
    h->flags = 0;
    h->src = proto.rank;
    h->tag = (uint32_t)tag;
    h->rslot = 0;
    h->size = size;
    if (size <= proto.eager_limit) {
        h->type = PROTO_EAGER;
        h->sreq = 0;
        if (size)
            memcpy(h + 1, buf, size);
        p->len = (uint32_t)(sizeof *h + size);
        int rc = proto_deliver(p, dest);
        if (rc != MPIV_SUCCESS)
            return rc;
        proto_complete(r, MPIV_SUCCESS);
        return MPIV_SUCCESS;
    }
    h->type = PROTO_RTS;
    h->sreq = (uint64_t)(uintptr_t)r;
    p->len = sizeof *h;
    atomic_store_explicit(&r->armed, 1, memory_order_release);
    int rc = proto_deliver(p, dest);
    if (rc != MPIV_SUCCESS) {
        srv_mr_put(r->mr);
        r->mr = NULL;
    }
    return rc;
}

int proto_irecv(void *buf, size_t size, int src, int tag, int ctx, struct mpiv_request *r)
{
    req_init(r, PROTO_REQ_RECV, buf, size, src, tag, ctx);
    ht_key k = ht_make_key((unsigned)ctx, (uint32_t)src, (uint32_t)tag);
    ht_value v = ht_match_or_insert(proto.ht, k, ht_val(r, HT_KIND_REQ));
    if (v != HT_EMPTY)
        proto_match(r, ht_ptr(v), false);
    return MPIV_SUCCESS;
}

/* --- public API --------------------------------------------------------------- */

static int check_args(const void *buf, size_t size, int peer, int tag, const char *fn)
{
    if (util_unlikely(!proto.initialized))
        return util_err(MPIV_ERR_STATE, "%s: MPIv is not initialised (call mpiv_init)", fn);
    if (util_unlikely(peer < 0 || peer >= proto.size))
        return util_err(MPIV_ERR_RANK, "%s: rank %d is outside [0, %d)", fn, peer, proto.size);
    if (util_unlikely(tag < 0 || tag > MPIV_TAG_MAX))
        return util_err(MPIV_ERR_TAG, "%s: tag %d is outside [0, MPIV_TAG_MAX]", fn, tag);
    if (util_unlikely(!buf && size))
        return util_err(MPIV_ERR_ARG, "%s: NULL buffer with size %zu", fn, size);
    return MPIV_SUCCESS;
}

int mpiv_send(const void *buf, size_t size, int dest, int tag)
{
    int rc = check_args(buf, size, dest, tag, __func__);
    if (rc)
        return rc;
    struct mpiv_request r;
    rc = proto_isend(buf, size, dest, tag, HT_CTX_USER, &r);
    if (rc)
        return rc;
    return proto_wait(&r, NULL);
}

int mpiv_recv(void *buf, size_t size, int source, int tag, mpiv_status_t *status)
{
    int rc = check_args(buf, size, source, tag, __func__);
    if (rc)
        return rc;
    struct mpiv_request r;
    rc = proto_irecv(buf, size, source, tag, HT_CTX_USER, &r);
    if (rc)
        return rc;
    rc = proto_wait(&r, status);
    if (rc == MPIV_ERR_TRUNCATE)
        util_err(rc, "mpiv_recv: a %zu-byte message from rank %d (tag %d) does not fit %zu bytes",
                 r.status.size, source, tag, size);
    return rc;
}

static int start_nb(int is_send, void *buf, size_t size, int peer, int tag,
                    mpiv_request_t *req, const char *fn)
{
    if (!req)
        return util_err(MPIV_ERR_ARG, "%s: req is NULL", fn);
    *req = MPIV_REQUEST_NULL;
    int rc = check_args(buf, size, peer, tag, fn);
    if (rc)
        return rc;
    struct mpiv_request *r = malloc(sizeof *r);
    if (!r)
        return util_err(MPIV_ERR_NO_RESOURCES, "%s: out of memory for a request", fn);
    rc = is_send ? proto_isend(buf, size, peer, tag, HT_CTX_USER, r)
                 : proto_irecv(buf, size, peer, tag, HT_CTX_USER, r);
    if (rc) {
        free(r);
        return rc;
    }
    r->heap = 1;
    *req = r;
    return MPIV_SUCCESS;
}

int mpiv_isend(const void *buf, size_t size, int dest, int tag, mpiv_request_t *req)
{
    return start_nb(1, (void *)buf, size, dest, tag, req, __func__);
}

int mpiv_irecv(void *buf, size_t size, int source, int tag, mpiv_request_t *req)
{
    return start_nb(0, buf, size, source, tag, req, __func__);
}

static void empty_status(mpiv_status_t *s)
{
    if (s) {
        s->source = -1;
        s->tag = -1;
        s->size = 0;
        s->error = MPIV_SUCCESS;
    }
}

int mpiv_wait(mpiv_request_t *req, mpiv_status_t *status)
{
    if (!req)
        return util_err(MPIV_ERR_ARG, "mpiv_wait: req is NULL");
    if (*req == MPIV_REQUEST_NULL) {
        empty_status(status);
        return MPIV_SUCCESS;
    }
    int rc = proto_wait(*req, status);
    free(*req);
    *req = MPIV_REQUEST_NULL;
    return rc;
}

int mpiv_waitall(int n, mpiv_request_t reqs[], mpiv_status_t statuses[])
{
    if (n < 0 || (n > 0 && !reqs))
        return util_err(MPIV_ERR_ARG, "mpiv_waitall: %d requests at %p", n, (void *)reqs);
    int first = MPIV_SUCCESS;
    for (int i = 0; i < n; i++) {
        int rc = mpiv_wait(&reqs[i], statuses ? &statuses[i] : NULL);
        if (rc && !first)
            first = rc;
    }
    return first;
}

int mpiv_test(mpiv_request_t *req, int *flag, mpiv_status_t *status)
{
    if (!req || !flag)
        return util_err(MPIV_ERR_ARG, "mpiv_test: NULL req or flag");
    if (*req == MPIV_REQUEST_NULL) {
        *flag = 1;
        empty_status(status);
        return MPIV_SUCCESS;
    }
    if (!atomic_load_explicit(&(*req)->done, memory_order_acquire)) {
        *flag = 0;
        /* A pthread polling in a loop must not starve the network. */
        if (!sched_in_ult())
            srv_progress();
        return MPIV_SUCCESS;
    }
    *flag = 1;
    return mpiv_wait(req, status);
}
