/*
 * comm.h — the thin layer that lets one benchmark source build against MPIv
 * (ULTs) and against MPI (pthreads, MPI_THREAD_MULTIPLE).
 *
 * Build with -DBENCH_MPIV (link libmpiv) or -DBENCH_MPI (an MPI compiler
 * wrapper). The benchmark sees only bc_* names:
 *
 *   bc_init / bc_finalize / bc_rank / bc_size / bc_wtime / bc_barrier
 *   bc_send / bc_recv / bc_isend / bc_irecv / bc_waitall   (bytes, rank, tag)
 *   bc_thread_spawn / bc_thread_join      a ULT or a plain pthread in MPIv
 *                                         (--threads ult|pthread), a pthread
 *                                         in MPI
 *   bc_team_*                             a start/stop barrier for the
 *                                         threads of one rank (--gated only)
 *   bc_run_main(fn, arg)                  runs fn as the benchmark's one
 *                                         communicating thread: a ULT for
 *                                         MPIv with --threads ult (the way
 *                                         MPIv programs run), main's thread
 *                                         with --threads pthread and for MPI
 *
 * Every call is checked: a failing call prints where and why and exits with
 * status 1, so a broken runtime fails the benchmark (and its CTest smoke
 * case) instead of printing numbers.
 *
 * Thread levels. bc_init(..., BC_THREADS_MANY) asks MPI for
 * MPI_THREAD_MULTIPLE and refuses to run without it; BC_THREADS_ONE asks for
 * MPI_THREAD_SINGLE, which is what the classic single-threaded OSU tests use
 * and is MPI's best case (no locks): the single-thread benchmarks (latency,
 * bandwidth) use it, so MPIv meets the strongest baseline for them; the
 * multithreaded ones ask for MPI_THREAD_MULTIPLE, which they need.
 */
#ifndef BENCH_PT2PT_COMM_H
#define BENCH_PT2PT_COMM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#if defined(BENCH_MPIV) == defined(BENCH_MPI)
#error "build with exactly one of -DBENCH_MPIV and -DBENCH_MPI"
#endif

enum { BC_THREADS_ONE = 0, BC_THREADS_MANY = 1 };

/* Tags at or above this are the layer's own (barrier emulation). */
#define BC_TAG_RESERVED 0x7fff0000

#define BC_DIE(...)                                                             \
    do {                                                                        \
        fprintf(stderr, "bench: %s:%d: ", __FILE__, __LINE__);                  \
        fprintf(stderr, __VA_ARGS__);                                           \
        fputc('\n', stderr);                                                    \
        exit(1);                                                                \
    } while (0)

