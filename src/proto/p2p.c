/*
 * p2p.c — point-to-point: the eager and rendezvous protocols and the public
 * send/receive/wait calls.
 *
 * Every message, whatever its size, first reaches the receiver as one packet
 * that goes through the matching table under the key (context, source, tag):
 *
 *   EAGER (size <= eager limit, and eager credit left, I6): the header and
 *                                the whole payload.
 *   RTS   (otherwise): the header, and where the receiver can read the
 *                      sender's memory (srv_can_read: shm, or our own
 *                      rank) a body naming the buffer; the payload stays in
 *                      the sender's buffer, registered for RDMA.
 *
 * Matching (Algorithms 1 and 2 of the MPIv paper, made FIFO per key by the
 * table): a receive inserts its request, the server inserts each arrived
 * packet; whichever of the two reaches the table second gets the other's
 * value back and completes the match (proto_match). For EAGER that copies
 * the payload and completes the receive. For an RTS there are two paths:
 *
 *   read  (the RTS has a body): the matching thread reads the payload
 *         straight into the receive buffer (srv_rdma_read), answers with a
 *         FIN (an RTR with status FIN, or FIN_FAILED if the read failed)
 *         naming the send's handle, and completes the receive; the FIN
 *         completes the send. The bytes are in place one trip after the
 *         RTS, and the sender's server moves none of them.
 *   write (no body, or the read was not possible here: SRV_NO_READ, which
 *         the sender's registration makes harmless): the receiver answers
 *         with an RTR naming its buffer (address, key, and its own handle
 *         as the immediate) and the send's handle taken from the RTS; the
 *         sender's server RDMA-writes the payload in pieces of at most
 *         proto.max_write bytes, each carrying the immediate; the receive
 *         completes when all its bytes have landed, the send when all its
 *         writes completed locally.
 *
 * A read runs whole, on whichever thread matched: the receiving thread
 * when the RTS waited in the table, else the server (or the thread driving
 * progress). It is not cut into pieces: the write path's server posts all
 * its pieces at once as well, and on shm each is a synchronous
 * process_vm_writev, so the server is held just as long either way, and
 * pieces would cost a resumable state per receive and a trip through the
 * server per piece. A FIN to our own rank completes the send on the spot.
 *
 * Why an RTS and not the paper's receiver-initiated RTR alone: a receiver
 * does not know the size of the message it will match. Sending an RTR for
 * every receive with a large buffer leaves a stale RTR at the sender whenever
 * the matching message goes eagerly, and with equal keys matched first-in,
 * first-out that stale RTR would steer a later large send into a buffer the
 * user already got back; a large message meeting a small buffer would wait
 * for an RTR that never comes. With the RTS every RTR is the answer to one
 * matched RTS and names its send's handle, so no RTR can be stale. The
 * read path keeps the RTS for the same reason and one more: the RTS is
 * what carries the buffer's address to the receiver, and the FIN, like the
 * RTR, answers exactly one matched RTS.
 * A receiver-initiated scheme would need per-(context, peer, tag) sequence
 * numbers on both sides that can never be freed (a late stale RTR would
 * meet a restarted counter), and collectives use a fresh tag per call, so
 * that state would grow without bound.
 *
 * States of a request (the state word itself only says pending / waited
 * for / complete, see proto.h; the phase below is implied by who owns it):
 *   send eager:  posted -> complete (at once, the payload was copied)
 *   send queued (an eager one with a request that found the ring full,
 *                send_inline): posted -> in the send queue -> complete
 *                when the queue copied it into the ring (or failed)
 *   send buffered (I8): complete at once; its copy's own request goes on
 *                as a send RTS, and is freed where that one completes
 *   send RTS:    in the handle table (RTS sent) -> RTR taken it out:
 *                  OK: writes in flight (the server owns it) -> complete
 *                  NONE (truncated, or nothing to write) -> complete
 *                  FAILED (the receiver could not take it) -> complete(PEER)
 *                  FIN (read offered, and read) -> complete
 *                  FIN_FAILED (read offered, read failed) -> complete(NET)
 *   receive:     in the matching table -> matched EAGER -> complete
 *                  -> matched RTS with a read offered -> read by the
 *                     matching thread (owned by it throughout, never in
 *                     the handle table), FIN sent
 *                       -> read -> complete
 *                       -> read failed -> complete(NET or PEER)
 *                       -> read not possible here: as an RTS without one
 *                  -> matched RTS -> in the handle table (RTR sent)
 *                       -> every byte landed -> complete
 *                       -> ABORT from the sender / failed write -> complete(err)
 *                  -> matched RTS too large -> complete(TRUNCATE)
 *   either:      its peer failed (proto_on_peer_failed) -> complete(PEER)
 *
 * Invariants:
 *  I1 A request is completed exactly once, by proto_finish(), whose last access
 *     to it is the signal of its state word (or, for a buffered send's own
 *     request, I8, its free); its owner may free it as soon as a wait
 *     returns (or a test says it is complete).
 *  I2 A packet has exactly one owner: the network, the server, the table, or
 *     one matching thread; whoever matches it returns it to the pool or
 *     reuses it (the RTR is written into the matched RTS packet, so the
 *     server never has to wait for a free packet). srv_send takes the packet
 *     even when it fails.
 *  I3 Nothing is written past a receive buffer: an EAGER or RTS message
 *     larger than the buffer completes the receive with MPIV_ERR_TRUNCATE
 *     and copies nothing (reads nothing); the sender is then told by an RTR
 *     "NONE" and completes without writing. Every arrived packet is decoded (wire.c)
 *     before any field of it is used, and an immediate must name a live
 *     receive from the rank it came from, with no more bytes than it waits
 *     for.
 *  I4 Handles, never pointers, cross the wire (handle.c): a late or
 *     duplicated RTR, FIN, ABORT or immediate names a taken handle and is
 *     dropped and counted; so is a FIN for a send that offered no read.
 *     (The read's address is the sender's own: it offers its buffer, and a
 *     receiver reads at most its own buffer's size from it.)
 *  I5 Unexpected messages (EAGER and RTS) never hold more than half of the
 *     packets the posted receives leave (proto.unexpected_max): past that,
 *     the server offers the table a heap block shaped like a packet
 *     (idx == PROTO_HEAP_IDX, heap_copy_new) and gives the packet back at
 *     once. So a sender always finds packets that only sends hold, and
 *     sends give theirs back without waiting for anything. A heap RTS is
 *     turned back into a pool packet for its RTR by the receiving thread
 *     that matches it. An EAGER message lent in place (shm) holds no pool
 *     packet while a heap block can be had: it waits in one from the start
 *     (on_eager_data).
 *  I6 Flow control: a rank sends another at most proto.credit_max bytes of
 *     eager messages (counted with their headers) that the receiver has not
 *     consumed, not counting those whose payload is no larger than an RTS
 *     body (they cost no more than the RTS that would replace them); the
 *     receiver gives credit back once it consumed them (piggybacked on any
 *     packet past an eighth of it, or a CREDIT packet past a quarter).
 *     Without credit a message goes as an RTS, whose payload stays at the
 *     sender (in a copy, I8), so every message still reaches the
 *     receiver's table and matching order never waits on credit (no
 *     deadlock); what unexpected messages hold at a receiver is then at
 *     most credit_max per peer plus one header per pending send of that
 *     peer (the pending buffered ones among them at most buffered_max /
 *     proto_buffered_cost(0) per peer, I8).
 *  I7 A failure is reported on both sides: a rendezvous write that fails
 *     sends the receiver an ABORT naming its handle; a read that fails
 *     sends the sender a FIN_FAILED (its send fails); a peer the transport
 *     declares failed fails every request with it that the handle table
 *     holds (a receive being read is in no table: its read ends by itself,
 *     with ESRCH if the sender died); a packet that cannot be sent fails
 *     its own request.
 *  I8 A send that is not synchronous and could go eagerly by its size (at
 *     most proto_eager_max) completes at once when it must go as an RTS
 *     for want of credit: its payload is copied behind a request of the
 *     runtime's own (buffered), which sends the RTS and sits in the handle
 *     table like any other; nobody waits on it, and proto_finish frees it.
 *     So whether a small send returns never depends on credit that happens
 *     to be in flight back to us: a rank that sends a burst and then meets
 *     its receiver in a barrier cannot hang. One that finds the ring full
 *     waits in the send queue instead (send_inline), which the receiver
 *     drains whenever it progresses, matched or not (its barrier too);
 *     only mpiv_send's own path (no request) still completes a message of
 *     at most a packet at once, from a copy (eager_copy). Sends that go
 *     through a request (mpiv_isend, sends on communicators, the
 *     collectives' sends) wait with it.
 *     (Credit given back can sit behind a barrier's messages: those may
 *     come from other ranks, on other rings, and be taken off first.)
 *     What copies cost per peer (proto_buffered_cost) stays at most
 *     proto.buffered_max (16 credits: copies count until the sender hears
 *     they were taken, which can be long after), and their number in the
 *     process at most PROTO_BUFFERED_COPIES_MAX (each holds a handle); past
 *     either a send goes as a plain RTS and waits for its receive, as MPI
 *     allows. Copies still held at finalize, whose answer was still on its
 *     way, are freed there (proto_buffered_drop).
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "proto.h"
#include "pktpool/pktcopy.h"
#include "util/atomic.h"
#include "util/spinlock.h"
#include "util/bias.h"

struct proto_state proto;

static _Atomic uint64_t n_aborts_sent, n_aborts_received, n_credit_packets, n_eager_as_rts;
static _Atomic uint64_t n_reads, n_read_fallbacks, n_read_failures, n_fins_received;
static _Atomic uint64_t n_copy_waits;
/* only the progress lock's holder adds to it (a load and a store: no
 * locked instruction in the arrival path) */
static _Atomic uint64_t n_matched_ahead;

void proto_stats_drops(uint64_t out[PROTO_DROP_MAX_]);

/* pthreads polling in poll_while_waiting without a server thread now,
 * and waits that parked instead (proto_wait_pending). */
static atomic_int pthread_pollers;
static _Atomic uint64_t n_pthread_parks;

void proto_get_stats(struct proto_stats *st)
{
    memset(st, 0, sizeof *st);
    proto_stats_drops(st->dropped);
    st->aborts_sent = atomic_load_explicit(&n_aborts_sent, memory_order_relaxed);
    st->aborts_received = atomic_load_explicit(&n_aborts_received, memory_order_relaxed);
    st->credit_packets = atomic_load_explicit(&n_credit_packets, memory_order_relaxed);
    st->eager_as_rts = atomic_load_explicit(&n_eager_as_rts, memory_order_relaxed);
    st->reads = atomic_load_explicit(&n_reads, memory_order_relaxed);
    st->read_fallbacks = atomic_load_explicit(&n_read_fallbacks, memory_order_relaxed);
    st->read_failures = atomic_load_explicit(&n_read_failures, memory_order_relaxed);
    st->fins_received = atomic_load_explicit(&n_fins_received, memory_order_relaxed);
    st->copy_waits = atomic_load_explicit(&n_copy_waits, memory_order_relaxed);
    st->matched_ahead = atomic_load_explicit(&n_matched_ahead, memory_order_relaxed);
    st->pthread_parks = atomic_load_explicit(&n_pthread_parks, memory_order_relaxed);
    int pollers = atomic_load_explicit(&pthread_pollers, memory_order_relaxed);
    st->pthread_pollers = pollers > 0 ? (uint64_t)pollers : 0;
}

/* --- completion (I1) ------------------------------------------------------- */

/* Gives back r's rendezvous registration, if it holds one. */
static void req_put_mr(struct mpiv_request *r)
{
    if (r->mr)
        srv_mr_put(r->mr);
    r->mr = NULL;
}

/* --- buffered sends (I8) ------------------------------------------------------- */

/* A request of the runtime's own with a copy of buf behind it, for a send
 * that has to go as an RTS, or NULL: over the cap of buffered bytes to
 * dest, or out of memory (then the caller's request goes as the RTS and
 * its send waits for the receive). */
