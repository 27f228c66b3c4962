/*
 * ibv.c — the verbs backend: a reliable-connected QP per peer (itself
 * included: a QP connected to another of our own QPs), one shared receive
 * queue and one completion queue for all of them.
 *
 * How the pieces map:
 *  - Connection: each rank creates its QPs, then swaps one ibv_qpinfo blob
 *    per (rank, peer) pair with boot_allgather (ibv_util.h) and moves
 *    every QP through INIT → RTR → RTS. RoCE needs a GID: the RoCE v2
 *    IPv4-mapped entry of the port's table (read with one
 *    ibv_query_gid_table call), or MPIV_IBV_GID_INDEX. The path MTU is the
 *    smaller of both ports' active MTUs.
 *  - Sends: IBV_WR_SEND from the registered packet region; packets up to
 *    the QP's max_inline_data go inline, and an inline send that needs no
 *    completion is free at once (SRV_DONE). Selective signalling with
 *    per-QP credit accounting (struct srv_ibv_sq): unsignalled WRs are paid
 *    back when a later signalled one completes.
 *  - The receiver learns the source from wc.qp_num (our QP for that peer).
 *  - RDMA write with immediate: IBV_WR_RDMA_WRITE_WITH_IMM, always
 *    signalled. At the target it consumes an SRQ receive, which the core
 *    posts again.
 *  - wr_id: a packet or op address with its kind in the low 2 bits, or,
 *    for an unsignalled inline send whose packet is already back in the
 *    pool, only the peer (a failure still completes every WR, and we must
 *    not touch a packet we no longer own).
 *  - Errors: every failed completion, signalled or not, is logged with
 *    ibv_wc_status_str and the peer's rank, and its status is kept as the
 *    peer's (the first only: after it the QP is in error and everything
 *    behind it is flushed). A send or write carrying a packet or an op goes
 *    to the core with MPIV_ERR_NET (or MPIV_ERR_PEER when flushed), and the
 *    core marks the peer gone. A failed unsignalled send has nothing to
 *    hand back, so the peer's kept status is what reaches the core: every
 *    later post to that peer fails at once with MPIV_ERR_PEER, the status
 *    and the rank in mpiv_error_detail(), and signalled WRs already queued
 *    behind it come back flushed (MPIV_ERR_PEER: the peer is marked gone).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "boot/boot.h"
#include "server/ibv_util.h"
#include "server/srv_int.h"
#include "util/spinlock.h"

#define IBV_SQ_DEPTH 256
#define IBV_SIGNAL_INTERVAL 32
#define IBV_INLINE_WANT 256
#define IBV_PORT 1
/* One RDMA write at most: verbs lengths are 32-bit and some devices take
 * less than 2^31; a power of two keeps the core's pieces aligned. */
#define IBV_MAX_WRITE ((size_t)1 << 30)

enum { WR_PEER = 0, WR_SEND = 1, WR_RECV = 2, WR_OP = 3 };

/* ibv_util.c classifies completions by these values without verbs.h */
_Static_assert(IBV_WC_SUCCESS == 0 && IBV_WC_WR_FLUSH_ERR == 5, "enum ibv_wc_status changed");

struct ibv_peer {
    struct ibv_qp *qp;
    util_spinlock lock; /* guards sq and the post */
    struct srv_ibv_sq sq;
    uint32_t psn;
    atomic_int failed; /* enum ibv_wc_status of the first failure on qp, 0: none */
};

struct srv_backend {
    int rank, size;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_srq *srq;
    struct ibv_peer *peers;
    uint32_t max_inline;
    int gid_index;
    union ibv_gid gid;
    uint16_t lid;
    int mtu; /* enum ibv_mtu of our port */
    size_t max_write; /* min(IBV_MAX_WRITE, the port's max_msg_sz) */
    bool is_ib;
    struct ibv_mr *pool_mr;
    size_t data_size;
    /* local QP number → peer, open addressing (size a power of two) */
    uint32_t *qpn_key;
    int32_t *qpn_peer;
    size_t qpn_cap;
};

