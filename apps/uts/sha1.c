/*
 * sha1.c — one-block SHA-1, see sha1.h.
 *
 * Written from FIPS 180-4, section 6.1: the message is at most 55 bytes, so
 * the padded message is one 512-bit block and the digest is one compression
 * of the initial hash value.
 */
#include <string.h>

#include "sha1.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHA1_HAVE_SHANI_PATH 1
#include <immintrin.h>
#else
#define SHA1_HAVE_SHANI_PATH 0
#endif

#define H0 0x67452301u
#define H1 0xefcdab89u
#define H2 0x98badcfeu
#define H3 0x10325476u
#define H4 0xc3d2e1f0u

static inline uint32_t load_be32(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    x = __builtin_bswap32(x);
#endif
    return x;
}

static inline void store_be32(uint8_t *p, uint32_t x)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    x = __builtin_bswap32(x);
#endif
    memcpy(p, &x, 4);
}

/* The padded block as 16 big-endian words: the message, the 1 bit, zeros,
 * the length in bits (len <= 55: the high word of the length is 0). */
static inline void pad_block(const uint8_t *msg, size_t len, uint32_t w[16])
{
    size_t nw = len / 4, rest = len % 4, i;
    for (i = 0; i < nw; i++)
        w[i] = load_be32(msg + 4 * i);
    uint32_t last = 0x80u << (24 - 8 * rest);
    for (size_t r = 0; r < rest; r++)
        last |= (uint32_t)msg[4 * nw + r] << (24 - 8 * r);
    w[nw] = last;
    for (i = nw + 1; i < 15; i++)
        w[i] = 0;
    w[15] = (uint32_t)len * 8;
}

/* ---- portable ---- */

#define ROL(x, n) (((x) << (n)) | ((x) >> (32 - (n))))
#define F1(b, c, d) ((d) ^ ((b) & ((c) ^ (d))))     /* Ch */
#define F2(b, c, d) ((b) ^ (c) ^ (d))               /* Parity */
#define F3(b, c, d) (((b) & (c)) | ((d) & ((b) | (c)))) /* Maj */
#define K1 0x5a827999u
#define K2 0x6ed9eba1u
#define K3 0x8f1bbcdcu
#define K4 0xca62c1d6u

/* W_t for t >= 16, computed in place in the window of the last 16. */
#define WX(t) (w[(t)&15] = ROL(w[((t) - 3) & 15] ^ w[((t) - 8) & 15] ^ w[((t) - 14) & 15] ^ w[(t)&15], 1))
#define W0(t) (w[t])

/* One round: the variables rotate by renaming instead of by moves. */
#define RND(a, b, c, d, e, F, K, W)                                                                            \
    do {                                                                                                       \
        e += ROL(a, 5) + F(b, c, d) + (K) + (W);                                                               \
        b = ROL(b, 30);                                                                                        \
    } while (0)

#define R5(F, K, WF, t)                                                                                        \
    RND(a, b, c, d, e, F, K, WF(t));                                                                           \
    RND(e, a, b, c, d, F, K, WF((t) + 1));                                                                     \
    RND(d, e, a, b, c, F, K, WF((t) + 2));                                                                     \
    RND(c, d, e, a, b, F, K, WF((t) + 3));                                                                     \
    RND(b, c, d, e, a, F, K, WF((t) + 4))

static inline __attribute__((always_inline)) void portable(const uint8_t *msg, size_t len, uint8_t digest[20])
{
    uint32_t w[16];
    pad_block(msg, len, w);
    uint32_t a = H0, b = H1, c = H2, d = H3, e = H4;

    /* rounds 0-15 read the block, 16-79 extend the schedule */
    R5(F1, K1, W0, 0);
    R5(F1, K1, W0, 5);
    R5(F1, K1, W0, 10);
    RND(a, b, c, d, e, F1, K1, W0(15));
    RND(e, a, b, c, d, F1, K1, WX(16));
    RND(d, e, a, b, c, F1, K1, WX(17));
    RND(c, d, e, a, b, F1, K1, WX(18));
    RND(b, c, d, e, a, F1, K1, WX(19));

    R5(F2, K2, WX, 20);
    R5(F2, K2, WX, 25);
    R5(F2, K2, WX, 30);
    R5(F2, K2, WX, 35);

    R5(F3, K3, WX, 40);
    R5(F3, K3, WX, 45);
    R5(F3, K3, WX, 50);
    R5(F3, K3, WX, 55);

    R5(F2, K4, WX, 60);
    R5(F2, K4, WX, 65);
    R5(F2, K4, WX, 70);
    R5(F2, K4, WX, 75);

    store_be32(digest, H0 + a);
    store_be32(digest + 4, H1 + b);
    store_be32(digest + 8, H2 + c);
    store_be32(digest + 12, H3 + d);
    store_be32(digest + 16, H4 + e);
}

