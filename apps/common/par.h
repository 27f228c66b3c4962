/*
 * par.h — the thin layer under the applications (bfs, stencil, uts).
 *
 * Every application is one source that builds twice: against MPIv
 * (par_mpiv.c: tasks are ULTs, messages go through include/mpiv.h) and
 * against MPI + pthreads (par_mpi.c: tasks are pthreads, MPI is initialised
 * with MPI_THREAD_MULTIPLE). The generator, kernel and validation code is the
 * same in both; only what is below this header differs.
 *
 * Tasks. par_spawn/par_join start and wait for one concurrent task (a ULT, or
 * a pthread). par_for runs fn(arg, i) for i in [0, n) concurrently and
 * returns when all are done: one ULT per index with MPIv (ULTs are cheap, so
 * the kernel may make very many of them), a fixed team of pthreads pulling
 * indices with MPI (par_threads(), --threads). Tasks may block in
 * communication: with MPI they then hold a pthread, with MPIv only a ULT.
 *
 * Messages are matched by (source, tag) only, as in MPIv: no wildcards.
 * Every wrapper checks its return code and ends the process with a message
 * naming the call on failure: the applications have nothing better to do
 * with an error than report it.
 */
#ifndef APPS_PAR_H
#define APPS_PAR_H

#include <stddef.h>
#include <stdint.h>

/* Initialises the runtime (MPIv, or MPI with MPI_THREAD_MULTIPLE). With
 * MPI, a program that has initialised MPI itself (at the thread level it
 * needs, as the expert versions do) may call it afterwards to use the
 * one-thread parts of this layer (collectives, par_die, par_rank) on it. */
void par_init(int *argc, char ***argv);
/* Runs fn(arg) as the program's main task (a ULT with MPIv, so that it
 * blocks like every other task; directly with MPI) and returns its result. */
int par_run(int (*fn)(void *), void *arg);
void par_finalize(void);
/* Ends the whole job with exit code `code` (used after a fatal error). */
void par_abort(int code) __attribute__((noreturn));

int par_rank(void);
int par_size(void);
double par_wtime(void);
/* "mpiv" or "mpi". */
const char *par_name(void);
/* Workers (MPIv) or pthreads in a par_for team (MPI). */
int par_threads(void);
/* MPI only: size of the par_for team; ignored by MPIv. */
void par_set_threads(int n);

/* ---- tasks ---- */
typedef struct par_task par_task_t;
/* Starts fn(arg); `hint` spreads tasks over workers (MPIv). */
par_task_t *par_spawn(void *(*fn)(void *), void *arg, int hint);
void *par_join(par_task_t *t);
void par_for(int64_t n, void (*fn)(void *arg, int64_t i), void *arg);
void par_yield(void);

typedef struct par_mutex {
    _Alignas(64) unsigned char opaque_[64];
} par_mutex_t;
void par_mutex_init(par_mutex_t *m);
void par_mutex_lock(par_mutex_t *m);
void par_mutex_unlock(par_mutex_t *m);
void par_mutex_destroy(par_mutex_t *m);

/* ---- point-to-point ---- */
typedef uintptr_t par_req_t; /* an mpiv_request_t or an MPI_Request */

void par_send(const void *buf, size_t size, int dest, int tag);
/* Returns the received size. */
size_t par_recv(void *buf, size_t size, int src, int tag);
void par_isend(const void *buf, size_t size, int dest, int tag, par_req_t *req);
void par_irecv(void *buf, size_t size, int src, int tag, par_req_t *req);
void par_waitall(int n, par_req_t *reqs);
/* 1 and the received size in *size (may be NULL) if done, else 0. */
int par_test(par_req_t *req, size_t *size);

/* ---- collectives (one caller per rank at a time) ---- */
enum par_op { PAR_SUM, PAR_MIN, PAR_MAX };
void par_barrier(void);
void par_bcast(void *buf, size_t size, int root);
void par_allreduce_i64(const int64_t *in, int64_t *out, size_t n, enum par_op op);
void par_allreduce_f64(const double *in, double *out, size_t n, enum par_op op);
/* size bytes of in from every rank into out (P * size bytes), in rank order. */
void par_allgather(const void *in, void *out, size_t size);

/* Prints on stderr with the rank in front, then par_abort(1). */
void par_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif /* APPS_PAR_H */