bool srv_ibv_available(void)
{
    int n = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (l)
        ibv_free_device_list(l);
    return n > 0;
}

/* --- QP number map ------------------------------------------------------- */

static size_t qpn_slot(const struct srv_backend *be, uint32_t qpn)
{
    return (size_t)(qpn * 2654435761u) & (be->qpn_cap - 1);
}

static void qpn_put(struct srv_backend *be, uint32_t qpn, int peer)
{
    size_t i = qpn_slot(be, qpn);
    while (be->qpn_peer[i] >= 0)
        i = (i + 1) & (be->qpn_cap - 1);
    be->qpn_key[i] = qpn;
    be->qpn_peer[i] = peer;
}

static int qpn_find(const struct srv_backend *be, uint32_t qpn)
{
    for (size_t i = qpn_slot(be, qpn); be->qpn_peer[i] >= 0; i = (i + 1) & (be->qpn_cap - 1))
        if (be->qpn_key[i] == qpn)
            return be->qpn_peer[i];
    return -1;
}

/* --- init ---------------------------------------------------------------- */

static int vb_fail(const char *what, int e)
{
    return util_err(MPIV_ERR_NET, "verbs %s: %s", what, strerror(e));
}

static int pick_gid(struct srv_backend *be, const struct util_config *cfg,
                    const struct ibv_port_attr *pa)
{
    struct ibv_gid_entry *ent = calloc((size_t)pa->gid_tbl_len, sizeof *ent);
    struct srv_ibv_gid_row *rows = calloc((size_t)pa->gid_tbl_len, sizeof *rows);
    if (!ent || !rows) {
        free(ent);
        free(rows);
        return util_err(MPIV_ERR_NO_RESOURCES, "ibv: out of memory");
    }
    ssize_t n = ibv_query_gid_table(be->ctx, ent, (size_t)pa->gid_tbl_len, 0);
    size_t rows_n = 0;
    for (ssize_t i = 0; i < n; i++) {
        if (ent[i].port_num != IBV_PORT)
            continue;
        memcpy(rows[rows_n].gid, ent[i].gid.raw, 16);
        rows[rows_n].index = ent[i].gid_index;
        rows[rows_n].type = ent[i].gid_type;
        rows_n++;
    }
    int idx = srv_ibv_pick_gid(rows, rows_n, be->is_ib, (int)cfg->ibv_gid_index);
    free(ent);
    free(rows);
    if (idx < 0)
        return util_err(MPIV_ERR_NET,
                        cfg->ibv_gid_index >= 0
                            ? "verbs: GID index %lld is not in the port's table"
                            : "verbs: no RoCE v2 GID on port 1 (%lld); give "
                              "MPIV_IBV_GID_INDEX (see show_gids)",
                        (long long)cfg->ibv_gid_index);
    be->gid_index = idx;
    if (ibv_query_gid(be->ctx, IBV_PORT, idx, &be->gid))
        return vb_fail("ibv_query_gid", errno);
    return MPIV_SUCCESS;
}

static void vb_finalize(struct srv_backend *be);

