/*
 * server.h — the communication server's interface to the protocol layer
 * (see DESIGN.md, "Server"). The server moves packets and bytes; what a
 * packet means belongs to proto/, which registers a handler per type.
 *
 * Threading: srv_send and srv_rdma_write_imm may be called from any thread
 * at any time between srv_start and srv_finalize; they never fail
 * transiently (a busy network queues the operation inside the server).
 * Handlers run on the server thread (or on whichever thread drives progress
 * when the server is not running one, see srv_progress), one at a time.
 */
#ifndef MPIV_SERVER_H
#define MPIV_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "pktpool/pktpool.h"
#include "util/util.h"

/* An arrived packet: p->data[0] is its type, p->len its length, p->peer its
 * source. The handler owns p and must give it back (pkt_put_server) or keep
 * it and give it back later. */
typedef void (*srv_pkt_handler)(pkt_t *p);
/* Remote side of an RDMA write with immediate: `len` bytes from rank `src`
 * have landed; `imm` is the writer's immediate data. */
typedef void (*srv_imm_handler)(uint32_t imm, int src, size_t len);
/* Local side of an RDMA write: its source buffer may be reused. err is
 * MPIV_SUCCESS or MPIV_ERR_NET / MPIV_ERR_PEER. */
typedef void (*srv_done_fn)(void *ctx, int err);

/* A registered memory region (refcounted through the registration cache). */
typedef struct srv_mr {
    uint64_t rkey;  /* what a peer needs to write into it                    */
    uint64_t raddr; /* the address a peer names for byte 0 of the region   */
    uintptr_t base; /* local address of byte 0 of the region: a cached region
                       may start before the buffer asked for, so a peer
                       writes local address a at raddr + (a - base)         */
    void *desc;     /* backend descriptor for local use                      */
} srv_mr;

#define SRV_MAX_TYPES 32

/* Joins the job (bootstrap), opens the backend, registers the pool's region.
 * Sets *rank and *size. Does not start the thread yet. */
int srv_init(const struct util_config *cfg, struct pkt_pool *pool, int *rank, int *size);
void srv_set_handler(uint8_t type, srv_pkt_handler fn);
void srv_set_imm_handler(srv_imm_handler fn);
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
 * passes to the server, which returns it to the pool once sent.
 * MPIV_ERR_PEER if peer is known to be gone. */
int srv_send(pkt_t *p, int peer);

/* Writes len bytes from local buf (inside registered region lmr) to the
 * peer's raddr (inside its region with key rkey), then delivers imm to the
 * peer's imm handler. done(ctx, err) runs on the server thread once buf may
 * be reused. len may be 0 (only the immediate is delivered). */
int srv_rdma_write_imm(const void *buf, size_t len, srv_mr *lmr, int peer, uint64_t raddr,
                       uint64_t rkey, uint32_t imm, srv_done_fn done, void *ctx);

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

#endif
