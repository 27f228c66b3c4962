/*
 * ring_copy.c — what the offset of a payload within its cache lines costs
 * a copy through a ring shared by two cores, without MPIv: one thread
 * copies LEN-byte payloads into records of a 64 KiB ring, another copies
 * them out, as MPIv's shm backend does. A record is OFF bytes of header,
 * the payload and an 8-byte trailer, rounded up to whole lines; a record
 * that would pass the ring's end starts over at its beginning.
 *
 * MPIv puts a payload 56 bytes into a line (a 24-byte record header and a
 * 32-byte protocol header); 64 puts it on a line of its own at the price
 * of one more line per record at power-of-two sizes. docs/perf/pt2pt.md
 * ("three copies of the ring measured") has the numbers.
 *
 * Usage: ring_copy LEN OFF [N]   (N records, default 2,000,000)
 * Pins the writer to CPU 0 and the reader to CPU 1 (both must exist).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING ((size_t)64 << 10)

static size_t len, off, rec;
static long n = 2000000;
static unsigned char *ring;
/* positions (bytes written, bytes consumed), each on a line of its own */
static _Alignas(64) _Atomic uint64_t tail;
static _Alignas(64) _Atomic uint64_t head;

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0) {
        fprintf(stderr, "ring_copy: cannot pin to CPU %d\n", cpu);
        exit(1);
    }
}

/* Where the record at position p starts, and the position after it. */
static size_t place(uint64_t *p)
{
    size_t at = (size_t)(*p % RING);
    if (at + rec > RING) { /* start over at the beginning */
        *p += RING - at;
        at = 0;
    }
    return at;
}

static void *reader(void *arg)
{
    unsigned char *dst = arg;
    pin(1);
    uint64_t h = 0;
    for (long i = 0; i < n; i++) {
        /* acquire: the record is written */
        while (atomic_load_explicit(&tail, memory_order_acquire) <= h)
            ;
        size_t at = place(&h);
        memcpy(dst, ring + at + off, len);
        h += rec;
        /* release: done reading it */
        atomic_store_explicit(&head, h, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s LEN OFF [N]  (payload bytes, their offset in the record, "
                        "records)\n", argv[0]);
        return 2;
    }
    len = strtoul(argv[1], NULL, 10);
    off = strtoul(argv[2], NULL, 10);
    if (argc == 4)
        n = strtol(argv[3], NULL, 10);
    rec = (off + len + 8 + 63) & ~(size_t)63;
    if (len == 0 || len > RING / 4 || off > 4096 || n < 1 || rec > RING / 4) {
        fprintf(stderr, "ring_copy: LEN must be 1..%zu, OFF at most 4096, N positive\n",
                RING / 4);
        return 2;
    }
    ring = aligned_alloc(64, RING);
    unsigned char *src = aligned_alloc(4096, RING), *dst = aligned_alloc(4096, RING);
    if (!ring || !src || !dst) {
        fprintf(stderr, "ring_copy: out of memory\n");
        return 1;
    }
    memset(ring, 0, RING);
    memset(src, 1, RING);
    memset(dst, 0, RING);
    pthread_t t;
    if (pthread_create(&t, NULL, reader, dst) != 0) {
        fprintf(stderr, "ring_copy: cannot start the reader\n");
        return 1;
    }
    pin(0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t tl = 0;
    for (long i = 0; i < n; i++) {
        /* room for this record and a start-over before it (acquire: the
         * reader is done with what we overwrite) */
        while (tl + 2 * rec - atomic_load_explicit(&head, memory_order_acquire) > RING)
            ;
        size_t at = place(&tl);
        memcpy(ring + at + off, src, len);
        tl += rec;
        /* release: the record before the position that announces it */
        atomic_store_explicit(&tail, tl, memory_order_release);
    }
    pthread_join(t, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    printf("payload %zu B at offset %zu, records of %zu B: %.1f ns a record, %.0f MB/s\n", len,
           off, rec, s * 1e9 / (double)n, (double)len * (double)n / s / 1e6);
    return 0;
}
