/*
 * ofi.c — the libfabric backend: one FI_EP_RDM endpoint with FI_MSG and
 * FI_RMA, one completion queue, one table address vector.
 *
 * How the pieces map:
 *  - Ranks are fi_addr_t values: addresses are inserted into an FI_AV_TABLE
 *    in rank order, so rank r is fi_addr r (checked at insertion).
 *  - A packet travels with fi_senddata, whose remote CQ data is the sender's
 *    rank: the receiver learns the source without FI_SOURCE (which costs a
 *    reverse address lookup on rxm). Packets up to inject_size go with
 *    fi_injectdata and are free as soon as the call returns.
 *  - An RDMA write with immediate is fi_writedata with CQ data
 *    (writer's rank << 32 | imm); the target's CQ reports it with
 *    FI_REMOTE_CQ_DATA without consuming a receive buffer (we do not accept
 *    providers that need FI_RX_CQ_DATA). fi_cq(3) only promises the length
 *    of receives, and tcp;ofi_rxm indeed reports 0 for remote writes, so
 *    ofi_exchange probes with a write to ourselves: a provider that does
 *    not report the length gets "notified writes" instead — fi_writemsg
 *    with FI_DELIVERY_COMPLETE, and once it completes (the data is in the
 *    target's memory) a 16-byte inject {imm, len} whose CQ data is the
 *    rank with OFI_NOTE_BIT set; the target turns that receive into the
 *    immediate. It costs one more one-way message, only on such providers.
 *  - Operation contexts: a packet's srv_ctx[0..3] is its struct fi_context
 *    (FI_CONTEXT providers); srv_ctx[4] says whether it was posted as a
 *    send or a receive, which error completions need. Providers that ask
 *    for FI_CONTEXT2 (64 bytes) get a side table indexed by packet index.
 *    An RDMA op's be[] is 64 bytes, room for either.
 *  - Memory registration follows the provider's mr_mode: FI_MR_LOCAL (pass
 *    descriptors for local buffers: we always do), FI_MR_VIRT_ADDR (remote
 *    addresses are virtual addresses, else offsets from the region start),
 *    FI_MR_PROV_KEY (the provider picks keys, else we hand out increasing
 *    ones, never reused, so a stale key cannot reach a new region),
 *    FI_MR_ALLOCATED (only backed memory: true of user buffers),
 *    FI_MR_ENDPOINT (bind each region to the endpoint and enable it).
 *  - The endpoint is FI_THREAD_SAFE: any thread may post; only the thread
 *    holding the core's progress lock reads the CQ.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "boot/boot.h"
#include "server/srv_int.h"

#define OFI_VERSION FI_VERSION(1, 9)
#define OFI_ADDR_MAX 120 /* bytes of an endpoint name we accept */

enum { OFI_POSTED_SEND = 1, OFI_POSTED_RECV = 2 };
#define OFI_NOTE_BIT (1ull << 63)

struct srv_backend {
    int rank, size;
    char prov[64];
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    uint64_t mr_mode;
    size_t inject_size;
    bool ctx2; /* provider wants struct fi_context2 */
    /* the packet region */
    struct pkt_pool *pool;
    struct fid_mr *pool_mr;
    void *pool_desc;
    size_t data_size;
    uintptr_t pool_base, pool_end;
    struct fi_context2 *ctx2_table; /* one per packet when ctx2 */
    _Atomic uint64_t next_key;
    bool notify;                      /* writes announced by a message    */
    struct srv_rdma_op *note_pending; /* notifications not injected yet  */
};

static int ofi_fail(const char *what, int fi_rc)
{
    return util_err(MPIV_ERR_NET, "libfabric %s: %s (%d)", what, fi_strerror(-fi_rc), fi_rc);
}

/* --- contexts ------------------------------------------------------------ */

static void *pkt_ctx(struct srv_backend *be, pkt_t *p, int kind)
{
    p->srv_ctx[4] = (void *)(uintptr_t)kind;
    if (be->ctx2)
        return &be->ctx2_table[p->idx];
    return &p->srv_ctx[0];
}

