/*
 * match.c — the ordered matching path: receives with MPIV_ANY_SOURCE or
 * MPIV_ANY_TAG, probes and matched probes.
 *
 * The exact path (p2p.c) is one table operation per side: a receive and a
 * message meet under one (context, source, tag) key, first-in first-out
 * per key. A wildcard receive has no key. It waits here instead, in one
 * list in post order, and while any waits the table's gate is open
 * (hashtbl.h): arrivals, and exact receives that would queue, are handed
 * back to this file (HT_DEFER), which decides under one lock in MPI's
 * order. With no wildcard pending the exact path pays one load of the
 * gate and an arrival stamp per message that may wait.
 *
 * MPI's order, kept here:
 *  - a receive takes the earliest-arrived waiting message it fits;
 *  - an arriving message goes to the earliest-posted pending receive it
 *    fits, exact or wildcard.
 * Arrival order is the stamp (M4); post order is the post number (M3).
 *
 * Invariants:
 *  M1 The gate's count is the number of requests in the list plus the
 *     posts and probes that are looking at the table under wc.lock (each
 *     opens it before it looks and closes it if it does not stay).
 *  M2 No message waiting in the table fits a pending receive. An exact
 *     receive and a message of one key never both wait (the table, I3).
 *     A wildcard receive joins the list only after a walk of the table,
 *     under wc.lock with the gate open, found no message it fits; every
 *     arrival that locks a stripe after the walk opened the gate sees it
 *     open and comes here, and one that locked it before is seen by the
 *     walk (hashtbl.h, the gate). So a receive, exact or wildcard, may
 *     take the oldest fitting message without asking who else waits, and
 *     a probe reports what the next receive would take.
 *  M3 Post numbers: wc.seq, taken under wc.lock by every receive that
 *     queues while the gate is open (wildcard, or exact deferred by the
 *     table). An exact receive that queued with the gate closed has 0: it
 *     was posted before every wildcard receive now pending (one posted
 *     after a wildcard by the same thread sees the gate open, since that
 *     wildcard still holds it); receives posted at once by two threads
 *     have no order, in MPI as here.
 *  M4 Arrival stamps: proto_arrivals, a 32-bit counter taken by every
 *     arrival that may wait in the table, before it is offered to the
 *     table. Compared as serial numbers (wrapping), so the order holds
 *     while the messages waiting at once are less than 2^31 stamps apart.
 *     The arrivals of one source are handled in order by one thread, so
 *     their stamps follow their order per key and across keys; a key's
 *     oldest message (the table's FIFO) is the only one ever taken.
 *  M5 Every ordered decision is made under wc.lock, and the lock order is
 *     wc.lock, then a stripe's lock (the table's calls); nothing in the
 *     table calls back here except a pref or visit function, which only
 *     reads.
 *  M6 A request in the list is owned by the list and leaves it (under
 *     wc.lock) once, by the one that takes it out: an arrival it matches
 *     (or, for a probe waiter, that fits it), a cancel, or a failed
 *     peer's sweep; that one then completes it.
 *
 * Cost: a wildcard receive or a blocking probe that finds nothing walks
 * the whole table (every stripe's lock in turn) under wc.lock; while one
 * is pending every arrival takes wc.lock and scans the list, and exact
 * receives that queue take wc.lock (mpiv.h states this for users).
 */
#include <string.h>

#include "proto.h"
#include "util/spinlock.h"
#include "util/bias.h"

_Atomic uint32_t proto_arrivals;

static struct {
    util_spinlock lock;
    struct mpiv_request *head, *tail; /* pending wildcard receives and probe
                                         waiters, in post order (M6)        */
    uint64_t seq;                     /* the next post number (M3)          */
} wc = {.seq = 1};

/* --- the list (wc.lock held) ----------------------------------------------- */

static void wl_append(struct mpiv_request *r)
{
    r->seq = wc.seq++;
    r->wnext = NULL;
    r->wprev = wc.tail;
    if (wc.tail)
        wc.tail->wnext = r;
    else
        wc.head = r;
    wc.tail = r;
    r->listed = true;
}

/* Also closes the gate r held (M1). */
static void wl_unlink(struct mpiv_request *r)
{
    if (r->wprev)
        r->wprev->wnext = r->wnext;
    else
        wc.head = r->wnext;
    if (r->wnext)
        r->wnext->wprev = r->wprev;
    else
        wc.tail = r->wprev;
    r->listed = false;
    ht_gate_add(proto.ht, -1);
}

/* --- patterns and the oldest fitting message -------------------------------- */

static void pattern(int src, int tag, int ctx, ht_key *pat, ht_key *mask)
{
    bool any_src = src == MPIV_ANY_SOURCE, any_tag = tag == MPIV_ANY_TAG;
    *mask = ht_wild_mask(any_src, any_tag);
    *pat = ht_make_key((unsigned)ctx, any_src ? 0 : (uint32_t)src, any_tag ? 0 : (uint32_t)tag) &
           *mask;
}

