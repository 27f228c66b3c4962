/*
 * srv_test_hooks.h — fault injection into the backends, for the server's
 * tests only (tests/server/test_srv_backends.c): forged input that a faulty
 * or hostile peer could produce, and failures that a healthy machine does
 * not produce on demand. Nothing in the library calls these.
 */
#ifndef MPIV_SERVER_SRV_TEST_HOOKS_H
#define MPIV_SERVER_SRV_TEST_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pktpool/pktpool.h"

struct srv_backend;

/* shm: writes one raw record into our ring at `peer`, as a sender that
 * ignores every rule would: kind (1 MSG, 2 CHUNK, 3 IMM, 4 SKIP: shm.c's
 * enum shm_kind; anything else is what a broken peer could write), len,
 * raddr and imm as given, then n bytes of data (cut to the largest
 * record); the record's size says n bytes unless `lines` is non-zero (a
 * size in 64-byte lines that lies). MPIV_SUCCESS, or SRV_AGAIN when the
 * ring is full. */
int srv_shm_test_put_rec(struct srv_backend *be, int peer, uint32_t kind, uint32_t len,
                         uint32_t lines, uint64_t raddr, uint32_t imm, const void *data, size_t n);
/* shm: moves the tail of our ring at `peer` on by `add` bytes without
 * writing anything (a tail off the record grid, or past the head). */
void srv_shm_test_set_tail(struct srv_backend *be, int peer, uint64_t add);
/* shm: bytes of record space per ring. */
size_t srv_shm_test_ring_bytes(struct srv_backend *be);
/* shm: the bytes at the start of a ring that an emptied ring starts over
 * in (a ping-pong of short records stays there), the smaller part a ring
 * shorter than half look_far starts over in once a look found it empty,
 * and the tail (bytes written so far) of our ring at `peer`. */
size_t srv_shm_test_hot_bytes(void);
size_t srv_shm_test_near_bytes(void);
/* shm: the shortest record that looks whether the ring may start over
 * only once past look_far (SHM_LOOK_LONG: a 2 KiB message, a CHUNK), and
 * a look_far for a test to use (0: back to the one the machine's caches
 * chose; the ring must be at least half as long for long records to look
 * there, shm.c). */
size_t srv_shm_test_look_long_bytes(void);
void srv_shm_test_set_look_far(struct srv_backend *be, size_t bytes);
uint64_t srv_shm_test_tail(struct srv_backend *be, int peer);
/* shm: the ring position up to which the sender to `peer` asked for the
 * ring's lines ahead of its tail, and (in *seen_head) the receiver's head
 * as the sender last read it. */
uint64_t srv_shm_test_ahead(struct srv_backend *be, int peer, uint64_t *seen_head);
/* shm: records dropped as malformed so far. */
uint64_t srv_shm_test_dropped(struct srv_backend *be);
/* shm: the checks a peer's segment passes before it is mapped, on the
 * shm_open name `name`; MPIV_SUCCESS or the error naming what is wrong. */
int srv_shm_test_open_segment(struct srv_backend *be, const char *name);
/* shm: the size every rank's segment has. */
size_t srv_shm_test_segment_size(struct srv_backend *be);
/* shm: how long payloads to `peer` are copied in now (shm_copy.h: 0
 * whole, 1 pieces), the running mean of the line latency in ticks and
 * the samples taken; *near is the threshold in ticks, 0 where no choice
 * is made (no string copy, as under the sanitizers, or no usable clock). */
int srv_shm_test_copy(struct srv_backend *be, int peer, unsigned *lat, unsigned *samples,
                      unsigned *near);

/* ofi: announce RDMA writes by message (as on providers that do not report
 * a remote write's length) whatever the probe found. */
void srv_ofi_test_set_notify(struct srv_backend *be, bool on);
/* ofi: the next `n` write announcements fail as if the provider refused
 * them. */
void srv_ofi_test_fail_notes(struct srv_backend *be, int n);
/* ofi: sends p->len bytes of p with `data` as its remote CQ data (the
 * sender's claimed rank, or a forged one); returns as post_send does. */
int srv_ofi_test_send_data(struct srv_backend *be, pkt_t *p, int peer, uint64_t data);
/* ofi: completions dropped as malformed so far. */
uint64_t srv_ofi_test_dropped(struct srv_backend *be);

#endif