static struct mpiv_request *buffered_new(const void *buf, size_t size, int dest)
{
    /* relaxed: caps on memory and handles; the copy itself is published
     * by the RTS */
    long cost = proto_buffered_cost(size);
    long held = atomic_fetch_add_explicit(&proto.buffered[dest], cost, memory_order_relaxed) +
                cost;
    long copies = atomic_fetch_add_explicit(&proto.buffered_copies, 1, memory_order_relaxed) + 1;
    bool fits = held <= proto.buffered_max && copies <= PROTO_BUFFERED_COPIES_MAX;
    struct mpiv_request *b = fits ? malloc(sizeof *b + size) : NULL;
    if (!b) {
        atomic_fetch_sub_explicit(&proto.buffered[dest], cost, memory_order_relaxed);
        atomic_fetch_sub_explicit(&proto.buffered_copies, 1, memory_order_relaxed);
        /* once per process: a flood would repeat it per send */
        static atomic_bool warned;
        if (atomic_exchange_explicit(&warned, true, memory_order_relaxed))
            return NULL;
        if (fits)
            util_log_warn("no memory for a copy of a %zu-byte send to rank %d: it waits for its "
                          "receive (said once)", size, dest);
        else
            util_log_warn("sends that returned at once hold %ld bytes in copies for rank %d (at "
                          "most %ld) and %ld copies in all (at most %d): a send without eager "
                          "credit now waits for its receive (MPIV_EAGER_CREDIT sets the bytes; "
                          "said once)", held - cost, dest, proto.buffered_max, copies - 1,
                          (int)PROTO_BUFFERED_COPIES_MAX);
        return NULL;
    }
    memcpy(b + 1, buf, size);
    return b;
}

static void buffered_free(struct mpiv_request *b)
{
    atomic_fetch_sub_explicit(&proto.buffered[b->peer], proto_buffered_cost(b->size),
                              memory_order_relaxed);
    atomic_fetch_sub_explicit(&proto.buffered_copies, 1, memory_order_relaxed);
    free(b);
}

static bool is_buffered(struct mpiv_request *r, void *arg)
{
    (void)arg;
    return r->buffered;
}

static void free_buffered(struct mpiv_request *r, void *arg)
{
    (void)arg;
    buffered_free(r); /* its registration went with the server */
}

/* At finalize, once the server stopped: the copies whose answer (a FIN,
 * an RTR) was still on its way. Their receives completed, or never will:
 * every rank passed mpiv_finalize's barrier. */
void proto_buffered_drop(void)
{
    /* the scan visits every handle slot: only when there is a copy */
    if (atomic_load_explicit(&proto.buffered_copies, memory_order_relaxed) > 0)
        proto_handle_take_if(is_buffered, NULL, free_buffered);
}

/* A buffered send is complete (its registration given back): its sender
 * returned long ago, so a failure can only be logged, at info level: it
 * comes with its peer's failure, which is logged as an error and reported
 * by every later call with that peer, and a flood would log one line per
 * copy. */
static void buffered_done(struct mpiv_request *b, int err)
{
    if (err != MPIV_SUCCESS)
        util_log_info("a %zu-byte send to rank %d (tag %d), complete for its sender since it "
                      "was copied, never reached it: %s", b->size, b->peer, b->tag,
                      mpiv_strerror(err));
    buffered_free(b);
}

/* Completes r before anybody but its starter has seen it (an eager send,
 * I1's signal without the atomic exchange: no waiter can be registered
 * yet; the starter's return publishes it). */
static void finish_unseen(struct mpiv_request *r)
{
    r->status.error = MPIV_SUCCESS;
    sched_sync_init_signalled(&r->sync);
}

void proto_finish(struct mpiv_request *r, int err)
{
    req_put_mr(r);
    if (util_unlikely(r->buffered)) {
        buffered_done(r, err); /* nobody waits on it: it is ours to free */
        return;
    }
    r->status.error = err;
    /* The signal publishes everything above (release, see sched.h) and is
     * the last access to r. The bias's owner signals a request nobody
     * waits on yet with a store: no other thread can register as its
     * waiter before revoking the bias (proto_wait), and revocation waits
     * for this section to end (bias.h, B1). A request a ULT already waits
     * on (the usual case for ULTs) goes straight to sched_signal. */
    if (sched_sync_idle(&r->sync) && util_bias_begin()) {
        bool done = sched_signal_unwaited(&r->sync);
        util_bias_end();
        if (done)
            return;
    }
    sched_signal(&r->sync);
}

int proto_test(struct mpiv_request *r) { return sched_sync_signalled(&r->sync); }

/* The thread that waits for r drives the network itself while it waits,
 * so that an arrival costs it no switch, no futex and no server nap:
 * - a plain pthread always (it does not depend on a server that may be
 *   asleep or share its core). With a server thread it blocks in the
 *   kernel after a quiet spell (util_idle); without one (srv_inline)
 *   nothing else may progress for it, so it keeps polling, napping
 *   between polls once quiet for long;
 * - a ULT only without a server thread, and only while it is its worker's
 *   one ULT with nothing else to run (sched_ult_alone): switching out
 *   would only reach the worker's idle loop, which would poll the same
 *   network with the same naps (sched_set_idle_stay). So a program with
 *   one ULT per rank waits like one with one pthread. The ULT switches
 *   out as soon as another ULT is spawned onto its worker or made ready
 *   there. */
static void poll_while_waiting(struct mpiv_request *r, bool ult)
{
    bool forever = srv_inline();
    struct util_idle idle;
    util_idle_reset(&idle);
    while (!proto_test(r)) {
        if (ult && !sched_ult_alone())
            return;
        if (srv_progress()) {
            util_idle_reset(&idle);
            continue;
        }
        if (util_idle_step(&idle) == UTIL_IDLE_LONG) {
            if (!forever)
                return;
            util_idle_nap_shared(&idle); /* no server: its polls serve all */
        }
    }
}

/* Whether this pthread may poll for its request itself: while fewer than
 * PROTO_PTHREAD_POLLERS do. Past that each poller only adds wake-ups (one
 * poll serves all), and thousands of pthreads napping between polls on
 * one core kept it busy switching between them, so that the threads they
 * waited for hardly ran. Why not fewer: a parked pthread costs a futex
 * wake when its request completes, and eight pthreads ping-ponging
 * windows of messages lost their faster mode with four of them parked
 * (docs/perf/sched.md, "Pthreads past a few park"). relaxed: a count that
 * only chooses how to wait; either way someone polls (below). */
static bool pthread_poller_enter(void)
{
    if (atomic_fetch_add_explicit(&pthread_pollers, 1, memory_order_relaxed) <
        PROTO_PTHREAD_POLLERS)
        return true;
    atomic_fetch_sub_explicit(&pthread_pollers, 1, memory_order_relaxed);
    return false;
}

/* A pthread in a poller's place (pthread_poller_enter said yes): polls
 * until r is done, leaves the place, and takes r's signal. */
static void poll_as_poller(struct mpiv_request *r)
{
    poll_while_waiting(r, false);
    atomic_fetch_sub_explicit(&pthread_pollers, 1, memory_order_relaxed);
    sched_wait(&r->sync);
}

/* How long a parked pthread sleeps before it looks for itself: while
 * worker 0 runs a ULT that does not yield (a long computation, a spin on
 * a flag that pthreads set) nobody but the pollers polls, and they may
 * all have left. PROTO_PARK_NS per UTIL_IDLE_SHARED_NAPPERS pthreads
 * parked at once, so that thousands of them wake about as often as a few
 * (the reason they park), up to PROTO_PARK_MAX_NS. */
#define PROTO_PARK_NS UINT64_C(1000000)
#define PROTO_PARK_MAX_NS UINT64_C(1000000000)
/* Parked pthreads first yield their core a while, as sched_wait does, so
 * that a wait that ends soon costs no sleep in the kernel, while at most
 * this many are parked: with thousands, each yield only hands the core to
 * another of them, and the threads they wait for (the one creating them)
 * hardly ran (docs/perf/sched.md, "Pthreads past a few park"). */
#define PROTO_PARK_YIELD_MAX 64
static atomic_int pthreads_parked;

static uint64_t park_ns(int parked)
{
    uint64_t k = parked > UTIL_IDLE_SHARED_NAPPERS ? (uint64_t)parked / UTIL_IDLE_SHARED_NAPPERS : 1;
    return k >= PROTO_PARK_MAX_NS / PROTO_PARK_NS ? PROTO_PARK_MAX_NS : k * PROTO_PARK_NS;
}

/* A pthread's wait without a server thread, past the pollers: asleep on
 * r, which whatever completes it wakes, while worker 0 polls for it
 * (sched_net_waiter_begin, N1 in sched.c); and every park_ns it looks
 * for itself: it takes a poller's place if one is free, else polls once.
 * So r completes even while worker 0 cannot poll. */
static void park_until_done(struct mpiv_request *r)
{
    if (!sched_net_waiter_begin()) { /* no scheduler to poll for us */
        poll_while_waiting(r, false);
        sched_wait(&r->sync);
        return;
    }
    atomic_fetch_add_explicit(&n_pthread_parks, 1, memory_order_relaxed); /* a statistic */
    /* relaxed: counts that only size the sleeps */
    int parked = atomic_fetch_add_explicit(&pthreads_parked, 1, memory_order_relaxed) + 1;
    for (;;) {
        if (sched_wait_pthread_for(&r->sync, park_ns(parked), parked <= PROTO_PARK_YIELD_MAX))
            break; /* signalled, and consumed */
        if (pthread_poller_enter()) {
            poll_as_poller(r);
            break;
        }
        srv_progress();
        parked = atomic_load_explicit(&pthreads_parked, memory_order_relaxed);
    }
    sched_net_waiter_end();
    atomic_fetch_sub_explicit(&pthreads_parked, 1, memory_order_relaxed);
}

/* How r's caller waits. A ULT: polls in place while it is alone on its
 * worker and no server thread runs, then blocks (sched_wait). A pthread
 * where a server thread runs: spins and yields for a while, then sleeps
 * on r. A pthread without a server thread: polls itself until r is done
 * if fewer than PROTO_PTHREAD_POLLERS pthreads do; otherwise it parks
 * (park_until_done). */
void proto_wait_pending(struct mpiv_request *r)
{
    /* A waiter other than the bias's owner registers with a CAS that the
     * owner's plain signal would not see: it revokes the bias first. */
    util_bias_claim();
    bool ult = sched_in_ult(), inl = srv_inline();
    if (!ult && inl) {
        if (pthread_poller_enter())
            poll_as_poller(r);
        else
            park_until_done(r);
        return;
    }
    if (!ult || inl)
        poll_while_waiting(r, ult);
    sched_wait(&r->sync);
}

int proto_comm_source(const struct mpiv_comm *c, int world_rank)
{
    return comm_from_world(c, world_rank);
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
        /* a ULT too: a ULT that only yields keeps its worker from ever
         * idling, and without a server thread the idle worker is what
         * would give packets back */
        srv_progress();
        sched_yield_now();
    }
}

/* A free packet without waiting: from the server thread (which must never
 * wait for one, I2) or for a message that may be put off. */
static pkt_t *proto_pkt_try(bool server)
{
    return server ? pkt_get_server(proto.pool) : pkt_get(proto.pool, sched_worker_id());
}

static void proto_pkt_put(pkt_t *p, bool server)
{
    if (server)
        pkt_put_server(proto.pool, p);
    else
        pkt_put(proto.pool, sched_worker_id(), p);
}

/* Heap copies shaped like packets (I5) have this index: a pool index is
 * below the pool's size. */
#define PROTO_HEAP_IDX UINT32_MAX
/* Where a heap copy keeps the size it was taken with (heap_copy_new), for
 * pkt_copy_free: a backend's scratch, which a heap copy never goes to. */
#define PROTO_HEAP_LEN 4

static inline bool proto_is_heap(const pkt_t *p) { return p->idx == PROTO_HEAP_IDX; }

/* A heap copy with room for len data bytes, its idx set; NULL if out of
 * memory. */
