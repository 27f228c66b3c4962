/*
 * p2p.c — the MPI face's point-to-point calls, requests and probes.
 *
 * The fast path of every call is its MPIv twin: with a contiguous type
 * (every predefined one) the buffer goes to mpiv_send / mpiv_recv / ... as
 * count * extent bytes, an MPI_Request is MPIv's request and an
 * MPI_Message MPIv's message, so the face adds its argument checks and
 * one call. MPI_COMM_WORLD takes MPIv's world calls, the others the _comm
 * forms. Everything else (MPI_PROC_NULL, non-contiguous types, the
 * face's own requests) leaves the fast path at its first test.
 */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "face.h"

_Static_assert(MPI_ANY_SOURCE == MPIV_ANY_SOURCE, "wildcards are MPIv's");
_Static_assert(MPI_ANY_TAG == MPIV_ANY_TAG, "wildcards are MPIv's");
_Static_assert(MPI_UNDEFINED == MPIV_UNDEFINED, "MPI_UNDEFINED is MPIv's");

struct face_req face_req_proc_null = {.kind = FR_PROC_NULL};
struct face_req face_req_cancelled = {.kind = FR_CANCELLED};
static struct face_req message_no_proc_;
struct mpiv_message *const mpiv_mpi_message_no_proc_ = (struct mpiv_message *)&message_no_proc_;

void face_status_empty(MPI_Status *st)
{
    if (st) {
        st->MPI_SOURCE = MPI_ANY_SOURCE;
        st->MPI_TAG = MPI_ANY_TAG;
        st->MPI_ERROR = MPI_SUCCESS;
        st->mpiv_cancelled_ = 0;
        st->mpiv_bytes_ = 0;
    }
}

void face_status_proc_null(MPI_Status *st)
{
    face_status_empty(st);
    if (st)
        st->MPI_SOURCE = MPI_PROC_NULL;
}

struct face_req *face_req_new(enum face_req_kind kind)
{
    struct face_req *f = aligned_alloc(_Alignof(struct face_req), sizeof *f);
    if (f) {
        memset(f, 0, sizeof *f);
        f->kind = kind;
    }
    return f;
}

/* A packed send's or receive's own request with its temporary buffer of
 * count elements of t (a send's holds them packed already); NULL when out
 * of memory. The caller starts MPIv's request in f->inner. */
static struct face_req *packed_req(enum face_req_kind kind, const void *buf, size_t count,
                                   MPI_Datatype t)
{
    size_t n = count * t->wire;
    struct face_req *f = face_req_new(kind);
    void *tmp = f ? malloc(n ? n : 1) : NULL;
    if (!tmp) {
        free(f);
        return NULL;
    }
    f->tmp = tmp;
    f->userbuf = (void *)buf;
    f->type = t;
    f->count = count;
    if (kind == FR_SEND_PACKED)
        face_pack(t, buf, count, tmp);
    return f;
}

/* Hands out f's handle once its MPIv request started, else releases it. */
static int packed_started(struct face_req *f, int rc, MPI_Request *req)
{
    if (rc) {
        free(f->tmp);
        free(f);
    } else {
        *req = face_req_handle(f);
    }
    return rc;
}

/* --- argument checks ------------------------------------------------------ */

/* The checks every call with (count, type, comm) makes off its fast path;
 * MPI_SUCCESS or the error handler's verdict. */
static int check_args(int count, MPI_Datatype t, MPI_Comm comm, const char *fn)
{
    if (!face_comm_ok(comm))
        return face_fail(NULL, MPI_ERR_COMM, fn, "invalid communicator");
    if (count < 0)
        return face_fail(comm, MPI_ERR_COUNT, fn, "count %d < 0", count);
    if (!face_type_usable(t))
        return face_fail(comm, MPI_ERR_TYPE, fn, "%s", t ? "the datatype is not committed"
                                                          : "MPI_DATATYPE_NULL");
    return MPI_SUCCESS;
}

static inline bool fast(int count, MPI_Datatype t, MPI_Comm comm)
{
    return count >= 0 && t && t->contig && t->committed && comm;
}

/* --- sends ---------------------------------------------------------------- */

enum send_mode { STANDARD, SYNC };

static int native_send(const void *buf, size_t n, int dest, int tag, MPI_Comm comm,
                       enum send_mode mode)
{
    if (mode == SYNC)
        return comm == MPI_COMM_WORLD ? mpiv_ssend(buf, n, dest, tag)
                                      : mpiv_ssend_comm(buf, n, dest, tag, comm->native);
    return comm == MPI_COMM_WORLD ? mpiv_send(buf, n, dest, tag)
                                  : mpiv_send_comm(buf, n, dest, tag, comm->native);
}

static int native_isend(const void *buf, size_t n, int dest, int tag, MPI_Comm comm,
                        enum send_mode mode, mpiv_request_t *r)
{
    if (mode == SYNC)
        return comm == MPI_COMM_WORLD ? mpiv_issend(buf, n, dest, tag, r)
                                      : mpiv_issend_comm(buf, n, dest, tag, comm->native, r);
    return comm == MPI_COMM_WORLD ? mpiv_isend(buf, n, dest, tag, r)
                                  : mpiv_isend_comm(buf, n, dest, tag, comm->native, r);
}

