/*
 * shm.c — the intra-node backend (MPIV_NET=shm): ranks of one host move
 * packets through rings in shared memory, without libfabric.
 *
 * Why: libfabric 1.17's shm provider locks the receiver's whole region for
 * every send and every poll; with two busy-polling processes that lock was
 * about a third of all cycles of MPIv's small-message benchmarks
 * (docs/perf/pt2pt.md). Here each (sender, receiver) pair has a ring of its
 * own, so a send and a poll touch only that ring's two counters.
 *
 * Layout: every rank r creates one segment (shm_open, unlinked as soon as
 * every rank of its host has mapped it, so a crash leaves nothing in
 * /dev/shm) holding one ring per rank of its host (all N ranks in a
 * one-host job; in a mixed job, see server.c, only those of the host),
 * ring lidx[s] carrying what rank s sends to r. A ring is `ring_bytes`
 * (a power of two) of variable-length records and two counters, each
 * counter and the records starting a 128-byte pair of lines of their own
 * (SHM_PAIR): tail (bytes written, by the sender) and head (bytes
 * consumed, by the receiver). A record is a 24-byte header (a stamp,
 * kind, length, its own size in 64-byte lines, the IMM value), then its
 * payload (a CHUNK's begins with its address), rounded up to 64 bytes, so
 * every record starts on a cache line and an 8-byte message (24 + 32-byte
 * protocol header + 8) takes one line; a record of more lines ends with a
 * copy of its stamp. A record of SHM_GAP_MIN_LINES lines or more is
 * followed by SHM_GAP_LINES lines that nobody writes or reads (its span,
 * rec_span, is both together; both sides work it out from the size in the
 * header). A record never wraps: one whose span does not fit before the
 * end of the ring is preceded by a SKIP record that fills the rest of it.
 *
 * Invariants of a ring (single producer, single consumer):
 *  R1 Only the sending rank writes tail and records, and within it only the
 *     holder of out[peer].lock; only the receiving rank writes head, and
 *     within it only the holder of the server's progress lock (poll).
 *  R2 0 <= tail - head <= ring_bytes, and both are multiples of 64: a
 *     sender writes the bytes [tail, tail + n) only after seeing (acquire)
 *     head >= tail + n - ring_bytes, i.e. the receiver is done with them.
 *  R3 A record's bytes (its stamp's copy at its end included) are written
 *     before its stamp (release), and its stamp before tail moves past it
 *     (release). The receiver reads a record only after it saw (acquire)
 *     the stamp at its head equal to head ^ the ring's key, and stores head
 *     (release) only after it is done reading, which for a MSG record is
 *     after the core's handler returned (it reads the record in place: a
 *     "borrowed" arrival, see shm_release). So the receiver of a one-line
 *     message reads that line and nothing else the sender wrote: one
 *     cache-line transfer, not two (the tail's line and the record's).
 *     The sender keeps its own copy of tail (out[peer].tail) and only
 *     stores to the ring's: reading it back would miss whenever the
 *     receiver has just looked at it (R5), on the way to every send.
 *  R4 Records of one ring are consumed in order, so what one rank sends to
 *     another arrives in the order posted (same key, same order: DESIGN).
 *  R5 A stamp names its position: positions only grow, and the key is a
 *     random 64-bit number with its top bit set, chosen by the receiving
 *     rank for its segment (so never 0, what a fresh ring holds). A record
 *     of an earlier lap, or payload bytes, pass for a stamp only by a 2^-64
 *     chance. By R3, a position the tail has passed whose stamp does not
 *     match is no record boundary of the sender's: the ring is broken there
 *     (see below).
 *
 * Two ways in: post_send copies a packet into a record (the core's queued
 * path), send_inline copies a header and the user's payload straight into
 * one (the eager fast path: no packet at all). Both write a record of 16
 * lines or fewer through short_begin and line_put/short_put when it only
 * needs the next lines of the ring, and through rec_begin and rec_put_msg
 * otherwise (a start-over, a wrap, a full ring, a longer record): the two
 * keep R1-R3 alike. One way out: poll hands the
 * core each MSG record in place, with a posted packet beside it that the
 * handler may copy into if it must keep the message; otherwise it copies
 * straight from the ring into the receive buffer. A MSG record carries at
 * most `inline_max` bytes (MPIV_SHM_EAGER_LIMIT plus the protocol header,
 * and never less than a packet), so messages larger than a packet travel
 * eagerly on shm while the packet path stays as it is for ofi and ibv.
 *
 * RDMA write with immediate: the writer sends the bytes through the ring
 * as CHUNK records of at most SHM_CHUNK bytes naming the destination
 * address, and the receiver copies them out, freeing each CHUNK's room as
 * it goes, so the two copies run at once on two cores and a write longer
 * than the ring streams through it. With MPIV_SHM_CMA=on it puts them at
 * the peer's address with process_vm_writev (one copy) when the kernel
 * lets it (same user, ptrace rules), and only what that leaves goes
 * through the ring. (Two pipelined copies through a ring that stays in
 * cache beat the kernel's one copy, which pins and maps every page, on the
 * machines measured: docs/perf/pt2pt.md.) An IMM record follows the last byte (R4), so
 * the immediate never overtakes its data. A write that finds the ring full
 * returns SRV_AGAIN with its progress kept in op->note, and the core posts
 * it again later (nothing of the same sender overtakes it meanwhile).
 * The write's local completion is reported by the next poll. A write whose
 * direct copy fails because the peer is gone (ESRCH) or the address is not
 * mapped there (EFAULT) completes with an error and sends no IMM record.
 *
 * Nothing in a record is trusted (the peer may be buggy or hostile): the
 * header is copied once and only the copy is used. A record whose size is
 * zero, runs past the end of the ring or does not end with its stamp's
 * copy, a SKIP that does not end exactly at the end of the ring, or a
 * position the tail has passed with no stamp, makes the rest of what the
 * ring holds unreadable: it is dropped as one, and reading resumes at the
 * tail. A MSG
 * or CHUNK whose length exceeds its record or inline_max, a CHUNK whose
 * bytes do not lie wholly inside one live registration of ours, or an
 * unknown kind is dropped and the ring moves on by the record's size. All
 * drops are logged (rate-limited) and counted; the IMM record that ends a
 * write some of whose CHUNKs were dropped is reported with MPIV_ERR_NET.
 * The source of every completion is the ring's index. What a MSG record
 * says is decoded by the protocol (wire.c), which copies the header once.
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
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "boot/boot.h"
#include "server/shm_copy.h"
#include "server/srv_int.h"
#include "server/srv_ratelimit.h"
#include "server/srv_test_hooks.h"
#include "util/spinlock.h"
#include "util/bias.h"

/* rec_copy's string copy: x86-64 only, and not under a sanitizer, which
 * sees no access made by an asm statement. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include <cpuid.h>
#include <x86intrin.h>
#define SHM_STRING_COPY 1
#endif

/* Bytes per ring: SHM_RING_MAX, halved while the rank's segment (one ring
 * per sender, itself included) would pass SHM_BYTES_PER_RANK, but never
 * below SHM_RING_MIN, and grown until a record holds a whole packet. So
 * /dev/shm holds at most max(8 MiB, ranks x 256 KiB) per rank with
 * packets of up to 64 KiB (2 ranks: two 4 MiB rings; 8 ranks: eight of
 * 1 MiB; 64 ranks: 64 of 256 KiB); MPIV_SHM_RING sets it instead. A window of small messages fills a ring
 * slowly (64 bytes each), and the largest record is a quarter of a ring,
 * so a few big eager messages never lock the small ones out for long. */
#define SHM_BYTES_PER_RANK ((uint64_t)8 << 20)
#define SHM_RING_MAX ((uint64_t)4 << 20)
#define SHM_RING_MIN ((uint64_t)256 << 10)
/* The part of a ring a ping-pong of short records cycles through
 * (rec_begin): a power of two, small enough to stay in a core's cache. */
#define SHM_HOT ((size_t)64 << 10)
/* Records of this many bytes or more (2 KiB messages, CHUNKs), in a ring
 * of at least half look_far bytes (be->far), never start over early:
 * they look whether the ring may start over only once they start past
 * look_far (below), and each one puts off the next look of shorter
 * records by SHM_HOT bytes (rec_begin). Why: a long record copied into
 * lines the receiver's core has read recently, and still holds, must take
 * each of them back from that core first; in a ping-pong that started
 * over at SHM_NEAR or SHM_HOT that was every line of every record, and it
 * cost more than the copy itself, from 2 KiB up to the CHUNKs of a
 * rendezvous. Shorter records hardly differ either way and keep SHM_HOT
 * (docs/perf/pt2pt.md, "Long records go where the receiver's cache is
 * not"). Why the short ones after a long one wait: the RTS or IMM after
 * a CHUNK finds the receiver less than SHM_HOT / 2 behind, and would
 * start the ring over, so that the next message's CHUNKs went into the
 * lines its last one had just been read from. Why not in a shorter ring:
 * all of it fits in the receiver's second-level cache, so no line of it
 * is far, and the nearest lines are the cheapest (SHM_NEAR). */
