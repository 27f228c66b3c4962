/*
 * server.c — the communication server: one pthread per process that keeps
 * receive packets posted, polls the backend's completions in batches, runs
 * the protocol's handlers and retries what the backend could not take yet.
 *
 * How the pieces fit:
 *  - Posting: srv_send and srv_rdma_write_imm post straight to the backend
 *    from the calling thread (the backends are thread-safe), so a send costs
 *    no hand-off to the server. Only when the backend says "not now"
 *    (SRV_AGAIN) does the operation go to the send queue, which the server
 *    drains in order. While the queue is not empty every new operation
 *    joins its tail, so a thread's operations leave in the order it made
 *    them (same (source, tag) must arrive in order).
 *  - Progress: one progress round (drain the queue, poll up to a batch of
 *    completions, dispatch them, top up the posted receives) runs under
 *    `progress_lock`, taken with trylock: the server thread takes it in its
 *    loop, and any other thread may take it through srv_progress when the
 *    server is asleep or descheduled. Handlers therefore run one at a time.
 *  - Backoff (see server_loop): spin while there is work, then yield, then
 *    sleep in growing steps up to a cap; threads waiting on a message drive
 *    progress themselves meanwhile (srv_progress), so a sleeping server does
 *    not sit on the critical path. Measured in docs/perf/server.md.
 *  - Inline (MPIV_SERVER, util/config.c): where a rank has no core to spare
 *    for this thread, none runs while the job does: idle workers with live
 *    ULTs, waiting pthreads and spinning senders call srv_progress (the
 *    scheduler's idle hook and sched_set_idle_stay, proto_wait), as MPI
 *    libraries progress. The thread runs only for srv_finalize's drain and
 *    barrier, when no user thread waits any more.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "boot/boot.h"
#include "pktpool/pktcopy.h"
#include "server/srv_int.h"
#include "util/atomic.h"
#include "util/spinlock.h"
#include "util/bias.h"

/* Bytes of copies queued past which srv_send_copy refuses (SRV_COPY_FULL,
 * Q1 below): about two million tiny messages. */
#define SRV_COPY_QUEUE_MAX (256l << 20)
/* Backends in one job: shm for the ranks of our host and one network
 * backend for the others (MPIV_NET=auto across hosts), or a single one. */
#define SRV_MAX_NETS 2

/* One backend of the job and what the core keeps for it. */
struct srv_net {
    const struct srv_backend_ops *ops;
    struct srv_backend *be;
    int posted_recvs; /* receives posted to it (under progress_lock)     */
    /* What it carried, counted where it arrived: messages and their
     * bytes, RDMA writes that landed here (immediates) and theirs, under
     * progress_lock; reads this rank made through it (any thread). */
    uint64_t msgs, bytes, writes, write_bytes;
    atomic_ulong reads, read_bytes;
};

/* Items of the send queue are packets (64-byte aligned), RDMA ops or
 * referenced sends (both malloc'ed, 16-byte aligned), told apart by the
 * low bits; a packet links through p->next (the pool's link, unused while
 * the server owns it), the others through their qnext. */
#define QTAG_OP ((uintptr_t)1)
#define QTAG_REF ((uintptr_t)2)
#define QTAG_MASK (QTAG_OP | QTAG_REF)

/* A send queued by srv_send_ref: its header copied here, its payload still
 * the caller's, until done(ctx, err) says it left (or failed). */
struct srv_ref {
    uintptr_t qnext;
    const void *payload;
    size_t len;
    srv_done_fn done;
    void *ctx;
    int peer;
    uint32_t hlen;
    unsigned char hdr[];
};
static struct srv_ref *ref_of(uintptr_t item) { return (struct srv_ref *)(item & ~QTAG_MASK); }

static struct srv_state {
    struct util_config cfg;
    struct pkt_pool *pool;
    int rank, size;
    /* The job's backends, and per peer the one that carries everything
     * between us and it: every packet, write and read to or from peer
     * goes through peer_net[peer], chosen once in srv_init and fixed
     * until teardown, so the data path reads it without a lock. A peer's
     * messages therefore arrive in the order they were posted whatever
     * the other backend does (same (source, tag), same order: DESIGN). */
    struct srv_net nets[SRV_MAX_NETS];
    int nnets;
    struct srv_net **peer_net;
    uint64_t *peer_msgs; /* messages that arrived from each rank (progress lock) */
    /* Whether the srv_mr handed out (the last backend's, mr.c M2) names
     * memory by virtual address, so that a read of our own memory may
     * take an RTS's raddr as an address; false on providers that address
     * by offset (tcp;ofi_rxm alone), where it is an offset into a region
     * we cannot find from it. Fixed at srv_init. */
    bool self_read;
    srv_pkt_handler pkt_handler;
    srv_data_handler data_handler;
    srv_batch_handler batch_handler;
    srv_imm_handler imm_handler;
    srv_peer_handler peer_handler;
    size_t max_write;

    util_spinlock progress_lock;
    int recv_depth;     /* receives kept posted per backend          */
    /* Receive reserve (under progress_lock): packets kept aside while the
     * pool has plenty, used only when it is dry. Senders that fill every
     * packet into queued sends would otherwise leave no packet to receive
     * into, and two ranks doing that to each other stall. */
    pkt_t *stash;
    int stash_len, stash_target;
    bool warned_no_pkt; /* said once that the pool ran dry            */

    util_spinlock q_lock;
    uintptr_t q_head, q_tail;
    atomic_long q_len; /* read without the lock to skip it when empty */

    /* Sends and writes posted and not completed yet: finalize waits for
     * them. Relaxed: only a count, nothing is published through it. */
    atomic_long outstanding;
    /* Bytes of heap copies in the send queue (Q1), and copies ever made.
     * Relaxed: the first only bounds memory, the second is a statistic. */
    atomic_long copies_queued;
    atomic_ulong copies_made;
    atomic_ulong refs_made; /* srv_send_ref's, relaxed: a statistic */
    atomic_long copy_cap; /* srv_send_copy's bound: SRV_COPY_QUEUE_MAX, or a test's */
    atomic_uchar *peer_dead;

    /* Fault injection (tests only): the hook, and what it held back. */
    _Atomic(srv_fault_fn) fault_fn;
    _Atomic(void *) fault_arg;
    util_spinlock fault_lock;
    struct srv_delayed *delayed; /* under fault_lock */

    pthread_t thread;
    /* MPIV_SERVER=inline: no server thread while the job runs; the threads
     * that wait progress (srv_progress). One is started for srv_finalize's
     * drain and barrier only, when nothing else would progress. */
    bool inline_mode;
    /* Set once progress may run (srv_start), cleared at teardown. Workers
     * read it in srv_progress (their idle hook, published with a relaxed
     * store): release/acquire so that a worker that sees it set also sees
     * everything srv_start wrote before. */
    atomic_bool running;
    /* Whether the server thread runs (thread mode, or inline finalize). */
    atomic_bool thread_started;
    atomic_int stop;
    bool inited;
    /* srv_host_map's answer for host_size ranks (NULL: not asked since
     * srv_init or teardown) */
    int *host;
    int host_size;

    uint64_t spin_ns, max_sleep_ns;
    struct srv_stats stats; /* under progress_lock, except sleeps: */
    atomic_ulong sleeps;    /* the idle server's, outside the lock */
} srv_g = {
    .progress_lock = UTIL_SPINLOCK_INIT,
    .q_lock = UTIL_SPINLOCK_INIT,
    .fault_lock = UTIL_SPINLOCK_INIT,
    .copy_cap = SRV_COPY_QUEUE_MAX,
    .spin_ns = 20000,
    .max_sleep_ns = 50000,
};

/* --- small helpers ------------------------------------------------------- */

int srv_default_core(int ncores, int local_ranks, int local_rank)
{
    if (ncores < 1)
        ncores = 1;
    if (local_ranks < 1)
        local_ranks = 1;
    int share = ncores / local_ranks;
    if (share < 1) /* more ranks than cores: spread the servers around */
        return local_rank % ncores;
    return local_rank * share + share - 1;
}

