/*
 * shm.c — the intra-node backend (MPIV_NET=shm): ranks of one host move
 * packets through rings in shared memory, without libfabric.
 *
 * Why: libfabric 1.17's shm provider locks the receiver's whole region for
 * every send and every poll; with two busy-polling processes that lock was
 * about a third of all cycles of MPIv's small-message benchmarks
 * (docs/perf/pt2pt.md). Here each (sender, receiver) pair has a ring of its
 * own, so a send and a poll touch only that ring's two counters.
 * (Cells are packet-sized; a ring of variable-sized records would let many
 * more small messages wait in the same memory. Not done yet.)
 *
 * Layout: every rank r creates one segment (shm_open, unlinked as soon as
 * every rank has mapped it, so a crash leaves nothing in /dev/shm) holding
 * N rings, ring s carrying what rank s sends to r. A ring is `slots` cells
 * of a cell header and a packet's worth of data, and two counters on cache
 * lines of their own: tail (cells written, by the sender) and head (cells
 * consumed, by the receiver).
 *
 * Invariants of a ring (single producer, single consumer):
 *  R1 Only the sending rank writes tail and cells, and within it only the
 *     holder of send_lock[peer]; only the receiving rank writes head, and
 *     within it only the holder of the server's progress lock (poll).
 *  R2 0 <= tail - head <= slots: a sender writes cell tail % slots only
 *     after seeing (acquire) head > tail - slots, i.e. the receiver is done
 *     reading that cell.
 *  R3 A cell's contents are written before tail moves past it (release),
 *     and read only after the receiver saw tail past it (acquire); the
 *     receiver stores head (release) only after it is done reading.
 *  R4 Cells of one ring are consumed in order, so what one rank sends to
 *     another arrives in the order posted (same key, same order: DESIGN).
 *
 * RDMA write with immediate: the writer puts the bytes at the peer's
 * address with process_vm_writev (one copy) when the kernel lets it (same
 * user, ptrace rules); otherwise, or for what a partial call left, it sends
 * them through the ring as CHUNK cells naming the destination address, and
 * the receiver copies them out. An IMM cell follows the last byte (R4), so
 * the immediate never overtakes its data. A write that finds the ring full
 * returns SRV_AGAIN with its progress kept in op->note, and the core posts
 * it again later (nothing of the same sender overtakes it meanwhile).
 * The write's local completion is reported by the next poll. A write whose
 * direct copy fails because the peer is gone (ESRCH) or the address is not
 * mapped there (EFAULT) completes with an error and sends no IMM cell.
 *
 * Nothing in a cell is trusted (the peer may be buggy or hostile): a MSG
 * or CHUNK cell longer than a cell's data, a CHUNK whose bytes do not lie
 * wholly inside one live registration of ours, or an unknown kind is
 * dropped, logged (rate-limited) and counted, and the ring moves on; the
 * IMM cell that ends a write some of whose CHUNKs were dropped is reported
 * with MPIV_ERR_NET. The source of every completion is the ring's index.
 *
 * Memory registration costs no system call: a peer names plain virtual
 * addresses, and mr_reg only records [buf, buf+len) in `regs` for the
 * CHUNK check. mr_pins says true so that the registration cache drops a
 * range as soon as nothing references it: an unreferenced range may be
 * freed by the user at any time, and a late or forged CHUNK must not land
 * in it; caching it would save nothing but a lock and a list insert.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "boot/boot.h"
#include "server/srv_int.h"
#include "server/srv_ratelimit.h"
#include "server/srv_test_hooks.h"
#include "util/spinlock.h"

/* Cells per ring: about SHM_CELLS_PER_RANK for all the senders of a rank,
 * from 64 to 1024 per sender. A cell holds a whole packet, so this is what
 * bounds /dev/shm use: 2 ranks, 2 x 1024 cells of 8 KiB, 17 MB per rank.
 * Fewer cells starve many-thread senders: 64 per ring cut the 64-pair
 * message rate 5x against libfabric's provider (docs/perf/pt2pt.md). */
