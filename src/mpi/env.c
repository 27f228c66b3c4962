/*
 * env.c — the MPI face's environment: MPI_Init / MPI_Finalize over
 * mpiv_init / mpiv_finalize, errors and error handlers, communicators
 * (each an MPIv communicator plus a shadow duplicate, face.h) and the small
 * calls (time, names, versions, memory).
 *
 * Threads: MPIv serves plain pthreads and its ULTs alike, so every thread
 * level is granted as MPI_THREAD_MULTIPLE. The face keeps no lock of its
 * own on any point-to-point path; the only ones it has guard the queue of
 * non-blocking collectives of a communicator (coll.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "face.h"

struct mpiv_mpi_errhandler mpiv_mpi_errors_are_fatal_ = {.fatal = true};
struct mpiv_mpi_errhandler mpiv_mpi_errors_return_ = {.fatal = false};

struct mpiv_mpi_comm mpiv_mpi_comm_world_, mpiv_mpi_comm_self_;

_Atomic int face_state;
static pthread_t main_thread;

/* --- errors -------------------------------------------------------------- */

static const char *const class_names[MPI_ERR_LASTCODE] = {
    [MPI_SUCCESS] = "no error",
    [MPI_ERR_BUFFER] = "invalid buffer",
    [MPI_ERR_COUNT] = "invalid count",
    [MPI_ERR_TYPE] = "invalid datatype",
    [MPI_ERR_TAG] = "invalid tag",
    [MPI_ERR_COMM] = "invalid communicator",
    [MPI_ERR_RANK] = "invalid rank",
    [MPI_ERR_REQUEST] = "invalid request",
    [MPI_ERR_ROOT] = "invalid root",
    [MPI_ERR_OP] = "invalid operation",
    [MPI_ERR_ARG] = "invalid argument",
    [MPI_ERR_UNKNOWN] = "unknown error",
    [MPI_ERR_TRUNCATE] = "message truncated",
    [MPI_ERR_OTHER] = "other error",
    [MPI_ERR_INTERN] = "internal error",
    [MPI_ERR_IN_STATUS] = "error code in status",
    [MPI_ERR_PENDING] = "pending request",
    [MPI_ERR_NO_MEM] = "out of memory",
    [MPI_ERR_UNSUPPORTED_OPERATION] = "unsupported operation",
};

/* The calling thread's last failure, for MPI_Error_string. */
static _Thread_local int last_err;
static _Thread_local char last_detail[MPI_MAX_ERROR_STRING];

int face_class_of(int rc)
{
    switch (rc) {
    case MPIV_SUCCESS: return MPI_SUCCESS;
    case MPIV_ERR_NOT_IMPLEMENTED: return MPI_ERR_UNSUPPORTED_OPERATION;
    case MPIV_ERR_ARG: return MPI_ERR_ARG;
    case MPIV_ERR_RANK: return MPI_ERR_RANK;
    case MPIV_ERR_TAG: return MPI_ERR_TAG;
    case MPIV_ERR_TRUNCATE: return MPI_ERR_TRUNCATE;
    case MPIV_ERR_NO_RESOURCES: return MPI_ERR_NO_MEM;
    case MPIV_ERR_INTERNAL: return MPI_ERR_INTERN;
    default: return MPI_ERR_OTHER;
    }
}

static void vrecord(int err, const char *fn, const char *fmt, va_list ap)
{
    int n = snprintf(last_detail, sizeof last_detail, "%s: ", fn);
    if (n < 0 || (size_t)n >= sizeof last_detail)
        n = 0;
    vsnprintf(last_detail + n, sizeof last_detail - (size_t)n, fmt, ap);
    last_err = err;
}

static int apply_handler(MPI_Comm comm, int err)
{
    if (!comm || !comm->errhandler)
        comm = &mpiv_mpi_comm_world_;
    MPI_Errhandler eh = comm->errhandler;
    if (eh && eh->fn) {
        MPI_Comm c = comm;
        int code = err;
        eh->fn(&c, &code);
        return err;
    }
    if (eh && !eh->fatal)
        return err;
    fprintf(stderr, "MPI error on rank %d (MPI_ERRORS_ARE_FATAL): %s: %s\n", mpiv_rank(),
            class_names[err], last_detail);
    fflush(NULL);
    _exit(err);
}

