/*
 * comm.c — communicators: the world, dup, split, free, and point-to-point
 * on a communicator.
 *
 * A communicator is a slot of a fixed table indexed by its id (handles are
 * pointers into it, so a stale handle never points at freed memory), its
 * rank maps, and two matching contexts (comm.h). Ids are agreed without a
 * central server, as MPICH does: the members of the parent allreduce (band)
 * a bitmap of the ids each has free and take the lowest left; a rank only
 * ever matches messages from the members of its own communicators, so two
 * disjoint groups may hold the same id (split gives every color the same
 * one).
 *
 * Concurrent creations on different parents (from different threads) share
 * the process's bitmap: only one of them may offer it at a time (the
 * others offer nothing, so every member sees an incomplete answer and all
 * retry), and the bitmap goes to the waiting creation whose parent has the
 * lowest id. That parent's creation is then the one served on every
 * member once the others' rounds end, so some creation always completes
 * (no livelock), and no id is handed to two communicators that share a
 * member.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util/spinlock.h"

struct mpiv_comm mpiv_comm_world_;
static struct mpiv_comm comm_table[COMM_MAX]; /* [0] unused: the world */

static util_spinlock mask_lock = UTIL_SPINLOCK_INIT;
static uint64_t free_ids[COMM_MASK_WORDS]; /* bit set: id free here          */
static uint64_t waiting[COMM_MASK_WORDS];  /* parents with a creation going */
static bool mask_offered;                  /* a creation's round offers free_ids */

static struct mpiv_comm *comm_slot(int id) { return id == 0 ? &mpiv_comm_world_ : &comm_table[id]; }

int proto_comm_init(void)
{
    struct mpiv_comm *w = &mpiv_comm_world_;
    w->id = 0;
    w->rank = proto.rank;
    w->size = proto.size;
    w->world = NULL;
    w->rev = NULL;
    w->coll_seq = 0;
    atomic_init(&w->busy, false);
    memset(free_ids, 0xff, sizeof free_ids);
    free_ids[0] &= ~(uint64_t)1; /* the world's */
    memset(waiting, 0, sizeof waiting);
    mask_offered = false;
    for (int i = 1; i < COMM_MAX; i++) {
        atomic_init(&comm_table[i].live, false);
        atomic_init(&comm_table[i].busy, false);
    }
    atomic_store_explicit(&w->live, true, memory_order_release);
    proto.comms = comm_table;
    return MPIV_SUCCESS;
}

void proto_comm_fini(void)
{
    /* communicators the program did not free die with MPIv */
    for (int i = 1; i < COMM_MAX; i++) {
        if (atomic_load_explicit(&comm_table[i].live, memory_order_acquire)) {
            free(comm_table[i].world);
            free(comm_table[i].rev);
            comm_table[i].world = NULL;
            comm_table[i].rev = NULL;
            atomic_store_explicit(&comm_table[i].live, false, memory_order_relaxed);
        }
    }
    atomic_store_explicit(&mpiv_comm_world_.live, false, memory_order_relaxed);
    proto.comms = NULL;
}

int comm_check(const struct mpiv_comm *c, const char *fn)
{
    if (util_unlikely(!proto.initialized))
        return util_err(MPIV_ERR_STATE, "%s: MPIv is not initialised (call mpiv_init)", fn);
    uintptr_t p = (uintptr_t)c, lo = (uintptr_t)&comm_table[1],
              hi = (uintptr_t)&comm_table[COMM_MAX];
    bool in_table = p >= lo && p < hi && (p - lo) % sizeof *c == 0;
    if (!c || (c != &mpiv_comm_world_ && !in_table))
        return util_err(MPIV_ERR_ARG, "%s: %p is not a communicator%s", fn, (const void *)c,
                        c ? "" : " (MPIV_COMM_NULL)");
    /* acquire: the creator's writes of its fields come before live */
    if (!atomic_load_explicit(&c->live, memory_order_acquire))
        return util_err(MPIV_ERR_ARG, "%s: the communicator was freed", fn);
    return MPIV_SUCCESS;
}

int comm_enter(struct mpiv_comm *c, const char *fn)
{
    /* acquire: the previous holder's coll_seq update comes before */
    if (atomic_exchange_explicit(&c->busy, true, memory_order_acquire))
        return util_err(MPIV_ERR_ARG,
                        "%s: another thread or ULT is already in a collective on this "
                        "communicator (one at a time per communicator)", fn);
    return MPIV_SUCCESS;
}