#define SHM_CELLS_PER_RANK 2048
#define SHM_SLOTS_MIN 64
#define SHM_SLOTS_MAX 1024
#define SHM_MAGIC UINT64_C(0x4d5049567368306d) /* "MPIVsh0m" */
/* One RDMA write at most: an IMM cell's length is 32 bits; a power of two
 * keeps the core's pieces aligned. */
#define SHM_MAX_WRITE ((size_t)1 << 30)

enum shm_kind { CELL_MSG = 1, CELL_CHUNK = 2, CELL_IMM = 3 };

struct shm_cell {
    uint32_t kind;  /* enum shm_kind                                         */
    uint32_t len;   /* MSG, CHUNK: bytes in data; IMM: the write's length   */
    uint32_t imm;   /* IMM                                                   */
    uint32_t pad;
    uint64_t raddr; /* CHUNK: where data goes in the receiver              */
    uint64_t pad2[5];
    unsigned char data[]; /* cell_data bytes                                */
};
_Static_assert(sizeof(struct shm_cell) == 64, "cell header is one cache line");

struct shm_ring {
    _Alignas(64) _Atomic uint64_t tail; /* cells written (the sender's)     */
    _Alignas(64) _Atomic uint64_t head; /* cells consumed (the receiver's)  */
    _Alignas(64) unsigned char cells[];
};

struct shm_seg_header {
    uint64_t magic;
    uint32_t nranks, slots;
    uint64_t cell_size, ring_size;
};

/* A live registration: [start, end) may receive CHUNK cells. */
struct shm_reg {
    uintptr_t start, end;
    struct shm_reg *prev, *next;
};

/* A write that could not be done: reported by the next poll with err. */
struct shm_done {
    struct srv_rdma_op *op;
    int err;
};

struct srv_backend {
    int rank, size;
    size_t cell_data;  /* payload bytes of a cell: a packet's data         */
    size_t cell_size;  /* 64 + cell_data, a multiple of 64                 */
    size_t ring_size;  /* counters + cells                                 */
    size_t seg_size;
    uint64_t slots;    /* cells per ring, a power of two                   */
    char name[64];     /* our segment's name while it is linked            */
    unsigned char *mine;   /* our segment: rings[s] for each sender s     */
    unsigned char **peer;  /* peer[r]: rank r's segment, mapped            */
    pid_t *pid;            /* for process_vm_writev                        */
    util_spinlock *send_lock; /* R1: one per destination                   */
    uint64_t *head;        /* R1: our consumer's copy of head, per sender  */
    uint32_t next_src;     /* poll starts here (fairness between senders)  */
    pkt_t **posted;        /* receive packets the core gave us (a stack)   */
    int nposted, maxposted;
    atomic_int cma;        /* 1: process_vm_writev works, 0: it does not   */
    util_spinlock done_lock; /* finished writes, reported by the next poll */
    struct shm_done *done;
    int maxdone;
    atomic_int ndone; /* written under done_lock; peeked at without it */
    /* Live registrations (any thread registers; poll looks up) and a
     * one-range memo of the last lookup, valid while no range has been
     * removed since (reg_epoch unchanged). All under reg_lock. */
    util_spinlock reg_lock;
    struct shm_reg *regs;
    uint64_t reg_epoch;
    uintptr_t memo_start, memo_end;
    uint64_t memo_epoch;
    /* Poll's own (progress lock): per sender, whether a CHUNK of the write
     * now arriving was dropped; and what was dropped. */
    bool *write_broken;
    struct srv_ratelimit drops;
};

static struct shm_ring *ring_of(struct srv_backend *be, unsigned char *seg, int sender)
{
    return (struct shm_ring *)(seg + 64 + (size_t)sender * be->ring_size);
}

static struct shm_cell *cell_at(struct srv_backend *be, struct shm_ring *g, uint64_t n)
{
    return (struct shm_cell *)(g->cells + (size_t)(n & (be->slots - 1)) * be->cell_size);
}

static void shm_finalize(struct srv_backend *be);

