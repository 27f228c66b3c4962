/*
 * boot.h — joining the job: who am I, how many are we, and a way to swap
 * small blobs (network addresses) with everybody before the network is up.
 *
 * Three methods, tried in order:
 *  - mpiv_run: MPIV_BOOT_ADDR (host:port of mpiv_run's key-value exchange),
 *    MPIV_JOB_SECRET, MPIV_RANK, MPIV_SIZE set by tools/mpiv_run;
 *  - PMIx: the job was started by Slurm's srun, Open MPI's mpirun or PRRTE
 *    (PMIX_RANK / PMIX_NAMESPACE in the environment);
 *  - singleton: a program started alone is rank 0 of 1.
 */
#ifndef MPIV_SERVER_BOOT_H
#define MPIV_SERVER_BOOT_H

#include <stddef.h>

#include "util/util.h"

int srv_boot_init(int *rank, int *size);
/* Every rank contributes len bytes; all[r*len ..] receives rank r's. */
int srv_boot_allgather(const void *mine, size_t len, void *all);
int srv_boot_barrier(void);
void srv_boot_finalize(void);
/* "mpiv_run", "pmix" or "singleton". */
const char *srv_boot_method(void);

#endif
