/*
 * bench_sched — the ULT scheduler against the pthread equivalent, both
 * measured in the same run, one row per operation:
 *
 *   spawn+join        a ULT spawns a child on its worker and joins it
 *                     | pthread_create + pthread_join
 *   yield round trip  two ULTs on one worker yield to each other
 *                     | two pthreads on one core call sched_yield
 *   signal->resume    ping-pong between ULTs on two workers (two cores),
 *                     one way | the same with mutex + condition variable
 *   1M blocked ULTs   create and block 1,048,576 ULTs (per ULT; peak RSS)
 *                     | create and block 10,000 pthreads (per thread)
 *
 * Each timing is the best of 5 runs (the machine is shared: the fastest run
 * is the one least disturbed). Output is a Markdown table.
 * Usage: bench_sched [scale]   (scale < 1 shortens every loop)
 *        bench_sched --only spawn|yield N   (one ULT loop, for callgrind)
 *        bench_sched --only blocked N       (create N blocked ULTs once, in
 *                                            this process; for perf stat)
 *        bench_sched --guard-fallback N --only ...  (the same as on a kernel
 *                                            without MADV_GUARD_INSTALL, with
 *                                            at most N mprotect guards)
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sched/sched.h"
#include "sched/sched_internal.h" /* sched_test_force_guard_fallback */

static double scale = 1.0;
#define REPS 5

static long iters(long n)
{
    long k = (long)(n * scale);
    return k < 10 ? 10 : k;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double best(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[0];
}

static void pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Runs fn(arg) in a ULT on `worker` and returns its result as a double. */
static double in_ult(void *(*fn)(void *), void *arg, int worker)
{
    mpiv_ult_t u;
    void *r;
    if (mpiv_ult_spawn(fn, arg, worker, &u) || mpiv_ult_join(u, &r)) {
        fprintf(stderr, "bench_sched: spawn/join failed: %s\n", mpiv_error_detail());
        exit(1);
    }
    return *(double *)r;
}

/* --- spawn + join -------------------------------------------------------- */

static void *nothing(void *arg) { return arg; }
static double result_slot[8];

static void *ult_spawn_join(void *arg)
{
    long n = (long)arg;
    uint64_t t0 = util_now_ns();
    for (long i = 0; i < n; i++) {
        mpiv_ult_t u;
        mpiv_ult_spawn(nothing, NULL, MPIV_WORKER_ANY, &u);
        mpiv_ult_join(u, NULL);
    }
    result_slot[0] = (double)(util_now_ns() - t0) / (double)n;
    return &result_slot[0];
}

static double pthread_spawn_join(long n)
{
    uint64_t t0 = util_now_ns();
    for (long i = 0; i < n; i++) {
        pthread_t t;
        pthread_create(&t, NULL, nothing, NULL);
        pthread_join(t, NULL);
    }
    return (double)(util_now_ns() - t0) / (double)n;
}

/* --- yield ---------------------------------------------------------------- */

static void *ult_yielder(void *arg)
{
    long n = (long)arg;
    for (long i = 0; i < n; i++)
        mpiv_ult_yield();
    return NULL;
}

static void *ult_yield_pair(void *arg)
{
    long n = (long)arg;
    mpiv_ult_t a, b;
    uint64_t t0 = util_now_ns();
    mpiv_ult_spawn(ult_yielder, arg, MPIV_WORKER_ANY, &a);
    mpiv_ult_spawn(ult_yielder, arg, MPIV_WORKER_ANY, &b);
    mpiv_ult_join(a, NULL);
    mpiv_ult_join(b, NULL);
    result_slot[1] = (double)(util_now_ns() - t0) / (double)n;
    return &result_slot[1];
}

static void *pthread_yielder(void *arg)
{
    long n = (long)arg;
    pin_self(1);
    for (long i = 0; i < n; i++)
        sched_yield();
    return NULL;
}

static double pthread_yield_pair(long n)
{
    pthread_t a, b;
    uint64_t t0 = util_now_ns();
    pthread_create(&a, NULL, pthread_yielder, (void *)n);
    pthread_create(&b, NULL, pthread_yielder, (void *)n);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return (double)(util_now_ns() - t0) / (double)n;
}

/* --- signal -> resume across cores --------------------------------------- */

static sched_sync ping, pong;

static void *ult_ponger(void *arg)
{
    long n = (long)arg;
    for (long i = 0; i < n; i++) {
        sched_wait(&ping);
        sched_signal(&pong);
    }
    return NULL;
}

static void *ult_pinger(void *arg)
{
    long n = (long)arg;
    uint64_t t0 = util_now_ns();
    for (long i = 0; i < n; i++) {
        sched_signal(&ping);
        sched_wait(&pong);
    }
    result_slot[2] = (double)(util_now_ns() - t0) / (2.0 * (double)n);
    return &result_slot[2];
}

static double ult_pingpong(long n)
{
    sched_sync_init(&ping);
    sched_sync_init(&pong);
    mpiv_ult_t a;
    mpiv_ult_spawn(ult_ponger, (void *)n, 1 % mpiv_num_workers(), &a);
    double r = in_ult(ult_pinger, (void *)n, 0);
    mpiv_ult_join(a, NULL);
    return r;
}

static pthread_mutex_t cv_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_ping = PTHREAD_COND_INITIALIZER, cv_pong = PTHREAD_COND_INITIALIZER;
static int cv_turn; /* 0: pinger's move, 1: ponger's */

static void *cv_ponger(void *arg)
{
    long n = (long)arg;
    pin_self(1);
    pthread_mutex_lock(&cv_m);
    for (long i = 0; i < n; i++) {
        while (cv_turn != 1)
            pthread_cond_wait(&cv_ping, &cv_m);
        cv_turn = 0;
        pthread_cond_signal(&cv_pong);
    }
    pthread_mutex_unlock(&cv_m);
    return NULL;
}

static double cv_pingpong(long n)
{
    pthread_t t;
    cv_turn = 0;
    pthread_create(&t, NULL, cv_ponger, (void *)n);
    pin_self(0);
    uint64_t t0 = util_now_ns();
    pthread_mutex_lock(&cv_m);
    for (long i = 0; i < n; i++) {
        cv_turn = 1;
        pthread_cond_signal(&cv_ping);
        while (cv_turn != 0)
            pthread_cond_wait(&cv_pong, &cv_m);
    }
    pthread_mutex_unlock(&cv_m);
    double r = (double)(util_now_ns() - t0) / (2.0 * (double)n);
    pthread_join(t, NULL);
    return r;
}

/* --- many blocked --------------------------------------------------------- */

struct blocked_result {
    double ns_per, seconds, rss_gib, cpu_seconds;
};

static sched_sync *gates;
static atomic_long nblocked;

static void *blocker(void *arg)
{
    /* relaxed: progress count only */
    atomic_fetch_add_explicit(&nblocked, 1, memory_order_relaxed);
    sched_wait(&gates[(long)arg]);
    return NULL;
}

static void *spawn_blocked(void *arg)
{
    long n = (long)arg;
    mpiv_ult_t *u = malloc(sizeof *u * (size_t)n);
    uint64_t t0 = util_now_ns();
    for (long i = 0; i < n; i++)
        if (mpiv_ult_spawn(blocker, (void *)i, MPIV_WORKER_ANY, &u[i]))
            exit(2);
    while (atomic_load_explicit(&nblocked, memory_order_relaxed) < n)
        mpiv_ult_yield();
    result_slot[3] = (double)(util_now_ns() - t0);
    for (long i = 0; i < n; i++)
        sched_signal(&gates[i]);
    for (long i = 0; i < n; i++)
        mpiv_ult_join(u[i], NULL);
    free(u);
    return &result_slot[3];
}

static pthread_mutex_t pb_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pb_cv = PTHREAD_COND_INITIALIZER;
static int pb_go;

static void *pthread_blocker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pb_m);
    nblocked++;
    while (!pb_go)
        pthread_cond_wait(&pb_cv, &pb_m);
    pthread_mutex_unlock(&pb_m);
    return NULL;
}

