/*
 * The MPI face's environment, errors and threads, under mpiv_run at 2
 * and 4 ranks:
 *  - the environment calls (versions, names, time, memory, thread level,
 *    attributes);
 *  - every error class the face reports, under MPI_ERRORS_RETURN, with
 *    MPI_Error_string and MPI_Error_class, and unsupported uses refused
 *    with MPI_ERR_UNSUPPORTED_OPERATION; a user error handler;
 *  - plain pthreads calling MPI at once under MPI_THREAD_MULTIPLE, and
 *    MPIv's ULTs doing the same (through mpiv.h: a program may use both).
 * MPI_ERRORS_ARE_FATAL, the default, is checked by fatal_probe.c.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "mpi_test.h"
#include "mpiv.h"

START_TEST(environment)
{
    int v, sv, len, flag;
    MOK(MPI_Get_version(&v, &sv));
    ck_assert_int_eq(v * 10 + sv, 31);
    char name[MPI_MAX_PROCESSOR_NAME], lib[MPI_MAX_LIBRARY_VERSION_STRING];
    MOK(MPI_Get_processor_name(name, &len));
    ck_assert_int_eq((int)strlen(name), len);
    ck_assert_int_gt(len, 0);
    MOK(MPI_Get_library_version(lib, &len));
    ck_assert_msg(strstr(lib, "MPIv") != NULL, "library version '%s'", lib);
    MOK(MPI_Initialized(&flag));
    ck_assert_int_eq(flag, 1);
    MOK(MPI_Finalized(&flag));
    ck_assert_int_eq(flag, 0);
    MOK(MPI_Query_thread(&v));
    ck_assert_int_eq(v, MPI_THREAD_MULTIPLE);
    MOK(MPI_Is_thread_main(&flag));
    ck_assert_int_eq(flag, 1);
    double t0 = MPI_Wtime(), tick = MPI_Wtick();
    ck_assert(tick > 0 && tick < 1);
    ck_assert(MPI_Wtime() >= t0);
    int *p = NULL;
    MOK(MPI_Alloc_mem(1000 * sizeof(int), MPI_INFO_NULL, &p));
    ck_assert_ptr_nonnull(p);
    p[999] = 1;
    MOK(MPI_Free_mem(p));
    int *ub;
    MOK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    ck_assert(flag && *ub >= 32767);
    MPI_Errhandler eh;
    MOK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    ck_assert_ptr_eq(eh, MPI_ERRORS_RETURN);
    MOK(MPI_Errhandler_free(&eh));
    int sr, ss;
    MOK(MPI_Comm_rank(MPI_COMM_SELF, &sr));
    MOK(MPI_Comm_size(MPI_COMM_SELF, &ss));
    ck_assert(sr == 0 && ss == 1);
    int one = 1, sum = 0;
    MOK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF));
    ck_assert_int_eq(sum, 1);
}
END_TEST

/* The call's class, and a message naming the problem. */
static void expect_class(int rc, int cls, const char *what)
{
    int got = -1;
    ck_assert_msg(rc != MPI_SUCCESS, "%s succeeded", what);
    MOK(MPI_Error_class(rc, &got));
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MOK(MPI_Error_string(rc, s, &len));
    ck_assert_msg(got == cls, "%s: class %d (%s), not %d", what, got, s, cls);
    ck_assert_msg(len > 0 && (int)strlen(s) == len, "%s: error string '%s'", what, s);
}