static bool exact(ht_key mask) { return mask == ~(ht_key)0; }

static bool stamp_before(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }

struct oldest {
    bool found;
    uint32_t stamp;
    ht_key k;
    ht_value v;
    mpiv_status_t st;
};

void proto_msg_status(pkt_t *msg, mpiv_status_t *st)
{
    const struct proto_hdr *h = proto_hdr_of(msg);
    st->source = h->src;
    st->tag = (int)h->tag;
    st->size = (size_t)h->size;
    st->error = MPIV_SUCCESS;
}

/* Under a stripe's lock: keeps the oldest message seen (M4). */
static void keep_oldest(ht_key k, ht_value v, void *arg)
{
    struct oldest *o = arg;
    pkt_t *p = ht_ptr(v);
    uint32_t stamp = *proto_stamp_of(p);
    if (o->found && !stamp_before(stamp, o->stamp))
        return;
    o->found = true;
    o->stamp = stamp;
    o->k = k;
    o->v = v;
    proto_msg_status(p, &o->st); /* read now: once unlocked it may go */
}

static bool peek_oldest(ht_value oldest, void *arg)
{
    struct oldest *o = arg;
    keep_oldest(o->k, oldest, o);
    return false; /* look, do not take */
}

/* The oldest waiting message that fits (pat, mask), as it was at some
 * moment of the call (a probe's answer). */
static bool find_oldest(ht_key pat, ht_key mask, struct oldest *o)
{
    memset(o, 0, sizeof *o);
    if (exact(mask)) {
        o->k = pat;
        ht_match_pref(proto.ht, pat, (ht_value)HT_KIND_REQ, peek_oldest, o, false);
    } else {
        ht_visit_oldest(proto.ht, pat, mask, HT_KIND_PKT, keep_oldest, o);
    }
    return o->found;
}

/* Takes the oldest waiting message that fits (pat, mask) out of the
 * table, or returns NULL. A receive may (M2). */
static pkt_t *take_oldest(ht_key pat, ht_key mask)
{
    if (exact(mask)) {
        ht_value v = ht_match(proto.ht, pat, HT_KIND_REQ);
        return v == HT_EMPTY ? NULL : ht_ptr(v);
    }
    struct oldest o;
    while (find_oldest(pat, mask, &o))
        if (ht_take_oldest(proto.ht, o.k, o.v))
            return ht_ptr(o.v);
    /* else an exact receive took it between the walk and the take: the
     * next oldest is now the oldest */
    return NULL;
}

/* --- arrivals and posts the table deferred -------------------------------------- */

static bool posted_before(ht_value oldest, void *arg)
{
    const struct mpiv_request *e = ht_ptr(oldest), *w = arg;
    return e->seq < w->seq;
}

ht_value proto_arrive_ordered(ht_key k, pkt_t *q)
{
    struct mpiv_request *wake = NULL, *w = NULL;
    util_bias_lock(&wc.lock);
    for (struct mpiv_request *r = wc.head, *next; r; r = next) {
        next = r->wnext;
        if (!ht_key_fits(k, r->wpat, r->wmask))
            continue;
        if (r->kind == PROTO_REQ_PROBE) {
            /* it looks again once woken (the message may go to a receive) */
            wl_unlink(r);
            r->wnext = wake;
            wake = r;
        } else if (!w) {
            w = r; /* the earliest-posted wildcard receive that fits */
        }
    }
    ht_value v;
    if (w) {
        /* an exact receive of k takes it only if posted before w (M3) */
        v = ht_match_pref(proto.ht, k, ht_val(q, HT_KIND_PKT), posted_before, w, false);
        if (v == HT_EMPTY) {
            wl_unlink(w);
            v = ht_val(w, HT_KIND_REQ);
        }
    } else {
        v = ht_match_pref(proto.ht, k, ht_val(q, HT_KIND_PKT), NULL, NULL, true);
    }
    util_bias_unlock(&wc.lock);
    while (wake) {
        struct mpiv_request *next = wake->wnext; /* before the signal frees it */
        proto_finish(wake, MPIV_SUCCESS);
        wake = next;
    }
    return v;
}

ht_value proto_post_ordered(ht_key k, struct mpiv_request *r)
{
    util_bias_lock(&wc.lock);
    r->seq = wc.seq++;
    ht_value v = ht_match_pref(proto.ht, k, ht_val(r, HT_KIND_REQ), NULL, NULL, true);
    util_bias_unlock(&wc.lock);
    return v;
}

/* Whether a source that is not a wildcard has failed: nothing more will
 * come from it. */
static bool src_failed(int src)
{
    return src != MPIV_ANY_SOURCE && src != proto.rank && !srv_peer_alive(src);
}

