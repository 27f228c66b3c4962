/*
 * idle.c — how a thread that polls for work spends the polls that find
 * nothing (util.h, util_idle_*).
 *
 * Three phases, by time since the last poll that found something:
 *  - spin (cpu_relax) for UTIL_IDLE_SPIN_NS: a reply a few microseconds
 *    away is seen at once;
 *  - sched_yield until UTIL_IDLE_YIELD_NS: a thread that shares the core
 *    (the peer rank, a worker) runs, and we come back as soon as it
 *    yields or blocks;
 *  - then the caller chooses: block on something of its own, or nap in
 *    steps doubling from 1 us up to UTIL_IDLE_NAP_MAX_NS between polls.
 * Why nap at all: a thread that only yields looks like a CPU hog to the
 * kernel's scheduler and is run last when cores are oversubscribed (more
 * ranks, tests or jobs than cores), so the very thread it waits for may
 * wait behind it; a short sleep gives the core away and, on wake-up, is
 * run promptly. Naps start only after a quiet spell of UTIL_IDLE_YIELD_NS,
 * so a steady exchange of messages never meets one.
 */
#include <sched.h>
#include <time.h>

#include "atomic.h"
#include "util.h"

void util_idle_reset(struct util_idle *s)
{
    s->start = 0;
    s->nap = 0;
    s->n = 0;
    s->phase = UTIL_IDLE_SPIN;
}

enum util_idle_phase util_idle_step(struct util_idle *s)
{
    if (s->nap)
        return UTIL_IDLE_LONG;
    /* the clock is read every 16th empty poll: it costs more than a poll,
     * and a wait for a reply on its way (a ping-pong's) ends within the
     * first 15, which then read no clock at all */
    if ((++s->n & 15) == 0) {
        uint64_t now = util_now_ns();
        if (!s->start)
            s->start = now;
        uint64_t dt = now - s->start;
        s->phase = dt >= UTIL_IDLE_YIELD_NS  ? UTIL_IDLE_LONG
                   : dt >= UTIL_IDLE_SPIN_NS ? UTIL_IDLE_YIELD
                                             : UTIL_IDLE_SPIN;
    }
    if (s->phase == UTIL_IDLE_YIELD)
        sched_yield();
    else if (s->phase == UTIL_IDLE_SPIN)
        util_cpu_relax();
    return (enum util_idle_phase)s->phase;
}

/* Threads of this process in util_idle_nap_shared's sleep now. */
static atomic_uint util_napping;

/* The next nap of a quiet spell: doubling from 1 us, up to the maximum. */
static uint64_t nap_next(struct util_idle *s)
{
    s->nap = s->nap ? s->nap * 2 : 1000;
    if (s->nap > UTIL_IDLE_NAP_MAX_NS)
        s->nap = UTIL_IDLE_NAP_MAX_NS;
    return s->nap;
}

uint64_t util_idle_nap_ns(uint64_t nap, unsigned napping)
{
    if (napping <= UTIL_IDLE_SHARED_NAPPERS)
        return nap;
    uint64_t k = napping / UTIL_IDLE_SHARED_NAPPERS;
    if (nap > UTIL_IDLE_SHARED_NAP_MAX_NS / k) /* saturate, never wrap */
        return UTIL_IDLE_SHARED_NAP_MAX_NS;
    return nap * k;
}

/* Every thread that naps here polls the same network when it wakes, with
 * no server thread to do it for them, and one poll serves them all (it
 * completes every request whose message it takes, and wakes nobody: each
 * sees its own at its next poll). So a thousand pthreads waiting in
 * receives without a server thread would, at 64 us each, ask the kernel
 * for 16 million wake-ups a second and keep the cores busy switching
 * (docs/perf/sched.md has what that cost). Past a few, naps lengthen with
 * the number napping,
 * so that together they wake about as often as a few do. The cost is
 * that a waiter whose request another thread's poll completed notices it
 * only when its own nap ends. Only for such pollers: a thread whose
 * request a server thread completes, or a worker whose ULTs others make
 * ready, takes util_idle_nap, and is not counted. */
void util_idle_nap_shared(struct util_idle *s)
{
    uint64_t nap = nap_next(s);
    /* relaxed: a count that only sizes naps */
    unsigned n = atomic_fetch_add_explicit(&util_napping, 1, memory_order_relaxed) + 1;
    util_sleep_ns(util_idle_nap_ns(nap, n));
    atomic_fetch_sub_explicit(&util_napping, 1, memory_order_relaxed);
}

void util_idle_nap(struct util_idle *s) { util_sleep_ns(nap_next(s)); }

void util_sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
}
