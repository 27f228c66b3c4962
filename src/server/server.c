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
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/boot.h"
#include "server/srv_int.h"
#include "util/atomic.h"
#include "util/spinlock.h"

#define SRV_BATCH 16

/* Items of the send queue are packets (64-byte aligned) or RDMA ops
 * (malloc'ed, 16-byte aligned), told apart by the low bit; a packet links
 * through p->next (the pool's link, unused while the server owns it), an op
 * through op->qnext. */
#define QTAG_OP ((uintptr_t)1)

static struct srv_state {
    struct util_config cfg;
    struct pkt_pool *pool;
    int rank, size;
    const struct srv_backend_ops *ops;
    struct srv_backend *be;
    srv_pkt_handler handlers[SRV_MAX_TYPES];
    srv_imm_handler imm_handler;

    util_spinlock progress_lock;
    int posted_recvs;   /* receives posted (under progress_lock)     */
    int recv_depth;
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
    atomic_uchar *peer_dead;

    pthread_t thread;
    /* Set once the thread runs, cleared once it has stopped. Workers read
     * it in srv_progress (their idle hook, published with a relaxed store):
     * release/acquire so that a worker that sees it set also sees
     * everything srv_start wrote before. */
    atomic_bool thread_started;
    atomic_int stop;
    bool inited;
    bool one_host_known, one_host; /* srv_all_on_one_host's answer, per srv_init */

    uint64_t spin_ns, max_sleep_ns;
    struct srv_stats stats; /* under progress_lock, except sleeps: */
    atomic_ulong sleeps;    /* the idle server's, outside the lock */
} S = {
    .progress_lock = UTIL_SPINLOCK_INIT,
    .q_lock = UTIL_SPINLOCK_INIT,
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

int srv_all_on_one_host(bool *one_host)
{
    /* Asked by pick_backend and again by the backend's init: the answer is
     * kept for this srv_init, so the job pays for one allgather (every rank
     * takes the same path, so the collective calls still pair up). */
    if (S.one_host_known) {
        *one_host = S.one_host;
        return MPIV_SUCCESS;
    }
    /* the host name, and the kernel's boot id: two machines (containers,
     * a careless cluster) can share a name, never a boot id */
    char mine[128] = {0};
    gethostname(mine, 63);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(mine + 64, 63, f))
            mine[64] = '\0';
        fclose(f);
    }
    int size = S.size > 0 ? S.size : 1;
    char *all = malloc(sizeof mine * (size_t)size);
    if (!all)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory");
    int rc = srv_boot_allgather(mine, sizeof mine, all);
    if (rc == MPIV_SUCCESS) {
        *one_host = true;
        for (int r = 1; r < size; r++)
            if (memcmp(all, all + sizeof mine * (size_t)r, sizeof mine) != 0)
                *one_host = false;
        S.one_host = *one_host;
        S.one_host_known = true;
    }
    free(all);
    return rc;
}

void srv_set_backoff(uint64_t spin_ns, uint64_t max_sleep_ns)
{
    S.spin_ns = spin_ns;
    S.max_sleep_ns = max_sleep_ns;
}

void srv_get_stats(struct srv_stats *st)
{
    util_spin_lock(&S.progress_lock);
    *st = S.stats;
    util_spin_unlock(&S.progress_lock);
    st->sleeps = atomic_load_explicit(&S.sleeps, memory_order_relaxed);
}

const char *srv_backend_name(void) { return S.ops ? S.ops->name : "none"; }

/* --- the send queue ------------------------------------------------------ */

static uintptr_t *q_link(uintptr_t item)
{
    if (item & QTAG_OP)
        return &((struct srv_rdma_op *)(item & ~QTAG_OP))->qnext;
    return (uintptr_t *)&((pkt_t *)item)->next;
}

static void q_push(uintptr_t item)
{
    *q_link(item) = 0;
    util_spin_lock(&S.q_lock);
    if (S.q_tail)
        *q_link(S.q_tail) = item;
    else
        S.q_head = item;
    S.q_tail = item;
    /* Incremented under the lock; a sender that reads 0 after this point
     * (relaxed is fine: the lock orders it against the drain) joins the
     * queue instead of overtaking. */
    atomic_fetch_add_explicit(&S.q_len, 1, memory_order_relaxed);
    util_spin_unlock(&S.q_lock);
}

