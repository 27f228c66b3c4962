/*
 * The transport declares a peer failed while a receive from it is posted
 * (injected: a failed arrival on rank 1). The posted receive must complete
 * with MPIV_ERR_PEER, and a receive posted afterwards must fail at once,
 * instead of either waiting forever. From a pthread, a ULT started with its
 * receive (mpiv_ult_spawn_recv) is posted too: it must run, and find
 * MPIV_ERR_PEER in its status. Then rank 1 ends the job (its view of
 * rank 0 is gone for good), and the test passes on its message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fail_arrivals.h"
#include "mpiv.h"
#include "proto/proto.h"
#include "sched/sched.h"

static char buf[64] = "hello";
static int rc = -1, rc2 = -1;
static char sbuf[64];
/* the ULT posted before the failure (s), and the one after it (l) */
static mpiv_status_t sst, lst;
static mpiv_ult_t su, lu;
static int spawned = 0, sran = 0, spawned_late = 0, lran = 0;

/* A started ULT: marks the flag arg points to. */
static void *started(void *arg)
{
    *(int *)arg = 1;
    return NULL;
}

/* Rank 1: the receive posted and the hook set before rank 0 can send, then
 * the wait (rank 0 sends only a while after the barrier, so the failure
 * reaches a waiting receive), then a receive posted afterwards. */
static void *rank1(void *arg)
{
    (void)arg;
    mpiv_request_t r;
    if (mpiv_irecv(buf, sizeof buf, 0, 1, &r) != MPIV_SUCCESS)
        return NULL;
    /* not beside the lone ULT: a second ULT on its worker, even one that
     * never ran, makes its waits switch out, which that run counts */
    if (arg && mpiv_ult_spawn_recv(started, &sran, MPIV_WORKER_ANY, sbuf, sizeof sbuf, 0, 7, &sst,
                                   &su) == MPIV_SUCCESS)
        spawned = 1;
    srv_fault_set(fail_user_arrivals, NULL);
    if (mpiv_barrier() != MPIV_SUCCESS)
        return NULL;
    rc = mpiv_wait(&r, NULL);
    rc2 = mpiv_recv(buf, sizeof buf, 0, 5, NULL);
    /* posted after the failure: fails as it is posted, and the ULT still
     * starts, with the error in its status */
    if (arg && mpiv_ult_spawn_recv(started, &lran, MPIV_WORKER_ANY, sbuf, sizeof sbuf, 0, 8,
                                   &lst, &lu) == MPIV_SUCCESS)
        spawned_late = 1;
    return NULL;
}

int main(int argc, char **argv)
{
    int in_ult = argc > 1 && !strcmp(argv[1], "ult");
    if (mpiv_init(NULL, NULL) != MPIV_SUCCESS || mpiv_size() != 2)
        return 1;
    if (mpiv_rank() == 0) {
        if (mpiv_barrier() != MPIV_SUCCESS)
            return 1;
        usleep(200000); /* rank 1 is waiting by now */
        mpiv_send(buf, sizeof buf, 1, 2); /* its arrival is what fails */
        mpiv_recv(buf, sizeof buf, 1, 3, NULL); /* the job ends meanwhile */
        return 4;
    }
    uint64_t switched = sched_blocked_waits();
    if (in_ult) {
        mpiv_ult_t u;
        if (mpiv_ult_spawn(rank1, NULL, 0, &u) != MPIV_SUCCESS ||
            mpiv_ult_join(u, NULL) != MPIV_SUCCESS)
            _exit(6);
    } else {
        rank1(&in_ult);
    }
    switched = sched_blocked_waits() - switched;
    printf("rank 1: posted receive: %s, later receive: %s, waits switched out: %llu\n",
           mpiv_strerror(rc), mpiv_strerror(rc2), (unsigned long long)switched);
    int spawn_ok = 1;
    if (!in_ult) {
        spawn_ok = spawned && mpiv_ult_join(su, NULL) == MPIV_SUCCESS && sran &&
                   sst.error == MPIV_ERR_PEER && spawned_late &&
                   mpiv_ult_join(lu, NULL) == MPIV_SUCCESS && lran && lst.error == MPIV_ERR_PEER;
        printf("rank 1: ULT started with its receive: %s, ran %d, status %s; posted after the "
               "failure: %s, ran %d, status %s\n",
               spawned ? "spawned" : "NOT spawned", sran, mpiv_strerror(sst.error),
               spawned_late ? "spawned" : "NOT spawned", lran, mpiv_strerror(lst.error));
    }
    fflush(stdout);
    _exit(rc == MPIV_ERR_PEER && rc2 == MPIV_ERR_PEER && switched == 0 && spawn_ok ? 3 : 5);
}
