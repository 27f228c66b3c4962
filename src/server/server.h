/*
 * server.h — the communication server's interface to the protocol layer
 * (see DESIGN.md, "Server"). The server moves packets and bytes; what a
 * packet means belongs to proto/, which registers a handler per type.
 *
 * Threading: srv_send, srv_rdma_write_imm and srv_rdma_read may be called
 * from any thread at any time between srv_start and srv_finalize; they
 * never fail transiently (a busy network queues the operation inside the
 * server; a read runs on the caller's thread).
 * Handlers run on the server thread (or on whichever thread drives progress
 * when the server is not running one, see srv_progress and srv_inline), one
 * at a time.
 */
#ifndef MPIV_SERVER_H
#define MPIV_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pktpool/pktpool.h"
#include "util/util.h"

/* An arrived packet: p->len bytes of p->data from rank p->peer (the rank
 * the transport received it from, never a value read from the packet).
 * The handler owns p and must give it back (pkt_put_server) or keep it and
 * give it back later. */
typedef void (*srv_pkt_handler)(pkt_t *p);
/* An arrival that the transport lends in place (shm): len bytes at data
 * from rank src, valid only until the handler returns (and possibly being
 * rewritten by a faulty peer: copy what is checked before checking it).
 * `spare` is a free packet of pkt_data_size bytes the handler may take
 * (returns true: it owns it now, as a srv_pkt_handler owns its packet) to
 * copy a message of at most that size into; false leaves it with the
 * core. */
typedef bool (*srv_data_handler)(const unsigned char *data, size_t len, int src, pkt_t *spare);
/* Remote side of an RDMA write with immediate: `len` bytes from rank `src`
 * have landed; `imm` is the writer's immediate data. With err set the
 * transport reports a write to us that failed (imm may then be garbage). */
typedef void (*srv_imm_handler)(uint32_t imm, int src, size_t len, int err);
/* Local side of an RDMA write: its source buffer may be reused. err is
 * MPIV_SUCCESS or MPIV_ERR_NET / MPIV_ERR_PEER. */
typedef void (*srv_done_fn)(void *ctx, int err);
/* A peer the transport declared failed (once per peer). */
typedef void (*srv_peer_handler)(int rank);

/* A registered memory region (refcounted through the registration cache). */
typedef struct srv_mr {
    uint64_t rkey;  /* what a peer needs to write into it                    */
    uint64_t raddr; /* the address a peer names for byte 0 of the region   */
    uintptr_t base; /* local address of byte 0 of the region: a cached region
                       may start before the buffer asked for, so a peer
                       writes local address a at raddr + (a - base)         */
    void *desc;     /* backend descriptor for local use                      */
} srv_mr;

/* Joins the job (bootstrap), opens the backend, registers the pool's region.
 * Sets *rank and *size. Does not start the thread yet. */
int srv_init(const struct util_config *cfg, struct pkt_pool *pool, int *rank, int *size);
/* Handlers run by whoever holds the progress lock (the server thread, or a
 * thread in srv_progress), one at a time. */
void srv_set_handlers(srv_pkt_handler pkt, srv_imm_handler imm, srv_peer_handler peer_failed);
/* Optional: lent arrivals go to fn; without it the core copies them into
 * a packet for the srv_pkt_handler (so a message above a packet's size,
 * which only srv_send_inline sends, is then dropped). */
void srv_set_data_handler(srv_data_handler fn);
/* The most arrivals one poll of one backend hands over. */
#define SRV_BATCH 16
/* One lent arrival, as the data handler will get it. */
struct srv_lent {
    const unsigned char *data;
    size_t len;
    int src;
};
/* Called with the arrivals of a poll that returned more than one (at most
 * SRV_BATCH), in order, before any of them is handled, when every one of
 * them is lent (none failed, none copied into a packet). Every one of them
 * then goes to the data handler, in the same order and with the same data
 * pointer, before the progress lock is dropped and before any other
 * arrival is handled. So the protocol can work on the batch as a whole:
 * decode it once, prefetch what its handling will read so that the
 * misses overlap, match a run of messages under one key with one
 * lookup. */
typedef void (*srv_batch_handler)(const struct srv_lent *a, int n);
void srv_set_batch_handler(srv_batch_handler fn);
/* Posts the receive packets and starts the server thread. */
int srv_start(void);
/* A barrier over all ranks through the bootstrap (slow path: start, end). */
int srv_boot_barrier_all(void);
/* Stops the thread, drains outstanding operations, closes everything. */
int srv_finalize(void);
/* For a failure after srv_init that the other ranks cannot know of (e.g.
 * mpiv_init failing on this rank only): closes everything without the
 * drain and the barrier of srv_finalize, whose barrier would pair with
 * the others' start-up barrier and let them believe the job had started,
 * and without leaving the job properly, so that the launcher ends it. */