static int vb_init(const struct util_config *cfg, int rank, int size, struct srv_backend **out)
{
    int ndev = 0;
    struct ibv_device **devs = ibv_get_device_list(&ndev);
    if (!devs || ndev == 0) {
        if (devs)
            ibv_free_device_list(devs);
        return util_err(MPIV_ERR_NET,
                        "MPIV_NET=ibv: no verbs device found (ibv_get_device_list found none; "
                        "see ibv_devinfo, or use MPIV_NET=ofi)");
    }
    struct ibv_device *dev = NULL;
    for (int i = 0; i < ndev && !dev; i++)
        if (!cfg->ibv_device[0] || strcmp(ibv_get_device_name(devs[i]), cfg->ibv_device) == 0)
            dev = devs[i];
    if (!dev) {
        ibv_free_device_list(devs);
        return util_err(MPIV_ERR_NET, "MPIV_IBV_DEVICE=%s: no such verbs device",
                        cfg->ibv_device);
    }
    struct srv_backend *be = calloc(1, sizeof *be);
    if (!be) {
        ibv_free_device_list(devs);
        return util_err(MPIV_ERR_NO_RESOURCES, "ibv: out of memory");
    }
    be->rank = rank;
    be->size = size;
    be->ctx = ibv_open_device(dev);
    int rc;
    if (!be->ctx) {
        rc = util_err(MPIV_ERR_NET, "verbs: cannot open device %s: %s",
                      ibv_get_device_name(dev), strerror(errno));
        ibv_free_device_list(devs);
        free(be);
        return rc;
    }
    ibv_free_device_list(devs);

    struct ibv_port_attr pa;
    if ((rc = ibv_query_port(be->ctx, IBV_PORT, &pa))) {
        rc = vb_fail("ibv_query_port", rc);
        goto fail;
    }
    if (pa.state != IBV_PORT_ACTIVE) {
        rc = util_err(MPIV_ERR_NET, "verbs: port %d of %s is not active (state %d)", IBV_PORT,
                      ibv_get_device_name(be->ctx->device), (int)pa.state);
        goto fail;
    }
    be->is_ib = pa.link_layer == IBV_LINK_LAYER_INFINIBAND;
    be->lid = pa.lid;
    be->mtu = (int)pa.active_mtu;
    be->max_write = IBV_MAX_WRITE;
    if (pa.max_msg_sz > 0 && pa.max_msg_sz < be->max_write)
        be->max_write = pa.max_msg_sz;
    if ((rc = pick_gid(be, cfg, &pa)))
        goto fail;

    struct ibv_device_attr da;
    if ((rc = ibv_query_device(be->ctx, &da))) {
        rc = vb_fail("ibv_query_device", rc);
        goto fail;
    }
    uint32_t sq_depth = IBV_SQ_DEPTH;
    if ((int)sq_depth > da.max_qp_wr)
        sq_depth = (uint32_t)da.max_qp_wr;
    uint32_t srq_depth = (uint32_t)cfg->recv_depth;
    if ((int)srq_depth > da.max_srq_wr)
        srq_depth = (uint32_t)da.max_srq_wr;
    int cqe = (int)(sq_depth * (uint32_t)size + srq_depth);
    if (cqe > da.max_cqe)
        cqe = da.max_cqe;

    if (!(be->pd = ibv_alloc_pd(be->ctx))) {
        rc = vb_fail("ibv_alloc_pd", errno);
        goto fail;
    }
    if (!(be->cq = ibv_create_cq(be->ctx, cqe, NULL, NULL, 0))) {
        rc = vb_fail("ibv_create_cq", errno);
        goto fail;
    }
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = srq_depth, .max_sge = 1}};
    if (!(be->srq = ibv_create_srq(be->pd, &sa))) {
        rc = vb_fail("ibv_create_srq", errno);
        goto fail;
    }
    be->peers = calloc((size_t)size, sizeof *be->peers);
    be->qpn_cap = 16;
    while (be->qpn_cap < 2 * (size_t)size)
        be->qpn_cap *= 2;
    be->qpn_key = calloc(be->qpn_cap, sizeof *be->qpn_key);
    be->qpn_peer = malloc(be->qpn_cap * sizeof *be->qpn_peer);
    if (!be->peers || !be->qpn_key || !be->qpn_peer) {
        rc = util_err(MPIV_ERR_NO_RESOURCES, "ibv: out of memory for %d peers", size);
        goto fail;
    }
    memset(be->qpn_peer, 0xff, be->qpn_cap * sizeof *be->qpn_peer);
    be->max_inline = UINT32_MAX;
    for (int r = 0; r < size; r++) {
        struct ibv_qp_init_attr qa = {
            .send_cq = be->cq,
            .recv_cq = be->cq,
            .srq = be->srq,
            .cap = {.max_send_wr = sq_depth, .max_send_sge = 1, .max_inline_data = IBV_INLINE_WANT},
            .qp_type = IBV_QPT_RC,
            .sq_sig_all = 0,
        };
        struct ibv_peer *pe = &be->peers[r];
        if (!(pe->qp = ibv_create_qp(be->pd, &qa))) {
            /* some devices cap inline data lower: ask for none */
            qa.cap.max_inline_data = 0;
            if (!(pe->qp = ibv_create_qp(be->pd, &qa))) {
                rc = vb_fail("ibv_create_qp", errno);
                goto fail;
            }
        }
        if (qa.cap.max_inline_data < be->max_inline)
            be->max_inline = qa.cap.max_inline_data;
        util_spin_init(&pe->lock);
        atomic_init(&pe->failed, 0);
        srv_ibv_sq_init(&pe->sq, qa.cap.max_send_wr < sq_depth ? qa.cap.max_send_wr : sq_depth,
                     IBV_SIGNAL_INTERVAL);
        pe->psn = (uint32_t)(rand() ^ (r * 7919) ^ (int)getpid()) & 0xffffff;
        qpn_put(be, pe->qp->qp_num, r);
        struct ibv_qp_attr at = {
            .qp_state = IBV_QPS_INIT,
            .pkey_index = 0,
            .port_num = IBV_PORT,
            .qp_access_flags =
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
        };
        if ((rc = ibv_modify_qp(pe->qp, &at,
                                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                    IBV_QP_ACCESS_FLAGS))) {
            rc = vb_fail("ibv_modify_qp(INIT)", rc);
            goto fail;
        }
    }
    util_log_info("ibv: device %s, %s, GID index %d, MTU %d, inline %u, SQ %u, SRQ %u",
                  ibv_get_device_name(be->ctx->device), be->is_ib ? "InfiniBand" : "RoCE",
                  be->gid_index, srv_ibv_mtu_bytes(be->mtu), be->max_inline, sq_depth, srq_depth);
    *out = be;
    return MPIV_SUCCESS;