static pkt_t *heap_copy_new(size_t len)
{
    pkt_t *c = pkt_copy_alloc(len);
    if (!c)
        return NULL;
    c->idx = PROTO_HEAP_IDX;
    c->srv_ctx[PROTO_HEAP_LEN] = (void *)(uintptr_t)len;
    return c;
}

static void heap_copy_free(pkt_t *p) { pkt_copy_free(p, (size_t)(uintptr_t)p->srv_ctx[PROTO_HEAP_LEN]); }

/* What a packet carries, from src into dst (which has room for it): its
 * data, their length and its peer; dst keeps its own identity (idx, the
 * backend's scratch). */
static void pkt_copy_body(pkt_t *dst, const pkt_t *src)
{
    memcpy(dst->data, src->data, src->len);
    dst->len = src->len;
    dst->peer = src->peer;
}

/* Gives back a matched packet, or frees its heap copy (I5). */
static void proto_pkt_release(pkt_t *p, bool server)
{
    if (proto_is_heap(p)) {
        heap_copy_free(p);
        return;
    }
    /* relaxed: a statistic that only steers copying, never correctness */
    atomic_fetch_sub_explicit(&proto.unexpected, 1, memory_order_relaxed);
    proto_pkt_put(p, server);
}

/* The server, about to offer an arrived pool packet to the table: past the
 * watermark, a heap copy shaped like a packet (proto_is_heap) is
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
    pkt_t *copy = heap_copy_new(p->len);
    if (!copy)
        return NULL; /* keep the packet (counted): slower, not wrong */
    atomic_fetch_sub_explicit(&proto.unexpected, 1, memory_order_relaxed);
    pkt_copy_body(copy, p);
    return copy;
}

/* --- flow control (I6) ------------------------------------------------------- */

/* What an eager message costs the receiver while unexpected: its payload,
 * its header and the packet header of a heap copy. */
static long eager_cost(size_t size) { return (long)(size + sizeof(struct proto_hdr) + 64); }

/* The credit an eager message takes: none for a payload no larger than an
 * RTS body, since the RTS that would replace it costs the receiver as much
 * (I6's "one header per pending send"); so a flood of tiny messages never
 * turns into rendezvous, which would cost a round trip each and buy no
 * memory. Both sides apply it (credit_owe), so credit stays balanced. */
static long credit_cost(size_t size)
{
    return size <= sizeof(struct proto_rts) ? 0 : eager_cost(size);
}

/* Every change of proto.credit[p] goes through credit_take and credit_add,
 * so that the one-thread fast path's owner may take credit with a plain
 * load and store (util_bias_take). It does so only for long messages
 * (a credit cost, payload and headers, of CREDIT_PLAIN_MIN or more): a
 * locked instruction waits until the previous record's copy has left the
 * core, which stalls a stream of long records, while a stream of short
 * ones measured faster with that wait than without it (docs/perf/pt2pt.md,
 * "Credit without a locked add"). */
#define CREDIT_PLAIN_MIN 2048l

/* Takes credit for an eager message to dest; false if there is not enough. */
static inline bool credit_take(int dest, long cost)
{
    return util_bias_take(&proto.credit[dest], cost, cost >= CREDIT_PLAIN_MIN);
}

/* Adds v (given back, or a take undone) to peer's credit; returns the new
 * count. */
static long credit_add(int peer, long v) { return util_bias_add(&proto.credit[peer], v, false); }

static void credit_give(int src, uint32_t bytes)
{
    long v = credit_add(src, (long)bytes);
    /* A peer cannot give back more than it was given; a buggy or hostile
     * one that does only inflates our own sends, never its memory. Clamp
     * so the count cannot run away. */
    if (v > proto.credit_max)
        credit_add(src, proto.credit_max - v);
}

/* Credit owed to dest that a packet we are sending may carry back, if at
 * least `min`: the common case pays one load. */
static uint32_t owed_take(int dest, long min)
{
    if (dest == proto.rank ||
        atomic_load_explicit(&proto.owed[dest], memory_order_relaxed) < min)
        return 0;
    long v = atomic_exchange_explicit(&proto.owed[dest], 0, memory_order_relaxed);
    if (v > (long)UINT32_MAX) {
        atomic_fetch_add_explicit(&proto.owed[dest], v - (long)UINT32_MAX, memory_order_relaxed);
        v = (long)UINT32_MAX;
    }
    return (uint32_t)(v > 0 ? v : 0);
}

static void hdr_init(struct proto_hdr *h, uint8_t type, int dest)
{
    memset(h, 0, sizeof *h);
    h->type = type;
    h->src = proto.rank;
    h->credit = owed_take(dest, proto.credit_max / 8);
}

/* We consumed an eager message of `size` bytes from src: owe the credit
 * back, and past a quarter of it send it back in a packet of its own. Never
 * waits: without a free packet it stays owed (the next packet to src, or
 * the next consumption, carries it). */
/* A CREDIT header to src carrying what is owed to it (hdr_init takes it
 * past an eighth; here anything will do). false: nothing is owed, another
 * thread gave it back meanwhile. */
static bool credit_hdr_init(struct proto_hdr *h, int src)
{
    hdr_init(h, PROTO_CREDIT, src);
    if (!h->credit)
        h->credit = owed_take(src, 1);
    return h->credit != 0;
}

/* h was not sent: whatever credit it carried is owed again. */
static void credit_unsent(const struct proto_hdr *h, int dest)
{
    if (h->credit)
        atomic_fetch_add_explicit(&proto.owed[dest], (long)h->credit, memory_order_relaxed);
}

static void credit_owe(int src, size_t size, bool server)
{
    long cost = credit_cost(size);
    if (src == proto.rank || !cost)
        return;
    long v = atomic_fetch_add_explicit(&proto.owed[src], cost, memory_order_relaxed) + cost;
    if (v < proto.credit_max / 4)
        return;
    /* A CREDIT header needs no packet where the transport takes it inline
     * (shm): the credit goes back even while the pool is empty. Else a
     * sender whose credit sits here, owed, may turn eager sends into RTS
     * until this rank next sends it something, although the messages it
     * waits for were consumed long ago. */
    if (sizeof(struct proto_hdr) <= proto.lim[src].inline_max) {
        struct proto_hdr hd;
        if (!credit_hdr_init(&hd, src))
            return;
        int rc = srv_send_inline(src, &hd, sizeof hd, NULL, 0);
        if (rc == MPIV_SUCCESS) {
            atomic_fetch_add_explicit(&n_credit_packets, 1, memory_order_relaxed);
            return;
        }
        credit_unsent(&hd, src);
        if (rc != SRV_INLINE_LATER)
            return;
    }
    pkt_t *p = proto_pkt_try(server);
    if (!p)
        return;
    struct proto_hdr *h = proto_hdr_of(p);
    if (!credit_hdr_init(h, src)) {
        proto_pkt_put(p, server);
        return;
    }
    p->len = sizeof *h;
    atomic_fetch_add_explicit(&n_credit_packets, 1, memory_order_relaxed);
    if (srv_send(p, src) != MPIV_SUCCESS)
        util_log_info("cannot give eager credit back to rank %d: %s", src, mpiv_error_detail());
}

/* --- failure on the other side (I7) ---------------------------------------- */

/* Tells `peer` that the rendezvous receive its handle `rimm` names will not
 * get its bytes. p: a packet to use, or NULL to take one. */
static void send_abort(int peer, uint32_t rimm, int err, pkt_t *p, bool server)
{
    if (!p)
        p = proto_pkt_try(server);
    if (!p) {
        util_log_error("no packet to tell rank %d that a rendezvous failed (%s)", peer,
                       mpiv_strerror(err));
        return;
    }
    struct proto_hdr *h = proto_hdr_of(p);
    hdr_init(h, PROTO_ABORT, peer);
    h->status = (uint8_t)err;
    h->handle = rimm;
    p->len = sizeof *h;
    atomic_fetch_add_explicit(&n_aborts_sent, 1, memory_order_relaxed);
    util_log_info("telling rank %d that rendezvous %#x failed: %s", peer, rimm,
                  mpiv_strerror(err));
    if (srv_send(p, peer) != MPIV_SUCCESS)
        util_log_error("cannot tell rank %d that a rendezvous failed: %s", peer,
                       mpiv_error_detail());
}

/* --- matching ---------------------------------------------------------------- */

static void on_rtr(pkt_t *p);

/* Writes into packet p the RTR answering `rts` and sends it. Returns what
 * srv_send returned (p is gone either way, I2). A FIN to our own rank is
 * handled at once by the calling thread: the send it completes is ours,
 * and nothing else takes its handle (it cannot fail as a peer would, and
 * its RTS never fails to go out, see proto_isend). */
static int send_rtr(pkt_t *p, const struct proto_hdr *rts_in, uint16_t status, uint32_t rimm,
                    uint64_t raddr, uint64_t rkey)
{
    struct proto_hdr *h = proto_hdr_of(p);
    struct proto_hdr rts = *rts_in; /* rts_in may be p's own header */
    int sender = rts.src;
    hdr_init(h, PROTO_RTR, sender);
    h->status = status;
    h->ctx = rts.ctx;
    h->tag = rts.tag;
    h->size = rts.size;
    h->handle = rts.handle;
    p->len = sizeof *h;
    if (status == PROTO_RTR_OK) {
        struct proto_rtr *body = (struct proto_rtr *)(h + 1);
        body->raddr = raddr;
        body->rkey = rkey;
        body->rhandle = rimm;
        body->pad = 0;
        p->len += sizeof *body;
    }
    if (sender == proto.rank && (status == PROTO_RTR_FIN || status == PROTO_RTR_FIN_FAILED)) {
        p->peer = sender;
        on_rtr(p);
        return MPIV_SUCCESS;
    }
    int rc = srv_send(p, sender);
    if (rc != MPIV_SUCCESS)
        util_log_warn("cannot answer rank %d's rendezvous: %s", sender, mpiv_error_detail());
    return rc;
}

/* Completes receive r with the eager message whose (decoded) header is h
 * and payload is at `payload`: copies it into the buffer if it fits (I3),
 * owes its credit back (I6), completes r. */
static void eager_complete(struct mpiv_request *r, const struct proto_hdr *h,
                           const void *payload, bool server)
{
    size_t size = (size_t)h->size;
    r->status.source = h->src;
    r->status.tag = (int)h->tag;
    r->status.size = size;
    int err = MPIV_SUCCESS;
    if (size > r->size)
        err = MPIV_ERR_TRUNCATE;
    else if (size)
        memcpy(r->buf, payload, size);
    credit_owe(h->src, size, server);
    proto_finish(r, err);
}

/* The receiver's side of the read path: r matched an RTS that offered a
 * read (fits, not empty); p is its packet (a pool packet), rts its header.
 * Reads the bytes into r's buffer, then tells the sender (FIN) and
 * completes r. Returns false, having done nothing, when the read is not
 * possible here (the caller answers with an RTR instead: the sender's
 * buffer is still registered, so its write path just works). */
static bool read_rts(struct mpiv_request *r, pkt_t *p, const struct proto_hdr *rts, bool server)
{
    struct proto_rts offer;
    memcpy(&offer, proto_hdr_of(p) + 1, sizeof offer);
    size_t size = (size_t)rts->size;
    int rc = srv_rdma_read(r->buf, size, rts->src, offer.raddr, offer.rkey);
    if (rc == SRV_NO_READ) {
        atomic_fetch_add_explicit(&n_read_fallbacks, 1, memory_order_relaxed);
        return false;
    }
    if (rc == MPIV_SUCCESS) {
        atomic_fetch_add_explicit(&n_reads, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&n_read_failures, 1, memory_order_relaxed);
        util_err(rc, "reading a %zu-byte message (tag %u) from rank %d failed: %s", size,
                 rts->tag, rts->src, mpiv_strerror(rc));
        util_log_warn("%s", mpiv_error_detail());
    }
    /* The FIN first: the sender waits for it, the receiver's owner does
     * not need it. A failed read is told as well (I7): even to a sender
     * that seems gone, the answer costs nothing and a wrong guess would
     * leave its send waiting. */
    uint16_t status = rc == MPIV_SUCCESS ? PROTO_RTR_FIN : PROTO_RTR_FIN_FAILED;
    if (send_rtr(p, rts, status, 0, 0, 0) != MPIV_SUCCESS && srv_peer_alive(rts->src)) {
        /* once more, as proto_match does for an RTR (I7) */
        pkt_t *q = proto_pkt_try(server);
        if (!q || send_rtr(q, rts, status, 0, 0, 0) != MPIV_SUCCESS)
            util_log_error("cannot tell rank %d that its message was read", rts->src);
    }
    proto_finish(r, rc);
    return true;
}

