/*
 * test_data.h — the byte pattern the protocol tests send, and its check:
 * byte i of a message made with `seed` is pattern(i, seed), so a byte that
 * lands in the wrong place, or a message that arrives in another's buffer,
 * shows as a mismatch naming the byte.
 */
#ifndef MPIV_TEST_DATA_H
#define MPIV_TEST_DATA_H

#include <check.h>
#include <stddef.h>

static inline unsigned char pattern(size_t i, unsigned seed)
{
    return (unsigned char)(i * 131u + seed * 7u + 1u);
}

static inline void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(i, seed);
}

static inline void check_data(const unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(i, seed))
            ck_abort_msg("byte %zu of %zu is %u, expected %u (seed %u)", i, n, b[i],
                         pattern(i, seed), seed);
}

#endif
