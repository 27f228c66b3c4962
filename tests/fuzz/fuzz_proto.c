/*
 * fuzz_proto.c — libFuzzer harness for the protocol's receive side: the
 * decode layer (src/proto/wire.c), the handlers (src/proto/p2p.c) and the
 * handle table (src/proto/handle.c), in one process with no network.
 *
 * The process is rank 0 of a 2-rank job. The harness is its network: it
 * stands in for the server (srv_send, srv_rdma_write_imm, srv_mr_get/put,
 * srv_progress) and for the scheduler's few calls (sched_signal, ...), and
 * rank 1 is whatever the input says (the language is in fuzz_ops.h). The
 * real packet pool and matching table are used as they are.
 *
 * Per input: a fresh pool, table and protocol state (rank 0 of 2, the
 * limits in fuzz_ops.h); the operations; then a drain that matches every
 * unexpected message, runs the network dry, and has rank 1 answer every
 * rendezvous still waiting for it, so that nothing should be left but
 * receives nobody matched. The handle table is made once (it is large) and
 * must be empty after each input.
 *
 * The network's model: a sent packet goes back to the pool at once (its
 * bytes travel in the harness), and an arrival needs a free pool packet,
 * like a posted receive. Packets come from rank 1 only as the input makes
 * them, and from rank 0 only as rank 0 sent them: a transport never
 * attributes foreign bytes to the local rank, so a forged packet "from
 * rank 0" is outside the model (it could legitimately hang rank 0's own
 * operations, which the drain checks for).
 *
 * Invariants checked (a violation aborts with a line saying which):
 *  - ASan: no read or write out of bounds or after free. Bytes of an
 *    arrived packet past its length (but for an RTS, whose packet carries
 *    the longer RTR back), and the whole data of every free pool packet,
 *    are poisoned, so a read past p->len or a use of a packet after it went
 *    back to the pool is caught although the pool is one block.
 *  - every request completes at most once, and never after its post
 *    returned an error; completion releases its registration;
 *  - a receive never gets more bytes than its buffer: its status size fits,
 *    the immediates accepted for it add up to at most its buffer, and a
 *    rendezvous receive completes successfully only when exactly the
 *    announced bytes landed; an immediate is accepted exactly when it names
 *    a live rendezvous receive from its source with room for its bytes;
 *  - a receive from rank 0 that succeeds holds the bytes the sender sent;
 *  - every write rank 0 posts reads only from its registered send buffer,
 *    in pieces of at most max_write; every packet it sends is a pool packet
 *    its own decode accepts (an ABORT to rank 1 may echo a handle rank 1
 *    made up, so it is exempt);
 *  - after the drain: every send completed, the table holds exactly the
 *    receives still pending, no handle is live, every registration is held
 *    by a pending receive, the unexpected count is 0, every pool packet is
 *    back, credit is within its bounds, and the eager credit rank 0 owes
 *    rank 1 is conserved: what consuming rank 1's eager messages cost is
 *    what rank 0's packets gave back plus what it still owes.
 *  - a sender waiting for a free packet with nothing in flight that could
 *    free one would wait forever: reported as a hang.
 */
#include <sanitizer/asan_interface.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ops.h"
#include "proto/proto.h"
#include "pktpool/pktcopy.h"

#define FAIL(...)                                                                  \
    do {                                                                           \
        fprintf(stderr, "fuzz_proto: invariant broken: ");                         \
        fprintf(stderr, __VA_ARGS__);                                              \
        fputc('\n', stderr);                                                       \
        abort();                                                                   \
    } while (0)

static int trace; /* FUZZ_TRACE=1: a line per completed request */

/* --- reading the input ----------------------------------------------------- */

struct input {
    const uint8_t *p;
    size_t n;
};