/* Completes the match of receive r with packet p (EAGER or RTS). Called by
 * the second of the receiving thread and the server; `server` tells which,
 * for where packets come from and go back to. */
void proto_match(struct mpiv_request *r, pkt_t *p, bool server)
{
    struct proto_hdr *h = proto_hdr_of(p);
    int src = h->src;
    size_t size = (size_t)h->size;

    if (h->type == PROTO_EAGER) {
        struct proto_hdr hd = *h;
        eager_complete(r, &hd, h + 1, server);
        proto_pkt_release(p, server);
        return;
    }
    r->status.source = src;
    r->status.tag = (int)h->tag;
    r->status.size = size;

    /* RTS: the RTR is written into it, so it must be a pool packet. A heap
     * copy (I5) sat in the table, so the caller is a receiving thread,
     * which may wait for a packet (the server never waits: it matches with
     * the arrived packet itself). */
    if (proto_is_heap(p)) {
        pkt_t *q = proto_pkt_alloc();
        pkt_copy_body(q, p);
        heap_copy_free(p);
        p = q;
    } else {
        atomic_fetch_sub_explicit(&proto.unexpected, 1, memory_order_relaxed);
    }
    struct proto_hdr rts = *proto_hdr_of(p);
    if (size > r->size || size == 0) {
        send_rtr(p, &rts, PROTO_RTR_NONE, 0, 0, 0);
        proto_finish(r, size ? MPIV_ERR_TRUNCATE : MPIV_SUCCESS);
        return;
    }
    /* The read path, when the sender offered it (the body, checked by
     * proto_decode); the read runs right here, on whichever thread
     * matched (see the top: why not in pieces). */
    if (p->len == sizeof rts + sizeof(struct proto_rts) && read_rts(r, p, &rts, server))
        return;
    int rc = r->reg_err;
    if (rc == MPIV_SUCCESS && !r->mr)
        rc = srv_mr_get(r->buf, size, &r->mr); /* a small buffer (I6's RTS), or one
                                                  we meant to read into */
    uint64_t hnd = 0, raddr = 0, rkey = 0;
    if (rc == MPIV_SUCCESS) {
        /* read before the handle publishes r: from then on the server may
         * complete it (and release r->mr) as soon as the RTR is out */
        raddr = r->mr->raddr + ((uintptr_t)r->buf - r->mr->base);
        rkey = r->mr->rkey;
        r->left = size;
        r->err = MPIV_SUCCESS;
        hnd = proto_handle_make(r);
        if (!hnd)
            rc = util_err(MPIV_ERR_NO_RESOURCES, "every rendezvous handle is in use");
    }
    if (rc != MPIV_SUCCESS) {
        /* Refuse: the sender's send fails; so does our receive. */
        send_rtr(p, &rts, PROTO_RTR_FAILED, 0, 0, 0);
        proto_finish(r, rc);
        return;
    }
    /* From here the handle table owns r: the immediate may complete it
     * before send_rtr returns. Only a successful take gets it back. */
    if (send_rtr(p, &rts, PROTO_RTR_OK, proto_handle_imm(hnd), raddr, rkey) == MPIV_SUCCESS)
        return;
    struct mpiv_request *mine = proto_handle_take(hnd);
    if (!mine)
        return;
    proto_finish(mine, MPIV_ERR_NET);
    /* I7: the sender waits for an answer; try once more with a refusal,
     * so that its send fails instead of waiting forever. If that cannot go
     * either, the transport is broken towards it and the server declares
     * it failed (the job then ends through the launcher). */
    pkt_t *q = proto_pkt_try(server);
    if (q && send_rtr(q, &rts, PROTO_RTR_FAILED, 0, 0, 0) == MPIV_SUCCESS)
        return;
    util_log_error("cannot answer rank %d's rendezvous at all", rts.src);
}

/* Server (or a sender to its own rank): an EAGER or RTS packet arrived. */
static void on_eager_or_rts(pkt_t *p)
{
    struct proto_hdr *h = proto_hdr_of(p);
    ht_key k = ht_make_key(h->ctx, (uint32_t)h->src, h->tag);
    /* its arrival stamp (match.c, M4), before a copy is made of it;
     * relaxed: one counter, whose order is all that is used */
    *proto_stamp_of(p) = atomic_fetch_add_explicit(&proto_arrivals, 1, memory_order_relaxed);
    pkt_t *copy = proto_copy_if_crowded(p);
    pkt_t *q = copy ? copy : p;
    ht_value v = ht_match_or_insert(proto.ht, k, ht_val(q, HT_KIND_PKT));
    if (util_unlikely(v == HT_DEFER))
        v = proto_arrive_ordered(k, q); /* a wildcard receive or probe waits */
    if (copy) {
        if (v == HT_EMPTY) {
            /* the table owns the copy until a receive takes it */
            pkt_put_server(proto.pool, p);
            return;
        }
        /* a receive was waiting: the copy was never shared */
        heap_copy_free(copy);
        atomic_fetch_add_explicit(&proto.unexpected, 1, memory_order_relaxed);
    }
    if (v != HT_EMPTY)
        proto_match(ht_ptr(v), p, true);
    /* else the table owns p until a receive takes it (I2) */
}

/* --- the sender's side of a rendezvous ----------------------------------------- */

static void send_write_done(void *ctx, int err)
{
    struct mpiv_request *r = ctx;
    if (err != MPIV_SUCCESS && r->err == MPIV_SUCCESS) {
        r->err = err;
        send_abort(r->peer, (uint32_t)r->handle, err, NULL, true);
    }
    if (--r->pieces_out == 0)
        proto_finish(r, r->err);
}

/* Server, at the sender: the receiver matched our RTS. */
static void on_rtr(pkt_t *p)
{
    struct proto_hdr *h = proto_hdr_of(p);
    int peer = h->src;
    struct mpiv_request *r = proto_handle_peek(h->handle);
    /* Only the server thread takes send handles once the RTS is out (the
     * sending thread takes one back only when the RTS could not be sent;
     * a FIN to our own rank runs here on the receiving thread, for a
     * send nobody else takes), so what peek saw is still there for take. */
    bool fin = h->status == PROTO_RTR_FIN || h->status == PROTO_RTR_FIN_FAILED;
    if (!r || r->kind != PROTO_REQ_SEND || r->peer != peer || r->ctx != h->ctx ||
        (uint32_t)r->tag != h->tag || r->size != h->size || (fin && !r->rdv_read) ||
        !proto_handle_take(h->handle)) {
        /* (a FIN for a send that offered no read would complete it with
         * nothing moved) */
        proto_count_drop(PROTO_DROP_HANDLE, peer, fin ? "a FIN" : "an RTR");
        pkt_put_server(proto.pool, p);
        return;
    }
    if (fin) {
        atomic_fetch_add_explicit(&n_fins_received, 1, memory_order_relaxed);
        int err = MPIV_SUCCESS;
        if (h->status == PROTO_RTR_FIN_FAILED)
            err = util_err(MPIV_ERR_NET, "rank %d could not read a %zu-byte message (tag %d) "
                           "from this rank", peer, r->size, r->tag);
        pkt_put_server(proto.pool, p);
        proto_finish(r, err);
        return;
    }
    if (h->status == PROTO_RTR_NONE) {
        /* truncated (the receiver reports it) or nothing to write */
        pkt_put_server(proto.pool, p);
        proto_finish(r, MPIV_SUCCESS);
        return;
    }
    if (h->status == PROTO_RTR_FAILED) {
        pkt_put_server(proto.pool, p);
        util_err(MPIV_ERR_PEER, "rank %d could not take a %zu-byte message (tag %d)", peer,
                 r->size, r->tag);
        proto_finish(r, MPIV_ERR_PEER);
        return;
    }
    struct proto_rtr *body = (struct proto_rtr *)(h + 1);
    uint64_t raddr = body->raddr, rkey = body->rkey;
    uint32_t rimm = body->rhandle;
    r->handle = rimm; /* for an ABORT if a write fails */
    size_t piece = proto.max_write;
    size_t n = (r->size + piece - 1) / piece;
    r->pieces_out = (int)n + 1; /* + 1 while we post: no early finish */
    r->err = MPIV_SUCCESS;
    for (size_t i = 0; i < n; i++) {
        size_t off = i * piece;
        size_t len = r->size - off < piece ? r->size - off : piece;
        int rc = srv_rdma_write_imm((const char *)r->buf + off, len, r->mr, peer, raddr + off,
                                    rkey, rimm, send_write_done, r);
        if (rc != MPIV_SUCCESS) {
            /* what was not posted will never complete */
            r->pieces_out -= (int)(n - i - 1);
            r->err = rc;
            send_abort(peer, rimm, rc, p, true);
            p = NULL;
            send_write_done(r, MPIV_SUCCESS); /* the unposted piece i */
            break;
        }
    }
    if (p)
        pkt_put_server(proto.pool, p);
    send_write_done(r, MPIV_SUCCESS); /* the + 1 */
}

/* --- the receiver's side of a rendezvous --------------------------------------- */

/* The live rendezvous receive that rimm names, if it waits for `len` more
 * bytes from `src`; else NULL (the caller drops what named it). */
static struct mpiv_request *recv_named(uint32_t rimm, int src, size_t len)
{
    uint64_t hnd = proto_handle_from_imm(rimm);
    struct mpiv_request *r = hnd ? proto_handle_peek(hnd) : NULL;
    if (!r || r->kind != PROTO_REQ_RECV || r->status.source != src || len > r->left)
        return NULL;
    return r;
}

/* Server, at the receiver: a piece of a rendezvous has landed (or, with
 * err, the transport says a write to us failed). */
void proto_on_imm(uint32_t imm, int src, size_t len, int err)
{
    struct mpiv_request *r = recv_named(imm, src, err ? 0 : len);
    if (!r) {
        proto_count_drop(PROTO_DROP_IMM, src, "a rendezvous write");
        return;
    }
    if (err == MPIV_SUCCESS) {
        r->left -= len;
        if (r->left > 0)
            return;
    }
    /* Only the server thread takes receive handles after the RTR is out,
     * so the peek above still holds. */
    proto_handle_take(r->handle);
    proto_finish(r, err);
}

static void on_abort(pkt_t *p)
{
    struct proto_hdr *h = proto_hdr_of(p);
    int src = h->src;
    int err = h->status;
    atomic_fetch_add_explicit(&n_aborts_received, 1, memory_order_relaxed);
    util_log_info("rank %d says rendezvous %#llx failed", src, (unsigned long long)h->handle);
    struct mpiv_request *r = h->handle <= UINT32_MAX ? recv_named((uint32_t)h->handle, src, 0)
                                                      : NULL;
    pkt_put_server(proto.pool, p);
    if (!r) {
        proto_count_drop(PROTO_DROP_HANDLE, src, "an ABORT");
        return;
    }
    proto_handle_take(r->handle);
    util_log_warn("rank %d aborted a %zu-byte rendezvous (tag %d): %s", src, r->status.size,
                  r->status.tag, mpiv_strerror(err));
    proto_finish(r, err == MPIV_ERR_TRUNCATE ? MPIV_ERR_NET : err);
}

/* Server: a decoded packet of the given type. */
static void on_decoded(pkt_t *p, int type)
{
    switch (type) {
    case PROTO_EAGER:
    case PROTO_RTS:
        on_eager_or_rts(p);
        break;
    case PROTO_RTR:
        on_rtr(p);
        break;
    case PROTO_ABORT:
        on_abort(p);
        break;
    default: /* PROTO_CREDIT: its credit was all it carried */
        pkt_put_server(proto.pool, p);
        break;
    }
}

