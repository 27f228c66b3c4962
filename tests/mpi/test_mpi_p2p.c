/*
 * The MPI face's point-to-point semantics, under mpiv_run at 2 and 4
 * ranks: ordering, truncation, status fields and MPI_Get_count,
 * MPI_PROC_NULL, wildcards, probes and matched probes, every completion
 * call (with MPIv's requests and the face's own mixed), cancel, request
 * free, persistent requests, the send modes, sendrecv(_replace), communicator isolation and
 * non-contiguous datatypes. Ranks pair up as (0,1), (2,3).
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check_main.h"
#include "mpi_test.h"

static int peer(void) { return me ^ 1; }
static bool sender(void) { return (me & 1) == 1; }

START_TEST(same_tag_in_order)
{
    enum { N = 200 };
    if (sender()) {
        MPI_Request r[N];
        static int vals[N];
        for (int i = 0; i < N; i++) {
            vals[i] = i;
            if (i % 2)
                MOK(MPI_Send(&vals[i], 1, MPI_INT, peer(), 5, MPI_COMM_WORLD));
            else
                MOK(MPI_Isend(&vals[i], 1, MPI_INT, peer(), 5, MPI_COMM_WORLD, &r[i / 2]));
        }
        MOK(MPI_Waitall(N / 2, r, MPI_STATUSES_IGNORE));
    } else {
        for (int i = 0; i < N; i++) {
            int v = -1;
            MOK(MPI_Recv(&v, 1, MPI_INT, peer(), 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            EXPECT(v == i, "message %d arrived as %d-th", v, i);
        }
    }
    agree();
}
END_TEST

START_TEST(status_and_count)
{
    double d[7] = {1, 2, 3, 4, 5, 6, 7};
    if (sender()) {
        MOK(MPI_Send(d, 7, MPI_DOUBLE, peer(), 42, MPI_COMM_WORLD));
    } else {
        double got[100];
        MPI_Status st;
        MOK(MPI_Recv(got, 100, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        int n = -1;
        MOK(MPI_Get_count(&st, MPI_DOUBLE, &n));
        EXPECT(n == 7, "get_count(double) = %d", n);
        MOK(MPI_Get_count(&st, MPI_INT, &n));
        EXPECT(n == 14, "get_count(int) = %d", n);
        MOK(MPI_Get_count(&st, MPI_DOUBLE_INT, &n));
        EXPECT(n == MPI_UNDEFINED, "get_count(double_int) = %d, not MPI_UNDEFINED", n);
        EXPECT(st.MPI_SOURCE == peer() && st.MPI_TAG == 42, "status %d/%d", st.MPI_SOURCE,
               st.MPI_TAG);
        EXPECT(memcmp(got, d, sizeof d) == 0, "data differ");
    }
    agree();
}
END_TEST

START_TEST(truncation_is_an_error)
{
    int big[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    if (sender()) {
        MOK(MPI_Send(big, 10, MPI_INT, peer(), 1, MPI_COMM_WORLD));
    } else {
        int small[6] = {0, 0, 0, 0, 0, -7};
        MPI_Status st;
        int rc = MPI_Recv(small, 5, MPI_INT, peer(), 1, MPI_COMM_WORLD, &st);
        int cls = -1;
        MPI_Error_class(rc, &cls);
        EXPECT(cls == MPI_ERR_TRUNCATE, "class %d, not MPI_ERR_TRUNCATE", cls);
        EXPECT(small[5] == -7, "a byte past the buffer was written");
    }
    agree();
}
END_TEST

START_TEST(proc_null)
{
    int v = 3;
    MPI_Status st;
    MOK(MPI_Send(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    MOK(MPI_Recv(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    int n = -1;
    MOK(MPI_Get_count(&st, MPI_INT, &n));
    ck_assert_int_eq(st.MPI_SOURCE, MPI_PROC_NULL);
    ck_assert_int_eq(st.MPI_TAG, MPI_ANY_TAG);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(v, 3);
    MPI_Request r[2];
    MOK(MPI_Isend(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r[0]));
    MOK(MPI_Irecv(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r[1]));
    MPI_Status sts[2];
    MOK(MPI_Waitall(2, r, sts));
    ck_assert_int_eq(sts[1].MPI_SOURCE, MPI_PROC_NULL);
    ck_assert_ptr_eq(r[0], MPI_REQUEST_NULL);
    MOK(MPI_Sendrecv(&v, 1, MPI_INT, MPI_PROC_NULL, 0, &n, 1, MPI_INT, MPI_PROC_NULL, 0,
                     MPI_COMM_WORLD, &st));
    ck_assert_int_eq(st.MPI_SOURCE, MPI_PROC_NULL);
    int flag = 0;
    MOK(MPI_Iprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &flag, &st));
    ck_assert_int_eq(flag, 1);
    MPI_Message m;
    MOK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st));
    MOK(MPI_Mrecv(&v, 1, MPI_INT, &m, &st));
    ck_assert_ptr_eq(m, MPI_MESSAGE_NULL);
    ck_assert_int_eq(st.MPI_SOURCE, MPI_PROC_NULL);
}
END_TEST

START_TEST(wildcards_take_everyone)
{
    if (me != 0) {
        int v = me * 10;
        MOK(MPI_Send(&v, 1, MPI_INT, 0, me, MPI_COMM_WORLD));
    } else {
        int seen = 0;
        for (int i = 1; i < np; i++) {
            int v;
            MPI_Status st;
            MOK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            EXPECT(st.MPI_TAG == st.MPI_SOURCE && v == 10 * st.MPI_SOURCE,
                   "source %d tag %d value %d", st.MPI_SOURCE, st.MPI_TAG, v);
            seen |= 1 << st.MPI_SOURCE;
        }
        EXPECT(seen == ((1 << np) - 2), "sources seen: %#x", seen);
    }
    agree();
}
END_TEST

START_TEST(probes)
{
    /* three messages of sizes 3, 1000 and 100000 ints, tags 7, 8, 9 */
    static const int sizes[3] = {3, 1000, 100000};
    if (sender()) {
        for (int k = 0; k < 3; k++) {
            int *b = malloc(sizeof(int) * (size_t)sizes[k]);
            for (int i = 0; i < sizes[k]; i++)
                b[i] = i + k;
            MOK(MPI_Send(b, sizes[k], MPI_INT, peer(), 7 + k, MPI_COMM_WORLD));
            free(b);
        }
    } else {
        for (int k = 0; k < 3; k++) {
            MPI_Status st;
            int n = -1;
            int *b = NULL;
            if (k == 0) { /* probe, then receive */
                MOK(MPI_Probe(peer(), MPI_ANY_TAG, MPI_COMM_WORLD, &st));
                MOK(MPI_Get_count(&st, MPI_INT, &n));
                b = malloc(sizeof(int) * (size_t)n);
                MOK(MPI_Recv(b, n, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
            } else if (k == 1) { /* improbe until found, then mrecv */
                int flag = 0;
                MPI_Message m;
                while (!flag)
                    MOK(MPI_Improbe(MPI_ANY_SOURCE, 8, MPI_COMM_WORLD, &flag, &m, &st));
                MOK(MPI_Get_count(&st, MPI_INT, &n));
                b = malloc(sizeof(int) * (size_t)n);
                MOK(MPI_Mrecv(b, n, MPI_INT, &m, &st));
                EXPECT(m == MPI_MESSAGE_NULL, "mrecv left the message handle");
            } else { /* mprobe, imrecv */
                MPI_Message m;
                MPI_Request r;
                MOK(MPI_Mprobe(peer(), 9, MPI_COMM_WORLD, &m, &st));
                MOK(MPI_Get_count(&st, MPI_INT, &n));
                b = malloc(sizeof(int) * (size_t)n);
                MOK(MPI_Imrecv(b, n, MPI_INT, &m, &r));
                MOK(MPI_Wait(&r, &st));
            }
            EXPECT(n == sizes[k] && st.MPI_TAG == 7 + k, "message %d: %d ints, tag %d", k, n,
                   st.MPI_TAG);
            for (int i = 0; i < n && i < sizes[k]; i++)
                if (b[i] != i + k) {
                    FAIL_LATER("message %d int %d is %d", k, i, b[i]);
                    break;
                }
            free(b);
        }
        int flag = 1;
        MOK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        EXPECT(!flag, "a message is left");
    }
    agree();
}
END_TEST

/* A vector type (every other int) makes the face's own requests; mixed
 * with MPIv's, MPI_PROC_NULL's and MPI_REQUEST_NULL in every completion
 * call. */
START_TEST(completion_calls)
{
    enum { N = 6 };
    MPI_Datatype every_other;
    MOK(MPI_Type_vector(4, 1, 2, MPI_INT, &every_other));
    MOK(MPI_Type_commit(&every_other));
    int bufs[N][8];
    for (int round = 0; round < 5; round++) {
        MPI_Request r[N + 2];
        for (int i = 0; i < N; i++) {
            for (int j = 0; j < 8; j++)
                bufs[i][j] = sender() ? 100 * round + 10 * i + j : -1;
            MPI_Datatype t = i % 2 ? every_other : MPI_INT;
            int cnt = i % 2 ? 1 : 8;
            if (sender())
                MOK(MPI_Isend(bufs[i], cnt, t, peer(), i, MPI_COMM_WORLD, &r[i]));
            else
                MOK(MPI_Irecv(bufs[i], cnt, t, peer(), i, MPI_COMM_WORLD, &r[i]));
        }
        r[N] = MPI_REQUEST_NULL;
        MOK(MPI_Irecv(NULL, 0, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r[N + 1]));
        int left = N + 1, idx[N + 2], out, flag;
        MPI_Status sts[N + 2];
        switch (round) {
        case 0:
            MOK(MPI_Waitall(N + 2, r, sts));
            left = 0;
            break;
        case 1:
            while (left) {
                MOK(MPI_Waitany(N + 2, r, &idx[0], &sts[0]));
                EXPECT(idx[0] != MPI_UNDEFINED, "waitany found nothing with %d left", left);
                left--;
            }
            MOK(MPI_Waitany(N + 2, r, &idx[0], &sts[0]));
            EXPECT(idx[0] == MPI_UNDEFINED, "waitany on nulls gave %d", idx[0]);
            break;
        case 2:
            while (left) {
                MOK(MPI_Waitsome(N + 2, r, &out, idx, sts));
                left -= out;
            }
            MOK(MPI_Waitsome(N + 2, r, &out, idx, sts));
            EXPECT(out == MPI_UNDEFINED, "waitsome on nulls gave %d", out);
            break;
        case 3:
            while (left) {
                MOK(MPI_Testsome(N + 2, r, &out, idx, sts));
                left -= out;
            }
            break;
        case 4:
            for (flag = 0; !flag;)
                MOK(MPI_Testall(N + 2, r, &flag, sts));
            for (int i = 0; i < N + 2; i++)
                EXPECT(r[i] == MPI_REQUEST_NULL, "testall left request %d", i);
            break;
        }
        if (!sender())
            for (int i = 0; i < N; i++)
                for (int j = 0; j < 8; j++) {
                    int want = i % 2 && j % 2 ? -1 : 100 * round + 10 * i + j;
                    EXPECT(bufs[i][j] == want, "round %d buffer %d int %d is %d, not %d", round,
                           i, j, bufs[i][j], want);
                }
        /* testany until all done */
        int f = 0, ix = 0;
        MOK(MPI_Testany(N + 2, r, &ix, &f, MPI_STATUS_IGNORE));
        EXPECT(f == 1 && ix == MPI_UNDEFINED, "testany on nulls: flag %d index %d", f, ix);
    }
    MOK(MPI_Type_free(&every_other));
    ck_assert_ptr_eq(every_other, MPI_DATATYPE_NULL);
    agree();
}
END_TEST

START_TEST(cancel_and_free)
{
    int v = 0;
    MPI_Request r;
    MPI_Status st;
    /* a receive nobody sends to */
    MOK(MPI_Irecv(&v, 1, MPI_INT, peer(), 999, MPI_COMM_WORLD, &r));
    MOK(MPI_Cancel(&r));
    MOK(MPI_Wait(&r, &st));
    int flag = 0;
    MOK(MPI_Test_cancelled(&st, &flag));
    ck_assert_int_eq(flag, 1);
    /* sends are not cancelled: they complete */
    int w = 77;
    MOK(MPI_Isend(&w, 1, MPI_INT, peer(), 998, MPI_COMM_WORLD, &r));
    MOK(MPI_Cancel(&r));
    MOK(MPI_Recv(&v, 1, MPI_INT, peer(), 998, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MOK(MPI_Wait(&r, &st));
    MOK(MPI_Test_cancelled(&st, &flag));
    ck_assert_int_eq(flag, 0);
    ck_assert_int_eq(v, 77);
    /* a freed active send still arrives */
    static int freed[3] = {5, 6, 7};
    MOK(MPI_Isend(freed, 3, MPI_INT, peer(), 997, MPI_COMM_WORLD, &r));
    MOK(MPI_Request_free(&r));
    ck_assert_ptr_eq(r, MPI_REQUEST_NULL);
    int got[3] = {0};
    MOK(MPI_Recv(got, 3, MPI_INT, peer(), 997, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    ck_assert_int_eq(got[2], 7);
    MOK(MPI_Barrier(MPI_COMM_WORLD));
}
END_TEST

START_TEST(send_modes_and_sendrecv)
{
    int v = me, got = -1;
    if (sender()) {
        MOK(MPI_Ssend(&v, 1, MPI_INT, peer(), 1, MPI_COMM_WORLD));
        MOK(MPI_Rsend(&v, 1, MPI_INT, peer(), 2, MPI_COMM_WORLD));
        MPI_Request r;
        MOK(MPI_Issend(&v, 1, MPI_INT, peer(), 3, MPI_COMM_WORLD, &r));
        MOK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else {
        for (int t = 1; t <= 3; t++) {
            MOK(MPI_Recv(&got, 1, MPI_INT, peer(), t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            EXPECT(got == peer(), "mode %d: got %d", t, got);
        }
    }
    /* a ring: everyone sends right, receives from the left */
    int right = (me + 1) % np, left = (me + np - 1) % np;
    MPI_Status st;
    MOK(MPI_Sendrecv(&v, 1, MPI_INT, right, 4, &got, 1, MPI_INT, left, 4, MPI_COMM_WORLD, &st));
    EXPECT(got == left && st.MPI_SOURCE == left, "sendrecv got %d from %d", got, st.MPI_SOURCE);
    int buf[3] = {me, me + 1, me + 2};
    MOK(MPI_Sendrecv_replace(buf, 3, MPI_INT, right, 5, left, 5, MPI_COMM_WORLD, &st));
    EXPECT(buf[0] == left && buf[2] == left + 2, "sendrecv_replace got %d..%d", buf[0], buf[2]);
    /* the same with a non-contiguous type */
    MPI_Datatype v2;
    MOK(MPI_Type_vector(3, 1, 2, MPI_INT, &v2));
    MOK(MPI_Type_commit(&v2));
    int sp[6] = {me, -1, me + 1, -1, me + 2, -1};
    MOK(MPI_Sendrecv_replace(sp, 1, v2, right, 6, left, 6, MPI_COMM_WORLD, &st));
    EXPECT(sp[0] == left && sp[2] == left + 1 && sp[4] == left + 2 && sp[1] == -1 && sp[5] == -1,
           "vector sendrecv_replace: %d %d %d %d %d %d", sp[0], sp[1], sp[2], sp[3], sp[4], sp[5]);
    MOK(MPI_Type_free(&v2));
    agree();
}
END_TEST

/* A message on a duplicate or a split is seen on it only. */
START_TEST(communicators_isolate)
{
    MPI_Comm dup, half;
    MOK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MOK(MPI_Comm_split(MPI_COMM_WORLD, me % 2, -me, &half));
    int hr, hs;
    MOK(MPI_Comm_rank(half, &hr));
    MOK(MPI_Comm_size(half, &hs));
    EXPECT(hs == (np + 1 - me % 2) / 2, "split size %d", hs);
    int v = 11;
    if (sender())
        MOK(MPI_Send(&v, 1, MPI_INT, peer(), 0, dup));
    MOK(MPI_Barrier(MPI_COMM_WORLD));
    if (!sender()) {
        int flag = 1;
        MPI_Status st;
        MOK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        EXPECT(!flag, "the world sees the duplicate's message");
        MOK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 0, dup, &st));
        EXPECT(st.MPI_SOURCE == peer(), "source %d", st.MPI_SOURCE);
    }
    /* ranks of the split are reversed: rank 0 of half is the highest */
    int w = me, sum = 0;
    MOK(MPI_Allreduce(&w, &sum, 1, MPI_INT, MPI_SUM, half));
    int want = 0;
    for (int i = me % 2; i < np; i += 2)
        want += i;
    EXPECT(sum == want, "split allreduce %d, not %d", sum, want);
    MOK(MPI_Comm_free(&dup));
    MOK(MPI_Comm_free(&half));
    EXPECT(dup == MPI_COMM_NULL, "comm_free left the handle");
    MPI_Comm none;
    MOK(MPI_Comm_split(MPI_COMM_WORLD, me == 0 ? 0 : MPI_UNDEFINED, 0, &none));
    EXPECT((me == 0) == (none != MPI_COMM_NULL), "MPI_UNDEFINED color");
    if (none != MPI_COMM_NULL)
        MOK(MPI_Comm_free(&none));
    MPI_Comm node;
    MOK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MOK(MPI_Comm_size(node, &hs));
    EXPECT(hs == np, "one host: %d ranks on it, not %d", hs, np);
    MOK(MPI_Comm_free(&node));
    agree();
}
END_TEST

/* Messages larger than the eager limit, through a non-contiguous type. */
START_TEST(large_vector_type)
{
    enum { N = 300000 };
    MPI_Datatype col;
    MOK(MPI_Type_vector(N, 1, 3, MPI_DOUBLE, &col));
    MOK(MPI_Type_commit(&col));
    double *b = malloc(sizeof(double) * 3 * N);
    for (int i = 0; i < 3 * N; i++)
        b[i] = sender() ? i : -1;
    if (sender()) {
        MOK(MPI_Send(b, 1, col, peer(), 3, MPI_COMM_WORLD));
    } else {
        MPI_Status st;
        MOK(MPI_Recv(b, 1, col, peer(), 3, MPI_COMM_WORLD, &st));
        int n;
        MOK(MPI_Get_count(&st, col, &n));
        EXPECT(n == 1, "count %d", n);
        for (int i = 0; i < 3 * N; i++)
            if (b[i] != (i % 3 ? -1 : i)) {
                FAIL_LATER("double %d is %g", i, b[i]);
                break;
            }
    }
    free(b);
    MOK(MPI_Type_free(&col));
    agree();
}
END_TEST

/* Persistent requests: started again and again (a halo exchange), with a
 * vector type, in every completion call; inactive ones count as null in
 * the any / some calls; cancel and free. */
START_TEST(persistent_requests)
{
    MPI_Datatype every_other;
    MOK(MPI_Type_vector(3, 1, 2, MPI_INT, &every_other));
    MOK(MPI_Type_commit(&every_other));
    int out[5], in[5], vin[5];
    MPI_Request r[3];
    MOK(MPI_Send_init(out, 5, MPI_INT, peer(), 20, MPI_COMM_WORLD, &r[0]));
    MOK(MPI_Recv_init(in, 5, MPI_INT, peer(), 20, MPI_COMM_WORLD, &r[1]));
    MOK(MPI_Recv_init(vin, 1, every_other, peer(), 21, MPI_COMM_WORLD, &r[2]));
    /* an inactive request completes at once, with an empty status */
    MPI_Status st;
    MOK(MPI_Wait(&r[1], &st));
    EXPECT(r[1] != MPI_REQUEST_NULL && st.MPI_SOURCE == MPI_ANY_SOURCE, "inactive wait");
    for (int it = 0; it < 12; it++) {
        for (int k = 0; k < 5; k++) {
            out[k] = 1000 * me + 10 * it + k;
            in[k] = vin[k] = -1;
        }
        MOK(MPI_Startall(2, r));
        MOK(MPI_Start(&r[2]));
        int vout[3] = {out[0], out[1], out[2]};
        MOK(MPI_Send(vout, 3, MPI_INT, peer(), 21, MPI_COMM_WORLD));
        int flag = 0, idx, outn, ids[3];
        switch (it % 4) {
        case 0: MOK(MPI_Waitall(3, r, MPI_STATUSES_IGNORE)); break;
        case 1:
            while (!flag)
                MOK(MPI_Testall(3, r, &flag, MPI_STATUSES_IGNORE));
            break;
        case 2:
            for (int left = 3; left > 0; left--) {
                MOK(MPI_Waitany(3, r, &idx, &st));
                EXPECT(idx != MPI_UNDEFINED, "waitany: nothing with %d active", left);
            }
            MOK(MPI_Waitany(3, r, &idx, &st));
            EXPECT(idx == MPI_UNDEFINED, "waitany on inactive requests gave %d", idx);
            break;
        case 3:
            for (int left = 3; left > 0; left -= outn)
                MOK(MPI_Waitsome(3, r, &outn, ids, MPI_STATUSES_IGNORE));
            MOK(MPI_Testsome(3, r, &outn, ids, MPI_STATUSES_IGNORE));
            EXPECT(outn == MPI_UNDEFINED, "testsome on inactive requests gave %d", outn);
            break;
        }
        for (int k = 0; k < 5; k++) {
            int want = 1000 * peer() + 10 * it + k;
            EXPECT(in[k] == want, "iteration %d int %d is %d, not %d", it, k, in[k], want);
            int vwant = k % 2 ? -1 : 1000 * peer() + 10 * it + k / 2;
            EXPECT(vin[k] == vwant, "iteration %d vector int %d is %d, not %d", it, k, vin[k],
                   vwant);
        }
        EXPECT(r[0] != MPI_REQUEST_NULL && r[2] != MPI_REQUEST_NULL, "completion freed one");
    }
    /* cancel a started receive nobody sends to */
    MPI_Request c;
    MOK(MPI_Recv_init(in, 1, MPI_INT, peer(), 22, MPI_COMM_WORLD, &c));
    MOK(MPI_Start(&c));
    MOK(MPI_Cancel(&c));
    MOK(MPI_Wait(&c, &st));
    int cancelled = 0;
    MOK(MPI_Test_cancelled(&st, &cancelled));
    EXPECT(cancelled == 1, "the started receive was not cancelled");
    MOK(MPI_Request_free(&c));
    /* free an active send: it still arrives */
    out[0] = 4242;
    MOK(MPI_Start(&r[0]));
    MOK(MPI_Request_free(&r[0]));
    MOK(MPI_Recv(in, 5, MPI_INT, peer(), 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    EXPECT(in[0] == 4242, "the freed persistent send brought %d", in[0]);
    MOK(MPI_Request_free(&r[1]));
    MOK(MPI_Request_free(&r[2]));
    EXPECT(r[1] == MPI_REQUEST_NULL, "request_free left the handle");
    MOK(MPI_Type_free(&every_other));
    agree();
}
END_TEST

static Suite *p2p_suite(void)
{
    Suite *s = suite_create("mpi_p2p");
    TCase *tc = tcase_create("p2p");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, same_tag_in_order);
    tcase_add_test(tc, status_and_count);
    tcase_add_test(tc, truncation_is_an_error);
    tcase_add_test(tc, proc_null);
    tcase_add_test(tc, wildcards_take_everyone);
    tcase_add_test(tc, probes);
    tcase_add_test(tc, completion_calls);
    tcase_add_test(tc, cancel_and_free);
    tcase_add_test(tc, send_modes_and_sendrecv);
    tcase_add_test(tc, communicators_isolate);
    tcase_add_test(tc, large_vector_type);
    tcase_add_test(tc, persistent_requests);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = p2p_suite, .fork = CK_NOFORK, .init = mt_init, .quiet = mt_quiet,
           .fini = mt_fini);