static uint8_t in_u8(struct input *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static uint16_t in_u16(struct input *in)
{
    uint16_t lo = in_u8(in);
    return (uint16_t)(lo | (uint16_t)in_u8(in) << 8);
}

static uint32_t in_u32(struct input *in)
{
    uint32_t lo = in_u16(in);
    return lo | (uint32_t)in_u16(in) << 16;
}

static uint64_t in_u64(struct input *in)
{
    uint64_t lo = in_u32(in);
    return lo | (uint64_t)in_u32(in) << 32;
}

static void in_bytes(struct input *in, void *dst, size_t n)
{
    size_t k = n < in->n ? n : in->n;
    memcpy(dst, in->p, k);
    memset((unsigned char *)dst + k, 0, n - k);
    in->p += k;
    in->n -= k;
}

/* --- harness state ------------------------------------------------------------ */

#define FREQ_MAGIC 0x66726571u
#define MAX_OP_REQS 128     /* requests the operations may post            */
#define MAX_REGIONS 4096
#define MAX_WRITES 4096
#define MAX_LOOPBACK 1024
#define MAX_KEYS 8192
#define HANG_SPINS 1000000  /* empty progress rounds of a waiting sender   */

/* A request the harness posted. r comes first, and r.sync first in r, so
 * sched_signal finds the request from the sync object it is given. */
struct freq {
    struct mpiv_request r;
    uint32_t magic;
    int id, kind, peer, tag, ctx;
    unsigned char *buf;
    size_t cap;
    int completions;
    bool failed;   /* its post returned an error: it must never complete */
    size_t landed; /* bytes accepted immediates said landed in buf       */
};
_Static_assert(offsetof(struct freq, r) == 0 && offsetof(struct mpiv_request, sync) == 0,
               "sched_signal maps a sync object back to its request");

/* A registration (srv_mr_get): what a NIC would check a write against. */
struct region {
    srv_mr *mr;
    uint64_t rkey, raddr;
    unsigned char *base;
    size_t len;
    bool live;
};

/* An RDMA write rank 0 posted, waiting for FOP_WRITE_DONE or the drain. */
struct write_op {
    const unsigned char *src;
    size_t len;
    int peer;
    uint64_t raddr, rkey;
    uint32_t imm;
    srv_done_fn done;
    void *ctx;
};

/* A packet rank 0 sent itself, in the network: the sender's pool packet
 * went back at once (as after a real send completes), and the arrival
 * needs a free one, as a transport's posted receive does. */
struct wire_pkt {
    uint32_t len;
    unsigned char data[FUZZ_PACKET_SIZE];
};

/* A control packet rank 0 sent (or the RTS of a send to itself). */
struct record {
    int dest;
    struct proto_hdr h;
    struct proto_rtr body;
};

struct key {
    int ctx, peer;
    uint32_t tag;
};

static struct {
    struct freq **reqs;
    int nreqs, cap_reqs, op_reqs;
    struct region regions[MAX_REGIONS];
    int nregions;
    uint64_t next_rkey;
    struct write_op writes[MAX_WRITES];
    unsigned whead, wlen;
    struct wire_pkt loop[MAX_LOOPBACK];
    unsigned lhead, llen;
    struct record recs[FUZZ_RECORDS];
    unsigned nrecs; /* made so far; the ring keeps the last FUZZ_RECORDS */
    struct key keys[MAX_KEYS];
    int nkeys;
    int fault[FF_COUNT_];
    bool dead1;      /* rank 1 was declared failed                       */
    bool self_broken; /* a send to ourselves was made to fail           */
    /* Eager credit (p2p.c, I6) rank 0 owes rank 1: what consuming rank 1's
     * eager messages cost, and what rank 0's packets to rank 1 gave back. */
    long credit_consumed, credit_returned;
    int in_progress; /* a handler runs (the progress lock is taken)      */
    long idle_spins;
    unsigned char *pool_base;
    size_t pool_len, pool_stride;
} H;

/* --- packets: poisoning free packets and bytes past a packet's length ---------- */

pkt_t *__real_pkt_get(struct pkt_pool *pool, int worker);
void __real_pkt_put(struct pkt_pool *pool, int worker, pkt_t *p);
pkt_t *__real_pkt_get_server(struct pkt_pool *pool);
void __real_pkt_put_server(struct pkt_pool *pool, pkt_t *p);

static void check_pool_packet(const pkt_t *p, const char *what)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)H.pool_base;
    if (a < b || a >= b + H.pool_len || (a - b) % H.pool_stride != 0)
        FAIL("%s: %p is not a packet of the pool", what, (const void *)p);
}

static pkt_t *got(pkt_t *p)
{
    if (p) {
        ASAN_UNPOISON_MEMORY_REGION(p->data, FUZZ_PACKET_SIZE);
        H.idle_spins = 0;
    }
    return p;
}

static void giving(pkt_t *p, const char *what)
{
    check_pool_packet(p, what);
    ASAN_POISON_MEMORY_REGION(p->data, FUZZ_PACKET_SIZE);
}

/* The link uses --wrap, so every call into the pool from the protocol and
 * from this file goes through these. */
pkt_t *__wrap_pkt_get(struct pkt_pool *pool, int worker) { return got(__real_pkt_get(pool, worker)); }
pkt_t *__wrap_pkt_get_server(struct pkt_pool *pool) { return got(__real_pkt_get_server(pool)); }

void __wrap_pkt_put(struct pkt_pool *pool, int worker, pkt_t *p)
{
    giving(p, "pkt_put");
    __real_pkt_put(pool, worker, p);
}

void __wrap_pkt_put_server(struct pkt_pool *pool, pkt_t *p)
{
    giving(p, "pkt_put_server");
    __real_pkt_put_server(pool, p);
}

/* --- requests ----------------------------------------------------------------- */

static struct freq *new_req(int kind, int peer, int tag, int ctx, size_t size)
{
    if (H.nreqs == H.cap_reqs) {
        H.cap_reqs = H.cap_reqs ? 2 * H.cap_reqs : 256;
        H.reqs = realloc(H.reqs, (size_t)H.cap_reqs * sizeof *H.reqs);
        if (!H.reqs)
            abort();
    }
    struct freq *f = calloc(1, sizeof *f);
    if (!f || !(f->buf = malloc(size))) /* exact: ASan sees a byte past it */
        abort();
    f->magic = FREQ_MAGIC;
    f->id = H.nreqs;
    f->kind = kind;
    f->peer = peer;
    f->tag = tag;
    f->ctx = ctx;
    f->cap = size;
    H.reqs[H.nreqs++] = f;
    return f;
}

/* What a completed request must satisfy (called from sched_signal, when the
 * protocol completes it). */
static void check_completion(struct freq *f)
{
    struct mpiv_request *r = &f->r;
    if (r->mr)
        FAIL("request %d completed with its registration still held", f->id);
    if (f->kind != PROTO_REQ_RECV || r->status.error != MPIV_SUCCESS)
        return;
    if (r->status.source != f->peer || r->status.tag != f->tag)
        FAIL("receive %d for (%d, %d) completed from (%d, %d)", f->id, f->peer, f->tag,
             r->status.source, r->status.tag);
    if (r->status.size > f->cap)
        FAIL("receive %d completed with %zu bytes in a %zu-byte buffer", f->id,
             r->status.size, f->cap);
    if (r->handle ? f->landed != r->status.size : f->landed != 0)
        FAIL("receive %d completed with %zu of %zu bytes landed", f->id, f->landed,
             r->status.size);
    if (f->peer == 0)
        for (size_t i = 0; i < r->status.size; i++)
            if (f->buf[i] != fuzz_pattern((unsigned)f->ctx, (unsigned)f->tag, i))
                FAIL("receive %d from rank 0: byte %zu of %zu is wrong", f->id, i,
                     r->status.size);
}

/* --- the scheduler, as the protocol sees it -------------------------------------- */

