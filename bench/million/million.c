/*
 * million — N short messages between two ranks, sent and received by N
 * ULTs on each side or by one ULT on each side in a loop; what one message
 * costs either way, and the memory it takes (issue 17, item 6: a million
 * ULTs, each completing one send/recv with a peer, within 2x of one ULT per
 * message).
 *
 *   loop: rank 0 runs one ULT that sends N 8-byte messages to rank 1 with
 *         tags 0..N-1; rank 1 runs one ULT that receives them in order.
 *   ults: rank 0 spawns N ULTs, ULT i sends one 8-byte message with tag i;
 *         rank 1 spawns N ULTs, ULT i receives tag i. The main thread spawns
 *         them all, then joins them all, so up to N receives wait in the
 *         matching table at once (or N unexpected messages, whichever side
 *         runs ahead; in practice both sides spawn at the same pace and
 *         few wait at a time).
 *   recvfirst: the ults pattern with the receives posted first: rank 1
 *         spawns its N ULTs, each posts its receive (mpiv_irecv) and then
 *         waits for it; once all N are posted (N ULTs blocked in a receive,
 *         what peak RSS then measures) a barrier lets rank 0 spawn its N
 *         senders.
 *   spawnrecv: recvfirst with mpiv_ult_spawn_recv: rank 1's main thread
 *         starts each ULT with its receive posted (tag i), and the ULT runs
 *         only once its message is in; so while all N wait, none holds a
 *         stack (what peak RSS then measures). ULT only.
 *   pingpong: the reference per-message cost in the same job: 64 ULT
 *         pairs ping-pong 8-byte messages (bench/pt2pt's mt_latency at 64
 *         pairs); its time divided by the round trips of all pairs, i.e.
 *         per message sent by rank 0 (mt_latency's messages/s, inverted).
 *   posted: rank 1 runs one ULT that posts N receives (mpiv_irecv, tags
 *         0..N-1), then joins a barrier, then waits for them all; rank 0
 *         runs one ULT that joins the barrier, then sends N messages: N
 *         receives wait in the matching table when the first message
 *         arrives, the case a table that cannot grow handles worst. Rank 1
 *         also prints what posting the receives cost (wall, and CPU ns
 *         per mpiv_irecv on its worker's clock).
 *
 * After a warm-up of 256 messages, each phase starts after a barrier and ends when this rank has joined its
 * ULTs; every rank prints its own time, the time per message, and its
 * peak RSS so far (getrusage: with "all" the phases run in the order
 * loop, posted, ults, and each figure includes the earlier phases'). Every message carries a value derived from
 * its tag, checked by the receiver; any error makes the exit status 1.
 *
 * Usage: mpiv_run -n 2 million N [MODE[,MODE...]|all] [ult|pthread]
 *   MODE: loop, posted, ults, recvfirst, spawnrecv, pingpong (run in that
 *   order; "all" is every one but spawnrecv);
 *   "warm" in the list runs each phase once untimed before its timed run
 *   (the timed line then ends in "warm"): the first run of a pattern also
 *   makes the stacks its blocked ULTs need, which a program pays once.
 *   N: a count with an optional K (x1024) or M (x1048576) suffix, e.g. 64K.
 *   Spawning N ULTs needs MPIV_MAX_ULTS >= N / MPIV_WORKERS.
 *   pthread: ults and recvfirst with N plain pthreads (64 KiB stacks) per
 *   rank instead of N ULTs, through the same API ("all" then runs those
 *   two only); for small N, where a process can hold N threads.
 * bench/million/run.sh runs the grid of issue 16 and writes a table and a
 * plot.
 * Only the public API (mpiv.h) is used.
 */
#include <mpiv.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAGIC 0x6d696c6c696f6e00ull /* "million\0": value = MAGIC ^ tag */

static _Atomic long errors;
static int rank;

static void fail(const char *what, int rc)
{
    fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, mpiv_strerror(rc), mpiv_error_detail());
    errors++;
}

static long peak_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss; /* KiB on Linux */
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void send_one(uint32_t tag)
{
    uint64_t v = MAGIC ^ tag;
    int rc = mpiv_send(&v, sizeof v, 1, (int)tag);
    if (rc)
        fail("send", rc);
}

