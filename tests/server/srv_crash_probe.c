/*
 * srv_crash_probe — a rank for run_crash_signal.sh: brings the server up
 * over the backend MPIV_NET names, then the last rank dies of the signal
 * given as argv[1] (the others wait to be stopped by mpiv_run). What must
 * reach the user is that signal, whatever the libraries the backend loaded
 * did to the signal handlers.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pktpool/pktpool.h"
#include "server/server.h"
#include "util/util.h"

int main(int argc, char **argv)
{
    int sig = argc > 1 ? atoi(argv[1]) : SIGSEGV;
    struct util_config cfg;
    struct pkt_pool *pool;
    int rank, size;
    if (util_config_load(&cfg) != MPIV_SUCCESS ||
        pkt_pool_create(&pool, 64, (size_t)cfg.packet_size, 1) != MPIV_SUCCESS ||
        srv_init(&cfg, pool, &rank, &size) != MPIV_SUCCESS) {
        fprintf(stderr, "srv_crash_probe: start-up failed: %s\n", mpiv_error_detail());
        return 3;
    }
    if (rank == size - 1)
        raise(sig);
    sleep(60);
    return 0;
}
