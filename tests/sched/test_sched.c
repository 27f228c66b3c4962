/* Scheduler basics on one worker: spawn/join at several sizes, slot
 * recycling, capacity, argument and state errors, joins of joined and
 * stale handles, no system call and no first write of a page under the
 * slot lock, signal before wait,
 * yield order, nested spawns, and the stack-overflow report (with guard
 * pages, and in the fallback for kernels without MADV_GUARD_INSTALL);
 * MPIV_BIND's binding of the thread that starts the scheduler. */
#include <hwloc.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sched/sched_internal.h"
#include "sched_test.h"

static void *ret_arg_plus_one(void *arg) { return (char *)arg + 1; }

/* Where the ULT's frame is: the same value for ULTs on the same stack. */
__attribute__((noinline)) static void *frame_address(void *arg)
{
    (void)arg;
    return __builtin_frame_address(0);
}

START_TEST(errors_before_init)
{
    mpiv_ult_t u;
    mpiv_counter_t c;
    mpiv_mutex_t m;
    mpiv_barrier_t b;
    ck_assert_int_eq(mpiv_ult_spawn(ret_arg_plus_one, NULL, 0, &u), MPIV_ERR_STATE);
    ck_assert_int_eq(mpiv_ult_join((mpiv_ult_t)&u, NULL), MPIV_ERR_STATE);
    ck_assert_int_eq(mpiv_ult_yield(), MPIV_ERR_STATE);
    ck_assert_int_eq(mpiv_counter_init(&c, 1), MPIV_ERR_STATE);
    ck_assert_int_eq(mpiv_mutex_init(&m), MPIV_ERR_STATE);
    ck_assert_int_eq(mpiv_barrier_init(&b, 2), MPIV_ERR_STATE);
    ck_assert_int_eq(mpiv_num_workers(), 0);
    ck_assert_int_eq(mpiv_worker_id(), -1);
    ck_assert_ptr_null(mpiv_ult_self());
    ck_assert_int_eq(sched_finalize(), MPIV_ERR_STATE);
}
END_TEST

static int in_ult_worker = -2;
static mpiv_ult_t in_ult_self;

static void *report_self(void *arg)
{
    in_ult_worker = mpiv_worker_id();
    in_ult_self = mpiv_ult_self();
    ck_assert(sched_in_ult()); /* plain int check, no longjmp on success */
    return arg;
}

START_TEST(spawn_join_one)
{
    sched_test_start(1, 64, NULL);
    ck_assert_int_eq(mpiv_worker_id(), -1);
    ck_assert(!sched_in_ult());
    mpiv_ult_t u;
    void *ret = NULL;
    ck_assert_int_eq(mpiv_ult_spawn(report_self, (void *)0x1234, MPIV_WORKER_ANY, &u), 0);
    ck_assert_int_eq(mpiv_ult_join(u, &ret), MPIV_SUCCESS);
    ck_assert_ptr_eq(ret, (void *)0x1234);
    ck_assert_int_eq(in_ult_worker, 0);
    ck_assert_ptr_eq(in_ult_self, u);
    /* a second init is refused */
    struct util_config cfg;
    ck_assert_int_eq(util_config_load(&cfg), 0);
    ck_assert_int_eq(sched_init(&cfg), MPIV_ERR_STATE);
    sched_test_stop();
}
END_TEST

#ifdef MPIV_TSAN
/* each live ULT is a TSan fiber with megabytes of shadow state */
static const int sizes[] = {1, 64, 1024, 2048};
#else
static const int sizes[] = {1, 64, 4096, 262144};
#endif