static void recv_one(uint32_t tag)
{
    uint64_t v = 0;
    mpiv_status_t st;
    int rc = mpiv_recv(&v, sizeof v, 0, (int)tag, &st);
    if (rc)
        fail("recv", rc);
    else if (v != (MAGIC ^ tag) || st.size != sizeof v || st.tag != (int)tag) {
        if (errors++ < 10)
            fprintf(stderr, "rank 1: tag %u: got %#llx (%zu bytes, tag %d)\n", tag,
                    (unsigned long long)v, st.size, st.tag);
    }
}

static void *one_message(void *arg)
{
    uint32_t tag = (uint32_t)(uintptr_t)arg;
    if (rank == 0)
        send_one(tag);
    else
        recv_one(tag);
    return NULL;
}

static void *all_messages(void *arg)
{
    uint32_t n = (uint32_t)(uintptr_t)arg;
    for (uint32_t i = 0; i < n; i++)
        one_message((void *)(uintptr_t)i);
    return NULL;
}

/* The posted phase: rank 1 posts every receive before rank 0 sends. */
static void *posted_messages(void *arg)
{
    uint32_t n = (uint32_t)(uintptr_t)arg;
    int rc;
    if (rank == 0) {
        if ((rc = mpiv_barrier()))
            fail("barrier", rc);
        for (uint32_t i = 0; i < n; i++)
            send_one(i);
        return NULL;
    }
    mpiv_request_t *reqs = malloc(sizeof *reqs * n);
    uint64_t *vals = calloc(n, sizeof *vals);
    if (!reqs || !vals) {
        fprintf(stderr, "rank 1: no memory for %u requests\n", n);
        errors++;
        free(reqs);
        free(vals);
        mpiv_barrier(); /* let rank 0 go on: its sends then fail or wait */
        return NULL;
    }
    /* Posting alone: N insertions into the matching table (plus a request
     * each), on this worker thread's CPU clock, which the other processes
     * on a shared machine do not inflate as they do the wall clock. */
    double w0 = mpiv_wtime(), c0 = thread_cpu_s();
    for (uint32_t i = 0; i < n; i++)
        if ((rc = mpiv_irecv(&vals[i], sizeof vals[i], 0, (int)i, &reqs[i])))
            fail("irecv", rc);
    double c1 = thread_cpu_s(), w1 = mpiv_wtime();
    printf("rank 1  posting %u receives: %.3f s wall, %.0f ns CPU per mpiv_irecv\n", n, w1 - w0,
           (c1 - c0) * 1e9 / n);
    if ((rc = mpiv_barrier()))
        fail("barrier", rc);
    if ((rc = mpiv_waitall((int)n, reqs, NULL)))
        fail("waitall", rc);
    for (uint32_t i = 0; i < n; i++)
        if (vals[i] != (MAGIC ^ i) && errors++ < 10)
            fprintf(stderr, "rank 1: tag %u: got %#llx\n", i, (unsigned long long)vals[i]);
    free(reqs);
    free(vals);
    return NULL;
}

/* recvfirst: rank 1's ULT (or pthread) i posts its receive, counts it,
 * then waits for it. */
static _Atomic uint32_t posted_now;

static void *recv_posted_first(void *arg)
{
    uint32_t tag = (uint32_t)(uintptr_t)arg;
    if (rank == 0) {
        send_one(tag);
        return NULL;
    }
    uint64_t v = 0;
    mpiv_request_t req;
    mpiv_status_t st;
    int rc = mpiv_irecv(&v, sizeof v, 0, (int)tag, &req);
    posted_now++;
    if (rc) {
        fail("irecv", rc);
        return NULL;
    }
    if ((rc = mpiv_wait(&req, &st)))
        fail("wait", rc);
    else if (v != (MAGIC ^ tag) && errors++ < 10)
        fprintf(stderr, "rank 1: tag %u: got %#llx\n", tag, (unsigned long long)v);
    return NULL;
}

/* spawnrecv: rank 1's ULT i starts with its message in sr_vals[i]. */
static uint64_t *sr_vals;
static mpiv_status_t *sr_st;

