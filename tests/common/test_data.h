/*
 * test_data.h — the byte pattern the protocol tests send, and its check:
 * byte i of a message made with `seed` is pattern(i, seed), so a byte that
 * lands in the wrong place, or a message that arrives in another's buffer,
 * shows as a mismatch naming the byte.
 *
 * pattern(i, seed) repeats every PATTERN_PERIOD bytes (131 x 256 is 0 mod
 * 256), so long buffers are filled and checked by the period with memcpy
 * and memcmp: the sanitizers check those as ranges, where a byte loop pays
 * an instrumented access per byte (most of some tests' time under TSan).
 */
#ifndef MPIV_TEST_DATA_H
#define MPIV_TEST_DATA_H

#include <check.h>
#include <stddef.h>
#include <string.h>

#define PATTERN_PERIOD 256

static inline unsigned char pattern(size_t i, unsigned seed)
{
    return (unsigned char)(i * 131u + seed * 7u + 1u);
}

static inline void fill(unsigned char *b, size_t n, unsigned seed)
{
    size_t done = n < PATTERN_PERIOD ? n : PATTERN_PERIOD;
    for (size_t i = 0; i < done; i++)
        b[i] = pattern(i, seed);
    /* done stays a multiple of the period: b[done + i] = b[i] */
    while (done < n) {
        size_t k = done < n - done ? done : n - done;
        memcpy(b + done, b, k);
        done += k;
    }
}

/* The first i in [from, n) with b[i] != pattern(i, seed); n if there is
 * none, and from if from >= n (nothing to check). */
static inline size_t data_mismatch(const unsigned char *b, size_t from, size_t n, unsigned seed)
{
    if (from >= n)
        return from;
    size_t i = from;
    if (n - from > 2 * PATTERN_PERIOD) {
        /* ref + i % PERIOD is what b + i must hold, for a period's bytes */
        unsigned char ref[2 * PATTERN_PERIOD];
        for (size_t k = 0; k < sizeof ref; k++)
            ref[k] = pattern(k, seed);
        for (; n - i >= PATTERN_PERIOD; i += PATTERN_PERIOD)
            if (memcmp(b + i, ref + i % PATTERN_PERIOD, PATTERN_PERIOD) != 0)
                break; /* the bad byte is in this period: found below */
    }
    for (; i < n; i++)
        if (b[i] != pattern(i, seed))
            return i;
    return n;
}

static inline void check_data(const unsigned char *b, size_t n, unsigned seed)
{
    size_t i = data_mismatch(b, 0, n, seed);
    if (i < n)
        ck_abort_msg("byte %zu of %zu is %u, expected %u (seed %u)", i, n, b[i], pattern(i, seed),
                     seed);
}

#endif
