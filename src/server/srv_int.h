/*
 * srv_int.h — what the server core (server.c), the registration cache
 * (mr.c) and the network backends (shm.c, ofi.c, ibv.c) share. Nothing outside
 * src/server/ includes it, except the server's own tests.
 *
 * A backend moves packets and bytes and reports what finished; it knows
 * nothing of handlers, queues or threads. The core (server.c) owns those:
 * it posts receives, retries what a backend could not take yet (SRV_AGAIN),
 * and turns completions (struct srv_cqe) into handler calls and pool puts.
 */
#ifndef MPIV_SERVER_SRV_INT_H
#define MPIV_SERVER_SRV_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pktpool/pktpool.h"
#include "server/server.h"
#include "util/util.h"

/* A backend's "not now": its queue is full; the core queues and retries.
 * Never returned to users. Distinct from every enum mpiv_error value. */
#define SRV_AGAIN (-11)
/* post_send's "done already": the data left with the call (libfabric
 * inject, verbs inline without a completion) and the packet is free. */
#define SRV_DONE 1

/* An RDMA write in flight or waiting in the core's queue. `be` is backend
 * scratch (libfabric's fi_context2 or verbs bookkeeping) and comes first so
 * that a backend may use the op's address as its operation context
 * (room for libfabric's 64-byte fi_context2). */
struct srv_rdma_op {
    void *be[8];
    uintptr_t qnext; /* the core's send-queue link (tagged, see server.c) */
    const void *buf;
    size_t len;
    void *desc;
    int peer;
    uint32_t imm;
    uint64_t raddr;
    uint64_t rkey;
    srv_done_fn done;
    void *ctx;
    uint64_t note[2]; /* backend scratch: ofi's write notification */
};

enum srv_cqe_kind {
    SRV_CQE_SEND,  /* p was sent: give it back to the pool               */
    SRV_CQE_RECV,  /* p arrived from src with len bytes                   */
    SRV_CQE_WRITE, /* op's local buffer may be reused                     */
    SRV_CQE_IMM,   /* len bytes from src landed with imm; p (if not NULL)
                      is a receive packet the backend consumed to report it
                      and that must be posted again                       */
};

/* One completion. err is MPIV_SUCCESS, or MPIV_ERR_NET / MPIV_ERR_PEER with
 * the backend having logged what and which peer. */
struct srv_cqe {
    enum srv_cqe_kind kind;
    int err;
    int src;
    uint32_t imm;
    size_t len;
    pkt_t *p;
    struct srv_rdma_op *op;
    /* RECV from a backend that lends its buffer (shm): the len bytes
     * arrived are here, valid until the backend's release (or next poll),
     * and p is a posted packet lent beside them, into which the core or
     * the handler copies them only if it must keep them. */
    const unsigned char *data;
};

struct srv_backend;

/* The one interface every backend implements. Return codes are
 * MPIV_SUCCESS, SRV_AGAIN (post_* and rdma_write_imm only) or an
 * enum mpiv_error with a detail recorded by util_err.
 * post_send, rdma_write_imm, mr_reg and mr_dereg may be called from any
 * thread at once; post_recv and poll only from the thread holding the
 * core's progress lock. */
struct srv_backend_ops {
    const char *name;
    /* Opens the device/fabric for a job of `size` ranks; sets *be. */
    int (*init)(const struct util_config *cfg, int rank, int size, struct srv_backend **be);
    /* Swaps addresses with every rank (collective, via srv_boot_allgather)
     * and connects. After it, any rank may be posted to. */
    int (*exchange)(struct srv_backend *be);
    /* Registers the pool's packet region (before exchange and any post);
     * receives are posted for pkt_data_size(pool) bytes. */
    int (*reg_pool)(struct srv_backend *be, struct pkt_pool *pool);
    /* Sends p->len bytes of p->data; MPIV_SUCCESS (a SRV_CQE_SEND follows),
     * SRV_DONE (none follows: the packet is free now) or SRV_AGAIN. */
    int (*post_send)(struct srv_backend *be, pkt_t *p, int peer);
    int (*post_recv)(struct srv_backend *be, pkt_t *p);
    /* Whether post_send reads nothing of p but p->len and p->data and is
     * done with p when it returns (never MPIV_SUCCESS with a SRV_CQE_SEND
     * to follow), so that the core may hand it a packet-shaped heap block
     * instead of a pool packet (shm; Q1 in server.c). */
    bool posts_copies;
    /* Optional (NULL: the core always uses post_send). Sends hdr then
     * payload as one message of hlen + len <= inline_max(peer) bytes with
     * no packet: SRV_DONE (gone: both buffers are free), SRV_AGAIN (no
     * room now) or an error. Any thread. */
    int (*send_inline)(struct srv_backend *be, int peer, const void *hdr, size_t hlen,
                       const void *payload, size_t len);
    /* Optional: the largest message send_inline (and a RECV) may carry to
     * or from peer, which may exceed a packet. */
    size_t (*inline_max)(struct srv_backend *be, int peer);
    /* Optional: the core is done with the data that the last poll lent
     * (srv_cqe.data). Progress lock held. */
    void (*release)(struct srv_backend *be);
    int (*rdma_write_imm)(struct srv_backend *be, struct srv_rdma_op *op);
    /* The largest len one rdma_write_imm accepts (valid after init): the
     * core splits longer writes; a longer one is refused with MPIV_ERR_ARG. */
    size_t (*max_write)(struct srv_backend *be);
    /* Registers [buf, buf+len) for local use and remote writes; fills the
     * srv_mr (rkey, raddr, base, desc) and *handle (for mr_dereg). */
    int (*mr_reg)(struct srv_backend *be, void *buf, size_t len, srv_mr *mr, void **handle);
    void (*mr_dereg)(struct srv_backend *be, void *handle);
    /* Optional (NULL: the backend has no reads, srv_can_read says false):
     * whether reads from `peer` are possible now, and one synchronous read
     * of len bytes at the peer's raddr into local buf, from any thread at
     * once. rdma_read returns MPIV_SUCCESS, MPIV_ERR_PEER, MPIV_ERR_NET or
     * SRV_NO_READ (see server.h); a refusal by the system also makes
     * can_read false from then on. Never called for this rank itself. */
    bool (*can_read)(struct srv_backend *be, int peer);
    int (*rdma_read)(struct srv_backend *be, void *buf, size_t len, int peer, uint64_t raddr,
                     uint64_t rkey);
    /* Reads up to max completions into ev; returns how many (>= 0) or a
     * negative enum mpiv_error for a failure of the backend itself. */
    int (*poll)(struct srv_backend *be, struct srv_cqe *ev, int max);
    /* Whether a registration pins pages (true) or merely names virtual
     * addresses that the provider resolves at transfer time (false); the
     * cache keeps unreferenced registrations only in the second case. */
    bool (*mr_pins)(struct srv_backend *be);
    void (*finalize)(struct srv_backend *be);
};