static void *started_with_message(void *arg)
{
    uint32_t tag = (uint32_t)(uintptr_t)arg;
    if (sr_st[tag].error)
        fail("spawned receive", sr_st[tag].error);
    else if (sr_vals[tag] != (MAGIC ^ tag) && errors++ < 10)
        fprintf(stderr, "rank 1: tag %u: got %#llx\n", tag, (unsigned long long)sr_vals[tag]);
    return NULL;
}

/* pingpong: pair p (tag p) does PP_ROUNDS round trips; rank 0 starts. */
#define PP_PAIRS 64
#define PP_ROUNDS 2000

static void *pingpong_pair(void *arg)
{
    int tag = (int)(uintptr_t)arg, rc;
    uint64_t v;
    for (uint64_t i = 0; i < PP_ROUNDS; i++) {
        if (rank == 0) {
            v = MAGIC ^ i;
            if ((rc = mpiv_send(&v, sizeof v, 1, tag)) || (rc = mpiv_recv(&v, sizeof v, 1, tag, NULL)))
                fail("pingpong", rc);
        } else {
            if ((rc = mpiv_recv(&v, sizeof v, 0, tag, NULL)) || (rc = mpiv_send(&v, sizeof v, 0, tag)))
                fail("pingpong", rc);
        }
        if (v != (MAGIC ^ i) && errors++ < 10)
            fprintf(stderr, "rank %d: pingpong pair %d round %llu: got %#llx\n", rank, tag,
                    (unsigned long long)i, (unsigned long long)v);
    }
    return NULL;
}

static int use_pthreads;
static pthread_t *threads;

/* Starts worker i of a phase: a ULT, or a pthread with a 64 KiB stack. */
static int start_one(mpiv_ult_fn fn, uint32_t i);
static int join_one(uint32_t i);

static mpiv_ult_t *ults;

static int start_one(mpiv_ult_fn fn, uint32_t i)
{
    if (!use_pthreads)
        return mpiv_ult_spawn(fn, (void *)(uintptr_t)i, MPIV_WORKER_ANY, &ults[i]);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 << 10);
    int rc = pthread_create(&threads[i], &a, fn, (void *)(uintptr_t)i);
    pthread_attr_destroy(&a);
    if (rc) {
        fprintf(stderr, "rank %d: pthread_create %u: %s\n", rank, i, strerror(rc));
        return MPIV_ERR_NO_RESOURCES;
    }
    return MPIV_SUCCESS;
}

static int join_one(uint32_t i)
{
    if (!use_pthreads)
        return mpiv_ult_join(ults[i], NULL);
    return pthread_join(threads[i], NULL) ? MPIV_ERR_INTERNAL : MPIV_SUCCESS;
}

/* "warm": each phase runs once untimed first (run_phase) */
static int warm;

/* Returns this rank's seconds for the phase, or a negative value if a
 * spawn failed (then the job cannot finish the phase: the caller exits).
 * quiet: prints nothing (a warm-up run). */
