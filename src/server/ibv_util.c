/*
 * ibv_util.c — device-free helpers of the verbs backend (see ibv_util.h).
 * No libibverbs calls here: only its constants' meanings.
 */
#include <string.h>

#include "mpiv.h"
#include "server/ibv_util.h"

enum { GID_TYPE_IB = 0, GID_TYPE_ROCE_V1 = 1, GID_TYPE_ROCE_V2 = 2 };
/* enum ibv_wc_status (ibv.c checks them against verbs.h) */
enum { WC_SUCCESS = 0, WC_WR_FLUSH_ERR = 5 };

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* layout: magic, mtu, lid(2), qpn(4), psn(4), gid(16), 4 zero bytes */
void srv_ibv_qpinfo_pack(const struct srv_ibv_qpinfo *in, unsigned char out[SRV_IBV_QPINFO_WIRE])
{
    memset(out, 0, SRV_IBV_QPINFO_WIRE);
    out[0] = SRV_IBV_QPINFO_MAGIC;
    out[1] = in->mtu;
    out[2] = (unsigned char)in->lid;
    out[3] = (unsigned char)(in->lid >> 8);
    put32(out + 4, in->qpn);
    put32(out + 8, in->psn);
    memcpy(out + 12, in->gid, 16);
}

int srv_ibv_qpinfo_unpack(const unsigned char in[SRV_IBV_QPINFO_WIRE], struct srv_ibv_qpinfo *out)
{
    if (in[0] != SRV_IBV_QPINFO_MAGIC || in[1] < 1 || in[1] > 5)
        return -1;
    for (int i = 28; i < SRV_IBV_QPINFO_WIRE; i++)
        if (in[i])
            return -1;
    out->mtu = in[1];
    out->lid = (uint16_t)(in[2] | in[3] << 8);
    out->qpn = get32(in + 4);
    out->psn = get32(in + 8);
    if (out->qpn > 0xffffff || out->psn > 0xffffff)
        return -1;
    memcpy(out->gid, in + 12, 16);
    return 0;
}

static bool gid_is_zero(const uint8_t *g)
{
    for (int i = 0; i < 16; i++)
        if (g[i])
            return false;
    return true;
}

static bool gid_is_ipv4_mapped(const uint8_t *g)
{
    for (int i = 0; i < 10; i++)
        if (g[i])
            return false;
    return g[10] == 0xff && g[11] == 0xff;
}

int srv_ibv_pick_gid(const struct srv_ibv_gid_row *rows, size_t n, bool is_ib, int want)
{
    if (want >= 0) {
        for (size_t i = 0; i < n; i++)
            if (rows[i].index == (uint32_t)want && !gid_is_zero(rows[i].gid))
                return want;
        return -1;
    }
    if (is_ib) {
        for (size_t i = 0; i < n; i++)
            if (rows[i].index == 0)
                return 0;
        return -1;
    }
    int any_v2 = -1;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].type != GID_TYPE_ROCE_V2 || gid_is_zero(rows[i].gid))
            continue;
        if (gid_is_ipv4_mapped(rows[i].gid))
            return (int)rows[i].index;
        if (any_v2 < 0)
            any_v2 = (int)rows[i].index;
    }
    return any_v2;
}

int srv_ibv_mtu_bytes(int mtu_enum)
{
    if (mtu_enum < 1 || mtu_enum > 5)
        return 0;
    return 128 << mtu_enum; /* 1 = 256, …, 5 = 4096 */
}

int srv_ibv_mtu_enum(int bytes)
{
    for (int e = 1; e <= 5; e++)
        if (srv_ibv_mtu_bytes(e) == bytes)
            return e;
    return -1;
}

int srv_ibv_path_mtu(int mine, int theirs) { return mine < theirs ? mine : theirs; }

void srv_ibv_sq_init(struct srv_ibv_sq *sq, uint32_t depth, uint32_t interval)
{
    if (depth < 2)
        depth = 2;
    if (interval < 1)
        interval = 1;
    if (interval > depth / 2)
        interval = depth / 2;
    sq->depth = depth;
    sq->interval = interval;
    sq->free = depth;
    sq->unsignaled = 0;
}

int srv_ibv_sq_reserve(struct srv_ibv_sq *sq, bool force)
{
    if (sq->free == 0)
        return -1;
    /* Keep room: once fewer slots than an interval are left, signal every
     * WR so that credits keep coming back. */
    bool sig = force || sq->unsignaled + 1 >= sq->interval || sq->free <= sq->interval;
    sq->free--;
    if (!sig) {
        sq->unsignaled++;
        return 0;
    }
    int batch = (int)sq->unsignaled + 1;
    sq->unsignaled = 0;
    return batch;
}

void srv_ibv_sq_unreserve(struct srv_ibv_sq *sq, int batch, uint32_t saved_unsignaled)
{
    sq->free++;
    if (batch == 0)
        sq->unsignaled--;
    else
        sq->unsignaled = saved_unsignaled;
}

void srv_ibv_sq_complete(struct srv_ibv_sq *sq, uint32_t batch)
{
    sq->free += batch;
    if (sq->free > sq->depth)
        sq->free = sq->depth; /* only after a flush of a broken QP */
}

int srv_ibv_wc_error(int status, atomic_int *peer_status, bool *first)
{
    *first = false;
    if (status == WC_SUCCESS)
        return MPIV_SUCCESS;
    int none = 0;
    *first = atomic_compare_exchange_strong_explicit(peer_status, &none, status,
                                                     memory_order_release, memory_order_relaxed);
    return status == WC_WR_FLUSH_ERR ? MPIV_ERR_PEER : MPIV_ERR_NET;
}
