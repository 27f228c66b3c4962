/*
 * mpiv_finalize's rules (issue 17, item 8), run alone (one rank) and under
 * mpiv_run with 2 ranks, where rank 0 still has ULTs alive at its first
 * call:
 *   - ULTs still alive: MPIV_ERR_STATE at once, with the number alive in
 *     the detail, before the barrier (the other ranks are not let go), and
 *     MPIv stays usable: messages, spawns, joins; after joining them, the
 *     next call finalizes (with 2 ranks: meets the other rank's barrier);
 *   - from a ULT: MPIV_ERR_STATE, nothing else happens;
 *   - after a successful call: MPIV_ERR_STATE at once.
 * A plain program (not Check): mpiv_init and mpiv_finalize are once per
 * process. Exit status 0 if every check holds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpiv.h"

static int me = -1;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s (detail: %s)\n", me, __FILE__, \
                    __LINE__, #cond, mpiv_error_detail());                                   \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static mpiv_counter_t gate;

static void *wait_gate(void *arg)
{
    mpiv_counter_wait(&gate);
    return arg;
}

static void *ret_arg(void *arg) { return arg; }

static void *finalize_from_ult(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)mpiv_finalize();
}

int main(void)
{
    CHECK(mpiv_init(NULL, NULL) == MPIV_SUCCESS);
    me = mpiv_rank();

    mpiv_ult_t u;
    void *r;
    CHECK(mpiv_ult_spawn(finalize_from_ult, NULL, MPIV_WORKER_ANY, &u) == MPIV_SUCCESS);
    CHECK(mpiv_ult_join(u, &r) == MPIV_SUCCESS);
    CHECK((intptr_t)r == MPIV_ERR_STATE);
    CHECK(mpiv_initialized() == 1);

    if (me == 0) {
        mpiv_ult_t w[3];
        CHECK(mpiv_counter_init(&gate, 1) == MPIV_SUCCESS);
        for (intptr_t i = 0; i < 3; i++)
            CHECK(mpiv_ult_spawn(wait_gate, (void *)(i + 10), MPIV_WORKER_ANY, &w[i]) ==
                  MPIV_SUCCESS);
        CHECK(mpiv_finalize() == MPIV_ERR_STATE);
        CHECK(strstr(mpiv_error_detail(), "3 ULTs are still alive") != NULL);
        CHECK(mpiv_initialized() == 1);
        /* still usable: a message to ourselves, a new ULT */
        char out[] = "still here", in[sizeof out] = "";
        CHECK(mpiv_send(out, sizeof out, 0, 7) == MPIV_SUCCESS);
        CHECK(mpiv_recv(in, sizeof in, 0, 7, NULL) == MPIV_SUCCESS);
        CHECK(strcmp(in, out) == 0);
        CHECK(mpiv_ult_spawn(ret_arg, (void *)5, MPIV_WORKER_ANY, &u) == MPIV_SUCCESS);
        CHECK(mpiv_ult_join(u, &r) == MPIV_SUCCESS && r == (void *)5);
        /* one left alive: the count says so */
        CHECK(mpiv_counter_add(&gate, -1) == MPIV_SUCCESS);
        for (intptr_t i = 0; i < 2; i++) {
            CHECK(mpiv_ult_join(w[i], &r) == MPIV_SUCCESS);
            CHECK(r == (void *)(i + 10));
        }
        CHECK(mpiv_finalize() == MPIV_ERR_STATE);
        CHECK(strstr(mpiv_error_detail(), "1 ULT is still alive") != NULL);
        CHECK(mpiv_ult_join(w[2], &r) == MPIV_SUCCESS && r == (void *)12);
        CHECK(mpiv_counter_destroy(&gate) == MPIV_SUCCESS);
    }

    CHECK(mpiv_finalize() == MPIV_SUCCESS);
    CHECK(mpiv_initialized() == 0);
    CHECK(mpiv_finalize() == MPIV_ERR_STATE);
    CHECK(strstr(mpiv_error_detail(), "not initialised") != NULL);
    return 0;
}
