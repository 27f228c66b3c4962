/* Messages that arrive and that no receive takes: rank 0 sends N 8-byte
 * messages to rank 1, which never receives them, and both finalize. More
 * arrive than the pool's share for unexpected messages (I5 in p2p.c), so
 * most wait as heap copies. mpiv_finalize must give every copy back
 * (pktcopy.c): with MPIV_LOG=info rank 1 says how many messages it
 * dropped, and no rank may warn that copies were never given back (the
 * test's pattern).
 *
 * Usage: mpiv_run -n 2 unreceived [N] (default 5000) */
#include <mpiv.h>
#include <stdio.h>
#include <stdlib.h>

static int check(int rc, const char *what)
{
    if (rc != MPIV_SUCCESS) {
        fprintf(stderr, "unreceived: %s: %s\n", what, mpiv_strerror(rc));
        exit(1);
    }
    return rc;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 5000;
    check(mpiv_init(&argc, &argv), "mpiv_init");
    int rank = mpiv_rank();
    if (rank == 0)
        for (int i = 0; i < n; i++) {
            unsigned long long v = (unsigned long long)i;
            check(mpiv_send(&v, sizeof v, 1, i), "mpiv_send");
        }
    check(mpiv_finalize(), "mpiv_finalize");
    if (rank == 1)
        printf("rank 1: finalized\n");
    return 0;
}
