/*
 * mr.c — the memory registration cache behind srv_mr_get / srv_mr_put.
 *
 * Strategy (and why it stays correct when users free and reuse memory):
 *
 *  - An entry covers [start, end) and is found by its start address: a get
 *    for (buf, len) is a hit when an entry starts at buf and ends at or
 *    after buf + len. That is the case the protocol meets (the same buffer
 *    sent or received again); sub-ranges of a cached region register anew.
 *  - Entries are reference counted. While an entry is referenced an
 *    operation on that memory is in flight, and the user may not free it
 *    (MPI's rule for buffers of pending operations), so a referenced entry
 *    is always valid. Concurrent gets of one buffer share one registration.
 *  - What happens at refcount 0 depends on what a registration is:
 *      * Backends whose registrations pin physical pages (verbs, and
 *        libfabric providers over RDMA NICs) deregister at once. A cached
 *        unreferenced entry would be the classic hazard: the user frees the
 *        buffer, munmap returns the pages, a new mmap puts other pages at
 *        the same address, and the cached registration still points the
 *        NIC at the old ones — silent corruption. Catching that needs
 *        munmap/brk interception or userfaultfd monitoring; we do neither.
 *        The cost: a loop that sends one buffer, waits, and sends it again
 *        registers it each time (a few µs per small buffer) unless the
 *        operations overlap. MPIv's shm backend says it pins too: its
 *        registrations are the ranges an incoming CHUNK may land in, and
 *        an unreferenced one may be memory the user has freed.
 *      * Backends whose "registration" only names virtual addresses that
 *        the provider resolves at transfer time (libfabric shm, tcp, udp,
 *        sockets: ops->mr_pins() is false) keep up to SRV_MR_LRU_MAX
 *        unreferenced entries in an LRU list. Such an entry cannot go
 *        stale: after free and reuse the same address names the new
 *        memory, which is what the new user registers it for; after
 *        munmap a transfer fails (EFAULT) instead of writing anywhere.
 *  - Keys are never reused (ofi hands out increasing keys when the provider
 *    does not pick them; in a mixed job over an offset-addressing provider
 *    only after 2^16 registrations at one address, see ofi.c), so a late
 *    RDMA write aimed at a deregistered region is refused rather than
 *    landing in a newer one.
 *  - Registration and deregistration are system calls: they run outside the
 *    cache's spinlock. Two threads missing on one buffer at once may both
 *    register; the loser deregisters its copy and takes the winner's.
 *
 * A mixed job (server.c: shm within the host, ibv or ofi between hosts)
 * has two backends, and the protocol asks for a registration without
 * saying which peer it is for (a receive's CTS, a send's RTS offer), so:
 *  M1 An entry is registered with every backend of the job before it is
 *     handed out, and deregistered from every one when it goes; if one
 *     registration fails, those made are undone and the get fails.
 *  M2 The srv_mr handed out is the last backend's (the network's): its
 *     rkey and desc are what a network peer and the local network
 *     backend need, and shm ignores both (its peers name plain virtual
 *     addresses, its writes need no descriptor). So its raddr must be the
 *     virtual address of base, which shm uses as is: srv_init checks that
 *     the network backend registers so (check_mix) before it mixes.
 *  M3 Unreferenced entries are kept only when no backend pins (shm says
 *     it does, so a mixed job keeps none: a range may be freed by the user
 *     as soon as it is unreferenced, and shm must stop accepting CHUNKs
 *     into it).
 * The cost of M1 is a network registration for a rendezvous with a peer
 * of the same host (cheap with tcp, a page pinning with verbs), paid only
 * in a mixed job.
 */
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"
#include "util/spinlock.h"

#define SRV_MR_BUCKETS 1024
#define SRV_MR_LRU_MAX 64
#define SRV_MR_NETS 2 /* backends in one job at most (server.c) */