void sha1_small_portable(const uint8_t *msg, size_t len, uint8_t digest[20])
{
    /* UTS's two lengths get their own copies, where the block's zero words
     * and its length are constants */
    if (len == 24)
        portable(msg, 24, digest);
    else if (len == 20)
        portable(msg, 20, digest);
    else
        portable(msg, len, digest);
}

/* ---- SHA-NI ---- */

#if SHA1_HAVE_SHANI_PATH

/* The SHA extensions keep a, b, c, d in one register (a in the top lane)
 * and e, rotated, in the top lane of another; each sha1rnds4 does four
 * rounds with the round function and constant chosen by its immediate.
 * sha1nexte derives the next four rounds' e (the a of four rounds ago,
 * rotated by 30) and adds it to their first schedule word; sha1msg1, a xor
 * and sha1msg2 compute the next four schedule words from the last sixteen. */
#define SCHED(m0, m1, m2, m3) m0 = _mm_sha1msg2_epu32(_mm_xor_si128(_mm_sha1msg1_epu32(m0, m1), m2), m3)
#define NI4(m, f)                                                                                              \
    do {                                                                                                       \
        __m128i ew_ = _mm_sha1nexte_epu32(prev, m);                                                            \
        prev = abcd;                                                                                           \
        abcd = _mm_sha1rnds4_epu32(abcd, ew_, f);                                                              \
    } while (0)

#define SHANI_TARGET __attribute__((target("sha,sse4.1,ssse3")))

/* The block's four groups of words, each with its first word in the top
 * lane; m0..m3 hold words 0-3, 4-7, 8-11, 12-15. */
static inline __attribute__((always_inline)) SHANI_TARGET void shani(__m128i m0, __m128i m1, __m128i m2, __m128i m3,
                                                                     uint8_t digest[20])
{
    const __m128i abcd0 = _mm_set_epi32((int)H0, (int)H1, (int)H2, (int)H3);
    const __m128i e0 = _mm_set_epi32((int)H4, 0, 0, 0);

    __m128i abcd = abcd0, prev = abcd0;
    /* rounds 0-3: e is the initial one, not derived */
    abcd = _mm_sha1rnds4_epu32(abcd, _mm_add_epi32(e0, m0), 0);
    NI4(m1, 0); /* 4-7 */
    NI4(m2, 0);
    NI4(m3, 0);
    SCHED(m0, m1, m2, m3); NI4(m0, 0); /* 16-19 */
    SCHED(m1, m2, m3, m0); NI4(m1, 1); /* 20-23 */
    SCHED(m2, m3, m0, m1); NI4(m2, 1);
    SCHED(m3, m0, m1, m2); NI4(m3, 1);
    SCHED(m0, m1, m2, m3); NI4(m0, 1);
    SCHED(m1, m2, m3, m0); NI4(m1, 1);
    SCHED(m2, m3, m0, m1); NI4(m2, 2); /* 40-43 */
    SCHED(m3, m0, m1, m2); NI4(m3, 2);
    SCHED(m0, m1, m2, m3); NI4(m0, 2);
    SCHED(m1, m2, m3, m0); NI4(m1, 2);
    SCHED(m2, m3, m0, m1); NI4(m2, 2);
    SCHED(m3, m0, m1, m2); NI4(m3, 3); /* 60-63 */
    SCHED(m0, m1, m2, m3); NI4(m0, 3);
    SCHED(m1, m2, m3, m0); NI4(m1, 3);
    SCHED(m2, m3, m0, m1); NI4(m2, 3);
    SCHED(m3, m0, m1, m2); NI4(m3, 3); /* 76-79 */

    /* e after round 79 is the a before round 76, rotated: add H4 to it */
    __m128i e = _mm_sha1nexte_epu32(prev, e0);
    abcd = _mm_add_epi32(abcd, abcd0);
    uint32_t h[4];
    _mm_storeu_si128((__m128i *)h, _mm_shuffle_epi32(abcd, 0x1b));
    store_be32(digest, h[0]);
    store_be32(digest + 4, h[1]);
    store_be32(digest + 8, h[2]);
    store_be32(digest + 12, h[3]);
    store_be32(digest + 16, (uint32_t)_mm_extract_epi32(e, 3));
}