/* Posts one item; MPIV_SUCCESS, SRV_AGAIN or an error. */
static int post_item(uintptr_t item)
{
    if (item & QTAG_OP) {
        struct srv_rdma_op *op = (struct srv_rdma_op *)(item & ~QTAG_OP);
        return S.ops->rdma_write_imm(S.be, op);
    }
    pkt_t *p = (pkt_t *)item;
    int rc = S.ops->post_send(S.be, p, p->peer);
    if (rc == SRV_DONE) {
        atomic_fetch_sub_explicit(&S.outstanding, 1, memory_order_relaxed);
        pkt_put_server(S.pool, p);
        rc = MPIV_SUCCESS;
    }
    return rc;
}

static void fail_item(uintptr_t item, int err)
{
    atomic_fetch_sub_explicit(&S.outstanding, 1, memory_order_relaxed);
    if (item & QTAG_OP) {
        struct srv_rdma_op *op = (struct srv_rdma_op *)(item & ~QTAG_OP);
        if (op->done)
            op->done(op->ctx, err);
        free(op);
    } else {
        pkt_put_server(S.pool, (pkt_t *)item);
    }
}

/* Posts queued items in order until the backend says "not now" again.
 * The queue lock is held across each post so that no sender sees an empty
 * queue while the head is between "taken" and "posted". */
static int q_drain(void)
{
    int done = 0;
    if (atomic_load_explicit(&S.q_len, memory_order_relaxed) == 0)
        return 0;
    uintptr_t failed[SRV_BATCH];
    int nfailed = 0;
    util_spin_lock(&S.q_lock);
    while (S.q_head && nfailed < SRV_BATCH) {
        uintptr_t item = S.q_head;
        uintptr_t next = *q_link(item); /* the post may reuse the link */
        int rc = post_item(item);
        if (rc == SRV_AGAIN)
            break;
        S.q_head = next;
        if (!next)
            S.q_tail = 0;
        atomic_fetch_sub_explicit(&S.q_len, 1, memory_order_relaxed);
        done++;
        if (rc != MPIV_SUCCESS) {
            util_log_error("server: queued operation failed: %s", mpiv_error_detail());
            failed[nfailed++] = item;
        }
    }
    util_spin_unlock(&S.q_lock);
    /* Outside the lock: a done callback may post again. */
    for (int i = 0; i < nfailed; i++)
        fail_item(failed[i], MPIV_ERR_NET);
    S.stats.queued_posted += (uint64_t)done;
    return done;
}

/* Posts now if nothing waits ahead, else (or if the backend is full)
 * queues. */
static int submit(uintptr_t item)
{
    atomic_fetch_add_explicit(&S.outstanding, 1, memory_order_relaxed);
    if (atomic_load_explicit(&S.q_len, memory_order_relaxed) == 0) {
        int rc = post_item(item);
        if (rc == MPIV_SUCCESS)
            return MPIV_SUCCESS;
        if (rc != SRV_AGAIN) {
            atomic_fetch_sub_explicit(&S.outstanding, 1, memory_order_relaxed);
            return rc;
        }
    }
    q_push(item);
    return MPIV_SUCCESS;
}

/* --- public data path --------------------------------------------------- */

static int check_peer(int peer)
{
    if (util_unlikely(!S.inited))
        return util_err(MPIV_ERR_STATE, "server: not initialised");
    if (util_unlikely(peer < 0 || peer >= S.size))
        return util_err(MPIV_ERR_RANK, "rank %d is outside [0, %d)", peer, S.size);
    if (util_unlikely(atomic_load_explicit(&S.peer_dead[peer], memory_order_relaxed)))
        return util_err(MPIV_ERR_PEER, "rank %d is gone (an earlier transfer to it failed)",
                        peer);
    return MPIV_SUCCESS;
}

int srv_send(pkt_t *p, int peer)
{
    int rc = check_peer(peer);
    if (rc)
        return rc;
    p->peer = peer;
    return submit((uintptr_t)p);
}

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
    rc = submit((uintptr_t)op | QTAG_OP);
    if (rc)
        free(op);
    return rc;
}