void comm_leave(struct mpiv_comm *c) { atomic_store_explicit(&c->busy, false, memory_order_release); }

static int rev_cmp(const void *a, const void *b)
{
    const struct comm_rev *x = a, *y = b;
    return (x->world > y->world) - (x->world < y->world);
}

int mpiv_comm_rank(mpiv_comm_t comm, int *rank)
{
    struct mpiv_comm *c = comm;
    int rc_ = comm_check(c, __func__);
    if (rc_)
        return rc_;
    if (!rank)
        return util_err(MPIV_ERR_ARG, "mpiv_comm_rank: rank is NULL");
    *rank = c->rank;
    return MPIV_SUCCESS;
}

int mpiv_comm_size(mpiv_comm_t comm, int *size)
{
    struct mpiv_comm *c = comm;
    int rc_ = comm_check(c, __func__);
    if (rc_)
        return rc_;
    if (!size)
        return util_err(MPIV_ERR_ARG, "mpiv_comm_size: size is NULL");
    *size = c->size;
    return MPIV_SUCCESS;
}

/* --- ids --------------------------------------------------------------------- */

static int lowest_bit(const uint64_t *m)
{
    for (int i = 0; i < COMM_MASK_WORDS; i++)
        if (m[i])
            return i * 64 + __builtin_ctzll(m[i]);
    return -1;
}

/* Agrees with the other members of parent on an id free on all of them and
 * takes it here if `use` (a rank that ends in no communicator leaves it
 * free). Collective over parent; the caller holds parent's flag. */
static int id_agree(struct mpiv_comm *parent, bool use, int *id)
{
    /* the bitmap, then a word that is all ones only if every member
     * offered its bitmap (band) */
    uint64_t buf[COMM_MASK_WORDS + 1];
    int pid = parent->id;
    for (;;) {
        util_spin_lock(&mask_lock);
        waiting[pid / 64] |= (uint64_t)1 << (pid % 64);
        bool offer = !mask_offered && lowest_bit(waiting) == pid;
        if (offer) {
            mask_offered = true;
            memcpy(buf, free_ids, sizeof free_ids);
            buf[COMM_MASK_WORDS] = ~(uint64_t)0;
        } else {
            memset(buf, 0, sizeof buf);
        }
        util_spin_unlock(&mask_lock);

        int rc = coll_allreduce(parent, buf, buf, COMM_MASK_WORDS + 1, MPIV_UINT64, MPIV_BAND);

        util_spin_lock(&mask_lock);
        if (offer)
            mask_offered = false;
        bool done = rc != MPIV_SUCCESS || buf[COMM_MASK_WORDS] == ~(uint64_t)0;
        int got = -1;
        if (rc == MPIV_SUCCESS && done) {
            /* every member offered: we offered too, so free_ids still has
             * what we offered (nobody else could take from it) */
            got = lowest_bit(buf);
            if (got >= 0 && use)
                free_ids[got / 64] &= ~((uint64_t)1 << (got % 64));
        }
        if (done)
            waiting[pid / 64] &= ~((uint64_t)1 << (pid % 64));
        util_spin_unlock(&mask_lock);
        if (rc)
            return rc;
        if (done) {
            if (got < 0)
                return util_err(MPIV_ERR_NO_RESOURCES,
                                "no communicator id is free on every rank of the parent: at most "
                                "%d communicators (MPIV_COMM_MAX, world included) may exist at "
                                "once; free some with mpiv_comm_free",
                                MPIV_COMM_MAX);
            *id = got;
            return MPIV_SUCCESS;
        }
        /* another creation had the bitmap on some member: its round ends
         * on its own, then one of us gets it */
        mpiv_ult_yield();
    }
}

static void id_release(int id)
{
    util_spin_lock(&mask_lock);
    free_ids[id / 64] |= (uint64_t)1 << (id % 64);
    util_spin_unlock(&mask_lock);
}

/* Fills slot `id` with the ranks world[0 .. n) (taken), me being rank
 * `rank`, and publishes it. */