int srv_host_map(int size, const int **host)
{
    /* Asked by pick_backend and again by the backends' init: the answer
     * is kept for this srv_init, so the job pays for one allgather (every
     * rank takes the same path, so the collective calls still pair up). */
    if (srv_g.host && srv_g.host_size == size) {
        *host = srv_g.host;
        return MPIV_SUCCESS;
    }
    free(srv_g.host);
    srv_g.host = NULL;
    /* A host is its name and its kernel's boot id: two machines
     * (containers, a careless cluster) can share a name, never a boot id;
     * and two UTS namespaces of one kernel with different names are two
     * hosts as far as anything here can tell (tests/multihost). */
    char mine[128] = {0};
    gethostname(mine, 63);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(mine + 64, 63, f))
            mine[64] = '\0';
        fclose(f);
    }
    if (size < 1)
        size = 1;
    char *all = malloc(sizeof mine * (size_t)size);
    int *h = malloc(sizeof *h * (size_t)size);
    if (!all || !h) {
        free(all);
        free(h);
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory");
    }
    int rc = boot_allgather(mine, sizeof mine, all);
    if (rc == MPIV_SUCCESS) {
        /* quadratic in the worst case, once per job: each rank names the
         * lowest rank with its identity */
        for (int r = 0; r < size; r++) {
            h[r] = r;
            for (int q = 0; q < r; q++)
                if (h[q] == q &&
                    memcmp(all + sizeof mine * (size_t)q, all + sizeof mine * (size_t)r,
                           sizeof mine) == 0) {
                    h[r] = q;
                    break;
                }
        }
        srv_g.host = h;
        srv_g.host_size = size;
        *host = h;
    } else {
        free(h);
    }
    free(all);
    return rc;
}

bool srv_mixed_job(void) { return srv_g.nnets == 2; }

int srv_all_on_one_host(bool *one_host)
{
    int size = srv_g.size > 0 ? srv_g.size : 1;
    const int *host = NULL;
    int rc = srv_host_map(size, &host);
    if (rc)
        return rc;
    *one_host = true;
    for (int r = 0; r < size; r++)
        *one_host = *one_host && host[r] == 0;
    return MPIV_SUCCESS;
}

void srv_set_copy_cap(long bytes)
{
    /* relaxed: a bound that senders read on each copy, nothing more */
    atomic_store_explicit(&srv_g.copy_cap, bytes > 0 ? bytes : SRV_COPY_QUEUE_MAX,
                          memory_order_relaxed);
}

void srv_set_backoff(uint64_t spin_ns, uint64_t max_sleep_ns)
{
    srv_g.spin_ns = spin_ns;
    srv_g.max_sleep_ns = max_sleep_ns;
}

void srv_get_stats(struct srv_stats *st)
{
    util_bias_lock(&srv_g.progress_lock);
    *st = srv_g.stats;
    util_bias_unlock(&srv_g.progress_lock);
    st->sleeps = atomic_load_explicit(&srv_g.sleeps, memory_order_relaxed);
    st->copies = atomic_load_explicit(&srv_g.copies_made, memory_order_relaxed);
    st->refs = atomic_load_explicit(&srv_g.refs_made, memory_order_relaxed);
}

const char *srv_backend_name(void)
{
    if (srv_g.nnets == 0)
        return "none";
    if (srv_g.nnets == 1)
        return srv_g.nets[0].ops->name;
    return srv_g.nets[1].ops == &srv_ibv_ops ? "shm+ibv" : "shm+ofi";
}

int srv_get_net_stats(struct srv_net_stats *st, int max)
{
    util_bias_lock(&srv_g.progress_lock);
    int n = 0;
    for (; n < srv_g.nnets && n < max; n++) {
        struct srv_net *net = &srv_g.nets[n];
        st[n] = (struct srv_net_stats){
            .name = net->ops->name,
            .msgs = net->msgs,
            .bytes = net->bytes,
            .writes = net->writes,
            .write_bytes = net->write_bytes,
            .reads = atomic_load_explicit(&net->reads, memory_order_relaxed),
            .read_bytes = atomic_load_explicit(&net->read_bytes, memory_order_relaxed),
        };
    }
    util_bias_unlock(&srv_g.progress_lock);
    return n;
}

const char *srv_peer_backend(int peer)
{
    if (!srv_g.peer_net || peer < 0 || peer >= srv_g.size)
        return "none";
    return srv_g.peer_net[peer]->ops->name;
}

uint64_t srv_peer_arrivals(int peer)
{
    if (!srv_g.peer_msgs || peer < 0 || peer >= srv_g.size)
        return 0;
    util_bias_lock(&srv_g.progress_lock);
    uint64_t n = srv_g.peer_msgs[peer];
    util_bias_unlock(&srv_g.progress_lock);
    return n;
}

/* --- the send queue ------------------------------------------------------ */

/*
 * Q1  On a backend that posts copies (ops->posts_copies: shm), no pool
 *     packet waits in the send queue: a packet that cannot be posted at
 *     once is queued as a packet-shaped heap copy (idx == SRV_COPY_IDX)
 *     and goes back to the pool before submit returns (q_item).
 *
 * Why: on shm, each message the server takes out of a ring needs a posted
 * pool packet lent beside it, and a ring that is not drained stays full.
 * Were packets to wait behind a full ring, a rank whose pool all sat in
 * its queue could not drain its incoming rings; its peer's ring to it then
 * stays full, the peer's packets sit in its queue in turn, and two ranks
 * each wait for the other's receives for ever (sends that never block
 * fill the queue, and rendezvous packets drain both pools). Under Q1 a pool packet on shm is free, posted for a receive,
 * held by the matching table as an unexpected message (at most half of
 * what the posted receives leave: I5 in p2p.c) or held by one thread for a
 * step that waits for nothing; none of these waits for a ring. So a rank
 * can always get packets to drain its incoming rings, whatever its own
 * full rings hold, and full rings in both directions drain.
 *
 * What the copies cost: a copy of an RTS, RTR or FIN stands for a pending
 * rendezvous and a CREDIT or ABORT for a rare event, so their memory is
 * bounded by the operations in flight, as are referenced sends
 * (srv_send_ref: a header each, their payload the caller's, whose request
 * waits for them). Only srv_send_copy's eager copies,
 * which let a send complete while it waits, are not; they stop at
 * SRV_COPY_QUEUE_MAX bytes of copies queued, past which the sender waits
 * without holding a packet (SRV_COPY_FULL, p2p.c). ofi and ibv send from
 * registered memory: their queued items stay packets, and the receive
 * reserve (stash) is what keeps their receives posted.
 */

/* A heap copy of the send queue's (Q1), never one of the pool's packets
 * (whose indices are below the pool's size) nor proto's heap blocks
 * (UINT32_MAX, which never reach the server). */
#define SRV_COPY_IDX (UINT32_MAX - 1)
static size_t copy_bytes(size_t len) { return (sizeof(pkt_t) + len + 63) & ~(size_t)63; }

/* A heap block shaped like a packet for len bytes to peer, counted in
 * copies_queued; NULL if out of memory, or if `capped` and the queued
 * copies would pass copy_cap (SRV_COPY_QUEUE_MAX). */
static pkt_t *copy_new(size_t len, int peer, bool capped)
{
    long bytes = (long)copy_bytes(len);
    /* reserve first, as several threads add at once; relaxed: it only
     * bounds memory */
    long was = atomic_fetch_add_explicit(&srv_g.copies_queued, bytes, memory_order_relaxed);
    pkt_t *c = NULL;
    if (!capped ||
        was + bytes <= atomic_load_explicit(&srv_g.copy_cap, memory_order_relaxed))
        c = pkt_copy_alloc(len);
    if (!c) {
        atomic_fetch_sub_explicit(&srv_g.copies_queued, bytes, memory_order_relaxed);
        return NULL;
    }
    atomic_fetch_add_explicit(&srv_g.copies_made, 1, memory_order_relaxed);
    c->next = NULL;
    c->idx = SRV_COPY_IDX;
    c->owner = -1;
    c->len = (uint32_t)len;
    c->peer = peer;
    return c;
}

/* A packet the server is done with: back to the pool, or a copy freed. */
static void pkt_done(pkt_t *p)
{
    if (p->idx != SRV_COPY_IDX) {
        pkt_put_server(srv_g.pool, p);
        return;
    }
    atomic_fetch_sub_explicit(&srv_g.copies_queued, (long)copy_bytes(p->len),
                              memory_order_relaxed);
    pkt_copy_free(p, p->len);
}

/* What waits in the queue for item (Q1): the item itself, or for a pool
 * packet to a peer whose backend posts copies, a copy of it, the packet
 * going back to the pool. 0: out of memory (the item is untouched). */
static uintptr_t q_item(uintptr_t item)
{
    if (item & QTAG_MASK)
        return item;
    pkt_t *p = (pkt_t *)item;
    if (p->idx == SRV_COPY_IDX || !srv_g.peer_net[p->peer]->ops->posts_copies)
        return item;
    pkt_t *c = copy_new(p->len, p->peer, false);
    if (!c)
        return 0;
    memcpy(c->data, p->data, p->len);
    pkt_put_server(srv_g.pool, p);
    return (uintptr_t)c;
}

static uintptr_t *q_link(uintptr_t item)
{
    if (item & QTAG_OP)
        return &((struct srv_rdma_op *)(item & ~QTAG_OP))->qnext;
    if (item & QTAG_REF)
        return &ref_of(item)->qnext;
    return (uintptr_t *)&((pkt_t *)item)->next;
}