START_TEST(spawn_join_many)
{
    int n = sizes[_i];
    /* small stacks: under ASan neighbouring stacks then share shadow pages */
    sched_test_start(1, n < 64 ? 64 : n, "16K");
    mpiv_ult_t *u = malloc(sizeof *u * (size_t)n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(mpiv_ult_spawn(ret_arg_plus_one, (void *)(intptr_t)i, 0, &u[i]), 0);
    for (int i = 0; i < n; i++) {
        void *r;
        ck_assert_int_eq(mpiv_ult_join(u[i], &r), 0);
        if (r != (void *)(intptr_t)(i + 1))
            ck_abort_msg("ULT %d returned %p", i, r);
    }
    /* every slot is free again: the same number fits once more */
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(mpiv_ult_spawn(ret_arg_plus_one, NULL, 0, &u[i]), 0);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(mpiv_ult_join(u[i], NULL), 0);
    free(u);
    sched_test_stop();
}
END_TEST

static sched_sync gate[65];

static void *wait_gate(void *arg)
{
    sched_wait(&gate[(intptr_t)arg]);
    return arg;
}

START_TEST(capacity_and_recycling)
{
    sched_test_start(1, 64, NULL);
    mpiv_ult_t u[65];
    for (int i = 0; i < 64; i++) {
        sched_sync_init(&gate[i]);
        ck_assert_int_eq(mpiv_ult_spawn(wait_gate, (void *)(intptr_t)i, 0, &u[i]), 0);
    }
    ck_assert_int_eq(mpiv_ult_spawn(wait_gate, NULL, 0, &u[64]), MPIV_ERR_NO_RESOURCES);
    ck_assert(strstr(mpiv_error_detail(), "MPIV_MAX_ULTS") != NULL);
    ck_assert_int_eq(sched_finalize(), MPIV_ERR_STATE); /* ULTs alive */
    for (int i = 0; i < 64; i++)
        sched_signal(&gate[i]);
    for (int i = 0; i < 64; i++) {
        void *r;
        ck_assert_int_eq(mpiv_ult_join(u[i], &r), 0);
        ck_assert_ptr_eq(r, (void *)(intptr_t)i);
    }
    /* slots are recycled, last joined first: many more spawns than slots,
     * all on the same stack, each with a handle of its own */
    mpiv_ult_t prev = NULL;
    void *prev_frame = NULL;
    for (int i = 0; i < 10000; i++) {
        mpiv_ult_t v;
        void *frame;
        ck_assert_int_eq(mpiv_ult_spawn(frame_address, NULL, 0, &v), 0);
        ck_assert_int_eq(mpiv_ult_join(v, &frame), 0);
        if (prev) {
            ck_assert_ptr_eq(frame, prev_frame);
            ck_assert_ptr_ne(v, prev);
        }
        prev = v;
        prev_frame = frame;
    }
    sched_test_stop();
}
END_TEST

/* The second join of a handle is refused, with a detail; without the
 * handle's generation it waited for a signal that had been consumed
 * already. It runs on a pthread so that such a hang fails the test with a
 * message instead of reaching the test's time limit. */
static atomic_int second_join_rc = -1;

static void *join_again(void *arg)
{
    atomic_store(&second_join_rc, mpiv_ult_join((mpiv_ult_t)arg, NULL));
    return NULL;
}

START_TEST(join_twice)
{
    sched_test_start(1, 64, NULL);
    mpiv_ult_t u;
    void *r;
    ck_assert_int_eq(mpiv_ult_spawn(ret_arg_plus_one, (void *)1, 0, &u), 0);
    ck_assert_int_eq(mpiv_ult_join(u, &r), MPIV_SUCCESS);
    ck_assert_ptr_eq(r, (void *)2);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, join_again, (void *)u), 0);
    for (int ms = 0; atomic_load(&second_join_rc) < 0; ms++) {
        if (ms == 30000)
            ck_abort_msg("a second join of one handle still waits after 30 s");
        sched_test_sleep_us(1000);
    }
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&second_join_rc), MPIV_ERR_ARG);
    /* and once more from this thread, whose detail we can read */
    ck_assert_int_eq(mpiv_ult_join(u, NULL), MPIV_ERR_ARG);
    ck_assert_msg(strstr(mpiv_error_detail(), "joined already") != NULL, "detail: %s",
                  mpiv_error_detail());
    sched_test_stop(); /* the live count was not decremented twice */
}
END_TEST