static int shm_init(const struct util_config *cfg, int rank, int size, struct srv_backend **out)
{
    bool one_host = false;
    int rc = srv_all_on_one_host(&one_host);
    if (rc)
        return rc;
    if (!one_host)
        return util_err(MPIV_ERR_NET, "MPIV_NET=shm needs every rank on one host; use ofi or "
                                      "ibv across hosts");
    struct srv_backend *be = calloc(1, sizeof *be);
    if (!be)
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory");
    be->rank = rank;
    be->size = size;
    be->slots = SHM_SLOTS_MAX;
    while (be->slots > SHM_SLOTS_MIN && be->slots * (uint64_t)size > SHM_CELLS_PER_RANK)
        be->slots /= 2;
    be->peer = calloc((size_t)size, sizeof *be->peer);
    be->pid = calloc((size_t)size, sizeof *be->pid);
    be->send_lock = calloc((size_t)size, sizeof *be->send_lock);
    be->head = calloc((size_t)size, sizeof *be->head);
    be->write_broken = calloc((size_t)size, sizeof *be->write_broken);
    atomic_init(&be->cma, cfg->shm_cma ? 1 : 0);
    atomic_init(&be->ndone, 0);
    util_spin_init(&be->done_lock);
    util_spin_init(&be->reg_lock);
    be->memo_epoch = UINT64_MAX; /* no memo yet */
    if (!be->peer || !be->pid || !be->send_lock || !be->head || !be->write_broken) {
        shm_finalize(be);
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory");
    }
    *out = be;
    for (int r = 0; r < size; r++)
        util_spin_init(&be->send_lock[r]);
    return MPIV_SUCCESS;
}

static int shm_reg_pool(struct srv_backend *be, struct pkt_pool *pool)
{
    be->cell_data = pkt_data_size(pool);
    be->cell_size = (sizeof(struct shm_cell) + be->cell_data + 63) / 64 * 64;
    be->ring_size = sizeof(struct shm_ring) + (size_t)be->slots * be->cell_size;
    be->seg_size = 64 + (size_t)be->size * be->ring_size;
    be->maxposted = (int)pkt_count(pool);
    be->posted = calloc((size_t)be->maxposted, sizeof *be->posted);
    if (!be->posted)
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory");
    return MPIV_SUCCESS;
}

/* Creates our segment under a name made of the job's key and our rank. */
static int create_segment(struct srv_backend *be, uint64_t key)
{
    snprintf(be->name, sizeof be->name, "/mpiv-%016" PRIx64 "-%d", key, be->rank);
    int fd = shm_open(be->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return util_err(MPIV_ERR_NET, "shm: shm_open(%s): %s", be->name, strerror(errno));
    /* exactly 0600 whatever the umask: what map_peer checks */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)be->seg_size) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(be->name);
        be->name[0] = '\0';
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: %zu bytes of /dev/shm for %s: %s",
                        be->seg_size, be->name, strerror(e));
    }
    void *p = mmap(NULL, be->seg_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: mmap of %zu bytes: %s", be->seg_size,
                        strerror(errno));
    be->mine = p;
    struct shm_seg_header *h = p;
    h->magic = SHM_MAGIC;
    h->nranks = (uint32_t)be->size;
    h->slots = (uint32_t)be->slots;
    h->cell_size = be->cell_size;
    h->ring_size = be->ring_size;
    return MPIV_SUCCESS;
}

/* Opens rank r's segment `name` for mapping: only one our own user made
 * for us alone (mode 0600), of the size we expect (a shorter one would
 * fault when touched past its end). Sets *fd, or returns the error. */
static int open_segment(struct srv_backend *be, const char *name, int r, int *fd)
{
    int f = shm_open(name, O_RDWR, 0);
    if (f < 0)
        return util_err(MPIV_ERR_NET, "shm: rank %d's segment %s: %s", r, name, strerror(errno));
    struct stat st;
    int rc = MPIV_SUCCESS;
    if (fstat(f, &st) != 0)
        rc = util_err(MPIV_ERR_NET, "shm: fstat of rank %d's segment %s: %s", r, name,
                      strerror(errno));
    else if (st.st_uid != geteuid() || (st.st_mode & 07777) != 0600)
        rc = util_err(MPIV_ERR_NET,
                      "shm: rank %d's segment %s is not ours: owner uid %u (we are %u), mode "
                      "%04o (want 0600)",
                      r, name, (unsigned)st.st_uid, (unsigned)geteuid(),
                      (unsigned)(st.st_mode & 07777));
    else if (st.st_size != (off_t)be->seg_size)
        rc = util_err(MPIV_ERR_NET,
                      "shm: rank %d's segment %s holds %lld bytes, ours %zu (different "
                      "MPIV_PACKET_SIZE?)",
                      r, name, (long long)st.st_size, be->seg_size);
    if (rc) {
        close(f);
        return rc;
    }
    *fd = f;
    return MPIV_SUCCESS;
}

