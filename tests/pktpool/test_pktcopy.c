/* Packet-shaped heap blocks (src/pktpool/pktcopy.c): sizes, alignment,
 * reuse, the held count, release, and (under AddressSanitizer) which bytes
 * of a block may be touched. The concurrent cases: blocks taken on some
 * threads and given back on others, as the server takes copies and
 * receiving threads free them; every block is stamped by its holder and
 * must come back intact, and two holders of one cell (C1) would overwrite
 * each other's stamps. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "pktpool/pktcopy.h"
#include "common/smaps.h"
#include "util/util.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

/* Every case starts from released classes, so counts are its own. */
static void fresh(void) { ck_assert_uint_eq(pkt_copy_release(), 0); }

static int aligned64(const void *p) { return ((uintptr_t)p & 63) == 0; }

START_TEST(sizes_and_alignment)
{
    fresh();
    static const size_t lens[] = {0, 1, 40, 63, 64, 65, 128, 447, PKT_COPY_SMALL_MAX,
                                  PKT_COPY_SMALL_MAX + 1, 4096, 70000};
    enum { N = sizeof lens / sizeof lens[0] };
    pkt_t *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = pkt_copy_alloc(lens[i]);
        ck_assert_ptr_nonnull(p[i]);
        ck_assert_msg(aligned64(p[i]), "block of %zu bytes at %p", lens[i], (void *)p[i]);
        /* the whole header and every data byte are the caller's */
        memset(p[i], 0xa5, sizeof(pkt_t) + lens[i]);
    }
    ck_assert_uint_eq(pkt_copy_held(), N);
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) { /* no two blocks overlap */
            uintptr_t a = (uintptr_t)p[i], b = (uintptr_t)p[j];
            ck_assert_msg(a + sizeof(pkt_t) + lens[i] <= b || b + sizeof(pkt_t) + lens[j] <= a,
                          "blocks %d and %d overlap", i, j);
        }
    for (int i = 0; i < N; i++)
        pkt_copy_free(p[i], lens[i]);
    ck_assert_uint_eq(pkt_copy_held(), 0);
    pkt_copy_free(NULL, 8); /* nothing */
    ck_assert_uint_eq(pkt_copy_held(), 0);
}
END_TEST

/* The block given back last is the next one of its class (still in the
 * cache); another class does not take it. */
START_TEST(lifo_reuse_per_class)
{
    fresh();
    pkt_t *a = pkt_copy_alloc(40);
    pkt_t *b = pkt_copy_alloc(40);
    pkt_copy_free(a, 40);
    pkt_copy_free(b, 40);
    pkt_t *big = pkt_copy_alloc(200); /* another class */
    ck_assert_ptr_ne(big, b);
    ck_assert_ptr_ne(big, a);
    ck_assert_ptr_eq(pkt_copy_alloc(8), b);
    ck_assert_ptr_eq(pkt_copy_alloc(64), a);
    pkt_copy_free(a, 64);
    pkt_copy_free(b, 8);
    pkt_copy_free(big, 200);
    ck_assert_uint_eq(pkt_copy_held(), 0);
}
END_TEST

/* More blocks than one chunk holds: new chunks, all distinct; the
 * class's first chunk in 4 KiB pages, the later ones asking for 2 MiB
 * pages (chunks are 2 MiB-aligned mappings of their own). */
START_TEST(many_chunks)
{
    fresh();
    enum { N = 40000 }; /* 128-byte cells: three chunks */
    pkt_t **p = malloc(N * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < N; i++) {
        p[i] = pkt_copy_alloc(8);
        ck_assert_ptr_nonnull(p[i]);
        p[i]->idx = (uint32_t)i;
        memcpy(p[i]->data, &i, sizeof i);
    }
    for (int i = 0; i < N; i++) {
        int v;
        memcpy(&v, p[i]->data, sizeof v);
        ck_assert_int_eq(v, i);
        ck_assert_uint_eq(p[i]->idx, (uint32_t)i);
    }
    ck_assert_uint_eq(pkt_copy_held(), N);
    char flags[512];
    void *first = (void *)((uintptr_t)p[0] & ~(uintptr_t)(UTIL_HUGE_PAGE - 1));
    void *last = (void *)((uintptr_t)p[N - 1] & ~(uintptr_t)(UTIL_HUGE_PAGE - 1));
    ck_assert_ptr_ne(first, last);
    ck_assert_msg(vmflags_at(first, flags, sizeof flags) && !strstr(flags, " hg"),
                  "the first chunk asks for huge pages: %s", flags);
    ck_assert_msg(vmflags_at(last, flags, sizeof flags) && strstr(flags, " hg"),
                  "a later chunk does not ask for huge pages: %s", flags);
    for (int i = 0; i < N; i++)
        pkt_copy_free(p[i], 8);
    free(p);
    ck_assert_uint_eq(pkt_copy_release(), 0);
}
END_TEST