START_TEST(join_stale_handle)
{
    /* one worker, LIFO free list: b gets a's slot and stack. Joining a's
     * handle then is refused and leaves b alone; without the generation
     * it reaped b (returning b's value as a's) and b's own join hung. */
    sched_test_start(1, 64, NULL);
    mpiv_ult_t a, b;
    void *fa, *fb;
    ck_assert_int_eq(mpiv_ult_spawn(frame_address, NULL, 0, &a), 0);
    ck_assert_int_eq(mpiv_ult_join(a, &fa), 0);
    ck_assert_int_eq(mpiv_ult_spawn(frame_address, NULL, 0, &b), 0);
    void *r = (void *)7;
    ck_assert_int_eq(mpiv_ult_join(a, &r), MPIV_ERR_ARG);
    ck_assert_msg(strstr(mpiv_error_detail(), "stale handle") != NULL, "detail: %s",
                  mpiv_error_detail());
    ck_assert_ptr_eq(r, (void *)7); /* untouched */
    ck_assert_int_eq(mpiv_ult_join(b, &fb), MPIV_SUCCESS);
    ck_assert_ptr_eq(fa, fb); /* it was the same slot */
    ck_assert_ptr_ne(a, b);
    sched_test_stop();
}
END_TEST

/* No system call under a worker's slot lock (spinlock.h). A spawn that
 * finds the worker full reports it; at MPIV_LOG=debug the report is a
 * write to stderr, here a full pipe, so the spawner blocks in write(2).
 * A join of another ULT on that worker must still complete: it takes the
 * same lock to free the slot. With the report made under the lock, the
 * join spun on it until the pipe was drained. */
static atomic_int full_spawn_rc = -1, slow_join_rc = -1;
static atomic_long spawner_tid;
static mpiv_ult_t full_ults[64];

static void *spawn_into_full_worker(void *arg)
{
    (void)arg;
    atomic_store(&spawner_tid, (long)syscall(SYS_gettid));
    mpiv_ult_t v;
    atomic_store(&full_spawn_rc, mpiv_ult_spawn(ret_arg_plus_one, NULL, 0, &v));
    return NULL;
}

static void *join_first_full(void *arg)
{
    (void)arg;
    atomic_store(&slow_join_rc, mpiv_ult_join(full_ults[0], NULL));
    return NULL;
}

