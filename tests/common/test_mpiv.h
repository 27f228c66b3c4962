/*
 * test_mpiv.h — the start and end every multi-rank Check suite of
 * tests/proto shares (its .init and .fini, check_main.h). Inline: the
 * tests' common objects are linked into tests that have no libmpiv.
 */
#ifndef MPIV_TESTS_TEST_MPIV_H
#define MPIV_TESTS_TEST_MPIV_H

#include <stdio.h>

#include "mpiv.h"

/* A Check assertion that an MPIv call succeeded, naming the call, its
 * error and the detail (for files that include check.h). */
#define OK(call)                                                                             \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        ck_assert_msg(rc_ == MPIV_SUCCESS, "%s -> %s (%s)", #call, mpiv_strerror(rc_),       \
                      mpiv_error_detail());                                                  \
    } while (0)

/* mpiv_init; 0, or 1 after saying why on stderr (the exit status). */
static inline int test_mpiv_init(int *argc, char ***argv)
{
    int rc = mpiv_init(argc, argv);
    if (rc) {
        fprintf(stderr, "mpiv_init: %s: %s\n", mpiv_strerror(rc), mpiv_error_detail());
        return 1;
    }
    return 0;
}

/* After the suite: with failures, names the rank and returns 1 without
 * finalizing (mpiv_run ends the job; the others may wait in a barrier of
 * a case this rank left); else mpiv_finalize's verdict as an exit status. */
static inline int test_mpiv_fini(int failed)
{
    if (failed) {
        fprintf(stderr, "rank %d: %d test(s) failed\n", mpiv_rank(), failed);
        return 1;
    }
    return mpiv_finalize() == MPIV_SUCCESS ? 0 : 1;
}

#endif