void srv_set_handler(uint8_t type, srv_pkt_handler fn)
{
    if (type < SRV_MAX_TYPES)
        S.handlers[type] = fn;
}

void srv_set_imm_handler(srv_imm_handler fn) { S.imm_handler = fn; }

/* --- progress ----------------------------------------------------------- */

static void refill_recvs(void)
{
    while (S.posted_recvs < S.recv_depth) {
        pkt_t *p = pkt_get_server(S.pool);
        if (p && S.stash_len < S.stash_target) {
            /* plenty: top the reserve up by one on the way */
            pkt_t *q = pkt_get_server(S.pool);
            if (q) {
                q->next = S.stash;
                S.stash = q;
                S.stash_len++;
            }
        }
        if (!p && S.stash) {
            p = S.stash;
            S.stash = p->next;
            S.stash_len--;
        }
        if (!p) {
            if (!S.warned_no_pkt && S.posted_recvs == 0)
                util_log_warn("server: packet pool empty, no receive posted");
            S.warned_no_pkt = true;
            return;
        }
        int rc = S.ops->post_recv(S.be, p);
        if (rc != MPIV_SUCCESS) {
            pkt_put_server(S.pool, p);
            if (rc != SRV_AGAIN)
                util_log_error("server: posting a receive failed: %s", mpiv_error_detail());
            return;
        }
        S.posted_recvs++;
    }
    S.warned_no_pkt = false;
}

static void mark_dead(int peer)
{
    if (peer >= 0 && peer < S.size)
        atomic_store_explicit(&S.peer_dead[peer], 1, memory_order_relaxed);
}

static void dispatch(struct srv_cqe *e)
{
    switch (e->kind) {
    case SRV_CQE_RECV: {
        pkt_t *p = e->p;
        S.posted_recvs--;
        if (e->err) {
            pkt_put_server(S.pool, p);
            break;
        }
        p->len = (uint32_t)e->len;
        p->peer = e->src;
        uint8_t t = p->len ? p->data[0] : 0xff;
        srv_pkt_handler h = t < SRV_MAX_TYPES ? S.handlers[t] : NULL;
        S.stats.recvs++;
        if (util_likely(h != NULL)) {
            h(p);
        } else {
            util_log_error("server: packet of unknown type %u (%u bytes) from rank %d dropped",
                           t, p->len, e->src);
            pkt_put_server(S.pool, p);
        }
        break;
    }
    case SRV_CQE_SEND:
        atomic_fetch_sub_explicit(&S.outstanding, 1, memory_order_relaxed);
        if (e->err)
            mark_dead(e->src);
        S.stats.sends_done++;
        pkt_put_server(S.pool, e->p);
        break;
    case SRV_CQE_WRITE: {
        struct srv_rdma_op *op = e->op;
        atomic_fetch_sub_explicit(&S.outstanding, 1, memory_order_relaxed);
        if (e->err)
            mark_dead(op->peer);
        S.stats.writes_done++;
        if (op->done)
            op->done(op->ctx, e->err);
        free(op);
        break;
    }
    case SRV_CQE_IMM:
        if (e->p) {
            S.posted_recvs--;
            pkt_put_server(S.pool, e->p);
        }
        if (e->err)
            break;
        S.stats.imms++;
        if (S.imm_handler)
            S.imm_handler(e->imm, e->src, e->len);
        else
            util_log_error("server: RDMA write with immediate from rank %d and no handler",
                           e->src);
        break;
    }
}

/* One round; the caller holds progress_lock. Returns how much it did. */
static int progress_round(void)
{
    int did = q_drain();
    struct srv_cqe ev[SRV_BATCH];
    int n = S.ops->poll(S.be, ev, SRV_BATCH);
    if (n < 0) {
        util_log_error("server: polling the network failed: %s", mpiv_error_detail());
        n = 0;
    }
    for (int i = 0; i < n; i++)
        dispatch(&ev[i]);
    if (S.posted_recvs < S.recv_depth)
        refill_recvs();
    return did + n;
}

int srv_progress(void)
{
    if (!S.inited || !atomic_load_explicit(&S.thread_started, memory_order_acquire))
        return 0;
    int did = 0;
    if (util_spin_trylock(&S.progress_lock)) {
        did = progress_round();
        util_spin_unlock(&S.progress_lock);
    }
    return did;
}