static int map_peer(struct srv_backend *be, uint64_t key, int r)
{
    char name[64];
    snprintf(name, sizeof name, "/mpiv-%016" PRIx64 "-%d", key, r);
    int fd = -1, rc = open_segment(be, name, r, &fd);
    if (rc)
        return rc;
    void *p = mmap(NULL, be->seg_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return util_err(MPIV_ERR_NET, "shm: mapping rank %d's segment: %s", r, strerror(errno));
    be->peer[r] = p;
    const struct shm_seg_header *h = p;
    if (h->magic != SHM_MAGIC || h->nranks != (uint32_t)be->size ||
        h->cell_size != be->cell_size || h->slots != (uint32_t)be->slots)
        return util_err(MPIV_ERR_NET, "shm: rank %d's segment does not match ours (different "
                                      "MPIV_PACKET_SIZE?)", r);
    return MPIV_SUCCESS;
}

static int shm_exchange(struct srv_backend *be)
{
    /* The job's key: rank 0's (every rank has one; all use rank 0's), the
     * launcher's when it chose one (then it can remove the segments of a
     * rank killed before it unlinked them), else a random number. Then
     * each rank's pid, once its segment exists. */
    struct { uint64_t key; int64_t pid; } mine = {0, getpid()}, *all;
    int rc = boot_job_key(&mine.key);
    if (rc)
        return rc;
    if (!mine.key && getrandom(&mine.key, sizeof mine.key, 0) != (ssize_t)sizeof mine.key)
        mine.key = util_now_ns() ^ ((uint64_t)getpid() << 32);
    all = calloc((size_t)be->size, sizeof *all);
    if (!all)
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory");
    rc = boot_allgather(&mine, sizeof mine, all);
    uint64_t key = all[0].key;
    for (int r = 0; rc == MPIV_SUCCESS && r < be->size; r++)
        be->pid[r] = (pid_t)all[r].pid;
    free(all);
    if (rc)
        return rc;
    /* every rank creates its segment, then (barrier) maps the others' */
    int made = create_segment(be, key);
    int ok = made == MPIV_SUCCESS, oks = 0;
    int *each = calloc((size_t)be->size, sizeof *each);
    if (!each)
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory");
    rc = boot_allgather(&ok, sizeof ok, each);
    for (int r = 0; rc == MPIV_SUCCESS && r < be->size; r++)
        oks += each[r];
    if (rc == MPIV_SUCCESS && oks != be->size && made == MPIV_SUCCESS)
        rc = util_err(MPIV_ERR_NET, "shm: %d of %d ranks could not create their segment",
                      be->size - oks, be->size);
    if (made != MPIV_SUCCESS)
        rc = made;
    for (int r = 0; rc == MPIV_SUCCESS && r < be->size; r++)
        rc = r == be->rank ? (be->peer[r] = be->mine, MPIV_SUCCESS) : map_peer(be, key, r);
    /* everybody has mapped everybody (or failed): nothing needs the names */
    ok = rc == MPIV_SUCCESS;
    int brc = boot_allgather(&ok, sizeof ok, each);
    if (be->name[0]) {
        shm_unlink(be->name);
        be->name[0] = '\0';
    }
    oks = 0;
    for (int r = 0; brc == MPIV_SUCCESS && r < be->size; r++)
        oks += each[r];
    free(each);
    if (rc)
        return rc;
    if (brc)
        return brc;
    if (oks != be->size)
        return util_err(MPIV_ERR_NET, "shm: %d of %d ranks could not map the others' segments",
                        be->size - oks, be->size);
    return MPIV_SUCCESS;
}

/* Takes the next free cell of our ring at `peer`, or NULL when full (R2).
 * send_lock[peer] held. */
static struct shm_cell *cell_begin(struct srv_backend *be, int peer, struct shm_ring **g)
{
    *g = ring_of(be, be->peer[peer], be->rank);
    /* relaxed: only we write tail (R1) */
    uint64_t t = atomic_load_explicit(&(*g)->tail, memory_order_relaxed);
    /* acquire: the receiver is done with the cell we are about to reuse */
    if (t - atomic_load_explicit(&(*g)->head, memory_order_acquire) >= be->slots)
        return NULL;
    return cell_at(be, *g, t);
}

static void cell_commit(struct shm_ring *g)
{
    /* release: the cell's contents before the receiver can see it (R3) */
    atomic_store_explicit(&g->tail, atomic_load_explicit(&g->tail, memory_order_relaxed) + 1,
                          memory_order_release);
}

/* Whether the process of rank `peer` still exists (a zombie still does:
 * mpiv_run reaps its ranks at once). */
static bool peer_alive(struct srv_backend *be, int peer)
{
    return peer == be->rank || kill(be->pid[peer], 0) == 0 || errno != ESRCH;
}

/* A ring that stays full may belong to a rank that is gone: then the
 * operation fails instead of waiting forever. */
static int ring_full(struct srv_backend *be, int peer, const char *what)
{
    if (peer_alive(be, peer))
        return SRV_AGAIN;
    return util_err(MPIV_ERR_PEER, "shm: %s to rank %d: the rank is gone", what, peer);
}

static int shm_post_send(struct srv_backend *be, pkt_t *p, int peer)
{
    struct shm_ring *g;
    util_spin_lock(&be->send_lock[peer]);
    struct shm_cell *c = cell_begin(be, peer, &g);
    if (!c) {
        util_spin_unlock(&be->send_lock[peer]);
        return ring_full(be, peer, "send");
    }
    c->kind = CELL_MSG;
    c->len = p->len;
    memcpy(c->data, p->data, p->len);
    cell_commit(g);
    util_spin_unlock(&be->send_lock[peer]);
    return SRV_DONE; /* the data left with the call: p is free */
}

static int shm_post_recv(struct srv_backend *be, pkt_t *p)
{
    if (be->nposted == be->maxposted)
        return SRV_AGAIN;
    be->posted[be->nposted++] = p;
    return MPIV_SUCCESS;
}

/* Whether [addr, addr+len) lies wholly inside one live registration. */
static bool reg_covers(struct srv_backend *be, uint64_t addr, uint64_t len)
{
    if (addr > UINTPTR_MAX || len > UINTPTR_MAX - addr)
        return false;
    uintptr_t a = (uintptr_t)addr, e = a + (uintptr_t)len;
    bool ok = false;
    util_spin_lock(&be->reg_lock);
    if (be->memo_epoch == be->reg_epoch && a >= be->memo_start && e <= be->memo_end) {
        ok = true;
    } else {
        for (struct shm_reg *r = be->regs; r; r = r->next) {
            if (a >= r->start && e <= r->end) {
                be->memo_start = r->start;
                be->memo_end = r->end;
                be->memo_epoch = be->reg_epoch;
                ok = true;
                break;
            }
        }
    }
    util_spin_unlock(&be->reg_lock);
    return ok;
}

/* Copies the bytes of op from op->note[0] on with process_vm_writev.
 * MPIV_SUCCESS (done, or the rest goes through the ring), or the error the
 * write completes with. */
static int write_direct(struct srv_backend *be, struct srv_rdma_op *op)
{
    while (op->note[0] < op->len && atomic_load_explicit(&be->cma, memory_order_relaxed)) {
        size_t off = (size_t)op->note[0];
        struct iovec l = {(char *)op->buf + off, op->len - off};
        struct iovec r = {(void *)(uintptr_t)(op->raddr + off), op->len - off};
        ssize_t n = process_vm_writev(be->pid[op->peer], &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == ESRCH || errno == EFAULT)) {
            /* the rank is gone, or the address is not mapped there (or
             * ours is not): the ring would fare no better */
            int e = errno, rc = e == ESRCH ? MPIV_ERR_PEER : MPIV_ERR_NET;
            util_err(rc, "shm: RDMA write of %zu bytes to rank %d at 0x%" PRIx64 ": %s", op->len,
                     op->peer, op->raddr, e == ESRCH ? "the rank is gone" : strerror(e));
            util_log_error("%s", mpiv_error_detail());
            return rc;
        }
        if (n <= 0) {
            /* EPERM (ptrace rules, a container's seccomp), ENOSYS: the
             * ring carries it instead, for this write and every later one.
             * relaxed: a hint, both ways are correct */
            atomic_store_explicit(&be->cma, 0, memory_order_relaxed);
            util_log_info("shm: process_vm_writev to rank %d: %s; writes go through the rings",
                          op->peer, n < 0 ? strerror(errno) : "no progress");
            return MPIV_SUCCESS;
        }
        op->note[0] += (uint64_t)n;
    }
    return MPIV_SUCCESS;
}

