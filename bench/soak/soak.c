/*
 * soak.c — a long run of many messages of random sizes between many ULTs on
 * every rank, with every byte and the per-key order checked. It uses the
 * public API (mpiv.h) only.
 *
 * The traffic. Each rank runs U sender ULTs. Sender u of rank s sends its
 * share of the messages (-m, over all ranks), each to a random destination
 * rank (itself included) with one of K tags of its own (tag u*K + k), of a
 * random size: mostly small, a band around the eager limit, and a few large
 * ones up to -s bytes (rendezvous). It keeps up to W non-blocking sends in
 * flight. Every (source, destination, tag) triple is a stream; the messages
 * of a stream carry sequence numbers 0, 1, 2, ... in the order they are sent,
 * and each stream ends with a 16-byte end marker (sequence number = the
 * stream's message count), so that a message delivered twice or one too
 * many shows up in the marker's place.
 *
 * Knowing what to expect without wildcards. The whole schedule (destination,
 * tag and size of every message of every sender) is drawn from a PRNG seeded
 * by (seed, source rank, sender ULT), so every rank can regenerate any
 * sender's schedule. Each rank runs one receiving ULT per incoming stream
 * (P * U * K of them): it regenerates its sender's schedule, keeps the
 * messages addressed to its (rank, tag), and posts receives for them in
 * order, up to W at a time, each into a buffer of the expected size.
 *
 * Checking. A message's bytes are a function of (source, destination, tag,
 * sequence number, offset): 64-bit word i of the message is base + i * STEP,
 * with base a hash of the first four, and a short tail holds the first bytes
 * of the next word. The receiver compares every byte against that. A message
 * that is not the expected one is classified by its first bytes: if they are
 * those of another sequence number of the same stream it is "reordered"
 * (same-key order broken, or a message lost or duplicated before it), else
 * it is "corrupted" (also: wrong size, source or tag). A receive that fails
 * with an error other than truncation counts as an "error", as does a failed
 * send. "Lost" are messages still missing when the duration cap (-t)
 * expires: the program then prints, on every rank, which streams and senders
 * are incomplete and exits with status 1 instead of hanging.
 *
 * Output (rank 0): the parameters, messages and bytes moved, wall time (the
 * slowest rank, from a barrier before the first send to its last receive),
 * lost / corrupted / reordered / errors over all ranks (all must be 0), and
 * VmRSS / VmHWM from /proc/self/status at start (after mpiv_init) and at
 * end (after the last ULT is joined) for every rank. The exit status is 0
 * only if nothing was lost, corrupted or reordered and nothing failed.
 *
 * --inject corrupt|reorder|drop makes sender 0 of rank 0 damage its first
 * message on purpose (flip a byte; send it after the next message of its
 * stream; never send it), so that tests can show the checks catch each case.
 */
#include "mpiv.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MARKER_SIZE 16
#define STEP 0x9e3779b97f4a7c15ULL /* odd: words of one message all differ */
#define MAX_DETAIL_LINES 10        /* per rank, for error details */
#define MAX_MISSING_LINES 24       /* per rank, when the cap expires */

enum inject { INJECT_NONE, INJECT_CORRUPT, INJECT_REORDER, INJECT_DROP };

static struct opts {
    uint64_t messages; /* -m: over all ranks, end markers not counted */
    int ults;          /* -u: sender ULTs per rank */
    int tags;          /* -k: tags per sender ULT */
    int window;        /* -w: sends / receives in flight per ULT */
    uint64_t max_size; /* -s */
    uint64_t eager;    /* -e: the eager limit the size band straddles */
    double large_pct;  /* -l: percent of messages above the band */
    uint64_t seed;     /* --seed */
    double cap;        /* -t: seconds; 0 = none */
    double progress;   /* -p: seconds between progress lines; 0 = none */
    enum inject inject;
} opt = {
    .messages = 10000000,
    .ults = 64,
    .tags = 2,
    .window = 4,
    .max_size = 4u << 20,
    .eager = 8160, /* MPIV_PACKET_SIZE's default 8 KiB less the 32-byte header */
    .large_pct = 1.0,
    .seed = 1,
    .cap = 1800,
    .progress = 0,
    .inject = INJECT_NONE,
};

/* ------------------------------------------------------------------------ */
/* Hashing, the schedule and the message contents                           */
/* ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
    r->s += STEP;
    return mix64(r->s);
}

/* One message of a sender's schedule. */
struct draw {
    int dest, k;
    size_t size;
};

/* Walks the schedule of sender ULT `u` of rank `src`: the same sequence on
 * every rank, which is what lets receivers know what to expect. */
struct schedule {
    struct rng rng;
    uint64_t left; /* messages still to draw */
    int nranks;
};