/* For pthread calls, which return an errno value. */
#define BC_PCHECK(call)                                                         \
    do {                                                                        \
        int bc_prc_ = (call);                                                   \
        if (bc_prc_ != 0)                                                       \
            BC_DIE("%s failed: %s", #call, strerror(bc_prc_));                  \
    } while (0)

/* What the benchmark's communicating threads are (--threads): ULTs, or
 * plain pthreads (main's thread for one thread per rank). MPI has only
 * pthreads. Set once by bc_parse, before any thread is started. */
enum { BC_ULT = 0, BC_PTHREAD = 1 };
#ifdef BENCH_MPIV
static int bc_thread_mode = BC_ULT;
#else
static int bc_thread_mode = BC_PTHREAD;
#endif

static inline const char *bc_thread_kind(void) { return bc_thread_mode == BC_PTHREAD ? "pthread" : "ULT"; }

/* 1024 threads per rank: a modest stack keeps the address space sane; the
 * libraries' own call depth is far below it. Returns a pthread error code. */
static inline int bc_pthread_create(void *(*fn)(void *), void *arg, pthread_t *t)
{
    pthread_attr_t a;
    int rc = pthread_attr_init(&a);
    if (rc == 0)
        rc = pthread_attr_setstacksize(&a, 512 << 10);
    if (rc == 0)
        rc = pthread_create(t, &a, fn, arg);
    pthread_attr_destroy(&a);
    return rc;
}
static inline int bc_pthread_barrier_wait(pthread_barrier_t *b)
{
    int rc = pthread_barrier_wait(b);
    return rc == PTHREAD_BARRIER_SERIAL_THREAD ? 0 : rc;
}

/* ======================================================================== */
#ifdef BENCH_MPIV
/* ======================================================================== */
#include "mpiv.h"

#define BC_IMPL "mpiv"

#define BC_CHECK(call)                                                          \
    do {                                                                        \
        int bc_rc_ = (call);                                                    \
        if (bc_rc_ != MPIV_SUCCESS)                                             \
            BC_DIE("%s failed: %s (%s)", #call, mpiv_strerror(bc_rc_),         \
                   mpiv_error_detail());                                        \
    } while (0)

typedef mpiv_request_t bc_req_t;
/* One of the two, by bc_thread_mode; a pthread team waits at a
 * pthread_barrier_t, as a pthread program would. */
typedef struct {
    mpiv_ult_t ult;
    pthread_t pth;
} bc_thread_t;
typedef struct {
    mpiv_barrier_t ult;
    pthread_barrier_t pth;
} bc_team_t;

static inline void bc_init(int *argc, char ***argv, int threads)
{
    (void)threads;
    BC_CHECK(mpiv_init(argc, argv));
}
static inline void bc_finalize(void) { BC_CHECK(mpiv_finalize()); }
static inline int bc_rank(void) { return mpiv_rank(); }
static inline int bc_size(void) { return mpiv_size(); }
static inline double bc_wtime(void) { return mpiv_wtime(); }
static inline const char *bc_impl(void) { return BC_IMPL; }

static inline void bc_send(const void *buf, size_t n, int peer, int tag)
{
    BC_CHECK(mpiv_send(buf, n, peer, tag));
}

/* Receives exactly n bytes: a shorter message is a benchmark failure. */
static inline void bc_recv(void *buf, size_t n, int peer, int tag)
{
    mpiv_status_t st;
    BC_CHECK(mpiv_recv(buf, n, peer, tag, &st));
    if (st.size != n || st.source != peer || st.tag != tag)
        BC_DIE("recv: got %zu bytes from %d tag %d, expected %zu from %d tag %d",
               st.size, st.source, st.tag, n, peer, tag);
}

static inline void bc_isend(const void *buf, size_t n, int peer, int tag, bc_req_t *r)
{
    BC_CHECK(mpiv_isend(buf, n, peer, tag, r));
}
static inline void bc_irecv(void *buf, size_t n, int peer, int tag, bc_req_t *r)
{
    BC_CHECK(mpiv_irecv(buf, n, peer, tag, r));
}
static inline void bc_waitall(int n, bc_req_t *reqs)
{
    BC_CHECK(mpiv_waitall(n, reqs, NULL));
}

/* mpiv_barrier is the real thing; a dissemination barrier on point-to-point
 * (reserved tags) stands in while collectives are not implemented yet, so
 * the point-to-point numbers do not wait for them. */
static inline void bc_barrier(void)
{
    int rc = mpiv_barrier();
    if (rc == MPIV_SUCCESS)
        return;
    if (rc != MPIV_ERR_NOT_IMPLEMENTED)
        BC_CHECK(rc);
    int me = mpiv_rank(), n = mpiv_size();
    char token = 0;
    for (int d = 1, round = 0; d < n; d <<= 1, round++) {
        mpiv_request_t r;
        BC_CHECK(mpiv_irecv(&token, 1, (me - d + n) % n, BC_TAG_RESERVED + round, &r));
        BC_CHECK(mpiv_send(&token, 1, (me + d) % n, BC_TAG_RESERVED + round));
        BC_CHECK(mpiv_wait(&r, NULL));
    }
}

static inline void bc_thread_spawn(void *(*fn)(void *), void *arg, bc_thread_t *t)
{
    if (bc_thread_mode == BC_PTHREAD)
        BC_PCHECK(bc_pthread_create(fn, arg, &t->pth));
    else
        BC_CHECK(mpiv_ult_spawn(fn, arg, MPIV_WORKER_ANY, &t->ult));
}
static inline void bc_thread_join(bc_thread_t t)
{
    if (bc_thread_mode == BC_PTHREAD)
        BC_PCHECK(pthread_join(t.pth, NULL));
    else
        BC_CHECK(mpiv_ult_join(t.ult, NULL));
}

static inline void bc_team_init(bc_team_t *b, int count)
{
    if (bc_thread_mode == BC_PTHREAD)
        BC_PCHECK(pthread_barrier_init(&b->pth, NULL, (unsigned)count));
    else
        BC_CHECK(mpiv_barrier_init(&b->ult, count));
}
static inline void bc_team_wait(bc_team_t *b)
{
    if (bc_thread_mode == BC_PTHREAD)
        BC_PCHECK(bc_pthread_barrier_wait(&b->pth));
    else
        BC_CHECK(mpiv_barrier_wait(&b->ult));
}
static inline void bc_team_destroy(bc_team_t *b)
{
    if (bc_thread_mode == BC_PTHREAD)
        BC_PCHECK(pthread_barrier_destroy(&b->pth));
    else
        BC_CHECK(mpiv_barrier_destroy(&b->ult));
}

/* With ULTs the work runs in one ULT, main only starts and joins it (the
 * way MPIv programs run); with pthreads main's own thread does it. */
static inline void bc_run_main(void *(*fn)(void *), void *arg)
{
    if (bc_thread_mode == BC_PTHREAD) {
        fn(arg);
        return;
    }
    mpiv_ult_t u;
    BC_CHECK(mpiv_ult_spawn(fn, arg, MPIV_WORKER_ANY, &u));
    BC_CHECK(mpiv_ult_join(u, NULL));
}

/* ======================================================================== */
#else /* BENCH_MPI */
/* ======================================================================== */
#include <mpi.h>
#include <time.h>

/* MPI's error codes and pthread's errno values both mean "failed"; MPI's
 * string is only looked up for MPI calls. */
static inline const char *bc_errstr(const char *call, int rc)
{
    static _Thread_local char s[MPI_MAX_ERROR_STRING];
    int len;
    if (strncmp(call, "MPI_", 4) != 0 || MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "%s", strerror(rc));
    return s;
}
#define BC_CHECK(call)                                                          \
    do {                                                                        \
        int bc_rc_ = (call);                                                    \
        if (bc_rc_ != 0)                                                        \
            BC_DIE("%s failed: %s", #call, bc_errstr(#call, bc_rc_));            \
    } while (0)

typedef MPI_Request bc_req_t;
typedef pthread_t bc_thread_t;
typedef pthread_barrier_t bc_team_t;

static inline void bc_init(int *argc, char ***argv, int threads)
{
    int want = threads == BC_THREADS_MANY ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE;
    int got;
    BC_CHECK(MPI_Init_thread(argc, argv, want, &got));
    if (got < want)
        BC_DIE("MPI_Init_thread: asked for thread level %d, got %d", want, got);
    /* Errors return codes (checked) instead of aborting without a line. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}
static inline void bc_finalize(void) { BC_CHECK(MPI_Finalize()); }
static inline int bc_rank(void)
{
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
static inline int bc_size(void)
{
    int s;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
}
static inline double bc_wtime(void) { return MPI_Wtime(); }

/* "mpich", "openmpi" or "mpi", from the library's own version string. */
static inline const char *bc_impl(void)
{
    static char name[16];
    if (!name[0]) {
        char v[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(v, &len);
        strcpy(name, strstr(v, "MPICH") ? "mpich" : strstr(v, "Open MPI") ? "openmpi" : "mpi");
    }
    return name;
}
#define BC_IMPL bc_impl()

static inline void bc_send(const void *buf, size_t n, int peer, int tag)
{
    BC_CHECK(MPI_Send(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
}
static inline void bc_recv(void *buf, size_t n, int peer, int tag)
{
    MPI_Status st;
    int got;
    BC_CHECK(MPI_Recv(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
    MPI_Get_count(&st, MPI_BYTE, &got);
    if ((size_t)got != n)
        BC_DIE("recv: got %d bytes, expected %zu", got, n);
}
static inline void bc_isend(const void *buf, size_t n, int peer, int tag, bc_req_t *r)
{
    BC_CHECK(MPI_Isend(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, r));
}
static inline void bc_irecv(void *buf, size_t n, int peer, int tag, bc_req_t *r)
{
    BC_CHECK(MPI_Irecv(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, r));
}
/* MPI_STATUSES_IGNORE is the address 1; GCC 12 takes MPI_Waitall's
 * `MPI_Status[]` parameter at its word and warns about a zero-size region. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
static inline void bc_waitall(int n, bc_req_t *reqs)
{
    BC_CHECK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
static inline void bc_barrier(void) { BC_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

static inline void bc_thread_spawn(void *(*fn)(void *), void *arg, bc_thread_t *t)
{
    BC_PCHECK(bc_pthread_create(fn, arg, t));
}
static inline void bc_thread_join(bc_thread_t t) { BC_PCHECK(pthread_join(t, NULL)); }

static inline void bc_team_init(bc_team_t *b, int count)
{
    BC_PCHECK(pthread_barrier_init(b, NULL, (unsigned)count));
}
static inline void bc_team_wait(bc_team_t *b) { BC_PCHECK(bc_pthread_barrier_wait(b)); }
static inline void bc_team_destroy(bc_team_t *b) { BC_PCHECK(pthread_barrier_destroy(b)); }

static inline void bc_run_main(void *(*fn)(void *), void *arg) { fn(arg); }

#endif /* BENCH_MPI */

/* ======================================================================== */
/* Shared helpers                                                           */
/* ======================================================================== */

/* The byte at offset i of a message of a given size sent in round `seed`:
 * every size and round differs, so a stale or misplaced buffer shows. */
static inline unsigned char bc_pattern(size_t i, size_t size, unsigned seed)
{
    return (unsigned char)((i * 7u + size * 13u + seed * 101u + (i >> 8)) & 0xff);
}
static inline void bc_fill(void *buf, size_t size, unsigned seed)
{
    unsigned char *p = buf;
    for (size_t i = 0; i < size; i++)
        p[i] = bc_pattern(i, size, seed);
}
/* Dies naming the first wrong byte. */
static inline void bc_verify(const void *buf, size_t size, unsigned seed, const char *what)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < size; i++)
        if (p[i] != bc_pattern(i, size, seed))
            BC_DIE("%s: data check failed for a %zu-byte message at byte %zu: "
                   "got 0x%02x, expected 0x%02x",
                   what, size, i, p[i], bc_pattern(i, size, seed));
}

static inline void *bc_alloc(size_t size)
{
    void *p = NULL;
    /* Page alignment, as OSU does, so sizes are not penalised by alignment. */
    if (posix_memalign(&p, 4096, size ? size : 1) != 0)
        BC_DIE("out of memory allocating %zu bytes", size);
    memset(p, 0, size ? size : 1);
    return p;
}

/* Runs fn(args + i * stride) on n threads of the benchmark's kind and
 * returns the seconds its caller (main's thread) saw pass.
 *
 * By default (tm == NULL) that is what a program's own timing of a parallel
 * section sees: from just before the first thread is started to just after
 * the last one is joined, with nothing between the threads but their
 * messages. Warm-up, if any, is a run of its own before this one.
 *
 * With a team (--gated, the harness's earlier way, kept for comparison):
 * each thread does its warm-up, waits at `start`, runs the timed part and
 * waits at `end`, and the time is from the opening of `start` to the closing
 * of `end`; thread start and join are not timed, and all threads of the
 * rank are released into the timed part at the same instant. */
struct bc_team {
    bc_team_t start, end;
};

static inline double bc_team_run(struct bc_team *tm, int n, void *(*fn)(void *), void *args,
                                 size_t stride)
{
    bc_thread_t *t = malloc((size_t)n * sizeof *t);
    if (!t)
        BC_DIE("out of memory for %d threads", n);
    double t0 = 0, t1 = 0;
    if (tm) {
        bc_team_init(&tm->start, n + 1);
        bc_team_init(&tm->end, n + 1);
    } else {
        t0 = bc_wtime();
    }
    for (int i = 0; i < n; i++)
        bc_thread_spawn(fn, (char *)args + (size_t)i * stride, &t[i]);
    if (tm) {
        bc_team_wait(&tm->start);
        t0 = bc_wtime();
        bc_team_wait(&tm->end);
        t1 = bc_wtime();
    }
    for (int i = 0; i < n; i++)
        bc_thread_join(t[i]);
    if (tm) {
        bc_team_destroy(&tm->start);
        bc_team_destroy(&tm->end);
    } else {
        t1 = bc_wtime();
    }
    free(t);
    return t1 - t0;
}

/* Common options. --quick shrinks iteration counts for smoke runs. */
struct bc_opts {
    int quick;
    long iters;     /* 0 = benchmark's default */
    size_t min_size;
    size_t max_size;
    int pairs[16];  /* multi-threaded tests */
    int npairs;
    size_t size;    /* message size of the multi-threaded tests */
    int window;
    double budget;  /* seconds per pair count of the multi-threaded tests */
    double min_time; /* seconds one latency or bandwidth point lasts at least */
    int gated;      /* multi-threaded tests: the start/stop-gate timing */
};

static inline size_t bc_parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    default: break;
    }
    if (end == s || *end != '\0')
        BC_DIE("bad size '%s' (expected e.g. 8, 64K, 4M)", s);
    return (size_t)v;
}

static inline void bc_usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--quick] [-i iters] [-m [min:]max] [-p p1,p2,...] [-s size] [-w window]\n"
            "          [-t seconds] [--threads ult|pthread] [--gated]\n"
            "  --quick   few iterations (smoke test)\n"
            "  -i N      iterations per size / per pair (default: latency and bandwidth\n"
            "            calibrate each size to last -T seconds; others scaled per test)\n"
            "  -T S      seconds each latency or bandwidth point lasts at least (default\n"
            "            0.2; 0.01 with --quick)\n"
            "  -m A:B    message sizes from A to B bytes (K, M suffixes)\n"
            "  -p LIST   pair counts for the multi-threaded tests (default 1,2,8,64,1024)\n"
            "  -s SIZE   message size of the multi-threaded tests (default 8)\n"
            "  -w N      window of the bandwidth and rate tests (default 64)\n"
            "  -t S      time budget per pair count of the multi-threaded tests: past it,\n"
            "            pairs stop early (default 10; 2 with --quick)\n"
            "  --threads ult|pthread\n"
            "            MPIv: communicate from ULTs (default) or from plain pthreads\n"
            "            (main's thread when there is one per rank); MPI: pthread only\n"
            "  --gated   multi-threaded tests: time between start/stop barriers that\n"
            "            release all threads at once, instead of from start to join\n",
            prog);
    exit(2);
}

static inline void bc_parse(int argc, char **argv, struct bc_opts *o)
{
    static const int dflt_pairs[] = {1, 2, 8, 64, 1024};
    memset(o, 0, sizeof *o);
    o->max_size = 4u << 20;
    o->size = 8;
    o->window = 64;
    o->npairs = 5;
    memcpy(o->pairs, dflt_pairs, sizeof dflt_pairs);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            o->quick = 1;
        } else if (!strcmp(a, "--gated")) {
            o->gated = 1;
        } else if (!strcmp(a, "--threads") && v) {
            if (!strcmp(v, "pthread"))
                bc_thread_mode = BC_PTHREAD;
#ifdef BENCH_MPIV
            else if (!strcmp(v, "ult"))
                bc_thread_mode = BC_ULT;
#endif
            else
                BC_DIE("--threads %s: expected %s", v,
#ifdef BENCH_MPIV
                       "ult or pthread"
#else
                       "pthread (MPI has no ULTs)"
#endif
                );
            i++;
        } else if (!strcmp(a, "-i") && v) {
            o->iters = atol(v), i++;
            if (o->iters <= 0)
                bc_usage(argv[0]);
        } else if (!strcmp(a, "-m") && v) {
            const char *colon = strchr(v, ':');
            if (colon) {
                char lo[32];
                size_t n = (size_t)(colon - v);
                if (n >= sizeof lo)
                    bc_usage(argv[0]);
                memcpy(lo, v, n);
                lo[n] = '\0';
                o->min_size = bc_parse_size(lo);
                o->max_size = bc_parse_size(colon + 1);
            } else {
                o->max_size = bc_parse_size(v);
            }
            i++;
        } else if (!strcmp(a, "-p") && v) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            o->npairs = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && o->npairs < 16;
                 t = strtok_r(NULL, ",", &save)) {
                int p = atoi(t);
                if (p <= 0)
                    bc_usage(argv[0]);
                o->pairs[o->npairs++] = p;
            }
            i++;
        } else if (!strcmp(a, "-s") && v) {
            o->size = bc_parse_size(v), i++;
        } else if (!strcmp(a, "-t") && v) {
            o->budget = atof(v), i++;
            if (o->budget <= 0)
                bc_usage(argv[0]);
        } else if (!strcmp(a, "-T") && v) {
            o->min_time = atof(v), i++;
            if (o->min_time <= 0)
                bc_usage(argv[0]);
        } else if (!strcmp(a, "-w") && v) {
            o->window = atoi(v), i++;
            if (o->window <= 0)
                bc_usage(argv[0]);
        } else {
            bc_usage(argv[0]);
        }
    }
    if (o->budget == 0)
        o->budget = o->quick ? 2 : 10;
    if (o->min_time == 0)
        o->min_time = o->quick ? 0.01 : 0.2;
}