/* Queues op's completion for the next poll. */
static void write_finished(struct srv_backend *be, struct srv_rdma_op *op, int err)
{
    util_spin_lock(&be->done_lock);
    int nd = atomic_load_explicit(&be->ndone, memory_order_relaxed);
    if (nd == be->maxdone) {
        int n = be->maxdone ? 2 * be->maxdone : 64;
        struct shm_done *d = realloc(be->done, (size_t)n * sizeof *d);
        if (!d) {
            util_spin_unlock(&be->done_lock);
            util_fatal("shm: out of memory for a finished write");
        }
        be->done = d;
        be->maxdone = n;
    }
    be->done[nd] = (struct shm_done){op, err};
    /* relaxed: the lock orders the list; the count is only a peek hint */
    atomic_store_explicit(&be->ndone, nd + 1, memory_order_relaxed);
    util_spin_unlock(&be->done_lock);
}

static size_t shm_max_write(struct srv_backend *be)
{
    (void)be;
    return SHM_MAX_WRITE;
}

static int shm_rdma_write_imm(struct srv_backend *be, struct srv_rdma_op *op)
{
    if (op->len > SHM_MAX_WRITE)
        return util_err(MPIV_ERR_ARG, "shm: RDMA write of %zu bytes to rank %d (at most %zu)",
                        op->len, op->peer, SHM_MAX_WRITE);
    if (op->note[1] == 0) { /* first post of this op */
        op->note[0] = 0;
        op->note[1] = 1;
        int err = MPIV_SUCCESS;
        if (op->peer == be->rank) { /* our own memory: only where registered */
            if (!reg_covers(be, op->raddr, op->len)) {
                err = util_err(MPIV_ERR_NET,
                               "shm: RDMA write of %zu bytes to 0x%" PRIx64 " on this rank: not "
                               "inside a registered region",
                               op->len, op->raddr);
                util_log_error("%s", mpiv_error_detail());
            } else if (op->len) {
                memcpy((void *)(uintptr_t)op->raddr, op->buf, op->len);
            }
            op->note[0] = op->len;
        } else {
            err = write_direct(be, op);
        }
        if (err) {
            write_finished(be, op, err);
            return MPIV_SUCCESS; /* its error completion follows; no IMM */
        }
    }
    struct shm_ring *g;
    util_spin_lock(&be->send_lock[op->peer]);
    for (;;) {
        struct shm_cell *c = cell_begin(be, op->peer, &g);
        if (!c) {
            util_spin_unlock(&be->send_lock[op->peer]);
            int rc = ring_full(be, op->peer, "RDMA write");
            if (rc != SRV_AGAIN) {
                util_log_error("%s", mpiv_error_detail());
                write_finished(be, op, rc);
                return MPIV_SUCCESS;
            }
            return SRV_AGAIN; /* op->note keeps how far it got */
        }
        size_t off = (size_t)op->note[0];
        if (off < op->len) {
            size_t n = op->len - off < be->cell_data ? op->len - off : be->cell_data;
            c->kind = CELL_CHUNK;
            c->len = (uint32_t)n;
            c->raddr = op->raddr + off;
            memcpy(c->data, (const char *)op->buf + off, n);
            op->note[0] += n;
        } else {
            c->kind = CELL_IMM;
            c->len = (uint32_t)op->len;
            c->imm = op->imm;
        }
        cell_commit(g);
        if (c->kind == CELL_IMM)
            break;
    }
    util_spin_unlock(&be->send_lock[op->peer]);
    write_finished(be, op, MPIV_SUCCESS);
    return MPIV_SUCCESS;
}

