/*
 * lib_loaded.h — whether a shared library is loaded in this process, by the
 * start of its file name (e.g. "libfabric.so"), for the tests that check
 * which libraries a backend loads (src/server/ofi.c loads libfabric only
 * when the ofi backend starts).
 */
#ifndef TEST_LIB_LOADED_H
#define TEST_LIB_LOADED_H

#include <link.h>
#include <stdbool.h>
#include <string.h>

struct lib_loaded_q {
    const char *prefix;
    bool found;
};

static inline int lib_loaded_note(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct lib_loaded_q *q = arg;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    base = base ? base + 1 : info->dlpi_name;
    if (base && strncmp(base, q->prefix, strlen(q->prefix)) == 0)
        q->found = true;
    return 0;
}

static inline bool lib_loaded(const char *prefix)
{
    struct lib_loaded_q q = {prefix, false};
    dl_iterate_phdr(lib_loaded_note, &q);
    return q.found;
}

#endif