START_TEST(error_classes)
{
    int v = 0, buf[4] = {0};
    MPI_Request r;
    expect_class(MPI_Send(&v, 1, MPI_INT, np + 5, 0, MPI_COMM_WORLD), MPI_ERR_RANK, "bad rank");
    expect_class(MPI_Send(&v, 1, MPI_INT, 0, -5, MPI_COMM_WORLD), MPI_ERR_TAG, "bad tag");
    expect_class(MPI_Send(&v, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT, "bad count");
    expect_class(MPI_Send(&v, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE,
                 "null type");
    expect_class(MPI_Send(&v, 1, MPI_INT, 0, 0, MPI_COMM_NULL), MPI_ERR_COMM, "null comm");
    expect_class(MPI_Irecv(&v, 1, MPI_INT, np + 1, 0, MPI_COMM_WORLD, &r), MPI_ERR_RANK,
                 "irecv bad rank");
    expect_class(MPI_Bcast(buf, 1, MPI_INT, np, MPI_COMM_WORLD), MPI_ERR_ROOT, "bad root");
    double d = 1, e;
    expect_class(MPI_Allreduce(&d, &e, 1, MPI_DOUBLE, MPI_BXOR, MPI_COMM_WORLD), MPI_ERR_OP,
                 "BXOR on double");
    expect_class(MPI_Allreduce(&v, &e, 1, MPI_INT, MPI_MINLOC, MPI_COMM_WORLD), MPI_ERR_OP,
                 "MINLOC on int");
    expect_class(MPI_Allreduce(&v, &e, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD), MPI_ERR_OP,
                 "MPI_OP_NULL");
    MPI_Datatype t;
    expect_class(MPI_Type_vector(2, 1, -3, MPI_INT, &t), MPI_ERR_UNSUPPORTED_OPERATION,
                 "negative stride");
    MOK(MPI_Type_contiguous(2, MPI_INT, &t));
    expect_class(MPI_Send(buf, 1, t, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "uncommitted type");
    MOK(MPI_Type_free(&t));
    expect_class(MPI_Type_free(&(MPI_Datatype){MPI_INT}), MPI_ERR_TYPE, "free MPI_INT");
    expect_class(MPI_Comm_free(&(MPI_Comm){MPI_COMM_WORLD}), MPI_ERR_COMM, "free the world");
    expect_class(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRHANDLER_NULL), MPI_ERR_ARG,
                 "null error handler");
    /* a user operation on a non-contiguous type is not supported */
    MPI_Datatype vec;
    MPI_Op op;
    MOK(MPI_Type_vector(2, 1, 2, MPI_INT, &vec));
    MOK(MPI_Type_commit(&vec));
    MOK(MPI_Op_create((MPI_User_function *)(void (*)(void))abort, 1, &op));
    expect_class(MPI_Allreduce(buf, buf + 1, 1, vec, op, MPI_COMM_WORLD),
                 MPI_ERR_UNSUPPORTED_OPERATION, "user op on a vector");
    expect_class(MPI_Gatherv(buf, 1, vec, buf, (int[4]){1, 1, 1, 1}, (int[4]){0, 3, 6, 9}, vec,
                             0, MPI_COMM_WORLD),
                 MPI_ERR_UNSUPPORTED_OPERATION,
                 "gatherv of a vector");
    MOK(MPI_Op_free(&op));
    MOK(MPI_Type_free(&vec));
    expect_class(MPI_Error_class(MPI_ERR_LASTCODE + 3, &v), MPI_ERR_ARG, "unknown class");
    /* the error strings of the classes are distinct */
    char a[MPI_MAX_ERROR_STRING], b[MPI_MAX_ERROR_STRING];
    int la, lb;
    MOK(MPI_Error_string(MPI_ERR_TRUNCATE, a, &la));
    MOK(MPI_Error_string(MPI_ERR_RANK, b, &lb));
    ck_assert_str_ne(a, b);
    MOK(MPI_Barrier(MPI_COMM_WORLD));
}
END_TEST

static int handler_calls, handler_code;
static MPI_Comm handler_comm;
static void count_errors(MPI_Comm *comm, int *code, ...)
{
    handler_calls++;
    handler_code = *code;
    handler_comm = *comm;
}

/* A user error handler is called with the communicator and the code, and
 * the call then returns the code; a duplicate inherits it. */
START_TEST(user_error_handler)
{
    MPI_Errhandler eh;
    MPI_Comm dup;
    MOK(MPI_Comm_create_errhandler(count_errors, &eh));
    MOK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MOK(MPI_Comm_set_errhandler(dup, eh));
    MOK(MPI_Errhandler_free(&eh));
    handler_calls = 0;
    int v = 0;
    int rc = MPI_Send(&v, 1, MPI_INT, np + 2, 0, dup);
    ck_assert_int_eq(rc, MPI_ERR_RANK);
    ck_assert_int_eq(handler_calls, 1);
    ck_assert_int_eq(handler_code, MPI_ERR_RANK);
    ck_assert_ptr_eq(handler_comm, dup);
    MPI_Comm dup2;
    MOK(MPI_Comm_dup(dup, &dup2));
    MOK(MPI_Comm_call_errhandler(dup2, MPI_ERR_OTHER));
    ck_assert_int_eq(handler_calls, 2);
    ck_assert_int_eq(handler_code, MPI_ERR_OTHER);
    ck_assert_ptr_eq(handler_comm, dup2);
    /* the world's handler is untouched */
    rc = MPI_Send(&v, 1, MPI_INT, np + 2, 0, MPI_COMM_WORLD);
    ck_assert_int_eq(rc, MPI_ERR_RANK);
    ck_assert_int_eq(handler_calls, 2);
    MOK(MPI_Comm_free(&dup2));
    MOK(MPI_Comm_free(&dup));
}
END_TEST

/* --- threads -------------------------------------------------------------- */

enum { THREADS = 4, ITERS = 200 };

/* Thread k of rank r exchanges with thread k of the partner, tag k, with
 * every call form; a wildcard-source receive and probes too. */
static void *exchanger(void *arg)
{
    intptr_t k = (intptr_t)arg;
    int partner = me ^ 1;
    if (partner >= np)
        return NULL;
    intptr_t bad = 0;
    for (int i = 0; i < ITERS; i++) {
        int out[16], in[16];
        for (int j = 0; j < 16; j++)
            out[j] = (int)(me * 1000000 + k * 10000 + i * 16 + j);
        MPI_Request r[2];
        MPI_Status st;
        switch (i % 3) {
        case 0:
            if (MPI_Sendrecv(out, 16, MPI_INT, partner, (int)k, in, 16, MPI_INT, partner,
                             (int)k, MPI_COMM_WORLD, &st) != MPI_SUCCESS)
                bad++;
            break;
        case 1:
            if (MPI_Irecv(in, 16, MPI_INT, MPI_ANY_SOURCE, (int)k, MPI_COMM_WORLD, &r[0]) ||
                MPI_Isend(out, 16, MPI_INT, partner, (int)k, MPI_COMM_WORLD, &r[1]) ||
                MPI_Waitall(2, r, MPI_STATUSES_IGNORE))
                bad++;
            break;
        case 2: {
            MPI_Message m;
            if (MPI_Isend(out, 16, MPI_INT, partner, (int)k, MPI_COMM_WORLD, &r[0]) ||
                MPI_Mprobe(partner, (int)k, MPI_COMM_WORLD, &m, &st) ||
                MPI_Mrecv(in, 16, MPI_INT, &m, &st) || MPI_Wait(&r[0], &st))
                bad++;
            break;
        }
        }
        for (int j = 0; j < 16; j++)
            if (in[j] != (int)(partner * 1000000 + k * 10000 + i * 16 + j))
                bad++;
    }
    return (void *)bad;
}

START_TEST(pthreads_multiple)
{
    pthread_t th[THREADS];
    for (intptr_t k = 0; k < THREADS; k++)
        ck_assert_int_eq(pthread_create(&th[k], NULL, exchanger, (void *)k), 0);
    intptr_t bad = 0;
    for (int k = 0; k < THREADS; k++) {
        void *ret;
        pthread_join(th[k], &ret);
        bad += (intptr_t)ret;
    }
    EXPECT(bad == 0, "%ld wrong exchanges or failed calls", (long)bad);
    agree();
}
END_TEST

START_TEST(ults_call_mpi)
{
    mpiv_ult_t u[THREADS];
    for (intptr_t k = 0; k < THREADS; k++)
        ck_assert_int_eq(mpiv_ult_spawn(exchanger, (void *)k, MPIV_WORKER_ANY, &u[k]), 0);
    intptr_t bad = 0;
    for (int k = 0; k < THREADS; k++) {
        void *ret;
        mpiv_ult_join(u[k], &ret);
        bad += (intptr_t)ret;
    }
    EXPECT(bad == 0, "%ld wrong exchanges or failed calls", (long)bad);
    agree();
}
END_TEST

/* A ULT that starts a non-blocking collective and polls it with
 * MPI_Test, never blocking: the collective's own ULT must still run (on
 * one worker, it is the same worker). */
static void *nbc_poller(void *arg)
{
    (void)arg;
    intptr_t bad = 0;
    for (int i = 0; i < 20; i++) {
        int v = 1, s = 0, flag = 0;
        MPI_Request r;
        if (MPI_Iallreduce(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r))
            return (void *)1;
        while (!flag)
            if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE))
                return (void *)1;
        bad += s != np;
    }
    return (void *)bad;
}

