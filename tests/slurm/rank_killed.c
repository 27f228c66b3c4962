/*
 * One rank (argv[1], default the last) is SIGKILLed after joining the job;
 * every other rank waits in a receive from it, then, whatever the receive
 * returned, waits for the launcher to end it. So the job ends only when
 * the launcher (srun) ends it: the test checks that it does, within
 * seconds, and that its message names the killed rank.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mpiv.h"

int main(int argc, char **argv)
{
    if (mpiv_init(&argc, &argv) != MPIV_SUCCESS) {
        fprintf(stderr, "rank_killed: mpiv_init failed: %s\n", mpiv_error_detail());
        return 1;
    }
    int size = mpiv_size(), me = mpiv_rank();
    int victim = size - 1;
    if (argc > 1) {
        char *end;
        long v = strtol(argv[1], &end, 10);
        if (*argv[1] == '\0' || *end != '\0' || v < 0 || v >= size) {
            fprintf(stderr, "rank_killed: rank '%s' is not one of 0..%d\n", argv[1], size - 1);
            return 2;
        }
        victim = (int)v;
    }
    if (size < 2) {
        fprintf(stderr, "rank_killed: needs 2 ranks or more, not %d\n", size);
        return 2;
    }
    /* every rank is in the job before the victim goes */
    if (mpiv_barrier() != MPIV_SUCCESS)
        return 1;
    if (me == victim) {
        fprintf(stderr, "rank %d: killing itself\n", me);
        raise(SIGKILL);
    }
    char byte;
    int rc = mpiv_recv(&byte, 1, victim, 7, NULL);
    fprintf(stderr, "rank %d: the receive from rank %d returned: %s\n", me, victim,
            mpiv_strerror(rc));
    /* A rank of a real program may be waiting on anything (a healthy rank,
     * a long computation): only the launcher can be relied on to end it. */
    for (;;)
        pause();
}