FACE_COLD static int send_slow(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                     MPI_Comm comm, enum send_mode mode, const char *fn)
{
    int err = check_args(count, t, comm, fn);
    if (err)
        return err;
    if (dest == MPI_PROC_NULL)
        return MPI_SUCCESS;
    int rc;
    if (t->contig) {
        rc = native_send(buf, (size_t)count * t->extent, dest, tag, comm, mode);
    } else {
        size_t n = (size_t)count * t->wire;
        void *tmp = malloc(n ? n : 1);
        if (!tmp)
            return face_fail(comm, MPI_ERR_NO_MEM, fn, "no memory to pack %zu bytes", n);
        face_pack(t, buf, (size_t)count, tmp);
        rc = native_send(tmp, n, dest, tag, comm, mode);
        free(tmp);
    }
    return rc ? face_fail_native(comm, rc, fn) : MPI_SUCCESS;
}

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
    if (FACE_LIKELY(fast(count, datatype, comm) && dest >= 0)) {
        int rc = native_send(buf, (size_t)count * datatype->extent, dest, tag, comm, STANDARD);
        return FACE_LIKELY(rc == MPIV_SUCCESS) ? MPI_SUCCESS
                                               : face_fail_native(comm, rc, "MPI_Send");
    }
    return send_slow(buf, count, datatype, dest, tag, comm, STANDARD, "MPI_Send");
}

/* A ready send may be a standard one: the receive is posted already. */
int MPI_Rsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
    return MPI_Send(buf, count, datatype, dest, tag, comm);
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
    return send_slow(buf, count, datatype, dest, tag, comm, SYNC, "MPI_Ssend");
}

FACE_COLD static int isend_slow(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                      MPI_Comm comm, enum send_mode mode, MPI_Request *req, const char *fn)
{
    int err = check_args(count, t, comm, fn);
    if (err)
        return err;
    if (!req)
        return face_fail(comm, MPI_ERR_ARG, fn, "request is NULL");
    if (dest == MPI_PROC_NULL) {
        *req = face_req_handle(&face_req_proc_null);
        return MPI_SUCCESS;
    }
    int rc;
    if (t->contig) {
        rc = native_isend(buf, (size_t)count * t->extent, dest, tag, comm, mode, req);
    } else {
        struct face_req *f = packed_req(FR_SEND_PACKED, buf, (size_t)count, t);
        if (!f)
            return face_fail(comm, MPI_ERR_NO_MEM, fn, "no memory to pack %d elements", count);
        rc = packed_started(f, native_isend(f->tmp, (size_t)count * t->wire, dest, tag, comm,
                                            mode, &f->inner), req);
    }
    return rc ? face_fail_native(comm, rc, fn) : MPI_SUCCESS;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
              MPI_Request *request)
{
    if (FACE_LIKELY(fast(count, datatype, comm) && dest >= 0 && request)) {
        int rc = native_isend(buf, (size_t)count * datatype->extent, dest, tag, comm, STANDARD,
                              request);
        return FACE_LIKELY(rc == MPIV_SUCCESS) ? MPI_SUCCESS
                                               : face_fail_native(comm, rc, "MPI_Isend");
    }
    return isend_slow(buf, count, datatype, dest, tag, comm, STANDARD, request, "MPI_Isend");
}

int MPI_Irsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
               MPI_Comm comm, MPI_Request *request)
{
    return MPI_Isend(buf, count, datatype, dest, tag, comm, request);
}

int MPI_Issend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
               MPI_Comm comm, MPI_Request *request)
{
    return isend_slow(buf, count, datatype, dest, tag, comm, SYNC, request, "MPI_Issend");
}

/* --- receives ------------------------------------------------------------- */

static int native_recv(void *buf, size_t n, int src, int tag, MPI_Comm comm, mpiv_status_t *ns)
{
    return comm == MPI_COMM_WORLD ? mpiv_recv(buf, n, src, tag, ns)
                                  : mpiv_recv_comm(buf, n, src, tag, comm->native, ns);
}

static int native_irecv(void *buf, size_t n, int src, int tag, MPI_Comm comm, mpiv_request_t *r)
{
    return comm == MPI_COMM_WORLD ? mpiv_irecv(buf, n, src, tag, r)
                                  : mpiv_irecv_comm(buf, n, src, tag, comm->native, r);
}

/* Unpacks what arrived of at most count elements (whole elements). */
static void unpack_received(MPI_Datatype t, const void *tmp, size_t count, size_t bytes,
                            void *buf)
{
    size_t got = t->wire ? bytes / t->wire : 0;
    face_unpack(t, tmp, got < count ? got : count, buf);
}

FACE_COLD static int recv_slow(void *buf, int count, MPI_Datatype t, int source, int tag, MPI_Comm comm,
                     MPI_Status *status)
{
    int err = check_args(count, t, comm, "MPI_Recv");
    if (err)
        return err;
    if (source == MPI_PROC_NULL) {
        face_status_proc_null(status);
        return MPI_SUCCESS;
    }
    mpiv_status_t ns;
    int rc;
    if (t->contig) {
        rc = native_recv(buf, (size_t)count * t->extent, source, tag, comm, &ns);
    } else {
        size_t n = (size_t)count * t->wire;
        void *tmp = malloc(n ? n : 1);
        if (!tmp)
            return face_fail(comm, MPI_ERR_NO_MEM, "MPI_Recv", "no memory for %zu bytes", n);
        rc = native_recv(tmp, n, source, tag, comm, &ns);
        if (!rc)
            unpack_received(t, tmp, (size_t)count, ns.size, buf);
        free(tmp);
    }
    face_status_set(status, &ns);
    return rc ? face_fail_native(comm, rc, "MPI_Recv") : MPI_SUCCESS;
}

