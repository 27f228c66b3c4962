/* Helpers shared by the scheduler's tests: start and stop the scheduler
 * with a given shape, as mpiv_init would (util_config_load, sched_init). */
#ifndef MPIV_TEST_SCHED_H
#define MPIV_TEST_SCHED_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/check_main.h"
#include "sched/sched.h"

static inline void sched_test_start(int workers, long max_ults, const char *stack)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%d", workers);
    setenv("MPIV_WORKERS", buf, 1);
    snprintf(buf, sizeof buf, "%ld", max_ults);
    setenv("MPIV_MAX_ULTS", buf, 1);
    setenv("MPIV_STACK_SIZE", stack ? stack : "64K", 1);
    struct util_config cfg;
    ck_assert_int_eq(util_config_load(&cfg), MPIV_SUCCESS);
    ck_assert_int_eq(sched_init(&cfg), MPIV_SUCCESS);
    ck_assert_int_eq(mpiv_num_workers(), workers);
}

static inline void sched_test_stop(void) { ck_assert_int_eq(sched_finalize(), MPIV_SUCCESS); }

static inline void sched_test_sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

#endif
