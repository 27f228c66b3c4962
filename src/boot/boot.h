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
 *
 * Every failure is MPIV_ERR_BOOTSTRAP with a detail (util_err) saying what
 * and where; nothing waits forever: the mpiv_run method gives up after
 * MPIV_BOOT_TIMEOUT seconds (default 60) per step, and fails at once when
 * mpiv_run reports that another rank left the exchange. These calls are
 * collective and not thread-safe: one thread of each rank calls them, all
 * ranks in the same order.
 */
#ifndef MPIV_BOOT_H
#define MPIV_BOOT_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

/* Picks the method from the environment and joins the job. MPIV_ERR_STATE
 * if already joined. */
int boot_init(int *rank, int *size);
/* Every rank contributes len bytes (the same len everywhere, at most 1 MiB);
 * all[r*len ..] receives rank r's. */
int boot_allgather(const void *mine, size_t len, void *all);
int boot_barrier(void);
/* Leaves the job (tells mpiv_run this rank left on purpose). Idempotent. */
void boot_finalize(void);
/* Lets go of the job without saying goodbye, after a failure the other ranks
 * cannot know of: the launcher then counts this rank as broken off (and
 * mpiv_run fails the others' pending exchanges at once). Idempotent. */
void boot_abandon(void);
/* "mpiv_run", "pmix" or "singleton"; "none" before boot_init. */
const char *boot_method_name(void);
/* This rank and the job's size, once joined; MPIV_ERR_STATE before. */
int boot_whoami(int *rank, int *size);
/* Checks that every rank has the same settings where ranks must agree
 * (MPIV_PACKET_SIZE, MPIV_EAGER_LIMIT, MPIV_NET, MPIV_OFI_PROVIDER).
 * Collective, right after boot_init. When they differ, every rank returns
 * MPIV_ERR_CONFIG with a detail naming the setting and two ranks' values,
 * e.g. "MPIV_PACKET_SIZE differs: rank 0 has 8192, rank 1 has 4096". */
int boot_check_shared(const struct util_config *cfg);
/* The job's key, when the launcher chose one (mpiv_run's MPIV_JOB_KEY, 16
 * hex digits, never 0): names of things a rank leaves on the host (shm
 * segments) carry it, so that the launcher can remove what a killed rank
 * left. *key is 0 when there is none; MPIV_ERR_BOOTSTRAP when the variable
 * is malformed. */
int boot_job_key(uint64_t *key);

#endif