static uint64_t sender_count(int src, int u, int nranks)
{
    uint64_t n = (uint64_t)nranks * (uint64_t)opt.ults;
    uint64_t idx = (uint64_t)src * (uint64_t)opt.ults + (uint64_t)u;
    return opt.messages / n + (idx < opt.messages % n);
}

static void schedule_init(struct schedule *sc, int src, int u, int nranks)
{
    sc->rng.s = mix64(mix64(opt.seed) + (uint64_t)src * 0x100000001ULL + (uint64_t)u);
    sc->left = sender_count(src, u, nranks);
    sc->nranks = nranks;
}

/* The band of sizes around the eager limit: [*lo, *hi], above the 0..256
 * class even when the eager limit is tiny. */
static void size_band(uint64_t *lo, uint64_t *hi)
{
    *lo = opt.eager > 512 ? opt.eager - 256 : 257;
    *hi = opt.eager + 256 > *lo ? opt.eager + 256 : *lo;
}

static size_t draw_size(struct rng *r)
{
    uint64_t cls = rng_next(r) % 1000000, y = rng_next(r), band_lo, band_hi;
    size_band(&band_lo, &band_hi);
    uint64_t large_ppm = (uint64_t)(opt.large_pct * 10000.0 + 0.5);
    uint64_t v;

    if (cls < large_ppm && opt.max_size > band_hi) {
        /* log-uniform: an octave at random, then a size within it */
        uint64_t lo = band_hi + 1, hi = opt.max_size;
        int elo = 63 - __builtin_clzll(lo), ehi = 63 - __builtin_clzll(hi);
        int e = elo + (int)(y % (uint64_t)(ehi - elo + 1));
        v = (1ULL << e) + (y >> 8) % (1ULL << e);
        v = v < lo ? lo : v > hi ? hi : v;
    } else if (cls < large_ppm + 40000) {
        v = band_lo + y % (band_hi - band_lo + 1); /* 4 %: across the eager limit */
    } else if (cls < large_ppm + 40000 + 150000) {
        v = 257 + y % (band_lo - 257 + 1); /* 15 %: up to the band */
    } else {
        v = y % 257; /* the rest: 0 to 256 bytes */
    }
    return (size_t)(v > opt.max_size ? opt.max_size : v);
}

/* Returns 0 when the schedule is exhausted. */
static int schedule_next(struct schedule *sc, struct draw *d)
{
    if (sc->left == 0)
        return 0;
    sc->left--;
    uint64_t a = rng_next(&sc->rng);
    d->dest = (int)((a >> 32) % (uint64_t)sc->nranks);
    d->k = (int)((a & 0xffffffffu) % (uint64_t)opt.tags);
    d->size = draw_size(&sc->rng);
    return 1;
}

static uint64_t msg_base(int src, int dst, int tag, uint64_t seq)
{
    uint64_t h = mix64(opt.seed ^ 0x736f616b736f616bULL);
    h = mix64(h + (uint64_t)src);
    h = mix64(h + (uint64_t)dst);
    h = mix64(h + (uint64_t)tag);
    return mix64(h + seq);
}

static void fill(unsigned char *p, size_t n, uint64_t base)
{
    uint64_t v = base;
    size_t i = 0;
    for (; i + 8 <= n; i += 8, v += STEP)
        memcpy(p + i, &v, 8);
    if (i < n)
        memcpy(p + i, &v, n - i);
}

/* Offset of the first byte of p[0, n) that differs from the content of the
 * message with `base`, or SIZE_MAX if all match. */
static size_t check(const unsigned char *p, size_t n, uint64_t base)
{
    uint64_t v = base, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8, v += STEP) {
        memcpy(&w, p + i, 8);
        if (w != v)
            break;
    }
    if (i >= n)
        return SIZE_MAX;
    unsigned char want[8];
    memcpy(want, &v, 8);
    for (size_t j = 0; j < 8 && i + j < n; j++)
        if (p[i + j] != want[j])
            return i + j;
    return SIZE_MAX;
}

/* ------------------------------------------------------------------------ */
/* Per-rank state                                                           */
/* ------------------------------------------------------------------------ */

struct stream { /* one incoming stream, received by one ULT */
    int src, u, k;
    uint64_t expected;          /* messages, the end marker not counted */
    _Atomic uint64_t received;  /* positions done, the end marker counted */
    uint64_t ok, bytes;         /* messages that arrived intact and in order */
    uint64_t corrupted, reordered, errors;
    mpiv_ult_t ult;
} __attribute__((aligned(64)));

struct sender {
    int u;
    uint64_t count;         /* messages, the end markers not counted */
    _Atomic uint64_t sent;  /* sends started, the end markers counted */
    uint64_t errors;
    mpiv_ult_t ult;
} __attribute__((aligned(64)));