int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
             MPI_Status *status)
{
    if (FACE_LIKELY(fast(count, datatype, comm) && source != MPI_PROC_NULL)) {
        size_t n = (size_t)count * datatype->extent;
        int rc;
        if (status) {
            mpiv_status_t ns;
            rc = native_recv(buf, n, source, tag, comm, &ns);
            face_status_set(status, &ns);
        } else {
            rc = native_recv(buf, n, source, tag, comm, NULL);
        }
        return FACE_LIKELY(rc == MPIV_SUCCESS) ? MPI_SUCCESS
                                               : face_fail_native(comm, rc, "MPI_Recv");
    }
    return recv_slow(buf, count, datatype, source, tag, comm, status);
}

FACE_COLD static int irecv_slow(void *buf, int count, MPI_Datatype t, int source, int tag, MPI_Comm comm,
                      MPI_Request *req)
{
    int err = check_args(count, t, comm, "MPI_Irecv");
    if (err)
        return err;
    if (!req)
        return face_fail(comm, MPI_ERR_ARG, "MPI_Irecv", "request is NULL");
    if (source == MPI_PROC_NULL) {
        *req = face_req_handle(&face_req_proc_null);
        return MPI_SUCCESS;
    }
    int rc;
    if (t->contig) {
        rc = native_irecv(buf, (size_t)count * t->extent, source, tag, comm, req);
    } else {
        struct face_req *f = packed_req(FR_RECV_PACKED, buf, (size_t)count, t);
        if (!f)
            return face_fail(comm, MPI_ERR_NO_MEM, "MPI_Irecv", "no memory for %d elements",
                             count);
        rc = packed_started(f, native_irecv(f->tmp, (size_t)count * t->wire, source, tag, comm,
                                            &f->inner), req);
    }
    return rc ? face_fail_native(comm, rc, "MPI_Irecv") : MPI_SUCCESS;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
              MPI_Request *request)
{
    if (FACE_LIKELY(fast(count, datatype, comm) && source != MPI_PROC_NULL && request)) {
        int rc = native_irecv(buf, (size_t)count * datatype->extent, source, tag, comm, request);
        return FACE_LIKELY(rc == MPIV_SUCCESS) ? MPI_SUCCESS
                                               : face_fail_native(comm, rc, "MPI_Irecv");
    }
    return irecv_slow(buf, count, datatype, source, tag, comm, request);
}

/* --- completion ----------------------------------------------------------- */

/* The end of a packed send or receive whose MPIv request completed with
 * ns: unpacks what arrived, releases f; the operation's MPI error. */
static int finish_packed(struct face_req *f, const mpiv_status_t *ns, MPI_Status *st)
{
    if (f->kind == FR_RECV_PACKED && ns->error == MPIV_SUCCESS)
        unpack_received(f->type, f->tmp, f->count, ns->size, f->userbuf);
    face_status_set(st, ns);
    free(f->tmp);
    free(f);
    return ns->error ? face_class_of(ns->error) : MPI_SUCCESS;
}

/* Completes the face's own request f if it is done (waiting for it when
 * block): *done = 1, *st filled, f released; the MPI error of its
 * operation. Sentinels and persistent requests are never released (a
 * persistent one becomes inactive). */
static int progress_one(MPI_Request *r, bool block, int *done, MPI_Status *st);

static int own_progress(struct face_req *f, bool block, int *done, MPI_Status *st)
{
    mpiv_status_t ns;
    int rc = MPIV_SUCCESS;
    *done = 1;
    switch (f->kind) {
    case FR_PROC_NULL:
        face_status_proc_null(st);
        return MPI_SUCCESS;
    case FR_CANCELLED:
        face_status_empty(st);
        st->mpiv_cancelled_ = 1;
        return MPI_SUCCESS;
    case FR_NBC:
        if (block)
            mpiv_counter_wait(&f->done);
        else if (mpiv_counter_get(&f->done) != 0) {
            /* The collective runs on a ULT, maybe on this ULT's worker: a
             * ULT that polls must let it run, or it never completes. */
            if (mpiv_ult_self())
                mpiv_ult_yield();
            *done = 0;
            return MPI_SUCCESS;
        }
        face_status_empty(st);
        int err = f->rc;
        st->MPI_ERROR = err;
        mpiv_counter_destroy(&f->done);
        free(f);
        return err;
    case FR_SEND_PACKED:
    case FR_RECV_PACKED:
        if (block)
            rc = mpiv_wait(&f->inner, &ns);
        else {
            rc = mpiv_test(&f->inner, done, &ns);
            if (!*done)
                return rc ? face_class_of(rc) : MPI_SUCCESS;
        }
        return finish_packed(f, &ns, st);
    case FR_PERSISTENT:
        /* inactive: complete at once with an empty status */
        if (!f->started) {
            face_status_empty(st);
            return MPI_SUCCESS;
        }
        return progress_one(&f->started, block, done, st);
    }
    return MPI_ERR_INTERN;
}