int face_fail(MPI_Comm comm, int err, const char *fn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vrecord(err, fn, fmt, ap);
    va_end(ap);
    return apply_handler(comm, err);
}

int face_fail_native(MPI_Comm comm, int rc, const char *fn)
{
    const char *detail = mpiv_error_detail();
    return face_fail(comm, face_class_of(rc), fn, "%s%s%s", mpiv_strerror(rc),
                     detail[0] ? ": " : "", detail);
}

int face_not_running(const char *fn)
{
    int err = MPI_ERR_OTHER;
    snprintf(last_detail, sizeof last_detail, "%s: called %s", fn,
             face_state == 0 ? "before MPI_Init" : "after MPI_Finalize");
    last_err = err;
    fprintf(stderr, "MPI error (MPI_ERRORS_ARE_FATAL): %s\n", last_detail);
    fflush(NULL);
    _exit(err);
}

int MPI_Error_class(int errorcode, int *errorclass)
{
    if (!errorclass || errorcode < 0 || errorcode >= MPI_ERR_LASTCODE)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Error_class", "%d is not an error code",
                         errorcode);
    *errorclass = errorcode;
    return MPI_SUCCESS;
}

/* The class's name, and what exactly went wrong when the code is this
 * thread's last failure. */
int MPI_Error_string(int errorcode, char *string, int *resultlen)
{
    if (!string || !resultlen)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Error_string", "NULL argument");
    int n;
    if (errorcode < 0 || errorcode >= MPI_ERR_LASTCODE)
        n = snprintf(string, MPI_MAX_ERROR_STRING, "unknown error code %d", errorcode);
    else if (errorcode != MPI_SUCCESS && errorcode == last_err)
        n = snprintf(string, MPI_MAX_ERROR_STRING, "%s (%s)", class_names[errorcode],
                     last_detail);
    else
        n = snprintf(string, MPI_MAX_ERROR_STRING, "%s", class_names[errorcode]);
    *resultlen = n < 0 ? 0 : n >= MPI_MAX_ERROR_STRING ? MPI_MAX_ERROR_STRING - 1 : n;
    return MPI_SUCCESS;
}

/* Every user handler ever made: kept for the life of the process (see
 * MPI_Errhandler_free). */
static pthread_mutex_t user_handlers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mpiv_mpi_errhandler *user_handlers;

int MPI_Comm_create_errhandler(MPI_Comm_errhandler_function *function,
                               MPI_Errhandler *errhandler)
{
    if (!function || !errhandler)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Comm_create_errhandler", "NULL argument");
    struct mpiv_mpi_errhandler *eh = calloc(1, sizeof *eh);
    if (!eh)
        return face_fail(NULL, MPI_ERR_NO_MEM, "MPI_Comm_create_errhandler", "out of memory");
    eh->fn = function;
    pthread_mutex_lock(&user_handlers_lock);
    eh->next = user_handlers;
    user_handlers = eh;
    pthread_mutex_unlock(&user_handlers_lock);
    *errhandler = eh;
    return MPI_SUCCESS;
}

int MPI_Comm_call_errhandler(MPI_Comm comm, int errorcode)
{
    if (!face_comm_ok(comm))
        return face_fail(NULL, MPI_ERR_COMM, "MPI_Comm_call_errhandler", "invalid communicator");
    face_fail(comm, errorcode, "MPI_Comm_call_errhandler", "called by the program");
    return MPI_SUCCESS;
}

int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler)
{
    if (!face_comm_ok(comm))
        return face_fail(NULL, MPI_ERR_COMM, "MPI_Comm_set_errhandler", "invalid communicator");
    if (!errhandler)
        return face_fail(comm, MPI_ERR_ARG, "MPI_Comm_set_errhandler", "MPI_ERRHANDLER_NULL");
    comm->errhandler = errhandler;
    return MPI_SUCCESS;
}

int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler *errhandler)
{
    if (!face_comm_ok(comm) || !errhandler)
        return face_fail(comm, face_comm_ok(comm) ? MPI_ERR_ARG : MPI_ERR_COMM,
                         "MPI_Comm_get_errhandler", "invalid argument");
    *errhandler = comm->errhandler;
    return MPI_SUCCESS;
}

/* Releases the caller's handle. A user handler lives on while a
 * communicator may still use it (MPI frees it once none does): the face
 * keeps it, a few bytes, for the life of the process (user_handlers). */