static int me, nranks;
static struct stream *streams;
static size_t nstreams;
static struct sender *senders;
static _Atomic int detail_lines;
static _Atomic int streams_ready; /* streams, senders and their counts are set */
static _Atomic int driver_done;
static int driver_status;
static double t_start; /* after the start barrier */

#define DIE(...)                                                                \
    do {                                                                        \
        fprintf(stderr, "soak: rank %d: ", me);                                 \
        fprintf(stderr, __VA_ARGS__);                                           \
        fputc('\n', stderr);                                                    \
        fflush(stderr);                                                         \
        _exit(1);                                                               \
    } while (0)

#define CHECK(call)                                                             \
    do {                                                                        \
        int rc_ = (call);                                                       \
        if (rc_ != MPIV_SUCCESS)                                                \
            DIE("%s failed: %s (%s)", #call, mpiv_strerror(rc_), mpiv_error_detail()); \
    } while (0)

/* Error details are printed for the first few problems of each rank only:
 * one broken stream can make every later message of it look wrong. */
#define DETAIL(...)                                                             \
    do {                                                                        \
        if (atomic_fetch_add(&detail_lines, 1) < MAX_DETAIL_LINES) {            \
            fprintf(stderr, "soak: rank %d: ", me);                             \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

static const char *inject_name(enum inject i)
{
    return i == INJECT_CORRUPT ? "corrupt" : i == INJECT_REORDER ? "reorder" : "drop";
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        DIE("out of memory (%zu bytes)", n);
    return p;
}

/* VmRSS and VmHWM of this process in KiB (-1 if unreadable). */
static void read_rss(int64_t *rss, int64_t *hwm)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    *rss = *hwm = -1;
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        long long v;
        if (sscanf(line, "VmRSS: %lld", &v) == 1)
            *rss = v;
        else if (sscanf(line, "VmHWM: %lld", &v) == 1)
            *hwm = v;
    }
    fclose(f);
}

/* ------------------------------------------------------------------------ */
/* Senders                                                                  */
/* ------------------------------------------------------------------------ */

struct slot {
    mpiv_request_t req;
    unsigned char *buf;
};

static void slot_finish(struct sender *sd, struct slot *sl)
{
    if (sl->req == MPIV_REQUEST_NULL)
        return;
    int rc = mpiv_wait(&sl->req, NULL);
    if (rc != MPIV_SUCCESS) {
        sd->errors++;
        DETAIL("sender ULT %d: a send failed: %s (%s)", sd->u, mpiv_strerror(rc),
               mpiv_error_detail());
    }
    free(sl->buf);
    sl->buf = NULL;
}

static void start_send(struct sender *sd, struct slot *sl, unsigned char *buf, size_t size,
                       int dest, int tag)
{
    slot_finish(sd, sl);
    sl->buf = buf;
    int rc = mpiv_isend(buf, size, dest, tag, &sl->req);
    if (rc != MPIV_SUCCESS) {
        sd->errors++;
        DETAIL("sender ULT %d: mpiv_isend of %zu bytes to rank %d tag %d failed: %s (%s)",
               sd->u, size, dest, tag, mpiv_strerror(rc), mpiv_error_detail());
        free(buf);
        sl->buf = NULL;
        sl->req = MPIV_REQUEST_NULL;
    }
    atomic_fetch_add_explicit(&sd->sent, 1, memory_order_relaxed);
}

/* --inject: the index, in the schedule of sender ULT 0 of rank 0, of the
 * first message that, like the next message of its stream, has at least 16
 * bytes: enough for the receiver to tell which message it is (so that a
 * reorder is classified as one) and to carry a flipped byte past the first
 * word. UINT64_MAX if there is none. */
static uint64_t inject_target(void)
{
    size_t n = (size_t)nranks * (size_t)opt.tags;
    uint64_t *last = malloc(n * sizeof *last), found = UINT64_MAX;
    size_t *last_size = malloc(n * sizeof *last_size);
    if (!last || !last_size)
        DIE("out of memory");
    for (size_t j = 0; j < n; j++)
        last[j] = UINT64_MAX;
    struct schedule sc;
    struct draw d;
    schedule_init(&sc, 0, 0, nranks);
    for (uint64_t i = 0; found == UINT64_MAX && schedule_next(&sc, &d); i++) {
        size_t j = (size_t)d.dest * (size_t)opt.tags + (size_t)d.k;
        if (last[j] != UINT64_MAX && last_size[j] >= 16 && d.size >= 16)
            found = last[j];
        last[j] = i;
        last_size[j] = d.size;
    }
    free(last);
    free(last_size);
    return found;
}

static void *sender_main(void *arg)
{
    struct sender *sd = arg;
    int w = opt.window, nk = opt.tags;
    uint64_t *seq = calloc((size_t)nranks * (size_t)nk, sizeof *seq);
    struct slot *ring = calloc((size_t)w, sizeof *ring);
    if (!seq || !ring)
        DIE("out of memory");
    struct schedule sc;
    struct draw d;
    uint64_t i = 0; /* sends started, for the ring */
    uint64_t target = UINT64_MAX;
    if (opt.inject != INJECT_NONE && me == 0 && sd->u == 0) {
        target = inject_target();
        if (target == UINT64_MAX)
            DETAIL("--inject %s: sender ULT 0 has no message to damage (too few messages)",
                   inject_name(opt.inject));
    }
    /* --inject reorder: the held-back message, sent right after the next
     * message of its stream */
    unsigned char *held = NULL;
    size_t held_size = 0;
    int held_dest = -1, held_tag = -1;

    schedule_init(&sc, me, sd->u, nranks);
    for (uint64_t n = 0; schedule_next(&sc, &d); n++) {
        int tag = sd->u * nk + d.k;
        uint64_t s = seq[(size_t)d.dest * (size_t)nk + (size_t)d.k]++;
        unsigned char *buf = xmalloc(d.size);
        fill(buf, d.size, msg_base(me, d.dest, tag, s));
        if (n == target) {
            if (opt.inject == INJECT_DROP) {
                free(buf);
                atomic_fetch_add_explicit(&sd->sent, 1, memory_order_relaxed);
                continue;
            }
            if (opt.inject == INJECT_REORDER) {
                held = buf, held_size = d.size, held_dest = d.dest, held_tag = tag;
                continue;
            }
            buf[d.size / 2] ^= 0x5a; /* INJECT_CORRUPT */
        }
        start_send(sd, &ring[i++ % (uint64_t)w], buf, d.size, d.dest, tag);
        if (held && d.dest == held_dest && tag == held_tag) {
            start_send(sd, &ring[i++ % (uint64_t)w], held, held_size, held_dest, held_tag);
            held = NULL;
        }
    }
    for (int dest = 0; dest < nranks; dest++)
        for (int k = 0; k < nk; k++) {
            int tag = sd->u * nk + k;
            unsigned char *buf = xmalloc(MARKER_SIZE);
            fill(buf, MARKER_SIZE, msg_base(me, dest, tag, seq[(size_t)dest * (size_t)nk + (size_t)k]));
            start_send(sd, &ring[i++ % (uint64_t)w], buf, MARKER_SIZE, dest, tag);
        }
    for (int j = 0; j < w; j++)
        slot_finish(sd, &ring[j]);
    free(ring);
    free(seq);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Receivers                                                                */
/* ------------------------------------------------------------------------ */

struct rslot {
    mpiv_request_t req;
    unsigned char *buf;
    uint64_t seq;
    size_t size;
};

/* Which message of the stream arrived in place of another: the sequence
 * number in [0, expected] (the end marker included) of the message of
 * `size` bytes whose content starts with p[0, n), or -1. After a truncation
 * nothing was written (n == 0) and the size alone must do. Only called on
 * the error path; one walk of the sender's schedule. */
static int64_t identify(const struct stream *st, int tag, const unsigned char *p, size_t n,
                        size_t size)
{
    struct schedule sc;
    struct draw d;
    uint64_t s = 0;
    schedule_init(&sc, st->src, st->u, nranks);
    for (;;) {
        size_t sz = MARKER_SIZE; /* the end marker's, once the schedule is over */
        int more = 0;
        while ((more = schedule_next(&sc, &d)) && (d.dest != me || d.k != st->k))
            ;
        if (more)
            sz = d.size;
        if (sz == size && check(p, n < 8 ? n : 8, msg_base(st->src, me, tag, s)) == SIZE_MAX)
            return (int64_t)s;
        if (!more)
            return -1;
        s++;
    }
}

static void rslot_finish(struct stream *st, int tag, struct rslot *sl)
{
    mpiv_status_t status = {.source = -1, .tag = -1, .size = 0, .error = 0};
    int rc = mpiv_wait(&sl->req, &status);
    size_t bad = SIZE_MAX;

    if (rc == MPIV_SUCCESS && status.size == sl->size && status.source == st->src &&
        status.tag == tag &&
        (bad = check(sl->buf, sl->size, msg_base(st->src, me, tag, sl->seq))) == SIZE_MAX) {
        if (sl->seq < st->expected) {
            st->ok++;
            st->bytes += sl->size;
        }
    } else if (rc != MPIV_SUCCESS && rc != MPIV_ERR_TRUNCATE) {
        st->errors++;
        DETAIL("from rank %d tag %d: receive of message %" PRIu64 " failed: %s (%s)", st->src, tag,
               sl->seq, mpiv_strerror(rc), mpiv_error_detail());
    } else {
        size_t have = rc == MPIV_ERR_TRUNCATE ? 0 : status.size;
        int64_t id = identify(st, tag, sl->buf, have, status.size);
        if (id >= 0 && (uint64_t)id != sl->seq) {
            st->reordered++;
            DETAIL("from rank %d tag %d: message %" PRIu64 " expected (%zu bytes), message %" PRId64
                   " arrived (%zu bytes)",
                   st->src, tag, sl->seq, sl->size, id, status.size);
        } else {
            st->corrupted++;
            if (rc == MPIV_ERR_TRUNCATE)
                DETAIL("from rank %d tag %d: message %" PRIu64 " (%zu bytes) expected, a larger "
                       "one (%zu bytes) arrived", st->src, tag, sl->seq, sl->size, status.size);
            else
                DETAIL("from rank %d tag %d: message %" PRIu64 " (%zu bytes) is wrong: status "
                       "source %d tag %d size %zu, first wrong byte at offset %zu",
                       st->src, tag, sl->seq, sl->size, status.source, status.tag, status.size,
                       bad == SIZE_MAX ? (size_t)0 : bad);
        }
    }
    free(sl->buf);
    sl->buf = NULL;
    atomic_fetch_add_explicit(&st->received, 1, memory_order_relaxed);
}

static void *receiver_main(void *arg)
{
    struct stream *st = arg;
    int w = opt.window, tag = st->u * opt.tags + st->k;
    struct rslot *ring = calloc((size_t)w, sizeof *ring);
    if (!ring)
        DIE("out of memory");
    struct schedule sc;
    struct draw d;

    schedule_init(&sc, st->src, st->u, nranks);
    for (uint64_t pos = 0; pos <= st->expected; pos++) {
        size_t size = MARKER_SIZE;
        if (pos < st->expected) {
            do {
                if (!schedule_next(&sc, &d))
                    DIE("stream from rank %d tag %d: the schedule ended early", st->src, tag);
            } while (d.dest != me || d.k != st->k);
            size = d.size;
        }
        struct rslot *sl = &ring[pos % (uint64_t)w];
        if (sl->buf)
            rslot_finish(st, tag, sl);
        sl->buf = xmalloc(size);
        sl->seq = pos;
        sl->size = size;
        int rc = mpiv_irecv(sl->buf, size, st->src, tag, &sl->req);
        if (rc != MPIV_SUCCESS)
            DIE("mpiv_irecv from rank %d tag %d failed: %s (%s)", st->src, tag,
                mpiv_strerror(rc), mpiv_error_detail());
    }
    for (uint64_t pos = st->expected + 1; pos < st->expected + 1 + (uint64_t)w; pos++) {
        struct rslot *sl = &ring[pos % (uint64_t)w];
        if (sl->buf)
            rslot_finish(st, tag, sl);
    }
    free(ring);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* The driver (a ULT) and the watchdog (main's thread)                      */
/* ------------------------------------------------------------------------ */

/* Per-rank figures gathered on rank 0 with one allreduce. */
enum { F_RSS0, F_HWM0, F_RSS1, F_HWM1, F_MSGS, F_BYTES, F_LOST, F_CORRUPT, F_REORDER, F_ERRORS,
       F_EXPECTED, F_N };

static void *driver_main(void *unused)
{
    (void)unused;
    int64_t rss0, hwm0;
    read_rss(&rss0, &hwm0);
    int nw = mpiv_num_workers(), next_worker = 0;

    /* What this rank will receive: every sender's schedule, filtered. */
    nstreams = (size_t)nranks * (size_t)opt.ults * (size_t)opt.tags;
    streams = aligned_alloc(64, nstreams * sizeof *streams);
    senders = aligned_alloc(64, (size_t)opt.ults * sizeof *senders);
    if (!streams || !senders)
        DIE("out of memory for %zu streams", nstreams);
    memset(streams, 0, nstreams * sizeof *streams);
    memset(senders, 0, (size_t)opt.ults * sizeof *senders);
    for (int u = 0; u < opt.ults; u++) {
        senders[u].u = u;
        senders[u].count = sender_count(me, u, nranks);
    }
    uint64_t expected = 0;
    for (int s = 0; s < nranks; s++)
        for (int u = 0; u < opt.ults; u++) {
            struct stream *row = &streams[((size_t)s * (size_t)opt.ults + (size_t)u) * (size_t)opt.tags];
            struct schedule sc;
            struct draw d;
            for (int k = 0; k < opt.tags; k++)
                row[k].src = s, row[k].u = u, row[k].k = k;
            schedule_init(&sc, s, u, nranks);
            while (schedule_next(&sc, &d))
                if (d.dest == me) {
                    row[d.k].expected++;
                    expected++;
                }
        }
    atomic_store_explicit(&streams_ready, 1, memory_order_release);

    CHECK(mpiv_barrier());
    t_start = mpiv_wtime();
    for (size_t i = 0; i < nstreams; i++)
        CHECK(mpiv_ult_spawn(receiver_main, &streams[i], next_worker++ % nw, &streams[i].ult));
    for (int u = 0; u < opt.ults; u++)
        CHECK(mpiv_ult_spawn(sender_main, &senders[u], next_worker++ % nw, &senders[u].ult));
    for (int u = 0; u < opt.ults; u++)
        CHECK(mpiv_ult_join(senders[u].ult, NULL));
    for (size_t i = 0; i < nstreams; i++)
        CHECK(mpiv_ult_join(streams[i].ult, NULL));
    double elapsed = mpiv_wtime() - t_start, slowest;

    int64_t rss1, hwm1;
    read_rss(&rss1, &hwm1);
    int64_t *fig = calloc((size_t)nranks * F_N, sizeof *fig), *all = calloc((size_t)nranks * F_N, sizeof *all);
    if (!fig || !all)
        DIE("out of memory");
    int64_t *mine = &fig[(size_t)me * F_N];
    mine[F_RSS0] = rss0, mine[F_HWM0] = hwm0, mine[F_RSS1] = rss1, mine[F_HWM1] = hwm1;
    mine[F_EXPECTED] = (int64_t)expected;
    for (size_t i = 0; i < nstreams; i++) {
        struct stream *st = &streams[i];
        mine[F_MSGS] += (int64_t)st->ok;
        mine[F_BYTES] += (int64_t)st->bytes;
        mine[F_CORRUPT] += (int64_t)st->corrupted;
        mine[F_REORDER] += (int64_t)st->reordered;
        mine[F_ERRORS] += (int64_t)st->errors;
    }
    for (int u = 0; u < opt.ults; u++)
        mine[F_ERRORS] += (int64_t)senders[u].errors;
    CHECK(mpiv_allreduce(fig, all, (size_t)nranks * F_N, MPIV_INT64, MPIV_SUM));
    CHECK(mpiv_allreduce(&elapsed, &slowest, 1, MPIV_DOUBLE, MPIV_MAX));

    int64_t tot[F_N] = {0};
    for (int r = 0; r < nranks; r++)
        for (int f = 0; f < F_N; f++)
            tot[f] += all[(size_t)r * F_N + f];
    int failed = tot[F_LOST] || tot[F_CORRUPT] || tot[F_REORDER] || tot[F_ERRORS] ||
                 tot[F_MSGS] != (int64_t)opt.messages || tot[F_EXPECTED] != (int64_t)opt.messages;
    if (me == 0) {
        printf("messages %" PRId64 " of %" PRIu64 ", bytes %" PRId64 " (%.2f GiB), time %.2f s, "
               "%.0f messages/s, %.1f MB/s\n",
               tot[F_MSGS], opt.messages, tot[F_BYTES], (double)tot[F_BYTES] / (1 << 30), slowest,
               (double)tot[F_MSGS] / slowest, (double)tot[F_BYTES] / slowest / 1e6);
        printf("lost %" PRId64 ", corrupted %" PRId64 ", reordered %" PRId64 ", errors %" PRId64 "\n",
               tot[F_LOST], tot[F_CORRUPT], tot[F_REORDER], tot[F_ERRORS]);
        for (int r = 0; r < nranks; r++) {
            const int64_t *f = &all[(size_t)r * F_N];
            printf("rank %d: received %" PRId64 " messages, %" PRId64 " bytes; VmRSS %" PRId64
                   " kB -> %" PRId64 " kB, VmHWM %" PRId64 " kB -> %" PRId64 " kB\n",
                   r, f[F_MSGS], f[F_BYTES], f[F_RSS0], f[F_RSS1], f[F_HWM0], f[F_HWM1]);
        }
        printf("result: %s\n", failed ? "FAILED" : "OK");
        fflush(stdout);
    }
    free(fig);
    free(all);
    driver_status = failed;
    atomic_store(&driver_done, 1);
    return NULL;
}

/* The cap expired: say what this rank still misses, then fail the job. */
static void report_missing(double waited)
{
    uint64_t missing = 0, incomplete = 0;
    int lines = 0, ready = atomic_load_explicit(&streams_ready, memory_order_acquire);
    for (size_t i = 0; ready && i < nstreams; i++) {
        struct stream *st = &streams[i];
        uint64_t got = atomic_load_explicit(&st->received, memory_order_relaxed);
        if (got >= st->expected + 1)
            continue;
        incomplete++;
        missing += st->expected + 1 - got;
        if (lines++ < MAX_MISSING_LINES)
            fprintf(stderr, "soak: rank %d: missing from rank %d tag %d: %" PRIu64 " of %" PRIu64
                    " receives done (%" PRIu64 " messages and the end marker)\n", me, st->src,
                    st->u * opt.tags + st->k, got, st->expected + 1, st->expected);
    }
    for (int u = 0; ready && u < opt.ults; u++) {
        uint64_t sent = atomic_load_explicit(&senders[u].sent, memory_order_relaxed);
        uint64_t all = senders[u].count + (uint64_t)nranks * (uint64_t)opt.tags;
        if (sent < all && lines++ < MAX_MISSING_LINES)
            fprintf(stderr, "soak: rank %d: sender ULT %d has started %" PRIu64 " of %" PRIu64
                    " sends (end markers included)\n", me, u, sent, all);
    }
    fprintf(stderr, "soak: rank %d: duration cap of %.0f s expired after %.1f s: lost %" PRIu64
            " (messages and end markers not received, in %" PRIu64 " streams)%s\n",
            me, opt.cap, waited, missing, incomplete,
            !ready ? "; this rank had not finished computing its schedule"
            : incomplete == 0 ? "; this rank's streams are complete, it waits for the other ranks"
                              : "");
    fflush(stderr);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "soak: mpiv_finalize did not return within the duration cap\n";
    ssize_t rc = write(2, msg, sizeof msg - 1);
    (void)rc;
    _exit(1);
}

/* ------------------------------------------------------------------------ */
/* Command line                                                             */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: mpiv_run -n RANKS soak [options]\n"
            "Sends many messages of random sizes between many ULTs on every rank and checks\n"
            "every byte and the order of messages with the same source and tag.\n"
            "  -m, --messages N     messages in total over all ranks (default 10000000)\n"
            "  -u, --ults N         sender ULTs per rank (default 64); each rank also runs one\n"
            "                       receiving ULT per incoming stream: RANKS * N * TAGS\n"
            "  -k, --tags N         tags per sender ULT (default 2)\n"
            "  -w, --window N       sends / receives in flight per ULT (default 4)\n"
            "  -s, --max-size B     largest message in bytes, K/M/G suffixes allowed (default 4M)\n"
            "  -e, --eager B        eager limit the size band straddles (default 8160)\n"
            "  -l, --large PCT      percent of messages above that band (default 1)\n"
            "      --seed N         seed of the schedule (default 1)\n"
            "  -t, --cap S          duration cap in seconds; past it, print what is missing and\n"
            "                       exit 1 (default 1800; 0 = none)\n"
            "  -p, --progress S     print each rank's progress every S seconds (default 0 = off)\n"
            "      --inject WHAT    corrupt | reorder | drop: rank 0's first sender damages its\n"
            "                       first message on purpose (the checks must catch it)\n"
            "  -h, --help\n"
            "Exit status: 0 if nothing was lost, corrupted or reordered and no call failed,\n"
            "1 otherwise, 2 on a bad argument.\n");
}

static void bad_arg(const char *name, const char *val, const char *want)
{
    fprintf(stderr, "soak: %s %s: expected %s\n", name, val, want);
    exit(2);
}

/* An unsigned integer in [lo, hi], with a K/M/G (powers of 1024) suffix if
 * `suffix`. */
static uint64_t parse_u64(const char *name, const char *s, uint64_t lo, uint64_t hi, int suffix)
{
    char *end, want[96];
    snprintf(want, sizeof want, "an integer from %" PRIu64 " to %" PRIu64 "%s", lo, hi,
             suffix ? " (K, M or G suffix allowed)" : "");
    if (!s || *s < '0' || *s > '9')
        bad_arg(name, s ? s : "(missing)", want);
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        bad_arg(name, s, want);
    int shift = 0;
    if (suffix && *end) {
        shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20
              : *end == 'G' || *end == 'g' ? 30 : -1;
        if (shift > 0)
            end++;
    }
    if (*end || shift < 0 || (shift && v > (ULLONG_MAX >> shift)))
        bad_arg(name, s, want);
    v <<= shift;
    if (v < lo || v > hi)
        bad_arg(name, s, want);
    return v;
}

static double parse_double(const char *name, const char *s, double lo, double hi)
{
    char *end, want[96];
    snprintf(want, sizeof want, "a number from %g to %g", lo, hi);
    if (!s || !*s)
        bad_arg(name, s ? s : "(missing)", want);
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi))
        bad_arg(name, s, want);
    return v;
}