/* Whether thread tid is in the write(2) system call now. */
static bool in_write(long tid)
{
    char path[64], buf[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool yes = fgets(buf, sizeof buf, f) && atol(buf) == SYS_write;
    fclose(f);
    return yes;
}

START_TEST(no_syscall_under_slot_lock)
{
    sched_test_start(1, 64, NULL);
    for (int i = 0; i < 64; i++) {
        sched_sync_init(&gate[i]);
        ck_assert_int_eq(mpiv_ult_spawn(wait_gate, (void *)(intptr_t)i, 0, &full_ults[i]), 0);
    }
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    int saved = dup(2);
    dup2(fds[1], 2);
    /* fill the pipe, then make writes to it block again */
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    char junk[4096];
    memset(junk, 'x', sizeof junk);
    while (write(fds[1], junk, sizeof junk) > 0)
        ;
    fcntl(fds[1], F_SETFL, 0);
    util_log_level = UTIL_LOG_DEBUG;
    pthread_t sp, jn;
    ck_assert_int_eq(pthread_create(&sp, NULL, spawn_into_full_worker, NULL), 0);
    for (int ms = 0; !atomic_load(&spawner_tid) || !in_write(atomic_load(&spawner_tid)); ms++) {
        if (ms == 30000 || atomic_load(&full_spawn_rc) >= 0) {
            dup2(saved, 2);
            ck_abort_msg("the spawner did not block writing its report");
        }
        sched_test_sleep_us(1000);
    }
    sched_signal(&gate[0]);
    ck_assert_int_eq(pthread_create(&jn, NULL, join_first_full, NULL), 0);
    int ms = 0;
    while (atomic_load(&slow_join_rc) < 0 && ms++ < 30000)
        sched_test_sleep_us(1000);
    int joined = atomic_load(&slow_join_rc);
    /* let the spawner finish: drain the pipe, restore stderr */
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    while (atomic_load(&full_spawn_rc) < 0 || atomic_load(&slow_join_rc) < 0) {
        while (read(fds[0], junk, sizeof junk) > 0)
            ;
        sched_test_sleep_us(1000);
    }
    pthread_join(sp, NULL);
    pthread_join(jn, NULL);
    dup2(saved, 2);
    util_log_level = UTIL_LOG_WARN;
    ck_assert_msg(joined == MPIV_SUCCESS,
                  "a join waited 30 s for the slot lock while a spawner was blocked in write(2)");
    ck_assert_int_eq(atomic_load(&full_spawn_rc), MPIV_ERR_NO_RESOURCES);
    for (int i = 1; i < 64; i++) {
        sched_signal(&gate[i]);
        ck_assert_int_eq(mpiv_ult_join(full_ults[i], NULL), 0);
    }
    sched_test_stop();
}
END_TEST

/* Whether the page that holds p is in memory (mincore). */
static bool resident(const void *p)
{
    uintptr_t pg = (uintptr_t)sched_g.page;
    unsigned char v = 0;
    ck_assert_int_eq(mincore((void *)((uintptr_t)p & ~(pg - 1)), pg, &v), 0);
    return v & 1;
}

static atomic_int locked_spawn_rc = -1;
static mpiv_ult_t locked_spawn_ult;

static void *spawn_behind_lock(void *arg)
{
    (void)arg;
    atomic_store(&locked_spawn_rc, mpiv_ult_spawn(ret_arg_plus_one, NULL, 0, &locked_spawn_ult));
    return NULL;
}

/* S4: the spawn that will need a fresh page of records writes it before
 * it takes the slot lock. The test holds the lock while a spawner comes:
 * the page must fill in while the spawner still waits for the lock. */
START_TEST(first_touch_outside_slot_lock)
{
    enum { N = 1024 };
    static mpiv_ult_t u[N];
    sched_test_start(1, N, NULL);
    struct sched_worker *w = sched_g.workers[0];
    uint32_t per = sched_g.recs_per_page, n = 0;
    /* records never straddle pages, so the page of record `touched` is
     * the first one nobody wrote */
    ck_assert_uint_eq(sched_g.page % sizeof(struct mpiv_ult), 0);
    /* past the first pages, then up to the spawn that needs the next one */
    while (n < 100 || atomic_load(&w->hwm) + per <= atomic_load(&w->touched)) {
        ck_assert_uint_lt(n, N / 2);
        ck_assert_int_eq(mpiv_ult_spawn(ret_arg_plus_one, NULL, 0, &u[n]), 0);
        n++;
    }
    uint32_t t = atomic_load(&w->touched);
    ck_assert_msg(t > atomic_load(&w->hwm), "records up to %u written ahead, %u slots used", t,
                  atomic_load(&w->hwm));
    ck_assert_uint_eq(t % per, 0);
    if (resident(&w->recs[t])) {
        /* only where the kernel backs the records with huge pages on its
         * own (transparent huge pages "always"): nothing to observe */
        printf("first_touch_outside_slot_lock: record %u's page is in memory already\n", t);
    } else {
        util_spin_lock(&w->lock);
        pthread_t sp;
        ck_assert_int_eq(pthread_create(&sp, NULL, spawn_behind_lock, NULL), 0);
        bool seen = false;
        for (int ms = 0; ms < 30000 && !(seen = resident(&w->recs[t])); ms++)
            sched_test_sleep_us(1000);
        int early = atomic_load(&locked_spawn_rc);
        util_spin_unlock(&w->lock);
        pthread_join(sp, NULL);
        ck_assert_msg(seen, "record %u's page was not written before the slot lock", t);
        ck_assert_msg(early == -1, "the spawn returned while the test held the slot lock");
        ck_assert_int_eq(atomic_load(&locked_spawn_rc), 0);
        ck_assert_int_eq(mpiv_ult_join(locked_spawn_ult, NULL), 0);
        ck_assert_uint_ge(atomic_load(&w->touched), t + per);
    }
    for (uint32_t i = 0; i < n; i++)
        ck_assert_int_eq(mpiv_ult_join(u[i], NULL), 0);
    sched_test_stop();
}
END_TEST

static int self_join_rc, worker_rc;

static void *join_self(void *arg)
{
    (void)arg;
    self_join_rc = mpiv_ult_join(mpiv_ult_self(), NULL);
    mpiv_ult_t v;
    worker_rc = mpiv_ult_spawn(ret_arg_plus_one, NULL, 7, &v);
    return NULL;
}

START_TEST(bad_arguments)
{
    sched_test_start(1, 64, NULL);
    mpiv_ult_t u;
    ck_assert_int_eq(mpiv_ult_spawn(NULL, NULL, 0, &u), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_spawn(ret_arg_plus_one, NULL, 0, NULL), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_spawn(ret_arg_plus_one, NULL, 1, &u), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_spawn(ret_arg_plus_one, NULL, -2, &u), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_join(NULL, NULL), MPIV_ERR_ARG);
    /* made-up handles are refused without being dereferenced: a pointer
     * to a local, small numbers, a worker and a slot out of range, a slot
     * never used */
    ck_assert_int_eq(mpiv_ult_join((mpiv_ult_t)&u, NULL), MPIV_ERR_ARG);
    ck_assert(strstr(mpiv_error_detail(), "not a ULT handle") != NULL);
    ck_assert_int_eq(mpiv_ult_join((mpiv_ult_t)(uintptr_t)0x1000, NULL), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_join((mpiv_ult_t)~(uintptr_t)0, NULL), MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_join((mpiv_ult_t)(uintptr_t)(UINT64_C(1) << 36 | 1 << 24), NULL),
                     MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_join((mpiv_ult_t)(uintptr_t)(UINT64_C(1) << 36 | 64), NULL),
                     MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_join((mpiv_ult_t)(uintptr_t)(UINT64_C(1) << 36 | 63), NULL),
                     MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_spawn(join_self, NULL, 0, &u), 0);
    ck_assert_int_eq(mpiv_ult_join(u, NULL), 0);
    ck_assert_int_eq(self_join_rc, MPIV_ERR_DEADLOCK);
    ck_assert_int_eq(worker_rc, MPIV_ERR_ARG);
    ck_assert_int_eq(mpiv_ult_yield(), MPIV_SUCCESS); /* a pthread: sched_yield */
    sched_test_stop();
}
END_TEST

static sched_sync pending;
static atomic_int second_wait_done;

static atomic_int at_last_wait;

static void *signal_then_wait(void *arg)
{
    (void)arg;
    sched_signal(&pending);
    sched_wait(&pending); /* consumes our own signal: returns at once */
    sched_signal(&pending);
    sched_signal(&pending); /* two signals before a wait count once */
    sched_wait(&pending);
    atomic_store(&at_last_wait, 1);
    sched_wait(&pending); /* must block until main signals again */
    atomic_store(&second_wait_done, 1);
    return NULL;
}

START_TEST(signal_before_wait)
{
    sched_test_start(1, 64, NULL);
    /* from a pthread first */
    sched_sync s = SCHED_SYNC_INIT;
    sched_signal(&s);
    sched_wait(&s);
    ck_assert_uint_eq(atomic_load(&s.state), 0);
    /* then from a ULT */
    sched_sync_init(&pending);
    mpiv_ult_t u;
    ck_assert_int_eq(mpiv_ult_spawn(signal_then_wait, NULL, 0, &u), 0);
    /* A signal sent before the ULT's own signals would be absorbed by
     * them: wait until it has registered for its last wait (state holds
     * its record), however long a loaded machine takes to run it. */
    while (!atomic_load(&at_last_wait) || atomic_load(&pending.state) <= 1)
        sched_test_sleep_us(1000);
    sched_test_sleep_us(50000);
    ck_assert_int_eq(atomic_load(&second_wait_done), 0);
    sched_signal(&pending);
    ck_assert_int_eq(mpiv_ult_join(u, NULL), 0);
    ck_assert_int_eq(atomic_load(&second_wait_done), 1);
    sched_test_stop();
}
END_TEST

static int order[64], norder;

static void *yield_loop(void *arg)
{
    for (int i = 0; i < 8; i++) {
        order[norder++] = (int)(intptr_t)arg;
        ck_assert_int_eq(mpiv_ult_yield(), 0);
    }
    return NULL;
}

static void *yield_parent(void *arg)
{
    (void)arg;
    mpiv_ult_t a, b;
    /* spawned from the worker itself: both are runnable before either runs */
    if (mpiv_ult_spawn(yield_loop, (void *)0, 0, &a) || mpiv_ult_spawn(yield_loop, (void *)1, 0, &b))
        return NULL;
    if (mpiv_ult_join(a, NULL) || mpiv_ult_join(b, NULL))
        return NULL;
    return (void *)1;
}

START_TEST(yield_alternates)
{
    sched_test_start(1, 64, NULL);
    mpiv_ult_t p;
    void *ok;
    ck_assert_int_eq(mpiv_ult_spawn(yield_parent, NULL, 0, &p), 0);
    ck_assert_int_eq(mpiv_ult_join(p, &ok), 0);
    ck_assert_ptr_eq(ok, (void *)1);
    ck_assert_int_eq(norder, 16);
    /* after both are runnable, they strictly alternate */
    int alternations = 0;
    for (int i = 1; i < norder; i++)
        alternations += order[i] != order[i - 1];
    ck_assert_int_ge(alternations, 14);
    sched_test_stop();
}
END_TEST

static void *spawn_tree(void *arg)
{
    intptr_t depth = (intptr_t)arg;
    if (depth == 0)
        return (void *)1;
    mpiv_ult_t kids[4];
    for (int i = 0; i < 4; i++)
        if (mpiv_ult_spawn(spawn_tree, (void *)(depth - 1), MPIV_WORKER_ANY, &kids[i]))
            return NULL;
    intptr_t sum = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        if (mpiv_ult_join(kids[i], &r))
            return NULL;
        sum += (intptr_t)r;
    }
    return (void *)sum;
}

