/*
 * fuzz_ops.h — the input language of the protocol fuzzer (fuzz_proto.c),
 * shared with the seed corpus generator (gen_corpus.c) so both agree on it.
 *
 * An input is a sequence of operations run by rank 0 of a 2-rank job whose
 * network is the harness itself. Each operation is one byte (taken modulo
 * FOP_COUNT_) followed by its arguments, little-endian; an input that ends
 * in the middle of an operation reads zeros for the rest. Rank 1 is the
 * peer the fuzzer speaks for: every packet and immediate the input makes
 * comes from rank 1, as the transport would report it. Rank 0's packets to
 * itself (loopback) and its RDMA writes are queued by the harness and
 * delivered by FOP_LOOPBACK and FOP_WRITE_DONE, in the order the transport
 * keeps, at points the input chooses.
 *
 *   FOP_PACKET      u16 len, then len bytes: a packet from rank 1 with exactly
 *                   these bytes (len modulo the packet size + 1).
 *   FOP_CRAFT       a packet from rank 1 built from fields (see below), so
 *                   that mutations stay near valid packets and can name
 *                   live handles.
 *   FOP_IMM         u32 imm, u32 len, u8 err: an immediate from rank 1 with
 *                   no bytes written (err != 0: the transport reports a
 *                   failed write; its code is 1 + err % (MPIV_ERR_LAST_ - 1)).
 *   FOP_WRITE       u8 rec, u16 off, u16 len, u8 flags: rank 1 writes len
 *                   bytes at off into the buffer that the RTR recorded as
 *                   rec (an RTR rank 0 sent to rank 1), then its
 *                   immediate arrives. FW_ERR: the immediate reports a
 *                   failed write instead; FW_RAW_IMM: a u32 from the input
 *                   replaces the RTR's immediate. A write the registered
 *                   region does not cover is refused, as a NIC would.
 *   FOP_RECV        u8 peer, u8 tag, u8 ctx, u16 size: post a receive (peer
 *                   % 2, tag % FUZZ_TAGS, ctx % 2, size % FUZZ_MAX_MSG).
 *   FOP_SEND        u8 peer, u8 tag, u8 ctx, u16 size: post a send, same
 *                   ranges; its buffer holds fuzz_pattern bytes.
 *   FOP_LOOPBACK    deliver the oldest packet rank 0 sent to itself.
 *   FOP_WRITE_DONE  u8 flags: complete the oldest RDMA write rank 0 posted.
 *                   WD_FAIL: it failed (the writer sees an error; with
 *                   WD_FAIL_IMM the target also gets a failed immediate);
 *                   WD_DONE_FIRST: the writer's completion comes before
 *                   the target's immediate (the order is not defined).
 *   FOP_FAULT       u8 what, u8 n: the next n % 4 + 1 operations of a kind
 *                   fail: what % 3 = 0 srv_send, 1 srv_mr_get, 2 posting
 *                   an RDMA write.
 *   FOP_PEER_FAILED the transport declares rank 1 failed.
 *
 * FOP_CRAFT arguments, in this order:
 *   u8 type, u8 ctx, u16 status, u8 flags, u8 rec,
 *   tag:    u8 (tag % FUZZ_TAGS), or u32 with FC_RAW_TAG
 *   size:   u16, or u64 with FC_BIG_SIZE
 *   handle: u64, absent with FC_REF (then taken from record rec: the send
 *           handle of a recorded RTS, the receive handle of a recorded
 *           RTR, with FC_ECHO its ctx, tag and size too)
 *   u32 credit,
 *   body:   RTR with status 0: u64 raddr, u64 rkey, u32 rhandle;
 *           EAGER: size bytes of payload (at most what a packet holds);
 *           other types: none
 *   delta:  i8 added to the length, only with FC_LEN_DELTA.
 * FC_WRONG_SRC puts rank 0 in the header's source field.
 *
 * Records: every control packet rank 0 sends (to either rank), and the RTS
 * of each rendezvous send to itself, are kept in a ring of FUZZ_RECORDS;
 * rec picks one modulo how many there are.
 */
#ifndef MPIV_FUZZ_OPS_H
#define MPIV_FUZZ_OPS_H

#include <stddef.h>
#include <stdint.h>

enum fuzz_op {
    FOP_PACKET,
    FOP_CRAFT,
    FOP_IMM,
    FOP_WRITE,
    FOP_RECV,
    FOP_SEND,
    FOP_LOOPBACK,
    FOP_WRITE_DONE,
    FOP_FAULT,
    FOP_PEER_FAILED,
    FOP_COUNT_
};

enum fuzz_craft_flags {
    FC_REF = 1,
    FC_ECHO = 2,
    FC_RAW_TAG = 4,
    FC_BIG_SIZE = 8,
    FC_LEN_DELTA = 16,
    FC_WRONG_SRC = 32,
};

enum fuzz_write_flags { FW_ERR = 1, FW_RAW_IMM = 2 };
enum fuzz_done_flags { WD_FAIL = 1, WD_FAIL_IMM = 2, WD_DONE_FIRST = 4 };
enum fuzz_fault { FF_SEND, FF_MR, FF_WRITE, FF_COUNT_ };

/* The harness's configuration of rank 0 (what mpiv_init would read from
 * MPIV_*): small, so that every limit is within a few operations' reach. */
#define FUZZ_PACKET_SIZE 128  /* data bytes of a packet                    */
#define FUZZ_PACKETS 32       /* packets in the pool                       */
#define FUZZ_RECV_DEPTH 8     /* what the transport would keep posted      */
#define FUZZ_EAGER_LIMIT 64   /* below the 96 a packet could carry         */
#define FUZZ_MAX_WRITE 100    /* pieces of a rendezvous write (not a power
                                 of two, so the last piece is short)       */
#define FUZZ_CREDIT_MAX 1024  /* eager bytes in flight per peer            */
#define FUZZ_TAGS 4           /* few tags, so that operations meet         */
#define FUZZ_MAX_MSG 1024     /* message and buffer sizes                  */
#define FUZZ_RECORDS 64

/* The bytes of every message rank 0 sends: a receive from rank 0 that
 * completes without error must hold exactly these (whatever same-key
 * message it matched, they are the same bytes). */
static inline uint8_t fuzz_pattern(unsigned ctx, unsigned tag, size_t i)
{
    return (uint8_t)(i * 7u + tag * 31u + ctx * 101u + 1u);
}

#endif
