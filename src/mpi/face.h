/*
 * face.h — the MPI face's internal header: what its handles point to, the
 * requests it owns beside MPIv's, and the helpers its files share.
 *
 * The face is a layer over the public API only (include/mpiv.h): it never
 * includes src/proto, so MPIv's own path is the native one, and the face's
 * cost on it is its own checks plus the one call into mpiv_*.
 *
 *   env.c    init, finalize, errors and error handlers, communicators, the
 *            small environment calls
 *   type.c   datatypes (predefined and derived), packing, reduction
 *            operations and their kernels
 *   p2p.c    point-to-point, requests and their completion, probes
 *   coll.c   collectives (native ones where MPIv has them, the rest on
 *            point-to-point in a communicator's shadow), non-blocking ones
 */
#ifndef MPIV_MPI_FACE_H
#define MPIV_MPI_FACE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* The MPI calls are the library's interface; everything else of the face
 * is hidden (built with -fvisibility=hidden), so its calls between its
 * own files bind locally. */
#pragma GCC visibility push(default)
#include "mpi.h"
#pragma GCC visibility pop
#include "mpiv.h"

#define FACE_LIKELY(x) __builtin_expect(!!(x), 1)
#define FACE_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Off the fast path: kept out of line, so that the fast path of a call is
 * its checks and a tail call into MPIv. */
#define FACE_COLD __attribute__((noinline, cold))

/* --- datatypes ---------------------------------------------------------- */

/* Kinds of basic elements, which the reduction kernels know. Every type
 * (derived ones too) is made of elements of a single kind. */
enum face_kind {
    K_I8, K_U8, K_I16, K_U16, K_I32, K_U32, K_I64, K_U64,
    K_FLOAT, K_DOUBLE, K_LDOUBLE, K_BYTE, K_BOOL,
    /* the MINLOC / MAXLOC pairs, laid out as their C structs */
    K_FLOAT_INT, K_DOUBLE_INT, K_LONG_INT, K_2INT, K_SHORT_INT, K_LDOUBLE_INT,
    K_NKINDS
};

/* Packed form: a type's elements one after another, each element's basic
 * elements in order with no gaps between them (a pair keeps its C struct's
 * layout, padding included: `wire` bytes per element). A type is
 * contiguous when its memory layout is its packed form; only then is a
 * buffer handed to MPIv as it is. lb is always 0. */
struct mpiv_mpi_type {
    size_t size;        /* MPI_Type_size: bytes of data per element        */
    size_t extent;      /* bytes from one element to the next              */
    size_t wire;        /* bytes per element in packed form                */
    size_t nbasic;      /* basic elements per element                      */
    enum face_kind kind;
    bool contig;
    bool predefined;
    bool committed;
    /* derived: count blocks of blocklen elements of base, stride bytes
     * apart (a contiguous type is one block) */
    MPI_Datatype base;
    size_t count, blocklen;
    ptrdiff_t stride;
    _Atomic int refs; /* the handle's own, one per type derived from it and
                         one per pending non-blocking collective using it */
};

/* A type the calls may use: not NULL, predefined or committed. */
static inline bool face_type_usable(MPI_Datatype t) { return t && (t->predefined || t->committed); }

/* MPIv's own element type for a kind, or 0 where MPIv has none. */
mpiv_datatype_t face_native_type(enum face_kind k);
size_t face_kind_size(enum face_kind k);
/* Copies n elements of t between its memory layout and packed form. */
void face_pack(MPI_Datatype t, const void *src, size_t n, void *dst);
void face_unpack(MPI_Datatype t, const void *src, size_t n, void *dst);
/* A reference to a derived type for an operation that outlives the call
 * (MPI_Type_free may come first); predefined types are not counted. */
void face_type_hold(MPI_Datatype t);
void face_type_release(MPI_Datatype t);

/* --- operations --------------------------------------------------------- */

enum face_opcode {
    OP_MAX, OP_MIN, OP_SUM, OP_PROD, OP_LAND, OP_BAND, OP_LOR, OP_BOR,
    OP_LXOR, OP_BXOR, OP_MINLOC, OP_MAXLOC, OP_USER
};

struct mpiv_mpi_op {
    enum face_opcode code;
    mpiv_op_t native; /* MPIv's built-in, or MPIV_OP_NULL */
    MPI_User_function *fn;
    bool commute;
};

/* Whether a built-in op is defined on a kind (MPI's table). */
bool face_op_valid(MPI_Op op, enum face_kind k);
/* inout[i] = in[i] op inout[i] for n packed elements of t. */
void face_op_apply(MPI_Op op, MPI_Datatype t, const void *in, void *inout, size_t n);

/* --- communicators ------------------------------------------------------ */

struct face_nbc;