/* The packet behind a context, or NULL if the context is an RDMA op. */
static pkt_t *ctx_pkt(struct srv_backend *be, void *ctx)
{
    uintptr_t c = (uintptr_t)ctx;
    if (be->ctx2) {
        uintptr_t t = (uintptr_t)be->ctx2_table;
        if (c >= t && c < t + pkt_count(be->pool) * sizeof(struct fi_context2))
            return pkt_by_index(be->pool, (uint32_t)((c - t) / sizeof(struct fi_context2)));
        return NULL;
    }
    if (c >= be->pool_base && c < be->pool_end)
        return (pkt_t *)(c - offsetof(pkt_t, srv_ctx));
    return NULL;
}

/* --- init ------------------------------------------------------------------ */

static int ofi_pick_provider(const struct util_config *cfg, char *prov, size_t n)
{
    if (cfg->ofi_provider[0]) {
        snprintf(prov, n, "%s", cfg->ofi_provider);
        return MPIV_SUCCESS;
    }
    bool one_host;
    int rc = srv_all_on_one_host(&one_host);
    if (rc)
        return rc;
    snprintf(prov, n, "%s", one_host ? "shm" : "tcp;ofi_rxm");
    return MPIV_SUCCESS;
}

static void ofi_finalize(struct srv_backend *be);

static int ofi_init(const struct util_config *cfg, int rank, int size, struct srv_backend **out)
{
    struct srv_backend *be = calloc(1, sizeof *be);
    if (!be)
        return util_err(MPIV_ERR_NO_RESOURCES, "ofi: out of memory");
    be->rank = rank;
    be->size = size;
    atomic_init(&be->next_key, 1);
    int rc = ofi_pick_provider(cfg, be->prov, sizeof be->prov);
    if (rc) {
        free(be);
        return rc;
    }

    struct fi_info *hints = fi_allocinfo();
    if (!hints) {
        free(be);
        return util_err(MPIV_ERR_NO_RESOURCES, "ofi: fi_allocinfo failed");
    }
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    /* Same (source, tag) must arrive in order: sends from one endpoint to
     * one peer must not overtake each other. */
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->fabric_attr->prov_name = strdup(be->prov);

    rc = fi_getinfo(OFI_VERSION, NULL, NULL, 0, hints, &be->info);
    fi_freeinfo(hints);
    if (rc) {
        rc = util_err(MPIV_ERR_NET,
                      "libfabric provider '%s' offers no reliable-datagram endpoint with "
                      "messages, RMA and remote CQ data (fi_getinfo: %s); set "
                      "MPIV_OFI_PROVIDER (e.g. shm, tcp;ofi_rxm)",
                      be->prov, fi_strerror(-rc));
        free(be);
        return rc;
    }
    struct fi_info *fi = be->info;
    if (fi->domain_attr->cq_data_size < 8) {
        rc = util_err(MPIV_ERR_NET,
                      "libfabric provider '%s' carries %zu bytes of remote CQ data; MPIv "
                      "needs 8",
                      fi->fabric_attr->prov_name, fi->domain_attr->cq_data_size);
        goto fail;
    }
    be->mr_mode = fi->domain_attr->mr_mode;
    be->inject_size = fi->tx_attr->inject_size;
    be->ctx2 = (fi->mode & FI_CONTEXT2) != 0;
    util_log_info("ofi: provider %s, fabric %s, domain %s, mr_mode 0x%" PRIx64
                  ", inject %zu, mode 0x%" PRIx64,
                  fi->fabric_attr->prov_name, fi->fabric_attr->name, fi->domain_attr->name,
                  be->mr_mode, be->inject_size, (uint64_t)fi->mode);

    if ((rc = fi_fabric(fi->fabric_attr, &be->fabric, NULL))) {
        rc = ofi_fail("fi_fabric", rc);
        goto fail;
    }
    if ((rc = fi_domain(be->fabric, fi, &be->domain, NULL))) {
        rc = ofi_fail("fi_domain", rc);
        goto fail;
    }
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = (size_t)size};
    if ((rc = fi_av_open(be->domain, &av_attr, &be->av, NULL))) {
        rc = ofi_fail("fi_av_open", rc);
        goto fail;
    }
    struct fi_cq_attr cq_attr = {
        .format = FI_CQ_FORMAT_DATA,
        .wait_obj = FI_WAIT_NONE,
        .size = fi->tx_attr->size + fi->rx_attr->size,
    };
    if ((rc = fi_cq_open(be->domain, &cq_attr, &be->cq, NULL))) {
        rc = ofi_fail("fi_cq_open", rc);
        goto fail;
    }
    if ((rc = fi_endpoint(be->domain, fi, &be->ep, NULL))) {
        rc = ofi_fail("fi_endpoint", rc);
        goto fail;
    }
    if ((rc = fi_ep_bind(be->ep, &be->av->fid, 0))) {
        rc = ofi_fail("fi_ep_bind(av)", rc);
        goto fail;
    }
    if ((rc = fi_ep_bind(be->ep, &be->cq->fid, FI_TRANSMIT | FI_RECV))) {
        rc = ofi_fail("fi_ep_bind(cq)", rc);
        goto fail;
    }
    if ((rc = fi_enable(be->ep))) {
        rc = ofi_fail("fi_enable", rc);
        goto fail;
    }
    *out = be;
    return MPIV_SUCCESS;