#define SHM_LOOK_LONG ((size_t)2 << 10)
/* Where records of SHM_LOOK_LONG bytes or more start to look (be->look_far):
 * twice a core's second-level cache, not less than SHM_LOOK_FAR_MIN. Why
 * that far: a ping-pong that starts over when its writes are this far
 * along copies into lines the receiver's core read this many bytes of
 * records (and buffers) ago, which it no longer holds; with half of it
 * the receiver still held many (docs/perf/pt2pt.md). Why not never: the
 * ring's first lap stays bounded where a ring holds more (a page's first
 * write may be slow); a ring no longer than look_far is swept whole. */
#define SHM_LOOK_FAR_MIN ((size_t)1 << 20)
#define SHM_LOOK_FAR_MAX ((size_t)64 << 20)
/* In a ring shorter than half look_far: the part of it a ping-pong of
 * long records cycles through once a look found the receiver done with
 * all it was sent (rec_begin). Why not SHM_HOT: a core's first-level
 * cache holds both rings' hot parts and the messages' buffers only if
 * each ring's is a few KiB; past it, every record's lines come from
 * further out on both sides, and each way of a ping-pong of 4 or 8 KiB
 * messages takes longer the more ring it cycles through, up to about the
 * second-level cache (docs/perf/pt2pt.md, "A ping-pong's records kept in
 * the first-level cache"). A look costs a read of head, one line from the
 * receiver, and a start-over a SKIP, which both pay only once per
 * SHM_NEAR bytes. */
#define SHM_NEAR ((size_t)8 << 10)
/* The shortest and the longest record that looks from SHM_NEAR on. Why
 * not shorter: a start-over leaves the sender only the bytes before it
 * until the receiver passes the SKIP (R2), and a window of short messages
 * sent at once would find so few full; of records this long only a few
 * fit in SHM_NEAR anyway, and a window of them fills SHM_HOT too. Why not
 * longer: two such records and their buffers are past what a first-level
 * cache holds, so a start-over at each one would only add a SKIP. */
#define SHM_NEAR_MIN ((size_t)2 << 10)
#define SHM_NEAR_MAX (2 * SHM_NEAR)
/* Lines of a multi-line record its reader prefetches (poll_ring). */
#define SHM_PREFETCH_LINES 16
/* The unused lines after a long record (rec_span). Why: a reader that has
 * just copied a record of 17 lines or more also fetches the lines past its
 * end (the hardware's prefetch, as far as can be told: software reads in
 * either direction do the same), and those lines are where the sender
 * writes its next record, so the sender had to take them back, one
 * cross-core round trip on the way to that record. Shorter records do
 * not pay it, and SHM_GAP_LINES is the fewest lines that take it away
 * (docs/perf/pt2pt.md, "A gap after a long record"). */
#define SHM_GAP_MIN_LINES 17
#define SHM_GAP_LINES 8
/* How far ahead of its tail a sender asks for the ring's lines (for
 * writing), and the longest record after which it does (rec_begin): one
 * with no gap after it. */
#define SHM_AHEAD_LINES 16
#define SHM_AHEAD_MAX_REC ((size_t)(SHM_GAP_MIN_LINES - 1) * 64)
/* Payload bytes of the longest record short_put writes: SHM_AHEAD_MAX_REC
 * (16 lines) less the header and the stamp's copy. */
#define SHM_SHORT_MAX (SHM_AHEAD_MAX_REC - REC_HDR - REC_TRAILER)

/* Copies into a record shorter than this go in 16-byte pieces
 * (copy_pieces), longer ones by memcpy or a string copy. */
#define SHM_PIECES_MAX ((size_t)768)
/* Bytes a sender copies into a record with one `rep movsb` instead of
 * memcpy, from this many on (rec_copy). Why: a string copy claims each
 * whole destination line without fetching its old contents, and a ring's
 * lines were last read by the receiver's core, so memcpy's stores fetched
 * every line back from it first. Below this size the string copy's
 * latency cost outweighed its bandwidth gain (docs/perf/pt2pt.md,
 * "Records copied in with a string copy"). */
#define SHM_MOVSB_MIN ((size_t)1792)
/* How often a full ring's peer is checked for life (ring_full). */
#define SHM_ALIVE_NS UINT64_C(1000000)
/* One empty poll of a ring in this many reads its tail (R5). */
#define SHM_TAIL_LOOK 64u
/* MPIV_SHM_EAGER_LIMIT's default (0), clamped to a quarter of a ring.
 * Above it the rendezvous streams the bytes through the ring in CHUNKs,
 * both copies at once, while an eager record is copied in whole before it
 * is copied out; so once a message takes much longer to copy than the
 * RTS and RTR take to travel, the stream wins (docs/perf/pt2pt.md has
 * where that is: past 32 KiB, now that long records go where the
 * receiver's cache is not). */
#define SHM_EAGER_DEFAULT ((size_t)32 << 10)
#define SHM_MAGIC UINT64_C(0x4d5049567368326d) /* "MPIVsh2m": the layout of 128-byte pairs */
/* One RDMA write at most: an IMM record's length is 32 bits; a power of
 * two keeps the core's pieces aligned. */
#define SHM_MAX_WRITE ((size_t)1 << 30)
/* Payload bytes of a CHUNK record at most: a write goes through the ring in
 * pieces this small so that the receiver copies one out while the sender
 * copies the next in (two cores, one copy each, at once). One record of a
 * quarter ring would make the two copies take turns, and so would a
 * write of a few CHUNKs: one of fewer than SHM_CHUNK_PIECES CHUNKs goes in
 * CHUNKs of its length over SHM_CHUNK_PIECES, but not shorter than
 * SHM_CHUNK_MIN (shm_rdma_write_imm). Why not short CHUNKs for all: each
 * is a record for the reader to find and a look for the writer, and a
 * window of long messages in CHUNKs of 32 KiB had a few per cent less
 * bandwidth than in CHUNKs of 64 KiB; a 64 KiB message in two of 32 KiB
 * took less time than in one (docs/perf/pt2pt.md). */
#define SHM_CHUNK ((size_t)64 << 10)
#define SHM_CHUNK_MIN ((size_t)32 << 10)
#define SHM_CHUNK_PIECES 8

enum shm_kind { REC_MSG = 1, REC_CHUNK = 2, REC_IMM = 3, REC_SKIP = 4 };

/* A record's header. The stamp is written last (release), after the rest
 * of the record: the receiver polls the stamp of the record at its head,
 * not the ring's tail, so a small message costs it one cache line from
 * the sender, not two (R3). A record of more than one line ends with a
 * copy of the stamp (its last 8 bytes), written before the header's:
 * a size that does not match what was written finds no copy there. */
struct shm_rec {
    _Atomic uint64_t stamp; /* the record's ring position ^ the ring's key  */
    uint32_t kind;  /* enum shm_kind                                         */
    uint32_t len;   /* MSG, CHUNK: payload bytes; IMM: the write's length   */
    uint32_t lines; /* the record's size in 64-byte lines, header included */
    uint32_t imm;   /* IMM                                                   */
    unsigned char data[]; /* CHUNK: the receiver's address (8 bytes), then
                             the payload                                    */
};
#define REC_HDR sizeof(struct shm_rec)
#define REC_TRAILER sizeof(uint64_t)
#define CHUNK_ADDR sizeof(uint64_t)
_Static_assert(sizeof(struct shm_rec) == 24, "record header");

/* The counters and the records each start a 128-byte pair of lines of
 * their own. Why: a core's adjacent-line prefetch fetches the other line
 * of a 128-byte pair along with the one it misses on, so a line one side
 * writes must not share a pair with a line the other side writes. With
 * head next to the records' first line, which the sender rewrites at
 * every start-over (rec_begin), the sender's stores there fetched head
 * too: its reads of head then found the receiver's new value already in
 * its cache, which hid how far the receiver's core is (shm_copy.h). */
#define SHM_PAIR 128
struct shm_ring {
    _Alignas(SHM_PAIR) _Atomic uint64_t tail; /* bytes written (the sender's)  */
    _Alignas(SHM_PAIR) _Atomic uint64_t head; /* bytes consumed (the receiver's) */
    _Alignas(SHM_PAIR) unsigned char bytes[];
};

struct shm_seg_header {
    uint64_t magic;
    uint32_t nranks, pad;
    uint64_t ring_bytes, ring_size, inline_max;
    uint64_t key; /* the stamps' key of every ring in the segment (R5)    */
};
_Static_assert(sizeof(struct shm_seg_header) <= SHM_PAIR, "the header is before the first ring");

/* A live registration: [start, end) may receive CHUNK records. */
struct shm_reg {
    uintptr_t start, end;
    struct shm_reg *prev, *next;
};

/* A write that could not be done: reported by the next poll with err. */
struct shm_done {
    struct srv_rdma_op *op;
    int err;
};