/* Server: every arrived packet, before anything else looks at it. */
void proto_on_packet(pkt_t *p)
{
    int src = p->peer;
    struct proto_hdr h;
    int type = proto_decode_data(p->data, p->len, src, &h);
    if (type < 0) {
        pkt_put_server(proto.pool, p);
        return;
    }
    if (h.credit && src != proto.rank)
        credit_give(src, h.credit);
    on_decoded(p, type);
}

/* Server: an EAGER message lent in place (h: its decoded header, payload:
 * its h->size bytes, valid until we return). A receive waiting for it gets
 * it straight from there, else a copy waits in the table, in a heap block
 * shaped like a packet (I5's form; bounded by eager credit, I6), not in
 * the pool packet lent beside it (`spare`). Why: the message is copied
 * either way, and a copy takes the few lines it needs from pktcopy's
 * dense cells, while a held pool packet made the server post a fresh
 * one, and the first use of each fresh packet is a page fault (packets
 * are a page or more apart): with the default pool, hundreds of faults
 * (I5's half of it) for a job's first early messages (docs/perf/sched.md,
 * "Early messages in heap copies"). Only when no heap block can be had
 * does a message that fits go into spare (returns true: spare is taken). */
static bool on_eager_data(const struct proto_hdr *h, const unsigned char *payload, int src,
                          pkt_t *spare)
{
    ht_key k = ht_make_key(h->ctx, (uint32_t)src, h->tag);
    /* A receive waits under k only while no message of k does (the table
     * holds one kind per key), so taking it keeps FIFO order. */
    ht_value v = ht_match(proto.ht, k, HT_KIND_PKT);
    if (v != HT_EMPTY && v != HT_DEFER) {
        eager_complete(ht_ptr(v), h, payload, true);
        return false;
    }
    /* HT_DEFER: a wildcard receive waits, the copy below goes in order */
    size_t len = sizeof *h + (size_t)h->size;
    pkt_t *copy = heap_copy_new(len);
    if (!copy && len <= pkt_data_size(proto.pool)) {
        memcpy(spare->data, h, sizeof *h);
        memcpy(spare->data + sizeof *h, payload, (size_t)h->size);
        spare->len = (uint32_t)len;
        spare->peer = src;
        on_eager_or_rts(spare); /* matches a receive posted meanwhile */
        return true;
    }
    if (!copy)
        util_fatal("out of memory for a %zu-byte message from rank %d", (size_t)h->size, src);
    memcpy(copy->data, h, sizeof *h);
    memcpy(copy->data + sizeof *h, payload, (size_t)h->size);
    copy->len = (uint32_t)len;
    copy->peer = src;
    *proto_stamp_of(copy) = atomic_fetch_add_explicit(&proto_arrivals, 1, memory_order_relaxed);
    v = ht_match_or_insert(proto.ht, k, ht_val(copy, HT_KIND_PKT));
    if (util_unlikely(v == HT_DEFER))
        v = proto_arrive_ordered(k, copy);
    if (v != HT_EMPTY)
        proto_match(ht_ptr(v), copy, true); /* a receive came in between */
    return false;
}

/* A batch of lent arrivals, decoded and partly matched ahead by
 * proto_on_batch, for proto_on_data to finish one by one (the server
 * hands it the same records in the same order, srv_batch_handler). Only
 * the progress lock's holder touches it: handlers run one at a time. */
static struct {
    int n, next;
    struct pre_arrival {
        const unsigned char *data; /* which record: its lent address */
        int type;                  /* proto_decode_data's verdict     */
        struct proto_hdr h;        /* the header it checked            */
        struct mpiv_request *r;    /* the receive it matched, or NULL  */
    } a[SRV_BATCH];
} pre;

/* Server: a batch of arrivals is about to be handled (srv_batch_handler).
 * Each is decoded once, here. A run of eager messages under one key (a
 * window of sends with one tag) takes its receives with one lookup
 * (ht_match_many) instead of one each, in order: the run's first message
 * gets the oldest receive. MPI's order holds because a key is matched
 * ahead only while every earlier arrival of the batch under it was too:
 * the first one that is not (an RTS, or a message no receive waits for
 * yet) blocks its key for the rest of the batch, whose arrivals under it
 * then match one by one as they are handled, against the receives left.
 * A receive taken ahead is for a moment neither in the table nor
 * complete: a cancel or a failed peer's sweep that runs meanwhile (an
 * error event of the same poll) does not find it, and it completes with
 * its message, as it would had the match come first. When the table has
 * grown (a backlog: its lookups miss the cache), the lines the lookups
 * will read are asked for first, so that the misses overlap. */
void proto_on_batch(const struct srv_lent *a, int n)
{
    if (util_unlikely(pre.next != pre.n))
        util_fatal("protocol: %d arrivals matched ahead were never handled",
                   pre.n - pre.next);
    pre.n = pre.next = 0;
    if (n > SRV_BATCH)
        n = SRV_BATCH; /* the rest is handled as it comes */
    bool grown = ht_grown(proto.ht);
    ht_key keys[SRV_BATCH], blocked[SRV_BATCH];
    int nblocked = 0;
    for (int i = 0; i < n; i++) {
        struct pre_arrival *p = &pre.a[i];
        p->data = a[i].data;
        p->r = NULL;
        p->type = proto_decode_data(a[i].data, a[i].len, a[i].src, &p->h);
        if (p->type == PROTO_EAGER || p->type == PROTO_RTS) {
            keys[i] = ht_make_key(p->h.ctx, (uint32_t)a[i].src, p->h.tag);
            if (grown)
                ht_prefetch(proto.ht, keys[i]);
        }
    }
    pre.n = n;
    for (int i = 0; i < n;) {
        int type = pre.a[i].type;
        if (type != PROTO_EAGER && type != PROTO_RTS) {
            i++; /* no key: matches nothing */
            continue;
        }
        ht_key k = keys[i];
        int m = 1;
        if (type == PROTO_EAGER)
            while (i + m < n && pre.a[i + m].type == PROTO_EAGER && keys[i + m] == k)
                m++;
        /* A lone arrival gains nothing here (one lookup either way) and,
         * with no receive waiting, would pay two: it goes its own way. */
        bool free_k = m > 1;
        for (int b = 0; b < nblocked && free_k; b++)
            free_k = blocked[b] != k;
        size_t got = 0;
        if (free_k) {
            ht_value v[SRV_BATCH];
            got = ht_match_many(proto.ht, k, HT_KIND_PKT, v, (size_t)m);
            for (size_t j = 0; j < got; j++)
                pre.a[i + (int)j].r = ht_ptr(v[j]);
            if (got)
                atomic_store_explicit(&n_matched_ahead,
                                      atomic_load_explicit(&n_matched_ahead,
                                                           memory_order_relaxed) + got,
                                      memory_order_relaxed);
        }
        if (got < (size_t)m) /* (a key blocked already may come twice) */
            blocked[nblocked++] = k;
        i += m;
    }
}

/* Server: an arrival lent in place (srv_data_handler). */
bool proto_on_data(const unsigned char *data, size_t len, int src, pkt_t *spare)
{
    struct proto_hdr h;
    int type;
    struct mpiv_request *r = NULL;
    if (pre.next < pre.n) { /* decoded by proto_on_batch */
        struct pre_arrival *p = &pre.a[pre.next++];
        if (util_unlikely(p->data != data))
            util_fatal("protocol: an arrival handled out of its batch's order");
        type = p->type;
        h = p->h;
        r = p->r;
    } else {
        type = proto_decode_data(data, len, src, &h);
    }
    if (type < 0)
        return false;
    if (h.credit && src != proto.rank)
        credit_give(src, h.credit);
    if (r) { /* matched ahead with the rest of its run */
        eager_complete(r, &h, data + sizeof h, true);
        return false;
    }
    if (type == PROTO_EAGER)
        return on_eager_data(&h, data + sizeof h, src, spare);
    /* The rest are a header and at most an RTR body: into the packet,
     * with the checked header over what was copied. */
    memcpy(spare->data, data, len);
    memcpy(spare->data, &h, sizeof h);
    spare->len = (uint32_t)len;
    spare->peer = src;
    on_decoded(spare, type);
    return true;
}

/* --- a failed peer (I7) ---------------------------------------------------------- */

static bool with_peer(struct mpiv_request *r, void *arg)
{
    int rank = *(int *)arg;
    return r->kind == PROTO_REQ_SEND ? r->peer == rank : r->status.source == rank;
}

static void fail_peer_req(struct mpiv_request *r, void *arg)
{
    util_err(MPIV_ERR_PEER, "rank %d failed during the operation", *(int *)arg);
    proto_finish(r, MPIV_ERR_PEER);
}

static int recv_from(ht_key k, ht_value v, void *arg)
{
    return ht_kind(v) == HT_KIND_REQ && (int)HT_KEY_RANK(k) == *(int *)arg;
}

/* A wildcard receive or probe waiting for this source only (ANY_TAG). One
 * with MPIV_ANY_SOURCE stays pending: another rank may still match it. */
static bool wild_from(struct mpiv_request *r, void *arg) { return r->peer == *(int *)arg; }

static void fail_posted(ht_value v, void *arg) { fail_peer_req(ht_ptr(v), arg); }

void proto_on_peer_failed(int rank)
{
    util_log_error("rank %d failed: operations pending with it fail", rank);
    proto_handle_take_if(with_peer, &rank, fail_peer_req);
    /* Receives posted for it would wait forever; messages it sent before
     * stay, and later receives may still take them. */
    ht_remove_if(proto.ht, recv_from, &rank, fail_posted);
    proto_wild_take_if(wild_from, &rank, fail_peer_req);
}

static int is_req(ht_key k, ht_value v, void *arg)
{
    (void)k;
    return ht_kind(v) == HT_KIND_REQ && ht_ptr(v) == arg;
}

static void nothing(ht_value v, void *arg)
{
    (void)v;
    (void)arg;
}

bool proto_cancel_recv(struct mpiv_request *r)
{
    if (r->wild)
        return proto_cancel_wild(r);
    return ht_remove_if(proto.ht, is_req, r, nothing) > 0;
}

/* --- operations --------------------------------------------------------------- */

static void req_init(struct mpiv_request *r, int kind, void *buf, size_t size, int peer,
                     int tag, int ctx)
{
    sched_sync_init(&r->sync);
    r->kind = (uint8_t)kind;
    r->ctx = (uint16_t)ctx;
    r->rdv_read = false;
    r->buffered = false;
    r->wild = false; /* listed is only read when wild */
    r->seq = 0;
    r->buf = buf;
    r->size = size;
    r->peer = peer;
    r->tag = tag;
    r->mr = NULL;
    r->handle = 0;
    r->reg_err = MPIV_SUCCESS;
    r->comm = NULL;
    r->left = 0;
    r->pieces_out = 0;
    r->err = MPIV_SUCCESS;
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
    on_eager_or_rts(p);
    return MPIV_SUCCESS;
}

/* An eager message of at most a packet that srv_send_inline could not send
 * now: on shm a copy of it joins the send queue, so that the send
 * completes at once (a ULT that sends one message ends and gives its
 * stack back) and takes no pool packet, which on shm serve receives (Q1
 * in server.c). Past the cap of queued copies it waits for the queue to
 * shrink, still holding no packet, and tries again (the ring first, as
 * the queue may have emptied). SRV_INLINE_LATER: no copies to dest (ofi,
 * ibv, or a fault hook set): send it in a packet. */
static int eager_copy(int dest, const struct proto_hdr *hd, const void *buf, size_t size)
{
    for (;;) {
        int rc = srv_send_copy(dest, hd, sizeof *hd, buf, size);
        if (rc != SRV_COPY_FULL)
            return rc;
        atomic_fetch_add_explicit(&n_copy_waits, 1, memory_order_relaxed);
        /* a ULT too, as in proto_pkt_alloc: without a server thread the
         * queue drains only when someone progresses */
        srv_progress();
        sched_yield_now();
        rc = srv_send_inline(dest, hd, sizeof *hd, buf, size);
        if (rc != SRV_INLINE_LATER)
            return rc;
    }
}