fail:
    ofi_finalize(be); /* closes whatever was opened (be is zeroed) */
    return rc;
}

/* --- memory registration ---------------------------------------------------- */

static int ofi_reg(struct srv_backend *be, void *buf, size_t len, uint64_t access,
                   struct fid_mr **mrp)
{
    uint64_t key = 0;
    if (!(be->mr_mode & FI_MR_PROV_KEY))
        key = atomic_fetch_add_explicit(&be->next_key, 1, memory_order_relaxed);
    int rc = fi_mr_reg(be->domain, buf, len, access, 0, key, 0, mrp, NULL);
    if (rc)
        return util_err(MPIV_ERR_NET, "libfabric fi_mr_reg(%p, %zu bytes): %s", buf, len,
                        fi_strerror(-rc));
    if (be->mr_mode & FI_MR_ENDPOINT) {
        if ((rc = fi_mr_bind(*mrp, &be->ep->fid, 0)) || (rc = fi_mr_enable(*mrp))) {
            fi_close(&(*mrp)->fid);
            return ofi_fail("fi_mr_bind/enable", rc);
        }
    }
    return MPIV_SUCCESS;
}

static int ofi_reg_pool(struct srv_backend *be, struct pkt_pool *pool)
{
    void *base;
    size_t len;
    pkt_pool_region(pool, &base, &len);
    be->pool = pool;
    be->data_size = pkt_data_size(pool);
    be->pool_base = (uintptr_t)base;
    be->pool_end = (uintptr_t)base + len;
    if (be->ctx2) {
        be->ctx2_table = calloc(pkt_count(pool), sizeof(struct fi_context2));
        if (!be->ctx2_table)
            return util_err(MPIV_ERR_NO_RESOURCES, "ofi: out of memory for contexts");
    }
    int rc = ofi_reg(be, base, len, FI_SEND | FI_RECV, &be->pool_mr);
    if (rc)
        return rc;
    be->pool_desc = fi_mr_desc(be->pool_mr);
    return MPIV_SUCCESS;
}