/* Counts a bad cell from `src` and logs it, rate-limited. */
static void cell_dropped(struct srv_backend *be, int src, const struct shm_cell *c,
                         const char *why)
{
    uint64_t quiet;
    if (srv_ratelimit_hit(&be->drops, &quiet))
        util_log_error("shm: dropped a cell from rank %d (kind %" PRIu32 ", %" PRIu32
                       " bytes, address 0x%" PRIx64 "): %s; %" PRIu64 " dropped in all, %" PRIu64
                       " not logged",
                       src, c->kind, c->len, c->raddr, why, be->drops.count, quiet);
}

static int shm_poll(struct srv_backend *be, struct srv_cqe *ev, int max)
{
    int out = 0;
    /* relaxed: a peek to skip the lock when nothing finished; the lock
     * orders the list itself */
    if (atomic_load_explicit(&be->ndone, memory_order_relaxed)) {
        util_spin_lock(&be->done_lock);
        int nd = atomic_load_explicit(&be->ndone, memory_order_relaxed);
        while (nd && out < max) {
            struct shm_done d = be->done[--nd];
            ev[out++] = (struct srv_cqe){
                .kind = SRV_CQE_WRITE, .err = d.err, .src = d.op->peer, .op = d.op};
        }
        atomic_store_explicit(&be->ndone, nd, memory_order_relaxed);
        util_spin_unlock(&be->done_lock);
    }
    for (int k = 0; k < be->size && out < max; k++) {
        int s = (int)((be->next_src + (uint32_t)k) % (uint32_t)be->size);
        struct shm_ring *g = ring_of(be, be->mine, s);
        /* acquire: the cells below tail are written (R3) */
        uint64_t tail = atomic_load_explicit(&g->tail, memory_order_acquire);
        uint64_t h = be->head[s];
        /* a tail more than a ring ahead breaks R2: read no more than the
         * ring holds */
        if (tail - h > be->slots)
            tail = h + be->slots;
        while (h != tail && out < max) {
            struct shm_cell *c = cell_at(be, g, h);
            /* what we check is what we act on: one copy of the header (a
             * faulty peer may rewrite the cell meanwhile) */
            struct shm_cell hd;
            memcpy(&hd, c, sizeof hd);
            if (hd.kind == CELL_MSG) {
                if (hd.len > be->cell_data) {
                    cell_dropped(be, s, &hd, "longer than a cell");
                } else {
                    if (!be->nposted)
                        break; /* no packet to receive into: it waits in the ring */
                    pkt_t *p = be->posted[--be->nposted];
                    memcpy(p->data, c->data, hd.len);
                    ev[out++] = (struct srv_cqe){
                        .kind = SRV_CQE_RECV, .src = s, .len = hd.len, .p = p};
                }
            } else if (hd.kind == CELL_CHUNK) {
                if (hd.len > be->cell_data) {
                    cell_dropped(be, s, &hd, "longer than a cell");
                    be->write_broken[s] = true;
                } else if (!reg_covers(be, hd.raddr, hd.len)) {
                    cell_dropped(be, s, &hd, "not inside a registered region");
                    be->write_broken[s] = true;
                } else {
                    memcpy((void *)(uintptr_t)hd.raddr, c->data, hd.len);
                }
            } else if (hd.kind == CELL_IMM) {
                ev[out++] = (struct srv_cqe){.kind = SRV_CQE_IMM,
                                             .err = be->write_broken[s] ? MPIV_ERR_NET : 0,
                                             .src = s,
                                             .imm = hd.imm,
                                             .len = hd.len};
                be->write_broken[s] = false;
            } else {
                cell_dropped(be, s, &hd, "unknown kind");
            }
            h++;
            /* release: we are done reading the cell (R3) */
            atomic_store_explicit(&g->head, h, memory_order_release);
        }
        be->head[s] = h;
    }
    be->next_src++;
    return out;
}