/* Release frees nothing while a block is held (C4), and the classes work
 * again after a release. */
START_TEST(release_only_when_none_held)
{
    fresh();
    pkt_t *a = pkt_copy_alloc(100);
    pkt_t *b = pkt_copy_alloc(10);
    pkt_copy_free(b, 10);
    ck_assert_uint_eq(pkt_copy_release(), 1);
    /* a is still usable: its chunk was kept */
    memset(a->data, 1, 100);
    pkt_t *c = pkt_copy_alloc(10);
    ck_assert_ptr_eq(c, b); /* the free list was kept too */
    pkt_copy_free(c, 10);
    pkt_copy_free(a, 100);
    ck_assert_uint_eq(pkt_copy_release(), 0);
    pkt_t *d = pkt_copy_alloc(10);
    ck_assert_ptr_nonnull(d);
    memset(d, 0, sizeof *d + 10);
    pkt_copy_free(d, 10);
    ck_assert_uint_eq(pkt_copy_release(), 0);
}
END_TEST

#if defined(__SANITIZE_ADDRESS__)
/* A held block: its header and len bytes are addressable, the byte after
 * is not; a block given back is poisoned except its link word. */
START_TEST(asan_bounds)
{
    fresh();
    pkt_t *p = pkt_copy_alloc(40);
    unsigned char *b = (unsigned char *)p;
    ck_assert_ptr_null(__asan_region_is_poisoned(b, sizeof *p + 40));
    ck_assert(__asan_address_is_poisoned(b + sizeof *p + 40));
    pkt_copy_free(p, 40);
    ck_assert(!__asan_address_is_poisoned(b));
    ck_assert(__asan_address_is_poisoned(b + sizeof p->next));
    ck_assert(__asan_address_is_poisoned(p->data));
    pkt_t *q = pkt_copy_alloc(8); /* the same cell, now with 8 bytes */
    ck_assert_ptr_eq(q, p);
    ck_assert_ptr_null(__asan_region_is_poisoned(b, sizeof *p + 8));
    ck_assert(__asan_address_is_poisoned(b + sizeof *p + 8));
    pkt_copy_free(q, 8);
}
END_TEST

/* A block given back twice aborts instead of linking its cell to itself
 * (which would hand the cell to every later taker). */
START_TEST(asan_double_free_aborts)
{
    pkt_t *p = pkt_copy_alloc(40);
    pkt_copy_free(p, 40);
    pkt_copy_free(p, 40);
}
END_TEST
#endif

/* --- concurrent -------------------------------------------------------------- */

#if defined(MPIV_TSAN)
#define ROUNDS 20000
#elif defined(__SANITIZE_ADDRESS__)
#define ROUNDS 100000
#else
#define ROUNDS 400000
#endif
#define NTHREADS 4
#define HOLD 8
#define BOX 64

/* A ring of blocks handed from one thread to the next. */
struct box {
    pthread_mutex_t mu;
    int n, head;
    pkt_t *p[BOX];
    size_t len[BOX];
};

static struct box boxes[NTHREADS];
static atomic_int bad;

