/*
 * proto.h — requests, the wire format and the state shared by the protocol
 * files: p2p.c (the protocols and the public point-to-point calls), wire.c
 * (decoding arrived packets: the only place that trusts nothing), handle.c
 * (slot + generation handles), coll.c and init.c.
 */
#ifndef MPIV_PROTO_H
#define MPIV_PROTO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hashtbl/hashtbl.h"
#include "pktpool/pktpool.h"
#include "sched/sched.h"
#include "server/server.h"
#include "util/util.h"

/* --- wire format ------------------------------------------------------------ */

/* Packet types (byte 0 of the wire data, what the server dispatches on). */
enum proto_type {
    PROTO_EAGER = 1,  /* header + the whole message                          */
    PROTO_RTS = 2,    /* rendezvous: a large message waits at the sender      */
    PROTO_RTR = 3,    /* rendezvous: the receiver's answer to one RTS (also
                         its FIN, after it read the message itself)          */
    PROTO_ABORT = 4,  /* the peer's side of a rendezvous failed               */
    PROTO_CREDIT = 5, /* eager credit given back (header only)                */
    PROTO_TYPE_MAX_
};

/* Wire header of every protocol packet; 32 bytes. */
struct proto_hdr {
    uint8_t type;    /* enum proto_type                                        */
    uint8_t status;  /* RTR: enum proto_rtr_status; ABORT: an mpiv_error;
                        RTS: 0                                                */
    uint16_t ctx;    /* matching context, < HT_CTX_COUNT (comm.c)             */
    int32_t src;     /* sender's rank (checked against the transport's)       */
    uint32_t tag;
    uint32_t credit; /* eager credit (bytes) given back to the receiver of
                        this packet, piggybacked on any type; once decoded
                        (and credited), the receiver keeps the packet's
                        arrival stamp here (match.c, M4)                      */
    uint64_t size;   /* the message's size                                     */
    uint64_t handle; /* RTS, RTR: the send request's handle at the sender;
                        ABORT: the receive's rendezvous handle                */
};
_Static_assert(sizeof(struct proto_hdr) == UTIL_PACKET_HEADER_BYTES,
               "the header is what the configuration reserves in a packet");

/* RTS body, after the header, when the sender offers the receiver to read
 * the message itself (p2p.c, the receiver-driven rendezvous): where its
 * bytes are, as srv_rdma_read names them. An RTS without a body offers
 * nothing: the receiver answers with an RTR and the sender writes. */
struct proto_rts {
    uint64_t raddr;
    uint64_t rkey;
};

/* RTR body, after the header (only when status == PROTO_RTR_OK). */
struct proto_rtr {
    uint64_t raddr;   /* where to write                                      */
    uint64_t rkey;
    uint32_t rhandle; /* the receive's rendezvous handle: the immediate       */
    uint32_t pad;
};

enum proto_rtr_status {
    PROTO_RTR_OK = 0,     /* write size bytes to raddr, then rhandle          */
    PROTO_RTR_NONE = 1,   /* nothing to write (buffer too small, or an empty
                             message): the send is over                       */
    PROTO_RTR_FAILED = 2, /* the receiver could not take it: the send fails   */
    PROTO_RTR_FIN = 3,    /* FIN: the receiver read the whole message itself
                             (only to an RTS with a body): the send is over   */
    PROTO_RTR_FIN_FAILED = 4, /* the receiver's read of it failed (only to an
                             RTS with a body): the send fails, MPIV_ERR_NET   */
};
/* An RTR echoes the RTS's ctx, tag and size, so the sender can check that
 * it answers the send its handle names. An ABORT carries, in handle, the
 * receive's 32-bit rendezvous handle, and the error in status. */

/* Contexts a packet may carry: every context the key has room for (comm.c
 * hands them out; a message for a communicator this rank has not created
 * yet waits in the table like any unexpected message). */
#define PROTO_CTX_COUNT HT_CTX_COUNT
_Static_assert(HT_CTX_COUNT - 1 <= UINT16_MAX, "a context fits the header's ctx field");
_Static_assert(MPIV_ERR_LAST_ <= UINT8_MAX, "an error code fits the header's status field");

/* --- decoding (wire.c) --------------------------------------------------------- */

