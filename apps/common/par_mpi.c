/*
 * par_mpi.c — par.h on MPI + pthreads (MPI_THREAD_MULTIPLE).
 *
 * Tasks are pthreads. par_for runs a team of par_threads() pthreads (the
 * caller is one of them) that take indices from a shared counter, which is
 * how an MPI + threads code spreads many small tasks over few threads.
 * The default team size is the cores of this node divided by the ranks on
 * it; --threads (par_set_threads) overrides it.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "par.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(par_req_t), "par_req_t holds an MPI_Request");
_Static_assert(sizeof(pthread_mutex_t) <= sizeof(par_mutex_t), "par_mutex_t holds a pthread mutex");

static int g_rank = -1, g_size = 0, g_threads = 1;

static void check(int err, const char *what)
{
    if (err != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(err, msg, &len);
        par_die("%s failed: %s", what, msg);
    }
}

void par_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[rank %d] ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    par_abort(1);
}

void par_init(int *argc, char ***argv)
{
    int provided = MPI_THREAD_SINGLE, initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
        /* A program that calls MPI itself (the expert versions) chose its
         * own thread level; it uses only this layer's one-thread calls. */
        MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &g_size);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        return;
    }
    check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_MULTIPLE)
        par_die("this MPI provides thread level %d, not MPI_THREAD_MULTIPLE", provided);
    MPI_Comm node;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    g_threads = cores > local ? (int)(cores / local) : 1;
}

int par_run(int (*fn)(void *), void *arg) { return fn(arg); }

void par_finalize(void) { check(MPI_Finalize(), "MPI_Finalize"); }

void par_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    if (g_size > 1)
        MPI_Abort(MPI_COMM_WORLD, code);
    _Exit(code);
}

int par_rank(void) { return g_rank; }
int par_size(void) { return g_size; }
double par_wtime(void) { return MPI_Wtime(); }
const char *par_name(void) { return "mpi"; }
int par_threads(void) { return g_threads; }
void par_set_threads(int n)
{
    if (n > 0)
        g_threads = n;
}

struct par_task {
    pthread_t th;
};

par_task_t *par_spawn(void *(*fn)(void *), void *arg, int hint)
{
    (void)hint;
    par_task_t *t = malloc(sizeof *t);
    if (!t || pthread_create(&t->th, NULL, fn, arg) != 0)
        par_die("pthread_create failed");
    return t;
}

void *par_join(par_task_t *t)
{
    void *ret = NULL;
    pthread_join(t->th, &ret);
    free(t);
    return ret;
}

struct team {
    void (*fn)(void *, int64_t);
    void *arg;
    int64_t n;
    int64_t next; /* next index to run, taken with an atomic add */
};

static void *team_thread(void *p)
{
    struct team *tm = p;
    for (;;) {
        int64_t i = __atomic_fetch_add(&tm->next, 1, __ATOMIC_RELAXED);
        if (i >= tm->n)
            break;
        tm->fn(tm->arg, i);
    }
    return NULL;
}

void par_for(int64_t n, void (*fn)(void *arg, int64_t i), void *arg)
{
    if (n <= 0)
        return;
    struct team tm = {fn, arg, n, 0};
    int nt = g_threads < n ? g_threads : (int)n;
    pthread_t th[nt > 1 ? nt - 1 : 1];
    for (int t = 0; t < nt - 1; t++)
        if (pthread_create(&th[t], NULL, team_thread, &tm) != 0)
            par_die("pthread_create failed");
    team_thread(&tm);
    for (int t = 0; t < nt - 1; t++)
        pthread_join(th[t], NULL);
}

void par_yield(void) { sched_yield(); }

void par_mutex_init(par_mutex_t *m) { pthread_mutex_init((pthread_mutex_t *)m, NULL); }
void par_mutex_lock(par_mutex_t *m) { pthread_mutex_lock((pthread_mutex_t *)m); }
void par_mutex_unlock(par_mutex_t *m) { pthread_mutex_unlock((pthread_mutex_t *)m); }
void par_mutex_destroy(par_mutex_t *m) { pthread_mutex_destroy((pthread_mutex_t *)m); }

static int count_of(size_t size)
{
    if (size > INT_MAX)
        par_die("message of %zu bytes is too large for this MPI layer", size);
    return (int)size;
}

void par_send(const void *buf, size_t size, int dest, int tag)
{
    check(MPI_Send(buf, count_of(size), MPI_BYTE, dest, tag, MPI_COMM_WORLD), "MPI_Send");
}

size_t par_recv(void *buf, size_t size, int src, int tag)
{
    MPI_Status st;
    int n = 0;
    check(MPI_Recv(buf, count_of(size), MPI_BYTE, src, tag, MPI_COMM_WORLD, &st), "MPI_Recv");
    MPI_Get_count(&st, MPI_BYTE, &n);
    return (size_t)n;
}

void par_isend(const void *buf, size_t size, int dest, int tag, par_req_t *req)
{
    MPI_Request r;
    check(MPI_Isend(buf, count_of(size), MPI_BYTE, dest, tag, MPI_COMM_WORLD, &r), "MPI_Isend");
    *req = 0;
    memcpy(req, &r, sizeof r);
}

void par_irecv(void *buf, size_t size, int src, int tag, par_req_t *req)
{
    MPI_Request r;
    check(MPI_Irecv(buf, count_of(size), MPI_BYTE, src, tag, MPI_COMM_WORLD, &r), "MPI_Irecv");
    *req = 0;
    memcpy(req, &r, sizeof r);
}

void par_waitall(int n, par_req_t *reqs)
{
    MPI_Request lr[16];
    MPI_Status ls[16];
    MPI_Request *r = n <= 16 ? lr : malloc((size_t)n * sizeof *r);
    MPI_Status *st = n <= 16 ? ls : malloc((size_t)n * sizeof *st);
    if (!r || !st)
        par_die("par_waitall: out of memory");
    for (int i = 0; i < n; i++)
        memcpy(&r[i], &reqs[i], sizeof r[i]);
    check(MPI_Waitall(n, r, st), "MPI_Waitall");
    for (int i = 0; i < n; i++)
        reqs[i] = 0;
    if (r != lr) {
        free(r);
        free(st);
    }
}

int par_test(par_req_t *req, size_t *size)
{
    MPI_Request r;
    MPI_Status st;
    int flag = 0;
    memcpy(&r, req, sizeof r);
    check(MPI_Test(&r, &flag, &st), "MPI_Test");
    if (!flag)
        return 0;
    *req = 0;
    if (size) {
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        *size = (size_t)n;
    }
    return 1;
}

void par_barrier(void) { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

void par_bcast(void *buf, size_t size, int root)
{
    check(MPI_Bcast(buf, count_of(size), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

void par_allgather(const void *in, void *out, size_t size)
{
    check(MPI_Allgather(in, count_of(size), MPI_BYTE, out, count_of(size), MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather");
}

static MPI_Op op_of(enum par_op op) { return op == PAR_SUM ? MPI_SUM : op == PAR_MIN ? MPI_MIN : MPI_MAX; }

void par_allreduce_i64(const int64_t *in, int64_t *out, size_t n, enum par_op op)
{
    check(MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, count_of(n), MPI_INT64_T, op_of(op), MPI_COMM_WORLD),
          "MPI_Allreduce");
}

void par_allreduce_f64(const double *in, double *out, size_t n, enum par_op op)
{
    check(MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, count_of(n), MPI_DOUBLE, op_of(op), MPI_COMM_WORLD),
          "MPI_Allreduce");
}