/* What a sender keeps of its ring at one peer, on a line of its own: a send
 * touches this one line of its own state, and threads sending to
 * different peers share none. `ring` and `key` are set once, when the
 * peer's segment is mapped, before anybody sends; the rest is under
 * `lock` (R1). */
struct shm_out {
    _Alignas(64) util_spinlock lock;
    uint32_t caught_up;    /* 1: the last look at head (rec_begin) found the
                              receiver done with every record              */
    struct shm_ring *ring; /* our ring in the peer's segment, once mapped  */
    uint64_t key;          /* the stamps' key of that ring (R5)            */
    uint64_t tail;         /* the ring's tail, which only we write (R1): a
                              send reads this copy, so the receiver's
                              looks at the ring's tail (R5) never make it
                              miss                                         */
    uint64_t seen_head;    /* the last head of the ring we read (it only
                              grows), so a send that fits reads no line of
                              the receiver                                 */
    uint64_t hot_check;    /* the tail at which the next short record looks
                              whether it may start over (rec_begin); a long
                              one in a long ring moves it on (be->far)     */
    uint64_t ahead;        /* the position up to which the ring's lines
                              were asked for (rec_begin)                   */
    struct shm_copy_choice copy; /* how long payloads are copied in
                                    (rec_copy, shm_copy.h)                 */
};
_Static_assert(sizeof(struct shm_out) == 64, "a sender's state is one line");

struct srv_backend {
    int rank, size;
    /* The ranks of our host (ourselves included), in rank order: the only
     * ones this backend serves. All of the job in a one-host job; in a
     * mixed job (MPIV_NET=auto across hosts) the others go through the
     * network backend and have no ring, no mapping and lidx -1. */
    int nlocal;
    int *locals; /* [nlocal]: global ranks                                */
    int *lidx;   /* [size]: index in locals, or -1 (another host)         */
    size_t pkt_data;   /* payload bytes of a packet                         */
    uint64_t ring_bytes; /* record space per ring, a power of two           */
    size_t look_far;   /* where long records look for a start-over, and */
    bool far;          /* whether the ring is long enough for it
                          (SHM_LOOK_LONG's and SHM_LOOK_FAR_MIN's comments;
                          look_far_set)                                    */
    size_t rec_max;    /* payload bytes of the largest record (a quarter
                          of the ring, less the header and trailer)        */
    uint64_t key;      /* R5: the stamps' key of the rings we receive on  */
    size_t inline_max; /* payload bytes of the largest MSG record         */
    size_t ring_size;  /* counters + record space                          */
    size_t seg_size;
    size_t shm_eager;  /* MPIV_SHM_EAGER_LIMIT                              */
    size_t shm_ring;   /* MPIV_SHM_RING (0: chosen by the rank count)       */
    char name[64];     /* our segment's name while it is linked            */
    unsigned char *mine;   /* our segment: rings[s] for each sender s     */
    unsigned char **peer;  /* peer[r]: rank r's segment, mapped            */
    pid_t *pid;            /* for process_vm_writev                        */
    struct shm_out *out;   /* [size]: our ring at each peer (R1)           */
    uint32_t *empty_polls; /* per sender: polls that found no stamp        */
    _Atomic uint64_t *alive_at; /* per peer: when ring_full last checked */
    uint64_t *head;        /* R1: our consumer's copy of head, per sender;
                              ahead of the ring's own while borrowed       */
    int *dirty;            /* senders whose head waits for shm_release     */
    int ndirty;
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
    return (struct shm_ring *)(seg + SHM_PAIR + (size_t)be->lidx[sender] * be->ring_size);
}

/* The record space a payload of len bytes takes (a multiple of 64): one
 * line, or more ending with the stamp's copy. */
static size_t rec_bytes(size_t len)
{
    if (REC_HDR + len <= 64)
        return 64;
    return (REC_HDR + len + REC_TRAILER + 63) & ~(size_t)63;
}

/* The ring space a record of `bytes` (rec_bytes, or lines * 64) takes: the
 * record, and after a long one its gap (SHM_GAP_LINES). A SKIP has none:
 * it ends at the end of the ring. */
static size_t rec_span(size_t bytes)
{
    return bytes >= SHM_GAP_MIN_LINES * 64 ? bytes + SHM_GAP_LINES * 64 : bytes;
}

#ifdef SHM_STRING_COPY
/* Whether the CPU's `rep movsb` is its fast one (ERMS); set by shm_init
 * (relaxed: every thread that sets it stores the same value). */
static _Atomic bool string_copy_ok;
#endif

#ifdef SHM_STRING_COPY
/* SHM_COPY_NEAR_NS in time-stamp counter ticks, 0 if the counter's rate
 * is unknown (shm_copy.h, C4); set by shm_init (relaxed: every thread
 * that sets it stores about the same value, and any is good enough). */
static _Atomic uint32_t near_ticks;

/* The counter's ticks per ns against the monotonic clock, over 100 us;
 * 0 without an invariant counter (its rate would follow the core's). */
static uint32_t near_ticks_probe(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8)))
        return 0;
    uint64_t n0 = util_now_ns(), t0 = __rdtsc(), n1;
    while ((n1 = util_now_ns()) - n0 < 100000)
        ;
    double per_ns = (double)(__rdtsc() - t0) / (double)(n1 - n0);
    double t = per_ns * SHM_COPY_NEAR_NS;
    return t >= 1 && t < UINT16_MAX ? (uint32_t)t : 0;
}
#endif

static void string_copy_probe(void)
{
#ifdef SHM_STRING_COPY
    unsigned a, b, c, d;
    bool erms = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 9));
    atomic_store_explicit(&string_copy_ok, erms, memory_order_relaxed);
    if (erms && !atomic_load_explicit(&near_ticks, memory_order_relaxed))
        atomic_store_explicit(&near_ticks, near_ticks_probe(), memory_order_relaxed);
#endif
}

static void shm_finalize(struct srv_backend *be);

/* Twice the second-level cache of the core we run on, as the C library
 * reports it, within SHM_LOOK_FAR_MIN..SHM_LOOK_FAR_MAX; where it reports
 * none, twice SHM_LOOK_FAR_MIN. */
static size_t look_far_bytes(void)
{
#ifdef _SC_LEVEL2_CACHE_SIZE /* a glibc extension */
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#else
    long l2 = 0;
#endif
    size_t far = l2 > 0 ? 2 * (size_t)l2 : 2 * SHM_LOOK_FAR_MIN;
    if (far < SHM_LOOK_FAR_MIN)
        return SHM_LOOK_FAR_MIN;
    return far > SHM_LOOK_FAR_MAX ? SHM_LOOK_FAR_MAX : far;
}

/* Sets where long records look for a start-over, and whether they do
 * (the ring is at least half that long). */
static void look_far_set(struct srv_backend *be, size_t look_far)
{
    be->look_far = look_far;
    be->far = be->ring_bytes >= look_far / 2;
}

static int shm_init(const struct util_config *cfg, int rank, int size, struct srv_backend **out)
{
    string_copy_probe();
    const int *host = NULL;
    int rc = srv_host_map(size, &host);
    if (rc)
        return rc;
    int nlocal = 0;
    for (int r = 0; r < size; r++)
        nlocal += host[r] == host[rank];
    /* Forced (MPIV_NET=shm), it carries everything, so every rank must be
     * here; under auto the core gives it only the ranks of our host. */
    if (nlocal != size && cfg->net == UTIL_NET_SHM)
        return util_err(MPIV_ERR_NET, "MPIV_NET=shm needs every rank on one host; use auto "
                                      "(shm on each host, the network between hosts), ofi or "
                                      "ibv across hosts");
    struct srv_backend *be = calloc(1, sizeof *be);
    if (!be)
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory");
    be->rank = rank;
    be->size = size;
    be->nlocal = nlocal;
    be->locals = calloc((size_t)nlocal, sizeof *be->locals);
    be->lidx = calloc((size_t)size, sizeof *be->lidx);
    if (!be->locals || !be->lidx) {
        shm_finalize(be);
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory");
    }
    for (int r = 0, k = 0; r < size; r++) {
        be->lidx[r] = host[r] == host[rank] ? k : -1;
        if (be->lidx[r] >= 0)
            be->locals[k++] = r;
    }
    be->ring_bytes = SHM_RING_MAX;
    while (be->ring_bytes > SHM_RING_MIN &&
           be->ring_bytes * (uint64_t)nlocal > SHM_BYTES_PER_RANK)
        be->ring_bytes /= 2;
    if (cfg->shm_ring) /* MPIV_SHM_RING: a power of two (config.c) */
        be->ring_bytes = (uint64_t)cfg->shm_ring;
    be->shm_eager = (size_t)cfg->shm_eager_limit;
    be->shm_ring = (size_t)cfg->shm_ring;
    be->peer = calloc((size_t)size, sizeof *be->peer);
    be->pid = calloc((size_t)size, sizeof *be->pid);
    be->out = aligned_alloc(64, (size_t)size * sizeof *be->out);
    if (be->out)
        memset(be->out, 0, (size_t)size * sizeof *be->out);
    be->head = calloc((size_t)size, sizeof *be->head);
    be->dirty = calloc((size_t)size, sizeof *be->dirty);
    be->empty_polls = calloc((size_t)size, sizeof *be->empty_polls);
    be->alive_at = calloc((size_t)size, sizeof *be->alive_at);
    be->write_broken = calloc((size_t)size, sizeof *be->write_broken);
    atomic_init(&be->cma, cfg->shm_cma ? 1 : 0);
    atomic_init(&be->ndone, 0);
    util_spin_init(&be->done_lock);
    util_spin_init(&be->reg_lock);
    be->memo_epoch = UINT64_MAX; /* no memo yet */
    if (!be->peer || !be->pid || !be->out || !be->head || !be->write_broken || !be->dirty ||
        !be->empty_polls || !be->alive_at) {
        shm_finalize(be);
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory");
    }
    *out = be;
    /* MPIV_SHM_COPY: 0 auto (chosen per ring), 1 whole, 2 pieces */
    int way = cfg->shm_copy == 1 ? SHM_COPY_WHOLE : cfg->shm_copy == 2 ? SHM_COPY_PIECES : -1;
    for (int r = 0; r < size; r++) {
        util_spin_init(&be->out[r].lock);
        be->out[r].copy = shm_copy_choice_init(way);
    }
    return MPIV_SUCCESS;
}

