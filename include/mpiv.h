/*
 * mpiv.h — the whole public API of MPIv.
 *
 * MPIv is a messaging runtime for C programs that run very many user-level
 * threads (ULTs) per process and communicate from all of them at once.
 *
 * A program calls mpiv_init() once, from its main thread. That starts the
 * worker pthreads (which run ULTs) and the communication server thread of
 * this process, and joins the job (mpiv_run, PMIx, or a single rank). From
 * then on, ULTs spawned with mpiv_ult_spawn() and plain pthreads (including
 * main) may all send and receive; a ULT that blocks switches to its worker's
 * scheduler, a plain pthread blocks without one.
 *
 * Conventions:
 *  - Every function that can fail returns an int error code: MPIV_SUCCESS (0)
 *    or one of enum mpiv_error. mpiv_strerror() names it, mpiv_error_detail()
 *    says what exactly went wrong in the calling thread's last failed call.
 *  - Handles are opaque. Sync objects (counter, mutex, barrier) are
 *    caller-allocated structs of fixed size, so they may live on a ULT stack.
 *  - Messages are matched by (communicator, source rank, tag); receives may
 *    use wildcards (MPIV_ANY_SOURCE, MPIV_ANY_TAG: see their block for the
 *    cost). Messages with the same communicator, source and tag are
 *    received in the order sent.
 *
 * Failures and progress (what a program can rely on):
 *  - Every operation either completes or returns an error; none waits
 *    forever because of a failure on the other side. A pending send or
 *    receive whose peer's side fails (its rendezvous write, its answer, its
 *    network) completes with MPIV_ERR_NET or MPIV_ERR_PEER on both ranks.
 *  - A rank that dies (killed, crashed, exited without mpiv_finalize) ends
 *    the job: the launcher (mpiv_run, Slurm, Open MPI) stops every rank
 *    within seconds and names the rank and how it died. Operations pending
 *    with it on the survivors may fail with MPIV_ERR_PEER first.
 *  - Packets that disagree with what the transport knows (their length,
 *    their source rank) or with each other, and late or duplicated control
 *    packets, are dropped and counted; nothing is written outside a
 *    receive buffer.
 *  - Progress: a message is delivered without the receiver calling MPIv
 *    again (a server thread, or an idle worker, drives the network); a
 *    plain pthread that waits drives it itself.
 *  - Buffering: a rank may hold at most a fixed amount (MPIV_EAGER_CREDIT,
 *    4 MiB by default) of eager messages from each peer that no receive
 *    has taken yet. Past that, a send no larger than the eager limit
 *    still completes at once: the sender keeps a copy of it, up to 16
 *    times that amount per peer, and the receive takes the message from
 *    there. Past that too, a send waits for its matching receive (as
 *    MPI_Send may): mpiv_send returns once the receive has started taking
 *    the message, mpiv_isend's request completes then. A program that
 *    sends that much to a rank that receives none of it until later may
 *    therefore wait; use mpiv_isend for such floods.
 */
#ifndef MPIV_H
#define MPIV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* The library is built with hidden visibility: what this header declares
 * is its whole interface, and the only thing it exports. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define MPIV_VERSION_MAJOR 0
#define MPIV_VERSION_MINOR 1
#define MPIV_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

enum mpiv_error {
    MPIV_SUCCESS = 0,
    MPIV_ERR_NOT_IMPLEMENTED, /* this function is not implemented yet        */
    MPIV_ERR_ARG,             /* an argument is invalid (NULL, negative, …)  */
    MPIV_ERR_RANK,            /* a rank is outside [0, size)                 */
    MPIV_ERR_TAG,             /* a tag is outside [0, MPIV_TAG_MAX]          */
    MPIV_ERR_TRUNCATE,        /* the message is larger than the buffer       */
    MPIV_ERR_NO_RESOURCES,    /* out of memory, ULT slots, packets, …        */
    MPIV_ERR_CONFIG,          /* an MPIV_* environment variable is invalid   */
    MPIV_ERR_STATE,           /* called before mpiv_init / after finalize,
                                 twice, or from a context that cannot call it */
    MPIV_ERR_NET,             /* the network failed (this operation, or the
                                 other side's part of it)                    */
    MPIV_ERR_PEER,            /* the peer rank is gone, or could not take
                                 its part of the operation                   */
    MPIV_ERR_BOOTSTRAP,       /* joining the job failed                      */
    MPIV_ERR_DEADLOCK,        /* the call would wait forever (e.g. a ULT
                                 joining itself, relocking its own mutex)    */
    MPIV_ERR_INTERNAL,        /* a bug in MPIv: please report it             */
    MPIV_ERR_LAST_            /* number of codes; not an error               */
};