static void parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define IS(short_, long_) (!strcmp(a, short_) || !strcmp(a, long_))
        if (IS("-h", "--help")) {
            usage(stdout);
            exit(0);
        } else if (IS("-m", "--messages")) {
            opt.messages = parse_u64(a, v, 1, 1ULL << 40, 0);
        } else if (IS("-u", "--ults")) {
            opt.ults = (int)parse_u64(a, v, 1, 65536, 0);
        } else if (IS("-k", "--tags")) {
            opt.tags = (int)parse_u64(a, v, 1, 64, 0);
        } else if (IS("-w", "--window")) {
            opt.window = (int)parse_u64(a, v, 1, 1024, 0);
        } else if (IS("-s", "--max-size")) {
            opt.max_size = parse_u64(a, v, MARKER_SIZE, 1ULL << 31, 1);
        } else if (IS("-e", "--eager")) {
            opt.eager = parse_u64(a, v, 0, 1ULL << 20, 1);
        } else if (IS("-l", "--large")) {
            opt.large_pct = parse_double(a, v, 0, 81);
        } else if (!strcmp(a, "--seed")) {
            opt.seed = parse_u64(a, v, 0, UINT64_MAX, 0);
        } else if (IS("-t", "--cap")) {
            opt.cap = parse_double(a, v, 0, 1e7);
        } else if (IS("-p", "--progress")) {
            opt.progress = parse_double(a, v, 0, 1e7);
        } else if (!strcmp(a, "--inject")) {
            if (v && !strcmp(v, "corrupt"))
                opt.inject = INJECT_CORRUPT;
            else if (v && !strcmp(v, "reorder"))
                opt.inject = INJECT_REORDER;
            else if (v && !strcmp(v, "drop"))
                opt.inject = INJECT_DROP;
            else
                bad_arg(a, v ? v : "(missing)", "corrupt, reorder or drop");
        } else {
            fprintf(stderr, "soak: unknown argument '%s' (see --help)\n", a);
            exit(2);
        }