/* Completes *r (which is not MPI_REQUEST_NULL) if done, or waits for it:
 * the MPI error of its operation, *done and *st as own_progress. */
static int progress_one(MPI_Request *r, bool block, int *done, MPI_Status *st)
{
    if (face_req_is_own(*r)) {
        struct face_req *f = face_req_of(*r);
        bool keep = f->kind == FR_PERSISTENT; /* read first: completion may free f */
        int err = own_progress(f, block, done, st);
        if (*done && !keep)
            *r = MPI_REQUEST_NULL;
        return err;
    }
    mpiv_status_t ns;
    int rc;
    if (block) {
        rc = mpiv_wait(r, &ns);
        *done = 1;
    } else {
        rc = mpiv_test(r, done, &ns);
        if (!*done)
            return rc ? face_class_of(rc) : MPI_SUCCESS;
    }
    face_status_set(st, &ns);
    return rc ? face_class_of(rc) : MPI_SUCCESS;
}

/* The error of a completed operation, through the error handler with the
 * detail MPIv gave when it was MPIv's. */
static int op_failed(int err, const char *fn)
{
    if (err == MPI_SUCCESS)
        return MPI_SUCCESS;
    const char *detail = mpiv_error_detail();
    return face_fail(NULL, err, fn, "the operation failed%s%s", detail[0] ? ": " : "", detail);
}

int MPI_Wait(MPI_Request *request, MPI_Status *status)
{
    if (FACE_LIKELY(request && *request && !face_req_is_own(*request))) {
        int rc;
        if (status) {
            mpiv_status_t ns;
            rc = mpiv_wait(request, &ns);
            face_status_set(status, &ns);
        } else {
            rc = mpiv_wait(request, NULL);
        }
        return FACE_LIKELY(rc == MPIV_SUCCESS) ? MPI_SUCCESS
                                               : face_fail_native(NULL, rc, "MPI_Wait");
    }
    if (!request)
        return face_fail(NULL, MPI_ERR_REQUEST, "MPI_Wait", "request is NULL");
    if (!*request) {
        face_status_empty(status);
        return MPI_SUCCESS;
    }
    MPI_Status local;
    int done;
    int err = progress_one(request, true, &done, &local);
    if (status)
        *status = local;
    return op_failed(err, "MPI_Wait");
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
    if (!request || !flag)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Test", "NULL argument");
    if (!*request) {
        *flag = 1;
        face_status_empty(status);
        return MPI_SUCCESS;
    }
    MPI_Status local = {0};
    int err = progress_one(request, false, flag, &local);
    if (*flag && status)
        *status = local;
    return op_failed(err, "MPI_Test");
}

/* Not MPI_REQUEST_NULL nor an inactive persistent request: what the
 * any and some calls look at. */
static bool active(MPI_Request r)
{
    if (!face_req_is_own(r))
        return r != MPI_REQUEST_NULL;
    struct face_req *f = face_req_of(r);
    return f->kind != FR_PERSISTENT || f->started != MPI_REQUEST_NULL;
}

static bool any_own(int n, const MPI_Request r[])
{
    for (int i = 0; i < n; i++)
        if (face_req_is_own(r[i]))
            return true;
    return false;
}

static int check_array(int n, const MPI_Request r[], const char *fn)
{
    if (n < 0 || (n > 0 && !r))
        return face_fail(NULL, MPI_ERR_ARG, fn, "count %d or requests NULL", n);
    return MPI_SUCCESS;
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    int err = check_array(count, requests, "MPI_Waitall");
    if (err)
        return err;
    if (!statuses && !any_own(count, requests)) {
        int rc = mpiv_waitall(count, requests, NULL);
        return FACE_LIKELY(rc == MPIV_SUCCESS)
                   ? MPI_SUCCESS
                   : face_fail(NULL, MPI_ERR_IN_STATUS, "MPI_Waitall", "%s: %s",
                               mpiv_strerror(rc), mpiv_error_detail());
    }
    /* one at a time: each completes on its own (MPIv progresses them all),
     * so waiting in order takes no longer than waiting for all at once */
    bool failed = false;
    for (int i = 0; i < count; i++) {
        MPI_Status local;
        int done;
        int e = MPI_SUCCESS;
        if (requests[i])
            e = progress_one(&requests[i], true, &done, &local);
        else
            face_status_empty(&local);
        local.MPI_ERROR = e;
        failed |= e != MPI_SUCCESS;
        if (statuses)
            statuses[i] = local;
    }
    return failed ? face_fail(NULL, MPI_ERR_IN_STATUS, "MPI_Waitall", "an operation failed")
                  : MPI_SUCCESS;
}

/* MPIv's request under r (MPIV_REQUEST_NULL where there is none: the
 * face's requests that complete at once or are collectives). */
static mpiv_request_t underlying(MPI_Request r)
{
    if (!face_req_is_own(r))
        return r;
    struct face_req *f = face_req_of(r);
    switch (f->kind) {
    case FR_SEND_PACKED:
    case FR_RECV_PACKED: return f->inner;
    case FR_PERSISTENT: return underlying(f->started);
    default: return MPIV_REQUEST_NULL;
    }
}

/* Completes *r, whose MPIv request (underlying) completed with ns; the
 * MPI error of its operation. */