/* send_inline's "r waits in the send queue": its send is not complete yet. */
#define SEND_QUEUED (-1000)

/* A send that waited in the send queue (srv_send_ref) left, or failed. */
static void ref_sent(void *ctx, int err) { proto_finish(ctx, err); }

/* An eager message (its credit taken) straight into the transport, no
 * packet (shm), when nothing is queued ahead of it. Else, when the caller
 * has a request r (set up, pending) to complete later, r's send joins the
 * send queue by reference (SEND_QUEUED): the queue copies its payload
 * into the ring once there is room, and completes r. Without r, up to a
 * packet's size, a copy joins the queue (eager_copy). MPIV_SUCCESS: sent
 * or copied, the send is complete; SRV_INLINE_LATER: not sent, the packet
 * path must carry it, in order; else the error. The caller checked
 * size + header <= inline_max[dest].
 *
 * Why a reference where there is a request: a window larger than the ring
 * (64 messages of 16 KiB in a ring of 1 MiB, the default with eight ranks
 * on a host) would otherwise go past the packet's size as an RTS behind a
 * copy (I8), and below it as a copy, each a copy and maybe a trip more
 * than waiting for room. mpiv_send's own path (no request) keeps the
 * copy: it then returns at once, which a ULT that sends one message and
 * ends needs (its stack goes back), and which I8 promises it. */
static inline __attribute__((always_inline)) int
send_inline(const void *buf, size_t size, int dest, int tag, int ctx, struct mpiv_request *r)
{
    struct proto_hdr hd;
    hdr_init(&hd, PROTO_EAGER, dest);
    hd.ctx = (uint16_t)ctx;
    hd.tag = (uint32_t)tag;
    hd.size = size;
    int rc = srv_send_inline(dest, &hd, sizeof hd, buf, size);
    if (rc == SRV_INLINE_LATER && r) {
        rc = srv_send_ref(dest, &hd, sizeof hd, buf, size, ref_sent, r);
        if (rc == MPIV_SUCCESS)
            return SEND_QUEUED; /* the header's credit travels with it */
    }
    if (rc == SRV_INLINE_LATER && size <= proto.eager_limit)
        rc = eager_copy(dest, &hd, buf, size);
    if (rc != MPIV_SUCCESS)
        credit_unsent(&hd, dest);
    return rc;
}

/* Sends r (req_init done) as an RTS: r waits in the handle table for the
 * receiver's answer. On failure r is not pending. */
static int send_rts(struct mpiv_request *r)
{
    size_t size = r->size;
    int dest = r->peer;
    if (size) {
        int rc = srv_mr_get(r->buf, size, &r->mr);
        if (rc != MPIV_SUCCESS)
            return rc;
    }
    pkt_t *p = proto_pkt_alloc();
    struct proto_hdr *h = proto_hdr_of(p);
    hdr_init(h, PROTO_RTS, dest);
    h->ctx = r->ctx;
    h->tag = (uint32_t)r->tag;
    h->size = size;
    p->len = sizeof *h;
    /* Offer the receiver a read when it can read us (on one host): then
     * the bytes move one trip after the RTS. The buffer stays registered
     * all the same, for the write path should the read not be possible
     * there after all. Written before the handle publishes r. */
    if (size && !atomic_load_explicit(&proto.rdv_write_only, memory_order_relaxed) &&
        srv_can_read(dest)) {
        struct proto_rts *body = (struct proto_rts *)(h + 1);
        body->raddr = r->mr->raddr + ((uintptr_t)r->buf - r->mr->base);
        body->rkey = r->mr->rkey;
        p->len += sizeof *body;
        r->rdv_read = true;
    }
    h->handle = proto_handle_make(r);
    if (!h->handle) {
        pkt_put(proto.pool, sched_worker_id(), p);
        req_put_mr(r);
        return util_err(MPIV_ERR_NO_RESOURCES, "every rendezvous handle is in use");
    }
    uint64_t hnd = h->handle;
    int rc = proto_deliver(p, dest);
    if (rc != MPIV_SUCCESS && proto_handle_take(hnd)) {
        req_put_mr(r);
        return rc;
    }
    return MPIV_SUCCESS;
}

/* sync: a synchronous send, always an RTS (see proto_issend). */
static inline __attribute__((always_inline)) int
isend(const void *buf, size_t size, int dest, int tag, int ctx, struct mpiv_request *r, bool sync)
{
    req_init(r, PROTO_REQ_SEND, (void *)buf, size, dest, tag, ctx);
    size_t eager_max = proto_eager_max(dest);
    long cost = credit_cost(size);
    bool eager = !sync && size <= eager_max &&
                 (dest == proto.rank || !cost || credit_take(dest, cost));
    if (eager && size + sizeof(struct proto_hdr) <= proto.lim[dest].inline_max) {
        int rc = send_inline(buf, size, dest, tag, ctx, r);
        if (rc == MPIV_SUCCESS) {
            finish_unseen(r);
            return MPIV_SUCCESS;
        }
        if (rc == SEND_QUEUED)
            return MPIV_SUCCESS;
        if (rc != SRV_INLINE_LATER)
            return rc;
        if (size > proto.eager_limit) {
            /* too large for a packet: an RTS, which keeps the order */
            credit_add(dest, cost);
            eager = false;
        }
    }
    if (!eager) {
        /* I8: a message that could have gone eagerly completes at once all
         * the same, from a copy */
        struct mpiv_request *b = NULL;
        if (!sync && size <= eager_max) {
            atomic_fetch_add_explicit(&n_eager_as_rts, 1, memory_order_relaxed);
            b = buffered_new(buf, size, dest);
        }
        if (!b)
            return send_rts(r);
        req_init(b, PROTO_REQ_SEND, b + 1, size, dest, tag, ctx);
        b->buffered = true;
        int rc = send_rts(b);
        if (rc != MPIV_SUCCESS) {
            buffered_free(b);
            return rc;
        }
        finish_unseen(r);
        return MPIV_SUCCESS;
    }
    pkt_t *p = proto_pkt_alloc();
    struct proto_hdr *h = proto_hdr_of(p);
    hdr_init(h, PROTO_EAGER, dest);
    h->ctx = (uint16_t)ctx;
    h->tag = (uint32_t)tag;
    h->size = size;
    if (size)
        memcpy(h + 1, buf, size);
    p->len = (uint32_t)(sizeof *h + size);
    int rc = proto_deliver(p, dest);
    if (rc != MPIV_SUCCESS)
        return rc;
    finish_unseen(r);
    return MPIV_SUCCESS;
}

int proto_isend(const void *buf, size_t size, int dest, int tag, int ctx, struct mpiv_request *r)
{
    return isend(buf, size, dest, tag, ctx, r, false);
}

/* The RTS is the acknowledgement a synchronous send needs: every answer
 * to it (FIN, RTR, or RTR NONE for an empty or truncated message, or a
 * refusal) comes from the receiver once a receive matched it, and the
 * send completes only on that answer (or on its peer's failure). */
int proto_issend(const void *buf, size_t size, int dest, int tag, int ctx,
                 struct mpiv_request *r)
{
    return isend(buf, size, dest, tag, ctx, r, true);
}

void proto_imrecv(void *buf, size_t size, pkt_t *msg, struct mpiv_request *r)
{
    const struct proto_hdr *h = proto_hdr_of(msg);
    req_init(r, PROTO_REQ_RECV, buf, size, h->src, (int)h->tag, h->ctx);
    /* a probe on a communicator took it: its status names ranks of that
     * communicator (before the match: the RTR reuses the packet) */
    r->comm = comm_of_ctx(h->ctx);
    proto_match(r, msg, false);
}

int proto_irecv(void *buf, size_t size, int src, int tag, int ctx, struct mpiv_request *r)
{
    req_init(r, PROTO_REQ_RECV, buf, size, src, tag, ctx);
    /* Ranks and tags were checked: only a wildcard is negative. */
    _Static_assert(MPIV_ANY_SOURCE < 0 && MPIV_ANY_TAG < 0, "wildcards are negative");
    if (util_unlikely((src | tag) < 0)) {
        /* no key: match.c's ordered path (its buffer registers at the
         * match, like one we meant to read into) */
        r->wild = true;
        r->listed = false;
        return proto_post_wild(r, src, tag, ctx);
    }
    /* A buffer that can only be filled by a rendezvous is registered here,
     * on the receiving thread, so that the server never stalls all
     * progress registering a large buffer when the RTS finds it posted. A
     * failure is kept for the match (which refuses the message). Not when
     * we can read from src: its RTS then offers a read, which needs no
     * registration here; an RTS that takes the write path after all (a
     * refused read, or a test's rdv_write_only) registers at the match,
     * where on shm that costs no system call. */
    if (size > proto_eager_max(src) && !srv_can_read(src))
        r->reg_err = srv_mr_get(buf, size, &r->mr);
    ht_key k = ht_make_key((unsigned)ctx, (uint32_t)src, (uint32_t)tag);
    if (ht_grown(proto.ht)) {
        /* A backlog: this lookup and the next ones miss the cache. A
         * program that posts many receives numbers them (tag = the index
         * of a task, a vertex, a row), so ask now for the bucket that the
         * receive of tag + 8 will read, and for the stripe line that tag
         * + 16's will start from (prefetching a bucket reads its stripe,
         * which must not miss in turn). A wrong guess costs two hashes. */
        ht_prefetch_stripe(proto.ht, ht_make_key((unsigned)ctx, (uint32_t)src, (uint32_t)tag + 16));
        ht_prefetch(proto.ht, ht_make_key((unsigned)ctx, (uint32_t)src, (uint32_t)tag + 8));
    }
    ht_value v = ht_match_or_insert(proto.ht, k, ht_val(r, HT_KIND_REQ));
    if (util_unlikely(v == HT_DEFER))
        v = proto_post_ordered(k, r); /* a wildcard receive waits: numbered */
    if (v != HT_EMPTY) {
        proto_match(r, ht_ptr(v), false);
    } else if (util_unlikely(!srv_none_failed()) && !srv_peer_alive(src) && src != proto.rank &&
               proto_cancel_recv(r)) {
        /* I7: a rank declared failed before we were in the table sends
         * nothing more (one declared after finds us in its sweep). */
        req_put_mr(r);
        return util_err(MPIV_ERR_PEER, "rank %d has failed: nothing more will come from it", src);
    }
    return MPIV_SUCCESS;
}

int proto_p2p_init(void)
{
    size_t n = (size_t)proto.size;
    proto.credit = calloc(n, sizeof *proto.credit);
    proto.owed = calloc(n, sizeof *proto.owed);
    proto.buffered = calloc(n, sizeof *proto.buffered);
    proto.lim = calloc(n, sizeof *proto.lim);
    if (!proto.credit || !proto.owed || !proto.buffered || !proto.lim) {
        proto_p2p_fini();
        return util_err(MPIV_ERR_NO_RESOURCES, "out of memory for %zu ranks' credit", n);
    }
    atomic_store_explicit(&proto.buffered_copies, 0, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        atomic_init(&proto.credit[i], proto.credit_max);
        atomic_init(&proto.owed[i], 0);
        atomic_init(&proto.buffered[i], 0);
        size_t m = (int)i == proto.rank ? 0 : srv_inline_max((int)i);
        proto.lim[i].inline_max = m;
        /* what a packet holds, or more where the transport copies
         * messages straight into the peer's memory */
        m = m > sizeof(struct proto_hdr) ? m - sizeof(struct proto_hdr) : 0;
        proto.lim[i].eager_max = m > proto.eager_limit ? m : proto.eager_limit;
    }
    return MPIV_SUCCESS;
}

/* An arrived message, not a receive still posted (its owner's request). */
static int is_arrival(ht_key k, ht_value v, void *arg)
{
    (void)k;
    (void)arg;
    return ht_kind(v) == HT_KIND_PKT;
}

