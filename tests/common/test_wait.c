/* test_wait.c — see test_wait.h. */
#include "test_wait.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double parse_scale(void)
{
    const char *s = getenv("MPIV_TEST_TIMEOUT_SCALE");
    if (!s || !*s)
        return 1.0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0.01 || v > 1000) {
        fprintf(stderr, "MPIV_TEST_TIMEOUT_SCALE=%s: expected a number from 0.01 to 1000\n", s);
        exit(2);
    }
    return v;
}

static pthread_once_t scale_once = PTHREAD_ONCE_INIT;
static double scale;

static void scale_load(void) { scale = parse_scale(); }

double test_timeout_scale(void)
{
    pthread_once(&scale_once, scale_load);
    return scale;
}

uint64_t test_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void test_stall_init(struct test_stall *st, double secs, uint64_t value)
{
    st->value = value;
    st->since_ns = st->seen_ns = test_now_ns();
    st->limit_ns = (uint64_t)(secs * test_timeout_scale() * 1e9);
}

bool test_stall_stuck_at(struct test_stall *st, uint64_t value, uint64_t now_ns)
{
    bool absent = now_ns - st->seen_ns >= st->limit_ns / 2;
    st->seen_ns = now_ns;
    if (value != st->value || absent) {
        st->value = value;
        st->since_ns = now_ns;
        return false;
    }
    return now_ns - st->since_ns > st->limit_ns;
}

bool test_stall_stuck(struct test_stall *st, uint64_t value)
{
    return test_stall_stuck_at(st, value, test_now_ns());
}

double test_stall_idle_s(const struct test_stall *st)
{
    return (double)(test_now_ns() - st->since_ns) / 1e9;
}

/* The first failure a helper thread recorded. `failed` is set (release)
 * after the message is written, under the lock, so a reader that sees it
 * set and then takes the lock finds the whole message. */
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static char fail_msg[512];
static atomic_bool failed;

void test_thread_fail(const char *fmt, ...)
{
    pthread_mutex_lock(&fail_lock);
    if (!atomic_load_explicit(&failed, memory_order_relaxed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(fail_msg, sizeof fail_msg, fmt, ap);
        va_end(ap);
        atomic_store_explicit(&failed, true, memory_order_release);
    }
    pthread_mutex_unlock(&fail_lock);
}

bool test_thread_failed(void) { return atomic_load_explicit(&failed, memory_order_acquire); }

bool test_thread_take_failure(char *buf, size_t len)
{
    if (!test_thread_failed())
        return false;
    pthread_mutex_lock(&fail_lock);
    bool had = atomic_load_explicit(&failed, memory_order_relaxed);
    if (had) {
        snprintf(buf, len, "%s", fail_msg);
        atomic_store_explicit(&failed, false, memory_order_relaxed);
    }
    pthread_mutex_unlock(&fail_lock);
    return had;
}