static int shm_reg_pool(struct srv_backend *be, struct pkt_pool *pool)
{
    be->pkt_data = pkt_data_size(pool);
    /* a record must hold a whole packet (MPIV_PACKET_SIZE may be large) */
    if (be->ring_bytes / 4 - REC_HDR - REC_TRAILER < be->pkt_data &&
        be->ring_bytes == (uint64_t)be->shm_ring)
        return util_err(MPIV_ERR_CONFIG,
                        "MPIV_SHM_RING=%zu: a ring must hold 4 packets of MPIV_PACKET_SIZE=%zu",
                        (size_t)be->ring_bytes, be->pkt_data + UTIL_PACKET_HEADER_BYTES);
    while (be->ring_bytes / 4 - REC_HDR - REC_TRAILER < be->pkt_data)
        be->ring_bytes *= 2;
    be->rec_max = be->ring_bytes / 4 - REC_HDR - REC_TRAILER;
    look_far_set(be, look_far_bytes());
    size_t want = (be->shm_eager ? be->shm_eager : SHM_EAGER_DEFAULT) + UTIL_PACKET_HEADER_BYTES;
    if (be->shm_eager && want > be->rec_max)
        return util_err(MPIV_ERR_CONFIG,
                        "MPIV_SHM_EAGER_LIMIT=%zu: with %d ranks a ring holds %zu bytes "
                        "(MPIV_SHM_RING), and one message may take at most a quarter of it: "
                        "%zu bytes of payload",
                        be->shm_eager, be->nlocal, (size_t)be->ring_bytes,
                        be->rec_max - UTIL_PACKET_HEADER_BYTES);
    be->inline_max = want < be->rec_max ? want : be->rec_max;
    if (be->inline_max < be->pkt_data)
        be->inline_max = be->pkt_data;
    be->ring_size = sizeof(struct shm_ring) + (size_t)be->ring_bytes;
    be->seg_size = SHM_PAIR + (size_t)be->nlocal * be->ring_size;
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
    /* populated: the rings' pages are faulted in here, once, rather than
     * one by one on the data path during the first lap of each ring */
    void *p = mmap(NULL, be->seg_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: mmap of %zu bytes: %s", be->seg_size,
                        strerror(errno));
    be->mine = p;
    struct shm_seg_header *h = p;
    h->magic = SHM_MAGIC;
    h->nranks = (uint32_t)be->nlocal;
    h->ring_bytes = be->ring_bytes;
    h->ring_size = be->ring_size;
    h->inline_max = be->inline_max;
    /* R5 */
    be->key = util_random_u64() | UINT64_C(1) << 63;
    h->key = be->key;
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
    void *p = mmap(NULL, be->seg_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return util_err(MPIV_ERR_NET, "shm: mapping rank %d's segment: %s", r, strerror(errno));
    be->peer[r] = p;
    const struct shm_seg_header *h = p;
    if (h->magic != SHM_MAGIC || h->nranks != (uint32_t)be->nlocal ||
        h->ring_bytes != be->ring_bytes || h->inline_max != be->inline_max)
        return util_err(MPIV_ERR_NET, "shm: rank %d's segment does not match ours (different "
                                      "MPIV_PACKET_SIZE or MPIV_SHM_EAGER_LIMIT?)", r);
    be->out[r].key = h->key;
    be->out[r].ring = ring_of(be, p, be->rank);
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
    if (!mine.key)
        mine.key = util_random_u64();
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
    /* every rank creates its segment, then (barrier) maps the others' of
     * its host; the allgathers span the whole job (every rank runs them),
     * only the answers of our host's ranks count here */
    int made = create_segment(be, key);
    int ok = made == MPIV_SUCCESS, oks = 0;
    int *each = calloc((size_t)be->size, sizeof *each);
    if (!each)
        return util_err(MPIV_ERR_NO_RESOURCES, "shm: out of memory");
    rc = boot_allgather(&ok, sizeof ok, each);
    for (int k = 0; rc == MPIV_SUCCESS && k < be->nlocal; k++)
        oks += each[be->locals[k]];
    if (rc == MPIV_SUCCESS && oks != be->nlocal && made == MPIV_SUCCESS)
        rc = util_err(MPIV_ERR_NET, "shm: %d of %d ranks could not create their segment",
                      be->nlocal - oks, be->nlocal);
    if (made != MPIV_SUCCESS)
        rc = made;
    for (int k = 0; rc == MPIV_SUCCESS && k < be->nlocal; k++) {
        int r = be->locals[k];
        if (r == be->rank) {
            be->peer[r] = be->mine;
            be->out[r].key = be->key;
            be->out[r].ring = ring_of(be, be->mine, be->rank);
        } else {
            rc = map_peer(be, key, r);
        }
    }
    /* everybody has mapped everybody (or failed): nothing needs the names */
    ok = rc == MPIV_SUCCESS;
    int brc = boot_allgather(&ok, sizeof ok, each);
    if (be->name[0]) {
        shm_unlink(be->name);
        be->name[0] = '\0';
    }
    oks = 0;
    for (int k = 0; brc == MPIV_SUCCESS && k < be->nlocal; k++)
        oks += each[be->locals[k]];
    free(each);
    if (rc)
        return rc;
    if (brc)
        return brc;
    if (oks != be->nlocal)
        return util_err(MPIV_ERR_NET, "shm: %d of %d ranks could not map the others' segments",
                        be->nlocal - oks, be->nlocal);
    return MPIV_SUCCESS;
}

/* Where a record is being written: its ring, its position and the tail
 * that publishes it. */
struct rec_spot {
    struct shm_ring *g;
    struct shm_out *o; /* be->out[peer] */
    uint64_t *tail; /* be->out[peer].tail */
    uint64_t pos, end, key;
};

/* The ring's head (acquire: the receiver is done with the bytes below
 * it), read for rec_begin, o's lock held. Where a string copy is used,
 * a read that finds the head moved since the last one is timed: the line
 * came from the receiver's core, and how long that took chooses how long
 * payloads are copied in (shm_copy.h, C2). */
static inline uint64_t head_read(struct shm_out *o, struct shm_ring *g)
{
#ifdef SHM_STRING_COPY
    uint32_t near = atomic_load_explicit(&near_ticks, memory_order_relaxed);
    if (near && !o->copy.fixed) {
        _mm_lfence();
        uint64_t t0 = __rdtsc();
        _mm_lfence();
        uint64_t h = atomic_load_explicit(&g->head, memory_order_acquire);
        _mm_lfence();
        uint64_t t = __rdtsc() - t0;
        if (h != o->seen_head)
            shm_copy_learn(&o->copy, t, near);
        return h;
    }
#endif
    (void)o;
    return atomic_load_explicit(&g->head, memory_order_acquire);
}

/* Asks now for the lines the next records of o's ring will take, from
 * `end` (the tail once the record being written is published), for
 * writing. Each record's lines come from the receiver's core, which read
 * them a lap ago; a short record's copy stalls on them one or two at a
 * time, and its stores fill the store buffer while they come. Asked for
 * SHM_AHEAD_LINES ahead, their transfers overlap the copies before them:
 * each line once, as the tail comes within reach of it. Only lines the
 * receiver is known to be done with (below seen_head + the ring), so
 * that none is taken from a receiver still to read it. A prefetch is only
 * a hint: one the ring's next wrap makes useless costs nothing but
 * itself. o's lock held. */
static inline void rec_ahead(struct srv_backend *be, struct shm_out *o, uint64_t end)
{
    uint64_t from = o->ahead > end ? o->ahead : end;
    uint64_t to = end + SHM_AHEAD_LINES * 64;
    if (to > o->seen_head + be->ring_bytes)
        to = o->seen_head + be->ring_bytes;
    for (uint64_t p = from; p < to; p += 64)
        __builtin_prefetch(o->ring->bytes + (p & (be->ring_bytes - 1)), 1);
    if (to > from)
        o->ahead = to;
}

/* Room for a record of len payload bytes in our ring at `peer`: returns
 * where to write it and fills in *at (with a SKIP record written and
 * stamped first if it would not fit before the end of the ring), or NULL
 * when the ring is full (R2). be->out[peer].lock held. */
static struct shm_rec *rec_begin(struct srv_backend *be, int peer, size_t len,
                                 struct rec_spot *at)
{
    struct shm_out *o = &be->out[peer];
    at->g = o->ring;
    at->o = o;
    at->tail = &o->tail;
    uint64_t t = *at->tail;
    size_t off = (size_t)(t & (be->ring_bytes - 1));
    size_t bytes = rec_bytes(len), need = rec_span(bytes), to_end = (size_t)be->ring_bytes - off;
    bool wrap = need > to_end;
    /* Start over early when the receiver keeps up: the first record past
     * each SHM_HOT boundary looks at head, and if the receiver is less
     * than SHM_HOT / 2 behind, the record goes to the beginning after a
     * SKIP. A ping-pong or a window of small messages then cycles through
     * the first SHM_HOT bytes or so, which stay in cache, instead of
     * sweeping megabytes of ring whose lines miss each lap. The bytes the
     * SKIP jumps over count as used until the receiver passes it, so the
     * room left behind the receiver is what bounds the wrap: with the
     * receiver that close to the SKIP, that room is short only briefly. A
     * burst that outruns the receiver leaves it far behind, and then
     * uses the whole ring as before, paying one read of head per SHM_HOT
     * bytes. In a ring long enough (be->far), a record of SHM_LOOK_LONG
     * bytes or more looks instead at each record once past look_far, and
     * puts off the short records' next look by SHM_HOT; in a shorter one,
     * while the last look found the receiver done with everything (a
     * ping-pong), a record of SHM_NEAR_MIN bytes or more looks from
     * SHM_NEAR on. */
    bool longrec = be->far && bytes >= SHM_LOOK_LONG;
    bool near = !be->far && o->caught_up && bytes >= SHM_NEAR_MIN && bytes <= SHM_NEAR_MAX;
    bool look = !wrap && (near ? off >= SHM_NEAR
                               : off >= SHM_HOT &&
                                     (longrec ? off >= be->look_far : t >= o->hot_check));
    if (look) {
        o->hot_check = (t | (SHM_HOT - 1)) + 1;
        o->seen_head = head_read(o, at->g);
        uint64_t lag = t - o->seen_head;
        wrap = lag <= SHM_HOT / 2 && lag + need <= off;
        o->caught_up = lag == 0;
    }
    size_t span = wrap ? to_end + need : need;
    if (t + span - o->seen_head > be->ring_bytes) {
        o->seen_head = head_read(o, at->g);
        if (t + span - o->seen_head > be->ring_bytes)
            return NULL;
    }
    at->key = o->key;
    at->pos = t;
    if (wrap) {
        struct shm_rec *skip = (struct shm_rec *)(at->g->bytes + off);
        skip->kind = REC_SKIP;
        skip->len = 0;
        skip->lines = (uint32_t)(to_end / 64);
        /* release: R3 (a SKIP's payload is never read: no stamp's copy) */
        atomic_store_explicit(&skip->stamp, t ^ at->key, memory_order_release);
        off = 0;
        at->pos = t + to_end;
    }
    at->end = t + span;
    if (longrec)
        o->hot_check = at->end + SHM_HOT;
    /* A long record's copy keeps enough transfers in flight by itself,
     * and more requests only compete with it: none after one (after one
     * of 17 lines, asking ahead took back what the gap gives; docs/perf/
     * pt2pt.md has the measurements). */
    if (bytes <= SHM_AHEAD_MAX_REC)
        rec_ahead(be, o, at->end);
    return (struct shm_rec *)(at->g->bytes + off);
}

/* Publishes a record of `lines` lines: its stamp's copy, its stamp, then
 * the tail (R3). */
static void rec_publish(const struct rec_spot *at, struct shm_rec *r, uint32_t lines)
{
    uint64_t stamp = at->pos ^ at->key;
    r->lines = lines;
    if (lines > 1)
        memcpy((unsigned char *)r + (size_t)lines * 64 - REC_TRAILER, &stamp, REC_TRAILER);
    /* release: the record's contents before the receiver can see it (R3) */
    atomic_store_explicit(&r->stamp, stamp, memory_order_release);
    atomic_store_explicit(&at->g->tail, at->end, memory_order_release);
    *at->tail = at->end;
}

/* Fills in the size of a record of len payload bytes and publishes it. */
static void rec_commit(const struct rec_spot *at, struct shm_rec *r, size_t len)
{
    rec_publish(at, r, (uint32_t)(rec_bytes(len) / 64));
}

/* A string copy of n bytes into a record. Its stores may become visible
 * out of order among themselves, but not after a later store (Intel SDM
 * vol. 3A, "Memory-Ordering Model for String Operations on Write-Back
 * Memory"; every lock released by a plain store after a memcpy that glibc
 * does with `rep movsb` relies on the same), so the stamp's release store
 * after it still publishes them all (R3). */
#ifdef SHM_STRING_COPY
static inline void string_copy(unsigned char *dst, const void *src, size_t n)
{
    __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}
#endif

/* Copies n bytes in 16-byte pieces, the last one ending at n (it may
 * overlap the one before it; under 16 bytes, memcpy). For a record's
 * bytes past its first line, under SHM_PIECES_MAX: glibc's memcpy made
 * ping-pongs of 144-224 B and 288 B messages about a line transfer slower
 * than their neighbours of the same line count (docs/perf/pt2pt.md,
 * "Record tails copied in 16-byte pieces"); why its stores cost that was
 * not found. */
static __attribute__((noinline)) void copy_pieces(unsigned char *dst, const void *src, size_t n)
{
    const unsigned char *s = src;
    if (n < 16) {
        memcpy(dst, s, n);
        return;
    }
    size_t i = 0;
    for (; i + 16 < n; i += 16)
        memcpy(dst + i, s + i, 16);
    memcpy(dst + n - 16, s + n - 16, 16);
}

/* Copies n bytes into a record of the ring `o` is the sender's state of
 * (its lock held): a long one in the way o->copy chose (shm_copy.h). */
static inline void rec_copy(struct shm_out *o, unsigned char *dst, const void *src, size_t n)
{
#ifdef SHM_STRING_COPY
    if (n >= SHM_MOVSB_MIN && atomic_load_explicit(&string_copy_ok, memory_order_relaxed)) {
        if (n <= SHM_COPY_PIECE) {
            string_copy(dst, src, n);
            return;
        }
        if (!shm_copy_in_pieces(&o->copy, n)) {
            string_copy(dst, src, n);
        } else {
            for (size_t at = 0; at < n; at += SHM_COPY_PIECE)
                string_copy(dst + at, (const unsigned char *)src + at,
                            n - at < SHM_COPY_PIECE ? n - at : SHM_COPY_PIECE);
        }
        return;
    }
#endif
    (void)o;
    if (n < SHM_PIECES_MAX) {
        copy_pieces(dst, src, n);
        return;
    }
    memcpy(dst, src, n);
}

/* Copies bytes [from, to) of a's alen bytes followed by b's into data at
 * the same offsets. */
static inline void put_span(struct shm_out *o, unsigned char *data, const void *a, size_t alen,
                            const void *b, size_t from, size_t to)
{
    if (from < alen) {
        size_t n = (to < alen ? to : alen) - from;
        rec_copy(o, data + from, (const unsigned char *)a + from, n);
        from += n;
    }
    if (from < to)
        rec_copy(o, data + from, (const unsigned char *)b + (from - alen), to - from);
}

/* Writes a MSG record of a's alen bytes followed by b's blen and
 * publishes it (R3). A record of more than one line has its first line
 * written last, just before its stamp: a receiver that waits for the
 * record polls that line, and a line written at the start of the copy and
 * again at its end would be fetched back from the receiver's core a
 * second time, on the way to the next record's stores (docs/perf/pt2pt.md
 * has the measurements). */
static inline void first_line(struct shm_rec *r, const void *hdr, size_t hlen,
                              const void *payload, size_t n);

static void rec_put_msg(const struct rec_spot *at, struct shm_rec *r, const void *a, size_t alen,
                        const void *b, size_t blen)
{
    size_t total = alen + blen, bytes = rec_bytes(total);
    /* the first line's data bytes, written last (a record whose data
     * passes its first line is exactly one of more than one line) */
    size_t first = total > 64 - REC_HDR ? 64 - REC_HDR : total;
    if (first < total)
        put_span(at->o, r->data, a, alen, b, first, total);
    r->kind = REC_MSG;
    r->len = (uint32_t)total;
    first_line(r, a, alen, b, first);
    rec_publish(at, r, (uint32_t)(bytes / 64));
}

/* Whether the process of rank `peer` still exists (a zombie still does:
 * mpiv_run reaps its ranks at once). */
static bool peer_alive(struct srv_backend *be, int peer)
{
    return peer == be->rank || kill(be->pid[peer], 0) == 0 || errno != ESRCH;
}

/* A ring that stays full may belong to a rank that is gone: then the
 * operation fails instead of waiting forever. The check is a system call,
 * and a flood of sends meets a full ring on every retry: it is made at
 * most once in SHM_ALIVE_NS per peer. */
static int ring_full(struct srv_backend *be, int peer, const char *what)
{
    uint64_t now = util_now_ns();
    /* relaxed: a rate limit; any thread may race on it harmlessly */
    if (now - atomic_load_explicit(&be->alive_at[peer], memory_order_relaxed) < SHM_ALIVE_NS)
        return SRV_AGAIN;
    atomic_store_explicit(&be->alive_at[peer], now, memory_order_relaxed);
    if (peer_alive(be, peer))
        return SRV_AGAIN;
    return util_err(MPIV_ERR_PEER, "shm: %s to rank %d: the rank is gone", what, peer);
}

/* Payload bytes of a record of one line. */
#define SHM_LINE_DATA (64 - REC_HDR)

/* Copies n <= SHM_LINE_DATA bytes without a call: a few loads and stores
 * that may overlap, none outside [src, src + n). */
static inline void copy_small(unsigned char *dst, const void *src, size_t n)
{
    const unsigned char *s = src;
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8)
            memcpy(dst + i, s + i, 8);
        memcpy(dst + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(dst, s, 4);
        memcpy(dst + n - 4, s + n - 4, 4);
    } else if (n) {
        dst[0] = s[0];
        dst[n / 2] = s[n / 2];
        dst[n - 1] = s[n - 1];
    }
}