/* Runs in a forked child so that its peak RSS is its own. */
static void blocked_child(int fd, long n, int use_ults)
{
    struct blocked_result r = {0};
    if (use_ults) {
        char cap[32];
        snprintf(cap, sizeof cap, "%ld", n + 64); /* + the spawning ULT */
        setenv("MPIV_WORKERS", "1", 1);
        setenv("MPIV_MAX_ULTS", cap, 1);
        struct util_config cfg;
        if (util_config_load(&cfg) || sched_init(&cfg))
            _exit(1);
        gates = calloc((size_t)n, sizeof *gates);
        double ns = in_ult(spawn_blocked, (void *)n, 0);
        r.seconds = ns / 1e9;
        r.ns_per = ns / (double)n;
        sched_finalize();
    } else {
        pthread_t *t = malloc(sizeof *t * (size_t)n);
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 64 << 10);
        uint64_t t0 = util_now_ns();
        for (long i = 0; i < n; i++)
            if (pthread_create(&t[i], &a, pthread_blocker, NULL))
                _exit(3);
        for (;;) {
            pthread_mutex_lock(&pb_m);
            long k = nblocked;
            pthread_mutex_unlock(&pb_m);
            if (k == n)
                break;
            sched_yield();
        }
        r.seconds = (double)(util_now_ns() - t0) / 1e9;
        r.ns_per = r.seconds * 1e9 / (double)n;
        pthread_mutex_lock(&pb_m);
        pb_go = 1;
        pthread_cond_broadcast(&pb_cv);
        pthread_mutex_unlock(&pb_m);
        for (long i = 0; i < n; i++)
            pthread_join(t[i], NULL);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r.rss_gib = ru.ru_maxrss / 1048576.0;
    r.cpu_seconds = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                    (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    if (write(fd, &r, sizeof r) != sizeof r)
        _exit(4);
    _exit(0);
}

static struct blocked_result run_blocked(long n, int use_ults)
{
    int fds[2];
    struct blocked_result r = {0};
    if (pipe(fds))
        return r;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        blocked_child(fds[1], n, use_ults);
    }
    close(fds[1]);
    if (read(fds[0], &r, sizeof r) != sizeof r)
        fprintf(stderr, "bench_sched: blocked child failed\n");
    close(fds[0]);
    waitpid(pid, NULL, 0);
    return r;
}