/* --- the thread --------------------------------------------------------- */

static void pin_self(void)
{
    if (S.cfg.bind != UTIL_BIND_CORE)
        return;
    int core = S.cfg.server_core >= 0
                   ? (int)S.cfg.server_core
                   : srv_default_core(S.cfg.ncores, S.cfg.local_ranks, S.cfg.local_rank);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core % CPU_SETSIZE, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc)
        util_log_warn("server: cannot pin to core %d: %s", core, strerror(rc));
    else
        util_log_info("server: pinned to core %d", core);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
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
    while (!atomic_load_explicit(&S.stop, memory_order_acquire)) {
        int did = 0;
        if (util_spin_trylock(&S.progress_lock)) {
            did = progress_round();
            util_spin_unlock(&S.progress_lock);
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
        if (idle < S.spin_ns) {
            util_cpu_relax();
        } else if (idle < 2 * S.spin_ns) {
            sched_yield();
        } else {
            bool busy = atomic_load_explicit(&S.q_len, memory_order_relaxed) ||
                        atomic_load_explicit(&S.outstanding, memory_order_relaxed);
            sleep = sleep ? sleep * 2 : 1000;
            if (sleep > S.max_sleep_ns)
                sleep = S.max_sleep_ns;
            if (busy && sleep > 1000)
                sleep = 1000;
            atomic_fetch_add_explicit(&S.sleeps, 1, memory_order_relaxed);
            sleep_ns(sleep);
        }
    }
    return NULL;
}

/* --- life cycle --------------------------------------------------------- */

static int pick_backend(void)
{
    if (S.cfg.net == UTIL_NET_OFI) {
        S.ops = &srv_ofi_ops;
        return MPIV_SUCCESS;
    }
    if (S.cfg.net == UTIL_NET_IBV) {
        S.ops = &srv_ibv_ops;
        return MPIV_SUCCESS;
    }
    if (S.cfg.net == UTIL_NET_SHM) {
        S.ops = &srv_shm_ops;
        return MPIV_SUCCESS;
    }
    /* auto: MPIv's own shared-memory rings when every rank is on this host
     * (faster than any network's loopback, docs/PERFORMANCE.md); else ibv
     * only if every rank has a device, so all pick the same; else ofi. */
    bool one_host = false;
    int hrc = srv_all_on_one_host(&one_host);
    if (hrc)
        return hrc;
    if (one_host) {
        S.ops = &srv_shm_ops;
        return MPIV_SUCCESS;
    }
    unsigned char mine = srv_ibv_available() ? 1 : 0;
    unsigned char *all = malloc((size_t)S.size);
    if (!all)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory");
    int rc = srv_boot_allgather(&mine, 1, all);
    if (rc == MPIV_SUCCESS) {
        bool every = true;
        for (int r = 0; r < S.size; r++)
            every = every && all[r];
        S.ops = every ? &srv_ibv_ops : &srv_ofi_ops;
    }
    free(all);
    return rc;
}

int srv_init(const struct util_config *cfg, struct pkt_pool *pool, int *rank, int *size)
{
    if (S.inited)
        return util_err(MPIV_ERR_STATE, "server: already initialised");
    S.cfg = *cfg;
    S.one_host_known = false;
    S.pool = pool;
    S.recv_depth = (int)cfg->recv_depth;
    int rc = srv_boot_init(&S.rank, &S.size);
    if (rc)
        return rc;
    util_log_set_rank(S.rank);
    if ((rc = pick_backend()))
        goto fail_boot;
    S.peer_dead = calloc((size_t)S.size, sizeof *S.peer_dead);
    if (!S.peer_dead) {
        rc = util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory");
        goto fail_boot;
    }
    if ((rc = S.ops->init(cfg, S.rank, S.size, &S.be)))
        goto fail_mem;
    if ((rc = S.ops->reg_pool(S.be, pool)) || (rc = S.ops->exchange(S.be)) ||
        (rc = srv_mr_cache_init(S.be, S.ops)))
        goto fail_be;
    util_log_info("server: rank %d of %d, backend %s, bootstrap %s", S.rank, S.size,
                  S.ops->name, srv_boot_method());
    memset(&S.stats, 0, sizeof S.stats);
    atomic_store(&S.stop, 0);
    S.inited = true;
    *rank = S.rank;
    *size = S.size;
    return MPIV_SUCCESS;
fail_be:
    S.ops->finalize(S.be);
    S.be = NULL;
fail_mem:
    free(S.peer_dead);
    S.peer_dead = NULL;
fail_boot:
    srv_boot_finalize();
    S.ops = NULL;
    return rc;
}

