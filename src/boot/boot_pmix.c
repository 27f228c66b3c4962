/*
 * boot_pmix.c — joining a job started by a PMIx launcher (Slurm's srun,
 * Open MPI's mpirun, PRRTE's prterun). The launcher's PMIx server already
 * knows our rank and the job size; an allgather is Put + Commit, a Fence
 * that collects the data, then one Get per rank; a barrier is a Fence
 * without data.
 *
 * Keys carry a sequence number so that each allgather reads its own round
 * and never a value left from an earlier one.
 */
#include <stdio.h>
#include <string.h>

#include <pmix.h>

#include "boot.h"
#include "boot_int.h"

static pmix_proc_t me;
static int pmix_size;
static unsigned pmix_round;
static int pmix_up;

static int pmix_fail(const char *what, pmix_status_t rc)
{
    return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap (PMIx, namespace %s rank %u): %s: %s",
                    me.nspace[0] ? me.nspace : "?", (unsigned)me.rank, what,
                    PMIx_Error_string(rc));
}

static int pmix_init(int *rank, int *size)
{
    memset(&me, 0, sizeof me);
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return pmix_fail("PMIx_Init (is the launcher's PMIx server reachable?)", rc);
    pmix_up = 1;

    pmix_proc_t job;
    PMIX_PROC_CONSTRUCT(&job);
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *val = NULL;
    rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || !val) {
        int err = pmix_fail("PMIx_Get(PMIX_JOB_SIZE)", rc);
        PMIx_Finalize(NULL, 0);
        pmix_up = 0;
        return err;
    }
    long n = -1;
    switch (val->type) {
    case PMIX_UINT32: n = (long)val->data.uint32; break;
    case PMIX_INT: n = (long)val->data.integer; break;
    case PMIX_UINT64: n = (long)val->data.uint64; break;
    case PMIX_SIZE: n = (long)val->data.size; break;
    default: break;
    }
    PMIX_VALUE_RELEASE(val);
    if (n < 1 || n > MPIV_RANK_MAX + 1L || me.rank >= (pmix_rank_t)n) {
        PMIx_Finalize(NULL, 0);
        pmix_up = 0;
        return util_err(MPIV_ERR_BOOTSTRAP,
                        "bootstrap (PMIx): job size %ld / rank %u out of range", n,
                        (unsigned)me.rank);
    }
    pmix_size = (int)n;
    pmix_round = 0;
    *rank = (int)me.rank;
    *size = pmix_size;
    return MPIV_SUCCESS;
}

/* A fence over the whole namespace. PMIX_TIMEOUT is a request, not a
 * requirement: a server that ignores it still ends the fence when a rank
 * dies, because the launcher then ends the job. */
static int pmix_fence(int collect)
{
    pmix_info_t info[2];
    bool flag = true;
    int timeout = boot_timeout_s();
    if (timeout < 0)
        return MPIV_ERR_CONFIG;
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &timeout, PMIX_INT);
    PMIX_INFO_LOAD(&info[1], PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(NULL, 0, info, collect ? 2 : 1);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc == PMIX_ERR_TIMEOUT)
        return util_err(MPIV_ERR_BOOTSTRAP,
                        "bootstrap (PMIx, namespace %s rank %u): fence timed out after %d s "
                        "(MPIV_BOOT_TIMEOUT)", me.nspace, (unsigned)me.rank, timeout);
    if (rc != PMIX_SUCCESS)
        return pmix_fail("PMIx_Fence (did another rank die?)", rc);
    return MPIV_SUCCESS;
}

static int pmix_allgather(const void *mine, size_t len, void *all)
{
    if (!pmix_up)
        return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap (PMIx): not joined");
    pmix_key_t key;
    snprintf(key, sizeof key, "mpiv.ag.%u", pmix_round++);

    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    /* PMIx copies the value on Put; the cast only satisfies its non-const
     * field. */
    v.data.bo.bytes = (char *)(uintptr_t)(len ? mine : "");
    v.data.bo.size = len;
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &v);
    if (rc != PMIX_SUCCESS)
        return pmix_fail("PMIx_Put", rc);
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
        return pmix_fail("PMIx_Commit", rc);
    int err = pmix_fence(1);
    if (err)
        return err;

    for (int r = 0; r < pmix_size; r++) {
        if (r == (int)me.rank) {
            if (len)
                memmove((char *)all + (size_t)r * len, mine, len);
            continue;
        }
        pmix_proc_t peer;
        PMIX_PROC_CONSTRUCT(&peer);
        PMIX_LOAD_PROCID(&peer, me.nspace, (pmix_rank_t)r);
        pmix_value_t *got = NULL;
        rc = PMIx_Get(&peer, key, NULL, 0, &got);
        if (rc != PMIX_SUCCESS || !got)
            return pmix_fail("PMIx_Get of a peer's allgather data", rc);
        if (got->type != PMIX_BYTE_OBJECT || got->data.bo.size != len) {
            size_t sz = got->type == PMIX_BYTE_OBJECT ? got->data.bo.size : 0;
            PMIX_VALUE_RELEASE(got);
            return util_err(MPIV_ERR_BOOTSTRAP,
                            "bootstrap (PMIx): rank %d contributed %zu bytes to an allgather, "
                            "rank %u %zu", r, sz, (unsigned)me.rank, len);
        }
        if (len)
            memcpy((char *)all + (size_t)r * len, got->data.bo.bytes, len);
        PMIX_VALUE_RELEASE(got);
    }
    return MPIV_SUCCESS;
}

static int pmix_barrier(void)
{
    if (!pmix_up)
        return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap (PMIx): not joined");
    return pmix_fence(0);
}

static void pmix_finalize(bool graceful)
{
    if (!pmix_up)
        return;
    /* without PMIx_Finalize, the launcher counts an exit as abnormal */
    if (graceful)
        PMIx_Finalize(NULL, 0);
    pmix_up = 0;
}

const struct boot_method boot_method_pmix = {
    "pmix", pmix_init, pmix_allgather, pmix_barrier, pmix_finalize,
};