/* ------------------------------------------------------------------------ */

static void row(const char *op, double ult, double pth, const char *note)
{
    printf("| %-22s | %12.1f | %12.1f | %8.1fx | %s |\n", op, ult, pth, pth / ult, note);
}

/* `bench_sched --only spawn|yield N`: just that ULT loop, once, for
 * instruction counts under callgrind (run with two N and subtract). */
static int only(const char *what, long n)
{
    if (!strcmp(what, "blocked")) {
        if (n < 1 || n > (1 << 24))
            return 1;
        struct blocked_result r = run_blocked(n, 1);
        printf("%ld blocked ULTs in %.2f s (%.1f ns each; child CPU with teardown %.2f s), "
               "peak RSS %.2f GiB\n",
               n, r.seconds, r.ns_per, r.cpu_seconds, r.rss_gib);
        return r.seconds > 0 ? 0 : 1;
    }
    setenv("MPIV_WORKERS", "1", 1);
    struct util_config cfg;
    if (util_config_load(&cfg) || sched_init(&cfg))
        return 1;
    if (!strcmp(what, "spawn"))
        in_ult(ult_spawn_join, (void *)n, 0);
    else if (!strcmp(what, "yield"))
        in_ult(ult_yield_pair, (void *)n, 0);
    else
        return 1;
    return sched_finalize();
}

int main(int argc, char **argv)
{
    /* as on a kernel without MADV_GUARD_INSTALL, with at most N mprotect
     * guards (later stacks get tripwires): the fallback's cost */
    if (argc > 2 && !strcmp(argv[1], "--guard-fallback")) {
        sched_test_force_guard_fallback(atoi(argv[2]));
        argc -= 2;
        argv += 2;
    }
    if (argc > 3 && !strcmp(argv[1], "--only"))
        return only(argv[2], atol(argv[3]));
    if (argc > 1)
        scale = atof(argv[1]);
    if (scale <= 0)
        scale = 1;

    /* the 1M rows first, each in its own child, before this process has
     * threads of its own */
    long nb = iters(1 << 20);
    if (nb > (1 << 20))
        nb = 1 << 20;
    struct blocked_result bu = run_blocked(nb, 1);
    struct blocked_result bp = run_blocked(nb < 10000 ? nb : 10000, 0);

    setenv("MPIV_WORKERS", "2", 0);
    struct util_config cfg;
    if (util_config_load(&cfg) || sched_init(&cfg)) {
        fprintf(stderr, "bench_sched: %s\n", mpiv_error_detail());
        return 1;
    }
    double u[REPS], p[REPS];
    printf("| operation | MPIv ns/op | pthread ns/op | pthread/MPIv | notes |\n");
    printf("|---|---:|---:|---:|---|\n");

    for (int r = 0; r < REPS; r++) {
        u[r] = in_ult(ult_spawn_join, (void *)iters(1000000), 0);
        p[r] = pthread_spawn_join(iters(20000));
    }
    row("spawn+join", best(u, REPS), best(p, REPS), "child on the spawner's worker");

    for (int r = 0; r < REPS; r++) {
        u[r] = in_ult(ult_yield_pair, (void *)iters(1000000), 0);
        p[r] = pthread_yield_pair(iters(200000));
    }
    row("yield round trip", best(u, REPS), best(p, REPS),
        "two ULTs on one worker vs two pthreads on one core");

    for (int r = 0; r < REPS; r++) {
        u[r] = ult_pingpong(iters(200000));
        p[r] = cv_pingpong(iters(50000));
    }
    row("signal->resume", best(u, REPS), best(p, REPS),
        "one way, ping-pong across two cores vs mutex+condvar");

    char note[200];
    snprintf(note, sizeof note,
             "%ld ULTs in %.2f s (child CPU with teardown %.2f s), peak RSS %.2f GiB vs %d pthreads "
             "(64 KiB stacks), RSS %.2f GiB",
             nb, bu.seconds, bu.cpu_seconds, bu.rss_gib, nb < 10000 ? (int)nb : 10000, bp.rss_gib);
    row("create blocked", bu.ns_per, bp.ns_per, note);
    sched_finalize();
    return 0;
}
