/*
 * boot_check.c — the settings every rank of a job must share, checked once
 * when the job starts.
 *
 * Some MPIV_* variables describe the wire, not the process: a packet's
 * size (the receiver's buffers must hold what the sender puts in one), the
 * eager limit (which side of it a message falls on decides the protocol
 * both sides run), the network backend and libfabric's provider (ranks on
 * different ones cannot reach each other). Ranks that disagree would
 * misread each other's packets or wait for each other forever, so every
 * rank compares its settings with everybody's and all fail together, with
 * a message naming the setting and two ranks' values.
 *
 * In the common case this costs one allgather of 8 bytes per rank (a
 * digest of the settings); the settings themselves are exchanged only when
 * the digests differ, to say what differs.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot.h"

enum { SHARED_COUNT = 7, SHARED_LEN = 64 };

/* MPIV_EAGER_CREDIT: a sender counts its eager bytes against its own
 * value, the receiver's memory is what it bounds. */
static const char *const shared_names[SHARED_COUNT] = {
    "MPIV_PACKET_SIZE", "MPIV_EAGER_LIMIT", "MPIV_NET", "MPIV_OFI_PROVIDER", "MPIV_EAGER_CREDIT",
    "MPIV_SHM_EAGER_LIMIT", "MPIV_SHM_RING",
};

/* Each shared setting as text: what the message prints and what is
 * compared, so that one comparison serves numbers and strings. */
static void shared_values(const struct util_config *cfg, char v[SHARED_COUNT][SHARED_LEN])
{
    static const char *const nets[] = {"auto", "ofi", "ibv", "shm"};
    memset(v, 0, SHARED_COUNT * SHARED_LEN);
    snprintf(v[0], SHARED_LEN, "%" PRId64, cfg->packet_size);
    snprintf(v[1], SHARED_LEN, "%" PRId64, cfg->eager_limit);
    snprintf(v[2], SHARED_LEN, "%s",
             cfg->net >= 0 && cfg->net < 4 ? nets[cfg->net] : "(unknown)");
    snprintf(v[3], SHARED_LEN, "%s", cfg->ofi_provider[0] ? cfg->ofi_provider : "(unset)");
    snprintf(v[4], SHARED_LEN, "%" PRId64, cfg->eager_credit);
    snprintf(v[5], SHARED_LEN, "%" PRId64, cfg->shm_eager_limit);
    snprintf(v[6], SHARED_LEN, "%" PRId64, cfg->shm_ring);
}

/* FNV-1a, 64 bits: equal settings give equal digests on every rank. */
static uint64_t digest(const void *p, size_t len)
{
    const unsigned char *b = p;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

int boot_check_shared(const struct util_config *cfg)
{
    int rank, size;
    if (!cfg)
        return util_err(MPIV_ERR_ARG, "bootstrap: boot_check_shared without a configuration");
    if (boot_whoami(&rank, &size))
        return util_err(MPIV_ERR_STATE, "bootstrap: boot_check_shared before boot_init");
    char mine[SHARED_COUNT][SHARED_LEN];
    shared_values(cfg, mine);
    uint64_t d = digest(mine, sizeof mine);
    uint64_t *ds = malloc((size_t)size * sizeof *ds);
    if (!ds)
        return util_err(MPIV_ERR_NO_RESOURCES, "bootstrap: out of memory");
    int rc = boot_allgather(&d, sizeof d, ds);
    int odd = -1; /* the first rank whose settings differ from rank 0's */
    for (int r = 1; rc == MPIV_SUCCESS && r < size && odd < 0; r++)
        if (ds[r] != ds[0])
            odd = r;
    free(ds);
    if (rc || odd < 0)
        return rc;
    /* every rank saw the same digests, so every rank is here: swap the
     * settings themselves to say which one differs */
    char (*all)[SHARED_COUNT][SHARED_LEN] = malloc((size_t)size * sizeof *all);
    if (!all)
        return util_err(MPIV_ERR_NO_RESOURCES, "bootstrap: out of memory");
    if ((rc = boot_allgather(mine, sizeof mine, all))) {
        free(all);
        return rc;
    }
    int i = 0;
    while (i < SHARED_COUNT - 1 && strcmp(all[0][i], all[odd][i]) == 0)
        i++;
    rc = util_err(MPIV_ERR_CONFIG,
                  "%s differs: rank 0 has %s, rank %d has %s (every rank of a job must have "
                  "the same)", shared_names[i], all[0][i], odd, all[odd][i]);
    free(all);
    return rc;
}