static void q_push(uintptr_t item)
{
    *q_link(item) = 0;
    util_spin_lock(&srv_g.q_lock);
    if (srv_g.q_tail)
        *q_link(srv_g.q_tail) = item;
    else
        srv_g.q_head = item;
    srv_g.q_tail = item;
    /* Incremented under the lock; a sender that reads 0 after this point
     * (relaxed is fine: the lock orders it against the drain) joins the
     * queue instead of overtaking. */
    atomic_fetch_add_explicit(&srv_g.q_len, 1, memory_order_relaxed);
    util_spin_unlock(&srv_g.q_lock);
}

/* Posts one item to the backend; MPIV_SUCCESS, SRV_DONE (a packet that
 * is free again: the caller gives it back), SRV_AGAIN or an error. Gives
 * nothing back itself, so the caller may still read the item's link. */
static int post_raw(uintptr_t item)
{
    if (item & QTAG_OP) {
        struct srv_rdma_op *op = (struct srv_rdma_op *)(item & ~QTAG_OP);
        struct srv_net *n = srv_g.peer_net[op->peer];
        return n->ops->rdma_write_imm(n->be, op);
    }
    if (item & QTAG_REF) {
        struct srv_ref *f = ref_of(item);
        struct srv_net *n = srv_g.peer_net[f->peer];
        return n->ops->send_inline(n->be, f->peer, f->hdr, f->hlen, f->payload, f->len);
    }
    pkt_t *p = (pkt_t *)item;
    struct srv_net *n = srv_g.peer_net[p->peer];
    return n->ops->post_send(n->be, p, p->peer);
}

/* A referenced send that left (err 0) or failed: its owner hears of it,
 * and it is freed. */
static void ref_done(uintptr_t item, int err)
{
    struct srv_ref *f = ref_of(item);
    f->done(f->ctx, err);
    free(f);
}

/* After post_raw: a packet that left with the call goes back to the pool,
 * a referenced send is done. */
static int post_settle(uintptr_t item, int rc)
{
    if (rc == SRV_DONE) {
        atomic_fetch_sub_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
        if (item & QTAG_REF)
            ref_done(item, MPIV_SUCCESS);
        else
            pkt_done((pkt_t *)item);
        rc = MPIV_SUCCESS;
    }
    return rc;
}

static void fail_item(uintptr_t item, int err)
{
    atomic_fetch_sub_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
    if (item & QTAG_OP) {
        struct srv_rdma_op *op = (struct srv_rdma_op *)(item & ~QTAG_OP);
        if (op->done)
            op->done(op->ctx, err);
        free(op);
    } else if (item & QTAG_REF) {
        ref_done(item, err);
    } else {
        pkt_done((pkt_t *)item);
    }
}

/* The rank an item goes to. */
static int item_peer(uintptr_t item)
{
    if (item & QTAG_OP)
        return ((struct srv_rdma_op *)(item & ~QTAG_OP))->peer;
    if (item & QTAG_REF)
        return ref_of(item)->peer;
    return ((pkt_t *)item)->peer;
}

static void mark_dead(int peer);

/* Posts queued items in order until the backend says "not now" again.
 * Only the holder of the progress lock drains, so the head stays where it
 * is while it is posted, outside q_lock (a post may make system calls:
 * spinlock.h's rule): senders see a non-empty queue meanwhile and join
 * its tail, so nothing overtakes the head. The head's link is read after
 * the post, under q_lock, because a sender may append to it meanwhile;
 * the item is given back only after that. */
static int q_drain(void)
{
    int done = 0;
    if (atomic_load_explicit(&srv_g.q_len, memory_order_relaxed) == 0)
        return 0;
    while (done < SRV_BATCH) {
        util_spin_lock(&srv_g.q_lock);
        uintptr_t item = srv_g.q_head;
        util_spin_unlock(&srv_g.q_lock);
        if (!item)
            break;
        /* relaxed: as in check_peer. An item for a failed peer fails at
         * once: its ring may stay full, and the backend would say "not
         * now" to each of them until it checks on the peer again. */
        int peer = item_peer(item);
        int rc = atomic_load_explicit(&srv_g.peer_dead[peer], memory_order_relaxed)
                     ? MPIV_ERR_PEER
                     : post_raw(item);
        if (rc == SRV_AGAIN)
            break;
        util_spin_lock(&srv_g.q_lock);
        srv_g.q_head = *q_link(item);
        if (!srv_g.q_head)
            srv_g.q_tail = 0;
        atomic_fetch_sub_explicit(&srv_g.q_len, 1, memory_order_relaxed);
        util_spin_unlock(&srv_g.q_lock);
        done++;
        rc = post_settle(item, rc);
        if (rc == MPIV_ERR_PEER) {
            mark_dead(peer); /* the backend found it gone: says so once */
            fail_item(item, MPIV_ERR_PEER);
        } else if (rc != MPIV_SUCCESS) {
            util_log_error("server: queued operation failed: %s", mpiv_error_detail());
            fail_item(item, MPIV_ERR_NET);
        }
    }
    srv_g.stats.queued_posted += (uint64_t)done;
    return done;
}

/* Posts now if nothing waits ahead, else (or if the backend is full)
 * queues, a pool packet on shm as a copy (Q1). On an error the caller
 * still owns item. */
static int submit(uintptr_t item)
{
    atomic_fetch_add_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
    if (atomic_load_explicit(&srv_g.q_len, memory_order_relaxed) == 0) {
        int rc = post_settle(item, post_raw(item));
        if (rc == MPIV_SUCCESS)
            return MPIV_SUCCESS;
        if (rc != SRV_AGAIN) {
            atomic_fetch_sub_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
            return rc;
        }
    }
    uintptr_t waits = q_item(item);
    if (!waits) {
        atomic_fetch_sub_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory for a queued send");
    }
    q_push(waits);
    return MPIV_SUCCESS;
}

/* --- public data path --------------------------------------------------- */

static int check_peer(int peer)
{
    if (util_unlikely(!srv_g.inited))
        return util_err(MPIV_ERR_STATE, "server: not initialised");
    if (util_unlikely(peer < 0 || peer >= srv_g.size))
        return util_err(MPIV_ERR_RANK, "rank %d is outside [0, %d)", peer, srv_g.size);
    if (util_unlikely(atomic_load_explicit(&srv_g.peer_dead[peer], memory_order_relaxed)))
        return util_err(MPIV_ERR_PEER, "rank %d is gone (an earlier transfer to it failed)",
                        peer);
    return MPIV_SUCCESS;
}

static int fault_on_send(pkt_t *p, int peer);

int srv_send(pkt_t *p, int peer)
{
    int rc = check_peer(peer);
    if (util_unlikely(rc == MPIV_SUCCESS &&
                      atomic_load_explicit(&srv_g.fault_fn, memory_order_relaxed)))
        rc = fault_on_send(p, peer);
    if (rc == SRV_DONE)
        return MPIV_SUCCESS; /* the hook took it */
    if (rc == MPIV_SUCCESS) {
        p->peer = peer;
        rc = submit((uintptr_t)p);
    }
    if (rc != MPIV_SUCCESS)
        pkt_put_server(srv_g.pool, p); /* the caller gave it to us (server.h) */
    return rc;
}

int srv_send_copy(int peer, const void *hdr, size_t hlen, const void *payload, size_t len)
{
    int rc = check_peer(peer);
    if (rc)
        return rc;
    size_t total = hlen + len;
    /* relaxed: a hint, as in srv_send_inline; with a hook set the caller
     * takes srv_send, where the hook sees the send */
    if (!srv_g.peer_net[peer]->ops->posts_copies || total > pkt_data_size(srv_g.pool) ||
        util_unlikely(atomic_load_explicit(&srv_g.fault_fn, memory_order_relaxed)))
        return SRV_INLINE_LATER;
    pkt_t *c = copy_new(total, peer, true);
    if (!c)
        return SRV_COPY_FULL; /* or out of memory: wait for the queue all the same */
    memcpy(c->data, hdr, hlen);
    if (len)
        memcpy(c->data + hlen, payload, len);
    rc = submit((uintptr_t)c);
    if (rc != MPIV_SUCCESS)
        pkt_done(c);
    return rc;
}