START_TEST(nested_spawn_join)
{
    sched_test_start(1, 4096, NULL);
    mpiv_ult_t u;
    void *r;
    ck_assert_int_eq(mpiv_ult_spawn(spawn_tree, (void *)5, 0, &u), 0);
    ck_assert_int_eq(mpiv_ult_join(u, &r), 0);
    ck_assert_int_eq((intptr_t)r, 1024); /* 4^5 leaves */
    sched_test_stop();
}
END_TEST

static volatile int recurse_forever = 1;

static int recurse(int depth)
{
    volatile char buf[512];
    buf[0] = (char)depth;
    if (!recurse_forever)
        return buf[0];
    return recurse(depth + 1) + buf[0];
}

static void *overflow(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)recurse(0);
}

/* Reads a forked child's stderr from fd until it closes, reaps the child and
 * checks that it aborted after printing `want`. */
static void expect_overflow_abort(int fd, pid_t pid, int case_no, const char *want)
{
    char out[4096];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof out - 1 && (r = read(fd, out + len, sizeof out - 1 - len)) > 0)
        len += (size_t)r;
    out[len] = '\0';
    close(fd);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
                  "case %d: child status %#x, said: %s", case_no, st, out);
    ck_assert_msg(strstr(out, want) != NULL, "case %d: child said: %s", case_no, out);
}