_Static_assert(SHM_AHEAD_MAX_REC < SHM_GAP_MIN_LINES * 64 && SHM_AHEAD_MAX_REC < SHM_NEAR_MIN &&
                   SHM_AHEAD_MAX_REC < SHM_LOOK_LONG,
               "a short record has no gap, never looks from SHM_NEAR and never looks long");

/* Writes the first n <= SHM_LINE_DATA data bytes of a record whose data is
 * hdr's hlen bytes followed by payload's: the protocol's header (the
 * common case) at its constant size, everything else by copy_small, no
 * call either way. */
static inline void first_line(struct shm_rec *r, const void *hdr, size_t hlen,
                              const void *payload, size_t n)
{
    size_t h = hlen < n ? hlen : n;
    if (util_likely(h == UTIL_PACKET_HEADER_BYTES))
        memcpy(r->data, hdr, UTIL_PACKET_HEADER_BYTES); /* a constant size: two stores */
    else
        copy_small(r->data, hdr, h);
    copy_small(r->data + h, payload, n - h);
}

/* Publishes a record short_put or line_put wrote at tail t, ending at end:
 * its stamp, the tail (R3), and asks ahead. o's lock held. */
static inline void short_publish(struct srv_backend *be, struct shm_out *o, struct shm_rec *r,
                                 uint64_t t, uint64_t end)
{
    /* release: the record's contents before its stamp, the stamp before
     * the tail (R3) */
    atomic_store_explicit(&r->stamp, t ^ o->key, memory_order_release);
    atomic_store_explicit(&o->ring->tail, end, memory_order_release);
    o->tail = end;
    rec_ahead(be, o, end);
}

