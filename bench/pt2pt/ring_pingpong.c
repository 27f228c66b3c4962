/*
 * ring_pingpong.c — what the part of a ring a ping-pong cycles through
 * costs, without MPIv: two threads on two cores send LEN-byte messages
 * back and forth, each through a ring of its own, as MPIv's shm backend
 * does (copy into the ring, publish, the other side copies out). Message
 * i goes to offset (i x STRIDE) mod SPAN of its ring, STRIDE being the
 * message rounded up to whole lines plus 8 gap lines (MPIv's record of a
 * message that long); SPAN 0 puts every message at offset 0.
 *
 * Several spans are timed in one process, in turns (round 1 every span,
 * then round 2, ...), so that all see the same machine; each round runs
 * N round trips per span. Prints per span the median, minimum and maximum
 * over the rounds of the one-way time (half a round trip).
 *
 * Usage: ring_pingpong LEN SPAN[,SPAN...] [ROUNDS [N]]
 *        (default 15 rounds of 10,000 round trips; K suffixes allowed)
 * Pins the two threads to CPUs 0 and 1 (both must exist).
 * docs/perf/pt2pt.md ("A ping-pong's records kept in the first-level
 * cache", and "Long records go where the receiver's cache is not", which
 * needed spans of megabytes: rings of RING bytes) has what it showed.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SPANS 8
#define RING ((size_t)8 << 20)

struct ring {
    /* messages published so far: written by the sender only, on a line
     * pair of its own */
    _Alignas(128) _Atomic uint64_t count;
    _Alignas(128) unsigned char bytes[RING];
};

static struct ring rings[2]; /* [0]: CPU 0 to CPU 1, [1]: back */
static size_t len, stride, span;
static long trips;
static uint64_t sent; /* messages each way before this turn (both sides) */
/* turn number: the main thread starts a turn, the peer acknowledges it */
static _Atomic long turn, turn_done;

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0) {
        fprintf(stderr, "ring_pingpong: cannot pin to CPU %d\n", cpu);
        exit(1);
    }
}

static size_t offset(uint64_t i)
{
    return span ? (size_t)((i * stride) % span) : 0;
}

static void put(struct ring *r, const unsigned char *src, uint64_t i)
{
    memcpy(r->bytes + offset(i), src, len);
    /* release: the bytes before the count that announces them */
    atomic_store_explicit(&r->count, i + 1, memory_order_release);
}

static void take(struct ring *r, unsigned char *dst, uint64_t i)
{
    /* acquire: the bytes are there once the count says so */
    while (atomic_load_explicit(&r->count, memory_order_acquire) <= i)
        ;
    memcpy(dst, r->bytes + offset(i), len);
}

static void *peer(void *arg)
{
    unsigned char *buf = arg;
    pin(1);
    for (long t = 1;; t++) {
        long go;
        while ((go = atomic_load_explicit(&turn, memory_order_acquire)) >= 0 && go < t)
            ;
        if (go < 0)
            return NULL;
        for (long k = 0; k < trips; k++) {
            take(&rings[0], buf, sent + (uint64_t)k);
            put(&rings[1], buf, sent + (uint64_t)k);
        }
        atomic_store_explicit(&turn_done, t, memory_order_release);
    }
}

static size_t size_arg(const char *s, int *ok)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end != s && (*end == 'K' || *end == 'k')) {
        v <<= 10;
        end++;
    }
    *ok = end != s && (*end == '\0' || *end == ',');
    return (size_t)v;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: %s LEN SPAN[,SPAN...] [ROUNDS [N]]  (message bytes; bytes of ring "
                        "cycled through, 0 = one place; rounds; round trips per span and round)\n",
                argv[0]);
        return 2;
    }
    int ok;
    len = size_arg(argv[1], &ok);
    stride = (len + 63) / 64 * 64 + 8 * 64;
    if (!ok || len == 0 || 2 * stride > RING) {
        fprintf(stderr, "ring_pingpong: LEN must be 1 to %zu bytes\n", RING / 2 - 8 * 64);
        return 2;
    }
    size_t spans[MAX_SPANS];
    int nspans = 0;
    for (const char *p = argv[2]; *p;) {
        if (nspans == MAX_SPANS) {
            fprintf(stderr, "ring_pingpong: at most %d spans\n", MAX_SPANS);
            return 2;
        }
        size_t v = size_arg(p, &ok);
        if (!ok || v > RING - len) {
            fprintf(stderr, "ring_pingpong: a SPAN is at most %zu bytes\n", RING - len);
            return 2;
        }
        spans[nspans++] = v;
        p = strchr(p, ',');
        p = p ? p + 1 : "";
    }
    int rounds = argc > 3 ? atoi(argv[3]) : 15;
    trips = argc > 4 ? atol(argv[4]) : 10000;
    if (rounds < 1 || rounds > 1000 || trips < 1) {
        fprintf(stderr, "ring_pingpong: ROUNDS is 1 to 1000, N positive\n");
        return 2;
    }
    double *us = calloc((size_t)nspans * (size_t)rounds, sizeof *us);
    unsigned char *mine = aligned_alloc(4096, RING), *theirs = aligned_alloc(4096, RING);
    if (!us || !mine || !theirs) {
        fprintf(stderr, "ring_pingpong: out of memory\n");
        return 1;
    }
    memset(mine, 1, RING);
    memset(theirs, 2, RING);
    memset(rings, 0, sizeof rings);
    pthread_t t;
    if (pthread_create(&t, NULL, peer, theirs) != 0) {
        fprintf(stderr, "ring_pingpong: cannot start the peer thread\n");
        return 1;
    }
    pin(0);
    long tn = 0;
    for (int r = 0; r < rounds; r++) {
        for (int s = 0; s < nspans; s++) {
            span = spans[s];
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            atomic_store_explicit(&turn, ++tn, memory_order_release);
            for (long k = 0; k < trips; k++) {
                put(&rings[0], mine, sent + (uint64_t)k);
                take(&rings[1], mine, sent + (uint64_t)k);
            }
            clock_gettime(CLOCK_MONOTONIC, &b);
            while (atomic_load_explicit(&turn_done, memory_order_acquire) < tn)
                ;
            sent += (uint64_t)trips;
            double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
            us[s * rounds + r] = ns / (double)trips / 2 / 1000;
        }
    }
    atomic_store_explicit(&turn, -1, memory_order_release);
    pthread_join(t, NULL);
    for (int s = 0; s < nspans; s++) {
        double *v = us + s * rounds;
        qsort(v, (size_t)rounds, sizeof *v, by_value);
        printf("%zu B, span %zu: one way %.3f us (median of %d; min %.3f, max %.3f)\n", len,
               spans[s], v[rounds / 2], rounds, v[0], v[rounds - 1]);
    }
    free(us);
    free(mine);
    free(theirs);
    return 0;
}