static int finish_tested(MPI_Request *r, const mpiv_status_t *ns, MPI_Status *st)
{
    if (!*r) {
        face_status_empty(st);
        return MPI_SUCCESS;
    }
    if (!face_req_is_own(*r)) {
        face_status_set(st, ns);
        *r = MPI_REQUEST_NULL;
        return st->MPI_ERROR;
    }
    struct face_req *f = face_req_of(*r);
    if (f->kind == FR_SEND_PACKED || f->kind == FR_RECV_PACKED) {
        *r = MPI_REQUEST_NULL;
        return finish_packed(f, ns, st);
    }
    if (f->kind == FR_PERSISTENT)
        return finish_tested(&f->started, ns, st);
    int done;
    return progress_one(r, true, &done, st);
}

static bool nbc_running(MPI_Request r)
{
    if (!face_req_is_own(r))
        return false;
    struct face_req *f = face_req_of(r);
    return f->kind == FR_NBC && mpiv_counter_get(&f->done) != 0;
}

int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[])
{
    int err = check_array(count, requests, "MPI_Testall");
    if (err)
        return err;
    if (!flag)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Testall", "flag is NULL");
    /* All or nothing: a collective still running means no; the rest is
     * MPIv's own all-or-nothing test over the MPIv requests underneath. */
    for (int i = 0; i < count; i++)
        if (nbc_running(requests[i])) {
            if (mpiv_ult_self()) /* as in own_progress */
                mpiv_ult_yield();
            *flag = 0;
            return MPI_SUCCESS;
        }
    mpiv_request_t small_r[16];
    mpiv_status_t small_s[16];
    mpiv_request_t *inner = small_r;
    mpiv_status_t *ns = small_s;
    if (count > 16) {
        inner = malloc((size_t)count * sizeof *inner);
        ns = malloc((size_t)count * sizeof *ns);
        if (!inner || !ns) {
            free(inner);
            free(ns);
            return face_fail(NULL, MPI_ERR_NO_MEM, "MPI_Testall", "out of memory");
        }
    }
    for (int i = 0; i < count; i++)
        inner[i] = underlying(requests[i]);
    int all = 0;
    mpiv_testall(count, inner, &all, ns);
    bool failed = false;
    if (all) {
        for (int i = 0; i < count; i++) {
            MPI_Status local;
            int e = finish_tested(&requests[i], &ns[i], &local);
            local.MPI_ERROR = e;
            failed |= e != MPI_SUCCESS;
            if (statuses)
                statuses[i] = local;
        }
    }
    if (inner != small_r) {
        free(inner);
        free(ns);
    }
    *flag = all;
    return failed ? face_fail(NULL, MPI_ERR_IN_STATUS, "MPI_Testall", "an operation failed")
                  : MPI_SUCCESS;
}

int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status)
{
    int err = check_array(count, requests, "MPI_Testany");
    if (err)
        return err;
    if (!index || !flag)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Testany", "NULL argument");
    bool any_active = false;
    for (int i = 0; i < count; i++) {
        if (!active(requests[i]))
            continue;
        any_active = true;
        MPI_Status local;
        int done;
        int e = progress_one(&requests[i], false, &done, &local);
        if (done) {
            *flag = 1;
            *index = i;
            if (status)
                *status = local;
            return op_failed(e, "MPI_Testany");
        }
    }
    *flag = !any_active;
    *index = MPI_UNDEFINED;
    if (!any_active)
        face_status_empty(status);
    return MPI_SUCCESS;
}

int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    int err = check_array(count, requests, "MPI_Waitany");
    if (err)
        return err;
    if (!index)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Waitany", "index is NULL");
    if (!any_own(count, requests)) {
        mpiv_status_t ns;
        int rc = mpiv_waitany(count, requests, index, &ns);
        if (*index == MPI_UNDEFINED)
            face_status_empty(status);
        else
            face_status_set(status, &ns);
        return rc ? face_fail_native(NULL, rc, "MPI_Waitany") : MPI_SUCCESS;
    }
    for (;;) {
        int flag;
        err = MPI_Testany(count, requests, index, &flag, status);
        if (flag || err)
            return err;
        mpiv_ult_yield();
    }
}

/* The argument checks MPI_Testsome and MPI_Waitsome share. */
static int check_some(int incount, MPI_Request requests[], const int *outcount,
                      const int indices[], const char *fn)
{
    int err = check_array(incount, requests, fn);
    if (err)
        return err;
    if (!outcount || (incount > 0 && !indices))
        return face_fail(NULL, MPI_ERR_ARG, fn, "NULL argument");
    return MPI_SUCCESS;
}

int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[])
{
    int err = check_some(incount, requests, outcount, indices, "MPI_Testsome");
    if (err)
        return err;
    bool any_active = false, failed = false;
    int n = 0;
    for (int i = 0; i < incount; i++) {
        if (!active(requests[i]))
            continue;
        any_active = true;
        MPI_Status local;
        int done;
        int e = progress_one(&requests[i], false, &done, &local);
        if (!done)
            continue;
        local.MPI_ERROR = e;
        failed |= e != MPI_SUCCESS;
        indices[n] = i;
        if (statuses)
            statuses[n] = local;
        n++;
    }
    *outcount = any_active ? n : MPI_UNDEFINED;
    return failed ? face_fail(NULL, MPI_ERR_IN_STATUS, "MPI_Testsome", "an operation failed")
                  : MPI_SUCCESS;
}

