/*
 * fail_arrivals.h — a fault hook (server.h) for the tests in which the
 * transport declares a peer failed: every arriving user message fails, as
 * a broken transfer would, and the receiving rank declares its sender
 * failed. Collective traffic (the barrier's) passes, so that the ranks can
 * still line up before the failure.
 */
#ifndef TEST_FAIL_ARRIVALS_H
#define TEST_FAIL_ARRIVALS_H

#include <string.h>

#include "proto/proto.h"

static inline enum srv_fault_action fail_user_arrivals(const struct srv_fault_event *ev, void *arg)
{
    (void)arg;
    struct proto_hdr h;
    if (ev->point != SRV_FAULT_RECV || ev->len < sizeof h)
        return SRV_FAULT_PASS;
    memcpy(&h, ev->data, sizeof h);
    return h.ctx == HT_CTX_USER ? SRV_FAULT_FAIL : SRV_FAULT_PASS;
}

#endif
