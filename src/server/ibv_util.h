/*
 * ibv_util.h — the parts of the verbs backend that need no device, kept
 * apart so that they are unit tested on machines without RDMA hardware:
 * the connection blob swapped at bootstrap, GID and MTU choice, and the
 * send-queue credit accounting behind selective signalling.
 */
#ifndef MPIV_SERVER_IBV_UTIL_H
#define MPIV_SERVER_IBV_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a peer needs to connect its RC QP to ours. */
struct srv_ibv_qpinfo {
    uint32_t qpn;     /* our QP for that peer                   */
    uint32_t psn;     /* our first packet sequence number (24 b)  */
    uint16_t lid;     /* port LID (InfiniBand; 0 on RoCE)        */
    uint8_t mtu;      /* enum ibv_mtu of our port (1..5)          */
    uint8_t gid[16];  /* our GID (RoCE: routes the packets)       */
};

/* Fixed little-endian wire layout, independent of struct padding. */
#define SRV_IBV_QPINFO_WIRE 32
#define SRV_IBV_QPINFO_MAGIC 0x4d /* 'M': catches a peer of another layout */
void srv_ibv_qpinfo_pack(const struct srv_ibv_qpinfo *in, unsigned char out[SRV_IBV_QPINFO_WIRE]);
/* 0, or -1 for a blob that is not a packed qpinfo. */
int srv_ibv_qpinfo_unpack(const unsigned char in[SRV_IBV_QPINFO_WIRE], struct srv_ibv_qpinfo *out);

/* One row of a port's GID table, as ibv_query_gid_table reports it. */
struct srv_ibv_gid_row {
    uint8_t gid[16];
    uint32_t index;
    uint32_t type; /* IBV_GID_TYPE_IB, _ROCE_V1, _ROCE_V2 */
};

/* The GID index to use: `want` if >= 0 (and present in the table); on
 * InfiniBand (is_ib) index 0; on RoCE the first RoCE v2 entry whose GID is
 * an IPv4-mapped address (::ffff:a.b.c.d), else the first RoCE v2 entry.
 * -1 when none fits. */
int srv_ibv_pick_gid(const struct srv_ibv_gid_row *rows, size_t n, bool is_ib, int want);

/* enum ibv_mtu values (1 = 256 … 5 = 4096) to bytes and back; 0 / -1 when
 * out of range. The path MTU of a connection is the smaller of both ends. */
int srv_ibv_mtu_bytes(int mtu_enum);
int srv_ibv_mtu_enum(int bytes);
int srv_ibv_path_mtu(int mine, int theirs);

/*
 * Send-queue credits with selective signalling. A QP's send queue holds
 * `depth` work requests; a slot frees only when a signalled WR completes,
 * and then so do the unsignalled WRs posted before it (RC completes in
 * order). So: every `interval`-th WR is signalled (and any WR whose buffer
 * must be handed back, which the caller forces), and each signalled WR
 * carries the size of its batch — itself plus the unsignalled ones since
 * the previous signalled one — to return on completion.
 *
 * With interval <= depth / 2 a signalled WR is always in flight when the
 * queue fills, so credits always come back.
 */
struct srv_ibv_sq {
    uint32_t depth;
    uint32_t interval;
    uint32_t free;       /* slots not holding a WR                   */
    uint32_t unsignaled; /* WRs posted since the last signalled one  */
};
void srv_ibv_sq_init(struct srv_ibv_sq *sq, uint32_t depth, uint32_t interval);
/* Reserves a slot. Returns -1 when the queue is full (try later), else the
 * batch size to carry (> 0: signal this WR) or 0 (post it unsignalled).
 * `force` asks for a signal. */
int srv_ibv_sq_reserve(struct srv_ibv_sq *sq, bool force);
/* Undoes the last reserve when the post itself failed. */
void srv_ibv_sq_unreserve(struct srv_ibv_sq *sq, int batch, uint32_t saved_unsignaled);
/* A signalled WR carrying `batch` completed. */
void srv_ibv_sq_complete(struct srv_ibv_sq *sq, uint32_t batch);

/*
 * Failed completions. A work request that fails reports a completion even
 * when it was posted unsignalled, and its QP enters the error state: every
 * WR behind it on that QP then completes with IBV_WC_WR_FLUSH_ERR. So each
 * peer keeps the status of the first failure seen on its QP (0: none), in
 * `*peer_status` (written by the polling thread, read by posting threads).
 *
 * srv_ibv_wc_error classifies one completion's `status` (enum
 * ibv_wc_status): MPIV_SUCCESS for IBV_WC_SUCCESS, MPIV_ERR_PEER for a
 * flush (the connection had already failed), MPIV_ERR_NET for any other
 * failure. A failure is recorded in *peer_status if it is the peer's first,
 * and then *first is set (the caller logs that one in full).
 */
int srv_ibv_wc_error(int status, atomic_int *peer_status, bool *first);

#endif