int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[])
{
    int err = check_some(incount, requests, outcount, indices, "MPI_Waitsome");
    if (err)
        return err;
    if (!statuses && !any_own(incount, requests)) {
        int rc = mpiv_waitsome(incount, requests, outcount, indices, NULL);
        return rc ? face_fail(NULL, MPI_ERR_IN_STATUS, "MPI_Waitsome", "%s: %s",
                              mpiv_strerror(rc), mpiv_error_detail())
                  : MPI_SUCCESS;
    }
    for (;;) {
        err = MPI_Testsome(incount, requests, outcount, indices, statuses);
        if (err || *outcount != 0)
            return err;
        mpiv_ult_yield();
    }
}

/* Requests set free while active: completed later, by the next
 * MPI_Request_free or by MPI_Finalize (face_detached_drain). The lock is
 * only ever taken by these two calls. */
static pthread_mutex_t detached_lock = PTHREAD_MUTEX_INITIALIZER;
static MPI_Request *detached;
static size_t ndetached, detached_cap;

/* Completes what is done (everything when block); call under the lock. */
static void reap(bool block)
{
    size_t keep = 0;
    for (size_t i = 0; i < ndetached; i++) {
        MPI_Status st;
        int done;
        progress_one(&detached[i], block, &done, &st);
        if (!done)
            detached[keep++] = detached[i];
    }
    ndetached = keep;
}

void face_detached_drain(void)
{
    pthread_mutex_lock(&detached_lock);
    reap(true);
    free(detached);
    detached = NULL;
    detached_cap = 0;
    pthread_mutex_unlock(&detached_lock);
}

/* Hands an active request over to the detached list. */
static int detach(MPI_Request r)
{
    pthread_mutex_lock(&detached_lock);
    reap(false);
    if (ndetached == detached_cap) {
        size_t cap = detached_cap ? 2 * detached_cap : 64;
        MPI_Request *d = realloc(detached, cap * sizeof *d);
        if (!d) {
            pthread_mutex_unlock(&detached_lock);
            return face_fail(NULL, MPI_ERR_NO_MEM, "MPI_Request_free", "out of memory");
        }
        detached = d;
        detached_cap = cap;
    }
    detached[ndetached++] = r;
    pthread_mutex_unlock(&detached_lock);
    return MPI_SUCCESS;
}

int MPI_Request_free(MPI_Request *request)
{
    if (!request || !*request)
        return face_fail(NULL, MPI_ERR_REQUEST, "MPI_Request_free", "MPI_REQUEST_NULL");
    if (face_req_is_own(*request)) {
        struct face_req *f = face_req_of(*request);
        if (f->kind == FR_PROC_NULL || f->kind == FR_CANCELLED) {
            *request = MPI_REQUEST_NULL;
            return MPI_SUCCESS;
        }
        if (f->kind == FR_NBC)
            return face_fail(NULL, MPI_ERR_UNSUPPORTED_OPERATION, "MPI_Request_free",
                             "freeing a non-blocking collective's request is not supported "
                             "by MPIv's MPI face: wait for it");
        if (f->kind == FR_PERSISTENT) {
            /* its current start, if any, completes on its own */
            if (f->started) {
                int err = detach(f->started);
                if (err)
                    return err;
            }
            face_type_release(f->type);
            free(f);
            *request = MPI_REQUEST_NULL;
            return MPI_SUCCESS;
        }
    }
    int err = detach(*request);
    if (!err)
        *request = MPI_REQUEST_NULL;
    return err;
}

/* A receive nothing matched yet is taken back; MPI_Wait then completes
 * it as cancelled. Sends are never cancelled (MPIv cannot take one back):
 * they complete as usual, which MPI allows. */
int MPI_Cancel(MPI_Request *request)
{
    if (!request || !*request)
        return face_fail(NULL, MPI_ERR_REQUEST, "MPI_Cancel", "MPI_REQUEST_NULL");
    mpiv_request_t *inner = request;
    struct face_req *f = NULL;
    if (face_req_is_own(*request)) {
        f = face_req_of(*request);
        if (f->kind == FR_NBC)
            return face_fail(NULL, MPI_ERR_UNSUPPORTED_OPERATION, "MPI_Cancel",
                             "a non-blocking collective cannot be cancelled");
        if (f->kind == FR_PERSISTENT) /* its current start, if any */
            return f->started ? MPI_Cancel(&f->started) : MPI_SUCCESS;
        if (f->kind != FR_RECV_PACKED)
            return MPI_SUCCESS;
        inner = &f->inner;
    }
    int cancelled = 0;
    int rc = mpiv_cancel(inner, &cancelled);
    if (rc == MPIV_ERR_NOT_IMPLEMENTED) /* a send */
        return MPI_SUCCESS;
    if (rc)
        return face_fail_native(NULL, rc, "MPI_Cancel");
    if (cancelled) {
        if (f) {
            free(f->tmp);
            free(f);
        }
        *request = face_req_handle(&face_req_cancelled);
    }
    return MPI_SUCCESS;
}

int MPI_Test_cancelled(const MPI_Status *status, int *flag)
{
    if (!status || !flag)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Test_cancelled", "NULL argument");
    *flag = status->mpiv_cancelled_;
    return MPI_SUCCESS;
}

/* --- persistent requests ---------------------------------------------------- */