void sched_signal(sched_sync *s)
{
    struct freq *f = (struct freq *)(void *)s;
    if (f->magic != FREQ_MAGIC)
        FAIL("sched_signal on %p, which is no request", (void *)s);
    uintptr_t was = atomic_exchange(&s->state, 1);
    if (was != 0 || f->completions++ > 0)
        FAIL("request %d completed twice", f->id);
    if (f->failed)
        FAIL("request %d completed after its post failed", f->id);
    if (trace)
        fprintf(stderr, "fuzz_proto: %s %d (rank %d, tag %d, ctx %d) completed: %s, %zu bytes\n",
                f->kind == PROTO_REQ_SEND ? "send" : "receive", f->id, f->peer, f->tag, f->ctx,
                mpiv_strerror(f->r.status.error), f->r.status.size);
    check_completion(f);
}

void sched_wait(sched_sync *s)
{
    (void)s;
    FAIL("sched_wait called: the harness never waits");
}

/* The harness never calls mpiv_ult_spawn_recv: ULTs are the scheduler's. */
struct mpiv_ult *sched_ult_new(mpiv_ult_fn fn, void *arg, int worker, mpiv_ult_t *ult, int *err,
                               const char *who)
{
    (void)fn, (void)arg, (void)worker, (void)ult, (void)err, (void)who;
    FAIL("sched_ult_new called: the harness spawns no ULT");
    return NULL;
}
void sched_ult_start(struct mpiv_ult *u)
{
    (void)u;
    FAIL("sched_ult_start called: the harness spawns no ULT");
}
void sched_ult_start_on(struct mpiv_ult *u, sched_sync *s)
{
    (void)u, (void)s;
    FAIL("sched_ult_start_on called: the harness spawns no ULT");
}
bool sched_in_ult(void) { return false; }
bool sched_ult_alone(void) { return false; }
int sched_worker_id(void) { return -1; }
void sched_yield_now(void) {}
bool sched_net_waiter_begin(void)
{
    FAIL("sched_net_waiter_begin called: the harness never waits");
    return false;
}
void sched_net_waiter_end(void) {}
bool sched_wait_pthread_for(sched_sync *s, uint64_t ns, bool spin)
{
    (void)s;
    (void)ns;
    (void)spin;
    FAIL("sched_wait_pthread_for called: the harness never waits");
    return false;
}

/* --- registrations -------------------------------------------------------------- */

static struct region *region_of_mr(const srv_mr *mr)
{
    for (int i = 0; i < H.nregions; i++)
        if (H.regions[i].mr == mr && H.regions[i].live)
            return &H.regions[i];
    return NULL;
}

int srv_mr_get(void *buf, size_t len, srv_mr **mr)
{
    if (!buf || !len)
        FAIL("srv_mr_get(%p, %zu): nothing to register", buf, len);
    if (H.fault[FF_MR] > 0) {
        H.fault[FF_MR]--;
        return util_err(MPIV_ERR_NO_RESOURCES, "fuzz: registration made to fail");
    }
    if (H.nregions == MAX_REGIONS)
        FAIL("more than %d registrations in one input", MAX_REGIONS);
    struct region *g = &H.regions[H.nregions++];
    g->mr = calloc(1, sizeof *g->mr);
    if (!g->mr)
        abort();
    g->rkey = ++H.next_rkey;
    /* Remote addresses live in a space of their own, so that mixing one up
     * with a local pointer shows. */
    g->raddr = 0x100000000000ull + (g->rkey << 20);
    g->base = buf;
    g->len = len;
    g->live = true;
    g->mr->rkey = g->rkey;
    g->mr->raddr = g->raddr;
    g->mr->base = (uintptr_t)buf;
    *mr = g->mr;
    return MPIV_SUCCESS;
}

void srv_mr_put(srv_mr *mr)
{
    struct region *g = region_of_mr(mr);
    if (!g)
        FAIL("srv_mr_put of %p, which is not a live registration", (void *)mr);
    g->live = false;
    free(g->mr); /* a later use of it is an ASan report */
    g->mr = NULL;
}

/* Where a write of len bytes at raddr with key rkey lands, or NULL where a
 * NIC would refuse it (no such live region, or not inside it). */
static unsigned char *nic_target(uint64_t rkey, uint64_t raddr, size_t len)
{
    for (int i = 0; i < H.nregions; i++) {
        struct region *g = &H.regions[i];
        if (!g->live || g->rkey != rkey)
            continue;
        if (raddr < g->raddr || raddr - g->raddr > g->len || len > g->len - (raddr - g->raddr))
            return NULL;
        return g->base + (raddr - g->raddr);
    }
    return NULL;
}

/* --- the network ------------------------------------------------------------------ */

static void record(int dest, const pkt_t *p)
{
    struct record *rc = &H.recs[H.nrecs++ % FUZZ_RECORDS];
    memset(rc, 0, sizeof *rc);
    rc->dest = dest;
    memcpy(&rc->h, p->data, sizeof rc->h);
    if (p->len >= sizeof rc->h + sizeof rc->body)
        memcpy(&rc->body, p->data + sizeof rc->h, sizeof rc->body);
}

static void add_key(int ctx, int peer, uint32_t tag)
{
    for (int i = 0; i < H.nkeys; i++)
        if (H.keys[i].ctx == ctx && H.keys[i].peer == peer && H.keys[i].tag == tag)
            return;
    if (H.nkeys == MAX_KEYS)
        FAIL("more than %d keys in one input", MAX_KEYS);
    H.keys[H.nkeys++] = (struct key){ctx, peer, tag};
}