int srv_send_ref(int peer, const void *hdr, size_t hlen, const void *payload, size_t len,
                 srv_done_fn done, void *ctx)
{
    int rc = check_peer(peer);
    if (rc)
        return rc;
    struct srv_net *n = srv_g.peer_net[peer];
    /* relaxed: as in srv_send_copy */
    if (!n->ops->send_inline || hlen + len > n->ops->inline_max(n->be, peer) ||
        util_unlikely(atomic_load_explicit(&srv_g.fault_fn, memory_order_relaxed)))
        return SRV_INLINE_LATER;
    struct srv_ref *f = malloc(sizeof *f + hlen);
    if (!f)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory for a queued send");
    f->payload = payload;
    f->len = len;
    f->done = done;
    f->ctx = ctx;
    f->peer = peer;
    f->hlen = (uint32_t)hlen;
    memcpy(f->hdr, hdr, hlen);
    /* Queued whatever the transport holds now (the caller just found it
     * full, or the queue not empty): done runs in a progress round, never
     * inside this call, though maybe on another thread before it returns. */
    atomic_fetch_add_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&srv_g.refs_made, 1, memory_order_relaxed);
    q_push((uintptr_t)f | QTAG_REF);
    return MPIV_SUCCESS;
}

static int fault_on_write(struct srv_rdma_op *op);

int srv_rdma_write_imm(const void *buf, size_t len, srv_mr *lmr, int peer, uint64_t raddr,
                       uint64_t rkey, uint32_t imm, srv_done_fn done, void *ctx)
{
    int rc = check_peer(peer);
    if (rc)
        return rc;
    struct srv_rdma_op *op = malloc(sizeof *op);
    if (!op)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory for an RDMA write");
    memset(op->be, 0, sizeof op->be);
    op->qnext = 0;
    op->note[0] = op->note[1] = 0;
    op->buf = buf;
    op->len = len;
    op->desc = lmr ? lmr->desc : NULL;
    op->peer = peer;
    op->imm = imm;
    op->raddr = raddr;
    op->rkey = rkey;
    op->done = done;
    op->ctx = ctx;
    if (util_unlikely(atomic_load_explicit(&srv_g.fault_fn, memory_order_relaxed)))
        return fault_on_write(op);
    rc = submit((uintptr_t)op | QTAG_OP);
    if (rc)
        free(op);
    return rc;
}

int srv_send_inline(int peer, const void *hdr, size_t hlen, const void *payload, size_t len)
{
    int rc = check_peer(peer);
    if (rc)
        return rc;
    /* relaxed: both are hints; a send that sees the queue empty while
     * another thread queues is unordered with it anyway (as in submit) */
    struct srv_net *n = srv_g.peer_net[peer];
    if (!n->ops->send_inline || atomic_load_explicit(&srv_g.q_len, memory_order_relaxed) ||
        util_unlikely(atomic_load_explicit(&srv_g.fault_fn, memory_order_relaxed)))
        return SRV_INLINE_LATER;
    rc = n->ops->send_inline(n->be, peer, hdr, hlen, payload, len);
    if (rc == SRV_DONE)
        return MPIV_SUCCESS;
    return rc == SRV_AGAIN ? SRV_INLINE_LATER : rc;
}

size_t srv_inline_max(int peer)
{
    if (!srv_g.inited || peer < 0 || peer >= srv_g.size)
        return 0;
    struct srv_net *n = srv_g.peer_net[peer];
    return n->ops->inline_max ? n->ops->inline_max(n->be, peer) : 0;
}

void srv_set_data_handler(srv_data_handler fn) { srv_g.data_handler = fn; }
void srv_set_batch_handler(srv_batch_handler fn) { srv_g.batch_handler = fn; }

void srv_set_handlers(srv_pkt_handler pkt, srv_imm_handler imm, srv_peer_handler peer_failed)
{
    srv_g.pkt_handler = pkt;
    srv_g.imm_handler = imm;
    srv_g.peer_handler = peer_failed;
}

size_t srv_max_write(void) { return srv_g.max_write; }

_Atomic int srv_failed_peers_;

bool srv_peer_alive(int peer)
{
    return srv_g.inited && peer >= 0 && peer < srv_g.size &&
           !atomic_load_explicit(&srv_g.peer_dead[peer], memory_order_relaxed);
}

static enum srv_fault_action fault_ask(enum srv_fault_point point, int peer,
                                       const unsigned char *data, size_t len, uint32_t imm);

bool srv_can_read(int peer)
{
    if (!srv_peer_alive(peer))
        return false;
    if (peer == srv_g.rank)
        return srv_g.self_read;
    struct srv_net *n = srv_g.peer_net[peer];
    return n->ops->can_read && n->ops->can_read(n->be, peer);
}

int srv_rdma_read(void *buf, size_t len, int peer, uint64_t raddr, uint64_t rkey)
{
    int rc = check_peer(peer);
    if (rc)
        return rc;
    if (util_unlikely(atomic_load_explicit(&srv_g.fault_fn, memory_order_relaxed))) {
        switch (fault_ask(SRV_FAULT_READ, peer, NULL, len, 0)) {
        case SRV_FAULT_FAIL:
            return util_err(MPIV_ERR_NET, "server: reading %zu bytes from rank %d failed "
                            "(injected)", len, peer);
        case SRV_FAULT_REFUSE:
            return SRV_NO_READ;
        default:
            break;
        }
    }
    if (peer == srv_g.rank) {
        /* Our own memory: the address came from our own RTS, which never
         * leaves this process (proto_deliver), and is one only when our
         * registrations name addresses (self_read). */
        if (!srv_g.self_read)
            return SRV_NO_READ;
        if (len)
            memcpy(buf, (const void *)(uintptr_t)raddr, len);
        return MPIV_SUCCESS;
    }
    struct srv_net *n = srv_g.peer_net[peer];
    if (!n->ops->rdma_read)
        return SRV_NO_READ;
    rc = n->ops->rdma_read(n->be, buf, len, peer, raddr, rkey);
    if (rc == MPIV_SUCCESS) {
        /* relaxed: counters, read at finalize */
        atomic_fetch_add_explicit(&n->reads, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&n->read_bytes, len, memory_order_relaxed);
    }
    return rc;
}

/* --- progress ----------------------------------------------------------- */

static void refill_recvs(struct srv_net *n)
{
    while (n->posted_recvs < srv_g.recv_depth) {
        pkt_t *p = pkt_get_server(srv_g.pool);
        if (p && srv_g.stash_len < srv_g.stash_target) {
            /* plenty: top the reserve up by one on the way */
            pkt_t *q = pkt_get_server(srv_g.pool);
            if (q) {
                q->next = srv_g.stash;
                srv_g.stash = q;
                srv_g.stash_len++;
            }
        }
        if (!p && srv_g.stash) {
            p = srv_g.stash;
            srv_g.stash = p->next;
            srv_g.stash_len--;
        }
        if (!p) {
            if (!srv_g.warned_no_pkt && n->posted_recvs == 0)
                util_log_warn("server: packet pool empty, no receive posted");
            srv_g.warned_no_pkt = true;
            return;
        }
        int rc = n->ops->post_recv(n->be, p);
        if (rc != MPIV_SUCCESS) {
            pkt_put_server(srv_g.pool, p);
            if (rc != SRV_AGAIN)
                util_log_error("server: posting a receive failed: %s", mpiv_error_detail());
            return;
        }
        n->posted_recvs++;
    }
    srv_g.warned_no_pkt = false;
}

/* Progress lock held. The first time a peer is marked, the protocol
 * fails what it has pending with that peer. */
static void mark_dead(int peer)
{
    if (peer < 0 || peer >= srv_g.size ||
        atomic_exchange_explicit(&srv_g.peer_dead[peer], 1, memory_order_relaxed))
        return;
    atomic_fetch_add_explicit(&srv_failed_peers_, 1, memory_order_relaxed);
    util_log_error("server: rank %d declared failed (a transfer with it failed)", peer);
    if (srv_g.peer_handler)
        srv_g.peer_handler(peer);
}

/* Counts msgs arrivals of `bytes` in all through n (progress lock held). */
static void count_arrivals(struct srv_net *n, uint64_t msgs, uint64_t bytes)
{
    srv_g.stats.recvs += msgs;
    n->msgs += msgs;
    n->bytes += bytes;
}

/* Counts an arrival from src (progress lock held). */
static void count_from(int src)
{
    if (src >= 0 && src < srv_g.size)
        srv_g.peer_msgs[src]++;
}

/* Counts an arrival from src through n (progress lock held). */
static void count_arrival(struct srv_net *n, int src, size_t len)
{
    count_arrivals(n, 1, len);
    count_from(src);
}

/* A receive completion of backend n whose data the backend lent in place
 * (e->data, no error), counted already: to the data handler, and its
 * packet posted again unless the handler kept it. */
static inline void hand_lent(struct srv_net *n, struct srv_cqe *e)
{
    if (srv_g.data_handler(e->data, e->len, e->src, e->p)) {
        n->posted_recvs--;
    } else if (n->ops->post_recv(n->be, e->p) != MPIV_SUCCESS) {
        n->posted_recvs--; /* lent back unused: posted again */
        pkt_put_server(srv_g.pool, e->p);
    }
}