int MPI_Errhandler_free(MPI_Errhandler *errhandler)
{
    if (!errhandler || !*errhandler)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Errhandler_free", "no error handler");
    *errhandler = MPI_ERRHANDLER_NULL;
    return MPI_SUCCESS;
}

/* --- communicators -------------------------------------------------------- */

int face_comm_setup(MPI_Comm c, mpiv_comm_t native, MPI_Errhandler eh)
{
    c->native = native;
    c->errhandler = eh;
    c->seq = 0;
    c->nbc_head = c->nbc_tail = NULL;
    c->nbc_running = false;
    c->nbc_runner = NULL;
    int rc = mpiv_comm_rank(native, &c->rank);
    if (!rc)
        rc = mpiv_comm_size(native, &c->size);
    if (!rc)
        rc = mpiv_comm_dup(native, &c->shadow);
    if (rc)
        return rc;
    pthread_mutex_init(&c->nbc_lock, NULL);
    return MPIV_SUCCESS;
}

void face_comm_release(MPI_Comm c)
{
    face_nbc_drain(c);
    pthread_mutex_destroy(&c->nbc_lock);
    mpiv_comm_free(&c->shadow);
    if (c->native != MPIV_COMM_WORLD)
        mpiv_comm_free(&c->native);
    c->native = MPIV_COMM_NULL;
}

int MPI_Comm_rank(MPI_Comm comm, int *rank)
{
    if (FACE_UNLIKELY(!face_comm_ok(comm) || !rank))
        return face_fail(comm, face_comm_ok(comm) ? MPI_ERR_ARG : MPI_ERR_COMM, "MPI_Comm_rank",
                         "invalid argument");
    *rank = comm->rank;
    return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm comm, int *size)
{
    if (FACE_UNLIKELY(!face_comm_ok(comm) || !size))
        return face_fail(comm, face_comm_ok(comm) ? MPI_ERR_ARG : MPI_ERR_COMM, "MPI_Comm_size",
                         "invalid argument");
    *size = comm->size;
    return MPI_SUCCESS;
}

/* The communicators made by dup and split that are not freed yet. */
static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mpiv_mpi_comm comms = {.prev = &comms, .next = &comms};

static void comms_add(MPI_Comm c)
{
    pthread_mutex_lock(&comms_lock);
    c->next = comms.next;
    c->prev = &comms;
    comms.next->prev = c;
    comms.next = c;
    pthread_mutex_unlock(&comms_lock);
}

static void comms_remove(MPI_Comm c)
{
    pthread_mutex_lock(&comms_lock);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    pthread_mutex_unlock(&comms_lock);
}

/* Wraps MPIv's new communicator (or none) into *newcomm. */
static int adopt(MPI_Comm parent, mpiv_comm_t native, MPI_Comm *newcomm, const char *fn)
{
    if (!native) {
        *newcomm = MPI_COMM_NULL;
        return MPI_SUCCESS;
    }
    struct mpiv_mpi_comm *c = calloc(1, sizeof *c);
    int rc = c ? face_comm_setup(c, native, parent->errhandler) : MPIV_ERR_NO_RESOURCES;
    if (rc) {
        mpiv_comm_free(&native);
        free(c);
        return face_fail_native(parent, rc, fn);
    }
    comms_add(c);
    *newcomm = c;
    return MPI_SUCCESS;
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
    if (!face_comm_ok(comm) || !newcomm)
        return face_fail(comm, face_comm_ok(comm) ? MPI_ERR_ARG : MPI_ERR_COMM, "MPI_Comm_dup",
                         "invalid argument");
    mpiv_comm_t n = MPIV_COMM_NULL;
    int rc = mpiv_comm_dup(comm->native, &n);
    if (rc)
        return face_fail_native(comm, rc, "MPI_Comm_dup");
    return adopt(comm, n, newcomm, "MPI_Comm_dup");
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    if (!face_comm_ok(comm) || !newcomm)
        return face_fail(comm, face_comm_ok(comm) ? MPI_ERR_ARG : MPI_ERR_COMM, "MPI_Comm_split",
                         "invalid argument");
    mpiv_comm_t n = MPIV_COMM_NULL;
    int rc = mpiv_comm_split(comm->native, color == MPI_UNDEFINED ? MPIV_UNDEFINED : color, key,
                             &n);
    if (rc)
        return face_fail_native(comm, rc, "MPI_Comm_split");
    return adopt(comm, n, newcomm, "MPI_Comm_split");
}

