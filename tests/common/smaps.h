/*
 * smaps.h — what /proc/self/smaps says about one mapping, for tests that
 * check the advice a mapping was given (util_map_dense's huge pages).
 */
#ifndef MPIV_TEST_SMAPS_H
#define MPIV_TEST_SMAPS_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

#endif
