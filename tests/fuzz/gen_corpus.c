/*
 * gen_corpus.c — writes the fuzzer's seed corpus (tests/fuzz/corpus/), or
 * checks that a directory holds exactly what it would write.
 *
 *   gen_corpus DIR          write every seed into DIR
 *   gen_corpus --check DIR  exit 1, naming each seed, if a seed in DIR is
 *                           missing or differs (other files are allowed:
 *                           inputs the fuzzer found)
 *
 * Each seed is a short scenario in the language of fuzz_ops.h: one valid
 * packet of each type in the exchange it belongs to, and sequences that
 * reach the protocol's harder paths (rendezvous to ourselves in pieces,
 * crowded tables, flow control, failures on either side, late and forged
 * packets). The fuzzer mutates from these; they also document what the
 * input language can say.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ops.h"
#include "proto/proto.h"

struct seed {
    unsigned char b[4096];
    size_t n;
};

static void u8(struct seed *s, unsigned v)
{
    if (s->n == sizeof s->b) {
        fprintf(stderr, "gen_corpus: a seed is longer than %zu bytes\n", sizeof s->b);
        exit(2);
    }
    s->b[s->n++] = (unsigned char)v;
}
static void u16(struct seed *s, unsigned v)
{
    u8(s, v & 0xff);
    u8(s, v >> 8 & 0xff);
}
static void u32(struct seed *s, uint32_t v)
{
    u16(s, v & 0xffff);
    u16(s, v >> 16);
}
static void u64(struct seed *s, uint64_t v)
{
    u32(s, (uint32_t)v);
    u32(s, (uint32_t)(v >> 32));
}
static void bytes(struct seed *s, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        u8(s, ((const unsigned char *)p)[i]);
}

/* --- operations ------------------------------------------------------------ */

static void recv_(struct seed *s, int peer, int tag, int ctx, unsigned size)
{
    u8(s, FOP_RECV);
    u8(s, (unsigned)peer);
    u8(s, (unsigned)tag);
    u8(s, (unsigned)ctx);
    u16(s, size);
}

static void send_(struct seed *s, int peer, int tag, int ctx, unsigned size)
{
    u8(s, FOP_SEND);
    u8(s, (unsigned)peer);
    u8(s, (unsigned)tag);
    u8(s, (unsigned)ctx);
    u16(s, size);
}

static void loopback(struct seed *s, int n)
{
    while (n--)
        u8(s, FOP_LOOPBACK);
}

static void write_done(struct seed *s, unsigned flags)
{
    u8(s, FOP_WRITE_DONE);
    u8(s, flags);
}

static void write_(struct seed *s, int rec, unsigned off, unsigned len, unsigned flags)
{
    u8(s, FOP_WRITE);
    u8(s, (unsigned)rec);
    u16(s, off);
    u16(s, len);
    u8(s, flags);
}

static void fault(struct seed *s, enum fuzz_fault what, int times)
{
    u8(s, FOP_FAULT);
    u8(s, what);
    u8(s, (unsigned)(times - 1));
}

/* FOP_IMM: an immediate from rank 1, no bytes written. */
static void imm_from_1(struct seed *s, uint32_t imm, uint32_t len, unsigned err)
{
    u8(s, FOP_IMM);
    u32(s, imm);
    u32(s, len);
    u8(s, err);
}

/* A raw packet from rank 1: the header, then `body` bytes of payload
 * (pattern bytes); its length is header + body unless len >= 0. */
struct raw {
    uint8_t type, status;
    uint16_t ctx;
    int32_t src;
    uint32_t tag, credit;
    uint64_t size, handle;
    size_t body;
    long len; /* -1: header + body */
};

static void packet(struct seed *s, struct raw r)
{
    unsigned char pkt[FUZZ_PACKET_SIZE] = {0};
    struct proto_hdr h;
    memset(&h, 0, sizeof h);
    h.type = r.type;
    h.ctx = r.ctx;
    h.status = r.status;
    h.src = r.src;
    h.tag = r.tag;
    h.credit = r.credit;
    h.size = r.size;
    h.handle = r.handle;
    memcpy(pkt, &h, sizeof h);
    for (size_t i = 0; i < r.body; i++)
        pkt[sizeof h + i] = (unsigned char)(0x40 + i);
    size_t len = r.len >= 0 ? (size_t)r.len : sizeof h + r.body;
    u8(s, FOP_PACKET);
    u16(s, (unsigned)len);
    bytes(s, pkt, len);
}

/* A valid EAGER from rank 1 with `size` payload bytes. */
static void eager_from_1(struct seed *s, int tag, int ctx, unsigned size)
{
    packet(s, (struct raw){.type = PROTO_EAGER, .ctx = (uint16_t)ctx, .src = 1, .tag = (uint32_t)tag,
                           .size = size, .body = size, .len = -1});
}

