/*
 * wire.c — the one place where arrived bytes are checked before anything
 * acts on them. The server hands every packet here first (proto_on_packet
 * in p2p.c calls proto_decode); a packet whose fields disagree with each
 * other or with what the transport knows (its length, its source rank) is
 * dropped, counted and logged, and no handler ever sees it. The handlers
 * may then rely on:
 *   - p->len >= sizeof(struct proto_hdr), the type is known;
 *   - h->src is the rank the transport received it from;
 *   - EAGER: p->len == header + h->size and h->size <= the eager limit for
 *     that source (proto_eager_max: larger on shm, where messages above a
 *     packet's size arrive in place and never as packets);
 *   - RTS: header alone, or header + struct proto_rts (a read offered);
 *     h->handle != 0;
 *   - RTR: header + body when OK, header alone otherwise (NONE, FAILED and
 *     the FINs), known status, h->handle != 0;
 *   - ABORT: header only, a 32-bit handle, an error code;
 *   - CREDIT: header only;
 *   - ctx and tag within what the sender's API lets through.
 * What a decode cannot know (whether a handle is live) the handler checks
 * through the handle table, and drops with PROTO_DROP_HANDLE.
 * Arrivals lent in place by the transport (proto_decode_data) may be
 * rewritten by a faulty peer while they are read: the header is copied
 * once, checked, and only that copy is used afterwards.
 */
#include <inttypes.h>
#include <string.h>

#include "proto.h"
#include "util/atomic.h"

static _Atomic uint64_t drops[PROTO_DROP_MAX_];
static _Atomic uint64_t drop_logged_ns; /* last time a drop was logged */

static const char *const drop_name[PROTO_DROP_MAX_] = {
    [PROTO_DROP_SHORT] = "shorter than a header",
    [PROTO_DROP_TYPE] = "unknown type",
    [PROTO_DROP_SRC] = "source field is not the sending rank",
    [PROTO_DROP_LEN] = "length does not match its fields",
    [PROTO_DROP_FIELD] = "field out of range",
    [PROTO_DROP_HANDLE] = "names no live request (late or duplicated)",
    [PROTO_DROP_IMM] = "rendezvous write names no live receive",
};

void proto_count_drop(enum proto_drop why, int src, const char *what)
{
    /* relaxed: statistics */
    uint64_t n = atomic_fetch_add_explicit(&drops[why], 1, memory_order_relaxed) + 1;
    /* At most one line per 100 ms per process, so that a flood of bad
     * packets cannot flood the log; the counts keep the rest. */
    uint64_t now = util_now_ns();
    uint64_t last = atomic_load_explicit(&drop_logged_ns, memory_order_relaxed);
    if (now - last >= 100000000u &&
        atomic_compare_exchange_strong_explicit(&drop_logged_ns, &last, now,
                                                memory_order_relaxed, memory_order_relaxed))
        util_log_warn("dropped %s from rank %d: %s (%" PRIu64 " so far)", what, src,
                      drop_name[why], n);
}

void proto_stats_drops(uint64_t out[PROTO_DROP_MAX_])
{
    for (int i = 0; i < PROTO_DROP_MAX_; i++)
        out[i] = atomic_load_explicit(&drops[i], memory_order_relaxed);
}

static int drop(enum proto_drop why, int src)
{
    proto_count_drop(why, src, "a packet");
    return -1;
}

int proto_decode(const pkt_t *p, int src)
{
    struct proto_hdr h;
    return proto_decode_data(p->data, p->len, src, &h);
}

int proto_decode_data(const unsigned char *data, size_t len, int src, struct proto_hdr *out)
{
    if (len < sizeof(struct proto_hdr))
        return drop(PROTO_DROP_SHORT, src);
    struct proto_hdr h;
    memcpy(&h, data, sizeof h);
    *out = h;
    if (h.type == 0 || h.type >= PROTO_TYPE_MAX_)
        return drop(PROTO_DROP_TYPE, src);
    if (h.src != src)
        return drop(PROTO_DROP_SRC, src);
    size_t body = len - sizeof h;
    switch ((enum proto_type)h.type) {
    case PROTO_EAGER:
    case PROTO_RTS:
        if (h.ctx >= PROTO_CTX_COUNT || h.tag > (uint32_t)MPIV_TAG_MAX)
            return drop(PROTO_DROP_FIELD, src);
        if (h.type == PROTO_EAGER) {
            if (h.size > proto_eager_max(src))
                return drop(PROTO_DROP_FIELD, src);
            if (body != h.size)
                return drop(PROTO_DROP_LEN, src);
        } else {
            if (body != 0 && body != sizeof(struct proto_rts))
                return drop(PROTO_DROP_LEN, src);
            if (h.handle == 0)
                return drop(PROTO_DROP_FIELD, src);
        }
        return h.type;
    case PROTO_RTR:
        if (h.handle == 0)
            return drop(PROTO_DROP_FIELD, src);
        if (h.status == PROTO_RTR_OK)
            return body == sizeof(struct proto_rtr) ? h.type : drop(PROTO_DROP_LEN, src);
        if (h.status != PROTO_RTR_NONE && h.status != PROTO_RTR_FAILED &&
            h.status != PROTO_RTR_FIN && h.status != PROTO_RTR_FIN_FAILED)
            return drop(PROTO_DROP_FIELD, src);
        return body == 0 ? h.type : drop(PROTO_DROP_LEN, src);
    case PROTO_ABORT:
        if (body != 0)
            return drop(PROTO_DROP_LEN, src);
        if (h.handle == 0 || h.handle > UINT32_MAX || h.status == MPIV_SUCCESS ||
            h.status >= MPIV_ERR_LAST_)
            return drop(PROTO_DROP_FIELD, src);
        return h.type;
    case PROTO_CREDIT:
        return body == 0 ? h.type : drop(PROTO_DROP_LEN, src);
    case PROTO_TYPE_MAX_:
        break;
    }
    return drop(PROTO_DROP_TYPE, src);
}