int srv_send(pkt_t *p, int peer)
{
    check_pool_packet(p, "srv_send");
    if (peer != 0 && peer != 1)
        FAIL("srv_send to rank %d of 2", peer);
    if (p->len < sizeof(struct proto_hdr) || p->len > FUZZ_PACKET_SIZE)
        FAIL("srv_send of a %u-byte packet", p->len);
    const struct proto_hdr *h = (const struct proto_hdr *)p->data;
    if (proto_decode(p, 0) < 0 && !(peer == 1 && h->type == PROTO_ABORT))
        FAIL("rank 0 sent rank %d a packet (type %u, %u bytes) its own decode refuses", peer,
             h->type, p->len);
    /* Credit in a packet that then fails to go is lost with it: a broken
     * link to the peer, not a leak. */
    if (peer == 1)
        H.credit_returned += h->credit;
    if (H.fault[FF_SEND] > 0) {
        H.fault[FF_SEND]--;
        H.self_broken |= peer == 0;
        pkt_put_server(proto.pool, p);
        return util_err(MPIV_ERR_NET, "fuzz: send made to fail");
    }
    if (peer == 1 && H.dead1) {
        pkt_put_server(proto.pool, p);
        return util_err(MPIV_ERR_PEER, "fuzz: rank 1 is gone");
    }
    if (h->type != PROTO_EAGER)
        record(peer, p);
    if (peer == 0) {
        if (H.llen == MAX_LOOPBACK)
            FAIL("more than %d loopback packets in flight", MAX_LOOPBACK);
        struct wire_pkt *w = &H.loop[(H.lhead + H.llen++) % MAX_LOOPBACK];
        w->len = p->len;
        memcpy(w->data, p->data, p->len);
    }
    pkt_put_server(proto.pool, p);
    return MPIV_SUCCESS;
}

int srv_rdma_write_imm(const void *buf, size_t len, srv_mr *lmr, int peer, uint64_t raddr,
                       uint64_t rkey, uint32_t imm, srv_done_fn done, void *ctx)
{
    if (peer != 0 && peer != 1)
        FAIL("RDMA write to rank %d of 2", peer);
    if (len > proto.max_write)
        FAIL("RDMA write of %zu bytes, above max_write %zu", len, proto.max_write);
    if (len) {
        struct region *g = lmr ? region_of_mr(lmr) : NULL;
        const unsigned char *b = buf;
        if (!g || b < g->base || (size_t)(b - g->base) > g->len ||
            len > g->len - (size_t)(b - g->base))
            FAIL("RDMA write of %zu bytes from %p outside its registered buffer", len, buf);
        /* a NIC reads the bytes: let ASan see them read */
        volatile unsigned char sum = 0;
        for (size_t i = 0; i < len; i++)
            sum = (unsigned char)(sum + b[i]);
        (void)sum;
    }
    if (peer == 1 && H.dead1)
        return util_err(MPIV_ERR_PEER, "fuzz: rank 1 is gone");
    if (H.fault[FF_WRITE] > 0) {
        H.fault[FF_WRITE]--;
        return util_err(MPIV_ERR_NET, "fuzz: write made to fail");
    }
    if (H.wlen == MAX_WRITES)
        FAIL("more than %d writes in flight", MAX_WRITES);
    H.writes[(H.whead + H.wlen++) % MAX_WRITES] =
        (struct write_op){buf, len, peer, raddr, rkey, imm, done, ctx};
    return MPIV_SUCCESS;
}

bool srv_peer_alive(int peer) { return !(peer == 1 && H.dead1); }
_Atomic int srv_failed_peers_; /* as the server counts them: set with dead1 */

/* No transport here copies in place: every message is a packet. */
size_t srv_inline_max(int peer)
{
    (void)peer;
    return 0;
}

int srv_send_inline(int peer, const void *hdr, size_t hlen, const void *payload, size_t len)
{
    (void)peer, (void)hdr, (void)hlen, (void)payload, (void)len;
    return SRV_INLINE_LATER;
}

int srv_send_copy(int peer, const void *hdr, size_t hlen, const void *payload, size_t len)
{
    (void)peer, (void)hdr, (void)hlen, (void)payload, (void)len;
    return SRV_INLINE_LATER;
}

int srv_send_ref(int peer, const void *hdr, size_t hlen, const void *payload, size_t len,
                 srv_done_fn done, void *ctx)
{
    (void)peer, (void)hdr, (void)hlen, (void)payload, (void)len, (void)done, (void)ctx;
    return SRV_INLINE_LATER;
}

/* Reads: rank 0 never offers one (this network cannot read), but rank 1's
 * RTS may; the outcome of reading it comes from its raddr's low bits, so
 * the input picks it: refused (the RTR path), done, failed, peer gone. */
bool srv_can_read(int peer)
{
    (void)peer;
    return false;
}

int srv_rdma_read(void *buf, size_t len, int peer, uint64_t raddr, uint64_t rkey)
{
    (void)rkey;
    if (peer != 1)
        FAIL("a read from rank %d, which offered none", peer);
    switch (raddr & 3) {
    case 0:
        return SRV_NO_READ;
    case 1:
        memset(buf, 0xab, len); /* ASan checks every byte lies in the buffer */
        return MPIV_SUCCESS;
    case 2:
        return util_err(MPIV_ERR_NET, "fuzz: read made to fail");
    default:
        return util_err(MPIV_ERR_PEER, "fuzz: rank 1 is gone for the read");
    }
}

static uint64_t imm_drops(void)
{
    struct proto_stats st;
    proto_get_stats(&st);
    return st.dropped[PROTO_DROP_IMM];
}

static uint64_t all_drops(void)
{
    struct proto_stats st;
    proto_get_stats(&st);
    uint64_t n = 0;
    for (int i = 0; i < PROTO_DROP_MAX_; i++)
        n += st.dropped[i];
    return n;
}

/* An immediate from src arrives. The harness predicts from what it knows
 * (its own requests, the handle table's answer for imm) whether the
 * protocol must take it, and checks that it did exactly that. */