/* A completion that backend n reported (its receive packets are n's). */
static void dispatch(struct srv_net *n, struct srv_cqe *e)
{
    switch (e->kind) {
    case SRV_CQE_RECV: {
        pkt_t *p = e->p;
        if (e->data && !e->err && srv_g.data_handler) {
            count_arrival(n, e->src, e->len);
            hand_lent(n, e);
            break;
        }
        n->posted_recvs--;
        if (e->data && !e->err && e->len > pkt_data_size(srv_g.pool)) {
            util_log_error("server: a %zu-byte message from rank %d does not fit a packet and "
                           "no handler takes it in place: dropped", e->len, e->src);
            pkt_put_server(srv_g.pool, p);
            break;
        }
        if (e->data && !e->err)
            memcpy(p->data, e->data, e->len);
        if (e->err || e->len > pkt_data_size(srv_g.pool)) {
            if (!e->err)
                util_log_error("server: a receive from rank %d reports %zu bytes in a "
                               "%zu-byte packet", e->src, e->len, pkt_data_size(srv_g.pool));
            pkt_put_server(srv_g.pool, p);
            mark_dead(e->src);
            break;
        }
        p->len = (uint32_t)e->len;
        p->peer = e->src;
        count_arrival(n, e->src, e->len);
        if (srv_g.pkt_handler)
            srv_g.pkt_handler(p);
        else
            pkt_put_server(srv_g.pool, p);
        break;
    }
    case SRV_CQE_SEND:
        atomic_fetch_sub_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
        if (e->err)
            mark_dead(e->src);
        srv_g.stats.sends_done++;
        pkt_done(e->p);
        break;
    case SRV_CQE_WRITE: {
        struct srv_rdma_op *op = e->op;
        atomic_fetch_sub_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
        if (e->err)
            mark_dead(op->peer);
        srv_g.stats.writes_done++;
        if (op->done)
            op->done(op->ctx, e->err);
        free(op);
        break;
    }
    case SRV_CQE_IMM:
        if (e->p) {
            n->posted_recvs--;
            pkt_put_server(srv_g.pool, e->p);
        }
        srv_g.stats.imms++;
        if (!e->err) {
            n->writes++;
            n->write_bytes += e->len;
        }
        /* An error first fails the one receive the immediate names (if it
         * is readable), then everything else pending with that peer. */
        if (srv_g.imm_handler)
            srv_g.imm_handler(e->imm, e->src, e->len, e->err);
        if (e->err)
            mark_dead(e->src);
        break;
    }
}

static void fault_on_poll(struct srv_net *net, struct srv_cqe *ev, int *n);
static int fault_due(void);

/* One round; the caller holds progress_lock. Returns how much it did.
 * Every backend is polled each round, a batch at most from each, so a
 * busy one does not starve the other. */
static int progress_round(void)
{
    int did = q_drain();
    bool faults = atomic_load_explicit(&srv_g.fault_fn, memory_order_relaxed) != NULL;
    for (int k = 0; k < srv_g.nnets; k++) {
        struct srv_net *net = &srv_g.nets[k];
        struct srv_cqe ev[SRV_BATCH];
        int n = net->ops->poll(net->be, ev, SRV_BATCH);
        if (n < 0) {
            util_log_error("server: polling %s failed: %s", net->ops->name,
                           mpiv_error_detail());
            n = 0;
        }
        if (util_unlikely(faults))
            fault_on_poll(net, ev, &n);
        if (n > 1 && srv_g.batch_handler && srv_g.data_handler) {
            /* exactly what dispatch gives the data handler, in its order,
             * and only if that is every arrival of the batch: one copied
             * into a packet (the fault hook's) or failed would be handled
             * between them, unseen by the batch handler */
            struct srv_lent lent[SRV_BATCH];
            int nl = 0;
            bool all_lent = true;
            for (int i = 0; i < n && all_lent; i++) {
                if (ev[i].kind != SRV_CQE_RECV)
                    continue;
                all_lent = ev[i].data && !ev[i].err;
                lent[nl++] = (struct srv_lent){ev[i].data, ev[i].len, ev[i].src};
            }
            if (all_lent && nl > 1)
                srv_g.batch_handler(lent, nl);
            if (all_lent && nl == n) {
                /* every event a lent arrival (a stream's usual batch):
                 * dispatch's way for each, counted once for all */
                uint64_t bytes = 0;
                for (int i = 0; i < n; i++) {
                    bytes += ev[i].len;
                    count_from(ev[i].src);
                    hand_lent(net, &ev[i]);
                }
                count_arrivals(net, (uint64_t)n, bytes);
                n = 0; /* handled */
                did += nl;
            }
        }
        for (int i = 0; i < n; i++)
            dispatch(net, &ev[i]);
        if (net->ops->release)
            net->ops->release(net->be);
        if (net->posted_recvs < srv_g.recv_depth)
            refill_recvs(net);
        did += n;
    }
    if (util_unlikely(faults))
        did += fault_due();
    return did;
}

bool srv_inline(void) { return srv_g.inline_mode; }

int srv_progress(void)
{
    if (!srv_g.inited || !atomic_load_explicit(&srv_g.running, memory_order_acquire))
        return 0;
    int did = 0;
    if (util_bias_trylock(&srv_g.progress_lock)) {
        did = progress_round();
        util_bias_unlock(&srv_g.progress_lock);
    }
    return did;
}

/* --- the thread --------------------------------------------------------- */

static void pin_self(void)
{
    if (srv_g.cfg.bind == UTIL_BIND_NONE)
        return;
    int core = srv_g.cfg.server_core >= 0
                   ? (int)srv_g.cfg.server_core
                   : srv_default_core(srv_g.cfg.ncores, srv_g.cfg.local_ranks, srv_g.cfg.local_rank);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core % CPU_SETSIZE, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc)
        util_log_warn("server: cannot pin to core %d: %s", core, strerror(rc));
    else
        util_log_info("server: pinned to core %d", core);
}


/*
 * Backoff when idle. On this project's 2-core machines two ranks each run a
 * worker and a server: four busy threads on two cores. A server that spins
 * forever takes half a core from the workers; one that blocks on the CQ
 * wait object needs every provider to support one (shm's is manual
 * progress: only polling moves data) and a wake-up path for the send queue.
 * So: poll without pause while there is work; after `spin_ns` of nothing,
 * sched_yield for as long again (gives a descheduled worker the core but
 * comes back at once when the core is free); then nanosleep, doubling from
 * 1 µs up to `max_sleep_ns`. Any completion resets it. A message arriving
 * at a sleeping server waits at most max_sleep_ns plus the timer slack —
 * unless the thread waiting for it drives progress with srv_progress, which
 * the protocol layer does. Queued sends or outstanding operations cap the
 * sleep at its first step so they are not delayed.
 */
static void *server_loop(void *arg)
{
    (void)arg;
    pin_self();
    uint64_t idle_start = 0, sleep = 0;
    while (!atomic_load_explicit(&srv_g.stop, memory_order_acquire)) {
        int did = 0;
        if (util_bias_trylock(&srv_g.progress_lock)) {
            did = progress_round();
            util_bias_unlock(&srv_g.progress_lock);
        }
        if (did) {
            idle_start = 0;
            sleep = 0;
            continue;
        }
        uint64_t now = util_now_ns();
        if (!idle_start)
            idle_start = now;
        uint64_t idle = now - idle_start;
        if (idle < srv_g.spin_ns) {
            util_cpu_relax();
        } else if (idle < 2 * srv_g.spin_ns) {
            sched_yield();
        } else {
            bool busy = atomic_load_explicit(&srv_g.q_len, memory_order_relaxed) ||
                        atomic_load_explicit(&srv_g.outstanding, memory_order_relaxed);
            sleep = sleep ? sleep * 2 : 1000;
            if (sleep > srv_g.max_sleep_ns)
                sleep = srv_g.max_sleep_ns;
            if (busy && sleep > 1000)
                sleep = 1000;
            atomic_fetch_add_explicit(&srv_g.sleeps, 1, memory_order_relaxed);
            util_sleep_ns(sleep);
        }
    }
    return NULL;
}

/* --- life cycle --------------------------------------------------------- */

/* Every rank has a verbs device: then ibv, else ofi (collective, so that
 * all pick the same). */
static int pick_network(const struct srv_backend_ops **ops)
{
    unsigned char mine = srv_ibv_available() ? 1 : 0;
    unsigned char *all = malloc((size_t)srv_g.size);
    if (!all)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory");
    int rc = boot_allgather(&mine, 1, all);
    if (rc == MPIV_SUCCESS) {
        bool every = true;
        for (int r = 0; r < srv_g.size; r++)
            every = every && all[r];
        *ops = every ? &srv_ibv_ops : &srv_ofi_ops;
    }
    free(all);
    return rc;
}