SHANI_TARGET void sha1_small_shani(const uint8_t *msg, size_t len, uint8_t digest[20])
{
    /* reverses the 16 bytes: big-endian words, the first in the top lane */
    const __m128i rev = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    if (len == 20 || len == 24) {
        /* UTS's lengths straight from the message into registers */
        __m128i m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)msg), rev), m1;
        if (len == 24) {
            uint64_t x;
            memcpy(&x, msg + 16, 8);
            m1 = _mm_or_si128(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)x), rev),
                              _mm_set_epi32(0, 0, (int)0x80000000u, 0));
        } else {
            uint32_t x;
            memcpy(&x, msg + 16, 4);
            m1 = _mm_or_si128(_mm_shuffle_epi8(_mm_cvtsi32_si128((int)x), rev),
                              _mm_set_epi32(0, (int)0x80000000u, 0, 0));
        }
        shani(m0, m1, _mm_setzero_si128(), _mm_set_epi32(0, 0, 0, (int)(len * 8)), digest);
        return;
    }
    uint32_t w[16];
    pad_block(msg, len, w);
    shani(_mm_set_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]),
          _mm_set_epi32((int)w[4], (int)w[5], (int)w[6], (int)w[7]),
          _mm_set_epi32((int)w[8], (int)w[9], (int)w[10], (int)w[11]),
          _mm_set_epi32((int)w[12], (int)w[13], (int)w[14], (int)w[15]), digest);
}

int sha1_have_shani(void)
{
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("ssse3");
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}

#else /* no SHA-NI path */

void sha1_small_shani(const uint8_t *msg, size_t len, uint8_t digest[20])
{
    sha1_small_portable(msg, len, digest);
}

int sha1_have_shani(void) { return 0; }

#endif

/* ---- dispatch ---- */

typedef void sha1_fn(const uint8_t *msg, size_t len, uint8_t digest[20]);

static void sha1_first(const uint8_t *msg, size_t len, uint8_t digest[20]);
static sha1_fn *sha1_impl = sha1_first;

/* The first call picks the implementation (every thread picks the same). */
static void sha1_first(const uint8_t *msg, size_t len, uint8_t digest[20])
{
    sha1_use("auto");
    sha1_small(msg, len, digest);
}

void sha1_small(const uint8_t *msg, size_t len, uint8_t digest[20])
{
    __atomic_load_n(&sha1_impl, __ATOMIC_RELAXED)(msg, len, digest);
}

int sha1_use(const char *name)
{
    sha1_fn *f;
    if (strcmp(name, "auto") == 0)
        f = sha1_have_shani() ? sha1_small_shani : sha1_small_portable;
    else if (strcmp(name, "portable") == 0)
        f = sha1_small_portable;
    else if (strcmp(name, "shani") == 0 && sha1_have_shani())
        f = sha1_small_shani;
    else
        return -1;
    __atomic_store_n(&sha1_impl, f, __ATOMIC_RELAXED);
    return 0;
}

const char *sha1_impl_name(void)
{
    sha1_fn *f = __atomic_load_n(&sha1_impl, __ATOMIC_RELAXED);
    if (f == sha1_first) {
        sha1_use("auto");
        f = __atomic_load_n(&sha1_impl, __ATOMIC_RELAXED);
    }
    return f == sha1_small_shani && sha1_have_shani() ? "shani" : "portable";
}

/* ---- self-test ---- */

static int hexeq(const uint8_t d[20], const char *hex)
{
    static const char x[] = "0123456789abcdef";
    for (int i = 0; i < 20; i++)
        if (hex[2 * i] != x[d[i] >> 4] || hex[2 * i + 1] != x[d[i] & 15])
            return 0;
    return 1;
}

static int selftest_one(sha1_fn *f)
{
    /* FIPS 180-4 (example "abc"; the empty message), and prefixes of its
     * 448-bit example message "abcdbcdecdef...nopq" of 20, 24 (what UTS
     * hashes) and 55 bytes (the longest one-block message), whose digests
     * come from coreutils' sha1sum. */
    static const char fips2[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    static const struct {
        const char *msg;
        size_t len;
        const char *hex;
    } v[] = {
        {"abc", 3, "a9993e364706816aba3e25717850c26c9cd0d89d"},
        {"", 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
        {fips2, 20, "3348ef414844cc2bfb2e21b7d697ec4d1b28475e"},
        {fips2, 24, "d8115987b54636a9ad63bb7e9fb4f45d6e1f3fa6"},
        {fips2, 55, "47b172810795699fe739197d1a1f5960700242f1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint8_t out[20];
        f((const uint8_t *)v[i].msg, v[i].len, out);
        if (!hexeq(out, v[i].hex))
            return -1;
    }
    return 0;
}

int sha1_selftest(void)
{
    if (selftest_one(sha1_small_portable) != 0)
        return -1;
    if (sha1_have_shani() && selftest_one(sha1_small_shani) != 0)
        return -1;
    return 0;
}