void srv_abandon(void);

/* Sends p->len bytes of p->data to `peer` (may be this rank). Ownership of p
 * passes to the server, which returns it to the pool once sent, or at once
 * when the send fails (MPIV_ERR_PEER if peer is known to be gone). On shm,
 * a send that must wait for room is queued as a copy and p goes back to
 * the pool at once (Q1 in server.c). */
int srv_send(pkt_t *p, int peer);

/* srv_send_inline's "use srv_send instead": not an error. */
#define SRV_INLINE_LATER 1
/* Sends hdr (hlen bytes) then payload (len bytes) to peer as one message
 * without a packet, copied straight into the transport, when
 * hlen + len <= srv_inline_max(peer), nothing waits in the server's send
 * queue (so it overtakes nothing) and the transport has room now.
 * MPIV_SUCCESS (sent: both buffers are free), SRV_INLINE_LATER (nothing
 * sent: send it through srv_send, or otherwise, in order), or an error.
 * While a fault hook is set it always says SRV_INLINE_LATER, so that the
 * hook sees every send. Any thread. */
int srv_send_inline(int peer, const void *hdr, size_t hlen, const void *payload, size_t len);
/* srv_send_copy's "too many copies wait already": not an error. */
#define SRV_COPY_FULL 2
/* When srv_send_inline said SRV_INLINE_LATER: queues a copy of hdr and
 * payload, in a heap block instead of a packet, behind what the send queue
 * holds (so it overtakes nothing), so that the caller takes no packet and
 * need not wait for the ring: MPIV_SUCCESS (both buffers are free),
 * SRV_COPY_FULL (SRV_COPY_QUEUE_MAX bytes of copies wait already: nothing
 * sent; wait for the queue to shrink, still without a packet, see Q1 in
 * server.c), SRV_INLINE_LATER (no copies on this transport (ofi, ibv send
 * from registered packets), more than a packet holds, or a fault hook set:
 * send it with a packet through srv_send), or an error. Any thread. */
int srv_send_copy(int peer, const void *hdr, size_t hlen, const void *payload, size_t len);
/* When srv_send_inline said SRV_INLINE_LATER and the caller can wait for
 * the send to leave instead of copying it: queues a copy of hdr and a
 * reference to payload behind what the send queue holds (so it overtakes
 * nothing). A progress round later copies them into the transport
 * straight from payload, which stays the caller's until done(ctx, err)
 * runs: once, err MPIV_SUCCESS when they left, else why they could not
 * (the peer's failure). done never runs inside this call, but may run on
 * another thread before it returns: whatever it completes must be ready
 * before the call. MPIV_SUCCESS (queued), SRV_INLINE_LATER (no such path
 * to peer (ofi, ibv), more than srv_inline_max, or a fault hook set:
 * nothing queued), or an error (nothing queued). Any thread. */
int srv_send_ref(int peer, const void *hdr, size_t hlen, const void *payload, size_t len,
                 srv_done_fn done, void *ctx);
/* The largest hlen + len srv_send_inline may send to peer: 0 when the
 * transport to it has no such path (ofi, ibv). May exceed a packet. */
size_t srv_inline_max(int peer);

/* Writes len bytes from local buf (inside registered region lmr) to the
 * peer's raddr (inside its region with key rkey), then delivers imm to the
 * peer's imm handler. done(ctx, err) runs on the server thread once buf may
 * be reused. len may be 0 (only the immediate is delivered). */
int srv_rdma_write_imm(const void *buf, size_t len, srv_mr *lmr, int peer, uint64_t raddr,
                       uint64_t rkey, uint32_t imm, srv_done_fn done, void *ctx);

/* The largest len one srv_rdma_write_imm may carry on this backend. */
size_t srv_max_write(void);

/* srv_rdma_read's "not possible here": the backend has no reads (ofi,
 * ibv), they are switched off (MPIV_SHM_CMA=off) or the kernel refused
 * one (ptrace rules, seccomp). Nothing was read that counts; the caller
 * moves the bytes another way. Distinct from every enum mpiv_error. */
#define SRV_NO_READ (-12)