fail:
    vb_finalize(be);
    return rc;
}

static int connect_qp(struct srv_backend *be, int r, const struct srv_ibv_qpinfo *rem)
{
    struct ibv_peer *pe = &be->peers[r];
    struct ibv_qp_attr at = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = (enum ibv_mtu)srv_ibv_path_mtu(be->mtu, rem->mtu),
        .dest_qp_num = rem->qpn,
        .rq_psn = rem->psn,
        .max_dest_rd_atomic = 1,
        .min_rnr_timer = 12,
        .ah_attr = {.dlid = rem->lid, .sl = 0, .src_path_bits = 0, .port_num = IBV_PORT},
    };
    if (!be->is_ib) {
        at.ah_attr.is_global = 1;
        memcpy(at.ah_attr.grh.dgid.raw, rem->gid, 16);
        at.ah_attr.grh.sgid_index = (uint8_t)be->gid_index;
        at.ah_attr.grh.hop_limit = 64;
    }
    int rc = ibv_modify_qp(pe->qp, &at,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        return util_err(MPIV_ERR_NET, "verbs: QP to rank %d, ready-to-receive: %s", r,
                        strerror(rc));
    memset(&at, 0, sizeof at);
    at.qp_state = IBV_QPS_RTS;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7; /* infinite: an SRQ briefly out of receives is not an error */
    at.sq_psn = pe->psn;
    at.max_rd_atomic = 1;
    rc = ibv_modify_qp(pe->qp, &at,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc)
        return util_err(MPIV_ERR_NET, "verbs: QP to rank %d, ready-to-send: %s", r,
                        strerror(rc));
    return MPIV_SUCCESS;
}