static uint32_t xs(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* A stamp that names its holder and the block: checked before the block
 * moves on or is given back. */
static void stamp(pkt_t *p, size_t len, uint32_t who)
{
    p->idx = who;
    p->len = (uint32_t)len;
    memset(p->data, (int)(who & 0xff), len);
}

static int stamped(const pkt_t *p, size_t len, uint32_t who)
{
    if (p->idx != who || p->len != len)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (p->data[i] != (unsigned char)(who & 0xff))
            return 0;
    return 1;
}

static int box_put(struct box *b, pkt_t *p, size_t len)
{
    pthread_mutex_lock(&b->mu);
    int ok = b->n < BOX;
    if (ok) {
        int i = (b->head + b->n++) % BOX;
        b->p[i] = p;
        b->len[i] = len;
    }
    pthread_mutex_unlock(&b->mu);
    return ok;
}

static pkt_t *box_take(struct box *b, size_t *len)
{
    pthread_mutex_lock(&b->mu);
    pkt_t *p = NULL;
    if (b->n) {
        p = b->p[b->head];
        *len = b->len[b->head];
        b->head = (b->head + 1) % BOX;
        b->n--;
    }
    pthread_mutex_unlock(&b->mu);
    return p;
}

static void *stress_thread(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint32_t seed = 0x9e3779b9u * (uint32_t)(id + 1);
    pkt_t *held[HOLD];
    size_t hlen[HOLD];
    int nheld = 0;
    for (long r = 0; r < ROUNDS; r++) {
        uint32_t x = xs(&seed);
        if (nheld < HOLD && (x & 1)) {
            /* sizes over every class and a few large ones */
            size_t len = (x >> 8) % 16 == 0 ? 1000 + (x >> 16) % 3000 : (x >> 8) % 449;
            pkt_t *p = pkt_copy_alloc(len);
            if (!p) {
                atomic_store(&bad, 1);
                break;
            }
            stamp(p, len, (uint32_t)id << 24 | (uint32_t)(r & 0xffffff));
            held[nheld] = p;
            hlen[nheld++] = len;
        } else if (nheld) {
            pkt_t *p = held[--nheld];
            size_t len = hlen[nheld];
            if (!stamped(p, len, p->idx) || (p->idx >> 24) != (uint32_t)id)
                atomic_store(&bad, 1);
            /* half go to the next thread, which frees them */
            if (!(x & 2) || !box_put(&boxes[(id + 1) % NTHREADS], p, len))
                pkt_copy_free(p, len);
        }
        size_t len;
        pkt_t *q = box_take(&boxes[id], &len);
        if (q) {
            if (!stamped(q, len, q->idx) || (q->idx >> 24) != (uint32_t)((id + NTHREADS - 1) % NTHREADS))
                atomic_store(&bad, 1);
            pkt_copy_free(q, len);
        }
    }
    while (nheld) {
        nheld--;
        pkt_copy_free(held[nheld], hlen[nheld]);
    }
    return NULL;
}

START_TEST(threads_take_and_give_back)
{
    fresh();
    atomic_store(&bad, 0);
    for (int i = 0; i < NTHREADS; i++) {
        pthread_mutex_init(&boxes[i].mu, NULL);
        boxes[i].n = boxes[i].head = 0;
    }
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, stress_thread, (void *)(intptr_t)i), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    ck_assert_msg(!atomic_load(&bad), "a block changed while its holder held it, or was lost");
    for (int i = 0; i < NTHREADS; i++) {
        size_t len;
        pkt_t *p;
        while ((p = box_take(&boxes[i], &len)))
            pkt_copy_free(p, len);
        pthread_mutex_destroy(&boxes[i].mu);
    }
    ck_assert_uint_eq(pkt_copy_held(), 0);
    ck_assert_uint_eq(pkt_copy_release(), 0);
}
END_TEST

static Suite *pktcopy_suite(void)
{
    Suite *s = suite_create("pktcopy");
    TCase *tc = tcase_create("blocks");
    tcase_add_test(tc, sizes_and_alignment);
    tcase_add_test(tc, lifo_reuse_per_class);
    tcase_add_test(tc, many_chunks);
    tcase_add_test(tc, release_only_when_none_held);
#if defined(__SANITIZE_ADDRESS__)
    tcase_add_test(tc, asan_bounds);
    tcase_add_test_raise_signal(tc, asan_double_free_aborts, SIGABRT);
#endif
    suite_add_tcase(s, tc);
    TCase *tcc = tcase_create("concurrent");
    tcase_set_timeout(tcc, 120);
    tcase_add_test(tcc, threads_take_and_give_back);
    suite_add_tcase(s, tcc);
    return s;
}

CHECK_MAIN(.suite = pktcopy_suite);
