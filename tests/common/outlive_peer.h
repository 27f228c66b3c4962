/*
 * outlive_peer.h — start-up for the test programs in which one rank dies
 * and the other must say what its operations returned. mpiv_run answers a
 * rank's death with SIGTERM to the others, then SIGKILL after a grace: a
 * rank that blocks SIGTERM has that grace to print its line (a hang is
 * killed at its end, and fails the test for want of the line).
 */
#ifndef TEST_OUTLIVE_PEER_H
#define TEST_OUTLIVE_PEER_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>

#include "mpiv.h"

/* Blocks SIGTERM (before mpiv_init: every thread it starts inherits the
 * mask) and joins a job of two ranks; false if any of it failed. */
static inline bool outlive_peer_init(void)
{
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    return pthread_sigmask(SIG_BLOCK, &term, NULL) == 0 && mpiv_init(NULL, NULL) == MPIV_SUCCESS &&
           mpiv_size() == 2;
}

#endif