/* A static, human-readable name for an error code ("invalid rank", …).
 * Unknown codes give "unknown error code". Never NULL. */
const char *mpiv_strerror(int err);

/* What exactly went wrong in the calling thread's most recent failed MPIv
 * call (e.g. "MPIV_WORKERS=abc: expected an integer from 0 to 4096"), or ""
 * if there is nothing more to say. The string stays valid until the next
 * MPIv call in the same thread. */
const char *mpiv_error_detail(void);

/* ------------------------------------------------------------------------ */
/* Life cycle                                                               */
/* ------------------------------------------------------------------------ */

/* Reads the MPIV_* environment (see README), starts workers and the server,
 * and joins the job. argc/argv may be NULL. Call once, from main's thread.
 * Fails with MPIV_ERR_CONFIG (and a detail naming the variable) on a bad
 * variable, MPIV_ERR_STATE if already initialised. */
int mpiv_init(int *argc, char ***argv);

/* Waits for all ranks (a barrier), stops workers and the server and releases
 * everything. ULTs still running are an error (MPIV_ERR_STATE, found before
 * the barrier, so MPIv stays usable): join them and call again. Call from
 * the thread that called mpiv_init (from a ULT: MPIV_ERR_STATE); a call
 * after a successful one is MPIV_ERR_STATE. */
int mpiv_finalize(void);

/* 1 between mpiv_init and mpiv_finalize, else 0. */
int mpiv_initialized(void);

/* This process's rank in the job, in [0, size); -1 before mpiv_init. */
int mpiv_rank(void);

/* Number of ranks in the job; 0 before mpiv_init. */
int mpiv_size(void);

/* Seconds since an arbitrary fixed point, from a monotonic clock. */
double mpiv_wtime(void);

/* ------------------------------------------------------------------------ */
/* User-level threads                                                       */
/* ------------------------------------------------------------------------ */

typedef struct mpiv_ult *mpiv_ult_t;
typedef void *(*mpiv_ult_fn)(void *arg);

/* Pass as `worker` to mpiv_ult_spawn: the caller's worker when called from a
 * ULT, otherwise the workers in turn (round robin). */
#define MPIV_WORKER_ANY (-1)

/* Number of worker pthreads of this process (MPIV_WORKERS). */
int mpiv_num_workers(void);

/* The calling ULT's worker in [0, mpiv_num_workers()), or -1 when the caller
 * is not a ULT. */
int mpiv_worker_id(void);

/* Creates a ULT running fn(arg) on `worker` (or MPIV_WORKER_ANY) and stores
 * its handle in *ult. Every ULT must be joined exactly once. Callable from a
 * ULT or any pthread. MPIV_ERR_NO_RESOURCES past the worker's capacity
 * (MPIV_MAX_ULTS) or when stacks cannot be mapped. */
int mpiv_ult_spawn(mpiv_ult_fn fn, void *arg, int worker, mpiv_ult_t *ult);

/* Waits for `ult` to return and stores its return value in *retval (retval
 * may be NULL), then releases the ULT. Callable from a ULT or any pthread;
 * joining oneself is MPIV_ERR_DEADLOCK. A handle is joined once: joining it
 * again (or while another caller joins it), after its ULT was released, or
 * a value that is not a handle is MPIV_ERR_ARG and waits for nothing. */
int mpiv_ult_join(mpiv_ult_t ult, void **retval);

/* Lets the other runnable ULTs of this worker run. From a plain pthread it
 * calls sched_yield(). */
int mpiv_ult_yield(void);

/* The calling ULT, or NULL from a plain pthread. */
mpiv_ult_t mpiv_ult_self(void);

/* ULT synchronisation objects. They work between ULTs on any workers and
 * plain pthreads alike; a waiting ULT gives its worker to the others. The
 * storage is the caller's; its content is private to MPIv. */
typedef struct mpiv_counter { _Alignas(64) unsigned char opaque_[64]; } mpiv_counter_t;
typedef struct mpiv_mutex   { _Alignas(64) unsigned char opaque_[64]; } mpiv_mutex_t;
typedef struct mpiv_barrier { _Alignas(64) unsigned char opaque_[64]; } mpiv_barrier_t;

/* A counter is a latch: waiters wait until its value is zero.
 * mpiv_counter_add changes the value by delta (negative to count down);
 * the value must never go below zero (MPIV_ERR_ARG, unchanged). */
