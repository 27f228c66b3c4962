/*
 * The receiver dies while sends wait for room in the send queue: rank 1
 * never receives and kills itself; rank 0 has meanwhile started a window
 * of non-blocking sends larger than its ring to rank 1 (run with a small
 * ring and inline progress, so that nothing drains it), so that most of
 * them wait in the queue by reference (srv_send_ref). Rank 0's wait must
 * then fail those with MPIV_ERR_PEER within moments: not wait for room
 * that cannot come, and not report them sent. Rank 0 blocks SIGTERM, so
 * that the launcher's SIGTERM at rank 1's death leaves it the grace
 * before the SIGKILL to say what its sends returned (a hang is killed
 * then, and fails the test for want of the line).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/outlive_peer.h"
#include "mpiv.h"
#include "server/srv_int.h"

enum { N = 64, SIZE = 16000 };

int main(void)
{
    if (!outlive_peer_init())
        return 1;
    char *buf = calloc(N, SIZE);
    if (!buf || mpiv_barrier() != MPIV_SUCCESS)
        return 1;
    if (mpiv_rank() == 1) {
        usleep(200000); /* rank 0's sends fill the ring and the queue */
        raise(SIGKILL);
    }
    mpiv_request_t r[N];
    mpiv_status_t st[N];
    for (int i = 0; i < N; i++)
        if (mpiv_isend(buf + (size_t)i * SIZE, SIZE, 1, 1, &r[i]) != MPIV_SUCCESS)
            return 1;
    struct srv_stats ss;
    srv_get_stats(&ss);
    mpiv_waitall(N, r, st);
    int sent = 0, gone = 0;
    for (int i = 0; i < N; i++) {
        sent += st[i].error == MPIV_SUCCESS;
        gone += st[i].error == MPIV_ERR_PEER;
    }
    printf("rank 0: %d sends, %s by reference, %d sent, %d failed (%s), %d otherwise\n", N,
           ss.refs > 0 ? "some queued" : "none queued", sent, gone,
           mpiv_strerror(MPIV_ERR_PEER), N - sent - gone);
    fflush(stdout);
    _exit(3);
}
