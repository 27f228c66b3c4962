/*
 * boot_int.h — what each bootstrap method provides to boot.c, which picks
 * one at boot_init and forwards the calls. Private to src/boot/.
 */
#ifndef MPIV_BOOT_INT_H
#define MPIV_BOOT_INT_H

#include <stdbool.h>
#include <stddef.h>

struct boot_method {
    const char *name;
    int (*init)(int *rank, int *size);
    int (*allgather)(const void *mine, size_t len, void *all);
    int (*barrier)(void);
    /* graceful: the rank leaves on purpose (mpiv_run hears BYE, PMIx
     * PMIx_Finalize); otherwise it only lets go, so the launcher sees a
     * rank that broke off and ends the job */
    void (*finalize)(bool graceful);
};

extern const struct boot_method boot_method_run;
extern const struct boot_method boot_method_pmix;

/* MPIV_BOOT_TIMEOUT in seconds (default 60), or -1 with a detail recorded
 * when the value is not an integer from 1 to 86400. */
int boot_timeout_s(void);

#endif