static int shm_mr_reg(struct srv_backend *be, void *buf, size_t len, srv_mr *mr, void **handle)
{
    struct shm_reg *r = malloc(sizeof *r);
    if (!r)
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory for a registration");
    r->start = (uintptr_t)buf;
    r->end = len > UINTPTR_MAX - r->start ? UINTPTR_MAX : r->start + len;
    r->prev = NULL;
    util_spin_lock(&be->reg_lock);
    r->next = be->regs;
    if (be->regs)
        be->regs->prev = r;
    be->regs = r;
    util_spin_unlock(&be->reg_lock);
    mr->rkey = 0;
    mr->raddr = (uint64_t)(uintptr_t)buf;
    mr->base = (uintptr_t)buf;
    mr->desc = NULL;
    *handle = r;
    return MPIV_SUCCESS;
}

static void shm_mr_dereg(struct srv_backend *be, void *handle)
{
    struct shm_reg *r = handle;
    util_spin_lock(&be->reg_lock);
    if (r->prev)
        r->prev->next = r->next;
    else
        be->regs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    be->reg_epoch++; /* the memo may name this range: forget it */
    util_spin_unlock(&be->reg_lock);
    free(r);
}

static bool shm_mr_pins(struct srv_backend *be)
{
    /* Nothing is pinned, but an unreferenced range must go at once (see
     * the top of the file): the cache is told to keep none. */
    (void)be;
    return true;
}