/* Where rec_begin would do nothing for a short record (SHM_SHORT_MAX
 * payload bytes or fewer: an eager message of up to 960 bytes) but take
 * the next `bytes` of ring: no start-over to look for (that look comes once
 * per SHM_HOT bytes), no wrap, and room known from seen_head. Returns the
 * record's place, or NULL: take the general path. o's lock held. */
static inline struct shm_rec *short_begin(struct srv_backend *be, struct shm_out *o, size_t bytes)
{
    uint64_t t = o->tail;
    size_t off = (size_t)(t & (be->ring_bytes - 1));
    if ((off >= SHM_HOT && t >= o->hot_check) || bytes > be->ring_bytes - off ||
        t + bytes - o->seen_head > be->ring_bytes)
        return NULL;
    return (struct shm_rec *)(o->ring->bytes + off);
}

/* A MSG record of hdr's hlen bytes and payload's len written where
 * short_begin allows, without rec_begin's, rec_put_msg's and
 * rec_publish's other cases (a short record has no gap, and asks ahead),
 * and the first line written by first_line: the general
 * path took up to twice the instructions (docs/perf/pt2pt.md, "One path
 * for short records"). line_put is the same for a record of one line
 * (hlen + len <= SHM_LINE_DATA: an eager message of up to 8 bytes), with
 * nothing to split. short_put writes the first line after the others, as
 * rec_put_msg does and for its reason. false: nothing written, take the
 * general path. o's lock held. */
static inline bool line_put(struct srv_backend *be, struct shm_out *o, const void *hdr,
                            size_t hlen, const void *payload, size_t len)
{
    struct shm_rec *r = short_begin(be, o, 64);
    if (!r)
        return false;
    r->kind = REC_MSG;
    r->len = (uint32_t)(hlen + len);
    r->lines = 1;
    first_line(r, hdr, hlen, payload, hlen + len);
    short_publish(be, o, r, o->tail, o->tail + 64);
    return true;
}

static inline bool short_put(struct srv_backend *be, struct shm_out *o, const void *hdr,
                             size_t hlen, const void *payload, size_t len)
{
    size_t total = hlen + len, bytes = rec_bytes(total);
    struct shm_rec *r = short_begin(be, o, bytes);
    if (!r)
        return false;
    uint64_t t = o->tail, stamp = t ^ o->key;
    put_span(o, r->data, hdr, hlen, payload, SHM_LINE_DATA, total);
    r->kind = REC_MSG;
    r->len = (uint32_t)total;
    r->lines = (uint32_t)(bytes / 64);
    first_line(r, hdr, hlen, payload, SHM_LINE_DATA);
    /* the stamp's copy after the first line, in rec_put_msg's and
     * rec_publish's order (docs/perf/pt2pt.md, "One path for short
     * records", has what the other order cost) */
    memcpy((unsigned char *)r + bytes - REC_TRAILER, &stamp, REC_TRAILER);
    short_publish(be, o, r, t, t + bytes);
    return true;
}

/* Writes a MSG record of hdr's hlen bytes and payload's len by line_put or
 * short_put if it is short and may go there; false: take the general path.
 * o's lock held. */
static inline bool quick_put(struct srv_backend *be, struct shm_out *o, const void *hdr,
                             size_t hlen, const void *payload, size_t len)
{
    size_t total = hlen + len;
    if (total <= SHM_LINE_DATA)
        return line_put(be, o, hdr, hlen, payload, len);
    return total <= SHM_SHORT_MAX && short_put(be, o, hdr, hlen, payload, len);
}

static int shm_post_send(struct srv_backend *be, pkt_t *p, int peer)
{
    struct shm_out *o = &be->out[peer];
    util_bias_lock(&o->lock);
    if (quick_put(be, o, p->data, p->len, NULL, 0)) {
        util_bias_unlock(&o->lock);
        return SRV_DONE; /* the data left with the call: p is free */
    }
    struct rec_spot at;
    struct shm_rec *r = rec_begin(be, peer, p->len, &at);
    if (!r) {
        util_bias_unlock(&o->lock);
        return ring_full(be, peer, "send");
    }
    rec_put_msg(&at, r, p->data, p->len, NULL, 0);
    util_bias_unlock(&o->lock);
    return SRV_DONE; /* the data left with the call: p is free */
}

/* The eager fast path: hdr and payload straight into one MSG record. */
static int shm_send_inline(struct srv_backend *be, int peer, const void *hdr, size_t hlen,
                           const void *payload, size_t len)
{
    size_t total = hlen + len;
    if (total > be->inline_max || total < hlen)
        return util_err(MPIV_ERR_ARG, "shm: an inline send of %zu bytes (at most %zu)", total,
                        be->inline_max);
    struct shm_out *o = &be->out[peer];
    util_bias_lock(&o->lock);
    if (quick_put(be, o, hdr, hlen, payload, len)) {
        util_bias_unlock(&o->lock);
        return SRV_DONE;
    }
    struct rec_spot at;
    struct shm_rec *r = rec_begin(be, peer, total, &at);
    if (!r) {
        util_bias_unlock(&o->lock);
        return ring_full(be, peer, "send");
    }
    rec_put_msg(&at, r, hdr, hlen, payload, len);
    util_bias_unlock(&o->lock);
    return SRV_DONE;
}