static int vb_exchange(struct srv_backend *be)
{
    size_t n = (size_t)be->size;
    unsigned char *mine = calloc(n, SRV_IBV_QPINFO_WIRE), *all = malloc(n * n * SRV_IBV_QPINFO_WIRE);
    if (!mine || !all) {
        free(mine);
        free(all);
        return util_err(MPIV_ERR_NO_RESOURCES, "ibv: out of memory for connection data");
    }
    for (size_t r = 0; r < n; r++) {
        struct srv_ibv_qpinfo qi = {.qpn = be->peers[r].qp->qp_num,
                                .psn = be->peers[r].psn,
                                .lid = be->lid,
                                .mtu = (uint8_t)be->mtu};
        memcpy(qi.gid, be->gid.raw, 16);
        srv_ibv_qpinfo_pack(&qi, mine + r * SRV_IBV_QPINFO_WIRE);
    }
    int rc = boot_allgather(mine, n * SRV_IBV_QPINFO_WIRE, all);
    for (size_t r = 0; r < n && rc == MPIV_SUCCESS; r++) {
        /* rank r's QP for us */
        struct srv_ibv_qpinfo rem;
        if (srv_ibv_qpinfo_unpack(all + (r * n + (size_t)be->rank) * SRV_IBV_QPINFO_WIRE, &rem))
            rc = util_err(MPIV_ERR_NET, "ibv: rank %zu sent malformed connection data", r);
        else
            rc = connect_qp(be, (int)r, &rem);
    }
    free(mine);
    free(all);
    return rc;
}

/* --- memory -------------------------------------------------------------- */

static int vb_reg_pool(struct srv_backend *be, struct pkt_pool *pool)
{
    void *base;
    size_t len;
    pkt_pool_region(pool, &base, &len);
    be->data_size = pkt_data_size(pool);
    be->pool_mr = ibv_reg_mr(be->pd, base, len, IBV_ACCESS_LOCAL_WRITE);
    if (!be->pool_mr)
        return util_err(MPIV_ERR_NET, "verbs: registering the packet pool (%zu bytes): %s%s",
                        len, strerror(errno),
                        errno == ENOMEM ? " (raise ulimit -l)" : "");
    return MPIV_SUCCESS;
}

static int vb_mr_reg(struct srv_backend *be, void *buf, size_t len, srv_mr *mr, void **handle)
{
    struct ibv_mr *m = ibv_reg_mr(be->pd, buf, len,
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                      IBV_ACCESS_REMOTE_READ);
    if (!m)
        return util_err(MPIV_ERR_NET, "verbs: ibv_reg_mr(%p, %zu bytes): %s", buf, len,
                        strerror(errno));
    mr->rkey = m->rkey;
    mr->raddr = (uint64_t)(uintptr_t)buf;
    mr->base = (uintptr_t)buf;
    mr->desc = m;
    *handle = m;
    return MPIV_SUCCESS;
}

static void vb_mr_dereg(struct srv_backend *be, void *handle)
{
    (void)be;
    int rc = ibv_dereg_mr(handle);
    if (rc)
        util_log_warn("verbs: ibv_dereg_mr: %s", strerror(rc));
}

static bool vb_mr_pins(struct srv_backend *be)
{
    (void)be;
    return true;
}

/* --- data path ----------------------------------------------------------- */

/* Posts wr on the peer's QP under its credit accounting. batch_slot gets
 * the batch size a signalled WR carries. */
static int post_on(struct srv_backend *be, int peer, struct ibv_send_wr *wr, bool force,
                   void **batch_slot, const char *what)
{
    struct ibv_peer *pe = &be->peers[peer];
    int failed = atomic_load_explicit(&pe->failed, memory_order_acquire);
    if (util_unlikely(failed))
        return util_err(MPIV_ERR_PEER, "verbs: %s to rank %d refused: an earlier transfer on "
                        "its connection failed (%s)", what, peer,
                        ibv_wc_status_str((enum ibv_wc_status)failed));
    util_spin_lock(&pe->lock);
    uint32_t saved = pe->sq.unsignaled;
    int batch = srv_ibv_sq_reserve(&pe->sq, force);
    if (batch < 0) {
        util_spin_unlock(&pe->lock);
        return SRV_AGAIN;
    }
    if (batch > 0) {
        wr->send_flags |= IBV_SEND_SIGNALED;
        *batch_slot = (void *)(uintptr_t)batch;
    } else {
        /* No completion will name this WR's buffer: only its peer. */
        wr->wr_id = ((uint64_t)peer << 2) | WR_PEER;
    }
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(pe->qp, wr, &bad);
    if (rc)
        srv_ibv_sq_unreserve(&pe->sq, batch, saved);
    util_spin_unlock(&pe->lock);
    if (rc == ENOMEM)
        return SRV_AGAIN;
    if (rc)
        return util_err(MPIV_ERR_NET, "verbs: %s to rank %d: %s", what, peer, strerror(rc));
    return batch > 0 ? MPIV_SUCCESS : SRV_DONE;
}