/* An inactive request that MPI_Start starts as the non-blocking call op
 * with these arguments (checked then, as that call checks them). */
static int persistent(enum face_persistent_op op, const void *buf, int count, MPI_Datatype t,
                      int peer, int tag, MPI_Comm comm, MPI_Request *request, const char *fn)
{
    int err = check_args(count, t, comm, fn);
    if (err)
        return err;
    if (!request)
        return face_fail(comm, MPI_ERR_ARG, fn, "request is NULL");
    struct face_req *f = face_req_new(FR_PERSISTENT);
    if (!f)
        return face_fail(comm, MPI_ERR_NO_MEM, fn, "out of memory");
    f->op = op;
    f->userbuf = (void *)buf;
    f->count = (size_t)count;
    f->type = t;
    f->peer = peer;
    f->tag = tag;
    f->comm = comm;
    face_type_hold(t);
    *request = face_req_handle(f);
    return MPI_SUCCESS;
}

int MPI_Send_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                  MPI_Comm comm, MPI_Request *request)
{
    return persistent(PERSIST_SEND, buf, count, datatype, dest, tag, comm, request,
                      "MPI_Send_init");
}

int MPI_Ssend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Request *request)
{
    return persistent(PERSIST_SSEND, buf, count, datatype, dest, tag, comm, request,
                      "MPI_Ssend_init");
}

int MPI_Rsend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Request *request)
{
    return persistent(PERSIST_SEND, buf, count, datatype, dest, tag, comm, request,
                      "MPI_Rsend_init");
}

int MPI_Recv_init(void *buf, int count, MPI_Datatype datatype, int source, int tag,
                  MPI_Comm comm, MPI_Request *request)
{
    return persistent(PERSIST_RECV, buf, count, datatype, source, tag, comm, request,
                      "MPI_Recv_init");
}

int MPI_Start(MPI_Request *request)
{
    if (!request || !face_req_is_own(*request) ||
        face_req_of(*request)->kind != FR_PERSISTENT)
        return face_fail(NULL, MPI_ERR_REQUEST, "MPI_Start", "not a persistent request");
    struct face_req *f = face_req_of(*request);
    if (f->started)
        return face_fail(f->comm, MPI_ERR_REQUEST, "MPI_Start", "the request is active");
    int c = (int)f->count;
    switch (f->op) {
    case PERSIST_SEND:
        return MPI_Isend(f->userbuf, c, f->type, f->peer, f->tag, f->comm, &f->started);
    case PERSIST_SSEND:
        return MPI_Issend(f->userbuf, c, f->type, f->peer, f->tag, f->comm, &f->started);
    case PERSIST_RECV:
        return MPI_Irecv(f->userbuf, c, f->type, f->peer, f->tag, f->comm, &f->started);
    }
    return MPI_ERR_INTERN;
}

int MPI_Startall(int count, MPI_Request requests[])
{
    int err = check_array(count, requests, "MPI_Startall");
    for (int i = 0; !err && i < count; i++)
        err = MPI_Start(&requests[i]);
    return err;
}

/* --- sendrecv --------------------------------------------------------------- */

int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status *status)
{
    if (FACE_LIKELY(fast(sendcount, sendtype, comm) && fast(recvcount, recvtype, comm) &&
                    dest >= 0 && source != MPI_PROC_NULL)) {
        mpiv_status_t ns;
        int rc = mpiv_sendrecv_comm(sendbuf, (size_t)sendcount * sendtype->extent, dest, sendtag,
                                    recvbuf, (size_t)recvcount * recvtype->extent, source,
                                    recvtag, comm->native, &ns);
        face_status_set(status, &ns);
        return rc ? face_fail_native(comm, rc, "MPI_Sendrecv") : MPI_SUCCESS;
    }
    int err = check_args(sendcount, sendtype, comm, "MPI_Sendrecv");
    if (!err)
        err = check_args(recvcount, recvtype, comm, "MPI_Sendrecv");
    if (err)
        return err;
    MPI_Request r[2];
    MPI_Status st[2];
    err = MPI_Irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &r[0]);
    if (err)
        return err;
    err = MPI_Isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &r[1]);
    if (err) {
        MPI_Cancel(&r[0]);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        return err;
    }
    /* completed here, so that a failure goes to comm's handler */
    int done, rerr = progress_one(&r[0], true, &done, &st[0]);
    int serr = progress_one(&r[1], true, &done, &st[1]);
    if (status)
        *status = st[0];
    if (rerr || serr)
        return face_fail(comm, rerr ? rerr : serr, "MPI_Sendrecv", "the %s failed",
                         rerr ? "receive" : "send");
    return MPI_SUCCESS;
}

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype datatype, int dest, int sendtag,
                         int source, int recvtag, MPI_Comm comm, MPI_Status *status)
{
    int err = check_args(count, datatype, comm, "MPI_Sendrecv_replace");
    if (err)
        return err;
    size_t n = (size_t)count * datatype->wire;
    if (n > INT_MAX)
        return face_fail(comm, MPI_ERR_COUNT, "MPI_Sendrecv_replace",
                         "%zu bytes: more than MPIv's face replaces at once", n);
    void *tmp = malloc(n ? n : 1);
    if (!tmp)
        return face_fail(comm, MPI_ERR_NO_MEM, "MPI_Sendrecv_replace", "out of memory");
    face_pack(datatype, buf, (size_t)count, tmp);
    err = MPI_Sendrecv(tmp, (int)n, MPI_BYTE, dest, sendtag, buf, count, datatype, source,
                       recvtag, comm, status);
    free(tmp);
    return err;
}