static void deliver_imm(uint32_t imm, int src, size_t len, int err)
{
    uint64_t hnd = proto_handle_from_imm(imm);
    struct freq *f = hnd ? (struct freq *)(void *)proto_handle_peek(hnd) : NULL;
    bool take = f && f->kind == PROTO_REQ_RECV && f->peer == src &&
                (err || (f->landed <= f->r.status.size && len <= f->r.status.size - f->landed));
    if (take && !err) {
        f->landed += len;
        if (f->landed > f->cap)
            FAIL("receive %d: %zu bytes landed in a %zu-byte buffer", f->id, f->landed, f->cap);
    }
    uint64_t before = imm_drops();
    H.in_progress++;
    proto_on_imm(imm, src, len, err);
    H.in_progress--;
    bool taken = imm_drops() == before;
    if (taken != take)
        FAIL("an immediate (0x%x, %zu bytes, err %d) from rank %d was %s", imm, len, err, src,
             taken ? "taken, naming no receive with room for it" : "dropped, naming a live receive");
}

/* A packet from rank 1 with these bytes, as the transport hands it over. */
static bool deliver_from_peer(const unsigned char *bytes, size_t len)
{
    if (H.dead1)
        return false; /* the transport delivers nothing from a failed peer */
    pkt_t *p = pkt_get_server(proto.pool);
    if (!p)
        return false; /* no receive posted: it stays in the network */
    memcpy(p->data, bytes, len);
    p->len = (uint32_t)len;
    p->peer = 1;
    /* Nothing may read past the length. Writing there is fine where the
     * protocol reuses the packet for its answer: the RTR goes into the RTS
     * it answers, and is longer. So the tail is poisoned except for RTS. */
    if (len == 0 || bytes[0] != PROTO_RTS)
        ASAN_POISON_MEMORY_REGION(p->data + len, FUZZ_PACKET_SIZE - len);
    struct proto_hdr h;
    memset(&h, 0, sizeof h);
    if (len >= sizeof h) {
        memcpy(&h, bytes, sizeof h);
        if ((h.type == PROTO_EAGER || h.type == PROTO_RTS) && h.ctx < PROTO_CTX_COUNT &&
            h.src == 1 && h.tag <= (uint32_t)MPIV_TAG_MAX)
            add_key(h.ctx, 1, h.tag);
    }
    uint64_t before = all_drops();
    H.in_progress++;
    proto_on_packet(p);
    H.in_progress--;
    /* An accepted EAGER is consumed by the time the drain is over, and
     * costs its payload, its header and a packet header (p2p.c's
     * credit_cost), owed back to rank 1; one no larger than an RTS body
     * costs nothing. */
    if (h.type == PROTO_EAGER && all_drops() == before && h.size > sizeof(struct proto_rts))
        H.credit_consumed += (long)(h.size + sizeof h + 64);
    return true;
}

/* The oldest packet rank 0 sent itself arrives; false if no packet is free
 * to receive it into (it stays in the network). */
static bool deliver_loopback(void)
{
    pkt_t *p = pkt_get_server(proto.pool);
    if (!p)
        return false;
    struct wire_pkt *w = &H.loop[H.lhead];
    H.lhead = (H.lhead + 1) % MAX_LOOPBACK;
    H.llen--;
    memcpy(p->data, w->data, w->len);
    p->len = w->len;
    p->peer = 0;
    if (w->data[0] != PROTO_RTS) /* as in deliver_from_peer */
        ASAN_POISON_MEMORY_REGION(p->data + w->len, FUZZ_PACKET_SIZE - w->len);
    H.in_progress++;
    proto_on_packet(p);
    H.in_progress--;
    return true;
}

static void complete_write(unsigned flags)
{
    struct write_op w = H.writes[H.whead];
    H.whead = (H.whead + 1) % MAX_WRITES;
    H.wlen--;
    H.in_progress++;
    if (w.peer == 1) {
        w.done(w.ctx, H.dead1 ? MPIV_ERR_PEER : (flags & WD_FAIL) ? MPIV_ERR_NET : MPIV_SUCCESS);
    } else {
        unsigned char *dst = (flags & WD_FAIL) ? NULL : nic_target(w.rkey, w.raddr, w.len);
        bool ok = dst != NULL;
        if (ok)
            memcpy(dst, w.src, w.len);
        if (flags & WD_DONE_FIRST)
            w.done(w.ctx, ok ? MPIV_SUCCESS : MPIV_ERR_NET);
        if (ok)
            deliver_imm(w.imm, 0, w.len, MPIV_SUCCESS);
        else if (flags & WD_FAIL_IMM)
            deliver_imm(w.imm, 0, 0, MPIV_ERR_NET);
        if (!(flags & WD_DONE_FIRST))
            w.done(w.ctx, ok ? MPIV_SUCCESS : MPIV_ERR_NET);
    }
    H.in_progress--;
}

/* One step of the network, oldest first; false when nothing is in flight. */
static bool pump_one(void)
{
    if (H.llen && deliver_loopback())
        return true;
    if (H.wlen) {
        complete_write(0);
        return true;
    }
    return false;
}

/* As with a server thread: a waiting pthread polls a while, then blocks. */
bool srv_inline(void) { return false; }

int srv_progress(void)
{
    /* Only a sender waiting for a free packet calls this here. Nested in a
     * handler it gets nothing, as with the real server's trylock. */
    if (!H.in_progress && pump_one()) {
        H.idle_spins = 0;
        return 1;
    }
    if (++H.idle_spins > HANG_SPINS)
        FAIL("a sender waits for a free packet and nothing in flight can free one "
             "(%ld unexpected, %u loopback, %u writes)",
             (long)atomic_load(&proto.unexpected), H.llen, H.wlen);
    return 0;
}

/* --- operations ------------------------------------------------------------------- */

/* The transport declares `rank` failed. proto_on_peer_failed scans the
 * whole handle table (a million slots: more than the rest of an input
 * costs), so it is skipped when it has nothing to find: no live handle and
 * no pending receive from that rank. */