int mpiv_counter_init(mpiv_counter_t *c, int64_t value);
int mpiv_counter_add(mpiv_counter_t *c, int64_t delta);
int64_t mpiv_counter_get(mpiv_counter_t *c);
int mpiv_counter_wait(mpiv_counter_t *c);
int mpiv_counter_destroy(mpiv_counter_t *c);

/* A mutex whose waiters are ULTs or pthreads, served first come first
 * served. Unlocking a mutex the caller does not hold is MPIV_ERR_STATE. */
int mpiv_mutex_init(mpiv_mutex_t *m);
int mpiv_mutex_lock(mpiv_mutex_t *m);
/* Takes the mutex if it is free: *acquired is set to 1 if taken, else 0. */
int mpiv_mutex_trylock(mpiv_mutex_t *m, int *acquired);
int mpiv_mutex_unlock(mpiv_mutex_t *m);
int mpiv_mutex_destroy(mpiv_mutex_t *m);

/* A barrier for `count` ULTs or threads of this process; reusable. */
int mpiv_barrier_init(mpiv_barrier_t *b, int count);
int mpiv_barrier_wait(mpiv_barrier_t *b);
int mpiv_barrier_destroy(mpiv_barrier_t *b);

/* ------------------------------------------------------------------------ */
/* Point-to-point                                                           */
/* ------------------------------------------------------------------------ */

/* Tags are in [0, MPIV_TAG_MAX]; ranks in [0, MPIV_RANK_MAX]. Both limits
 * come from the 64-bit matching key: 12 bits of context, 20 of rank, 32 of
 * tag (the top tag bit is reserved). A job has at most MPIV_RANK_MAX + 1
 * (1,048,576) ranks; the launchers refuse more. */
#define MPIV_TAG_MAX  0x7fffffff
#define MPIV_RANK_MAX 0x000fffff

typedef struct mpiv_status {
    int source;   /* the sender's rank                              */
    int tag;      /* the message's tag                              */
    size_t size;  /* the message's real size in bytes               */
    int error;    /* MPIV_SUCCESS or why this operation failed      */
} mpiv_status_t;

typedef struct mpiv_request *mpiv_request_t;
#define MPIV_REQUEST_NULL ((mpiv_request_t)0)

/* A communicator (see "Communicators and collectives" below). The calls
 * named *_comm take one: their ranks (dest, source, status->source) are
 * ranks of that communicator, and they match only its messages. */
typedef struct mpiv_comm *mpiv_comm_t;

/* Blocking send of `size` bytes to rank `dest` with `tag`. Returns when buf
 * may be reused (a large message, or one past both ranks' buffering, see
 * the top of this file: once its receive has started taking it).
 * Errors before anything is sent: MPIV_ERR_RANK, MPIV_ERR_TAG, MPIV_ERR_ARG
 * (buf NULL with size > 0). MPIV_ERR_PEER if dest is gone or refused it
 * (out of resources), MPIV_ERR_NET if the transfer failed. Messages of any
 * size_t size are allowed; the largest ones move in pieces. */
int mpiv_send(const void *buf, size_t size, int dest, int tag);

/* Blocking receive of the next message from `source` with `tag` into buf of
 * `size` bytes. A smaller message is fine (status->size tells its size); a
 * larger one fails with MPIV_ERR_TRUNCATE and nothing is written past
 * buf + size. status may be NULL. */
int mpiv_recv(void *buf, size_t size, int source, int tag, mpiv_status_t *status);

/* Spawns a ULT that runs fn(arg) once the next message from `source` with
 * `tag` has been received into buf (`size` bytes), as a ULT whose first
 * act is mpiv_recv(buf, size, source, tag, status) would, and stores its
 * handle in *ult (join it as any ULT). The receive is posted now, in order
 * with the caller's other receives; until its message is in, the ULT holds
 * no stack (a blocked mpiv_recv holds one, a page at least), so a program
 * may leave a million such receives posted. status must not be NULL: it is
 * filled in before fn runs, and status->error says how the receive ended
 * (MPIV_ERR_TRUNCATE, MPIV_ERR_PEER, ...; fn runs in every case). buf and
 * status belong to MPIv until fn runs. source and tag may be the
 * wildcards. Errors, with nothing posted and no ULT: those of mpiv_irecv's
 * arguments and of mpiv_ult_spawn, and MPIV_ERR_ARG for a NULL fn, status
 * or ult; a receive that fails as it is posted (a peer known to have
 * failed) still starts the ULT, with the error in its status. Like a
 * ULT blocked in a receive, one whose message never comes is never
 * released: mpiv_finalize with such a receive pending is an error. */