/* A valid RTS from rank 1; handle is its (made-up) send handle. */
static void rts_from_1(struct seed *s, int tag, int ctx, uint64_t size, uint64_t handle)
{
    packet(s, (struct raw){.type = PROTO_RTS, .ctx = (uint16_t)ctx, .src = 1, .tag = (uint32_t)tag,
                           .size = size, .handle = handle, .len = -1});
}

/* FOP_CRAFT answering record `rec` (FC_REF | FC_ECHO): an RTR for a
 * recorded RTS, an ABORT for a recorded RTR. */
static void answer(struct seed *s, uint8_t type, uint16_t status, int rec, unsigned extra_flags)
{
    u8(s, FOP_CRAFT);
    u8(s, type);
    u8(s, 0); /* ctx (echoed) */
    u16(s, status);
    u8(s, FC_REF | FC_ECHO | extra_flags);
    u8(s, (unsigned)rec);
    u8(s, 0);  /* tag (echoed) */
    u16(s, 0); /* size (echoed) */
    u32(s, 0); /* credit */
    if (type == PROTO_RTR && status == PROTO_RTR_OK) {
        u64(s, 0x7f0000001000ull); /* raddr at rank 1 */
        u64(s, 42);                /* rkey at rank 1 */
        u32(s, 0x00100007u);       /* rank 1's receive handle */
    }
}

/* --- seeds -------------------------------------------------------------------- */

typedef void (*seed_fn)(struct seed *s);

/* One valid packet of each type, in the exchange it belongs to. */
static void seed_eager(struct seed *s)
{
    recv_(s, 1, 1, 0, 32);
    eager_from_1(s, 1, 0, 16);
    eager_from_1(s, 2, 1, 64); /* unexpected, then matched */
    recv_(s, 1, 2, 1, 64);
}

static void seed_rts(struct seed *s)
{
    recv_(s, 1, 2, 0, 300);
    rts_from_1(s, 2, 0, 250, 0x300001); /* we answer with an RTR: record 0 */
    write_(s, 0, 0, 100, 0);
    write_(s, 0, 100, 100, 0);
    write_(s, 0, 200, 50, 0); /* the receive completes */
}

static void seed_rtr(struct seed *s)
{
    send_(s, 1, 3, 0, 250); /* an RTS to rank 1: record 0 */
    answer(s, PROTO_RTR, PROTO_RTR_OK, 0, 0);
    write_done(s, 0);
    write_done(s, WD_DONE_FIRST);
    write_done(s, 0);
    send_(s, 1, 3, 1, 700); /* record 1 */
    answer(s, PROTO_RTR, PROTO_RTR_NONE, 1, 0);
}

static void seed_abort(struct seed *s)
{
    recv_(s, 1, 2, 0, 300);
    rts_from_1(s, 2, 0, 250, 0x300001); /* our RTR: record 0 */
    write_(s, 0, 0, 100, 0);
    /* rank 1's write failed: an ABORT naming our receive handle, taken
     * from record 0 (FC_REF, without FC_ECHO) */
    u8(s, FOP_CRAFT);
    u8(s, PROTO_ABORT);
    u8(s, 0);            /* ctx */
    u16(s, MPIV_ERR_NET); /* status: the error */
    u8(s, FC_REF);       /* flags */
    u8(s, 0);            /* record */
    u8(s, 0);            /* tag */
    u16(s, 0);           /* size */
    u32(s, 0);           /* credit */
}

static void seed_credit(struct seed *s)
{
    /* 64-byte messages cost 160 bytes of 1024: the seventh goes as RTS */
    for (int i = 0; i < 8; i++)
        send_(s, 1, 0, 0, 64);
    packet(s, (struct raw){.type = PROTO_CREDIT, .src = 1, .credit = 1024, .len = -1});
    send_(s, 1, 0, 0, 64);
    /* consuming rank 1's messages makes us owe it credit, given back */
    for (int i = 0; i < 6; i++) {
        recv_(s, 1, 1, 0, 64);
        eager_from_1(s, 1, 0, 64);
    }
}

/* Consuming a quarter of the credit rank 1 may use (256 of 1024 bytes:
 * two 64-byte messages cost 320) makes rank 0 give it back in a CREDIT
 * packet of its own (p2p.c, credit_owe). */
static void seed_credit_owed(struct seed *s)
{
    for (int i = 0; i < 2; i++) {
        recv_(s, 1, 1, 0, 64);
        eager_from_1(s, 1, 0, 64);
    }
}

/* Sequences. */
static void seed_self_eager(struct seed *s)
{
    recv_(s, 0, 1, 0, 64);
    send_(s, 0, 1, 0, 50);
    send_(s, 0, 1, 0, 20);
    recv_(s, 0, 1, 0, 64);
    send_(s, 0, 2, 1, 0);
    recv_(s, 0, 2, 1, 0);
}