START_TEST(ult_polls_nonblocking_collective)
{
    mpiv_ult_t u;
    ck_assert_int_eq(mpiv_ult_spawn(nbc_poller, NULL, MPIV_WORKER_ANY, &u), 0);
    void *ret;
    mpiv_ult_join(u, &ret);
    EXPECT(ret == NULL, "%ld wrong results or failed calls", (long)(intptr_t)ret);
    agree();
}
END_TEST

/* Collectives on different communicators from different threads at once
 * (MPI allows it; each communicator's calls stay in order). */
struct coll_arg {
    MPI_Comm c;
    int bad;
};
static void *coll_thread(void *arg)
{
    struct coll_arg *a = arg;
    for (int i = 0; i < 50; i++) {
        int v = i + me, s = 0;
        MPI_Request r;
        if (MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, a->c) || s != np * i + np * (np - 1) / 2)
            a->bad++;
        if (MPI_Iallreduce(&v, &s, 1, MPI_INT, MPI_MAX, a->c, &r) ||
            MPI_Wait(&r, MPI_STATUS_IGNORE) || s != i + np - 1)
            a->bad++;
    }
    return NULL;
}

START_TEST(threads_on_communicators)
{
    struct coll_arg a[3];
    pthread_t th[3];
    for (int k = 0; k < 3; k++) {
        MOK(MPI_Comm_dup(MPI_COMM_WORLD, &a[k].c));
        a[k].bad = 0;
    }
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(pthread_create(&th[k], NULL, coll_thread, &a[k]), 0);
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        pthread_join(th[k], NULL);
        bad += a[k].bad;
        MOK(MPI_Comm_free(&a[k].c));
    }
    EXPECT(bad == 0, "%d wrong collective results", bad);
    agree();
}
END_TEST

static Suite *misc_suite(void)
{
    Suite *s = suite_create("mpi_misc");
    TCase *tc = tcase_create("misc");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, environment);
    tcase_add_test(tc, error_classes);
    tcase_add_test(tc, user_error_handler);
    tcase_add_test(tc, pthreads_multiple);
    tcase_add_test(tc, ults_call_mpi);
    tcase_add_test(tc, threads_on_communicators);
    tcase_add_test(tc, ult_polls_nonblocking_collective);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = misc_suite, .fork = CK_NOFORK, .init = mt_init, .quiet = mt_quiet,
           .fini = mt_fini);