/* --- probes ------------------------------------------------------------------ */

/* The four probes: blocking when flag is NULL, matched when message is
 * not NULL. */
static int probe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message,
                 MPI_Status *status, const char *fn)
{
    if (!face_comm_ok(comm))
        return face_fail(NULL, MPI_ERR_COMM, fn, "invalid communicator");
    int found = 1;
    if (source == MPI_PROC_NULL) {
        if (message)
            *message = MPI_MESSAGE_NO_PROC;
        face_status_proc_null(status);
    } else {
        mpiv_status_t ns;
        int rc;
        if (message)
            rc = flag ? mpiv_improbe_comm(source, tag, comm->native, &found, message, &ns)
                      : mpiv_mprobe_comm(source, tag, comm->native, message, &ns);
        else
            rc = flag ? mpiv_iprobe_comm(source, tag, comm->native, &found, &ns)
                      : mpiv_probe_comm(source, tag, comm->native, &ns);
        if (rc)
            return face_fail_native(comm, rc, fn);
        if (found)
            face_status_set(status, &ns);
    }
    if (flag)
        *flag = found;
    return MPI_SUCCESS;
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    return probe(source, tag, comm, NULL, NULL, status, "MPI_Probe");
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status)
{
    if (!flag)
        return face_fail(comm, MPI_ERR_ARG, "MPI_Iprobe", "flag is NULL");
    return probe(source, tag, comm, flag, NULL, status, "MPI_Iprobe");
}

int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status)
{
    if (!message)
        return face_fail(comm, MPI_ERR_ARG, "MPI_Mprobe", "message is NULL");
    return probe(source, tag, comm, NULL, message, status, "MPI_Mprobe");
}

int MPI_Improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message,
                MPI_Status *status)
{
    if (!flag || !message)
        return face_fail(comm, MPI_ERR_ARG, "MPI_Improbe", "flag or message is NULL");
    return probe(source, tag, comm, flag, message, status, "MPI_Improbe");
}

int MPI_Mrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message,
              MPI_Status *status)
{
    int err = check_args(count, datatype, MPI_COMM_WORLD, "MPI_Mrecv");
    if (err)
        return err;
    if (!message || !*message)
        return face_fail(NULL, MPI_ERR_REQUEST, "MPI_Mrecv", "no message");
    if (*message == MPI_MESSAGE_NO_PROC) {
        *message = MPI_MESSAGE_NULL;
        face_status_proc_null(status);
        return MPI_SUCCESS;
    }
    mpiv_status_t ns;
    int rc;
    if (datatype->contig) {
        rc = mpiv_mrecv(buf, (size_t)count * datatype->extent, message, &ns);
    } else {
        size_t n = (size_t)count * datatype->wire;
        void *tmp = malloc(n ? n : 1);
        if (!tmp)
            return face_fail(NULL, MPI_ERR_NO_MEM, "MPI_Mrecv", "no memory for %zu bytes", n);
        rc = mpiv_mrecv(tmp, n, message, &ns);
        if (!rc)
            unpack_received(datatype, tmp, (size_t)count, ns.size, buf);
        free(tmp);
    }
    face_status_set(status, &ns);
    return rc ? face_fail_native(NULL, rc, "MPI_Mrecv") : MPI_SUCCESS;
}

int MPI_Imrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message,
               MPI_Request *request)
{
    int err = check_args(count, datatype, MPI_COMM_WORLD, "MPI_Imrecv");
    if (err)
        return err;
    if (!message || !*message || !request)
        return face_fail(NULL, MPI_ERR_REQUEST, "MPI_Imrecv", "no message or request");
    if (*message == MPI_MESSAGE_NO_PROC) {
        *message = MPI_MESSAGE_NULL;
        *request = face_req_handle(&face_req_proc_null);
        return MPI_SUCCESS;
    }
    int rc;
    if (datatype->contig) {
        rc = mpiv_imrecv(buf, (size_t)count * datatype->extent, message, request);
    } else {
        struct face_req *f = packed_req(FR_RECV_PACKED, buf, (size_t)count, datatype);
        if (!f)
            return face_fail(NULL, MPI_ERR_NO_MEM, "MPI_Imrecv", "no memory for %d elements",
                             count);
        rc = packed_started(f, mpiv_imrecv(f->tmp, (size_t)count * datatype->wire, message,
                                           &f->inner), request);
    }
    return rc ? face_fail_native(NULL, rc, "MPI_Imrecv") : MPI_SUCCESS;
}

int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count)
{
    if (!status || !count || !face_type_usable(datatype))
        return face_fail(NULL, face_type_usable(datatype) ? MPI_ERR_ARG : MPI_ERR_TYPE,
                         "MPI_Get_count", "invalid argument");
    size_t bytes = status->mpiv_bytes_, w = datatype->wire;
    if (w == 0)
        *count = bytes == 0 ? 0 : MPI_UNDEFINED;
    else if (bytes % w || bytes / w > INT_MAX)
        *count = MPI_UNDEFINED;
    else
        *count = (int)(bytes / w);
    return MPI_SUCCESS;
}