static void arrival_drop(ht_value v, void *arg)
{
    (void)arg;
    pkt_t *p = ht_ptr(v);
    if (proto_is_heap(p))
        heap_copy_free(p);
    /* a pool packet goes with the pool */
}

size_t proto_unreceived_drop(void)
{
    return ht_remove_if(proto.ht, is_arrival, NULL, arrival_drop);
}

void proto_p2p_fini(void)
{
    free(proto.credit);
    free(proto.owed);
    free(proto.buffered);
    free(proto.lim);
    proto.credit = NULL;
    proto.owed = NULL;
    proto.buffered = NULL;
    proto.lim = NULL;
}

/* --- public API --------------------------------------------------------------- */

/* wild: a receive's source and tag, which may be MPIV_ANY_SOURCE and
 * MPIV_ANY_TAG (tested only once the plain range test failed). */
static int check_args_wild(const void *buf, size_t size, int peer, int tag, bool wild,
                           const char *fn)
{
    if (util_unlikely(!proto.initialized))
        return util_err(MPIV_ERR_STATE, "%s: MPIv is not initialised (call mpiv_init)", fn);
    if (util_unlikely(peer < 0 || peer >= proto.size) && !(wild && peer == MPIV_ANY_SOURCE))
        return util_err(MPIV_ERR_RANK, "%s: rank %d is outside [0, %d)%s", fn, peer, proto.size,
                        wild ? " and is not MPIV_ANY_SOURCE" : "");
    if (util_unlikely(tag < 0 || tag > MPIV_TAG_MAX) && !(wild && tag == MPIV_ANY_TAG))
        return util_err(MPIV_ERR_TAG, "%s: tag %d is outside [0, MPIV_TAG_MAX]%s", fn, tag,
                        wild ? " and is not MPIV_ANY_TAG" : "");
    if (util_unlikely(!buf && size))
        return util_err(MPIV_ERR_ARG, "%s: NULL buffer with size %zu", fn, size);
    return MPIV_SUCCESS;
}

static inline int check_args(const void *buf, size_t size, int peer, int tag, const char *fn)
{
    return check_args_wild(buf, size, peer, tag, false, fn);
}

int mpiv_send(const void *buf, size_t size, int dest, int tag)
{
    int rc = check_args(buf, size, dest, tag, __func__);
    if (rc)
        return rc;
    /* The common case needs no request: an eager message that goes
     * straight into the transport, or on shm joins its queue as a copy,
     * is complete when it returns. Else (no credit, larger than a packet
     * with the ring full, or a fault hook set) the credit goes back and
     * the general path below takes it again (and waits in the send queue
     * with its request), or takes the RTS. */
    if (size + sizeof(struct proto_hdr) <= proto.lim[dest].inline_max &&
        size <= proto_eager_max(dest)) {
        long cost = credit_cost(size);
        if (!cost || credit_take(dest, cost)) {
            rc = send_inline(buf, size, dest, tag, HT_CTX_USER, NULL);
            if (rc != SRV_INLINE_LATER)
                return rc;
            if (cost)
                credit_add(dest, cost);
        }
    }
    struct mpiv_request r;
    rc = proto_isend(buf, size, dest, tag, HT_CTX_USER, &r);
    if (rc)
        return rc;
    return proto_wait(&r, NULL);
}

int mpiv_recv(void *buf, size_t size, int source, int tag, mpiv_status_t *status)
{
    int rc = check_args_wild(buf, size, source, tag, true, __func__);
    if (rc)
        return rc;
    struct mpiv_request r;
    rc = proto_irecv(buf, size, source, tag, HT_CTX_USER, &r);
    if (rc)
        return rc;
    rc = proto_wait(&r, status);
    if (rc == MPIV_ERR_TRUNCATE)
        util_err(rc, "mpiv_recv: a %zu-byte message from rank %d (tag %d) does not fit %zu bytes",
                 r.status.size, r.status.source, r.status.tag, size);
    return rc;
}

/* --- a ULT that starts with its message (mpiv_ult_spawn_recv) ----------------
 *
 * The receive is posted with a request of the runtime's own, and the ULT
 * is registered as that request's waiter before it ever ran: the
 * completion that would wake a ULT blocked in mpiv_recv makes this one
 * runnable instead (sched_ult_start_on), and only then does it get a
 * stack. So a million posted receives hold a million records and requests,
 * not a million stacks. The ULT copies the status out, frees the request
 * and calls the user's function; the request is never waited on (its
 * signal was consumed by the wake). */
struct recv_start {
    struct mpiv_request r; /* first: the heap block is the request's */
    mpiv_ult_fn fn;
    void *arg;
    mpiv_status_t *status;
};

static void *recv_started(void *p)
{
    struct recv_start *rs = p;
    *rs->status = rs->r.status; /* world ranks: the user context, no comm */
    mpiv_ult_fn fn = rs->fn;
    void *arg = rs->arg;
    free(rs);
    return fn(arg);
}

int mpiv_ult_spawn_recv(mpiv_ult_fn fn, void *arg, int worker, void *buf, size_t size, int source,
                        int tag, mpiv_status_t *status, mpiv_ult_t *ult)
{
    int rc = check_args_wild(buf, size, source, tag, true, __func__);
    if (rc)
        return rc;
    if (!fn)
        return util_err(MPIV_ERR_ARG, "%s: fn is NULL", __func__);
    if (!status)
        return util_err(MPIV_ERR_ARG, "%s: status is NULL (it is how the ULT learns the "
                                      "receive's outcome)", __func__);
    struct recv_start *rs = malloc(sizeof *rs);
    if (!rs)
        return util_err(MPIV_ERR_NO_RESOURCES, "%s: out of memory", __func__);
    *rs = (struct recv_start){.fn = fn, .arg = arg, .status = status};
    struct mpiv_ult *u = sched_ult_new(recv_started, rs, worker, ult, &rc, __func__);
    if (!u) {
        free(rs);
        return rc;
    }
    rc = proto_irecv(buf, size, source, tag, HT_CTX_USER, &rs->r);
    if (rc) {
        /* Nothing is pending (a peer known dead): the ULT starts at once
         * and finds why in its status, as if the receive had failed. */
        rs->r.status = (mpiv_status_t){.source = source, .tag = tag, .size = 0, .error = rc};
        sched_ult_start(u);
        return MPIV_SUCCESS;
    }
    /* As a waiter in proto_wait: registering with a CAS that the bias
     * owner's plain signal would not see needs the bias revoked first. */
    util_bias_claim();
    sched_ult_start_on(u, &rs->r.sync);
    return MPIV_SUCCESS;
}

/* The one switch on the operation. Inlined where op is a constant, so
 * that mpiv_isend and mpiv_irecv call the operation itself: a window of
 * small messages pays for every call level on this path. */
static inline __attribute__((always_inline)) int start_op(enum proto_op op, void *buf, size_t size,
                                                          int peer, int tag, int ctx,
                                                          struct mpiv_request *r)
{
    return op == PROTO_OP_SEND    ? proto_isend(buf, size, peer, tag, ctx, r)
           : op == PROTO_OP_SSEND ? proto_issend(buf, size, peer, tag, ctx, r)
                                  : proto_irecv(buf, size, peer, tag, ctx, r);
}

int proto_start(enum proto_op op, void *buf, size_t size, int peer, int tag, int ctx,
                struct mpiv_request *r)
{
    return start_op(op, buf, size, peer, tag, ctx, r);
}

static inline __attribute__((always_inline)) int
start_new(enum proto_op op, void *buf, size_t size, int peer, int tag, int ctx,
          const struct mpiv_comm *c, mpiv_request_t *req, const char *fn)
{
    struct mpiv_request *r = proto_req_new();
    if (util_unlikely(!r))
        return util_err(MPIV_ERR_NO_RESOURCES, "%s: out of memory for a request", fn);
    int rc = start_op(op, buf, size, peer, tag, ctx, r);
    if (util_unlikely(rc)) {
        proto_req_delete(r);
        return rc;
    }
    r->comm = c; /* only the owner reads it (proto_wait): after the start is fine */
    *req = r;
    return MPIV_SUCCESS;
}

int proto_start_new(enum proto_op op, void *buf, size_t size, int peer, int tag, int ctx,
                    const struct mpiv_comm *c, mpiv_request_t *req, const char *fn)
{
    return start_new(op, buf, size, peer, tag, ctx, c, req, fn);
}

static inline __attribute__((always_inline)) int start_nb(enum proto_op op, void *buf, size_t size,
                                                          int peer, int tag, mpiv_request_t *req,
                                                          const char *fn)
{
    if (util_unlikely(!req))
        return util_err(MPIV_ERR_ARG, "%s: req is NULL", fn);
    *req = MPIV_REQUEST_NULL;
    int rc = check_args_wild(buf, size, peer, tag, op == PROTO_OP_RECV, fn);
    if (util_unlikely(rc))
        return rc;
    return start_new(op, buf, size, peer, tag, HT_CTX_USER, NULL, req, fn);
}

int mpiv_isend(const void *buf, size_t size, int dest, int tag, mpiv_request_t *req)
{
    return start_nb(PROTO_OP_SEND, (void *)buf, size, dest, tag, req, __func__);
}

int mpiv_irecv(void *buf, size_t size, int source, int tag, mpiv_request_t *req)
{
    return start_nb(PROTO_OP_RECV, buf, size, source, tag, req, __func__);
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
    proto_req_delete(*req);
    *req = MPIV_REQUEST_NULL;
    return rc;
}

int mpiv_waitall(int n, mpiv_request_t reqs[], mpiv_status_t statuses[])
{
    if (n < 0 || (n > 0 && !reqs))
        return util_err(MPIV_ERR_ARG, "mpiv_waitall: %d requests at %p", n, (void *)reqs);
    int first = MPIV_SUCCESS;
    for (int i = 0; i < n; i++) {
        mpiv_status_t *st = statuses ? &statuses[i] : NULL;
        if (!reqs[i]) {
            empty_status(st);
            continue;
        }
        int rc = proto_wait(reqs[i], st);
        if (rc && !first)
            first = rc;
    }
    /* freed together: one call, one read of the thread's request cache */
    proto_req_delete_n(reqs, n);
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
    if (!proto_test(*req)) {
        *flag = 0;
        /* A thread polling in a loop must not starve the network: a
         * pthread never idles a worker, and without a server thread a ULT
         * that tests and yields keeps its worker busy too. */
        if (!sched_in_ult() || srv_inline())
            srv_progress();
        return MPIV_SUCCESS;
    }
    *flag = 1;
    return mpiv_wait(req, status);
}

/* --- wildcards, probes, completion calls (mpiv.h's block) -------------------- */

/* A receive's or probe's source and tag, wildcards allowed. */
static int check_match_args(int source, int tag, const char *fn)
{
    return check_args_wild(NULL, 0, source, tag, true, fn);
}

/* A status of world ranks given in c's ranks (c NULL: as it is). */
static void status_out(const struct mpiv_comm *c, const mpiv_status_t *st, mpiv_status_t *out)
{
    if (!out)
        return;
    *out = *st;
    if (c)
        out->source = comm_from_world(c, st->source);
}

int mpiv_ssend(const void *buf, size_t size, int dest, int tag)
{
    int rc = check_args(buf, size, dest, tag, __func__);
    if (rc)
        return rc;
    struct mpiv_request r;
    rc = proto_issend(buf, size, dest, tag, HT_CTX_USER, &r);
    if (rc)
        return rc;
    return proto_wait(&r, NULL);
}

int mpiv_issend(const void *buf, size_t size, int dest, int tag, mpiv_request_t *req)
{
    return start_nb(PROTO_OP_SSEND, (void *)buf, size, dest, tag, req, __func__);
}

int mpiv_sendrecv(const void *sendbuf, size_t sendsize, int dest, int sendtag, void *recvbuf,
                  size_t recvsize, int source, int recvtag, mpiv_status_t *status)
{
    int rc = check_args(sendbuf, sendsize, dest, sendtag, __func__);
    if (rc)
        return rc;
    rc = check_args_wild(recvbuf, recvsize, source, recvtag, true, __func__);
    if (rc)
        return rc;
    return proto_sendrecv_on(NULL, sendbuf, sendsize, dest, sendtag, HT_CTX_USER, recvbuf,
                             recvsize, source, recvtag, HT_CTX_USER, status);
}