/* Why a packet was dropped; counted in proto_stats. */
enum proto_drop {
    PROTO_DROP_SHORT,   /* shorter than a header                          */
    PROTO_DROP_TYPE,    /* unknown type                                   */
    PROTO_DROP_SRC,     /* src field disagrees with the transport's peer  */
    PROTO_DROP_LEN,     /* length disagrees with the type and size fields */
    PROTO_DROP_FIELD,   /* a field out of range (ctx, tag, status, size)  */
    PROTO_DROP_HANDLE,  /* names no live request (late or duplicated)     */
    PROTO_DROP_IMM,     /* an immediate that names no live receive        */
    PROTO_DROP_MAX_
};

/* Checks every field of the packet p->data[0 .. p->len) that arrived from
 * rank `src` (what the transport says, never the packet's own bytes)
 * against its type. Returns the type, or -1 after counting and logging the
 * drop (the caller gives the packet back). Never reads past p->len. */
int proto_decode(const pkt_t *p, int src);
/* The same on len bytes at data (an arrival the transport lends in place,
 * which a faulty peer may still be rewriting): the header is copied into
 * *h once, and only *h may be trusted afterwards. */
int proto_decode_data(const unsigned char *data, size_t len, int src, struct proto_hdr *h);

/* Counts one dropped packet or immediate and logs it (rate-limited). */
void proto_count_drop(enum proto_drop why, int src, const char *what);

/* Pthreads that poll for their own request at once without a server
 * thread; the others park (p2p.c, proto_wait_pending). */
#define PROTO_PTHREAD_POLLERS 8

struct proto_stats {
    uint64_t dropped[PROTO_DROP_MAX_];
    uint64_t aborts_sent, aborts_received;
    uint64_t credit_packets;  /* explicit CREDIT packets sent           */
    uint64_t eager_as_rts;    /* small sends that went as RTS (no credit) */
    uint64_t copy_waits;      /* rounds eager senders waited for the queue
                                 of copies to shrink (eager_copy)         */
    /* Receiver-driven rendezvous (p2p.c): */
    uint64_t reads;           /* RTS whose bytes this rank read itself      */
    uint64_t read_fallbacks;  /* RTS that offered a read, answered by an RTR
                                 because the read was not possible here     */
    uint64_t read_failures;   /* reads that failed (the receive failed)     */
    uint64_t fins_received;   /* sends completed by a FIN (either status)  */
    uint64_t matched_ahead;   /* eager arrivals matched with the rest of their
                                 run under one key (proto_on_batch)         */
    /* Pthreads waiting without a server thread (proto_wait_pending): */
    uint64_t pthread_parks;   /* waits that parked (worker 0 polled for them) */
    uint64_t pthread_pollers; /* pthreads polling for their request now (one
                                 or two more for a moment while others
                                 find no place and back out)                */
};
void proto_get_stats(struct proto_stats *st);

/* --- handles (handle.c) ------------------------------------------------------- */

/* A handle names a live request across the wire: a slot in a table and the
 * slot's generation. Taking a handle (at the answer that ends its use)
 * bumps the generation, so a late or duplicated packet naming it finds a
 * different generation and is dropped: no raw pointer ever crosses the
 * wire. Slots are reused first-in, first-out (a freed slot goes to the back
 * of the free ring), so a slot's generation moves once per HANDLE_SLOTS
 * handles made in the whole process.
 * Wire forms: 64 bits (sends: generation << HANDLE_SLOT_BITS | slot) and
 * 32 bits (the immediate of a rendezvous write: the generation's low
 * HANDLE_IMM_GEN_BITS bits and the slot). A stale 32-bit handle is caught
 * unless 2^32 handles were made in between (and its source rank and size
 * are checked as well). */
#define HANDLE_SLOT_BITS 20
#define HANDLE_SLOTS (1u << HANDLE_SLOT_BITS)
#define HANDLE_IMM_GEN_BITS (32 - HANDLE_SLOT_BITS)

struct mpiv_request;
int proto_handle_init(void);
void proto_handle_fini(void);
/* Makes a handle for r; 0 when every slot is taken (0 is never a handle). */
uint64_t proto_handle_make(struct mpiv_request *r);
/* The request named by h, still owned by the table; NULL if h is stale. */
struct mpiv_request *proto_handle_peek(uint64_t h);
/* Takes r out of the table if h names it; NULL if stale (then nothing). */
struct mpiv_request *proto_handle_take(uint64_t h);
/* The 32-bit (immediate) form of a 64-bit handle, and back to a handle
 * that proto_handle_peek/take accept if the generation's low bits match. */