/* Case 0: ULT 0 overflows. Case 1: 100 ULTs block first, so the one that
 * overflows (ULT 100) is in the second chunk of stacks: its guard comes
 * from the batched install, past the first entries. Case 2: as 1, and 50
 * ULTs start and end on stack 100 before ULT 100 (the same slot) runs
 * there: a recycled stack keeps its guard. Case 3: 164 ULTs block first,
 * so ULT 164 is in the second chunk's second batch, readied only when the
 * first batch was used up. Each way the guard page must be
 * what catches it (the stack-pointer checks would report an unguarded
 * stack too, in other words). */
#define MANY_BLOCK 164
/* one each: a sched_sync has one waiter (sched.h) */
static sched_sync many_gate[MANY_BLOCK];

static atomic_int many_waiting;

static void *wait_many_gate(void *arg)
{
    atomic_fetch_add(&many_waiting, 1);
    sched_wait(&many_gate[(intptr_t)arg]);
    return arg;
}

/* Forks a child whose stderr goes into fds[1] and which runs one worker with
 * 16 KiB stacks (guard_budget >= 0: as on a kernel without
 * MADV_GUARD_INSTALL, with that many mprotect guards). Returns the child's
 * pid in the parent and 0 in the child, once its scheduler is up. */
static pid_t fork_overflow_child(int fds[2], int guard_budget)
{
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid != 0)
        return pid;
    dup2(fds[1], 2);
    close(fds[0]);
    setenv("MPIV_WORKERS", "1", 1);
    setenv("MPIV_STACK_SIZE", "16K", 1);
    if (guard_budget >= 0)
        sched_test_force_guard_fallback(guard_budget);
    struct util_config cfg;
    if (util_config_load(&cfg) || sched_init(&cfg))
        _exit(3);
    return 0;
}

