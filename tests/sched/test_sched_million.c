/* A million ULTs blocked at once on one worker, all signalled from a plain
 * pthread that is not a worker, then all joined. Under the sanitizers the
 * count is smaller (see NULTS); the code path is the same. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>

#include "sched_test.h"

#if defined(MPIV_TSAN)
/* each blocked ULT's stack carries a TSan fiber, about a megabyte zeroed
 * when made: fibers, not the code under test, would fill the run */
#define NULTS (1 << 9)
#elif defined(__SANITIZE_ADDRESS__)
/* ASan's shadow and redzones make a million take ~7 GiB and a minute on a
 * 2-core CI box; a quarter million keeps the same paths under 30 s. The
 * Release build runs the full million. */
#define NULTS (1 << 18)
#else
#define NULTS (1 << 20)
#endif

static sched_sync *gates;
static atomic_long blocked_now;

static void *block(void *arg)
{
    /* relaxed: a progress count, read by main only to know when to go on */
    atomic_fetch_add_explicit(&blocked_now, 1, memory_order_relaxed);
    sched_wait(&gates[(intptr_t)arg]);
    return (char *)arg + 1;
}

static void *signal_all(void *arg)
{
    (void)arg;
    for (long i = 0; i < NULTS; i++)
        sched_signal(&gates[i]);
    return NULL;
}

START_TEST(million_blocked)
{
    /* 16 KiB stacks: with ASan, neighbouring stacks then share shadow pages */
    sched_test_start(1, NULTS, "16K");
    gates = calloc(NULTS, sizeof *gates);
    mpiv_ult_t *u = malloc(NULTS * sizeof *u);
    ck_assert(gates && u);
    uint64_t t0 = util_now_ns();
    for (long i = 0; i < NULTS; i++)
        if (mpiv_ult_spawn(block, (void *)(intptr_t)i, 0, &u[i]))
            ck_abort_msg("spawn %ld: %s", i, mpiv_error_detail());
    mpiv_ult_t extra;
    ck_assert_int_eq(mpiv_ult_spawn(block, NULL, 0, &extra), MPIV_ERR_NO_RESOURCES);
    while (atomic_load_explicit(&blocked_now, memory_order_relaxed) < NULTS)
        sched_test_sleep_us(1000);
    uint64_t t1 = util_now_ns();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr, "%d ULTs blocked in %.3f s, peak RSS %.2f GiB\n", NULTS, (t1 - t0) / 1e9,
            ru.ru_maxrss / 1048576.0);

    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, signal_all, NULL), 0);
    for (long i = 0; i < NULTS; i++) {
        void *r;
        if (mpiv_ult_join(u[i], &r) || r != (void *)(intptr_t)(i + 1))
            ck_abort_msg("join %ld", i);
    }
    pthread_join(t, NULL);
    fprintf(stderr, "signalled and joined in %.3f s\n", (util_now_ns() - t1) / 1e9);
    free(u);
    free(gates);
    sched_test_stop();
}
END_TEST

static Suite *million_suite(void)
{
    Suite *s = suite_create("sched_million");
    TCase *tc = tcase_create("million");
    tcase_set_timeout(tc, 280); /* ASan on a loaded 2-core box */
    tcase_add_test(tc, million_blocked);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = million_suite);