/* Ranks on the same host: each takes as color the lowest rank of comm
 * whose host name is its own. */
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm)
{
    (void)info;
    if (!face_comm_ok(comm) || !newcomm)
        return face_fail(comm, face_comm_ok(comm) ? MPI_ERR_ARG : MPI_ERR_COMM,
                         "MPI_Comm_split_type", "invalid argument");
    if (split_type != MPI_COMM_TYPE_SHARED && split_type != MPI_UNDEFINED)
        return face_fail(comm, MPI_ERR_ARG, "MPI_Comm_split_type",
                         "split_type %d: only MPI_COMM_TYPE_SHARED is supported", split_type);
    enum { NAME = 256 };
    char mine[NAME] = {0};
    char *all = malloc((size_t)comm->size * NAME);
    if (!all)
        return face_fail(comm, MPI_ERR_NO_MEM, "MPI_Comm_split_type", "out of memory");
    gethostname(mine, NAME - 1);
    int rc = mpiv_allgather(mine, all, NAME, MPIV_BYTE, comm->native);
    if (rc) {
        free(all);
        return face_fail_native(comm, rc, "MPI_Comm_split_type");
    }
    int color = 0;
    while (strncmp(all + (size_t)color * NAME, mine, NAME) != 0)
        color++;
    free(all);
    return MPI_Comm_split(comm, split_type == MPI_UNDEFINED ? MPI_UNDEFINED : color, key,
                          newcomm);
}

int MPI_Comm_free(MPI_Comm *comm)
{
    if (!comm || !face_comm_ok(*comm) || *comm == MPI_COMM_WORLD || *comm == MPI_COMM_SELF)
        return face_fail(comm ? *comm : NULL, MPI_ERR_COMM, "MPI_Comm_free",
                         "not a communicator the program may free");
    comms_remove(*comm);
    face_comm_release(*comm);
    free(*comm);
    *comm = MPI_COMM_NULL;
    return MPI_SUCCESS;
}

int MPI_Comm_get_attr(MPI_Comm comm, int keyval, void *attribute_val, int *flag)
{
    /* the values live as long as the program: MPI hands out pointers */
    static int tag_ub = MPIV_TAG_MAX, wtime_global = 0;
    if (!face_comm_ok(comm) || !attribute_val || !flag)
        return face_fail(comm, face_comm_ok(comm) ? MPI_ERR_ARG : MPI_ERR_COMM,
                         "MPI_Comm_get_attr", "invalid argument");
    *flag = 1;
    if (keyval == MPI_TAG_UB)
        *(int **)attribute_val = &tag_ub;
    else if (keyval == MPI_WTIME_IS_GLOBAL)
        *(int **)attribute_val = &wtime_global;
    else
        *flag = 0;
    return MPI_SUCCESS;
}

/* --- life cycle ------------------------------------------------------------ */

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    (void)required;
    if (face_state != 0)
        return face_fail(NULL, MPI_ERR_OTHER, "MPI_Init",
                         face_state == 1 ? "MPI is initialized already"
                                         : "MPI cannot be initialized after MPI_Finalize");
    mpiv_mpi_comm_world_.errhandler = MPI_ERRORS_ARE_FATAL;
    int rc = mpiv_init(argc, argv);
    if (rc)
        return face_fail_native(NULL, rc, "MPI_Init");
    rc = face_comm_setup(&mpiv_mpi_comm_world_, MPIV_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    mpiv_comm_t self = MPIV_COMM_NULL;
    if (!rc)
        rc = mpiv_comm_split(MPIV_COMM_WORLD, mpiv_rank(), 0, &self);
    if (!rc)
        rc = face_comm_setup(&mpiv_mpi_comm_self_, self, MPI_ERRORS_ARE_FATAL);
    if (rc)
        return face_fail_native(NULL, rc, "MPI_Init");
    main_thread = pthread_self();
    face_state = 1;
    if (provided)
        *provided = MPI_THREAD_MULTIPLE;
    return MPI_SUCCESS;
}

int MPI_Init(int *argc, char ***argv) { return MPI_Init_thread(argc, argv, MPI_THREAD_SINGLE, NULL); }