uint32_t proto_handle_imm(uint64_t h);
uint64_t proto_handle_from_imm(uint32_t imm);
/* Calls fn(r) on every live request (taken out of the table first) for
 * which pred(r, arg) holds; used to fail the operations of a dead peer. */
void proto_handle_take_if(bool (*pred)(struct mpiv_request *r, void *arg), void *arg,
                          void (*fn)(struct mpiv_request *r, void *arg));

/* --- requests --------------------------------------------------------------- */

/* Buffered sends (p2p.c, I8): each holds a handle, so their number is
 * kept well below the slots, which receives and other sends need too. */
#define PROTO_BUFFERED_COPIES_MAX (HANDLE_SLOTS / 4)

enum proto_req_kind {
    PROTO_REQ_SEND = 1,
    PROTO_REQ_RECV = 2,
    PROTO_REQ_PROBE = 3, /* a blocking probe waiting for an arrival (match.c) */
};

/*
 * A request's life is one word: sync.state (see sched.h). 0 while pending,
 * the waiter's identity while one waits, SIGNALLED once complete and not
 * yet waited for. Completion writes the status, then signals (one atomic
 * operation, the last access of the completing thread: I1 in p2p.c). A
 * waiter that finds it complete, or is woken, owns the request again.
 * Everything else is written before the request is published (to the
 * table or the handle table) and owned, while pending, by exactly one
 * party: the table, the handle table, or one thread that took it out.
 */
struct mpiv_request {
    sched_sync sync;  /* the state word                                    */
    uint8_t kind;     /* enum proto_req_kind                                 */
    uint16_t ctx;     /* matching context (comm.c)                           */
    bool rdv_read;    /* send: its RTS offered the receiver a read (a FIN
                         may answer it)                                     */
    bool wild;        /* receive or probe with MPIV_ANY_SOURCE/_TAG: lives
                         in match.c's list while pending, not the table    */
    bool listed;      /* in match.c's list (under its lock)                 */
    bool buffered;    /* send: the runtime's own request for a copy of the
                         user's message, which nobody waits on: its
                         completion frees it (p2p.c, I8)                    */
    void *buf;        /* user buffer                                        */
    size_t size;      /* send: message size; recv: buffer capacity          */
    int peer, tag;
    srv_mr *mr;       /* rendezvous registration, released at completion   */
    uint64_t handle;  /* rendezvous: our handle while in the handle table   */
    int reg_err;      /* recv: why registering buf at post time failed     */
    /* The communicator whose ranks the status names (comm.c), or NULL for
     * world ranks; read only by the owner, in proto_wait. */
    const struct mpiv_comm *comm;
    /* Rendezvous progress: bytes whose write or landing is not reported
     * yet, and the first error met; owned by the server thread (handlers
     * run one at a time) while the request is in the handle table. */
    size_t left;
    int pieces_out;   /* send: writes posted and not completed yet         */
    int err;
    mpiv_status_t status;
    /* Ordered matching (match.c, M3): a receive's post number, 0 when
     * posted while no wildcard was pending (older than all of them). */
    uint64_t seq;
    /* wild: the keys it takes (ht_key_fits), and its place in the list */
    ht_key wpat, wmask;
    struct mpiv_request *wnext, *wprev;
};

