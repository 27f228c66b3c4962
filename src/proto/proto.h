/*
 * proto.h — requests, packet headers and the state shared by the protocol
 * files (p2p.c, coll.c, init.c). See p2p.c for the protocol itself.
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

/* Packet types (byte 0 of the wire data, what the server dispatches on). */
enum proto_type {
    PROTO_EAGER = 1, /* header + the whole message                           */
    PROTO_RTS = 2,   /* rendezvous: a large message is ready at the sender   */
    PROTO_RTR = 3,   /* rendezvous: the receiver's buffer (or a refusal)     */
};

/* Wire header of every protocol packet; 32 bytes. */
struct proto_hdr {
    uint8_t type;   /* enum proto_type                                        */
    uint8_t ctx;    /* enum ht_ctx: user or collective traffic                */
    uint16_t flags; /* RTR: PROTO_RTR_OK or PROTO_RTR_TRUNCATED               */
    int32_t src;    /* sender's rank                                          */
    uint32_t tag;
    uint32_t rslot; /* RTR: the receiver's rendezvous slot (the immediate)     */
    uint64_t size;  /* the message's size                                     */
    uint64_t sreq;  /* RTS/RTR: the sender's request (an address at the sender) */
};
_Static_assert(sizeof(struct proto_hdr) == 32, "header is 32 bytes");

/* RTR body, after the header. */
struct proto_rtr {
    uint64_t raddr; /* where to write                                         */
    uint64_t rkey;
};

#define PROTO_RTR_OK 0
#define PROTO_RTR_TRUNCATED 1

enum proto_req_kind { PROTO_REQ_SEND = 1, PROTO_REQ_RECV = 2 };

struct mpiv_request {
    sched_sync sync;   /* the waiter sleeps here; signalled once at completion */
    atomic_int done;   /* 1 once complete and no other thread touches it    */
    atomic_int armed;  /* large send: 1 once the fields the server reads are
                          written (release before the RTS goes out; the
                          server's acquire when the RTR comes back makes the
                          order visible even where it travels through an
                          uninstrumented network library)                    */
    int kind;          /* enum proto_req_kind                                */
    int heap;          /* 1 if malloc'ed (isend/irecv), 0 if on a stack      */
    void *buf;         /* user buffer                                        */
    size_t size;       /* send: message size; recv: buffer capacity          */
    int peer, tag, ctx;
    srv_mr *mr;        /* rendezvous registration, released at completion   */
    uint32_t rslot;    /* receive rendezvous slot                            */
    mpiv_status_t status;
};

struct proto_state {
    struct util_config cfg;
    struct pkt_pool *pool;
    struct ht_table *ht;
    int rank, size;
    size_t eager_limit;      /* payload bytes a packet carries               */
    atomic_uint coll_seq;    /* collective calls so far (same on all ranks)  */
    atomic_long unexpected;  /* pool packets held in the table as unexpected */
    long unexpected_max;     /* above it, unexpected eager messages are
                                copied out of their packet (p2p.c, I5)       */
    int initialized;
};
extern struct proto_state proto;

/* Point-to-point on a given context (user or collective). */
int proto_isend(const void *buf, size_t size, int dest, int tag, int ctx, struct mpiv_request *r);
int proto_irecv(void *buf, size_t size, int src, int tag, int ctx, struct mpiv_request *r);
int proto_wait(struct mpiv_request *r, mpiv_status_t *status);

/* Handlers the server runs, registered by mpiv_init. */
void proto_on_eager_or_rts(pkt_t *p);
void proto_on_rtr(pkt_t *p);
void proto_on_imm(uint32_t imm, int src, size_t len);

int proto_rdv_init(void);
void proto_rdv_fini(void);

static inline struct proto_hdr *proto_hdr_of(pkt_t *p) { return (struct proto_hdr *)p->data; }

#define PROTO_CHECK_INIT()                                                                   \
    do {                                                                                     \
        if (util_unlikely(!proto.initialized))                                               \
            return util_err(MPIV_ERR_STATE, "%s: MPIv is not initialised (call mpiv_init)",  \
                            __func__);                                                       \
    } while (0)

#endif