struct mr_ent {
    srv_mr mr; /* first: a srv_mr * handed out is the entry */
    void *handle[SRV_MR_NETS]; /* one per backend (M1)      */
    uintptr_t start, end;
    long refs;
    struct mr_ent *hnext;              /* hash chain           */
    struct mr_ent *lru_prev, *lru_next; /* while refs == 0      */
};

static struct {
    int nnets;
    struct srv_backend *be[SRV_MR_NETS];
    const struct srv_backend_ops *ops[SRV_MR_NETS];
    bool keep_unreferenced;
    util_spinlock lock;
    struct mr_ent *buckets[SRV_MR_BUCKETS];
    struct mr_ent *lru_head, *lru_tail; /* head = most recently put */
    int lru_len;
    struct srv_mr_stats st;
} mr_cache = {.lock = UTIL_SPINLOCK_INIT};

static size_t bucket_of(uintptr_t start)
{
    uint64_t h = (uint64_t)start * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 54) % SRV_MR_BUCKETS;
}

static void lru_unlink(struct mr_ent *e)
{
    if (e->lru_prev)
        e->lru_prev->lru_next = e->lru_next;
    else
        mr_cache.lru_head = e->lru_next;
    if (e->lru_next)
        e->lru_next->lru_prev = e->lru_prev;
    else
        mr_cache.lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
    mr_cache.lru_len--;
}

static void lru_push(struct mr_ent *e)
{
    e->lru_prev = NULL;
    e->lru_next = mr_cache.lru_head;
    if (mr_cache.lru_head)
        mr_cache.lru_head->lru_prev = e;
    else
        mr_cache.lru_tail = e;
    mr_cache.lru_head = e;
    mr_cache.lru_len++;
}