/* Chooses the backends (nets[], nnets) and each peer's (peer_net). Every
 * rank reaches the same choice from the same gathered facts, so the
 * backends' collective set-up pairs up across the job. */
static int pick_backends(void)
{
    const struct srv_backend_ops *only = NULL, *net = NULL;
    const int *host = NULL;
    if (srv_g.cfg.net == UTIL_NET_OFI)
        only = &srv_ofi_ops;
    else if (srv_g.cfg.net == UTIL_NET_IBV)
        only = &srv_ibv_ops;
    else if (srv_g.cfg.net == UTIL_NET_SHM)
        only = &srv_shm_ops;
    else {
        /* auto: MPIv's own shared-memory rings between the ranks of one
         * host (faster than any network's loopback, docs/PERFORMANCE.md),
         * the network between hosts: ibv only if every rank has a device,
         * else ofi. One host: shm alone; one rank per host: the network
         * alone (shm would carry nothing but our sends to ourselves). */
        int rc = srv_host_map(srv_g.size, &host);
        if (rc)
            return rc;
        bool one_host = true, shared = false;
        for (int r = 0; r < srv_g.size; r++) {
            one_host = one_host && host[r] == 0;
            shared = shared || host[r] != r;
        }
        if (one_host) {
            only = &srv_shm_ops;
        } else {
            if ((rc = pick_network(&net)))
                return rc;
            if (!shared)
                only = net;
        }
    }
    srv_g.peer_net = calloc((size_t)srv_g.size, sizeof *srv_g.peer_net);
    srv_g.peer_msgs = calloc((size_t)srv_g.size, sizeof *srv_g.peer_msgs);
    if (!srv_g.peer_net || !srv_g.peer_msgs)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory");
    memset(srv_g.nets, 0, sizeof srv_g.nets);
    if (only) {
        srv_g.nnets = 1;
        srv_g.nets[0].ops = only;
        for (int r = 0; r < srv_g.size; r++)
            srv_g.peer_net[r] = &srv_g.nets[0];
        return MPIV_SUCCESS;
    }
    srv_g.nnets = 2;
    srv_g.nets[0].ops = &srv_shm_ops;
    srv_g.nets[1].ops = net;
    for (int r = 0; r < srv_g.size; r++)
        srv_g.peer_net[r] = &srv_g.nets[host[r] == host[srv_g.rank] ? 0 : 1];
    return MPIV_SUCCESS;
}

/* A mixed job hands out one srv_mr for both backends (mr.c, M2): its
 * raddr must be the virtual address of its base, which shm peers use
 * as is. The network backend's registrations must say so (ibv's always
 * do; ofi's when the provider grants FI_MR_VIRT_ADDR). If one rank's do
 * not, every rank drops shm and the network carries everything, as
 * with MPIV_NET=ofi (collective: all decide alike). */
/* Whether net's registrations name memory by virtual address (raddr is
 * the address of base), tried on a small buffer. */
static bool names_addresses(struct srv_net *net)
{
    _Alignas(64) static unsigned char probe[64];
    srv_mr mr;
    void *h = NULL;
    bool ok = false;
    if (net->ops->mr_reg(net->be, probe, sizeof probe, &mr, &h) == MPIV_SUCCESS) {
        ok = mr.raddr == (uint64_t)(uintptr_t)probe && mr.base == (uintptr_t)probe;
        net->ops->mr_dereg(net->be, h);
    }
    return ok;
}

static int check_mix(void)
{
    struct srv_net *net = &srv_g.nets[1];
    unsigned char ok = names_addresses(net);
    unsigned char *all = malloc((size_t)srv_g.size);
    if (!all)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory");
    int rc = boot_allgather(&ok, 1, all);
    bool every = true;
    for (int r = 0; rc == MPIV_SUCCESS && r < srv_g.size; r++)
        every = every && all[r];
    free(all);
    if (rc || every)
        return rc;
    util_log_warn("server: %s names remote memory by offsets on some rank, so one "
                  "registration cannot serve it and shm together: %s carries every peer, "
                  "those of this host included",
                  net->ops->name, net->ops->name);
    srv_g.nets[0].ops->finalize(srv_g.nets[0].be);
    srv_g.nets[0] = *net; /* no counter has moved yet */
    memset(net, 0, sizeof *net);
    srv_g.nnets = 1;
    for (int r = 0; r < srv_g.size; r++)
        srv_g.peer_net[r] = &srv_g.nets[0];
    return MPIV_SUCCESS;
}

/* Says at MPIV_LOG=info which backend serves which ranks. */
static void log_routes(void)
{
    if (srv_g.nnets < 2 || util_log_level < UTIL_LOG_INFO)
        return;
    for (int k = 0; k < srv_g.nnets; k++) {
        char line[512];
        size_t off = 0;
        int shown = 0, total = 0;
        for (int r = 0; r < srv_g.size; r++) {
            if (srv_g.peer_net[r] != &srv_g.nets[k])
                continue;
            total++;
            if (shown < 32 && off < sizeof line) {
                int w = snprintf(line + off, sizeof line - off, " %d", r);
                if (w > 0)
                    off += (size_t)w;
                shown++;
            }
        }
        if (off >= sizeof line)
            off = sizeof line - 1;
        line[off] = '\0';
        util_log_info("server: %s carries %d rank(s):%s%s", srv_g.nets[k].ops->name, total,
                      line, total > shown ? " ..." : "");
    }
}

/* Says at MPIV_LOG=info what each backend carried into this rank, and
 * from whom, so that a test can tell which path carried what. */
static void log_traffic(void)
{
    if (util_log_level < UTIL_LOG_INFO)
        return;
    struct srv_net_stats st[SRV_MAX_NETS];
    int n = srv_get_net_stats(st, SRV_MAX_NETS);
    /* relaxed: a statistic, read once the sends are done */
    util_log_info("server: %lu sends waited in the queue as copies (Q1), %lu by reference",
                  atomic_load_explicit(&srv_g.copies_made, memory_order_relaxed),
                  atomic_load_explicit(&srv_g.refs_made, memory_order_relaxed));
    for (int k = 0; k < n; k++)
        util_log_info("server: traffic via %s: %" PRIu64 " messages %" PRIu64 " bytes, %" PRIu64
                      " writes %" PRIu64 " bytes, %" PRIu64 " reads %" PRIu64 " bytes",
                      st[k].name, st[k].msgs, st[k].bytes, st[k].writes, st[k].write_bytes,
                      st[k].reads, st[k].read_bytes);
    char line[1024];
    size_t off = 0;
    int shown = 0;
    /* the server thread still runs (until teardown) and counts arrivals */
    util_bias_lock(&srv_g.progress_lock);
    for (int r = 0; r < srv_g.size && off < sizeof line; r++) {
        if (shown == 64) {
            off += (size_t)snprintf(line + off, sizeof line - off, " ...");
            break;
        }
        int w = snprintf(line + off, sizeof line - off, " %d:%s:%" PRIu64, r,
                         srv_g.peer_net[r]->ops->name, srv_g.peer_msgs[r]);
        if (w > 0)
            off += (size_t)w;
        shown++;
    }
    util_bias_unlock(&srv_g.progress_lock);
    if (off >= sizeof line)
        off = sizeof line - 1;
    line[off] = '\0';
    util_log_info("server: messages from rank:backend:count%s", line);
}

/* Closes the backends opened so far and forgets the routes. */
static void close_nets(void)
{
    for (int k = 0; k < srv_g.nnets; k++)
        if (srv_g.nets[k].be)
            srv_g.nets[k].ops->finalize(srv_g.nets[k].be);
    memset(srv_g.nets, 0, sizeof srv_g.nets);
    srv_g.nnets = 0;
    free(srv_g.peer_net);
    srv_g.peer_net = NULL;
    free(srv_g.peer_msgs);
    srv_g.peer_msgs = NULL;
    free(srv_g.host);
    srv_g.host = NULL;
}