struct proto_state {
    struct util_config cfg;
    struct pkt_pool *pool;
    struct ht_table *ht;
    int rank, size;
    size_t eager_limit;      /* payload bytes a packet carries               */
    size_t max_write;        /* largest piece of one rendezvous write        */
    /* Tests only: no RTS offers a read (p2p.c), so that the write path
     * runs on a backend that could read. Read by the sending thread. */
    atomic_bool rdv_write_only;
    atomic_long unexpected;  /* pool packets held in the table as unexpected */
    long unexpected_max;     /* above it, unexpected eager messages are
                                copied out of their packet (p2p.c, I5)       */
    /* Flow control (p2p.c, I6), per peer: eager bytes we may still send
     * to it, and bytes of its eager messages we consumed and owe back. */
    long credit_max;
    atomic_long *credit;
    atomic_long *owed;
    /* Buffered sends (p2p.c, I8) not yet complete: what they cost per peer
     * (proto_buffered_cost), at most buffered_max, and how many there are
     * in the process, at most PROTO_BUFFERED_COPIES_MAX. Past either a
     * send waits for its receive, as an RTS does. */
    atomic_long *buffered;
    long buffered_max;
    atomic_long buffered_copies;
    /* Per peer, read once at proto_p2p_init: a transport's limit does not
     * change while the job runs, and every send and arrival reads them. */
    struct proto_limits {
        size_t inline_max; /* srv_inline_max(peer); 0 for our own rank */
        size_t eager_max;  /* proto_eager_max(peer), worked out once */
    } *lim;
    /* comm.c's communicators by id ([0] unused: the world), NULL outside
     * proto_comm_init .. fini: comm_of_ctx (comm.h) reads it, so that
     * p2p.c needs no function of comm.c */
    struct mpiv_comm *comms;
    int initialized;
};
extern struct proto_state proto;

/* What a buffered send (p2p.c, I8) of size bytes holds at the sender: its
 * request, the copy behind it and what malloc and its registration take
 * on top, counted against proto.buffered_max. */
static inline long proto_buffered_cost(size_t size)
{
    return (long)(sizeof(struct mpiv_request) + size + 64);
}

/* The largest message sent eagerly to (or accepted eagerly from) peer:
 * what a packet holds, or more where the transport copies messages
 * straight into the peer's memory (shm, srv_inline_max). Ourselves: a
 * packet's worth (sends to our own rank are handed over as packets). */
static inline size_t proto_eager_max(int peer) { return proto.lim[peer].eager_max; }

/* Point-to-point on a given context (user or collective). On failure the
 * request is not pending (nothing to wait for). proto_irecv takes
 * MPIV_ANY_SOURCE / MPIV_ANY_TAG (match.c's ordered path). proto_issend
 * completes only once a receive matched the message (it always goes as an
 * RTS, whatever its size). */
int proto_isend(const void *buf, size_t size, int dest, int tag, int ctx, struct mpiv_request *r);
int proto_issend(const void *buf, size_t size, int dest, int tag, int ctx,
                 struct mpiv_request *r);
int proto_irecv(void *buf, size_t size, int src, int tag, int ctx, struct mpiv_request *r);
/* One of the three, named by op: for the callers that start any of them
 * (the non-blocking calls of the world and of communicators). */
enum proto_op { PROTO_OP_RECV, PROTO_OP_SEND, PROTO_OP_SSEND };
int proto_start(enum proto_op op, void *buf, size_t size, int peer, int tag, int ctx,
                struct mpiv_request *r);
/* Receives the message a matched probe took (proto_improbe): r completes
 * like a receive that matched it. */
void proto_imrecv(void *buf, size_t size, pkt_t *msg, struct mpiv_request *r);
/* Waits until r completes (it was not complete when first looked at) and
 * consumes its completion, for proto_wait. */
void proto_wait_pending(struct mpiv_request *r);
/* The status source in the ranks of communicator c (comm.c). */
int proto_comm_source(const struct mpiv_comm *c, int world_rank);
/* Waits for r, fills status (may be NULL) and returns r's error; r stays
 * allocated. Inline so that a request that completed already (a window's
 * waitall, every eager send) costs a load and a store and no call: no
 * waiter ever registered on it, so there is no bias to claim either. */
static inline int proto_wait(struct mpiv_request *r, mpiv_status_t *status)
{
    if (util_unlikely(!sched_sync_consume(&r->sync)))
        proto_wait_pending(r);
    if (status) {
        *status = r->status;
        if (util_unlikely(r->comm != NULL)) /* a rank of the communicator */
            status->source = proto_comm_source(r->comm, status->source);
    }
    return r->status.error;
}
/* The requests of the non-blocking calls (req.c): from a per-pthread
 * cache in front of malloc. proto_req_new returns NULL when out of
 * memory; proto_req_delete(NULL) does nothing. proto_req_cache_flush
 * empties the calling pthread's cache (mpiv_finalize). */