extern const struct srv_backend_ops srv_ofi_ops;
extern const struct srv_backend_ops srv_ibv_ops;
extern const struct srv_backend_ops srv_shm_ops;

/* Whether a verbs device is present (MPIV_NET=auto). */
bool srv_ibv_available(void);

/* --- registration cache (mr.c) ----------------------------------------- */
/* Every registration is made with each of the job's n backends (be[i],
 * ops[i]); the srv_mr handed out is the last one's (see mr.c). */
int srv_mr_cache_init(int n, struct srv_backend *const *be,
                      const struct srv_backend_ops *const *ops);
void srv_mr_cache_fini(void);
/* Statistics for tests and benchmarks. */
struct srv_mr_stats {
    uint64_t regs;    /* backend registrations made                     */
    uint64_t deregs;  /* backend deregistrations made                   */
    uint64_t hits;    /* srv_mr_get served from the cache               */
    uint64_t live;    /* entries held now (referenced or not)           */
};
void srv_mr_cache_stats(struct srv_mr_stats *st);

/* --- the core's knobs and counters (tests, benchmarks) ------------------ */

/* The bytes of eager copies that may wait in the send queue before
 * srv_send_copy says SRV_COPY_FULL (Q1 in server.c); 0 restores the
 * default, SRV_COPY_QUEUE_MAX. For tests of the senders' wait. */
void srv_set_copy_cap(long bytes);
/* Idle backoff of the server thread: spin (then yield as long again) for
 * spin_ns, then sleep in doubling steps up to max_sleep_ns. */
void srv_set_backoff(uint64_t spin_ns, uint64_t max_sleep_ns);
/* Counted by whoever holds the progress lock (srv_get_stats takes it). */
struct srv_stats {
    uint64_t recvs, sends_done, writes_done, imms;
    uint64_t queued_posted; /* operations that waited in the send queue */
    uint64_t sleeps;        /* times the idle server slept              */
    uint64_t copies;        /* sends queued as heap copies (Q1)         */
    uint64_t refs;          /* sends queued by reference (srv_send_ref) */
};
void srv_get_stats(struct srv_stats *st);
/* "ofi", "ibv", "shm", "shm+ofi" or "shm+ibv" (a mixed job: shm within
 * the host, the network between hosts), or "none" before srv_init. */
const char *srv_backend_name(void);
/* What one backend carried into this rank (srv_get_net_stats): messages
 * and RDMA writes that arrived through it, reads this rank made through
 * it, and their bytes. */
struct srv_net_stats {
    const char *name;
    uint64_t msgs, bytes, writes, write_bytes, reads, read_bytes;
};
/* Fills st[0..max) for the job's backends; returns how many (0 before
 * srv_init). */
int srv_get_net_stats(struct srv_net_stats *st, int max);
/* The name of the backend that carries everything to and from peer. */
const char *srv_peer_backend(int peer);
/* Messages that arrived from peer so far. */
uint64_t srv_peer_arrivals(int peer);

/* --- helpers shared by the backends ------------------------------------ */

/* Gathers every rank's host identity (host name and boot id) once per
 * srv_init (collective the first time: every rank must call it alike) and
 * sets *host to an array of `size`: host[r] is the lowest rank on rank r's
 * host. Valid until the next srv_init or srv_finalize. */
int srv_host_map(int size, const int **host);
/* Whether this job mixes backends (shm within the host, the network
 * between hosts): known before the backends' init, which may adapt. */
bool srv_mixed_job(void);
/* Whether every rank is on one host (srv_host_map). */
int srv_all_on_one_host(bool *one_host);

/* The core this rank's server runs on by default: the last core of this
 * rank's share when `local_ranks` ranks split `ncores` cores evenly. */
int srv_default_core(int ncores, int local_ranks, int local_rank);

#endif