static void peer_failed(int rank)
{
    bool any = false;
    for (int i = 0; i < H.nreqs && !any; i++) {
        struct freq *f = H.reqs[i];
        any = (f->r.handle && proto_handle_peek(f->r.handle) == &f->r) ||
              (f->kind == PROTO_REQ_RECV && f->peer == rank && !f->completions && !f->failed);
    }
    if (!any)
        return;
    H.in_progress++;
    proto_on_peer_failed(rank);
    H.in_progress--;
}

static const struct record *pick_record(uint8_t sel)
{
    unsigned n = H.nrecs < FUZZ_RECORDS ? H.nrecs : FUZZ_RECORDS;
    return n ? &H.recs[sel % n] : NULL;
}

static void op_craft(struct input *in)
{
    struct proto_hdr h;
    memset(&h, 0, sizeof h);
    h.type = in_u8(in);
    h.ctx = in_u8(in);
    h.status = in_u16(in);
    uint8_t flags = in_u8(in);
    const struct record *rec = pick_record(in_u8(in));
    h.tag = (flags & FC_RAW_TAG) ? in_u32(in) : in_u8(in) % FUZZ_TAGS;
    h.size = (flags & FC_BIG_SIZE) ? in_u64(in) : in_u16(in);
    if (flags & FC_REF) {
        if (rec) {
            bool rtr_ok = rec->h.type == PROTO_RTR && rec->h.status == PROTO_RTR_OK;
            h.handle = rtr_ok ? rec->body.rhandle : rec->h.handle;
            if (flags & FC_ECHO) {
                h.ctx = rec->h.ctx;
                h.tag = rec->h.tag;
                h.size = rec->h.size;
            }
        }
    } else {
        h.handle = in_u64(in);
    }
    h.credit = in_u32(in);
    h.src = (flags & FC_WRONG_SRC) ? 0 : 1;
    unsigned char pkt[FUZZ_PACKET_SIZE];
    memcpy(pkt, &h, sizeof h);
    size_t len = sizeof h;
    if (h.type == PROTO_RTR && h.status == PROTO_RTR_OK) {
        struct proto_rtr b;
        b.raddr = in_u64(in);
        b.rkey = in_u64(in);
        b.rhandle = in_u32(in);
        b.pad = 0;
        memcpy(pkt + len, &b, sizeof b);
        len += sizeof b;
    } else if (h.type == PROTO_EAGER) {
        size_t n = h.size < FUZZ_PACKET_SIZE - len ? (size_t)h.size : FUZZ_PACKET_SIZE - len;
        in_bytes(in, pkt + len, n);
        len += n;
    }
    if (flags & FC_LEN_DELTA) {
        long l = (long)len + (int8_t)in_u8(in);
        len = l < 0 ? 0 : l > FUZZ_PACKET_SIZE ? FUZZ_PACKET_SIZE : (size_t)l;
    }
    deliver_from_peer(pkt, len);
}

static void op_write(struct input *in)
{
    uint8_t sel = in_u8(in);
    size_t off = in_u16(in) % (FUZZ_MAX_MSG + 1);
    size_t len = in_u16(in) % (FUZZ_MAX_MSG + 1);
    uint8_t flags = in_u8(in);
    uint32_t raw = (flags & FW_RAW_IMM) ? in_u32(in) : 0;
    /* the sel-th RTR (OK) that rank 0 sent rank 1 among those recorded */
    const struct record *rtrs[FUZZ_RECORDS];
    unsigned n = 0;
    for (unsigned i = 0; i < FUZZ_RECORDS && i < H.nrecs; i++)
        if (H.recs[i].dest == 1 && H.recs[i].h.type == PROTO_RTR &&
            H.recs[i].h.status == PROTO_RTR_OK)
            rtrs[n++] = &H.recs[i];
    if (!n || H.dead1)
        return;
    const struct record *rc = rtrs[sel % n];
    uint32_t imm = (flags & FW_RAW_IMM) ? raw : rc->body.rhandle;
    if (flags & FW_ERR) {
        deliver_imm(imm, 1, 0, MPIV_ERR_NET);
        return;
    }
    unsigned char *dst = nic_target(rc->body.rkey, rc->body.raddr + off, len);
    if (!dst)
        return; /* refused by the NIC: nothing lands, no immediate */
    memset(dst, 0xa5, len);
    deliver_imm(imm, 1, len, MPIV_SUCCESS);
}

static void op_recv(struct input *in, bool drain, int peer, int tag, int ctx, size_t size)
{
    if (!drain) {
        peer = in_u8(in) % 2;
        tag = in_u8(in) % FUZZ_TAGS;
        ctx = in_u8(in) % 2;
        size = in_u16(in) % FUZZ_MAX_MSG;
        if (H.op_reqs++ >= MAX_OP_REQS)
            return;
    }
    struct freq *f = new_req(PROTO_REQ_RECV, peer, tag, ctx, size);
    memset(f->buf, 0, size);
    int rc = proto_irecv(f->buf, size, peer, tag, ctx, &f->r);
    if (rc == MPIV_SUCCESS)
        return;
    if (rc != MPIV_ERR_PEER || !H.dead1 || peer != 1)
        FAIL("proto_irecv from rank %d failed: %s", peer, mpiv_error_detail());
    if (f->completions || f->r.mr)
        FAIL("receive %d failed to post, yet completed or kept its registration", f->id);
    f->failed = true; /* nothing more comes from a failed rank */
}