static int comm_make(int id, int *world, int n, int rank, mpiv_comm_t *out)
{
    struct comm_rev *rev = malloc((size_t)n * sizeof *rev);
    if (!rev) {
        free(world);
        id_release(id);
        return util_err(MPIV_ERR_NO_RESOURCES, "out of memory for a %d-rank communicator", n);
    }
    for (int i = 0; i < n; i++)
        rev[i] = (struct comm_rev){.world = world[i], .rank = i};
    qsort(rev, (size_t)n, sizeof *rev, rev_cmp);
    struct mpiv_comm *c = comm_slot(id);
    c->id = id;
    c->rank = rank;
    c->size = n;
    c->world = world;
    c->rev = rev;
    c->coll_seq = 0;
    atomic_store_explicit(&c->busy, false, memory_order_relaxed);
    /* release: comm_check's acquire sees the fields above */
    atomic_store_explicit(&c->live, true, memory_order_release);
    *out = c;
    return MPIV_SUCCESS;
}

int mpiv_comm_dup(mpiv_comm_t comm, mpiv_comm_t *newcomm)
{
    struct mpiv_comm *c = comm;
    int rc_ = comm_check(c, __func__);
    if (rc_)
        return rc_;
    if (!newcomm)
        return util_err(MPIV_ERR_ARG, "mpiv_comm_dup: newcomm is NULL");
    *newcomm = MPIV_COMM_NULL;
    int rc = comm_enter(c, __func__);
    if (rc)
        return rc;
    int id;
    rc = id_agree(c, true, &id);
    if (rc == MPIV_SUCCESS) {
        int *world = malloc((size_t)c->size * sizeof *world);
        if (!world) {
            id_release(id);
            rc = util_err(MPIV_ERR_NO_RESOURCES, "mpiv_comm_dup: out of memory");
        } else {
            for (int i = 0; i < c->size; i++)
                world[i] = comm_to_world(c, i);
            rc = comm_make(id, world, c->size, c->rank, newcomm);
        }
    }
    comm_leave(c);
    return rc;
}

struct split_entry {
    int color, key, rank; /* rank: in the parent */
};

static int split_cmp(const void *a, const void *b)
{
    const struct split_entry *x = a, *y = b;
    if (x->color != y->color)
        return (x->color > y->color) - (x->color < y->color);
    if (x->key != y->key)
        return (x->key > y->key) - (x->key < y->key);
    return (x->rank > y->rank) - (x->rank < y->rank);
}

int mpiv_comm_split(mpiv_comm_t comm, int color, int key, mpiv_comm_t *newcomm)
{
    struct mpiv_comm *c = comm;
    int rc_ = comm_check(c, __func__);
    if (rc_)
        return rc_;
    if (!newcomm)
        return util_err(MPIV_ERR_ARG, "mpiv_comm_split: newcomm is NULL");
    *newcomm = MPIV_COMM_NULL;
    if (color < 0 && color != MPIV_UNDEFINED)
        return util_err(MPIV_ERR_ARG, "mpiv_comm_split: color %d is negative (and not "
                        "MPIV_UNDEFINED)", color);
    int rc = comm_enter(c, __func__);
    if (rc)
        return rc;
    int P = c->size;
    struct split_entry *all = malloc((size_t)P * sizeof *all);
    int32_t mine[2] = {color, key};
    int32_t *pairs = malloc((size_t)P * sizeof mine);
    if (!all || !pairs) {
        /* the others go on into the allgather: this rank cannot take part */
        free(all);
        free(pairs);
        comm_leave(c);
        return util_err(MPIV_ERR_NO_RESOURCES, "mpiv_comm_split: out of memory for %d ranks", P);
    }
    rc = coll_allgather(c, mine, pairs, 2, MPIV_INT32);
    int id = -1;
    if (rc == MPIV_SUCCESS)
        rc = id_agree(c, color != MPIV_UNDEFINED, &id);
    if (rc == MPIV_SUCCESS && color != MPIV_UNDEFINED) {
        int n = 0;
        for (int i = 0; i < P; i++)
            if (pairs[2 * i] == color)
                all[n++] = (struct split_entry){.color = color, .key = pairs[2 * i + 1], .rank = i};
        qsort(all, (size_t)n, sizeof *all, split_cmp);
        int *world = malloc((size_t)n * sizeof *world);
        int me = -1;
        if (!world) {
            id_release(id);
            rc = util_err(MPIV_ERR_NO_RESOURCES, "mpiv_comm_split: out of memory");
        } else {
            for (int i = 0; i < n; i++) {
                world[i] = comm_to_world(c, all[i].rank);
                if (all[i].rank == c->rank)
                    me = i;
            }
            rc = comm_make(id, world, n, me, newcomm);
        }
    }
    free(all);
    free(pairs);
    comm_leave(c);
    return rc;
}

