/*
 * sha1_check.c — tests and measures UTS's one-block SHA-1 (sha1.c).
 *
 *   sha1_check                 the self-test (FIPS 180-4 digests) of every
 *                              implementation this processor runs, and the
 *                              SHA-NI path against the portable one on
 *                              random messages of 0..55 bytes
 *   sha1_check --bench [N]     node hashes per second of each implementation:
 *                              N (default 10^7) hashes of 24 bytes, a node's
 *                              state and a child index, as UTS computes them,
 *                              each waiting for the last ("chained") or 8
 *                              independent children per parent ("siblings")
 *
 * Exit status: 0 pass, 1 a wrong digest, 2 bad arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sha1.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int check(void)
{
    int bad = 0;
    if (sha1_selftest() != 0) {
        printf("self-test: FAILED\n");
        bad = 1;
    } else {
        printf("self-test: portable%s: passed\n", sha1_have_shani() ? " and shani" : "");
    }
    if (!sha1_have_shani()) {
        printf("shani: not available on this processor (or build): portable path only\n");
        printf("result: %s\n", bad ? "FAILED" : "PASSED");
        return bad;
    }
    const int n = 200000;
    int diff = 0;
    for (int i = 0; i < n; i++) {
        uint8_t msg[SHA1_SMALL_MAX], a[20], b[20];
        size_t len = (size_t)(next() % (SHA1_SMALL_MAX + 1));
        for (size_t k = 0; k < len; k++)
            msg[k] = (uint8_t)next();
        sha1_small_portable(msg, len, a);
        sha1_small_shani(msg, len, b);
        if (memcmp(a, b, 20) != 0 && diff++ == 0)
            printf("shani and portable differ on a message of %zu bytes\n", len);
    }
    printf("shani vs portable: %d random messages of 0..%d bytes, %d differ\n", n, SHA1_SMALL_MAX, diff);
    bad |= diff != 0;
    printf("result: %s\n", bad ? "FAILED" : "PASSED");
    return bad;
}

/* As UTS: a parent's state and a big-endian child index, 24 bytes. In
 * "chained" every digest is the next parent, so each hash waits for the one
 * before; in "siblings" a parent's 8 children are hashed (independent of
 * each other, as in a node's expansion) and the last one is the next parent. */
static double bench_one(long n, int chained, uint8_t out[20])
{
    uint8_t msg[24] = {0}, child[20] = {0};
    double t0 = now();
    for (long i = 0; i < n; i++) {
        uint32_t k = (uint32_t)i & 7;
        msg[20] = (uint8_t)(k >> 24), msg[21] = (uint8_t)(k >> 16), msg[22] = (uint8_t)(k >> 8);
        msg[23] = (uint8_t)k;
        if (chained) {
            sha1_small(msg, 24, msg);
        } else {
            sha1_small(msg, 24, child);
            if (k == 7)
                memcpy(msg, child, 20);
        }
    }
    double t = now() - t0;
    memcpy(out, chained ? msg : child, 20);
    return t;
}

static void bench(long n)
{
    const char *impl[] = {"portable", "shani"};
    for (int i = 0; i < 2; i++) {
        if (sha1_use(impl[i]) != 0) {
            printf("%s: not available\n", impl[i]);
            continue;
        }
        for (int chained = 1; chained >= 0; chained--) {
            uint8_t out[20];
            bench_one(n / 10, chained, out); /* warm up */
            double t = bench_one(n, chained, out);
            printf("%s, %s: %ld hashes in %.3f s: %.4g hashes/s, %.1f ns/hash (last digest byte %02x)\n",
                   impl[i], chained ? "chained" : "siblings", n, t, (double)n / t, 1e9 * t / (double)n, out[19]);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--bench") == 0) {
        long n = 10000000;
        if (argc >= 3) {
            char *end;
            n = strtol(argv[2], &end, 10);
            if (*end || n <= 0) {
                fprintf(stderr, "sha1_check: --bench N: N must be a positive integer\n");
                return 2;
            }
        }
        bench(n);
        return 0;
    }
    if (argc >= 2) {
        fprintf(stderr, "Usage: sha1_check [--bench [N]]\n");
        return 2;
    }
    return check();
}
