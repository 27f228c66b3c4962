/*
 * srv_ratelimit.h — counting what the backends drop (malformed completions,
 * forged cells) and logging it at most once a second, so that a flood of
 * bad input cannot flood stderr as well. Used by the polling thread only
 * (the core's progress lock), so nothing here is atomic.
 */
#ifndef MPIV_SERVER_SRV_RATELIMIT_H
#define MPIV_SERVER_SRV_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "util/util.h"

struct srv_ratelimit {
    uint64_t count;   /* everything dropped so far                  */
    uint64_t logged;  /* count when the last line was written        */
    uint64_t last_ns; /* when it was written (0: never)              */
};

/* Counts one drop; true if the caller should log it now (the first drop,
 * then at most one a second). *quiet is how many went unlogged since the
 * previous line. */
static inline bool srv_ratelimit_hit(struct srv_ratelimit *rl, uint64_t *quiet)
{
    rl->count++;
    uint64_t now = util_now_ns();
    if (rl->last_ns && now - rl->last_ns < 1000000000ull)
        return false;
    *quiet = rl->count - rl->logged - 1;
    rl->logged = rl->count;
    rl->last_ns = now;
    return true;
}

#endif
