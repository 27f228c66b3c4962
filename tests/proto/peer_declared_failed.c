/*
 * The transport declares a peer failed while a receive from it is posted
 * (injected: a failed arrival on rank 1). The posted receive must complete
 * with MPIV_ERR_PEER, and a receive posted afterwards must fail at once,
 * instead of either waiting forever. Then rank 1 ends the job (its view of
 * rank 0 is gone for good), and the test passes on its message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpiv.h"
#include "proto/proto.h"

/* Fails the arrival of a user message (not the barrier's, which travel in
 * the collective context). */
static enum srv_fault_action fail_arrivals(const struct srv_fault_event *ev, void *arg)
{
    (void)arg;
    struct proto_hdr h;
    if (ev->point != SRV_FAULT_RECV || ev->len < sizeof h)
        return SRV_FAULT_PASS;
    memcpy(&h, ev->data, sizeof h);
    if (h.ctx == HT_CTX_USER)
        return SRV_FAULT_FAIL;
    return SRV_FAULT_PASS;
}

int main(void)
{
    if (mpiv_init(NULL, NULL) != MPIV_SUCCESS || mpiv_size() != 2)
        return 1;
    char buf[64] = "hello";
    mpiv_request_t r;
    /* rank 1: receive posted and hook set before rank 0 can send */
    if (mpiv_rank() == 1) {
        if (mpiv_irecv(buf, sizeof buf, 0, 1, &r) != MPIV_SUCCESS)
            return 1;
        srv_fault_set(fail_arrivals, NULL);
    }
    if (mpiv_barrier() != MPIV_SUCCESS)
        return 1;
    if (mpiv_rank() == 0) {
        mpiv_send(buf, sizeof buf, 1, 2); /* its arrival is what fails */
        mpiv_recv(buf, sizeof buf, 1, 3, NULL); /* the job ends meanwhile */
        return 4;
    }
    int rc = mpiv_wait(&r, NULL);
    int rc2 = mpiv_recv(buf, sizeof buf, 0, 5, NULL);
    printf("rank 1: posted receive: %s, later receive: %s\n", mpiv_strerror(rc),
           mpiv_strerror(rc2));
    fflush(stdout);
    _exit(rc == MPIV_ERR_PEER && rc2 == MPIV_ERR_PEER ? 3 : 5);
}