static int ofi_mr_reg(struct srv_backend *be, void *buf, size_t len, srv_mr *mr, void **handle)
{
    struct fid_mr *m;
    int rc = ofi_reg(be, buf, len,
                     FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                     &m);
    if (rc)
        return rc;
    mr->rkey = fi_mr_key(m);
    mr->base = (uintptr_t)buf;
    mr->raddr = (be->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
    mr->desc = fi_mr_desc(m);
    *handle = m;
    return MPIV_SUCCESS;
}

static void ofi_mr_dereg(struct srv_backend *be, void *handle)
{
    (void)be;
    int rc = fi_close(&((struct fid_mr *)handle)->fid);
    if (rc)
        util_log_warn("ofi: fi_close(mr): %s", fi_strerror(-rc));
}

static bool ofi_mr_pins(struct srv_backend *be)
{
    /* The software providers resolve virtual addresses at transfer time
     * (shm: process_vm_readv or a bounce buffer; tcp, udp, sockets: a
     * copy through the socket). The rest pin pages. */
    const char *p = be->info->fabric_attr->prov_name;
    static const char *const soft[] = {"shm", "tcp", "udp", "sockets"};
    for (size_t i = 0; i < sizeof soft / sizeof soft[0]; i++) {
        size_t n = strlen(soft[i]);
        if (strncmp(p, soft[i], n) == 0 && (p[n] == '\0' || p[n] == ';'))
            return false;
    }
    return true;
}

/* Writes 24 bytes with CQ data to ourselves and looks at the length the
 * target's completion reports (see the top of the file). */
static int ofi_probe_write_len(struct srv_backend *be)
{
    _Alignas(64) static unsigned char src[64], dst[64];
    struct fid_mr *ms = NULL, *md = NULL;
    int rc = ofi_reg(be, src, sizeof src, FI_WRITE | FI_READ | FI_SEND | FI_RECV, &ms);
    if (!rc)
        rc = ofi_reg(be, dst, sizeof dst, FI_REMOTE_WRITE | FI_REMOTE_READ, &md);
    if (rc)
        goto out;
    struct fi_context2 ctx;
    uint64_t raddr = (be->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)dst : 0;
    ssize_t n;
    uint64_t deadline = util_now_ns() + 5000000000ull;
    while ((n = fi_writedata(be->ep, src, 24, fi_mr_desc(ms), (uint64_t)be->rank << 32,
                             (fi_addr_t)be->rank, raddr, fi_mr_key(md), &ctx)) == -FI_EAGAIN) {
        struct fi_cq_data_entry junk; /* nothing else is in flight yet */
        fi_cq_read(be->cq, &junk, 1);
        if (util_now_ns() > deadline)
            break;
    }
    bool local = false, remote = false;
    size_t len = 0;
    while (n == 0 && !(local && remote) && util_now_ns() < deadline) {
        struct fi_cq_data_entry e;
        ssize_t k = fi_cq_read(be->cq, &e, 1);
        if (k == 1 && (e.flags & FI_REMOTE_WRITE)) {
            remote = true;
            len = e.len;
        } else if (k == 1) {
            local = true;
        } else if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(be->cq, &err, 0);
            break;
        }
    }
    if (n != 0 || !local || !remote)
        util_log_info("ofi: the write-length probe did not complete; writes are notified");
    be->notify = !(n == 0 && local && remote && len == 24);
    util_log_info("ofi: RDMA writes are announced by %s",
                  be->notify ? "a message after delivery" : "remote CQ data");
out:
    if (md)
        fi_close(&md->fid);
    if (ms)
        fi_close(&ms->fid);
    return rc;
}

/* --- address exchange ------------------------------------------------------- */

static int ofi_exchange(struct srv_backend *be)
{
    unsigned char mine[OFI_ADDR_MAX + 8] = {0};
    size_t alen = OFI_ADDR_MAX;
    int rc = fi_getname(&be->ep->fid, mine + 8, &alen);
    if (rc)
        return ofi_fail("fi_getname", rc);
    uint64_t l = alen;
    memcpy(mine, &l, 8);
    size_t slot = sizeof mine;
    unsigned char *all = malloc(slot * (size_t)be->size);
    if (!all)
        return util_err(MPIV_ERR_NO_RESOURCES, "ofi: out of memory for addresses");
    rc = boot_allgather(mine, slot, all);
    if (rc) {
        free(all);
        return rc;
    }
    for (int r = 0; r < be->size; r++) {
        unsigned char *a = all + slot * (size_t)r;
        memcpy(&l, a, 8);
        fi_addr_t fa = FI_ADDR_NOTAVAIL;
        int n = l <= OFI_ADDR_MAX ? fi_av_insert(be->av, a + 8, 1, &fa, 0, NULL) : -1;
        if (n != 1 || fa != (fi_addr_t)r) {
            free(all);
            return util_err(MPIV_ERR_NET,
                            "libfabric fi_av_insert of rank %d's address failed (%d, fi_addr "
                            "%" PRIu64 ")",
                            r, n, (uint64_t)fa);
        }
    }
    free(all);
    return ofi_probe_write_len(be);
}

/* --- data path -------------------------------------------------------------- */

static int ofi_post_send(struct srv_backend *be, pkt_t *p, int peer)
{
    ssize_t rc;
    if (p->len <= be->inject_size) {
        rc = fi_injectdata(be->ep, p->data, p->len, (uint64_t)be->rank, (fi_addr_t)peer);
        if (rc == 0)
            return SRV_DONE;
    } else {
        rc = fi_senddata(be->ep, p->data, p->len, be->pool_desc, (uint64_t)be->rank,
                         (fi_addr_t)peer, pkt_ctx(be, p, OFI_POSTED_SEND));
        if (rc == 0)
            return MPIV_SUCCESS;
    }
    if (rc == -FI_EAGAIN)
        return SRV_AGAIN;
    return util_err(MPIV_ERR_NET, "libfabric send of %u bytes to rank %d: %s", p->len, peer,
                    fi_strerror((int)-rc));
}