START_TEST(stack_overflow_reported)
{
    int fds[2];
    pid_t pid = fork_overflow_child(fds, -1);
    if (pid == 0) {
        mpiv_ult_t u;
        for (int k = 0; k < MANY_BLOCK; k++)
            sched_sync_init(&many_gate[k]);
        int nblock = _i == 3 ? MANY_BLOCK : _i ? 100 : 0;
        for (int k = 0; k < nblock; k++)
            if (mpiv_ult_spawn(wait_many_gate, (void *)(intptr_t)k, 0, &u))
                _exit(4);
        while (atomic_load(&many_waiting) < nblock) /* each holds its stack */
            sched_test_sleep_us(100);
        for (int k = 0; k < (_i == 2 ? 50 : 0); k++)
            if (mpiv_ult_spawn(ret_arg_plus_one, NULL, 0, &u) || mpiv_ult_join(u, NULL))
                _exit(4);
        if (mpiv_ult_spawn(overflow, NULL, 0, &u))
            _exit(4);
        mpiv_ult_join(u, NULL);
        _exit(5); /* not reached */
    }
    close(fds[1]);
    static const char *const want[] = {
        "ULT stack overflow (worker 0, ULT 0): caught by its guard page",
        "ULT stack overflow (worker 0, ULT 100): caught by its guard page",
        "ULT stack overflow (worker 0, ULT 100): caught by its guard page",
        "ULT stack overflow (worker 0, ULT 164): caught by its guard page",
    };
    expect_overflow_abort(fds[0], pid, _i, want[_i]);
}
END_TEST

/* The fallback without MADV_GUARD_INSTALL (forced): ULT 0 blocks, ULT 1
 * overflows. Cases:
 *   0  budget 0 (no guards): ULT 1 goes 1 KiB below its stack, into the
 *      unused gap page, and yields there: the stack-pointer check.
 *   1  budget 0: ULT 1 goes into the tripwire at the top of ULT 0's stack,
 *      unwinds, then yields: the tripwire check.
 *   2  budget 1 (ULT 0 has an mprotect guard, ULT 1 is beyond the budget):
 *      as 1, but ULT 1 then returns (the check on finishing).
 *   3  budget 1: ULT 0 itself recurses forever into its mprotect guard. */
static char *dive_to;
static int dive_then_yield;
static sched_sync fb_gate;

static __attribute__((noinline)) int dive(int depth)
{
    volatile char buf[48];
    for (size_t i = 0; i < sizeof buf; i++) /* dense writes, as frames do */
        buf[i] = (char)depth;
    if ((char *)buf > dive_to)
        return dive(depth + 1) + buf[1];
    if (dive_then_yield)
        mpiv_ult_yield();
    return buf[1];
}

static void *fb_blocked(void *arg)
{
    sched_wait(&fb_gate);
    return arg;
}

static void *fb_overflow(void *arg)
{
    long c = (long)arg;
    struct mpiv_ult *self = sched_self();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *lo = self->stack->lo;
    dive_to = c == 0 ? lo - 1024 : lo - page - SCHED_TRIPWIRE_BYTES / 2;
    dive_then_yield = c == 0;
    int r = dive(0);
    if (c == 1)
        mpiv_ult_yield();
    return (void *)(intptr_t)r;
}

