/*
 * A rank dies in the middle of a rendezvous: rank 0 starts a large send
 * (its RTS goes out) and kills itself before the receiver matches it.
 * The job must end within seconds with the launcher naming rank 0, not
 * leave rank 1 waiting in its receive.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mpiv.h"

int main(void)
{
    if (mpiv_init(NULL, NULL) != MPIV_SUCCESS || mpiv_size() != 2)
        return 1;
    size_t n = 64u << 20;
    char *buf = calloc(1, n);
    mpiv_request_t r;
    if (mpiv_rank() == 0) {
        if (mpiv_isend(buf, n, 1, 1, &r) != MPIV_SUCCESS)
            return 1;
        usleep(100000); /* the RTS is on its way */
        raise(SIGKILL);
    }
    usleep(300000); /* the receive finds the RTS, or the peer is gone */
    int rc = mpiv_recv(buf, n, 0, 1, NULL);
    fprintf(stderr, "rank 1: the receive returned %s\n", mpiv_strerror(rc));
    /* unreachable in practice: the launcher ends the job; if not, this
     * rank must not report success */
    return 2;
}