int mpiv_comm_free(mpiv_comm_t *comm)
{
    if (!comm)
        return util_err(MPIV_ERR_ARG, "mpiv_comm_free: comm is NULL");
    if (*comm == MPIV_COMM_NULL)
        return MPIV_SUCCESS;
    struct mpiv_comm *c = *comm;
    int rc_ = comm_check(c, __func__);
    if (rc_)
        return rc_;
    if (c == &mpiv_comm_world_)
        return util_err(MPIV_ERR_ARG, "mpiv_comm_free: MPIV_COMM_WORLD cannot be freed");
    /* holding the flag keeps a concurrent collective out, and makes a
     * concurrent free of the same handle fail instead of freeing twice */
    int rc = comm_enter(c, __func__);
    if (rc)
        return rc;
    atomic_store_explicit(&c->live, false, memory_order_release);
    free(c->world);
    free(c->rev);
    c->world = NULL;
    c->rev = NULL;
    int id = c->id;
    comm_leave(c);
    id_release(id);
    *comm = MPIV_COMM_NULL;
    return MPIV_SUCCESS;
}

/* --- point-to-point on a communicator ------------------------------------------ */

/* recv: the source and tag may be wildcards (MPIV_ANY_SOURCE, MPIV_ANY_TAG;
 * the context keeps an ANY_SOURCE receive to the communicator's members). */
int comm_target(struct mpiv_comm *c, bool recv, const void *buf, size_t size, int *peer, int tag,
                int *ctx, const char *fn)
{
    *ctx = 0; /* set on every path: callers read it only on success */
    int rc = comm_check(c, fn);
    if (rc)
        return rc;
    int p = *peer;
    if (util_unlikely((p < 0 || p >= c->size) && !(recv && p == MPIV_ANY_SOURCE)))
        return util_err(MPIV_ERR_RANK, "%s: rank %d is outside [0, %d) of the communicator", fn,
                        p, c->size);
    if (util_unlikely((tag < 0 || tag > MPIV_TAG_MAX) && !(recv && tag == MPIV_ANY_TAG)))
        return util_err(MPIV_ERR_TAG, "%s: tag %d is outside [0, MPIV_TAG_MAX]", fn, tag);
    if (util_unlikely(!buf && size))
        return util_err(MPIV_ERR_ARG, "%s: NULL buffer with size %zu", fn, size);
    *peer = p == MPIV_ANY_SOURCE ? p : comm_to_world(c, p);
    *ctx = (int)COMM_CTX_USER(c->id);
    return MPIV_SUCCESS;
}

/* Starts a send, synchronous send or receive on c (arguments checked and
 * translated by comm_target) in request r, with r->comm set so that its
 * status names ranks of c. */
static int comm_start(enum proto_op op, struct mpiv_comm *c, void *buf, size_t size, int w,
                      int tag, int ctx, struct mpiv_request *r)
{
    int rc = proto_start(op, buf, size, w, tag, ctx, r);
    /* only the owner reads r->comm (proto_wait), so after the start is fine */
    r->comm = comm_status_map(c);
    return rc;
}

/* mpiv_send_comm and mpiv_ssend_comm (op). */
static int comm_send(enum proto_op op, struct mpiv_comm *c, const void *buf, size_t size,
                     int dest, int tag, const char *fn)
{
    int ctx;
    int rc = comm_target(c, false, buf, size, &dest, tag, &ctx, fn);
    if (rc)
        return rc;
    struct mpiv_request r;
    rc = comm_start(op, c, (void *)buf, size, dest, tag, ctx, &r);
    return rc ? rc : proto_wait(&r, NULL);
}

int mpiv_send_comm(const void *buf, size_t size, int dest, int tag, mpiv_comm_t comm)
{
    return comm_send(PROTO_OP_SEND, comm, buf, size, dest, tag, __func__);
}

int mpiv_ssend_comm(const void *buf, size_t size, int dest, int tag, mpiv_comm_t comm)
{
    return comm_send(PROTO_OP_SSEND, comm, buf, size, dest, tag, __func__);
}

