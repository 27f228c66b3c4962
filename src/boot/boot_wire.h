/*
 * boot_wire.h — the wire format of mpiv_run's key-value exchange, shared by
 * the client (src/boot/boot_run.c, inside every rank) and the server
 * (tools/mpiv_run.c). Nothing else belongs here.
 *
 * One TCP connection per rank, kept open from boot_init to
 * boot_finalize. All integers are 32-bit, network byte order.
 *
 *   rank → run   HELLO   magic[8] rank size secret_len secret[secret_len]
 *   run  → rank  ACK     status(0)
 *                        refused: status(1) len why[len], then close
 *                        busy:    status(2), then close: connect again
 *                        (a close without a status word means busy too)
 *   rank → run   GATHER  op(1) len data[len]        (a barrier is len 0)
 *   run  → rank  RESULT  status len body[len]
 *                        status 0: body = every rank's data, rank order
 *                        else:     body = why the exchange failed (text)
 *   rank → run   BYE     op(2) 0                    (then close)
 *
 * A connection that closes without BYE means its rank is gone: every
 * pending and later GATHER of the job fails, so no rank waits for it.
 */
#ifndef MPIV_BOOT_WIRE_H
#define MPIV_BOOT_WIRE_H

#include <stdint.h>

#define BOOT_WIRE_MAGIC "MPIVBT01"
#define BOOT_WIRE_MAGIC_LEN 8

enum boot_wire_op { BOOT_OP_GATHER = 1, BOOT_OP_BYE = 2 };
enum boot_wire_status { BOOT_ST_OK = 0, BOOT_ST_FAILED = 1, BOOT_ST_BUSY = 2 };

/* The job secret is this many random bytes, passed as lowercase hex. */
#define BOOT_SECRET_BYTES 32
#define BOOT_SECRET_HEX (2 * BOOT_SECRET_BYTES)

/* One rank's contribution to one allgather; size × this must fit 32 bits. */
#define BOOT_MAX_BLOB (1u << 20)
#define BOOT_MAX_TOTAL (1u << 30)

#endif