static void op_send(struct input *in)
{
    int peer = in_u8(in) % 2;
    int tag = in_u8(in) % FUZZ_TAGS;
    int ctx = in_u8(in) % 2;
    size_t size = in_u16(in) % FUZZ_MAX_MSG;
    if (H.op_reqs++ >= MAX_OP_REQS)
        return;
    struct freq *f = new_req(PROTO_REQ_SEND, peer, tag, ctx, size);
    for (size_t i = 0; i < size; i++)
        f->buf[i] = fuzz_pattern((unsigned)ctx, (unsigned)tag, i);
    if (peer == 0)
        add_key(ctx, 0, (uint32_t)tag);
    int rc = proto_isend(f->buf, size, peer, tag, ctx, &f->r);
    if (rc != MPIV_SUCCESS) {
        if (f->completions || sched_sync_signalled(&f->r.sync))
            FAIL("send %d completed and its post failed (%s)", f->id, mpiv_strerror(rc));
        f->failed = true;
        return;
    }
    if (!f->completions && sched_sync_signalled(&f->r.sync)) {
        /* completed before proto_isend returned, without sched_signal (an
         * eager send nobody could see yet): the same checks; a later
         * signal of it still fails as a second completion */
        f->completions++;
        check_completion(f);
    }
    if (peer == 0 && f->r.handle && !f->completions) {
        /* an RTS to ourselves skips srv_send: record it for FOP_CRAFT */
        struct record *rc2 = &H.recs[H.nrecs++ % FUZZ_RECORDS];
        memset(rc2, 0, sizeof *rc2);
        rc2->dest = 0;
        rc2->h.type = PROTO_RTS;
        rc2->h.ctx = (uint8_t)ctx;
        rc2->h.tag = (uint32_t)tag;
        rc2->h.size = size;
        rc2->h.handle = f->r.handle;
    }
}

static void run(struct input *in)
{
    while (in->n) {
        switch ((enum fuzz_op)(in_u8(in) % FOP_COUNT_)) {
        case FOP_PACKET: {
            size_t len = in_u16(in) % (FUZZ_PACKET_SIZE + 1);
            unsigned char pkt[FUZZ_PACKET_SIZE];
            in_bytes(in, pkt, len);
            deliver_from_peer(pkt, len);
            break;
        }
        case FOP_CRAFT:
            op_craft(in);
            break;
        case FOP_IMM: {
            uint32_t imm = in_u32(in);
            size_t len = in_u32(in);
            uint8_t e = in_u8(in);
            int err = e ? 1 + e % (MPIV_ERR_LAST_ - 1) : MPIV_SUCCESS;
            if (!H.dead1)
                deliver_imm(imm, 1, len, err);
            break;
        }
        case FOP_WRITE:
            op_write(in);
            break;
        case FOP_RECV:
            op_recv(in, false, 0, 0, 0, 0);
            break;
        case FOP_SEND:
            op_send(in);
            break;
        case FOP_LOOPBACK:
            if (H.llen)
                (void)deliver_loopback();
            break;
        case FOP_WRITE_DONE: {
            uint8_t flags = in_u8(in);
            if (H.wlen)
                complete_write(flags);
            break;
        }
        case FOP_FAULT: {
            int what = in_u8(in) % FF_COUNT_;
            H.fault[what] += in_u8(in) % 4 + 1;
            break;
        }
        case FOP_PEER_FAILED:
            if (!H.dead1) {
                H.dead1 = true;
                atomic_store(&srv_failed_peers_, 1);
                peer_failed(1);
            }
            break;
        case FOP_COUNT_:
            break;
        }
    }
}

/* --- drain and final checks ----------------------------------------------------------- */

static void pump_all(void)
{
    while (pump_one())
        ;
}