int mpiv_ult_spawn_recv(mpiv_ult_fn fn, void *arg, int worker, void *buf, size_t size, int source,
                        int tag, mpiv_status_t *status, mpiv_ult_t *ult);

/* Non-blocking variants: start the operation and return a request to
 * complete with mpiv_wait, mpiv_waitall or mpiv_test. The buffer belongs to
 * MPIv until then. */
int mpiv_isend(const void *buf, size_t size, int dest, int tag, mpiv_request_t *req);
int mpiv_irecv(void *buf, size_t size, int source, int tag, mpiv_request_t *req);

/* Waits for *req, fills status (may be NULL), frees the request and sets
 * *req to MPIV_REQUEST_NULL. Waiting on MPIV_REQUEST_NULL returns at once.
 * Returns the operation's error (also in status->error). */
int mpiv_wait(mpiv_request_t *req, mpiv_status_t *status);

/* Waits for all n requests; statuses may be NULL. Returns MPIV_SUCCESS or
 * the first error met (each status holds its own). */
int mpiv_waitall(int n, mpiv_request_t reqs[], mpiv_status_t statuses[]);

/* Sets *flag to 1 and completes the request as mpiv_wait would if it is done,
 * else sets *flag to 0 and leaves it pending. */
int mpiv_test(mpiv_request_t *req, int *flag, mpiv_status_t *status);

/* ------------------------------------------------------------------------ */
/* Wildcards, probes, completion calls, synchronous send                    */
/* ------------------------------------------------------------------------ */

/* Receives (mpiv_recv, mpiv_irecv, mpiv_sendrecv) and probes accept
 * MPIV_ANY_SOURCE for the source and MPIV_ANY_TAG for the tag; the status
 * then tells the real ones. MPI's matching order holds: a receive takes
 * the earliest-arrived waiting message it fits, and an arriving message
 * goes to the earliest-posted pending receive it fits, exact or wildcard
 * (receives or sends started at once by different threads have no order).
 *
 * Cost. Exact receives stay on the fast path, one matching-table lookup,
 * whenever no wildcard receive or blocking probe is pending; they then
 * pay one load more than without wildcard support. A wildcard receive
 * (or blocking probe) that does not find its message at once walks the
 * whole matching table (every bucket: tens of microseconds at the default
 * size, more where many messages wait) under one process-wide lock, and
 * while any is pending every arriving message, and every exact receive
 * that has to wait, takes that lock and scans the pending wildcard
 * receives (in proportion to their number). A wildcard receive that finds
 * its message waiting pays the walk too (it looks for the earliest one).
 *
 * A failed peer: a receive or probe for that rank with MPIV_ANY_TAG fails
 * with MPIV_ERR_PEER; one with MPIV_ANY_SOURCE stays pending (another rank
 * may still match it; cancel it with mpiv_cancel if need be). */
#define MPIV_ANY_SOURCE (-2)
#define MPIV_ANY_TAG    (-1)
/* An index or count that means "none": every request was
 * MPIV_REQUEST_NULL (mpiv_waitany, mpiv_testany, mpiv_waitsome). */
#define MPIV_UNDEFINED  (-32766)

/* A message a matched probe took out of matching: only mpiv_mrecv or
 * mpiv_imrecv on this handle can receive it, so that two threads probing
 * the same source and tag never take each other's message. Every handle
 * must be received exactly once (until then its message holds a packet or
 * its sender's rendezvous). */
typedef struct mpiv_message *mpiv_message_t;
#define MPIV_MESSAGE_NULL ((mpiv_message_t)0)

/* The status (source, tag, size) of the message that a receive with the
 * same source and tag (either may be a wildcard) would take next, without
 * receiving it: mpiv_iprobe sets *flag to 1 and fills status if there is
 * one, else *flag = 0; mpiv_probe waits for one (as a receive waits: a ULT
 * gives its worker up). Another thread's receive may take that message
 * before this one receives it: use the matched probes for that. status
 * may be NULL. MPIV_ERR_PEER once nothing can come from a failed source. */