int srv_init(const struct util_config *cfg, struct pkt_pool *pool, int *rank, int *size)
{
    if (srv_g.inited)
        return util_err(MPIV_ERR_STATE, "server: already initialised");
    srv_g.cfg = *cfg;
    /* Known from here on, not only from srv_start: the scheduler's idle
     * policy is set from it before the workers start (init.c). */
    srv_g.inline_mode = cfg->server == UTIL_SERVER_INLINE;
    free(srv_g.host);
    srv_g.host = NULL;
    srv_g.pool = pool;
    srv_g.recv_depth = (int)cfg->recv_depth;
    int rc = boot_init(&srv_g.rank, &srv_g.size);
    if (rc)
        return rc;
    if ((rc = boot_check_shared(cfg)))
        goto fail_boot;
    util_log_set_rank(srv_g.rank);
    if ((rc = pick_backends()))
        goto fail_nets;
    srv_g.peer_dead = calloc((size_t)srv_g.size, sizeof *srv_g.peer_dead);
    if (!srv_g.peer_dead) {
        rc = util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory");
        goto fail_nets;
    }
    atomic_store_explicit(&srv_failed_peers_, 0, memory_order_relaxed);
    /* Each step for every backend before the next step: the steps are
     * collective, and every rank runs the same backends in this order. */
    for (int k = 0; k < srv_g.nnets; k++)
        if ((rc = srv_g.nets[k].ops->init(cfg, srv_g.rank, srv_g.size, &srv_g.nets[k].be)))
            goto fail_mem;
    for (int k = 0; k < srv_g.nnets; k++)
        if ((rc = srv_g.nets[k].ops->reg_pool(srv_g.nets[k].be, pool)))
            goto fail_mem;
    for (int k = 0; k < srv_g.nnets; k++)
        if ((rc = srv_g.nets[k].ops->exchange(srv_g.nets[k].be)))
            goto fail_mem;
    if (srv_g.nnets == 2 && (rc = check_mix()))
        goto fail_mem;
    struct srv_backend *bes[SRV_MAX_NETS];
    const struct srv_backend_ops *opss[SRV_MAX_NETS];
    srv_g.max_write = SIZE_MAX;
    for (int k = 0; k < srv_g.nnets; k++) {
        bes[k] = srv_g.nets[k].be;
        opss[k] = srv_g.nets[k].ops;
        size_t m = opss[k]->max_write(bes[k]);
        if (m < srv_g.max_write)
            srv_g.max_write = m;
    }
    if ((rc = srv_mr_cache_init(srv_g.nnets, bes, opss)))
        goto fail_mem;
    srv_g.self_read = names_addresses(&srv_g.nets[srv_g.nnets - 1]);
    util_log_info("server: rank %d of %d, backend %s, bootstrap %s", srv_g.rank, srv_g.size,
                  srv_backend_name(), boot_method_name());
    log_routes();
    memset(&srv_g.stats, 0, sizeof srv_g.stats);
    atomic_store_explicit(&srv_g.copies_made, 0, memory_order_relaxed);
    atomic_store_explicit(&srv_g.refs_made, 0, memory_order_relaxed);
    atomic_store(&srv_g.stop, 0);
    srv_g.inited = true;
    *rank = srv_g.rank;
    *size = srv_g.size;
    return MPIV_SUCCESS;
fail_mem:
    free(srv_g.peer_dead);
    srv_g.peer_dead = NULL;
fail_nets:
    close_nets();
fail_boot:
    boot_finalize();
    srv_g.size = 0;
    return rc;
}

static int start_thread(void)
{
    int rc = pthread_create(&srv_g.thread, NULL, server_loop, NULL);
    if (rc)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: pthread_create: %s", strerror(rc));
    /* relaxed: only srv_finalize and teardown read it, on this thread */
    atomic_store_explicit(&srv_g.thread_started, true, memory_order_relaxed);
    return MPIV_SUCCESS;
}

int srv_start(void)
{
    if (!srv_g.inited || atomic_load_explicit(&srv_g.thread_started, memory_order_relaxed))
        return util_err(MPIV_ERR_STATE, "server: srv_start before srv_init or twice");
    util_bias_lock(&srv_g.progress_lock);
    bool none = false;
    for (int k = 0; k < srv_g.nnets; k++) {
        refill_recvs(&srv_g.nets[k]);
        none = none || srv_g.nets[k].posted_recvs == 0;
    }
    util_bias_unlock(&srv_g.progress_lock);
    if (none)
        return util_err(MPIV_ERR_NO_RESOURCES,
                        "server: could not post any receive packet (pool of %zu packets)",
                        pkt_count(srv_g.pool));
    /* At most recv_depth, and at most a quarter of what senders keep. */
    srv_g.stash_target = srv_g.recv_depth;
    long spare = ((long)pkt_count(srv_g.pool) - srv_g.recv_depth) / 4;
    if (srv_g.stash_target > spare)
        srv_g.stash_target = (int)(spare > 0 ? spare : 0);
    util_log_info("server: progress by %s", srv_g.inline_mode ? "the waiting threads (inline)"
                                                              : "a server thread");
    if (!srv_g.inline_mode) {
        int rc = start_thread();
        if (rc)
            return rc;
    }
    atomic_store_explicit(&srv_g.running, true, memory_order_release);
    return MPIV_SUCCESS;
}

int srv_boot_barrier_all(void) { return boot_barrier(); }

static void fault_flush(void);

/* What srv_finalize and srv_abandon share: stop the thread, close the
 * backend, give the packets back, leave the job (graceful) or let go. */
static void srv_teardown(bool graceful)
{
    atomic_store_explicit(&srv_g.running, false, memory_order_relaxed);
    if (atomic_load_explicit(&srv_g.thread_started, memory_order_relaxed)) {
        atomic_store_explicit(&srv_g.stop, 1, memory_order_release);
        pthread_join(srv_g.thread, NULL);
        /* relaxed: nothing is published by the clearing */
        atomic_store_explicit(&srv_g.thread_started, false, memory_order_relaxed);
    }
    while (srv_g.stash) {
        pkt_t *p = srv_g.stash;
        srv_g.stash = p->next;
        pkt_put_server(srv_g.pool, p);
    }
    srv_g.stash_len = 0;
    srv_mr_cache_fini();
    close_nets();
    /* Packets still in the queue (only after a failure) belong to the
     * pool, which the caller destroys next; copies are freed. */
    for (uintptr_t item = srv_g.q_head, next; item; item = next) {
        next = *q_link(item);
        if (item & QTAG_REF)
            free(ref_of(item)); /* its request is the caller's, gone with the job */
        else if (!(item & QTAG_OP) && ((pkt_t *)item)->idx == SRV_COPY_IDX)
            pkt_copy_free((pkt_t *)item, ((pkt_t *)item)->len);
    }
    atomic_store(&srv_g.copies_queued, 0);
    srv_g.q_head = srv_g.q_tail = 0;
    atomic_store(&srv_g.q_len, 0);
    atomic_store(&srv_g.outstanding, 0);
    free(srv_g.peer_dead);
    srv_g.peer_dead = NULL;
    if (graceful)
        boot_finalize();
    else
        boot_abandon();
    srv_g.inited = false;
    srv_g.size = 0; /* srv_all_on_one_host asks a later job's */
    srv_g.pkt_handler = NULL;
    srv_g.imm_handler = NULL;
    srv_g.peer_handler = NULL;
    atomic_store(&srv_g.fault_fn, NULL);
    fault_flush();
}

int srv_finalize(void)
{
    if (!srv_g.inited)
        return util_err(MPIV_ERR_STATE, "server: not initialised");
    int rc = MPIV_SUCCESS;
    /* Inline: from here no user thread waits on the network any more, yet
     * our sends may need us to progress (a provider's acknowledgements) and
     * peers may still deliver to us until the barrier below: a server
     * thread does it meanwhile. If it cannot start, we progress ourselves
     * below, and the barrier may then be slower, not wrong on shm. */
    if (srv_g.inline_mode && !atomic_load_explicit(&srv_g.thread_started, memory_order_relaxed) &&
        start_thread() != MPIV_SUCCESS)
        util_log_warn("server: %s", mpiv_error_detail());
    /* Let our sends and writes finish (the thread, or we, progress them). */
    uint64_t deadline = util_now_ns() + 10ull * 1000000000u;
    while (atomic_load_explicit(&srv_g.outstanding, memory_order_relaxed) > 0) {
        if (!atomic_load_explicit(&srv_g.thread_started, memory_order_relaxed) &&
            util_bias_trylock(&srv_g.progress_lock)) {
            progress_round();
            util_bias_unlock(&srv_g.progress_lock);
        }
        if (util_now_ns() > deadline) {
            rc = util_err(MPIV_ERR_NET, "server: %ld operations still outstanding after 10 s",
                          (long)atomic_load(&srv_g.outstanding));
            break;
        }
        sched_yield();
    }
    /* No rank closes its endpoint while a peer may still be delivering to
     * it: the server keeps progressing during this barrier. */
    int brc = boot_barrier();
    if (brc && !rc)
        rc = brc;
    log_traffic();
    srv_teardown(true);
    return rc;
}

void srv_abandon(void)
{
    if (srv_g.inited)
        srv_teardown(false);
}

/* --- fault injection (tests only, see server.h) ------------------------- */

/* Something the hook held back: a packet to send, or a completion. */
struct srv_delayed {
    struct srv_delayed *next;
    int rounds;     /* progress rounds left before it happens            */
    pkt_t *p;       /* a packet to send to `peer`, or NULL: cqe instead   */
    int peer;
    bool local;     /* a write failed locally: its peer stays alive     */
    struct srv_net *net; /* the backend that reported cqe               */
    struct srv_cqe cqe;
};