static int vb_post_send(struct srv_backend *be, pkt_t *p, int peer)
{
    struct ibv_sge sge = {.addr = (uintptr_t)p->data, .length = p->len,
                          .lkey = be->pool_mr->lkey};
    bool inl = p->len <= be->max_inline;
    struct ibv_send_wr wr = {
        .wr_id = (uintptr_t)p | WR_SEND,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = inl ? IBV_SEND_INLINE : 0,
    };
    /* A non-inline send's buffer is ours until it completes: signal it. */
    return post_on(be, peer, &wr, !inl, &p->srv_ctx[0], "send");
}

static int vb_post_recv(struct srv_backend *be, pkt_t *p)
{
    struct ibv_sge sge = {.addr = (uintptr_t)p->data, .length = (uint32_t)be->data_size,
                          .lkey = be->pool_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uintptr_t)p | WR_RECV, .sg_list = &sge, .num_sge = 1},
                       *bad;
    int rc = ibv_post_srq_recv(be->srq, &wr, &bad);
    if (rc == ENOMEM)
        return SRV_AGAIN;
    if (rc)
        return util_err(MPIV_ERR_NET, "verbs: ibv_post_srq_recv: %s", strerror(rc));
    return MPIV_SUCCESS;
}

static int vb_rdma_write_imm(struct srv_backend *be, struct srv_rdma_op *op)
{
    struct ibv_mr *m = op->desc;
    struct ibv_sge sge = {.addr = (uintptr_t)op->buf, .length = (uint32_t)op->len,
                          .lkey = m ? m->lkey : 0};
    struct ibv_send_wr wr = {
        .wr_id = (uintptr_t)op | WR_OP,
        .sg_list = op->len ? &sge : NULL,
        .num_sge = op->len ? 1 : 0,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .imm_data = htonl(op->imm),
        .wr.rdma = {.remote_addr = op->raddr, .rkey = (uint32_t)op->rkey},
    };
    if (op->len > be->max_write)
        return util_err(MPIV_ERR_ARG, "verbs: RDMA write of %zu bytes to rank %d (at most %zu)",
                        op->len, op->peer, be->max_write);
    return post_on(be, op->peer, &wr, true, &op->be[0], "RDMA write");
}

static size_t vb_max_write(struct srv_backend *be) { return be->max_write; }

static void give_credits(struct srv_backend *be, int peer, void *batch)
{
    struct ibv_peer *pe = &be->peers[peer];
    util_spin_lock(&pe->lock);
    srv_ibv_sq_complete(&pe->sq, (uint32_t)(uintptr_t)batch);
    util_spin_unlock(&pe->lock);
}

/* Logs a failed send-side completion: every real failure, and a flush only
 * when it is the first news of the peer's connection failing. */
static void log_send_error(const char *what, int peer, enum ibv_wc_status st, bool first)
{
    if (st != IBV_WC_WR_FLUSH_ERR)
        util_log_error("verbs: %s to rank %d failed: %s%s", what, peer, ibv_wc_status_str(st),
                       first ? "" : " (its connection had failed already)");
    else if (first)
        util_log_error("verbs: %s to rank %d flushed: its connection failed", what, peer);
}

static atomic_int *peer_failed(struct srv_backend *be, int peer, atomic_int *none)
{
    return peer >= 0 && peer < be->size ? &be->peers[peer].failed : none;
}

