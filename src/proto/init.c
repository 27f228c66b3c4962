/*
 * init.c — mpiv_init / mpiv_finalize: bring the parts up in dependency order
 * (configuration, packet pool, server and bootstrap, matching table,
 * scheduler) and down in reverse.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "proto.h"
#include "pktpool/pktcopy.h"
#include "util/bias.h"

int mpiv_initialized(void) { return proto.initialized; }
int mpiv_rank(void) { return proto.initialized ? proto.rank : -1; }
int mpiv_size(void) { return proto.initialized ? proto.size : 0; }

static size_t default_buckets(int64_t packets)
{
    /* about two buckets per packet: unexpected packets and posted receives
     * together rarely exceed the pool, and a bucket holds three */
    size_t n = 1024;
    while (n < (size_t)packets * 2)
        n <<= 1;
    return n;
}

int mpiv_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (proto.initialized)
        return util_err(MPIV_ERR_STATE, "mpiv_init: already initialised");
    util_err_clear();
    struct util_config *cfg = &proto.cfg;
    int rc = util_config_load(cfg);
    if (rc) {
        util_log_error("%s", mpiv_error_detail());
        return rc;
    }
    size_t payload = (size_t)cfg->packet_size - sizeof(struct proto_hdr);
    /* util_config_load rejected a limit above the payload */
    proto.eager_limit = cfg->eager_limit ? (size_t)cfg->eager_limit : payload;
    atomic_init(&proto.unexpected, 0);
    /* p2p.c, I5: half of what the posted receives leave, so senders always
     * keep the other half (recv_depth < packets, checked by the config) */
    proto.unexpected_max = (long)(cfg->packets - cfg->recv_depth) / 2;

    rc = pkt_pool_create(&proto.pool, (size_t)cfg->packets, (size_t)cfg->packet_size,
                         (int)cfg->workers);
    if (rc)
        goto fail;
    rc = ht_create(&proto.ht, cfg->ht_buckets ? (size_t)cfg->ht_buckets
                                              : default_buckets(cfg->packets));
    if (rc)
        goto fail_pool;
    rc = proto_handle_init();
    if (rc)
        goto fail_ht;
    rc = srv_init(cfg, proto.pool, &proto.rank, &proto.size);
    if (rc)
        goto fail_rdv;
    util_log_set_rank(proto.rank);
    proto.max_write = srv_max_write();
    /* I6 (p2p.c): what a lagging receiver may hold per peer: MPIV_EAGER_CREDIT,
     * by default 4 MiB or a window of 64 full packets if packets are large. */
    proto.credit_max = 64 * (long)cfg->packet_size;
    if (proto.credit_max < (4l << 20))
        proto.credit_max = 4l << 20;
    if (cfg->eager_credit)
        proto.credit_max = (long)cfg->eager_credit;
    /* I8: what the sender may hold in copies per peer. Far above the
     * credit, because it counts copies until the sender hears they were
     * taken, which can be well after the receiver took them: a send that
     * finds it full waits for its own receive, and one that did so on
     * stale counts could hang a program that relies on small sends
     * returning. */
    proto.buffered_max = 16 * proto.credit_max;
    rc = proto_p2p_init();
    if (rc)
        goto fail_srv;
    proto_comm_init();
    srv_set_handlers(proto_on_packet, proto_on_imm, proto_on_peer_failed);
    srv_set_data_handler(proto_on_data);
    srv_set_batch_handler(proto_on_batch);
    /* Without a server thread an idle worker is what moves the network for
     * its blocked ULTs, so it must not sleep while it has any; and one
     * without ULTs stays out of the network (sched.c), so that it never
     * takes the one-thread fast path from the thread that communicates.
     * Set before the workers start, for their first idle spell. */
    sched_set_idle_stay(srv_inline());
    rc = sched_init(cfg);
    if (rc)
        goto fail_srv;
    rc = srv_start();
    if (rc)
        goto fail_sched;
    /* An idle worker polls the network before it gives its core up: where
     * a rank's worker and server share a core (2 ranks on 2 cores), the
     * waiting side then sees its message at once instead of after the
     * sleeping server's next timer tick. */
    sched_set_idle_hook(srv_progress);
    proto.initialized = 1;
    /* every rank is up before anybody sends: a message to a rank whose
     * server has not posted receives yet would be lost on some providers */
    rc = srv_boot_barrier_all();
    if (rc) {
        proto.initialized = 0;
        goto fail_sched;
    }
    /* With a server thread two threads always communicate: no bias. */
    if (cfg->one_thread && srv_inline())
        util_bias_arm();
    return MPIV_SUCCESS;

fail_sched:
    sched_finalize();
fail_srv:
    proto_p2p_fini();
    /* the others are in (or on their way to) the start-up barrier: let go
     * without joining it, so the launcher fails them instead */
    srv_abandon();
fail_rdv:
    proto_handle_fini();
fail_ht:
    ht_destroy(proto.ht);
fail_pool:
    pkt_pool_destroy(proto.pool);
fail:
    util_log_error("mpiv_init failed: %s%s%s", mpiv_strerror(rc),
                   *mpiv_error_detail() ? ": " : "", mpiv_error_detail());
    proto.ht = NULL;
    proto.pool = NULL;
    return rc;
}

int mpiv_finalize(void)
{
    PROTO_CHECK_INIT(); /* also a second call after a successful one */
    if (sched_in_ult())
        return util_err(MPIV_ERR_STATE, "mpiv_finalize called from a ULT: call it from the "
                                        "thread that called mpiv_init");
    /* Before the barrier: once it is passed the other ranks finalize, so a
     * failure after it could not be retried. With no ULT alive, spawns are
     * refused from here on and sched_finalize below cannot fail for them;
     * with some, MPIv stays as it was, to join them and call again. */
    uint64_t live = sched_close();
    if (live)
        return util_err(MPIV_ERR_STATE,
                        "mpiv_finalize: %llu ULT%s still alive: join %s, then call "
                        "mpiv_finalize again",
                        (unsigned long long)live, live == 1 ? " is" : "s are",
                        live == 1 ? "it" : "them");
    /* nobody stops its server while a peer may still be sending to it */
    int rc = mpiv_barrier();
    util_bias_disarm();
    sched_set_idle_stay(false);
    sched_set_idle_hook(NULL);
    int rc2 = sched_finalize();
    if (rc2 == MPIV_ERR_STATE)
        return rc2; /* ULTs still alive: the user must join them first */
    proto.initialized = 0;
    int rc3 = srv_finalize();
    proto_buffered_drop(); /* before the handle table goes */
    proto_comm_fini();
    proto_p2p_fini();
    proto_handle_fini();
    proto_req_cache_flush();
    size_t unreceived = proto_unreceived_drop();
    if (unreceived)
        util_log_info("mpiv_finalize: %zu message%s arrived that no receive took", unreceived,
                      unreceived == 1 ? "" : "s");
    ht_destroy(proto.ht);
    pkt_pool_destroy(proto.pool);
    proto.ht = NULL;
    proto.pool = NULL;
    /* Every copy is back by now (the server freed its queue, the table's
     * were dropped above); one still held would be a leak, and then the
     * copies' memory stays rather than be freed under it. */
    size_t held = pkt_copy_release();
    if (held)
        util_log_warn("mpiv_finalize: %zu packet copies were never given back", held);
    return rc ? rc : rc2 ? rc2 : rc3;
}
