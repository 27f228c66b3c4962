/*
 * mpiv_init_probe — a rank of the whole library for the mpiv_run tests
 * (and for timing start-up: it does nothing but join and leave).
 *
 *   init                 mpiv_init, mpiv_finalize; print "pid=<pid> ok"
 *   kill-after-init      print "pid=<pid>" and mpiv_init; the last rank
 *                        then kills itself (SIGKILL), the others wait in
 *                        mpiv_finalize until mpiv_run ends them
 *   packet-size V0 V1..  rank r sets MPIV_PACKET_SIZE=Vr before mpiv_init,
 *                        which must fail with MPIV_ERR_CONFIG; prints
 *                        "refused: <detail>" and exits 0 if it did
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpiv.h"

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "init";
    const char *rs = getenv("MPIV_RANK"), *ns = getenv("MPIV_SIZE");
    int env_rank = rs ? atoi(rs) : 0, env_size = ns ? atoi(ns) : 1;
    if (strcmp(mode, "packet-size") == 0) {
        if (argc < 2 + env_size) {
            fprintf(stderr, "mpiv_init_probe: packet-size needs one value per rank\n");
            return 2;
        }
        setenv("MPIV_PACKET_SIZE", argv[2 + env_rank], 1);
        int rc = mpiv_init(&argc, &argv);
        if (rc != MPIV_ERR_CONFIG) {
            fprintf(stderr, "mpiv_init_probe: rank %d: mpiv_init gave %d (%s), expected "
                    "MPIV_ERR_CONFIG\n", env_rank, rc, mpiv_strerror(rc));
            return 1;
        }
        printf("rank %d refused: %s\n", env_rank, mpiv_error_detail());
        return 0;
    }
    if (strcmp(mode, "kill-after-init") == 0)
        printf("pid=%d\n", (int)getpid());
    int rc = mpiv_init(&argc, &argv);
    if (rc) {
        fprintf(stderr, "mpiv_init_probe: mpiv_init: %s: %s\n", mpiv_strerror(rc),
                mpiv_error_detail());
        return 1;
    }
    if (strcmp(mode, "kill-after-init") == 0 && mpiv_rank() == mpiv_size() - 1)
        raise(SIGKILL);
    rc = mpiv_finalize();
    if (strcmp(mode, "init") == 0 && rc == MPIV_SUCCESS)
        printf("pid=%d ok\n", (int)getpid());
    return rc == MPIV_SUCCESS ? 0 : 1;
}