static double phase_once(const char *name, uint32_t n, int quiet)
{
    int many = strcmp(name, "ults") == 0, recvfirst = strcmp(name, "recvfirst") == 0;
    int spawnrecv = strcmp(name, "spawnrecv") == 0;
    int pingpong = strcmp(name, "pingpong") == 0;
    recvfirst = recvfirst || spawnrecv; /* the same order: rank 1 posts first */
    posted_now = 0;
    int rc = mpiv_barrier();
    if (rc) {
        fail("barrier", rc);
        return -1;
    }
    double t0 = mpiv_wtime();
    if (many || recvfirst) {
        mpiv_ult_fn fn = many ? one_message : recv_posted_first;
        /* recvfirst: rank 1 spawns and posts first, rank 0 waits */
        if (recvfirst && rank == 0 && (rc = mpiv_barrier())) {
            fail("barrier", rc);
            return -1;
        }
        for (uint32_t i = 0; i < n; i++) {
            if (spawnrecv && rank == 1) {
                rc = mpiv_ult_spawn_recv(started_with_message, (void *)(uintptr_t)i, MPIV_WORKER_ANY,
                                         &sr_vals[i], sizeof sr_vals[i], 0, (int)i, &sr_st[i],
                                         &ults[i]);
                posted_now++;
            } else {
                rc = start_one(fn, i);
            }
            if (rc) {
                fail("spawn", rc);
                fprintf(stderr, "rank %d: spawned %u of %u ULTs (raise MPIV_MAX_ULTS?)\n", rank, i,
                        n);
                return -1;
            }
        }
        if (recvfirst && rank == 1) {
            /* short naps: the phase's time includes this wait, which at
             * small N is shorter than a long nap */
            struct timespec nap = {0, 20000};
            while (posted_now < n)
                nanosleep(&nap, NULL);
            /* every receive posted: this rank's peak RSS holds N blocked
             * receivers now */
            if (!quiet)
                printf("rank 1  %u receives posted in %.3f s, RSS %.1f MiB\n", n,
                       mpiv_wtime() - t0, peak_rss_kib() / 1024.0);
            if ((rc = mpiv_barrier())) {
                fail("barrier", rc);
                return -1;
            }
        }
        for (uint32_t i = 0; i < n; i++)
            if ((rc = join_one(i)))
                fail("join", rc);
    } else if (pingpong) {
        for (uint32_t i = 0; i < PP_PAIRS; i++)
            if ((rc = mpiv_ult_spawn(pingpong_pair, (void *)(uintptr_t)i, MPIV_WORKER_ANY,
                                     &ults[i]))) {
                fail("spawn", rc);
                return -1;
            }
        for (uint32_t i = 0; i < PP_PAIRS; i++)
            if ((rc = mpiv_ult_join(ults[i], NULL)))
                fail("join", rc);
        n = PP_PAIRS * PP_ROUNDS;
    } else {
        mpiv_ult_fn fn = strcmp(name, "loop") == 0 ? all_messages : posted_messages;
        rc = mpiv_ult_spawn(fn, (void *)(uintptr_t)n, MPIV_WORKER_ANY, &ults[0]);
        if (rc) {
            fail("spawn", rc);
            return -1;
        }
        if ((rc = mpiv_ult_join(ults[0], NULL)))
            fail("join", rc);
    }
    double t = mpiv_wtime() - t0;
    if (!quiet) {
        printf("rank %d  %-9s  N %8u  %11.6f s  %8.0f ns/msg  peak RSS %8.1f MiB  workers %d  %s%s\n",
               rank, name, n, t, t * 1e9 / n, peak_rss_kib() / 1024.0, mpiv_num_workers(),
               use_pthreads && (many || recvfirst) ? "pthread" : "ult", warm ? "  warm" : "");
        fflush(stdout);
    }
    if ((rc = mpiv_barrier()))
        fail("barrier", rc);
    return t;
}

/* A phase, after an untimed run of itself with "warm": the timed run then
 * finds the stacks, table slots and pages the pattern needs already made,
 * as every run after a program's first does. */
static double phase(const char *name, uint32_t n)
{
    if (warm && phase_once(name, n, 1) < 0)
        return -1;
    return phase_once(name, n, 0);
}

/* "64K" -> 65536; 0 on anything that is not a count in 1..2^24. */
static uint32_t parse_count(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *s == '-')
        return 0;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    if (*end != '\0' || v < 1 || v > (1u << 24))
        return 0;
    return (uint32_t)v;
}

static const char *const modes[] = {"loop", "posted", "ults", "recvfirst", "spawnrecv", "pingpong", "warm"};

/* Whether the comma-separated list `list` names mode m. */
static int has_mode(const char *list, const char *m)
{
    size_t len = strlen(m);
    for (const char *p = list; p; p = strchr(p, ',')) {
        if (*p == ',')
            p++;
        if (!strncmp(p, m, len) && (p[len] == ',' || p[len] == '\0'))
            return 1;
    }
    return 0;
}

/* Whether every entry of the comma-separated list is a mode. */
static int mode_ok(const char *list)
{
    for (const char *p = list;; p++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++)
            found |= strlen(modes[k]) == len && !strncmp(p, modes[k], len);
        if (!found)
            return 0;
        if (!e)
            return 1;
        p = e;
    }
}