/* --- test hooks (srv_test_hooks.h) ----------------------------------------- */

int srv_shm_test_put_cell(struct srv_backend *be, int peer, uint32_t kind, uint32_t len,
                          uint64_t raddr, uint32_t imm, const void *data, size_t n)
{
    struct shm_ring *g;
    util_spin_lock(&be->send_lock[peer]);
    struct shm_cell *c = cell_begin(be, peer, &g);
    if (!c) {
        util_spin_unlock(&be->send_lock[peer]);
        return SRV_AGAIN;
    }
    c->kind = kind;
    c->len = len;
    c->imm = imm;
    c->raddr = raddr;
    if (n > be->cell_data)
        n = be->cell_data;
    if (data && n)
        memcpy(c->data, data, n);
    cell_commit(g);
    util_spin_unlock(&be->send_lock[peer]);
    return MPIV_SUCCESS;
}

uint64_t srv_shm_test_dropped(struct srv_backend *be) { return be->drops.count; }

int srv_shm_test_open_segment(struct srv_backend *be, const char *name)
{
    int fd = -1, rc = open_segment(be, name, 0, &fd);
    if (rc == MPIV_SUCCESS)
        close(fd);
    return rc;
}

size_t srv_shm_test_segment_size(struct srv_backend *be) { return be->seg_size; }

static void shm_finalize(struct srv_backend *be)
{
    if (!be)
        return;
    if (be->name[0])
        shm_unlink(be->name);
    for (int r = 0; be->peer && r < be->size; r++)
        if (be->peer[r] && be->peer[r] != be->mine)
            munmap(be->peer[r], be->seg_size);
    if (be->mine)
        munmap(be->mine, be->seg_size);
    free(be->peer);
    free(be->pid);
    free(be->send_lock);
    free(be->head);
    free(be->posted);
    free(be->done);
    free(be->write_broken);
    while (be->regs) {
        struct shm_reg *r = be->regs;
        be->regs = r->next;
        free(r);
    }
    free(be);
}

const struct srv_backend_ops srv_shm_ops = {
    .name = "shm",
    .init = shm_init,
    .exchange = shm_exchange,
    .reg_pool = shm_reg_pool,
    .post_send = shm_post_send,
    .post_recv = shm_post_recv,
    .rdma_write_imm = shm_rdma_write_imm,
    .max_write = shm_max_write,
    .mr_reg = shm_mr_reg,
    .mr_dereg = shm_mr_dereg,
    .poll = shm_poll,
    .mr_pins = shm_mr_pins,
    .finalize = shm_finalize,
};