#undef IS
        i++; /* every option but --help takes a value */
    }
}

int main(int argc, char **argv)
{
    /* Arguments are checked before mpiv_init: every rank gets the same ones,
     * so all ranks refuse a bad one together. */
    parse(argc, argv);
    CHECK(mpiv_init(&argc, &argv));
    me = mpiv_rank();
    nranks = mpiv_size();
    if ((uint64_t)opt.ults * (uint64_t)opt.tags > (uint64_t)MPIV_TAG_MAX + 1)
        DIE("--ults times --tags exceeds the tag range");
    if (me == 0) {
        printf("# soak: %d ranks, %" PRIu64 " messages, %d sender ULTs and %zu receiving ULTs "
               "per rank, %d tags per sender, window %d\n",
               nranks, opt.messages, opt.ults, (size_t)nranks * (size_t)opt.ults * (size_t)opt.tags,
               opt.tags, opt.window);
        uint64_t band_lo, band_hi;
        size_band(&band_lo, &band_hi);
        printf("# sizes 0..%" PRIu64 " bytes: %.2f%% above %" PRIu64 ", 4%% in %" PRIu64 "..%" PRIu64
               " (around the eager limit %" PRIu64 "), 15%% in 257..%" PRIu64 ", the rest 0..256; "
               "seed %" PRIu64 ", cap %.0f s, %d workers per rank%s%s\n",
               opt.max_size, opt.large_pct, band_hi, band_lo, band_hi, opt.eager, band_lo,
               opt.seed, opt.cap, mpiv_num_workers(),
               opt.inject ? ", injecting: " : "", opt.inject ? inject_name(opt.inject) : "");
        fflush(stdout);
    }

    mpiv_ult_t driver;
    CHECK(mpiv_ult_spawn(driver_main, NULL, 0, &driver));
    double t0 = mpiv_wtime(), next_progress = opt.progress;
    while (!atomic_load(&driver_done)) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double now = mpiv_wtime() - t0;
        if (opt.progress > 0 && now >= next_progress &&
            atomic_load_explicit(&streams_ready, memory_order_acquire)) {
            uint64_t got = 0, want = 0;
            for (size_t i = 0; i < nstreams; i++) {
                got += atomic_load_explicit(&streams[i].received, memory_order_relaxed);
                want += streams[i].expected + 1;
            }
            int64_t rss, hwm;
            read_rss(&rss, &hwm);
            printf("# rank %d at %.0f s: %" PRIu64 " of %" PRIu64 " receives done, VmRSS %" PRId64
                   " kB, VmHWM %" PRId64 " kB\n", me, now, got, want, rss, hwm);
            fflush(stdout);
            next_progress += opt.progress;
        }
        if (opt.cap > 0 && now > opt.cap) {
            fflush(stdout);
            report_missing(now);
            /* Give the other ranks, whose caps expire at about the same
             * time, a moment to print theirs before the job is torn down. */
            sleep(1);
            _exit(1);
        }
    }
    CHECK(mpiv_ult_join(driver, NULL));
    if (opt.cap > 0) {
        double left = opt.cap - (mpiv_wtime() - t0);
        signal(SIGALRM, on_alarm);
        alarm(left > 30 ? (unsigned)left : 30);
    }
    CHECK(mpiv_finalize());
    alarm(0);
    free(streams);
    free(senders);
    return driver_status ? 1 : 0;
}