#define FAULT_DELAY_ROUNDS 16

void srv_fault_set(srv_fault_fn fn, void *arg)
{
    /* relaxed: the store of fn below publishes it (release) */
    atomic_store_explicit(&srv_g.fault_arg, arg, memory_order_relaxed);
    /* release: the argument before the hook that reads it */
    atomic_store_explicit(&srv_g.fault_fn, fn, memory_order_release);
}

static enum srv_fault_action fault_ask(enum srv_fault_point point, int peer,
                                       const unsigned char *data, size_t len, uint32_t imm)
{
    /* acquire: pairs with srv_fault_set */
    srv_fault_fn fn = atomic_load_explicit(&srv_g.fault_fn, memory_order_acquire);
    if (!fn)
        return SRV_FAULT_PASS;
    struct srv_fault_event ev = {point, peer, data, len, imm};
    return fn(&ev, atomic_load_explicit(&srv_g.fault_arg, memory_order_relaxed));
}

static void fault_hold(pkt_t *p, int peer, struct srv_net *net, const struct srv_cqe *cqe,
                       int rounds)
{
    struct srv_delayed *d = calloc(1, sizeof *d);
    if (!d)
        util_fatal("server: out of memory holding back an injected fault");
    d->rounds = rounds;
    d->p = p;
    d->peer = peer;
    d->net = net;
    if (cqe)
        d->cqe = *cqe;
    util_spin_lock(&srv_g.fault_lock);
    struct srv_delayed **tail = &srv_g.delayed;
    while (*tail)
        tail = &(*tail)->next;
    *tail = d;
    util_spin_unlock(&srv_g.fault_lock);
}

/* A copy of packet p from the pool, or NULL if none is free. */
static pkt_t *fault_copy(const pkt_t *p, size_t len)
{
    pkt_t *q = pkt_get_server(srv_g.pool);
    if (q) {
        memcpy(q->data, p->data, len);
        q->len = (uint32_t)len;
        q->peer = p->peer;
    }
    return q;
}

/* srv_send's part: MPIV_SUCCESS (send p as usual), SRV_DONE (the hook took
 * p) or an error (srv_send fails and gives p back). */
static int fault_on_send(pkt_t *p, int peer)
{
    switch (fault_ask(SRV_FAULT_SEND, peer, p->data, p->len, 0)) {
    case SRV_FAULT_DROP:
        pkt_put_server(srv_g.pool, p);
        return SRV_DONE;
    case SRV_FAULT_FAIL:
        return util_err(MPIV_ERR_NET, "server: sending to rank %d failed (injected)", peer);
    case SRV_FAULT_DUP: {
        pkt_t *q = fault_copy(p, p->len);
        if (q) {
            q->peer = peer;
            if (submit((uintptr_t)q) != MPIV_SUCCESS)
                pkt_put_server(srv_g.pool, q);
        }
        return MPIV_SUCCESS;
    }
    case SRV_FAULT_DELAY:
        fault_hold(p, peer, NULL, NULL, FAULT_DELAY_ROUNDS);
        return SRV_DONE;
    case SRV_FAULT_PASS:
    case SRV_FAULT_REFUSE: /* means something for reads only */
        break;
    }
    return MPIV_SUCCESS;
}

static int fault_on_write(struct srv_rdma_op *op)
{
    enum srv_fault_action a = fault_ask(SRV_FAULT_WRITE, op->peer, NULL, op->len, op->imm);
    if (a == SRV_FAULT_FAIL) {
        /* as a backend reports a failed write: its completion, with err */
        atomic_fetch_add_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
        struct srv_cqe e = {.kind = SRV_CQE_WRITE, .err = MPIV_ERR_NET, .src = op->peer, .op = op};
        fault_hold(NULL, op->peer, srv_g.peer_net[op->peer], &e, 1);
        util_spin_lock(&srv_g.fault_lock);
        for (struct srv_delayed *d = srv_g.delayed; d; d = d->next)
            if (d->cqe.op == op)
                d->local = true;
        util_spin_unlock(&srv_g.fault_lock);
        return MPIV_SUCCESS;
    }
    if (a == SRV_FAULT_DUP) {
        struct srv_rdma_op *twin = malloc(sizeof *twin);
        if (twin) {
            *twin = *op;
            memset(twin->be, 0, sizeof twin->be);
            twin->done = NULL; /* its completion is nobody's */
            if (submit((uintptr_t)twin | QTAG_OP) != MPIV_SUCCESS)
                free(twin);
        }
    }
    int rc = submit((uintptr_t)op | QTAG_OP);
    if (rc)
        free(op);
    return rc;
}

/* Progress lock held: applies the hook to the completions ev[0..*n) that
 * backend net reported (removing what it drops or holds back). */
static void fault_on_poll(struct srv_net *net, struct srv_cqe *ev, int *n)
{
    int out = 0;
    for (int i = 0; i < *n; i++) {
        struct srv_cqe *e = &ev[i];
        enum srv_fault_action a = SRV_FAULT_PASS;
        /* a lent arrival that fits a packet is copied into the one lent
         * with it, so that it may be held back; a larger one can only
         * pass, fail or be dropped */
        if (e->kind == SRV_CQE_RECV && e->data && !e->err &&
            e->len <= pkt_data_size(srv_g.pool)) {
            memcpy(e->p->data, e->data, e->len);
            e->data = NULL;
        }
        if (e->kind == SRV_CQE_RECV && !e->err)
            a = fault_ask(SRV_FAULT_RECV, e->src, e->data ? e->data : e->p->data, e->len, 0);
        if (e->data && (a == SRV_FAULT_DELAY || a == SRV_FAULT_DUP))
            a = SRV_FAULT_PASS;
        else if (e->kind == SRV_CQE_IMM && !e->err)
            a = fault_ask(SRV_FAULT_IMM, e->src, NULL, e->len, e->imm);
        switch (a) {
        case SRV_FAULT_DROP:
            if (e->p) {
                net->posted_recvs--;
                pkt_put_server(srv_g.pool, e->p);
            }
            continue;
        case SRV_FAULT_DELAY:
            fault_hold(NULL, e->src, net, e, FAULT_DELAY_ROUNDS);
            continue;
        case SRV_FAULT_FAIL:
            e->err = MPIV_ERR_NET;
            break;
        case SRV_FAULT_DUP: {
            struct srv_cqe twin = *e;
            twin.p = NULL;
            if (e->kind == SRV_CQE_RECV) {
                twin.p = fault_copy(e->p, e->len);
                if (!twin.p)
                    break;
                twin.p->peer = e->src;
                net->posted_recvs++; /* dispatch counts it as a posted one */
            }
            fault_hold(NULL, e->src, net, &twin, 0);
            break;
        }
        case SRV_FAULT_PASS:
        case SRV_FAULT_REFUSE: /* means something for reads only */
            break;
        }
        ev[out++] = *e;
    }
    *n = out;
}

/* Progress lock held: dispatches what the hook held back whose time has
 * come; returns how many. */
static int fault_due(void)
{
    /* Take out what is due, then act on it outside fault_lock. */
    struct srv_delayed *due = NULL, **dtail = &due;
    util_spin_lock(&srv_g.fault_lock);
    for (struct srv_delayed **pp = &srv_g.delayed; *pp;) {
        struct srv_delayed *d = *pp;
        if (d->rounds-- > 0) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        d->next = NULL;
        *dtail = d;
        dtail = &d->next;
    }
    util_spin_unlock(&srv_g.fault_lock);
    int did = 0;
    while (due) {
        struct srv_delayed *d = due;
        due = d->next;
        if (d->p) {
            d->p->peer = d->peer;
            if (submit((uintptr_t)d->p) != MPIV_SUCCESS)
                pkt_put_server(srv_g.pool, d->p);
        } else if (d->local) {
            struct srv_rdma_op *op = d->cqe.op;
            atomic_fetch_sub_explicit(&srv_g.outstanding, 1, memory_order_relaxed);
            if (op->done)
                op->done(op->ctx, d->cqe.err);
            free(op);
        } else {
            dispatch(d->net, &d->cqe);
        }
        free(d);
        did++;
    }
    return did;
}

static void fault_flush(void)
{
    struct srv_delayed *d = srv_g.delayed;
    srv_g.delayed = NULL;
    while (d) {
        struct srv_delayed *next = d->next;
        pkt_t *p = d->p ? d->p : d->cqe.p;
        if (p)
            pkt_put_server(srv_g.pool, p);
        if (!d->p && d->cqe.kind == SRV_CQE_WRITE)
            free(d->cqe.op);
        free(d);
        d = next;
    }
}