static void seed_self_rdv(struct seed *s)
{
    recv_(s, 0, 2, 0, 600);
    send_(s, 0, 2, 0, 550); /* RTS, matched: an RTR to ourselves */
    loopback(s, 1);         /* 6 writes of at most 100 bytes */
    for (int i = 0; i < 6; i++)
        write_done(s, i % 2 ? WD_DONE_FIRST : 0);
    send_(s, 0, 3, 1, 300); /* unexpected RTS */
    recv_(s, 0, 3, 1, 400);
    loopback(s, 1);
    for (int i = 0; i < 3; i++)
        write_done(s, 0);
}

static void seed_self_rdv_fail(struct seed *s)
{
    recv_(s, 0, 2, 0, 600);
    send_(s, 0, 2, 0, 550);
    loopback(s, 1);
    write_done(s, 0);
    write_done(s, WD_FAIL); /* the sender sends us an ABORT */
    write_done(s, WD_FAIL | WD_FAIL_IMM);
    loopback(s, 1);
    for (int i = 0; i < 3; i++)
        write_done(s, 0);
    recv_(s, 0, 1, 0, 200);
    send_(s, 0, 1, 0, 200);
    fault(s, FF_WRITE, 1); /* the first piece cannot be posted */
    loopback(s, 2);
}

static void seed_crowd(struct seed *s)
{
    /* more unexpected messages than the table may hold in packets:
     * heap copies, then matched by receives */
    for (int i = 0; i < 20; i++)
        send_(s, 0, 0, 0, 10);
    for (int i = 0; i < 16; i++)
        send_(s, 0, 1, 0, 200);
    for (int i = 0; i < 20; i++)
        recv_(s, 0, 0, 0, 16);
    for (int i = 0; i < 16; i++)
        recv_(s, 0, 1, 0, 256);
    loopback(s, 16);
    for (int i = 0; i < 32; i++)
        write_done(s, 0);
    for (int i = 0; i < 14; i++)
        eager_from_1(s, 3, 0, 8);
}

static void seed_faults(struct seed *s)
{
    fault(s, FF_SEND, 1); /* our RTR to rank 1 fails: the receive fails */
    recv_(s, 1, 2, 0, 300);
    rts_from_1(s, 2, 0, 250, 0x300001);
    fault(s, FF_MR, 1); /* registering the receive buffer fails */
    recv_(s, 1, 3, 0, 300);
    rts_from_1(s, 3, 0, 250, 0x300002);
    send_(s, 1, 1, 0, 300); /* an RTS: record 2 */
    fault(s, FF_WRITE, 2);
    answer(s, PROTO_RTR, PROTO_RTR_OK, 2, 0);
    fault(s, FF_SEND, 2); /* a send to ourselves fails */
    recv_(s, 0, 1, 1, 300);
    send_(s, 0, 1, 1, 300);
}

static void seed_peer_failed(struct seed *s)
{
    send_(s, 1, 1, 0, 250);
    recv_(s, 1, 2, 0, 300);
    rts_from_1(s, 2, 0, 250, 0x300001);
    send_(s, 1, 3, 0, 400); /* record 2 */
    answer(s, PROTO_RTR, PROTO_RTR_OK, 2, 0);
    write_done(s, 0);
    u8(s, FOP_PEER_FAILED);
    write_done(s, 0);
    send_(s, 1, 0, 0, 10);
    recv_(s, 1, 0, 0, 10);
}