static size_t shm_inline_max(struct srv_backend *be, int peer)
{
    (void)peer;
    return be->inline_max;
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
    size_t chunk_max = op->len / SHM_CHUNK_PIECES & ~(size_t)63; /* whole lines */
    if (chunk_max < SHM_CHUNK_MIN)
        chunk_max = SHM_CHUNK_MIN;
    if (chunk_max > SHM_CHUNK)
        chunk_max = SHM_CHUNK;
    if (chunk_max > be->rec_max - CHUNK_ADDR)
        chunk_max = be->rec_max - CHUNK_ADDR;
    util_bias_lock(&be->out[op->peer].lock);
    for (;;) {
        size_t off = (size_t)op->note[0];
        size_t n = op->len - off < chunk_max ? op->len - off : chunk_max;
        struct rec_spot at;
        struct shm_rec *c = rec_begin(be, op->peer, off < op->len ? CHUNK_ADDR + n : 0, &at);
        if (!c) {
            util_bias_unlock(&be->out[op->peer].lock);
            int rc = ring_full(be, op->peer, "RDMA write");
            if (rc != SRV_AGAIN) {
                util_log_error("%s", mpiv_error_detail());
                write_finished(be, op, rc);
                return MPIV_SUCCESS;
            }
            return SRV_AGAIN; /* op->note keeps how far it got */
        }
        if (off < op->len) {
            uint64_t raddr = op->raddr + off;
            c->kind = REC_CHUNK;
            c->len = (uint32_t)n;
            memcpy(c->data, &raddr, CHUNK_ADDR);
            rec_copy(at.o, c->data + CHUNK_ADDR, (const char *)op->buf + off, n);
            op->note[0] += n;
            rec_commit(&at, c, CHUNK_ADDR + n);
        } else {
            c->kind = REC_IMM;
            c->len = (uint32_t)op->len;
            c->imm = op->imm;
            rec_commit(&at, c, 0);
            break;
        }
    }
    util_bias_unlock(&be->out[op->peer].lock);
    write_finished(be, op, MPIV_SUCCESS);
    return MPIV_SUCCESS;
}

/* What poll_ring acts on: a copy of a record's header, taken once (a
 * faulty peer may rewrite the record meanwhile). */
struct rec_fields {
    uint32_t kind, len, lines, imm;
    uint64_t raddr; /* CHUNK */
};

/* Counts a bad record from `src` and logs it, rate-limited. */
static void rec_dropped(struct srv_backend *be, int src, const struct rec_fields *c,
                        const char *why)
{
    uint64_t quiet;
    if (srv_ratelimit_hit(&be->drops, &quiet))
        util_log_error("shm: dropped a record from rank %d (kind %" PRIu32 ", %" PRIu32
                       " bytes, %" PRIu32 " lines, address 0x%" PRIx64 "): %s; %" PRIu64
                       " dropped in all, %" PRIu64 " not logged",
                       src, c->kind, c->len, c->lines, c->raddr, why, be->drops.count, quiet);
}

/* Moves the head of every ring whose records the last poll lent out: the
 * core calls it once its handlers are done with them (R3), and the next
 * poll does it first in any case. */
static void shm_release(struct srv_backend *be)
{
    for (int i = 0; i < be->ndirty; i++) {
        int s = be->dirty[i];
        /* release: we are done reading the records below head (R3) */
        atomic_store_explicit(&ring_of(be, be->mine, s)->head, be->head[s],
                              memory_order_release);
    }
    be->ndirty = 0;
}

/* The ring is broken at *h (R5, or a record that cannot be right): if the
 * tail has passed *h, drops all the ring holds (counted once, as c) and
 * moves *h to the tail; returns whether it did. A tail not past *h means
 * the sender has not finished publishing: nothing to do yet. */
static bool ring_skip_to_tail(struct srv_backend *be, int s, struct shm_ring *g, uint64_t *h,
                              const struct rec_fields *c, const char *why)
{
    /* acquire: every stamp below the tail is visible (R3) */
    uint64_t tail = atomic_load_explicit(&g->tail, memory_order_acquire);
    if ((int64_t)(tail - *h) <= 0)
        return false;
    rec_dropped(be, s, c, why);
    *h = tail;
    return true;
}

/* Reads what ring s holds into ev (at most max); returns how many. */
static int poll_ring(struct srv_backend *be, int s, struct srv_cqe *ev, int max)
{
    int out = 0;
    bool lent = false;
    struct shm_ring *g = ring_of(be, be->mine, s);
    uint64_t h = be->head[s], h0 = h;
    /* Our own ring (what we send ourselves: RTRs and writes to our own
     * rank) is empty almost always, and its tail is written by our own
     * threads, so looking at it costs no line from another core (R3's
     * reason to poll stamps instead): an empty poll of it ends here. A
     * record whose tail is not stored yet is found by the next poll.
     * acquire: every stamp below the tail is visible (R3) */
    if (s == be->rank && atomic_load_explicit(&g->tail, memory_order_acquire) == h)
        return 0;
    while (out < max) {
        size_t off = (size_t)(h & (be->ring_bytes - 1));
        /* filled as it is read; zeroed only for the drop paths' log */
        struct rec_fields hd;
        hd.raddr = 0;
        if (h & 63) { /* only after skipping to a tail that was off the grid */
            hd.kind = hd.len = hd.lines = hd.imm = 0;
            if (!ring_skip_to_tail(be, s, g, &h, &hd, "the tail is not on a record boundary"))
                break;
            continue;
        }
        const struct shm_rec *r = (const struct shm_rec *)(g->bytes + off);
        uint64_t stamp = h ^ be->key;
        /* acquire: the record is written (R3) */
        if (atomic_load_explicit(&r->stamp, memory_order_acquire) != stamp) {
            /* nothing here yet, or (R5) no record where the tail has been:
             * the tail is looked at once in SHM_TAIL_LOOK empty polls, so
             * that its line stays with the sender while the reader waits
             * (a broken ring is found a little later, and found all the
             * same) */
            if (++be->empty_polls[s] % SHM_TAIL_LOOK)
                break;
            hd.kind = hd.len = hd.lines = hd.imm = 0;
            uint64_t tail = atomic_load_explicit(&g->tail, memory_order_acquire);
            if ((int64_t)(tail - h) <= 0)
                break;
            /* acquire: the tail's acquire covers a stamp published since */
            if (atomic_load_explicit(&r->stamp, memory_order_acquire) == stamp)
                continue;
            ring_skip_to_tail(be, s, g, &h, &hd, "no record where the tail has passed");
            continue;
        }
        /* what we check is what we act on: one copy of the header */
        memcpy(&hd, &r->kind, 4 * sizeof(uint32_t));
        size_t size = (size_t)hd.lines * 64;
        size_t span = hd.kind == REC_SKIP ? size : rec_span(size); /* where the next one is */
        if (hd.lines == 0 || span > be->ring_bytes - off ||
            (hd.kind == REC_SKIP && size != be->ring_bytes - off)) {
            /* no way to find the next record: skip all that is there */
            if (!ring_skip_to_tail(be, s, g, &h, &hd, "its size overruns the ring"))
                break;
            continue;
        }
        size_t room = size - REC_HDR; /* payload bytes the record holds */
        if (hd.kind != REC_SKIP && hd.lines > 1) {
            /* The record's next lines are on their way from the sender's
             * core: ask for them now, so that the trailer's miss below and
             * the handler's copy overlap instead of following one another.
             * Only the first SHM_PREFETCH_LINES: the copy's own stream
             * fetches the rest, and more requests at once only compete
             * with it (in bounds: size was checked against the ring). */
            size_t pf = size < SHM_PREFETCH_LINES * 64 ? size : SHM_PREFETCH_LINES * 64;
            for (size_t l = 64; l < pf; l += 64)
                __builtin_prefetch(g->bytes + off + l);
            uint64_t copy;
            memcpy(&copy, g->bytes + off + size - REC_TRAILER, REC_TRAILER);
            if (copy != stamp) {
                if (!ring_skip_to_tail(be, s, g, &h, &hd,
                                       "its size is not what its sender wrote"))
                    break;
                continue;
            }
            room -= REC_TRAILER;
        }
        const unsigned char *data = r->data;
        if (hd.kind == REC_SKIP) {
            /* the sender wraps: nothing to do */
        } else if (hd.kind == REC_MSG) {
            if (hd.len > room || hd.len > be->inline_max) {
                rec_dropped(be, s, &hd, "longer than its record or the eager limit");
            } else {
                if (!be->nposted)
                    break; /* no packet to lend with it: it waits in the ring */
                pkt_t *p = be->posted[--be->nposted];
                ev[out++] = (struct srv_cqe){
                    .kind = SRV_CQE_RECV, .src = s, .len = hd.len, .p = p, .data = data};
                lent = true;
            }
        } else if (hd.kind == REC_CHUNK) {
            if (room < CHUNK_ADDR || hd.len > room - CHUNK_ADDR) {
                rec_dropped(be, s, &hd, "longer than its record");
                be->write_broken[s] = true;
            } else {
                memcpy(&hd.raddr, data, CHUNK_ADDR);
                if (!reg_covers(be, hd.raddr, hd.len)) {
                    rec_dropped(be, s, &hd, "not inside a registered region");
                    be->write_broken[s] = true;
                } else {
                    memcpy((void *)(uintptr_t)hd.raddr, data + CHUNK_ADDR, hd.len);
                }
            }
            if (!lent) {
                /* release: done with this CHUNK (R3). A write longer than
                 * the ring streams through it: its sender waits for these
                 * bytes, not for the end of this poll. */
                atomic_store_explicit(&g->head, h + span, memory_order_release);
            }
        } else if (hd.kind == REC_IMM) {
            ev[out++] = (struct srv_cqe){.kind = SRV_CQE_IMM,
                                         .err = be->write_broken[s] ? MPIV_ERR_NET : 0,
                                         .src = s,
                                         .imm = hd.imm,
                                         .len = hd.len};
            be->write_broken[s] = false;
        } else {
            rec_dropped(be, s, &hd, "unknown kind");
        }
        h += span;
    }
    if (h == h0)
        return out;
    be->head[s] = h;
    if (lent)
        be->dirty[be->ndirty++] = s; /* shm_release moves the ring's head */
    else
        /* release: we are done reading the records (R3) */
        atomic_store_explicit(&g->head, h, memory_order_release);
    return out;
}