int srv_start(void)
{
    if (!S.inited || atomic_load_explicit(&S.thread_started, memory_order_relaxed))
        return util_err(MPIV_ERR_STATE, "server: srv_start before srv_init or twice");
    util_spin_lock(&S.progress_lock);
    refill_recvs();
    util_spin_unlock(&S.progress_lock);
    if (S.posted_recvs == 0)
        return util_err(MPIV_ERR_NO_RESOURCES,
                        "server: could not post any receive packet (pool of %zu packets)",
                        pkt_count(S.pool));
    /* At most recv_depth, and at most a quarter of what senders keep. */
    S.stash_target = S.recv_depth;
    long spare = ((long)pkt_count(S.pool) - S.recv_depth) / 4;
    if (S.stash_target > spare)
        S.stash_target = (int)(spare > 0 ? spare : 0);
    int rc = pthread_create(&S.thread, NULL, server_loop, NULL);
    if (rc)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: pthread_create: %s", strerror(rc));
    atomic_store_explicit(&S.thread_started, true, memory_order_release);
    return MPIV_SUCCESS;
}

int srv_boot_barrier_all(void) { return srv_boot_barrier(); }

/* What srv_finalize and srv_abandon share: stop the thread, close the
 * backend, give the packets back, leave the job (graceful) or let go. */
static void srv_teardown(bool graceful)
{
    if (atomic_load_explicit(&S.thread_started, memory_order_relaxed)) {
        atomic_store_explicit(&S.stop, 1, memory_order_release);
        pthread_join(S.thread, NULL);
        /* relaxed: nothing is published by the clearing */
        atomic_store_explicit(&S.thread_started, false, memory_order_relaxed);
    }
    while (S.stash) {
        pkt_t *p = S.stash;
        S.stash = p->next;
        pkt_put_server(S.pool, p);
    }
    S.stash_len = 0;
    srv_mr_cache_fini();
    S.ops->finalize(S.be);
    S.be = NULL;
    /* Packets still in the queue (only after a failure) belong to the
     * pool, which the caller destroys next. */
    S.q_head = S.q_tail = 0;
    atomic_store(&S.q_len, 0);
    atomic_store(&S.outstanding, 0);
    S.posted_recvs = 0;
    free(S.peer_dead);
    S.peer_dead = NULL;
    if (graceful)
        srv_boot_finalize();
    else
        srv_boot_abandon();
    S.inited = false;
    S.ops = NULL;
    memset(S.handlers, 0, sizeof S.handlers);
    S.imm_handler = NULL;
}

int srv_finalize(void)
{
    if (!S.inited)
        return util_err(MPIV_ERR_STATE, "server: not initialised");
    int rc = MPIV_SUCCESS;
    /* Let our sends and writes finish (the thread, or we, progress them). */
    uint64_t deadline = util_now_ns() + 10ull * 1000000000u;
    while (atomic_load_explicit(&S.outstanding, memory_order_relaxed) > 0) {
        if (!atomic_load_explicit(&S.thread_started, memory_order_relaxed) &&
            util_spin_trylock(&S.progress_lock)) {
            progress_round();
            util_spin_unlock(&S.progress_lock);
        }
        if (util_now_ns() > deadline) {
            rc = util_err(MPIV_ERR_NET, "server: %ld operations still outstanding after 10 s",
                          (long)atomic_load(&S.outstanding));
            break;
        }
        sched_yield();
    }
    /* No rank closes its endpoint while a peer may still be delivering to
     * it: the server keeps progressing during this barrier. */
    int brc = srv_boot_barrier();
    if (brc && !rc)
        rc = brc;
    srv_teardown(true);
    return rc;
}

void srv_abandon(void)
{
    if (S.inited)
        srv_teardown(false);
}