static void seed_bad_packets(struct seed *s)
{
    const size_t hs = sizeof(struct proto_hdr);
    packet(s, (struct raw){.len = 0});
    packet(s, (struct raw){.type = PROTO_EAGER, .src = 1, .len = 10});
    packet(s, (struct raw){.type = 0, .src = 1, .len = -1});
    packet(s, (struct raw){.type = 9, .src = 1, .len = -1});
    packet(s, (struct raw){.type = PROTO_EAGER, .src = 0, .len = -1});
    packet(s, (struct raw){.type = PROTO_EAGER, .src = 1, .size = 20, .body = 10, .len = -1});
    packet(s, (struct raw){.type = PROTO_EAGER, .src = 1, .size = 90, .body = 90, .len = -1});
    packet(s, (struct raw){.type = PROTO_EAGER, .src = 1, .ctx = PROTO_CTX_COUNT, .len = -1});
    packet(s, (struct raw){.type = PROTO_EAGER, .src = 1, .tag = 0x80000000u, .len = -1});
    packet(s, (struct raw){.type = PROTO_RTS, .src = 1, .size = 9, .handle = 5, .body = 4, .len = -1});
    packet(s, (struct raw){.type = PROTO_RTS, .src = 1, .size = 9, .handle = 0, .len = -1});
    packet(s, (struct raw){.type = PROTO_RTR, .src = 1, .handle = 0, .len = -1});
    packet(s, (struct raw){.type = PROTO_RTR, .src = 1, .handle = 3, .status = 7, .len = -1});
    packet(s, (struct raw){.type = PROTO_RTR, .src = 1, .handle = 3, .status = PROTO_RTR_OK,
                           .len = (long)hs + 8});
    packet(s, (struct raw){.type = PROTO_ABORT, .src = 1, .handle = 3, .status = MPIV_ERR_NET,
                           .body = 1, .len = -1});
    packet(s, (struct raw){.type = PROTO_ABORT, .src = 1, .handle = 1ull << 40,
                           .status = MPIV_ERR_NET, .len = -1});
    packet(s, (struct raw){.type = PROTO_ABORT, .src = 1, .handle = 3, .status = 0, .len = -1});
    packet(s, (struct raw){.type = PROTO_ABORT, .src = 1, .handle = 3, .status = 200, .len = -1});
    packet(s, (struct raw){.type = PROTO_CREDIT, .src = 1, .body = 2, .len = -1});
    packet(s, (struct raw){.type = PROTO_CREDIT, .src = 1, .credit = 0xffffffffu, .len = -1});
    imm_from_1(s, 0x12345, 64, 0); /* names no receive */
    imm_from_1(s, 0, 0, 3);        /* a failed write naming nothing */
}

/* Late, duplicated and misdirected packets naming real handles. */
static void seed_stale(struct seed *s)
{
    send_(s, 1, 1, 0, 250); /* record 0 */
    answer(s, PROTO_RTR, PROTO_RTR_NONE, 0, 0);
    answer(s, PROTO_RTR, PROTO_RTR_NONE, 0, 0); /* duplicate: dropped */
    recv_(s, 1, 2, 0, 300);
    rts_from_1(s, 2, 0, 250, 0x300001); /* record 1 */
    write_(s, 1, 0, 100, 0);
    write_(s, 1, 0, 300, 0);      /* more than it waits for: refused */
    write_(s, 1, 100, 150, 0);    /* completes */
    write_(s, 1, 0, 10, 0);       /* after completion: the NIC refuses */
    answer(s, PROTO_ABORT, MPIV_ERR_NET, 1, 0); /* late: dropped */
    recv_(s, 0, 1, 0, 300);
    /* a matched RTS to ourselves: our RTR to ourselves is record 2, the
     * RTS itself record 3 */
    send_(s, 0, 1, 0, 300);
    answer(s, PROTO_RTR, PROTO_RTR_OK, 3, 0); /* rank 1 names our own send */
    loopback(s, 1);
    for (int i = 0; i < 3; i++)
        write_done(s, 0);
    write_(s, 0, 0, 10, FW_ERR); /* a failed write naming a finished receive */
    send_(s, 1, 2, 1, 200);      /* record 4 */
    answer(s, PROTO_RTR, PROTO_RTR_FAILED, 4, FC_WRONG_SRC);
    answer(s, PROTO_RTR, PROTO_RTR_FAILED, 4, 0);
}

static const struct {
    const char *name;
    seed_fn fn;
} seeds[] = {
    {"eager", seed_eager},
    {"rts", seed_rts},
    {"rtr", seed_rtr},
    {"abort", seed_abort},
    {"credit", seed_credit},
    {"credit_owed", seed_credit_owed},
    {"self_eager", seed_self_eager},
    {"self_rdv", seed_self_rdv},
    {"self_rdv_fail", seed_self_rdv_fail},
    {"crowd", seed_crowd},
    {"faults", seed_faults},
    {"peer_failed", seed_peer_failed},
    {"bad_packets", seed_bad_packets},
    {"stale", seed_stale},
};

int main(int argc, char **argv)
{
    bool check = argc == 3 && strcmp(argv[1], "--check") == 0;
    if (argc != 2 && !check) {
        fprintf(stderr, "usage: %s DIR | --check DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[argc - 1];
    int bad = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        struct seed s = {.n = 0};
        seeds[i].fn(&s);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, seeds[i].name);
        if (check) {
            unsigned char have[sizeof s.b + 1];
            FILE *f = fopen(path, "rb");
            size_t n = f ? fread(have, 1, sizeof have, f) : 0;
            if (f)
                fclose(f);
            if (!f || n != s.n || memcmp(have, s.b, n) != 0) {
                fprintf(stderr, "gen_corpus: %s is %s: regenerate with gen_corpus %s\n", path,
                        f ? "not what gen_corpus writes" : "missing", dir);
                bad = 1;
            }
            continue;
        }
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(s.b, 1, s.n, f) != s.n || fclose(f) != 0) {
            fprintf(stderr, "gen_corpus: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    return bad;
}
