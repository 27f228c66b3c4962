/*
 * mpi_test.h — what the MPI face's Check suites share: MPI_Init_thread and
 * MPI_Finalize as the suite's .init and .fini (check_main.h), a call
 * checker, and the "fail later, agree" pattern of collective cases (a
 * rank that aborts a case at once would leave the others waiting in its
 * next collective). These are MPI programs: they include the face's mpi.h
 * and nothing of MPIv's.
 */
#ifndef MPIV_TESTS_MPI_TEST_H
#define MPIV_TESTS_MPI_TEST_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>

#include <mpi.h>

static int me, np;

/* MPI_ERRORS_RETURN on the world, so a failed call is a failed check. */
static inline int mt_init(int *argc, char ***argv)
{
    int provided = -1;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS ||
        provided != MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "MPI_Init_thread failed or gave level %d\n", provided);
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return 0;
}

static inline bool mt_quiet(void) { return me != 0; }

/* With failures: say which rank and exit without finalizing (mpiv_run ends
 * the job); else MPI_Finalize's verdict. */
static inline int mt_fini(int failed)
{
    if (failed) {
        fprintf(stderr, "rank %d: %d test(s) failed\n", me, failed);
        return 1;
    }
    return MPI_Finalize() == MPI_SUCCESS ? 0 : 1;
}

#define MOK(call)                                                                            \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != MPI_SUCCESS) {                                                            \
            char s_[MPI_MAX_ERROR_STRING];                                                   \
            int n_;                                                                          \
            MPI_Error_string(rc_, s_, &n_);                                                  \
            ck_abort_msg("line %d: %s -> %d (%s)", __LINE__, #call, rc_, s_);                \
        }                                                                                    \
    } while (0)

/* A wrong result is recorded; agree() fails the case on every rank. */
static char mt_msg[512];
static int mt_fails;
#define FAIL_LATER(...)                                                                      \
    do {                                                                                     \
        if (!mt_fails++)                                                                     \
            snprintf(mt_msg, sizeof mt_msg, __VA_ARGS__);                                    \
    } while (0)
#define EXPECT(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond))                                                                         \
            FAIL_LATER(__VA_ARGS__);                                                         \
    } while (0)

static inline void agree(void)
{
    int any = 0, mine = mt_fails;
    if (mine)
        fprintf(stderr, "rank %d: %s\n", me, mt_msg);
    MOK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    mt_fails = 0;
    ck_assert_msg(any == 0, "wrong results (%s%s)", mine ? "here: " : "on another rank",
                  mine ? mt_msg : "");
}

#endif