int mpiv_iprobe(int source, int tag, int *flag, mpiv_status_t *status);
int mpiv_probe(int source, int tag, mpiv_status_t *status);
/* The same on comm: source is a rank of comm or MPIV_ANY_SOURCE (any
 * member), only comm's messages are seen (one with the same source and
 * tag on another communicator, the world included, is not), and
 * status->source is a rank of comm. Errors as mpiv_recv_comm's checks:
 * MPIV_ERR_ARG for MPIV_COMM_NULL or a freed comm, MPIV_ERR_RANK for a
 * source outside [0, size) of comm, MPIV_ERR_TAG. Cost over the world
 * calls: the handle check and one array lookup per call, and a binary
 * search over comm's ranks when a status is filled in. */
int mpiv_iprobe_comm(int source, int tag, mpiv_comm_t comm, int *flag, mpiv_status_t *status);
int mpiv_probe_comm(int source, int tag, mpiv_comm_t comm, mpiv_status_t *status);

/* Matched probes: as mpiv_iprobe / mpiv_probe, and the message is taken
 * out of matching and handed over in *msg (MPIV_MESSAGE_NULL when
 * mpiv_improbe finds none, with *flag = 0). Works for messages of any
 * size (a large one is moved by mpiv_mrecv). */
int mpiv_improbe(int source, int tag, int *flag, mpiv_message_t *msg, mpiv_status_t *status);
int mpiv_mprobe(int source, int tag, mpiv_message_t *msg, mpiv_status_t *status);
/* The same on comm (ranks, isolation, errors and cost as mpiv_iprobe_comm).
 * The message remembers its communicator: mpiv_mrecv / mpiv_imrecv of it
 * report status->source as a rank of comm (a lookup by the message's
 * context and a binary search more). Receive it before freeing comm: it
 * is an operation on comm, and once comm is freed (or its slot taken by
 * another communicator) the status's source is a world rank (or a rank
 * of that other one). */
int mpiv_improbe_comm(int source, int tag, mpiv_comm_t comm, int *flag, mpiv_message_t *msg,
                      mpiv_status_t *status);
int mpiv_mprobe_comm(int source, int tag, mpiv_comm_t comm, mpiv_message_t *msg,
                     mpiv_status_t *status);

/* Receives the message *msg names into buf (size bytes; larger messages
 * fail with MPIV_ERR_TRUNCATE as mpiv_recv does) and sets *msg to
 * MPIV_MESSAGE_NULL. mpiv_imrecv starts it and returns a request. For a
 * message from mpiv_mprobe_comm / mpiv_improbe_comm the status names
 * ranks of that communicator. */
int mpiv_mrecv(void *buf, size_t size, mpiv_message_t *msg, mpiv_status_t *status);
int mpiv_imrecv(void *buf, size_t size, mpiv_message_t *msg, mpiv_request_t *req);

/* Completion of several requests (MPI's semantics). MPIV_REQUEST_NULL
 * entries are skipped; a completed request is freed and its entry set to
 * MPIV_REQUEST_NULL, as mpiv_wait does. Waiting polls the requests and
 * drives progress between polls: a plain pthread naps once quiet for a
 * while, a ULT yields to its worker's other ULTs between polls (so a
 * worker whose only ULT waits here keeps polling); mpiv_wait on a single
 * request blocks without polling.
 *  waitany:  waits until one completes; *index is its position (the lowest
 *            among those found complete at once), or MPIV_UNDEFINED (and an
 *            empty status) if all are MPIV_REQUEST_NULL. Returns its error.
 *  testany:  as waitany without waiting: *flag = 1 and *index if one was
 *            complete; *flag = 1 and *index = MPIV_UNDEFINED if all are
 *            MPIV_REQUEST_NULL; else *flag = 0.
 *  waitsome: waits until at least one completes, then completes every one
 *            complete by then: *outcount of them, their positions in
 *            indices[] and statuses in statuses[] (n entries each;
 *            statuses may be NULL); *outcount = MPIV_UNDEFINED if all are
 *            MPIV_REQUEST_NULL. Returns the first error met.
 *  testall:  *flag = 1 and every request completed (as mpiv_waitall) if
 *            all are complete, else *flag = 0 and none is touched.
 * Bad arguments (n < 0, NULL arrays with n > 0, NULL outputs) are
 * MPIV_ERR_ARG. */
int mpiv_waitany(int n, mpiv_request_t reqs[], int *index, mpiv_status_t *status);
int mpiv_testany(int n, mpiv_request_t reqs[], int *index, int *flag, mpiv_status_t *status);
int mpiv_waitsome(int n, mpiv_request_t reqs[], int *outcount, int indices[],
                  mpiv_status_t statuses[]);
int mpiv_testall(int n, mpiv_request_t reqs[], int *flag, mpiv_status_t statuses[]);