static void drain_and_check(void)
{
    memset(H.fault, 0, sizeof H.fault);
    /* Empty receives match whatever is unexpected (truncating it), key by
     * key, until one stays posted. Unexpected messages come only from
     * arrivals and sends to ourselves, which have stopped. */
    for (int k = 0; k < H.nkeys; k++) {
        for (;;) {
            op_recv(NULL, true, H.keys[k].peer, (int)H.keys[k].tag, H.keys[k].ctx, 0);
            if (!H.reqs[H.nreqs - 1]->completions)
                break;
        }
    }
    pump_all();
    /* Rank 1 answers what still waits for it, the way a well-behaved peer
     * ends a rendezvous it will not carry out: an RTR "nothing to write"
     * for our RTS, an ABORT for our RTR. (proto_on_peer_failed would do it
     * too, but it scans the whole handle table, which costs more than the
     * rest of an input; FOP_PEER_FAILED exercises it.) */
    for (int i = 0; i < H.nreqs && !H.dead1; i++) {
        struct freq *f = H.reqs[i];
        if (f->peer != 1 || f->completions || f->failed || !f->r.handle ||
            proto_handle_peek(f->r.handle) != &f->r)
            continue;
        struct proto_hdr h;
        memset(&h, 0, sizeof h);
        h.src = 1;
        if (f->kind == PROTO_REQ_SEND) {
            h.type = PROTO_RTR;
            h.status = PROTO_RTR_NONE;
            h.ctx = (uint8_t)f->ctx;
            h.tag = (uint32_t)f->tag;
            h.size = f->cap;
            h.handle = f->r.handle;
        } else {
            h.type = PROTO_ABORT;
            h.status = MPIV_ERR_NET;
            h.handle = proto_handle_imm(f->r.handle);
        }
        unsigned char pkt[sizeof h];
        memcpy(pkt, &h, sizeof h);
        if (!deliver_from_peer(pkt, sizeof pkt))
            FAIL("no free packet for rank 1's answer in the drain");
        pump_all();
    }
    /* A send to ourselves made to fail leaves a rendezvous with no answer
     * (p2p.c: the transport then declares the peer failed). */
    if (H.self_broken) {
        peer_failed(0);
        pump_all();
    }

    int pending_recvs = 0, pending_with_mr = 0;
    for (int i = 0; i < H.nreqs; i++) {
        struct freq *f = H.reqs[i];
        if (f->failed || f->completions)
            continue;
        if (f->kind == PROTO_REQ_SEND)
            FAIL("send %d (%zu bytes to rank %d, tag %d) never completed", f->id, f->cap,
                 f->peer, f->tag);
        pending_recvs++;
        pending_with_mr += f->r.mr != NULL;
    }
    size_t in_table = ht_count(proto.ht);
    if (in_table != (size_t)pending_recvs)
        FAIL("the table holds %zu values, %d pending receives", in_table, pending_recvs);
    /* Every handle is made for one of our requests and written into it
     * (proto_handle_make); none may still name it. (Scanning the whole
     * table with proto_handle_take_if would cost more than the input.) */
    for (int i = 0; i < H.nreqs; i++)
        if (H.reqs[i]->r.handle && proto_handle_peek(H.reqs[i]->r.handle))
            FAIL("request %d's handle is still live after the drain", H.reqs[i]->id);
    int regions = 0;
    for (int i = 0; i < H.nregions; i++)
        regions += H.regions[i].live;
    if (regions != pending_with_mr)
        FAIL("%d registrations live, %d held by pending receives", regions, pending_with_mr);
    long unexpected = atomic_load(&proto.unexpected);
    if (unexpected != 0)
        FAIL("unexpected count is %ld with nothing unexpected", unexpected);
    /* heap copies of early messages (p2p.c, I5) all given back */
    size_t copies = pkt_copy_held();
    if (copies != 0)
        FAIL("%zu heap copies still held after the drain", copies);
    size_t free_pkts = 0;
    pkt_t *held[FUZZ_PACKETS];
    pkt_t *p;
    while (free_pkts < FUZZ_PACKETS && (p = pkt_get_server(proto.pool)))
        held[free_pkts++] = p;
    if (free_pkts != FUZZ_PACKETS)
        FAIL("%zu of %d packets back in the pool", free_pkts, FUZZ_PACKETS);
    for (size_t i = 0; i < free_pkts; i++)
        pkt_put_server(proto.pool, held[i]);
    for (int r = 0; r < proto.size; r++) {
        long c = atomic_load(&proto.credit[r]), o = atomic_load(&proto.owed[r]);
        if (c < 0 || c > proto.credit_max || o < 0)
            FAIL("rank %d: credit %ld (max %ld), owed %ld", r, c, proto.credit_max, o);
    }
    long owed = atomic_load(&proto.owed[1]);
    if (H.credit_consumed != H.credit_returned + owed)
        FAIL("eager credit owed to rank 1 went missing: %ld consumed, %ld given back, "
             "%ld still owed",
             H.credit_consumed, H.credit_returned, owed);
}

/* --- per input ------------------------------------------------------------------------ */

static void setup(void)
{
    H.nreqs = H.op_reqs = H.nregions = H.nkeys = 0;
    H.whead = H.wlen = H.lhead = H.llen = H.nrecs = 0;
    memset(H.fault, 0, sizeof H.fault);
    H.dead1 = H.self_broken = false;
    atomic_store(&srv_failed_peers_, 0);
    H.credit_consumed = H.credit_returned = 0;
    H.in_progress = 0;
    H.idle_spins = 0;
    if (pkt_pool_create(&proto.pool, FUZZ_PACKETS, FUZZ_PACKET_SIZE, 1) != MPIV_SUCCESS ||
        ht_create(&proto.ht, 64) != MPIV_SUCCESS)
        FAIL("cannot create the pool or the table: %s", mpiv_error_detail());
    void *base;
    pkt_pool_region(proto.pool, &base, &H.pool_len);
    H.pool_base = base;
    H.pool_stride = pkt_stride(proto.pool);
    for (size_t i = 0; i < FUZZ_PACKETS; i++)
        ASAN_POISON_MEMORY_REGION(pkt_by_index(proto.pool, (uint32_t)i)->data, FUZZ_PACKET_SIZE);
    proto.rank = 0;
    proto.size = 2;
    proto.eager_limit = FUZZ_EAGER_LIMIT;
    proto.max_write = FUZZ_MAX_WRITE;
    proto.unexpected_max = (FUZZ_PACKETS - FUZZ_RECV_DEPTH) / 2;
    proto.credit_max = FUZZ_CREDIT_MAX;
    atomic_store(&proto.unexpected, 0);
    if (proto_p2p_init() != MPIV_SUCCESS)
        FAIL("proto_p2p_init: %s", mpiv_error_detail());
    proto.initialized = 1;
}

static void teardown(void)
{
    proto.initialized = 0;
    proto_p2p_fini();
    ht_destroy(proto.ht);
    ASAN_UNPOISON_MEMORY_REGION(H.pool_base, H.pool_len);
    pkt_pool_destroy(proto.pool);
    proto.ht = NULL;
    proto.pool = NULL;
    for (int i = 0; i < H.nregions; i++)
        free(H.regions[i].mr);
    for (int i = 0; i < H.nreqs; i++) {
        free(H.reqs[i]->buf);
        free(H.reqs[i]);
    }
    H.nreqs = 0;
}

/* Inputs are independent and free everything they made: a quarantine of
 * freed memory well above one input's still catches every use after free
 * within an input, without the default 256 MB of resident memory. The
 * environment's ASAN_OPTIONS still override this. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "quarantine_size_mb=16"; }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* Quiet unless asked (MPIV_LOG=4 shows every drop and failure): the
     * log lines cost a write each and the fuzzer makes millions. */
    const char *lvl = getenv("MPIV_LOG");
    util_log_level = lvl ? atoi(lvl) : UTIL_LOG_NONE;
    trace = getenv("FUZZ_TRACE") != NULL;
    if (proto_handle_init() != MPIV_SUCCESS)
        FAIL("proto_handle_init: %s", mpiv_error_detail());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, size};
    setup();
    run(&in);
    drain_and_check();
    teardown();
    return 0;
}
