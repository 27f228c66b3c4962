/*
 * bench_faults.c — what a page of fresh memory costs on this machine.
 *
 * The scheduler's records, stacks and the copies of early messages are
 * fresh memory the first time a program touches them, and on some VMs a
 * page fault costs more than the message it serves (docs/perf/sched.md,
 * "Dense memory in 2 MiB pages"). This times, over N 4 KiB pages of a new
 * anonymous mapping each:
 *   touch          the first write to each page (one fault each)
 *   again          a second write to each page (no fault: the baseline)
 *   populate       MADV_POPULATE_WRITE of the whole mapping (the kernel
 *                  allocates and zeroes every page; what stack.c does for
 *                  the top pages of new stacks)
 *   after-populate the first write to each page after that
 *   huge           the first write to each page of a 2 MiB-aligned mapping
 *                  advised MADV_HUGEPAGE (one fault per 2 MiB where the
 *                  kernel finds a free huge page; util_map_dense)
 * and prints ns per 4 KiB page for each, best of R repetitions (the first
 * repetitions after boot may be slower: a VM's host backs memory lazily).
 *
 * Usage: bench_faults [PAGES (default 65536)] [REPS (default 3)]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define PAGE 4096UL
#define HUGE (2UL << 20)

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* A mapping of len + 2 MiB bytes at *raw; returns its first 2 MiB
 * boundary, from which len bytes are advised. */
static char *map(size_t len, int advice, char **rawp)
{
    char *raw = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("bench_faults: mmap");
        exit(1);
    }
    char *p = (char *)(((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    madvise(p, len, advice);
    *rawp = raw;
    return p;
}

/* ns per page for one write to each of n pages from p */
static double touch(volatile char *p, size_t n)
{
    double t = now_ns();
    for (size_t i = 0; i < n; i++)
        p[i * PAGE] = 1;
    return (now_ns() - t) / (double)n;
}

int main(int argc, char **argv)
{
    long pages = argc > 1 ? strtol(argv[1], NULL, 0) : 65536;
    long reps = argc > 2 ? strtol(argv[2], NULL, 0) : 3;
    if (pages < 512 || pages > (1L << 24) || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: bench_faults [PAGES 512..16777216] [REPS 1..100]\n");
        return 2;
    }
    size_t n = (size_t)pages, len = n * PAGE;
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (long r = 0; r < reps; r++) {
        double v[5];
        char *raw[3];
        char *a = map(len, MADV_NOHUGEPAGE, &raw[0]);
        v[0] = touch(a, n);
        v[1] = touch(a + 8, n);
        char *b = map(len, MADV_NOHUGEPAGE, &raw[1]);
        double t = now_ns();
        if (madvise(b, len, MADV_POPULATE_WRITE) != 0)
            perror("bench_faults: MADV_POPULATE_WRITE");
        v[2] = (now_ns() - t) / (double)n;
        v[3] = touch(b, n);
        char *c = map(len, MADV_HUGEPAGE, &raw[2]);
        v[4] = touch(c, n);
        for (int i = 0; i < 5; i++)
            best[i] = v[i] < best[i] ? v[i] : best[i];
        for (int i = 0; i < 3; i++)
            munmap(raw[i], len + HUGE);
    }
    const char *name[5] = {"touch", "again", "populate", "after-populate", "huge"};
    printf("# %zu pages of 4 KiB, best of %ld: ns per page\n", n, reps);
    for (int i = 0; i < 5; i++)
        printf("%-15s %10.1f\n", name[i], best[i]);
    return 0;
}