/* Whether this rank can read `peer`'s memory itself (srv_rdma_read): our
 * own rank always (a copy), a peer only on a backend with reads (shm) that
 * has not found them refused. Both ranks of one host give the same answer
 * about each other, so a sender may ask it about a receiver. A hint: a
 * read may still come back SRV_NO_READ. */
bool srv_can_read(int peer);

/* Reads len bytes at the peer's raddr (rkey: the key of its registration
 * there) into local buf, synchronously, on the calling thread (any thread,
 * concurrently with everything else). Returns MPIV_SUCCESS,
 * MPIV_ERR_PEER (the rank is gone), MPIV_ERR_NET (the range is not mapped
 * there, or an injected failure) or SRV_NO_READ; on an error buf may hold
 * part of the bytes. */
int srv_rdma_read(void *buf, size_t len, int peer, uint64_t raddr, uint64_t rkey);

/* Whether the transport still considers `peer` alive. */
bool srv_peer_alive(int peer);
/* Peers declared failed since srv_init. Hidden, and read inline: a receive
 * posted before its message asks whether its source failed, and in a job
 * where none has, that costs one load instead of a call. */
extern _Atomic int srv_failed_peers_ __attribute__((visibility("hidden")));
static inline bool srv_none_failed(void)
{
    /* relaxed: as srv_peer_alive's read of the peer's flag, which is set
     * before the count goes up */
    return atomic_load_explicit(&srv_failed_peers_, memory_order_relaxed) == 0;
}

/* Registration cache: repeated registrations of one buffer cost one lookup.
 * srv_mr_put releases the reference; memory freed by the user stays correct
 * (see the strategy in mr.c). */
int srv_mr_get(void *buf, size_t len, srv_mr **mr);
void srv_mr_put(srv_mr *mr);

/* One round of progress from the calling thread: lets a waiting pthread or
 * idle worker push the network along where cores are scarce. Safe to call
 * from any thread; returns at once if another thread is progressing.
 * Returns how many operations and completions it handled (0: nothing). */
int srv_progress(void);

/* Whether this job runs without a server thread (MPIV_SERVER=inline, or
 * auto on a rank with fewer cores than workers + 1): then nothing moves the
 * network unless a thread calls srv_progress, so a thread that waits for
 * the network must keep calling it instead of blocking. */
bool srv_inline(void);

/* --- fault injection (tests only) -------------------------------------------
 * A hook that sees every packet sent and arrived and every RDMA write
 * posted and landed and every read, and says what to do with it, so that
 * tests force the orderings and failures they check instead of hoping for
 * them. The hook runs on whichever thread sends (SEND, WRITE), reads (READ)
 * or progresses (RECV, IMM),
 * so it must be thread-safe. */
enum srv_fault_point {
    SRV_FAULT_SEND,
    SRV_FAULT_WRITE,
    SRV_FAULT_RECV,
    SRV_FAULT_IMM,
    SRV_FAULT_READ, /* srv_rdma_read, on the reading thread, before it reads */
};
enum srv_fault_action {
    SRV_FAULT_PASS,  /* as usual                                                */
    SRV_FAULT_DROP,  /* SEND, RECV, IMM: lost (SEND: srv_send still succeeds)   */
    SRV_FAULT_DUP,   /* all: happens twice (WRITE: the second is not reported)  */
    SRV_FAULT_DELAY, /* SEND, RECV, IMM: held back for a few progress rounds,
                        so that later ones overtake it                          */
    SRV_FAULT_FAIL,  /* SEND: srv_send fails; WRITE: completes with an error,
                        nothing written (a local failure: the peer stays
                        alive); RECV, IMM: reported as a failed completion
                        (the peer is then declared failed); READ: fails with
                        MPIV_ERR_NET, nothing read (the peer stays alive)       */
    SRV_FAULT_REFUSE, /* READ: refused as the kernel refuses one (SRV_NO_READ),
                        for this read only                                      */
};
struct srv_fault_event {
    enum srv_fault_point point;
    int peer;                   /* destination (SEND, WRITE) or source (RECV,
                                   IMM, READ)                               */
    const unsigned char *data;  /* SEND, RECV: the packet's bytes          */
    size_t len;                 /* bytes of the packet, write or read      */
    uint32_t imm;               /* WRITE, IMM                              */
};
typedef enum srv_fault_action (*srv_fault_fn)(const struct srv_fault_event *ev, void *arg);
/* Installs fn (NULL removes it). */
void srv_fault_set(srv_fault_fn fn, void *arg);

#endif
