/*
 * Buffered sends (I8 in src/proto/p2p.c) to a peer that the transport then
 * declares failed. Rank 0 sends blocking messages past its eager credit
 * (the test runs with little) to rank 1, which receives none: they return
 * at once, the ones past the credit from copies that wait for rank 1's
 * answer. Then an arrival from rank 1 fails (injected), rank 0 declares
 * rank 1 failed, and every copy must be freed (proto_on_peer_failed
 * completes them, and a copy's completion frees it): none may be left
 * waiting for an answer that cannot come. Rank 0 prints what it saw and
 * ends the job.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/fail_arrivals.h"
#include "mpiv.h"
#include "proto/proto.h"

enum { N = 100, SIZE = 1000 };

static char buf[SIZE];

int main(void)
{
    if (mpiv_init(NULL, NULL) != MPIV_SUCCESS || mpiv_size() != 2)
        return 1;
    if (mpiv_rank() == 1) {
        if (mpiv_barrier() != MPIV_SUCCESS)
            return 1;
        usleep(200000); /* rank 0 is waiting by now */
        mpiv_send(buf, 64, 0, 1); /* its arrival is what fails */
        mpiv_recv(buf, sizeof buf, 0, 3, NULL); /* the job ends meanwhile */
        return 4;
    }
    int sent = 0;
    for (int i = 0; i < N; i++) {
        memset(buf, i, sizeof buf);
        sent += mpiv_send(buf, sizeof buf, 1, 7) == MPIV_SUCCESS;
    }
    long copies = atomic_load(&proto.buffered_copies);
    mpiv_request_t r;
    if (mpiv_irecv(buf, sizeof buf, 1, 1, &r) != MPIV_SUCCESS)
        _exit(6);
    srv_fault_set(fail_user_arrivals, NULL);
    if (mpiv_barrier() != MPIV_SUCCESS)
        _exit(7);
    /* completes once rank 1 is declared failed, which first completes
     * (and so frees) every send with it that the handle table holds */
    int rc = mpiv_wait(&r, NULL);
    long left = atomic_load(&proto.buffered_copies), bytes = atomic_load(&proto.buffered[1]);
    int rc2 = mpiv_send(buf, sizeof buf, 1, 7);
    printf("rank 0: %d of %d sends returned, %ld as copies; after rank 1 failed: receive %s, "
           "copies left %ld (%ld bytes), a new send: %s\n",
           sent, N, copies, mpiv_strerror(rc), left, bytes, mpiv_strerror(rc2));
    fflush(stdout);
    _exit(sent == N && copies > 0 && rc == MPIV_ERR_PEER && left == 0 && bytes == 0 ? 3 : 5);
}