int MPI_Finalize(void)
{
    FACE_CHECK_RUNNING("MPI_Finalize");
    face_detached_drain();
    /* the program's communicators stay (it may still hold them), but
     * their collectives' ULTs must be joined before MPIv stops */
    pthread_mutex_lock(&comms_lock);
    for (MPI_Comm c = comms.next; c != &comms; c = c->next)
        face_nbc_drain(c);
    pthread_mutex_unlock(&comms_lock);
    face_comm_release(&mpiv_mpi_comm_self_);
    face_nbc_drain(&mpiv_mpi_comm_world_);
    pthread_mutex_destroy(&mpiv_mpi_comm_world_.nbc_lock);
    mpiv_comm_free(&mpiv_mpi_comm_world_.shadow);
    int rc = mpiv_finalize();
    if (rc)
        return face_fail_native(NULL, rc, "MPI_Finalize");
    mpiv_mpi_comm_world_.native = MPIV_COMM_NULL;
    face_state = 2;
    return MPI_SUCCESS;
}

int MPI_Initialized(int *flag)
{
    if (!flag)
        return MPI_ERR_ARG;
    *flag = face_state != 0;
    return MPI_SUCCESS;
}

int MPI_Finalized(int *flag)
{
    if (!flag)
        return MPI_ERR_ARG;
    *flag = face_state == 2;
    return MPI_SUCCESS;
}

int MPI_Query_thread(int *provided)
{
    if (!provided)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Query_thread", "NULL argument");
    *provided = MPI_THREAD_MULTIPLE;
    return MPI_SUCCESS;
}

int MPI_Is_thread_main(int *flag)
{
    if (!flag)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Is_thread_main", "NULL argument");
    *flag = face_state != 0 && mpiv_ult_self() == NULL && pthread_equal(pthread_self(), main_thread);
    return MPI_SUCCESS;
}

/* The launcher (mpiv_run, Slurm, mpirun) ends the other ranks when one
 * leaves without finalizing. */
int MPI_Abort(MPI_Comm comm, int errorcode)
{
    (void)comm;
    fprintf(stderr, "MPI_Abort on rank %d: error code %d\n", mpiv_rank(), errorcode);
    fflush(NULL);
    _exit(errorcode);
}

double MPI_Wtime(void) { return mpiv_wtime(); }

double MPI_Wtick(void)
{
    struct timespec res;
    if (clock_getres(CLOCK_MONOTONIC, &res) != 0)
        return 1e-9;
    return (double)res.tv_sec + (double)res.tv_nsec * 1e-9;
}

int MPI_Get_processor_name(char *name, int *resultlen)
{
    if (!name || !resultlen)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Get_processor_name", "NULL argument");
    if (gethostname(name, MPI_MAX_PROCESSOR_NAME) != 0)
        snprintf(name, MPI_MAX_PROCESSOR_NAME, "unknown");
    name[MPI_MAX_PROCESSOR_NAME - 1] = '\0';
    *resultlen = (int)strlen(name);
    return MPI_SUCCESS;
}

int MPI_Get_version(int *version, int *subversion)
{
    if (!version || !subversion)
        return MPI_ERR_ARG;
    *version = MPI_VERSION;
    *subversion = MPI_SUBVERSION;
    return MPI_SUCCESS;
}

int MPI_Get_library_version(char *version, int *resultlen)
{
    if (!version || !resultlen)
        return MPI_ERR_ARG;
    int n = snprintf(version, MPI_MAX_LIBRARY_VERSION_STRING,
                     "MPIv %d.%d.%d (MPI %d.%d face over the native API)", MPIV_VERSION_MAJOR,
                     MPIV_VERSION_MINOR, MPIV_VERSION_PATCH, MPI_VERSION, MPI_SUBVERSION);
    *resultlen = n < 0 ? 0 : n;
    return MPI_SUCCESS;
}

int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr)
{
    (void)info;
    if (size < 0 || !baseptr)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Alloc_mem", "size %ld or baseptr", (long)size);
    void *p = malloc(size ? (size_t)size : 1);
    if (!p)
        return face_fail(NULL, MPI_ERR_NO_MEM, "MPI_Alloc_mem", "%ld bytes", (long)size);
    *(void **)baseptr = p;
    return MPI_SUCCESS;
}

int MPI_Free_mem(void *base)
{
    free(base);
    return MPI_SUCCESS;
}
