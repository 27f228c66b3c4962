/*
 * mem.c — large zeroed mappings that are filled from the front.
 *
 * Why: a million ULT records, or the copies of a million early messages,
 * are written front to back, each 4 KiB page faulted in at its first
 * write: 16,384 faults for 64 MiB of records, where 2 MiB pages take 32.
 * A fault costs far more than a message on some VMs, most on one that
 * shadows its guest's page tables (docs/perf/sched.md, "Dense memory in
 * 2 MiB pages", has the figures).
 *
 * The cost: a 2 MiB page is committed whole at its first touch. So the
 * first `small_head` bytes of a mapping stay in 4 KiB pages, and a
 * program that uses little of it commits what it touches, as before;
 * past the head, a mapping holds at most one partly used 2 MiB page more
 * than it would otherwise. Only for memory used densely from its start:
 * stacks (one page touched in 64 KiB) must not come from here.
 */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/util.h"

void *util_map_dense(size_t len, size_t small_head)
{
    const size_t huge = UTIL_HUGE_PAGE;
    if (len == 0 || len > SIZE_MAX / 2 - huge)
        return NULL;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t used = (len + pg - 1) & ~(pg - 1);
    /* Over-map by 2 MiB, then trim to a 2 MiB boundary: a huge page
     * needs an aligned 2 MiB range inside the mapping. */
    size_t span = used + huge;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (raw + span > p + used)
        munmap(p + used, (size_t)(raw + span - (p + used)));
    size_t head = (small_head + huge - 1) & ~(huge - 1);
    /* Advice only: without transparent huge pages (or with them off) the
     * mapping works as any other. The head is left to the system's
     * default, which in "madvise" mode (Debian's) is 4 KiB pages. */
    if (used > head)
        madvise(p + head, used - head, MADV_HUGEPAGE);
    return p;
}

void util_unmap_dense(void *p, size_t len)
{
    if (p)
        munmap(p, len);
}