int proto_post_wild(struct mpiv_request *r, int src, int tag, int ctx)
{
    pattern(src, tag, ctx, &r->wpat, &r->wmask);
    util_bias_lock(&wc.lock);
    ht_gate_add(proto.ht, 1); /* M1, M2: before the walk */
    pkt_t *p = take_oldest(r->wpat, r->wmask);
    if (p) {
        ht_gate_add(proto.ht, -1);
        util_bias_unlock(&wc.lock);
        proto_match(r, p, false);
        return MPIV_SUCCESS;
    }
    if (src_failed(src)) {
        /* a sweep for it ran already, or will not find us (I7 in p2p.c) */
        ht_gate_add(proto.ht, -1);
        util_bias_unlock(&wc.lock);
        return util_err(MPIV_ERR_PEER, "rank %d has failed: nothing more will come from it", src);
    }
    wl_append(r); /* keeps the gate open (M1) */
    util_bias_unlock(&wc.lock);
    return MPIV_SUCCESS;
}

bool proto_cancel_wild(struct mpiv_request *r)
{
    util_bias_lock(&wc.lock);
    bool was = r->listed;
    if (was)
        wl_unlink(r);
    util_bias_unlock(&wc.lock);
    return was;
}

void proto_wild_take_if(bool (*pred)(struct mpiv_request *r, void *arg), void *arg,
                        void (*fn)(struct mpiv_request *r, void *arg))
{
    struct mpiv_request *got = NULL;
    util_bias_lock(&wc.lock);
    for (struct mpiv_request *r = wc.head, *next; r; r = next) {
        next = r->wnext;
        if (!pred(r, arg))
            continue;
        wl_unlink(r);
        r->wnext = got;
        got = r;
    }
    util_bias_unlock(&wc.lock);
    while (got) {
        struct mpiv_request *next = got->wnext;
        fn(got, arg);
        got = next;
    }
}

/* --- probes -------------------------------------------------------------------- */

int proto_iprobe(int src, int tag, int ctx, int *flag, mpiv_status_t *st)
{
    ht_key pat, mask;
    pattern(src, tag, ctx, &pat, &mask);
    struct oldest o;
    *flag = find_oldest(pat, mask, &o);
    if (*flag) {
        *st = o.st;
        return MPIV_SUCCESS;
    }
    if (src_failed(src))
        return util_err(MPIV_ERR_PEER, "rank %d has failed: nothing more will come from it", src);
    return MPIV_SUCCESS;
}

int proto_improbe(int src, int tag, int ctx, pkt_t **msg, mpiv_status_t *st)
{
    ht_key pat, mask;
    pattern(src, tag, ctx, &pat, &mask);
    *msg = take_oldest(pat, mask);
    if (*msg) {
        proto_msg_status(*msg, st);
        return MPIV_SUCCESS;
    }
    if (src_failed(src))
        return util_err(MPIV_ERR_PEER, "rank %d has failed: nothing more will come from it", src);
    return MPIV_SUCCESS;
}

/* The blocking probes: look with the gate open under wc.lock, so that no
 * arrival can slip between the look and joining the list (M2); if nothing
 * is there, wait in the list as a probe waiter until an arrival that fits
 * wakes us, and look again (a receive may have taken it meanwhile). */
static int probe_wait(int src, int tag, int ctx, bool take, pkt_t **msg, mpiv_status_t *st)
{
    ht_key pat, mask;
    pattern(src, tag, ctx, &pat, &mask);
    for (;;) {
        struct mpiv_request w;
        memset(&w, 0, sizeof w);
        sched_sync_init(&w.sync);
        w.kind = PROTO_REQ_PROBE;
        w.wild = true;
        w.peer = src;
        w.wpat = pat;
        w.wmask = mask;
        struct oldest o;
        util_bias_lock(&wc.lock);
        ht_gate_add(proto.ht, 1);
        bool found;
        if (take) {
            *msg = take_oldest(pat, mask);
            found = *msg != NULL;
        } else {
            found = find_oldest(pat, mask, &o);
        }
        if (found || src_failed(src)) {
            ht_gate_add(proto.ht, -1);
            util_bias_unlock(&wc.lock);
            if (!found)
                return util_err(MPIV_ERR_PEER,
                                "rank %d has failed: nothing more will come from it", src);
            if (take)
                proto_msg_status(*msg, st);
            else
                *st = o.st;
            return MPIV_SUCCESS;
        }
        wl_append(&w); /* keeps the gate open (M1) */
        util_bias_unlock(&wc.lock);
        int rc = proto_wait(&w, NULL);
        if (rc)
            return rc; /* its peer failed (p2p.c's sweep) */
    }
}

int proto_probe(int src, int tag, int ctx, mpiv_status_t *st)
{
    return probe_wait(src, tag, ctx, false, NULL, st);
}

int proto_mprobe(int src, int tag, int ctx, pkt_t **msg, mpiv_status_t *st)
{
    return probe_wait(src, tag, ctx, true, msg, st);
}