static void hash_unlink(struct mr_ent *e)
{
    struct mr_ent **pp = &mr_cache.buckets[bucket_of(e->start)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    mr_cache.st.live--;
}

static struct mr_ent *lookup(uintptr_t start, uintptr_t end)
{
    for (struct mr_ent *e = mr_cache.buckets[bucket_of(start)]; e; e = e->hnext)
        if (e->start == start && e->end >= end)
            return e;
    return NULL;
}

/* Takes a reference on e (lock held). */
static void take(struct mr_ent *e)
{
    if (e->refs++ == 0 && mr_cache.keep_unreferenced)
        lru_unlink(e);
}

/* Registers [buf, buf+len) with every backend (M1), filling e's handles
 * and its srv_mr (M2). */
static int reg_all(struct mr_ent *e, void *buf, size_t len)
{
    for (int k = 0; k < mr_cache.nnets; k++) {
        srv_mr tmp;
        srv_mr *out = k == mr_cache.nnets - 1 ? &e->mr : &tmp;
        int rc = mr_cache.ops[k]->mr_reg(mr_cache.be[k], buf, len, out, &e->handle[k]);
        if (rc) {
            while (k-- > 0)
                mr_cache.ops[k]->mr_dereg(mr_cache.be[k], e->handle[k]);
            return rc;
        }
    }
    return MPIV_SUCCESS;
}

static void dereg_all(struct mr_ent *e)
{
    for (int k = 0; k < mr_cache.nnets; k++)
        mr_cache.ops[k]->mr_dereg(mr_cache.be[k], e->handle[k]);
}

int srv_mr_cache_init(int n, struct srv_backend *const *be,
                      const struct srv_backend_ops *const *ops)
{
    if (n < 1 || n > SRV_MR_NETS)
        return util_err(MPIV_ERR_ARG, "server: %d backends for the registration cache", n);
    mr_cache.nnets = n;
    mr_cache.keep_unreferenced = true;
    for (int k = 0; k < n; k++) {
        mr_cache.be[k] = be[k];
        mr_cache.ops[k] = ops[k];
        if (ops[k]->mr_pins(be[k]))
            mr_cache.keep_unreferenced = false; /* M3 */
    }
    memset(mr_cache.buckets, 0, sizeof mr_cache.buckets);
    mr_cache.lru_head = mr_cache.lru_tail = NULL;
    mr_cache.lru_len = 0;
    memset(&mr_cache.st, 0, sizeof mr_cache.st);
    return MPIV_SUCCESS;
}

void srv_mr_cache_fini(void)
{
    for (size_t b = 0; b < SRV_MR_BUCKETS; b++) {
        struct mr_ent *e = mr_cache.buckets[b];
        while (e) {
            struct mr_ent *next = e->hnext;
            if (e->refs)
                util_log_warn("server: registration of %p (%zu bytes) still referenced at "
                              "finalize",
                              (void *)e->start, (size_t)(e->end - e->start));
            dereg_all(e);
            mr_cache.st.deregs++;
            free(e);
            e = next;
        }
        mr_cache.buckets[b] = NULL;
    }
    mr_cache.lru_head = mr_cache.lru_tail = NULL;
    mr_cache.lru_len = 0;
    mr_cache.st.live = 0;
    mr_cache.nnets = 0;
}

void srv_mr_cache_stats(struct srv_mr_stats *st)
{
    util_spin_lock(&mr_cache.lock);
    *st = mr_cache.st;
    util_spin_unlock(&mr_cache.lock);
}

int srv_mr_get(void *buf, size_t len, srv_mr **mr)
{
    if (mr_cache.nnets == 0)
        return util_err(MPIV_ERR_STATE, "server: registration before srv_init");
    if (!buf || !mr)
        return util_err(MPIV_ERR_ARG, "srv_mr_get: NULL buffer or result");
    if (len == 0)
        len = 1; /* a zero-length region still needs a key */
    uintptr_t start = (uintptr_t)buf, end = start + len;

    util_spin_lock(&mr_cache.lock);
    struct mr_ent *e = lookup(start, end);
    if (e) {
        take(e);
        mr_cache.st.hits++;
        util_spin_unlock(&mr_cache.lock);
        *mr = &e->mr;
        return MPIV_SUCCESS;
    }
    util_spin_unlock(&mr_cache.lock);

    struct mr_ent *n = calloc(1, sizeof *n);
    if (!n)
        return util_err(MPIV_ERR_NO_RESOURCES, "server: out of memory for a registration");
    int rc = reg_all(n, buf, len);
    if (rc) {
        free(n);
        return rc;
    }
    n->start = start;
    n->end = end;
    n->refs = 1;

    util_spin_lock(&mr_cache.lock);
    mr_cache.st.regs++;
    e = lookup(start, end);
    if (e) { /* another thread registered it meanwhile: use theirs */
        take(e);
        mr_cache.st.hits++;
        mr_cache.st.deregs++;
        util_spin_unlock(&mr_cache.lock);
        dereg_all(n);
        free(n);
        *mr = &e->mr;
        return MPIV_SUCCESS;
    }
    size_t b = bucket_of(start);
    n->hnext = mr_cache.buckets[b];
    mr_cache.buckets[b] = n;
    mr_cache.st.live++;
    util_spin_unlock(&mr_cache.lock);
    *mr = &n->mr;
    return MPIV_SUCCESS;
}

void srv_mr_put(srv_mr *mr)
{
    if (!mr)
        return;
    struct mr_ent *e = (struct mr_ent *)mr, *victim = NULL;
    util_spin_lock(&mr_cache.lock);
    if (e->refs <= 0)
        util_fatal("srv_mr_put: registration of %p put more often than got", (void *)e->start);
    if (--e->refs == 0) {
        if (mr_cache.keep_unreferenced) {
            lru_push(e);
            if (mr_cache.lru_len > SRV_MR_LRU_MAX) {
                victim = mr_cache.lru_tail;
                lru_unlink(victim);
                hash_unlink(victim);
            }
        } else {
            victim = e;
            hash_unlink(e);
        }
        if (victim)
            mr_cache.st.deregs++;
    }
    util_spin_unlock(&mr_cache.lock);
    if (victim) {
        dereg_all(victim);
        free(victim);
    }
}