/* Cancels a pending receive: if no message matched it yet, it is taken
 * back, freed, *req set to MPIV_REQUEST_NULL and *cancelled to 1; if one
 * did, *cancelled = 0 and the request completes as usual (wait for it).
 * (Unlike MPI, the answer is immediate and a cancelled request needs no
 * wait.) Cancelling a send is not supported: MPIV_ERR_NOT_IMPLEMENTED,
 * and the send goes on. MPIV_REQUEST_NULL: *cancelled = 0. */
int mpiv_cancel(mpiv_request_t *req, int *cancelled);

/* Sends sendbuf to dest and receives into recvbuf from source (a
 * wildcard is allowed) at once, so that two ranks exchanging with each
 * other never deadlock. status is the receive's. Returns the first error
 * (the receive's, or the send's). */
int mpiv_sendrecv(const void *sendbuf, size_t sendsize, int dest, int sendtag, void *recvbuf,
                  size_t recvsize, int source, int recvtag, mpiv_status_t *status);
/* The same on comm: dest and source are ranks of comm (source may be
 * MPIV_ANY_SOURCE: any member), both sides match only comm's messages,
 * status->source is a rank of comm. Errors as mpiv_send_comm and
 * mpiv_recv_comm (MPIV_ERR_ARG for MPIV_COMM_NULL or a freed comm,
 * MPIV_ERR_RANK outside [0, size) of comm), before anything is sent.
 * Cost over mpiv_sendrecv: two handle checks and array lookups, and a
 * binary search over comm's ranks for the status. */
int mpiv_sendrecv_comm(const void *sendbuf, size_t sendsize, int dest, int sendtag, void *recvbuf,
                       size_t recvsize, int source, int recvtag, mpiv_comm_t comm,
                       mpiv_status_t *status);

/* Synchronous send: completes only once a receive on dest matched the
 * message (it always goes as a rendezvous: one round trip more than an
 * eager send for a small message). Errors as mpiv_send. */
int mpiv_ssend(const void *buf, size_t size, int dest, int tag);
int mpiv_issend(const void *buf, size_t size, int dest, int tag, mpiv_request_t *req);
/* The same to rank dest of comm, matched only by a receive on comm;
 * errors as mpiv_send_comm. Cost over the world calls: the handle check
 * and one array lookup. */
int mpiv_ssend_comm(const void *buf, size_t size, int dest, int tag, mpiv_comm_t comm);
int mpiv_issend_comm(const void *buf, size_t size, int dest, int tag, mpiv_comm_t comm,
                     mpiv_request_t *req);

/* ------------------------------------------------------------------------ */
/* Communicators and collectives                                            */
/* ------------------------------------------------------------------------ */

/* A communicator is a group of ranks with its own matching: a message sent
 * on one is only ever received on the same one, whatever its tag, and its
 * collectives never match its point-to-point messages (each communicator
 * has two contexts of the matching key: user traffic and collectives).
 * Ranks and sizes in a communicator are its own (0 .. size-1).
 *
 * MPIV_COMM_WORLD holds every rank of the job, in job rank order. The calls
 * without a communicator (mpiv_send, mpiv_barrier, ...) act on it.
 *
 * Limits: at most MPIV_COMM_MAX communicators exist at once in a process,
 * world included (the key has 12 context bits, two contexts each). Ids are
 * agreed among the members of the parent communicator (an allreduce over
 * a bitmap of the ids each member has free, no central server), so an id
 * in use anywhere in the parent cannot be handed out. Past the limit
 * mpiv_comm_dup / mpiv_comm_split fail on every member with
 * MPIV_ERR_NO_RESOURCES and a detail saying so; mpiv_comm_free gives the id
 * back. Creating one costs a few collectives on the parent (an allreduce of
 * 264 bytes, and for split an allgather of two ints per rank) and
 * O(size) memory.
 *
 * Handles: MPIV_COMM_NULL or what dup / split returned. A freed handle must
 * not be used again (MPIV_ERR_ARG while its slot stays free; once another
 * communicator takes the slot it names that one). */
extern struct mpiv_comm mpiv_comm_world_;
#define MPIV_COMM_WORLD (&mpiv_comm_world_)
#define MPIV_COMM_NULL ((mpiv_comm_t)0)
#define MPIV_COMM_MAX 2048
/* A split color of MPIV_UNDEFINED (defined above) puts the caller in no
 * communicator. */

