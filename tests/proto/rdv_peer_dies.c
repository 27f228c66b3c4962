/*
 * The sender dies in the middle of a receiver-driven rendezvous: rank 0
 * starts a large send (its RTS, offering a read, goes out) and kills
 * itself before rank 1 posts the receive. Rank 1's receive then matches
 * the RTS of a rank that is gone: its read must fail with MPIV_ERR_PEER,
 * not wait and not report success. Rank 1 blocks SIGTERM, so that the
 * launcher's SIGTERM at rank 0's death leaves it the grace before the
 * SIGKILL to say what its receive returned (a hang is killed then, and
 * fails the test for want of the line).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/outlive_peer.h"
#include "mpiv.h"
#include "proto/proto.h"

int main(void)
{
    if (!outlive_peer_init())
        return 1;
    size_t n = 8u << 20;
    char *buf = calloc(1, n);
    if (!buf || mpiv_barrier() != MPIV_SUCCESS)
        return 1;
    if (mpiv_rank() == 0) {
        mpiv_request_t r;
        if (mpiv_isend(buf, n, 1, 1, &r) != MPIV_SUCCESS)
            return 1;
        usleep(100000); /* the RTS is on its way */
        raise(SIGKILL);
    }
    usleep(400000); /* rank 0 is gone, its RTS waits here */
    int rc = mpiv_recv(buf, n, 0, 1, NULL);
    struct proto_stats st;
    proto_get_stats(&st);
    printf("rank 1: the receive returned %s (reads %llu, failed reads %llu)\n",
           mpiv_strerror(rc), (unsigned long long)st.reads,
           (unsigned long long)st.read_failures);
    fflush(stdout);
    _exit(rc == MPIV_ERR_PEER ? 3 : 5);
}
