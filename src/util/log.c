/*
 * log.c — leveled logging to stderr (MPIV_LOG), one line per call so lines
 * of different threads and ranks do not interleave mid-line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

int util_log_level = UTIL_LOG_WARN;
static int log_rank = -1;

static const char *const level_names[] = {"", "error", "warn", "info", "debug"};

void util_log_set_rank(int rank) { log_rank = rank; }

static void log_vwrite(const char *level, const char *file, int line,
                       const char *fmt, va_list ap)
{
    char msg[1024];
    int n = 0;
    if (log_rank >= 0)
        n = snprintf(msg, sizeof msg, "mpiv[%d]: %s: ", log_rank, level);
    else
        n = snprintf(msg, sizeof msg, "mpiv: %s: ", level);
    if (n < 0 || (size_t)n >= sizeof msg)
        n = 0;
    int m = vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof msg - 2)
        len = sizeof msg - 2;
    if (file && util_log_level >= UTIL_LOG_DEBUG) {
        int k = snprintf(msg + len, sizeof msg - len, " (%s:%d)", file, line);
        if (k > 0)
            len += (size_t)k;
        if (len > sizeof msg - 2)
            len = sizeof msg - 2;
    }
    msg[len++] = '\n';
    /* one write(2) per line: atomic for pipes up to PIPE_BUF */
    ssize_t w = write(STDERR_FILENO, msg, len);
    (void)w;
}

void util_log_write(int level, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level_names[level], file, line, fmt, ap);
    va_end(ap);
}

_Noreturn void util_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite("fatal", NULL, 0, fmt, ap);
    va_end(ap);
    abort();
}

uint64_t util_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double mpiv_wtime(void) { return (double)util_now_ns() * 1e-9; }

uint64_t util_random_u64(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        v = util_now_ns() ^ ((uint64_t)getpid() << 32);
    return v;
}