START_TEST(stack_overflow_fallback)
{
    int fds[2];
    pid_t pid = fork_overflow_child(fds, _i < 2 ? 0 : 1);
    if (pid == 0) {
        mpiv_ult_t u0, u1;
        if (_i == 3) {
            if (mpiv_ult_spawn(overflow, NULL, 0, &u0))
                _exit(4);
            mpiv_ult_join(u0, NULL);
            _exit(5); /* not reached */
        }
        sched_sync_init(&fb_gate);
        if (mpiv_ult_spawn(fb_blocked, NULL, 0, &u0) ||
            mpiv_ult_spawn(fb_overflow, (void *)(long)_i, 0, &u1))
            _exit(4);
        mpiv_ult_join(u1, NULL);
        _exit(5); /* not reached */
    }
    close(fds[1]);
    static const char *const want[] = {
        "ULT stack overflow (worker 0, ULT 1): caught by the stack-pointer check",
        "ULT stack overflow (worker 0, ULT 1): caught by its tripwire",
        "ULT stack overflow (worker 0, ULT 1): caught by its tripwire",
        "ULT stack overflow (worker 0, ULT 0): caught by its guard page",
    };
    expect_overflow_abort(fds[0], pid, _i, want[_i]);
}
END_TEST

/* MPIV_BIND and the thread that starts the scheduler (sched.c,
 * bind_caller), each case in a child of its own (a binding lasts): the
 * child poses as the last of as many local ranks as there are cores, so
 * that its share is the last core. Cases: 0 core: bound to that core; 1
 * workers: left alone; 2 core, the thread bound by someone else first
 * (to the first CPU): left so. The child's exit status says what it saw:
 * 0 as expected, 10 + what went wrong. */
static int bind_case(int c, int ncores, int pus)
{
    setenv("MPIV_WORKERS", "1", 1);
    setenv("MPIV_BIND", c == 1 ? "workers" : "core", 1);
    cpu_set_t before, after;
    CPU_ZERO(&before);
    if (c == 2) {
        CPU_SET(0, &before);
        if (sched_setaffinity(0, sizeof before, &before))
            return 11;
    }
    if (sched_getaffinity(0, sizeof before, &before))
        return 12;
    struct util_config cfg;
    if (util_config_load(&cfg))
        return 13;
    cfg.local_ranks = ncores;
    cfg.local_rank = ncores - 1;
    if (sched_init(&cfg))
        return 14;
    if (sched_getaffinity(0, sizeof after, &after))
        return 15;
    sched_finalize();
    if (c != 0)
        return CPU_EQUAL(&before, &after) ? 0 : 16;
    /* one core's PUs: fewer than all, none of the first core's unless the
     * machine has one core */
    int n = CPU_COUNT(&after);
    if (n < 1 || (ncores > 1 && (n >= pus || CPU_ISSET(0, &after))))
        return 17;
    return 0;
}

START_TEST(main_thread_bound)
{
    hwloc_topology_t topo;
    ck_assert_int_eq(hwloc_topology_init(&topo), 0);
    ck_assert_int_eq(hwloc_topology_load(topo), 0);
    int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    hwloc_topology_destroy(topo);
    ck_assert_int_ge(ncores, 1);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(bind_case(_i, ncores, pus));
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "case %d (%d cores, %d PUs): the child ended with status %d", _i, ncores, pus,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
END_TEST

static Suite *sched_suite(void)
{
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("basic");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, errors_before_init);
    tcase_add_test(tc, spawn_join_one);
    tcase_add_loop_test(tc, spawn_join_many, 0, (int)(sizeof sizes / sizeof sizes[0]));
    tcase_add_test(tc, capacity_and_recycling);
    tcase_add_test(tc, bad_arguments);
    tcase_add_test(tc, join_twice);
    tcase_add_test(tc, join_stale_handle);
    tcase_add_test(tc, no_syscall_under_slot_lock);
    tcase_add_test(tc, first_touch_outside_slot_lock);
    tcase_add_test(tc, signal_before_wait);
    tcase_add_test(tc, yield_alternates);
    tcase_add_test(tc, nested_spawn_join);
    tcase_add_loop_test(tc, stack_overflow_reported, 0, 4);
    tcase_add_loop_test(tc, stack_overflow_fallback, 0, 4);
    tcase_add_loop_test(tc, main_thread_bound, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = sched_suite);
