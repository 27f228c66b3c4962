/*
 * pktcopy.h — packet-shaped blocks on the heap, for copies of packets that
 * must outlive the packet: a send waiting in the server's queue (server.c,
 * Q1), and an early message: one lent in place by the transport (shm)
 * always, one that came in a pool packet past the pool's share for
 * unexpected messages (p2p.c, I5).
 *
 * A block is a pkt_t (64-byte aligned, its 64-byte header) with room for
 * at least `len` data bytes. Small blocks (up to PKT_COPY_SMALL_MAX data
 * bytes) come from size classes of whole cache lines kept by this module,
 * larger ones from aligned_alloc. Any thread may take or give back a block;
 * the caller passes the same `len` to pkt_copy_free as to pkt_copy_alloc.
 *
 * Memory of the small classes is kept for reuse until pkt_copy_release,
 * which mpiv_finalize calls once no block is held.
 */
#ifndef MPIV_PKTCOPY_H
#define MPIV_PKTCOPY_H

#include <stddef.h>

#include "pktpool/pktpool.h"

/* The largest data size served from the size classes (7 lines). */
#define PKT_COPY_SMALL_MAX (7 * 64)

/* A block with room for len data bytes, or NULL when out of memory. Its
 * header's fields are garbage: the caller sets what it uses. */
pkt_t *pkt_copy_alloc(size_t len);
/* Gives back a block of pkt_copy_alloc(len) (NULL: nothing). Under
 * AddressSanitizer a block given back twice is fatal. */
void pkt_copy_free(pkt_t *p, size_t len);

/* Tests only: the next n calls of pkt_copy_alloc return NULL, as when
 * out of memory (0: none fail). */
void pkt_copy_test_fail(unsigned n);

/* Blocks held now (taken and not given back), over all sizes. */
size_t pkt_copy_held(void);
/* Frees the classes' memory if no small block is held; returns the number
 * of blocks still held, large ones included (the classes' memory stays
 * while a small one is). */
size_t pkt_copy_release(void);

#endif