/* Tag of bc_calibrate's messages: no benchmark loop uses it. */
#define BC_TAG_CALIBRATE 32767 /* MPI promises tags up to 32767 at least */

/* How many iterations of a two-rank benchmark loop make one measurement
 * last at least min_time seconds. A fixed count does not: where a round
 * trip is fast, OSU's 10,000 iterations last milliseconds and measure
 * start-up transients more than the steady state (docs/perf/pt2pt.md).
 * Ranks 0 and 1 both run loop(0, k, arg) for k = first,
 * 8 first, 64 first, ...; rank 0 times each and tells rank 1 the next k,
 * or (negative) the final count once a run lasted min_time / 8 or more,
 * so both always run the same iterations. These runs are the warm-up. */
static inline long bc_calibrate(int me, long first, double min_time,
                                double (*loop)(long skip, long iters, void *arg), void *arg)
{
    long k = first > 0 ? first : 1;
    for (;;) {
        double t = loop(0, k, arg);
        long next;
        if (me == 0) {
            if (t >= min_time / 8 || k > 1000000000L) {
                double want = (double)k * min_time / (t > 1e-9 ? t : 1e-9);
                next = want > 4e9 ? -4000000000L : want < (double)k ? -k : -(long)want;
            } else {
                next = k * 8;
            }
            bc_send(&next, sizeof next, 1, BC_TAG_CALIBRATE);
        } else {
            bc_recv(&next, sizeof next, 0, BC_TAG_CALIBRATE);
        }
        if (next < 0)
            return -next;
        k = next;
    }
}

#endif /* BENCH_PT2PT_COMM_H */