static int shm_poll(struct srv_backend *be, struct srv_cqe *ev, int max)
{
    shm_release(be); /* what the last poll lent is done with */
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
    /* round robin from next_src, which stays below nlocal (no division
     * on this path) */
    uint32_t start = be->next_src, i = start, n = (uint32_t)be->nlocal;
    for (uint32_t k = 0; k < n && out < max; k++) {
        out += poll_ring(be, be->locals[i], ev + out, max - out);
        if (++i == n)
            i = 0;
    }
    be->next_src = start + 1 == n ? 0 : start + 1;
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

/* --- reads (the receiver-driven rendezvous) ------------------------------- */

/* One process_vm_readv moves at most this much: the kernel cuts every call
 * to just under 2 GiB anyway, and the loop below takes what it returns. */
#define SHM_READ_PIECE ((size_t)1 << 30)

static bool shm_can_read(struct srv_backend *be, int peer)
{
    (void)peer;
    /* relaxed: a hint, both ways are correct (see write_direct) */
    return atomic_load_explicit(&be->cma, memory_order_relaxed) != 0;
}

/* The same permission as write_direct's: process_vm_readv and _writev
 * follow the same ptrace rules, so one refusal turns both off (be->cma). */
static int shm_rdma_read(struct srv_backend *be, void *buf, size_t len, int peer, uint64_t raddr,
                         uint64_t rkey)
{
    (void)rkey; /* a peer names plain virtual addresses (see the top) */
    size_t off = 0;
    while (off < len) {
        if (!atomic_load_explicit(&be->cma, memory_order_relaxed))
            return SRV_NO_READ;
        size_t n = len - off < SHM_READ_PIECE ? len - off : SHM_READ_PIECE;
        struct iovec l = {(char *)buf + off, n};
        struct iovec r = {(void *)(uintptr_t)(raddr + off), n};
        ssize_t got = process_vm_readv(be->pid[peer], &l, 1, &r, 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == ESRCH || errno == EFAULT)) {
            int e = errno, rc = e == ESRCH ? MPIV_ERR_PEER : MPIV_ERR_NET;
            util_err(rc, "shm: reading %zu bytes from rank %d at 0x%" PRIx64 ": %s", len, peer,
                     raddr, e == ESRCH ? "the rank is gone" : strerror(e));
            util_log_error("%s", mpiv_error_detail());
            return rc;
        }
        if (got <= 0) {
            /* EPERM (ptrace rules, a container's seccomp), ENOSYS: the
             * caller moves these bytes another way, and so do later
             * transfers (no more reads, writes through the rings). */
            atomic_store_explicit(&be->cma, 0, memory_order_relaxed);
            util_log_info("shm: process_vm_readv from rank %d: %s; no more direct copies", peer,
                          got < 0 ? strerror(errno) : "no progress");
            return SRV_NO_READ;
        }
        off += (size_t)got;
    }
    return MPIV_SUCCESS;
}

/* --- test hooks (srv_test_hooks.h) ----------------------------------------- */

int srv_shm_test_put_rec(struct srv_backend *be, int peer, uint32_t kind, uint32_t len,
                         uint32_t lines, uint64_t raddr, uint32_t imm, const void *data, size_t n)
{
    size_t addr = kind == REC_CHUNK ? CHUNK_ADDR : 0; /* a CHUNK's payload begins with it */
    if (n > be->rec_max - addr)
        n = be->rec_max - addr;
    struct rec_spot at;
    util_bias_lock(&be->out[peer].lock);
    struct shm_rec *c = rec_begin(be, peer, addr + n, &at);
    if (!c) {
        util_bias_unlock(&be->out[peer].lock);
        return SRV_AGAIN;
    }
    c->kind = kind;
    c->len = len;
    c->imm = imm;
    if (addr)
        memcpy(c->data, &raddr, addr);
    if (data && n)
        memcpy(c->data + addr, data, n);
    uint32_t true_lines = (uint32_t)(rec_bytes(addr + n) / 64);
    if (lines) { /* a lie about its size: the stamp's copy is where the truth says */
        uint64_t stamp = at.pos ^ at.key;
        if (true_lines > 1)
            memcpy((unsigned char *)c + (size_t)true_lines * 64 - REC_TRAILER, &stamp,
                   REC_TRAILER);
        c->lines = lines;
        atomic_store_explicit(&c->stamp, stamp, memory_order_release);
        atomic_store_explicit(&at.g->tail, at.end, memory_order_release);
        *at.tail = at.end;
    } else {
        rec_publish(&at, c, true_lines);
    }
    util_bias_unlock(&be->out[peer].lock);
    return MPIV_SUCCESS;
}

void srv_shm_test_set_tail(struct srv_backend *be, int peer, uint64_t add)
{
    struct shm_out *o = &be->out[peer];
    util_bias_lock(&o->lock); /* the tail's rule (R1) */
    atomic_fetch_add_explicit(&o->ring->tail, add, memory_order_release);
    o->tail += add; /* as a sender that wrote nothing there */
    util_bias_unlock(&o->lock);
}

size_t srv_shm_test_ring_bytes(struct srv_backend *be) { return (size_t)be->ring_bytes; }

size_t srv_shm_test_hot_bytes(void) { return SHM_HOT; }
size_t srv_shm_test_look_long_bytes(void) { return SHM_LOOK_LONG; }
void srv_shm_test_set_look_far(struct srv_backend *be, size_t bytes)
{
    look_far_set(be, bytes ? bytes : look_far_bytes());
}
size_t srv_shm_test_near_bytes(void) { return SHM_NEAR; }

uint64_t srv_shm_test_tail(struct srv_backend *be, int peer)
{
    /* relaxed: read by the sending test thread itself */
    return atomic_load_explicit(&be->out[peer].ring->tail, memory_order_relaxed);
}

uint64_t srv_shm_test_dropped(struct srv_backend *be) { return be->drops.count; }

uint64_t srv_shm_test_ahead(struct srv_backend *be, int peer, uint64_t *seen_head)
{
    struct shm_out *o = &be->out[peer];
    util_bias_lock(&o->lock);
    uint64_t a = o->ahead;
    *seen_head = o->seen_head;
    util_bias_unlock(&o->lock);
    return a;
}

int srv_shm_test_open_segment(struct srv_backend *be, const char *name)
{
    int fd = -1, rc = open_segment(be, name, 0, &fd);
    if (rc == MPIV_SUCCESS)
        close(fd);
    return rc;
}

size_t srv_shm_test_segment_size(struct srv_backend *be) { return be->seg_size; }

int srv_shm_test_copy(struct srv_backend *be, int peer, unsigned *lat, unsigned *samples,
                      unsigned *near)
{
    struct shm_out *o = &be->out[peer];
    util_bias_lock(&o->lock);
    *lat = o->copy.lat;
    *samples = o->copy.samples;
    int way = o->copy.way;
    util_bias_unlock(&o->lock);
#ifdef SHM_STRING_COPY
    *near = atomic_load_explicit(&string_copy_ok, memory_order_relaxed)
                ? atomic_load_explicit(&near_ticks, memory_order_relaxed)
                : 0;
#else
    *near = 0;
#endif
    return way;
}

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
    free(be->locals);
    free(be->lidx);
    free(be->pid);
    free(be->out);
    free(be->head);
    free(be->dirty);
    free(be->empty_polls);
    free((void *)be->alive_at);
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
    .posts_copies = true, /* shm_post_send copies p->data into the ring and is done */
    .post_recv = shm_post_recv,
    .send_inline = shm_send_inline,
    .inline_max = shm_inline_max,
    .release = shm_release,
    .rdma_write_imm = shm_rdma_write_imm,
    .max_write = shm_max_write,
    .mr_reg = shm_mr_reg,
    .mr_dereg = shm_mr_dereg,
    .poll = shm_poll,
    .mr_pins = shm_mr_pins,
    .can_read = shm_can_read,
    .rdma_read = shm_rdma_read,
    .finalize = shm_finalize,
};