/* This rank's rank in comm, and comm's number of ranks. */
int mpiv_comm_rank(mpiv_comm_t comm, int *rank);
int mpiv_comm_size(mpiv_comm_t comm, int *size);

/* Collective over comm: a new communicator with the same ranks in the same
 * order, and matching of its own. */
int mpiv_comm_dup(mpiv_comm_t comm, mpiv_comm_t *newcomm);

/* Collective over comm: the ranks that pass the same color form a new
 * communicator, ordered by key, then by their rank in comm. color must be
 * >= 0 or MPIV_UNDEFINED (then *newcomm is MPIV_COMM_NULL). Every rank of
 * comm must call it, including those passing MPIV_UNDEFINED. */
int mpiv_comm_split(mpiv_comm_t comm, int color, int key, mpiv_comm_t *newcomm);

/* Releases *comm (not MPIV_COMM_WORLD, not a communicator in a collective)
 * and sets it to MPIV_COMM_NULL. Local: no messages. Every operation on it
 * must be complete (sends waited for, receives matched and waited for);
 * freeing MPIV_COMM_NULL is a no-op. */
int mpiv_comm_free(mpiv_comm_t *comm);

/* Point-to-point on a communicator: as mpiv_send / mpiv_recv / mpiv_isend /
 * mpiv_irecv (the probes, mpiv_sendrecv_comm and the synchronous sends on
 * a communicator stand next to their world forms above), with dest and
 * source ranks of comm (MPIV_ERR_RANK outside
 * [0, size)); receives take MPIV_ANY_SOURCE (any member of comm) and
 * MPIV_ANY_TAG as the world calls do; status->source is a rank of comm. The cost over the world
 * calls is one array lookup per call (and a binary search over comm's
 * ranks when a receive's status is filled in). */
int mpiv_send_comm(const void *buf, size_t size, int dest, int tag, mpiv_comm_t comm);
int mpiv_recv_comm(void *buf, size_t size, int source, int tag, mpiv_comm_t comm,
                   mpiv_status_t *status);
int mpiv_isend_comm(const void *buf, size_t size, int dest, int tag, mpiv_comm_t comm,
                    mpiv_request_t *req);
int mpiv_irecv_comm(void *buf, size_t size, int source, int tag, mpiv_comm_t comm,
                    mpiv_request_t *req);

/* Element types of collectives (counts are in elements). */
typedef enum mpiv_datatype {
    MPIV_INT64 = 1,
    MPIV_DOUBLE = 2,
    MPIV_INT8 = 3,
    MPIV_INT16 = 4,
    MPIV_INT32 = 5,
    MPIV_UINT8 = 6,
    MPIV_UINT16 = 7,
    MPIV_UINT32 = 8,
    MPIV_UINT64 = 9,
    MPIV_FLOAT = 10,
    MPIV_BYTE = 11,
    MPIV_DATATYPE_LAST_ /* number of types + 1; not a type */
} mpiv_datatype_t;

/* Size in bytes of one element of type, or 0 for an unknown type. */
size_t mpiv_type_size(mpiv_datatype_t type);

/* Reduction operations. Which type each built-in takes (else MPIV_ERR_ARG
 * naming both):
 *   SUM, PROD, MIN, MAX: every type but MPIV_BYTE;
 *   LAND, LOR (result 0 or 1): the integer types;
 *   BAND, BOR: the integer types and MPIV_BYTE.
 * Integer SUM and PROD wrap around (modulo 2^bits, also for signed types);
 * floating SUM and PROD are not associative, so results may differ from a
 * serial sum in the last bits (built-ins are treated as commutative).
 * User operations come from mpiv_op_create. */
typedef int mpiv_op_t;
enum {
    MPIV_OP_NULL = 0,
    MPIV_SUM = 1,
    MPIV_MIN = 2,
    MPIV_MAX = 3,
    MPIV_PROD = 4,
    MPIV_LAND = 5,
    MPIV_LOR = 6,
    MPIV_BAND = 7,
    MPIV_BOR = 8
};

/* A user reduction: for i in [0, count), inout[i] = in[i] (op) inout[i],
 * where `in` holds the lower ranks' contribution (the left operand). It
 * may be called with any count, from any thread, concurrently. */
typedef void (*mpiv_user_fn)(const void *in, void *inout, size_t count, mpiv_datatype_t type);

/* Makes a user operation. commutative = 0 promises only associativity:
 * every reduction then combines contributions in rank order (x0 op x1 op
 * ... op x(p-1)) and takes the tree algorithms (see coll.c). At most 64
 * exist at once (MPIV_ERR_NO_RESOURCES past that). */