struct mpiv_mpi_comm {
    mpiv_comm_t native; /* the program's traffic and blocking collectives  */
    /* A duplicate, so that the face's own messages never meet the
     * program's: collectives MPIv lacks run on its point-to-point, and the
     * non-blocking ones run on its collectives. */
    mpiv_comm_t shadow;
    int rank, size;
    MPI_Errhandler errhandler;
    /* Collectives are called in the same order on every member, so this
     * count names a call identically everywhere; it makes the tags of the
     * face's point-to-point collectives. */
    uint32_t seq;
    /* Non-blocking collectives run one at a time, in order, on one ULT. */
    pthread_mutex_t nbc_lock;
    struct face_nbc *nbc_head, *nbc_tail;
    bool nbc_running;
    mpiv_ult_t nbc_runner; /* the last runner, joined before the next starts */
    /* env.c's list of the communicators the program made, whose runners
     * MPI_Finalize joins (MPI lets a program finalize without freeing
     * them) */
    struct mpiv_mpi_comm *prev, *next;
};

static inline bool face_comm_ok(MPI_Comm c) { return c && c->native; }

int face_comm_setup(MPI_Comm c, mpiv_comm_t native, MPI_Errhandler eh);
void face_comm_release(MPI_Comm c);

/* --- errors ------------------------------------------------------------- */

struct mpiv_mpi_errhandler {
    bool fatal;
    MPI_Comm_errhandler_function *fn; /* a user handler, else NULL */
    struct mpiv_mpi_errhandler *next; /* env.c's list of user handlers */
};

/* Records what went wrong (function name and printf-style detail) for
 * MPI_Error_string, then applies comm's error handler (MPI_COMM_WORLD's
 * when comm is NULL): aborts the job under MPI_ERRORS_ARE_FATAL, else
 * returns err. */
int face_fail(MPI_Comm comm, int err, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same for an error MPIv returned: its class and MPIv's detail. */
int face_fail_native(MPI_Comm comm, int rc, const char *fn);
int face_class_of(int native_rc);

/* --- requests ----------------------------------------------------------- */

/* MPI_Request is MPIv's request handle, or, with its lowest bit set, one
 * of the face's own requests (MPIv's are aligned, so the bit is free):
 * those that must do something on completion (unpack, free a packed
 * copy), the non-blocking collectives and the completed requests of
 * MPI_PROC_NULL and of a cancelled receive, and persistent requests. */
enum face_req_kind {
    FR_SEND_PACKED, FR_RECV_PACKED, FR_NBC, FR_PROC_NULL, FR_CANCELLED,
    FR_PERSISTENT /* MPI_Send_init & co.: never freed by completion */
};
enum face_persistent_op { PERSIST_SEND, PERSIST_SSEND, PERSIST_RECV };

struct face_req {
    mpiv_counter_t done; /* FR_NBC: 1 until the collective returned */
    enum face_req_kind kind;
    mpiv_request_t inner; /* FR_*_PACKED: MPIv's request            */
    void *tmp;            /* FR_*_PACKED: the packed copy           */
    void *userbuf;        /* FR_RECV_PACKED: where to unpack        */
    MPI_Datatype type;    /* FR_RECV_PACKED                         */
    size_t count;         /* FR_RECV_PACKED: elements at most       */
    int rc;               /* FR_NBC: the collective's MPI error     */
    /* FR_PERSISTENT: the operation (userbuf, type and count above), and
     * the request of its current start, MPI_REQUEST_NULL while inactive */
    enum face_persistent_op op;
    int peer, tag;
    MPI_Comm comm;
    MPI_Request started;
};

static inline bool face_req_is_own(MPI_Request r) { return ((uintptr_t)r & 1u) != 0; }
static inline struct face_req *face_req_of(MPI_Request r)
{
    return (struct face_req *)((uintptr_t)r & ~(uintptr_t)1);
}
static inline MPI_Request face_req_handle(struct face_req *f)
{
    return (MPI_Request)((uintptr_t)f | 1u);
}
struct face_req *face_req_new(enum face_req_kind kind);
extern struct face_req face_req_proc_null, face_req_cancelled;

/* MPIv's status as MPI's (status may be MPI_STATUS_IGNORE). */
static inline void face_status_set(MPI_Status *st, const mpiv_status_t *ns)
{
    if (st) {
        st->MPI_SOURCE = ns->source;
        st->MPI_TAG = ns->tag;
        st->MPI_ERROR = ns->error ? face_class_of(ns->error) : MPI_SUCCESS;
        st->mpiv_cancelled_ = 0;
        st->mpiv_bytes_ = ns->size;
    }
}
void face_status_empty(MPI_Status *st);
void face_status_proc_null(MPI_Status *st);

/* --- the environment ---------------------------------------------------- */

/* MPI_Init ran and MPI_Finalize did not yet: an error otherwise. */
extern _Atomic int face_state; /* 0 before init, 1 running, 2 finalized */
int face_not_running(const char *fn);
#define FACE_CHECK_RUNNING(fn)                                                                \
    do {                                                                                      \
        if (FACE_UNLIKELY(face_state != 1))                                                   \
            return face_not_running(fn);                                                      \
    } while (0)

/* Non-blocking collectives still queued or running on comm finish first
 * (MPI_Comm_free, MPI_Finalize). */
void face_nbc_drain(MPI_Comm c);
/* Requests set free while active complete here (MPI_Finalize). */
void face_detached_drain(void);

#endif
