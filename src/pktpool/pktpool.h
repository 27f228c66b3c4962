/*
 * pktpool.h — packets and the pool that hands them out (see DESIGN.md,
 * "Packet pool").
 *
 * A packet is a 64-byte local header (never sent) followed by data_size
 * bytes of wire data (what the network moves). All packets live in one
 * 64-byte-aligned region so the network registers them once. The pool knows
 * nothing of what the wire data means: its first byte is the packet type the
 * server dispatches on, the rest belongs to the protocol layer.
 *
 * Workers get and return packets through their private deque (PopTop,
 * PushTop; a full deque spills its bottom, least recently used packet, to the
 * shared stack). The server takes from the shared lock-free stack first,
 * then steals from a random private deque's bottom. A pthread that is not a
 * worker passes worker = -1: it has no deque and returns to the shared stack.
 *
 * A worker whose deque is empty (or a worker = -1 caller) takes from the
 * shared stack, then steals from another deque's bottom, so packets idling
 * in one worker's deque never starve anyone else.
 *
 * pkt_get never blocks: it returns NULL when no packet is free. The blocking
 * get (a ULT yields until one comes back) is the protocol layer's, which
 * knows about the scheduler and the server.
 */
#ifndef MPIV_PKTPOOL_H
#define MPIV_PKTPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

typedef struct pkt {
    struct pkt *next; /* the pool's link while the packet is free        */
    uint32_t idx;     /* index in the region                             */
    int32_t owner;    /* debug builds: who holds it (ownership check)     */
    uint32_t len;     /* bytes of data[] in use: to send / received       */
    int32_t peer;     /* destination rank (send) / source rank (received) */
    void *srv_ctx[5]; /* scratch for the network backend (fi_context2…)  */
    _Alignas(64) unsigned char data[];
} pkt_t;

_Static_assert(sizeof(pkt_t) == 64, "packet header is one cache line");

struct pkt_pool;

int pkt_pool_create(struct pkt_pool **pool, size_t npackets, size_t data_size, int nworkers);
void pkt_pool_destroy(struct pkt_pool *pool);

/* The region to register with the network, and the packet stride. */
void pkt_pool_region(struct pkt_pool *pool, void **base, size_t *len);
size_t pkt_data_size(const struct pkt_pool *pool);
size_t pkt_count(const struct pkt_pool *pool);
/* Bytes from one packet to the next: 64 + data_size rounded up to 64. */
size_t pkt_stride(const struct pkt_pool *pool);
pkt_t *pkt_by_index(struct pkt_pool *pool, uint32_t idx);

/* Worker side (worker in [0, nworkers) or -1 for a plain pthread). */
pkt_t *pkt_get(struct pkt_pool *pool, int worker);
void pkt_put(struct pkt_pool *pool, int worker, pkt_t *p);

/* Server side: shared stack first, then steal; puts go to the shared stack. */
pkt_t *pkt_get_server(struct pkt_pool *pool);
void pkt_put_server(struct pkt_pool *pool, pkt_t *p);

#endif
