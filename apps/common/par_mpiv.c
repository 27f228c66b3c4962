/*
 * par_mpiv.c — par.h on MPIv: tasks are ULTs, messages are mpiv_* calls.
 *
 * The main task runs in a ULT too, so that every blocking call of the
 * application gives its worker to other ULTs instead of parking a pthread.
 * Tasks are spread over the workers explicitly (hint % workers): a ULT that
 * spawns with MPIV_WORKER_ANY would keep all its children on its own worker.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpiv.h>

#include "par.h"

_Static_assert(sizeof(mpiv_request_t) <= sizeof(par_req_t), "par_req_t holds a request");
_Static_assert(sizeof(mpiv_mutex_t) <= sizeof(par_mutex_t), "par_mutex_t holds a mutex");

static void check(int err, const char *what)
{
    if (err != MPIV_SUCCESS)
        par_die("%s failed: %s%s%s", what, mpiv_strerror(err),
                *mpiv_error_detail() ? ": " : "", mpiv_error_detail());
}

void par_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[rank %d] ", mpiv_rank());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    par_abort(1);
}

void par_init(int *argc, char ***argv) { check(mpiv_init(argc, argv), "mpiv_init"); }

struct main_arg {
    int (*fn)(void *);
    void *arg;
    int ret;
};

static void *main_ult(void *p)
{
    struct main_arg *m = p;
    m->ret = m->fn(m->arg);
    return NULL;
}

int par_run(int (*fn)(void *), void *arg)
{
    struct main_arg m = {fn, arg, 0};
    mpiv_ult_t u;
    check(mpiv_ult_spawn(main_ult, &m, 0, &u), "mpiv_ult_spawn(main)");
    check(mpiv_ult_join(u, NULL), "mpiv_ult_join(main)");
    return m.ret;
}

void par_finalize(void) { check(mpiv_finalize(), "mpiv_finalize"); }

void par_abort(int code)
{
    /* MPIv has no abort: a rank that exits ends the job (mpiv_run reports
     * it), which is what an abort would do. */
    fflush(stdout);
    fflush(stderr);
    _Exit(code);
}

int par_rank(void) { return mpiv_rank(); }
int par_size(void) { return mpiv_size(); }
double par_wtime(void) { return mpiv_wtime(); }
const char *par_name(void) { return "mpiv"; }
int par_threads(void) { return mpiv_num_workers(); }
void par_set_threads(int n) { (void)n; }

par_task_t *par_spawn(void *(*fn)(void *), void *arg, int hint)
{
    mpiv_ult_t u;
    int w = hint < 0 ? MPIV_WORKER_ANY : hint % mpiv_num_workers();
    check(mpiv_ult_spawn(fn, arg, w, &u), "mpiv_ult_spawn");
    return (par_task_t *)u;
}

void *par_join(par_task_t *t)
{
    void *ret;
    check(mpiv_ult_join((mpiv_ult_t)t, &ret), "mpiv_ult_join");
    return ret;
}

struct for_item {
    void (*fn)(void *, int64_t);
    void *arg;
    int64_t i;
    mpiv_ult_t ult;
};

static void *for_ult(void *p)
{
    struct for_item *it = p;
    it->fn(it->arg, it->i);
    return NULL;
}

void par_for(int64_t n, void (*fn)(void *arg, int64_t i), void *arg)
{
    if (n <= 0)
        return;
    struct for_item *items = malloc((size_t)n * sizeof *items);
    if (!items)
        par_die("par_for: out of memory for %lld tasks", (long long)n);
    int nw = mpiv_num_workers();
    for (int64_t i = 0; i < n; i++) {
        items[i] = (struct for_item){fn, arg, i, NULL};
        check(mpiv_ult_spawn(for_ult, &items[i], (int)(i % nw), &items[i].ult), "mpiv_ult_spawn");
    }
    for (int64_t i = 0; i < n; i++)
        check(mpiv_ult_join(items[i].ult, NULL), "mpiv_ult_join");
    free(items);
}

void par_yield(void) { mpiv_ult_yield(); }

void par_mutex_init(par_mutex_t *m) { check(mpiv_mutex_init((mpiv_mutex_t *)m), "mpiv_mutex_init"); }
void par_mutex_lock(par_mutex_t *m) { check(mpiv_mutex_lock((mpiv_mutex_t *)m), "mpiv_mutex_lock"); }
void par_mutex_unlock(par_mutex_t *m) { check(mpiv_mutex_unlock((mpiv_mutex_t *)m), "mpiv_mutex_unlock"); }
void par_mutex_destroy(par_mutex_t *m) { check(mpiv_mutex_destroy((mpiv_mutex_t *)m), "mpiv_mutex_destroy"); }

void par_send(const void *buf, size_t size, int dest, int tag)
{
    check(mpiv_send(buf, size, dest, tag), "mpiv_send");
}

size_t par_recv(void *buf, size_t size, int src, int tag)
{
    mpiv_status_t st;
    check(mpiv_recv(buf, size, src, tag, &st), "mpiv_recv");
    return st.size;
}

void par_isend(const void *buf, size_t size, int dest, int tag, par_req_t *req)
{
    mpiv_request_t r;
    check(mpiv_isend(buf, size, dest, tag, &r), "mpiv_isend");
    *req = (par_req_t)r;
}

void par_irecv(void *buf, size_t size, int src, int tag, par_req_t *req)
{
    mpiv_request_t r;
    check(mpiv_irecv(buf, size, src, tag, &r), "mpiv_irecv");
    *req = (par_req_t)r;
}

void par_waitall(int n, par_req_t *reqs)
{
    for (int i = 0; i < n; i++) {
        mpiv_request_t r = (mpiv_request_t)reqs[i];
        check(mpiv_wait(&r, NULL), "mpiv_wait");
        reqs[i] = 0;
    }
}

int par_test(par_req_t *req, size_t *size)
{
    mpiv_request_t r = (mpiv_request_t)*req;
    mpiv_status_t st;
    int flag = 0;
    check(mpiv_test(&r, &flag, &st), "mpiv_test");
    if (!flag)
        return 0;
    *req = 0;
    if (size)
        *size = st.size;
    return 1;
}

void par_barrier(void) { check(mpiv_barrier(), "mpiv_barrier"); }

void par_bcast(void *buf, size_t size, int root) { check(mpiv_bcast(buf, size, root), "mpiv_bcast"); }

static mpiv_op_t op_of(enum par_op op)
{
    return op == PAR_SUM ? MPIV_SUM : op == PAR_MIN ? MPIV_MIN : MPIV_MAX;
}

void par_allreduce_i64(const int64_t *in, int64_t *out, size_t n, enum par_op op)
{
    check(mpiv_allreduce(in, out, n, MPIV_INT64, op_of(op)), "mpiv_allreduce");
}

void par_allreduce_f64(const double *in, double *out, size_t n, enum par_op op)
{
    check(mpiv_allreduce(in, out, n, MPIV_DOUBLE, op_of(op)), "mpiv_allreduce");
}

void par_allgather(const void *in, void *out, size_t size)
{
    check(mpiv_allgather(in, out, size, MPIV_BYTE, MPIV_COMM_WORLD), "mpiv_allgather");
}