static int ofi_post_recv(struct srv_backend *be, pkt_t *p)
{
    ssize_t rc = fi_recv(be->ep, p->data, be->data_size, be->pool_desc, FI_ADDR_UNSPEC,
                         pkt_ctx(be, p, OFI_POSTED_RECV));
    if (rc == 0)
        return MPIV_SUCCESS;
    if (rc == -FI_EAGAIN)
        return SRV_AGAIN;
    return util_err(MPIV_ERR_NET, "libfabric fi_recv: %s", fi_strerror((int)-rc));
}

static int ofi_rdma_write_imm(struct srv_backend *be, struct srv_rdma_op *op)
{
    if (be->notify) {
        struct iovec iov = {.iov_base = (void *)op->buf, .iov_len = op->len};
        void *desc = op->desc;
        struct fi_rma_iov rma = {.addr = op->raddr, .len = op->len, .key = op->rkey};
        struct fi_msg_rma msg = {.msg_iov = &iov, .desc = &desc, .iov_count = op->len ? 1 : 0,
                                 .addr = (fi_addr_t)op->peer, .rma_iov = &rma,
                                 .rma_iov_count = 1, .context = op->be};
        op->note[0] = op->imm;
        op->note[1] = op->len;
        ssize_t rc = fi_writemsg(be->ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
        if (rc == 0)
            return MPIV_SUCCESS;
        if (rc == -FI_EAGAIN)
            return SRV_AGAIN;
        return util_err(MPIV_ERR_NET, "libfabric fi_writemsg of %zu bytes to rank %d: %s",
                        op->len, op->peer, fi_strerror((int)-rc));
    }
    uint64_t data = ((uint64_t)(uint32_t)be->rank << 32) | op->imm;
    ssize_t rc = fi_writedata(be->ep, op->buf, op->len, op->desc, data, (fi_addr_t)op->peer,
                              op->raddr, op->rkey, op->be);
    if (rc == 0)
        return MPIV_SUCCESS;
    if (rc == -FI_EAGAIN)
        return SRV_AGAIN;
    return util_err(MPIV_ERR_NET, "libfabric fi_writedata of %zu bytes to rank %d: %s", op->len,
                    op->peer, fi_strerror((int)-rc));
}

static int ofi_read_error(struct srv_backend *be, struct srv_cqe *ev)
{
    struct fi_cq_err_entry e = {0};
    ssize_t rc = fi_cq_readerr(be->cq, &e, 0);
    if (rc == -FI_EAGAIN)
        return 0;
    if (rc < 0)
        return -ofi_fail("fi_cq_readerr", (int)rc);
    char buf[160];
    const char *prov = fi_cq_strerror(be->cq, e.prov_errno, e.err_data, buf, sizeof buf);
    pkt_t *p = ctx_pkt(be, e.op_context);
    memset(ev, 0, sizeof *ev);
    ev->err = e.err == FI_ECANCELED ? MPIV_ERR_STATE : MPIV_ERR_NET;
    if (p && p->srv_ctx[4] == (void *)(uintptr_t)OFI_POSTED_RECV) {
        ev->kind = SRV_CQE_RECV;
        ev->p = p;
        ev->src = -1;
        if (e.err != FI_ECANCELED)
            util_log_error("ofi: receive failed: %s (%s)", fi_strerror(e.err), prov);
    } else if (p) {
        ev->kind = SRV_CQE_SEND;
        ev->p = p;
        ev->src = p->peer;
        util_log_error("ofi: send to rank %d failed: %s (%s)", p->peer, fi_strerror(e.err), prov);
    } else if (e.op_context) {
        struct srv_rdma_op *op = e.op_context;
        ev->kind = SRV_CQE_WRITE;
        ev->op = op;
        ev->src = op->peer;
        util_log_error("ofi: RDMA write of %zu bytes to rank %d failed: %s (%s)", op->len,
                       op->peer, fi_strerror(e.err), prov);
    } else {
        /* An incoming RDMA write that failed: nothing of ours to return. */
        util_log_error("ofi: remote operation failed: %s (%s)", fi_strerror(e.err), prov);
        return 0;
    }
    return 1;
}

/* Announces a delivered write to its target; false if it must wait. */
static bool ofi_notify(struct srv_backend *be, struct srv_rdma_op *op)
{
    ssize_t rc = fi_injectdata(be->ep, op->note, sizeof op->note,
                               (uint64_t)be->rank | OFI_NOTE_BIT, (fi_addr_t)op->peer);
    if (rc == -FI_EAGAIN)
        return false;
    if (rc)
        util_log_error("ofi: announcing a write to rank %d: %s", op->peer,
                       fi_strerror((int)-rc));
    return true;
}

static int ofi_poll(struct srv_backend *be, struct srv_cqe *ev, int max)
{
    struct fi_cq_data_entry ent[32];
    if (max > 32)
        max = 32;
    int out = 0;
    while (be->note_pending && out < max) {
        struct srv_rdma_op *op = be->note_pending;
        if (!ofi_notify(be, op))
            break;
        be->note_pending = (struct srv_rdma_op *)op->qnext;
        memset(&ev[out], 0, sizeof ev[out]);
        ev[out].kind = SRV_CQE_WRITE;
        ev[out].op = op;
        out++;
    }
    if (out == max)
        return out;
    ssize_t n = fi_cq_read(be->cq, ent, (size_t)(max - out));
    if (n == -FI_EAGAIN)
        return out;
    if (n == -FI_EAVAIL)
        return out ? out : ofi_read_error(be, ev);
    if (n < 0)
        return out ? out : -ofi_fail("fi_cq_read", (int)n);
    for (ssize_t i = 0; i < n; i++) {
        struct fi_cq_data_entry *c = &ent[i];
        struct srv_cqe *e = &ev[out++];
        memset(e, 0, sizeof *e);
        if (c->flags & FI_REMOTE_WRITE) {
            e->kind = SRV_CQE_IMM;
            e->src = (int)(c->data >> 32);
            e->imm = (uint32_t)c->data;
            e->len = c->len;
        } else if ((c->flags & FI_RECV) && (c->flags & FI_REMOTE_CQ_DATA) &&
                   (c->data & OFI_NOTE_BIT)) {
            /* a write announced by message: the receive packet goes back */
            uint64_t note[2];
            e->kind = SRV_CQE_IMM;
            e->p = ctx_pkt(be, c->op_context);
            memcpy(note, e->p->data, sizeof note);
            e->src = (int)(uint32_t)c->data;
            e->imm = (uint32_t)note[0];
            e->len = (size_t)note[1];
        } else if (c->flags & FI_RECV) {
            e->kind = SRV_CQE_RECV;
            e->p = ctx_pkt(be, c->op_context);
            e->len = c->len;
            e->src = (c->flags & FI_REMOTE_CQ_DATA) ? (int)c->data : -1;
        } else if (c->flags & FI_SEND) {
            e->kind = SRV_CQE_SEND;
            e->p = ctx_pkt(be, c->op_context);
        } else if (c->flags & (FI_WRITE | FI_RMA)) {
            struct srv_rdma_op *op = c->op_context;
            if (be->notify && !ofi_notify(be, op)) {
                op->qnext = (uintptr_t)be->note_pending; /* order does not matter */
                be->note_pending = op;
                out--;
                continue;
            }
            e->kind = SRV_CQE_WRITE;
            e->op = op;
        } else {
            out--;
            util_log_warn("ofi: completion with unexpected flags 0x%" PRIx64, (uint64_t)c->flags);
        }
    }
    return out;
}

static void ofi_finalize(struct srv_backend *be)
{
    if (!be)
        return;
    if (be->ep)
        fi_close(&be->ep->fid);
    if (be->pool_mr)
        fi_close(&be->pool_mr->fid);
    if (be->cq)
        fi_close(&be->cq->fid);
    if (be->av)
        fi_close(&be->av->fid);
    if (be->domain)
        fi_close(&be->domain->fid);
    if (be->fabric)
        fi_close(&be->fabric->fid);
    fi_freeinfo(be->info);
    free(be->ctx2_table);
    free(be);
}

const struct srv_backend_ops srv_ofi_ops = {
    .name = "ofi",
    .init = ofi_init,
    .exchange = ofi_exchange,
    .reg_pool = ofi_reg_pool,
    .post_send = ofi_post_send,
    .post_recv = ofi_post_recv,
    .rdma_write_imm = ofi_rdma_write_imm,
    .mr_reg = ofi_mr_reg,
    .mr_dereg = ofi_mr_dereg,
    .poll = ofi_poll,
    .mr_pins = ofi_mr_pins,
    .finalize = ofi_finalize,
};