int proto_sendrecv_on(const struct mpiv_comm *c, const void *sendbuf, size_t sendsize, int dest,
                      int sendtag, int sendctx, void *recvbuf, size_t recvsize, int source,
                      int recvtag, int recvctx, mpiv_status_t *status)
{
    struct mpiv_request rr, rs;
    int rc = proto_irecv(recvbuf, recvsize, source, recvtag, recvctx, &rr);
    if (rc)
        return rc;
    rr.comm = c; /* only we read it, in proto_wait */
    rc = proto_isend(sendbuf, sendsize, dest, sendtag, sendctx, &rs);
    if (rc) {
        /* rr lives on this stack: it must not stay posted */
        if (!proto_cancel_recv(&rr))
            proto_wait(&rr, NULL);
        return rc;
    }
    int rc2 = proto_wait(&rr, status);
    int rc1 = proto_wait(&rs, NULL);
    return rc2 ? rc2 : rc1;
}

int mpiv_iprobe(int source, int tag, int *flag, mpiv_status_t *status)
{
    int checked = check_match_args(source, tag, __func__);
    return proto_iprobe_on(checked, NULL, source, tag, HT_CTX_USER, flag, status, __func__);
}

int proto_iprobe_on(int checked, const struct mpiv_comm *c, int source, int tag, int ctx,
                    int *flag, mpiv_status_t *status, const char *fn)
{
    if (!flag)
        return util_err(MPIV_ERR_ARG, "%s: flag is NULL", fn);
    *flag = 0;
    if (checked)
        return checked;
    mpiv_status_t st;
    int rc = proto_iprobe(source, tag, ctx, flag, &st);
    if (*flag)
        status_out(c, &st, status);
    /* a thread probing in a loop must not starve the network (mpiv_test) */
    if (!*flag && (!sched_in_ult() || srv_inline()))
        srv_progress();
    return rc;
}

int mpiv_probe(int source, int tag, mpiv_status_t *status)
{
    int checked = check_match_args(source, tag, __func__);
    return proto_probe_on(checked, NULL, source, tag, HT_CTX_USER, status);
}

int proto_probe_on(int checked, const struct mpiv_comm *c, int source, int tag, int ctx,
                   mpiv_status_t *status)
{
    if (checked)
        return checked;
    mpiv_status_t st;
    int rc = proto_probe(source, tag, ctx, &st);
    if (!rc)
        status_out(c, &st, status);
    return rc;
}

/* A message handle is its packet; its header's context names the
 * communicator whose ranks mpiv_mrecv's status gives (proto_imrecv). */
int mpiv_improbe(int source, int tag, int *flag, mpiv_message_t *msg, mpiv_status_t *status)
{
    int checked = check_match_args(source, tag, __func__);
    return proto_improbe_on(checked, NULL, source, tag, HT_CTX_USER, flag, msg, status,
                            __func__);
}

int proto_improbe_on(int checked, const struct mpiv_comm *c, int source, int tag, int ctx,
                     int *flag, mpiv_message_t *msg, mpiv_status_t *status, const char *fn)
{
    if (!flag || !msg)
        return util_err(MPIV_ERR_ARG, "%s: NULL flag or msg", fn);
    *flag = 0;
    *msg = MPIV_MESSAGE_NULL;
    if (checked)
        return checked;
    pkt_t *p = NULL;
    mpiv_status_t st;
    int rc = proto_improbe(source, tag, ctx, &p, &st);
    if (p) {
        *flag = 1;
        *msg = (mpiv_message_t)p;
        status_out(c, &st, status);
    } else if (!sched_in_ult() || srv_inline()) {
        srv_progress();
    }
    return rc;
}

int mpiv_mprobe(int source, int tag, mpiv_message_t *msg, mpiv_status_t *status)
{
    int checked = check_match_args(source, tag, __func__);
    return proto_mprobe_on(checked, NULL, source, tag, HT_CTX_USER, msg, status, __func__);
}

int proto_mprobe_on(int checked, const struct mpiv_comm *c, int source, int tag, int ctx,
                    mpiv_message_t *msg, mpiv_status_t *status, const char *fn)
{
    if (!msg)
        return util_err(MPIV_ERR_ARG, "%s: msg is NULL", fn);
    *msg = MPIV_MESSAGE_NULL;
    if (checked)
        return checked;
    pkt_t *p = NULL;
    mpiv_status_t st;
    int rc = proto_mprobe(source, tag, ctx, &p, &st);
    if (rc)
        return rc;
    *msg = (mpiv_message_t)p;
    status_out(c, &st, status);
    return MPIV_SUCCESS;
}

static int check_mrecv(void *buf, size_t size, mpiv_message_t *msg, const char *fn)
{
    if (!proto.initialized)
        return util_err(MPIV_ERR_STATE, "%s: MPIv is not initialised (call mpiv_init)", fn);
    if (!msg || *msg == MPIV_MESSAGE_NULL)
        return util_err(MPIV_ERR_ARG, "%s: no message (NULL or MPIV_MESSAGE_NULL)", fn);
    if (!buf && size)
        return util_err(MPIV_ERR_ARG, "%s: NULL buffer with size %zu", fn, size);
    return MPIV_SUCCESS;
}

int mpiv_mrecv(void *buf, size_t size, mpiv_message_t *msg, mpiv_status_t *status)
{
    int rc = check_mrecv(buf, size, msg, __func__);
    if (rc)
        return rc;
    struct mpiv_request r;
    proto_imrecv(buf, size, (pkt_t *)*msg, &r);
    *msg = MPIV_MESSAGE_NULL;
    mpiv_status_t st;
    rc = proto_wait(&r, &st); /* in the ranks of the probe's communicator */
    if (status)
        *status = st;
    if (rc == MPIV_ERR_TRUNCATE)
        util_err(rc, "mpiv_mrecv: a %zu-byte message from rank %d (tag %d) does not fit %zu bytes",
                 st.size, st.source, st.tag, size);
    return rc;
}

int mpiv_imrecv(void *buf, size_t size, mpiv_message_t *msg, mpiv_request_t *req)
{
    if (!req)
        return util_err(MPIV_ERR_ARG, "mpiv_imrecv: req is NULL");
    *req = MPIV_REQUEST_NULL;
    int rc = check_mrecv(buf, size, msg, __func__);
    if (rc)
        return rc;
    struct mpiv_request *r = proto_req_new();
    if (!r)
        return util_err(MPIV_ERR_NO_RESOURCES, "mpiv_imrecv: out of memory for a request");
    proto_imrecv(buf, size, (pkt_t *)*msg, r);
    *msg = MPIV_MESSAGE_NULL;
    *req = r;
    return MPIV_SUCCESS;
}

int mpiv_cancel(mpiv_request_t *req, int *cancelled)
{
    if (!req || !cancelled)
        return util_err(MPIV_ERR_ARG, "mpiv_cancel: NULL req or cancelled");
    *cancelled = 0;
    if (*req == MPIV_REQUEST_NULL)
        return MPIV_SUCCESS;
    struct mpiv_request *r = *req;
    if (r->kind != PROTO_REQ_RECV)
        return util_err(MPIV_ERR_NOT_IMPLEMENTED,
                        "mpiv_cancel: cancelling a send is not supported (it goes on)");
    if (proto_test(r) || !proto_cancel_recv(r))
        return MPIV_SUCCESS; /* matched: it completes as usual */
    req_put_mr(r);
    proto_req_delete(r);
    *req = MPIV_REQUEST_NULL;
    *cancelled = 1;
    return MPIV_SUCCESS;
}

static int check_reqs(int n, mpiv_request_t reqs[], const void *out, const char *fn)
{
    if (n < 0 || (n > 0 && !reqs) || !out)
        return util_err(MPIV_ERR_ARG, "%s: %d requests at %p, or a NULL output", fn, n,
                        (void *)reqs);
    return MPIV_SUCCESS;
}

/* Between two polls of several requests that found none complete: drive
 * the network as mpiv_test does, and let others run (a ULT yields; a
 * pthread naps once quiet for a while, util_idle). */
static void poll_pause(struct util_idle *idle)
{
    bool ult = sched_in_ult();
    if ((!ult || srv_inline()) && srv_progress()) {
        util_idle_reset(idle);
        return;
    }
    if (ult) {
        sched_yield_now();
        return;
    }
    if (util_idle_step(idle) == UTIL_IDLE_LONG) {
        /* with a server thread its completions come from the server: a
         * nap of its own length */
        if (srv_inline())
            util_idle_nap_shared(idle);
        else
            util_idle_nap(idle);
    }
}

/* The lowest index of a complete request, -1 if none, MPIV_UNDEFINED if
 * every one is MPIV_REQUEST_NULL. */
static int first_done(int n, mpiv_request_t reqs[])
{
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (reqs[i] == MPIV_REQUEST_NULL)
            continue;
        any = true;
        if (proto_test(reqs[i]))
            return i;
    }
    return any ? -1 : MPIV_UNDEFINED;
}

int mpiv_testany(int n, mpiv_request_t reqs[], int *index, int *flag, mpiv_status_t *status)
{
    int rc = check_reqs(n, reqs, index, __func__);
    if (rc || !flag)
        return rc ? rc : util_err(MPIV_ERR_ARG, "mpiv_testany: flag is NULL");
    int i = first_done(n, reqs);
    *index = i < 0 ? MPIV_UNDEFINED : i;
    *flag = i != -1;
    if (i == MPIV_UNDEFINED) {
        empty_status(status);
        return MPIV_SUCCESS;
    }
    if (i < 0) {
        if (!sched_in_ult() || srv_inline())
            srv_progress();
        return MPIV_SUCCESS;
    }
    return mpiv_wait(&reqs[i], status);
}

int mpiv_waitany(int n, mpiv_request_t reqs[], int *index, mpiv_status_t *status)
{
    int rc = check_reqs(n, reqs, index, __func__);
    if (rc)
        return rc;
    struct util_idle idle;
    util_idle_reset(&idle);
    int i;
    while ((i = first_done(n, reqs)) == -1)
        poll_pause(&idle);
    *index = i;
    if (i == MPIV_UNDEFINED) {
        empty_status(status);
        return MPIV_SUCCESS;
    }
    return mpiv_wait(&reqs[i], status);
}

int mpiv_waitsome(int n, mpiv_request_t reqs[], int *outcount, int indices[],
                  mpiv_status_t statuses[])
{
    int rc = check_reqs(n, reqs, outcount, __func__);
    if (rc)
        return rc;
    if (n > 0 && !indices)
        return util_err(MPIV_ERR_ARG, "mpiv_waitsome: indices is NULL");
    struct util_idle idle;
    util_idle_reset(&idle);
    int i;
    while ((i = first_done(n, reqs)) == -1)
        poll_pause(&idle);
    if (i == MPIV_UNDEFINED) {
        *outcount = MPIV_UNDEFINED;
        return MPIV_SUCCESS;
    }
    int count = 0, first = MPIV_SUCCESS;
    for (; i < n; i++) {
        if (reqs[i] == MPIV_REQUEST_NULL || !proto_test(reqs[i]))
            continue;
        int e = mpiv_wait(&reqs[i], statuses ? &statuses[count] : NULL);
        if (e && !first)
            first = e;
        indices[count++] = i;
    }
    *outcount = count;
    return first;
}

int mpiv_testall(int n, mpiv_request_t reqs[], int *flag, mpiv_status_t statuses[])
{
    int rc = check_reqs(n, reqs, flag, __func__);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++) {
        if (reqs[i] != MPIV_REQUEST_NULL && !proto_test(reqs[i])) {
            *flag = 0;
            if (!sched_in_ult() || srv_inline())
                srv_progress();
            return MPIV_SUCCESS;
        }
    }
    *flag = 1;
    return mpiv_waitall(n, reqs, statuses);
}