struct mpiv_request *proto_req_new(void);
void proto_req_delete(struct mpiv_request *r);
/* proto_req_delete of each of rs[0..n) (NULLs skipped), each set to NULL. */
void proto_req_delete_n(struct mpiv_request **rs, int n);
void proto_req_cache_flush(void);
/* 1 if r is complete (a later proto_wait returns at once), else 0. */
int proto_test(struct mpiv_request *r);
/* Takes posted receive r back out of the matching table; false if a
 * message matched it first (it then completes as usual: wait for it).
 * Walks the table: for error paths only. */
bool proto_cancel_recv(struct mpiv_request *r);

/* --- the ordered path (match.c) ---------------------------------------------- */

/* Arrival stamps (match.c, M4): the next one, taken by every arrival that
 * may wait in the table; kept in the packet's header in the credit field,
 * which is spent once the packet is decoded (proto_stamp_of). */
extern _Atomic uint32_t proto_arrivals;
static inline uint32_t *proto_stamp_of(pkt_t *p) { return &((struct proto_hdr *)p->data)->credit; }

/* The table deferred (HT_DEFER): an arrival q under k, decided in order.
 * Returns the receive it matched (a REQ value; a wildcard one is taken out
 * of the list) or HT_EMPTY once q waits in the table. */
ht_value proto_arrive_ordered(ht_key k, pkt_t *q);
/* The table deferred an exact receive r under k: numbered and queued in
 * order. Returns the message it matched (a PKT value) or HT_EMPTY. */
ht_value proto_post_ordered(ht_key k, struct mpiv_request *r);
/* Posts receive r (req_init done, r->wild) with a wildcard source or tag:
 * matches the oldest fitting message at once, or waits in the list. */
int proto_post_wild(struct mpiv_request *r, int src, int tag, int ctx);
/* Takes wildcard receive r out of the list: false if a message took it. */
bool proto_cancel_wild(struct mpiv_request *r);
/* Takes out of the list every request for which pred holds, and calls fn
 * on each with the lock dropped (a failed peer). */
void proto_wild_take_if(bool (*pred)(struct mpiv_request *r, void *arg), void *arg,
                        void (*fn)(struct mpiv_request *r, void *arg));
/* Probes: the status of the message a receive (src, tag, ctx) would take
 * next; the matched forms take it out of matching (*msg, or NULL). The
 * blocking forms wait as a receive does. */
int proto_iprobe(int src, int tag, int ctx, int *flag, mpiv_status_t *st);
int proto_probe(int src, int tag, int ctx, mpiv_status_t *st);
int proto_improbe(int src, int tag, int ctx, pkt_t **msg, mpiv_status_t *st);
int proto_mprobe(int src, int tag, int ctx, pkt_t **msg, mpiv_status_t *st);
/* The status of a taken message (its header). */
void proto_msg_status(pkt_t *msg, mpiv_status_t *st);

/* Shared by p2p.c and match.c: complete r with err (I1), and complete the
 * match of receive r with message p (p2p.c). */
void proto_finish(struct mpiv_request *r, int err);
void proto_match(struct mpiv_request *r, pkt_t *p, bool server);

/* Handlers the server runs, registered by mpiv_init. */
void proto_on_packet(pkt_t *p);
bool proto_on_data(const unsigned char *data, size_t len, int src, pkt_t *spare);
void proto_on_batch(const struct srv_lent *a, int n);
void proto_on_imm(uint32_t imm, int src, size_t len, int err);
void proto_on_peer_failed(int rank);

int proto_p2p_init(void);
void proto_p2p_fini(void);
/* Frees the buffered sends (p2p.c, I8) still held; only once the server
 * stopped (mpiv_finalize). */
void proto_buffered_drop(void);
/* Frees the heap copies of messages that arrived and that no receive took,
 * still in the table (mpiv_finalize, once the server stopped); returns how
 * many messages were left there, copies or pool packets. */
size_t proto_unreceived_drop(void);

static inline struct proto_hdr *proto_hdr_of(pkt_t *p) { return (struct proto_hdr *)p->data; }

#define PROTO_CHECK_INIT()                                                                   \
    do {                                                                                     \
        if (util_unlikely(!proto.initialized))                                               \
            return util_err(MPIV_ERR_STATE, "%s: MPIv is not initialised (call mpiv_init)",  \
                            __func__);                                                       \
    } while (0)

#endif