int mpiv_op_create(mpiv_user_fn fn, int commutative, mpiv_op_t *op);
/* Releases *op (not a built-in) and sets it to MPIV_OP_NULL. No reduction
 * may be using it. */
int mpiv_op_free(mpiv_op_t *op);

/* Collectives. Every rank of comm calls the same collectives in the same
 * order with matching arguments (same root, counts that agree). One call at
 * a time per communicator in a process: a second thread or ULT entering a
 * collective (or dup / split) on a communicator while another is inside
 * one gets MPIV_ERR_ARG at once (detail: "already in a collective"), never a
 * hang; different communicators' collectives may run at the same time from
 * different threads or ULTs. Errors found in a rank's own arguments are
 * returned before it sends anything; arguments that disagree between ranks
 * (a count, a root) cannot all be seen locally: the call may then fail
 * (MPIV_ERR_TRUNCATE) or wait for a message that never comes. Buffers of a call must not overlap, except
 * that reduce, allreduce and scan accept sendbuf == recvbuf. Counts are in
 * elements of `type`; displacements are in elements too. Where a buffer
 * is only significant at the root (gather's recvbuf, scatter's sendbuf,
 * ...) other ranks may pass NULL. Algorithms and their costs: coll.c. */
int mpiv_barrier_comm(mpiv_comm_t comm);
int mpiv_bcast_comm(void *buf, size_t count, mpiv_datatype_t type, int root, mpiv_comm_t comm);
/* recvbuf: significant at root only. */
int mpiv_reduce(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                mpiv_op_t op, int root, mpiv_comm_t comm);
int mpiv_allreduce_comm(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                        mpiv_op_t op, mpiv_comm_t comm);
/* count elements from every rank into recvbuf (size * count) at root, in
 * rank order. */
int mpiv_gather(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type, int root,
                mpiv_comm_t comm);
/* rank i sends sendcount elements; root stores them at recvbuf + displs[i]
 * (recvcounts[i] must equal rank i's sendcount). */
int mpiv_gatherv(const void *sendbuf, size_t sendcount, void *recvbuf, const size_t recvcounts[],
                 const size_t displs[], mpiv_datatype_t type, int root, mpiv_comm_t comm);
/* root's sendbuf holds size blocks of count elements; rank i gets block i. */
int mpiv_scatter(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type, int root,
                 mpiv_comm_t comm);
/* rank i gets sendcounts[i] elements from root's sendbuf + displs[i]. */
int mpiv_scatterv(const void *sendbuf, const size_t sendcounts[], const size_t displs[],
                  void *recvbuf, size_t recvcount, mpiv_datatype_t type, int root,
                  mpiv_comm_t comm);
int mpiv_allgather(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                   mpiv_comm_t comm);
int mpiv_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                    const size_t recvcounts[], const size_t displs[], mpiv_datatype_t type,
                    mpiv_comm_t comm);
/* Block i of sendbuf (count elements) goes to rank i; block j of recvbuf
 * comes from rank j. */
int mpiv_alltoall(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
                  mpiv_comm_t comm);
int mpiv_alltoallv(const void *sendbuf, const size_t sendcounts[], const size_t sdispls[],
                   void *recvbuf, const size_t recvcounts[], const size_t rdispls[],
                   mpiv_datatype_t type, mpiv_comm_t comm);
/* Reduces sum(recvcounts) elements of every rank's sendbuf with op; rank i
 * gets recvcounts[i] elements of the result, those after the first i
 * ranks' shares. */
int mpiv_reduce_scatter(const void *sendbuf, void *recvbuf, const size_t recvcounts[],
                        mpiv_datatype_t type, mpiv_op_t op, mpiv_comm_t comm);
/* Inclusive prefix: rank i gets x0 op x1 op ... op xi. */
int mpiv_scan(const void *sendbuf, void *recvbuf, size_t count, mpiv_datatype_t type,
              mpiv_op_t op, mpiv_comm_t comm);

/* The first collectives, kept on MPIV_COMM_WORLD: */
/* Returns once every rank has entered the barrier. */
int mpiv_barrier(void);

/* Copies `size` bytes at buf on `root` into buf on every rank. */
int mpiv_bcast(void *buf, size_t size, int root);

/* Combines `count` elements of sendbuf from every rank with op and stores
 * the result in recvbuf on every rank. sendbuf may equal recvbuf. */
int mpiv_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                   mpiv_datatype_t type, mpiv_op_t op);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* MPIV_H */