int mpiv_recv_comm(void *buf, size_t size, int source, int tag, mpiv_comm_t comm,
                   mpiv_status_t *status)
{
    int w = source, ctx;
    int rc = comm_target(comm, true, buf, size, &w, tag, &ctx, __func__);
    if (rc)
        return rc;
    struct mpiv_request r;
    rc = comm_start(PROTO_OP_RECV, comm, buf, size, w, tag, ctx, &r);
    if (rc)
        return rc;
    rc = proto_wait(&r, status);
    if (rc == MPIV_ERR_TRUNCATE)
        util_err(rc, "mpiv_recv_comm: a %zu-byte message from rank %d (tag %d) does not fit "
                 "%zu bytes", r.status.size, source, tag, size);
    return rc;
}

static int comm_start_nb(enum proto_op op, struct mpiv_comm *c, void *buf, size_t size, int peer,
                         int tag, mpiv_request_t *req, const char *fn)
{
    if (!req)
        return util_err(MPIV_ERR_ARG, "%s: req is NULL", fn);
    *req = MPIV_REQUEST_NULL;
    int ctx;
    int rc = comm_target(c, op == PROTO_OP_RECV, buf, size, &peer, tag, &ctx, fn);
    if (rc)
        return rc;
    return proto_start_new(op, buf, size, peer, tag, ctx, comm_status_map(c), req, fn);
}

int mpiv_isend_comm(const void *buf, size_t size, int dest, int tag, mpiv_comm_t comm,
                    mpiv_request_t *req)
{
    return comm_start_nb(PROTO_OP_SEND, comm, (void *)buf, size, dest, tag, req, __func__);
}

int mpiv_issend_comm(const void *buf, size_t size, int dest, int tag, mpiv_comm_t comm,
                     mpiv_request_t *req)
{
    return comm_start_nb(PROTO_OP_SSEND, comm, (void *)buf, size, dest, tag, req, __func__);
}

int mpiv_irecv_comm(void *buf, size_t size, int source, int tag, mpiv_comm_t comm,
                    mpiv_request_t *req)
{
    return comm_start_nb(PROTO_OP_RECV, comm, buf, size, source, tag, req, __func__);
}

/* Probes and sendrecv: p2p.c's bodies, shared with the world calls. The
 * communicator is only looked at once comm_target found it live. */

int mpiv_iprobe_comm(int source, int tag, mpiv_comm_t comm, int *flag, mpiv_status_t *status)
{
    int ctx = 0;
    int rc = comm_target(comm, true, NULL, 0, &source, tag, &ctx, __func__);
    return proto_iprobe_on(rc, rc ? NULL : comm_status_map(comm), source, tag, ctx, flag, status,
                           __func__);
}

int mpiv_probe_comm(int source, int tag, mpiv_comm_t comm, mpiv_status_t *status)
{
    int ctx = 0;
    int rc = comm_target(comm, true, NULL, 0, &source, tag, &ctx, __func__);
    return proto_probe_on(rc, rc ? NULL : comm_status_map(comm), source, tag, ctx, status);
}

int mpiv_improbe_comm(int source, int tag, mpiv_comm_t comm, int *flag, mpiv_message_t *msg,
                      mpiv_status_t *status)
{
    int ctx = 0;
    int rc = comm_target(comm, true, NULL, 0, &source, tag, &ctx, __func__);
    return proto_improbe_on(rc, rc ? NULL : comm_status_map(comm), source, tag, ctx, flag, msg,
                            status, __func__);
}

int mpiv_mprobe_comm(int source, int tag, mpiv_comm_t comm, mpiv_message_t *msg,
                     mpiv_status_t *status)
{
    int ctx = 0;
    int rc = comm_target(comm, true, NULL, 0, &source, tag, &ctx, __func__);
    return proto_mprobe_on(rc, rc ? NULL : comm_status_map(comm), source, tag, ctx, msg, status,
                           __func__);
}

int mpiv_sendrecv_comm(const void *sendbuf, size_t sendsize, int dest, int sendtag, void *recvbuf,
                       size_t recvsize, int source, int recvtag, mpiv_comm_t comm,
                       mpiv_status_t *status)
{
    int sctx, rctx;
    int rc = comm_target(comm, false, sendbuf, sendsize, &dest, sendtag, &sctx, __func__);
    if (rc)
        return rc;
    rc = comm_target(comm, true, recvbuf, recvsize, &source, recvtag, &rctx, __func__);
    if (rc)
        return rc;
    return proto_sendrecv_on(comm_status_map(comm), sendbuf, sendsize, dest, sendtag, sctx,
                             recvbuf, recvsize, source, recvtag, rctx, status);
}