static int vb_poll(struct srv_backend *be, struct srv_cqe *ev, int max)
{
    struct ibv_wc wc[32];
    if (max > 32)
        max = 32;
    int n = ibv_poll_cq(be->cq, max, wc);
    if (n < 0)
        return -util_err(MPIV_ERR_NET, "verbs: ibv_poll_cq failed");
    int out = 0;
    for (int i = 0; i < n; i++) {
        struct ibv_wc *w = &wc[i];
        unsigned kind = (unsigned)(w->wr_id & 3);
        void *ptr = (void *)(uintptr_t)(w->wr_id & ~(uint64_t)3);
        struct srv_cqe *e = &ev[out];
        memset(e, 0, sizeof *e);
        atomic_int none = 0;
        bool first;
        switch (kind) {
        case WR_PEER: {
            /* An unsignalled inline send: its packet went back to the pool
             * at post time. Only a failure completes it; the peer's status
             * makes later posts to it fail (see the header comment). */
            int peer = (int)(w->wr_id >> 2);
            if (srv_ibv_wc_error((int)w->status, peer_failed(be, peer, &none), &first))
                log_send_error("send", peer, w->status, first);
            continue;
        }
        case WR_SEND: {
            pkt_t *p = ptr;
            give_credits(be, p->peer, p->srv_ctx[0]);
            e->kind = SRV_CQE_SEND;
            e->p = p;
            e->src = p->peer;
            e->err = srv_ibv_wc_error((int)w->status, peer_failed(be, p->peer, &none), &first);
            if (e->err)
                log_send_error("send", p->peer, w->status, first);
            break;
        }
        case WR_OP: {
            struct srv_rdma_op *op = ptr;
            give_credits(be, op->peer, op->be[0]);
            e->kind = SRV_CQE_WRITE;
            e->op = op;
            e->src = op->peer;
            e->err = srv_ibv_wc_error((int)w->status, peer_failed(be, op->peer, &none), &first);
            if (e->err)
                log_send_error("RDMA write", op->peer, w->status, first);
            break;
        }
        case WR_RECV: {
            /* The source is the QP the data came in on, the length what
             * the device wrote: never anything the packet says. */
            int src = qpn_find(be, w->qp_num);
            e->p = ptr;
            e->src = src;
            e->len = w->byte_len;
            /* a failed receive breaks the QP it arrived on as well */
            e->err = srv_ibv_wc_error((int)w->status, peer_failed(be, src, &none), &first);
            if (!e->err && src < 0) {
                /* not one of our connections: the packet only goes back */
                util_log_error("verbs: completion on unknown QP %u dropped", w->qp_num);
                e->kind = SRV_CQE_RECV;
                e->err = MPIV_ERR_NET;
            } else if (e->err) {
                e->kind = SRV_CQE_RECV;
                if (w->status != IBV_WC_WR_FLUSH_ERR)
                    util_log_error("verbs: receive from rank %d failed: %s", src,
                                   ibv_wc_status_str(w->status));
            } else if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                e->kind = SRV_CQE_IMM;
                e->imm = ntohl(w->imm_data);
            } else {
                e->kind = SRV_CQE_RECV;
            }
            break;
        }
        }
        out++;
    }
    return out;
}

static void vb_finalize(struct srv_backend *be)
{
    if (!be)
        return;
    if (be->peers)
        for (int r = 0; r < be->size; r++)
            if (be->peers[r].qp)
                ibv_destroy_qp(be->peers[r].qp);
    if (be->srq)
        ibv_destroy_srq(be->srq);
    if (be->pool_mr)
        ibv_dereg_mr(be->pool_mr);
    if (be->cq)
        ibv_destroy_cq(be->cq);
    if (be->pd)
        ibv_dealloc_pd(be->pd);
    if (be->ctx)
        ibv_close_device(be->ctx);
    free(be->peers);
    free(be->qpn_key);
    free(be->qpn_peer);
    free(be);
}

const struct srv_backend_ops srv_ibv_ops = {
    .name = "ibv",
    .init = vb_init,
    .exchange = vb_exchange,
    .reg_pool = vb_reg_pool,
    .post_send = vb_post_send,
    .post_recv = vb_post_recv,
    .rdma_write_imm = vb_rdma_write_imm,
    .max_write = vb_max_write,
    .mr_reg = vb_mr_reg,
    .mr_dereg = vb_mr_dereg,
    .poll = vb_poll,
    .mr_pins = vb_mr_pins,
    .finalize = vb_finalize,
};