int main(int argc, char **argv)
{
    int rc = mpiv_init(&argc, &argv);
    if (rc) {
        fprintf(stderr, "mpiv_init: %s: %s\n", mpiv_strerror(rc), mpiv_error_detail());
        return 1;
    }
    rank = mpiv_rank();
    uint32_t n = argc > 1 ? parse_count(argv[1]) : 0;
    const char *mode = argc > 2 ? argv[2] : "all";
    const char *kind = argc > 3 ? argv[3] : "ult";
    int all = !strcmp(mode, "all");
    warm = has_mode(mode, "warm");
    all = all || !strcmp(mode, "warm"); /* "warm" alone: every phase, warmed */
    int ok_mode = all || mode_ok(mode);
    use_pthreads = !strcmp(kind, "pthread");
    int ok_kind = use_pthreads || !strcmp(kind, "ult");
    if (mpiv_size() != 2 || n == 0 || n > (uint32_t)MPIV_TAG_MAX || !ok_mode || !ok_kind) {
        if (rank == 0)
            fprintf(stderr,
                    "usage: mpiv_run -n 2 million N [MODE[,MODE...]|all] [ult|pthread]\n"
                    "  MODE: loop, posted, ults, recvfirst, spawnrecv, pingpong (all: every\n"
                    "  one but spawnrecv); warm: each phase runs once untimed first\n"
                    "  N: 1..16M messages, K and M suffixes allowed (e.g. 64K, 1M)\n"
                    "  (got %d ranks, N '%s', mode '%s', kind '%s')\n",
                    mpiv_size(), argc > 1 ? argv[1] : "", mode, kind);
        mpiv_finalize();
        return 2;
    }
    uint32_t nh = n > PP_PAIRS ? n : PP_PAIRS;
    ults = malloc(sizeof *ults * nh);
    threads = use_pthreads ? malloc(sizeof *threads * n) : NULL;
    if (!ults || (use_pthreads && !threads)) {
        fprintf(stderr, "rank %d: no memory for %u ULT handles\n", rank, n);
        return 1;
    }
    if (rank == 0)
        printf("# million: 8-byte messages rank 0 -> rank 1, start RSS %.1f MiB\n",
               peak_rss_kib() / 1024.0);
    /* Warm up: the first messages between two ranks pay for connection
     * set-up and first-touch faults that no phase should be charged for. */
    if ((rc = mpiv_ult_spawn(all_messages, (void *)(uintptr_t)256, MPIV_WORKER_ANY, &ults[0])) ||
        (rc = mpiv_ult_join(ults[0], NULL))) {
        fail("warm-up", rc);
        return 1;
    }
    double tl = 0, tu = 0;
    int ults_only = use_pthreads; /* pthreads: the many-thread phases only */
    if (!ults_only && (all || has_mode(mode, "loop")) && (tl = phase("loop", n)) < 0)
        return 1;
    if (!ults_only && (all || has_mode(mode, "posted")) && phase("posted", n) < 0)
        return 1;
    if ((all || has_mode(mode, "ults")) && (tu = phase("ults", n)) < 0)
        return 1;
    if ((all || has_mode(mode, "recvfirst")) && phase("recvfirst", n) < 0)
        return 1;
    if (!ults_only && has_mode(mode, "spawnrecv")) { /* not in "all": named only */
        sr_vals = calloc(n, sizeof *sr_vals);
        sr_st = calloc(n, sizeof *sr_st);
        if (!sr_vals || !sr_st) {
            fprintf(stderr, "rank %d: no memory for %u receives\n", rank, n);
            return 1;
        }
        if (phase("spawnrecv", n) < 0)
            return 1;
    }
    if (!ults_only && (all || has_mode(mode, "pingpong")) && phase("pingpong", n) < 0)
        return 1;
    if (tl > 0 && tu > 0)
        printf("rank %d  ults/loop per message: %.2fx\n", rank, tu / tl);
    free(threads);
    free(ults);
    rc = mpiv_finalize();
    if (rc)
        fail("finalize", rc);
    return errors ? 1 : 0;
}
