/*
 * smaps.h — what /proc/self says about this process's memory, for tests
 * that check the advice a mapping was given (util_map_dense's huge pages)
 * or how much memory a call commits.
 */
#ifndef MPIV_TEST_SMAPS_H
#define MPIV_TEST_SMAPS_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The VmFlags line of the mapping that holds p in /proc/self/smaps, into
 * buf; false if no mapping holds it. */
static inline bool vmflags_at(const void *p, char *buf, size_t n)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    bool in = false, found = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
            in = lo <= (uintptr_t)p && (uintptr_t)p < hi;
            continue;
        }
        if (in && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(buf, n, "%s", line + 8);
            found = true;
            break;
        }
    }
    fclose(f);
    return found;
}

/* This process's resident memory in KiB (/proc/self/statm). */
static inline long resident_kib(void)
{
    long size = 0, res = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%ld %ld", &size, &res), 2);
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

#ifdef MPIV_TSAN /* its allocator and shadow commit memory of their own */
#define SMAPS_RSS_CHECKED 0
#else
#define SMAPS_RSS_CHECKED 1
#endif

/* Evaluates `call`, which must be true, and asserts that it made less
 * than `kib` KiB resident (not under ThreadSanitizer). */
#define assert_commits_below(kib, call, what)                                                     \
    do {                                                                                           \
        long before_ = resident_kib();                                                             \
        ck_assert(call);                                                                           \
        long grew_ = resident_kib() - before_;                                                     \
        ck_assert_msg(!SMAPS_RSS_CHECKED || grew_ < (kib), "%s made %ld KiB resident", what,      \
                      grew_);                                                                      \
    } while (0)

#endif
