/*
 * boot.c — joining the job: picks the bootstrap method from the environment
 * and forwards to it. The methods live beside this file: boot_run.c (the
 * client of mpiv_run's key-value exchange) and boot_pmix.c (libpmix). The
 * singleton method is small enough to live here.
 *
 * Order matters: mpiv_run's variables win over PMIx's, so that mpiv_run
 * started from inside an srun or mpirun job still runs its own job.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "boot.h"
#include "boot_int.h"

static const struct boot_method *method;
static int my_rank, my_size;

static int single_init(int *rank, int *size)
{
    *rank = 0;
    *size = 1;
    return MPIV_SUCCESS;
}

static int single_allgather(const void *mine, size_t len, void *all)
{
    if (len)
        memmove(all, mine, len);
    return MPIV_SUCCESS;
}

static int single_barrier(void)
{
    return MPIV_SUCCESS;
}

static void single_finalize(bool graceful) { (void)graceful; }

static const struct boot_method boot_method_single = {
    "singleton", single_init, single_allgather, single_barrier, single_finalize,
};

static int env_set(const char *name)
{
    const char *s = getenv(name);
    return s && *s;
}

int boot_timeout_s(void)
{
    int64_t v;
    if (util_config_int("MPIV_BOOT_TIMEOUT", &v) != MPIV_SUCCESS)
        return -1;
    return (int)v;
}

/* A task of an srun step of several tasks that found neither mpiv_run's
 * nor PMIx's variables: srun ran without its PMIx plugin (--mpi=none, the
 * usual MpiDefault). Going on as a singleton would run every task as its
 * own job of one rank, each reporting success; refuse instead. A batch
 * script's own process has no SLURM_STEP_NUM_TASKS, and one task alone is
 * a singleton as anywhere. */
static int slurm_without_pmix(void)
{
    const char *s = getenv("SLURM_STEP_NUM_TASKS");
    if (!s || !*s)
        return MPIV_SUCCESS;
    char *end;
    long n = strtol(s, &end, 10);
    if (*end != '\0' || n <= 1)
        return MPIV_SUCCESS;
    return util_err(MPIV_ERR_BOOTSTRAP,
                    "bootstrap: started by srun as one of %ld tasks, but without PMIx (no "
                    "PMIX_RANK): run srun --mpi=pmix (or set MpiDefault=pmix, or "
                    "SLURM_MPI_TYPE=pmix); alone, each task would be a job of one rank",
                    n);
}

int boot_init(int *rank, int *size)
{
    if (method)
        return util_err(MPIV_ERR_STATE, "bootstrap: already joined the job (method %s)",
                        method->name);
    if (!rank || !size)
        return util_err(MPIV_ERR_ARG, "bootstrap: rank and size must not be NULL");
    const struct boot_method *m = &boot_method_single;
    if (env_set("MPIV_BOOT_ADDR"))
        m = &boot_method_run;
    else if (env_set("PMIX_RANK") || env_set("PMIX_NAMESPACE"))
        m = &boot_method_pmix;
    else {
        int rc = slurm_without_pmix();
        if (rc != MPIV_SUCCESS)
            return rc;
    }
    int rc = m->init(rank, size);
    if (rc != MPIV_SUCCESS)
        return rc;
    method = m;
    my_rank = *rank;
    my_size = *size;
    util_log_set_rank(*rank);
    util_log_debug("bootstrap: rank %d of %d through %s", *rank, *size, m->name);
    return MPIV_SUCCESS;
}

int boot_allgather(const void *mine, size_t len, void *all)
{
    if (!method)
        return util_err(MPIV_ERR_STATE, "bootstrap: allgather before boot_init");
    if ((len && (!mine || !all)))
        return util_err(MPIV_ERR_ARG, "bootstrap: allgather with a NULL buffer");
    return method->allgather(mine, len, all);
}

int boot_barrier(void)
{
    if (!method)
        return util_err(MPIV_ERR_STATE, "bootstrap: barrier before boot_init");
    return method->barrier();
}

static void boot_leave(bool graceful)
{
    if (!method)
        return;
    method->finalize(graceful);
    method = NULL;
}

void boot_finalize(void) { boot_leave(true); }

void boot_abandon(void) { boot_leave(false); }

int boot_whoami(int *rank, int *size)
{
    if (!method)
        return MPIV_ERR_STATE;
    *rank = my_rank;
    *size = my_size;
    return MPIV_SUCCESS;
}

int boot_job_key(uint64_t *key)
{
    *key = 0;
    const char *s = getenv("MPIV_JOB_KEY");
    if (!s || !*s)
        return MPIV_SUCCESS;
    uint64_t v = 0;
    size_t i = 0;
    for (; i < 16 && isxdigit((unsigned char)s[i]); i++)
        v = v << 4 | (uint64_t)(isdigit((unsigned char)s[i]) ? s[i] - '0'
                                                            : (tolower((unsigned char)s[i]) - 'a' + 10));
    if (i != 16 || s[i] != '\0' || v == 0)
        return util_err(MPIV_ERR_BOOTSTRAP,
                        "bootstrap: MPIV_JOB_KEY=%s: expected 16 hex digits, not all 0 (mpiv_run "
                        "sets it)", s);
    *key = v;
    return MPIV_SUCCESS;
}

const char *boot_method_name(void)
{
    return method ? method->name : "none";
}
