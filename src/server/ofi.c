/*
 * ofi.c — the libfabric backend: one FI_EP_RDM endpoint with FI_MSG and
 * FI_RMA, one completion queue, one table address vector.
 *
 * How the pieces map:
 *  - Ranks are fi_addr_t values: addresses are inserted into an FI_AV_TABLE
 *    in rank order, so rank r is fi_addr r (checked at insertion).
 *  - A packet travels with fi_senddata, whose remote CQ data is the sender's
 *    rank. The source a completion reports to the core is the transport's,
 *    never that claim: with FI_SOURCE (shm, tcp;ofi_rxm grant it) the CQ is
 *    read with fi_cq_readfrom and the fi_addr is the rank; a completion
 *    whose fi_addr is out of range or disagrees with the CQ data is
 *    dropped, logged and counted. Only a provider without FI_SOURCE makes
 *    us take the CQ data as the source (said once at start-up). Packets up
 *    to inject_size go with fi_injectdata and are free as soon as the call
 *    returns.
 *  - An RDMA write with immediate is fi_writedata with CQ data
 *    (writer's rank << 32 | imm); the target's CQ reports it with
 *    FI_REMOTE_CQ_DATA without consuming a receive buffer (we do not accept
 *    providers that need FI_RX_CQ_DATA). fi_cq(3) only promises the length
 *    of receives, and tcp;ofi_rxm indeed reports 0 for remote writes, so
 *    ofi_exchange probes with a write to ourselves: a provider that does
 *    not report the length gets "notified writes" instead — fi_writemsg
 *    with FI_DELIVERY_COMPLETE, and once it completes (the data is in the
 *    target's memory) a 16-byte inject {imm, len} whose CQ data is the
 *    rank with OFI_NOTE_BIT set; the target turns that receive into the
 *    immediate. It costs one more one-way message, only on such providers.
 *    The length such an immediate reports is the writer's (no one else
 *    knows it); a notification that is not exactly 16 bytes is dropped. An
 *    announcement that cannot be sent fails the write's own completion
 *    (MPIV_ERR_NET): the bytes are there, but the target will never know.
 *  - Operation contexts: a packet's srv_ctx[0..3] is its struct fi_context
 *    (FI_CONTEXT providers); srv_ctx[4] says whether it was posted as a
 *    send or a receive, which error completions need. Providers that ask
 *    for FI_CONTEXT2 (64 bytes) get a side table indexed by packet index.
 *    An RDMA op's be[] is 64 bytes, room for either.
 *  - Memory registration follows the provider's mr_mode: FI_MR_LOCAL (pass
 *    descriptors for local buffers: we always do), FI_MR_VIRT_ADDR (remote
 *    addresses are virtual addresses, else offsets from the region start),
 *    FI_MR_PROV_KEY (the provider picks keys, else we hand out increasing
 *    ones, never reused, so a stale key cannot reach a new region; in a
 *    mixed job on a provider that addresses by offset, a key carries its
 *    region's base as well, see ofi_reg and ofi_target, and comes back
 *    only after 2^16 registrations at one address),
 *    FI_MR_ALLOCATED (only backed memory: true of user buffers),
 *    FI_MR_ENDPOINT (bind each region to the endpoint and enable it).
 *  - The endpoint is FI_THREAD_SAFE: any thread may post; only the thread
 *    holding the core's progress lock reads the CQ.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <netinet/in.h>
#include <pthread.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "boot/boot.h"
#include "server/srv_int.h"
#include "server/srv_ratelimit.h"
#include "server/srv_test_hooks.h"

#define OFI_VERSION FI_VERSION(1, 9)
#define OFI_ADDR_MAX 120 /* bytes of an endpoint name we accept */

enum { OFI_POSTED_SEND = 1, OFI_POSTED_RECV = 2 };
#define OFI_NOTE_BIT (1ull << 63)
/* One RDMA write at most (the core splits longer ones); a power of two
 * keeps the pieces aligned. */
#define OFI_MAX_WRITE ((size_t)1 << 30)
/* Bits of a key_base key that hold the region's base (user addresses of
 * x86-64 and aarch64 fit in 48). */
#define OFI_KEY_BASE_BITS 48
/* Seconds the write-length probe may take before start-up fails. */
#define OFI_PROBE_S 30

struct srv_backend {
    int rank, size;
    char prov[64];
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    uint64_t mr_mode;
    /* Keys that carry their region's base (a mixed job on a provider
     * that addresses by offset and lets us pick keys, see ofi_reg). */
    bool key_base;
    size_t inject_size;
    bool ctx2; /* provider wants struct fi_context2 */
    /* the packet region */
    struct pkt_pool *pool;
    struct fid_mr *pool_mr;
    void *pool_desc;
    size_t data_size;
    uintptr_t pool_base, pool_end;
    struct fi_context2 *ctx2_table; /* one per packet when ctx2 */
    _Atomic uint64_t next_key;
    bool notify;                      /* writes announced by a message    */
    struct srv_rdma_op *note_pending; /* notifications not injected yet  */
    bool source;                      /* FI_SOURCE: fi_cq_readfrom names the peer */
    size_t max_write;                 /* min(OFI_MAX_WRITE, max_msg_size) */
    struct srv_ratelimit drops;       /* completions dropped as malformed */
    int fail_notes;                   /* test hook: announcements to fail */
};

/*
 * libfabric is loaded when this backend first starts (ofi_load), not with
 * libmpiv. Loading it runs its dependencies' constructors, and the psm
 * provider's libinfinipath sleeps in one, calibrating its clock, in every
 * process that links libfabric, before main (docs/perf/launcher.md has how
 * long). A job on one host (shm, the default there) never loads it.
 * These five are all of libfabric's own functions that we call (the rest
 * of its API is inline, through each object's ops table); each is bound
 * at the symbol version a plain link against the same libfabric picks
 * (cmake/FabricSymbols.cmake), so the library's structs are the headers';
 * the library is the one that link named (MPIV_FABRIC_SONAME, in
 * MPIV_FABRIC_LIBDIR). Loaded once, under fab_lock, and never unloaded.
 */
static struct {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                   struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
} fab;
static pthread_mutex_t fab_lock = PTHREAD_MUTEX_INITIALIZER;
static bool fab_loaded;

static int ofi_fail(const char *what, int fi_rc)
{
    return util_err(MPIV_ERR_NET, "libfabric %s: %s (%d)", what, fab.strerror(-fi_rc), fi_rc);
}

/* --- contexts ------------------------------------------------------------ */

static void *pkt_ctx(struct srv_backend *be, pkt_t *p, int kind)
{
    p->srv_ctx[4] = (void *)(uintptr_t)kind;
    if (be->ctx2)
        return &be->ctx2_table[p->idx];
    return &p->srv_ctx[0];
}

/* The packet behind a context, or NULL if the context is an RDMA op. */
static pkt_t *ctx_pkt(struct srv_backend *be, void *ctx)
{
    uintptr_t c = (uintptr_t)ctx;
    if (be->ctx2) {
        uintptr_t t = (uintptr_t)be->ctx2_table;
        if (c >= t && c < t + pkt_count(be->pool) * sizeof(struct fi_context2))
            return pkt_by_index(be->pool, (uint32_t)((c - t) / sizeof(struct fi_context2)));
        return NULL;
    }
    if (c >= be->pool_base && c < be->pool_end)
        return (pkt_t *)(c - offsetof(pkt_t, srv_ctx));
    return NULL;
}

/* --- foreign signal handlers ----------------------------------------------- */

/* Whether fn lives in the psm provider's libraries (libinfinipath, libpsm*). */
static bool psm_owns(void *fn)
{
    Dl_info di;
    if (!fn || !dladdr(fn, &di) || !di.dli_fname)
        return false;
    const char *base = strrchr(di.dli_fname, '/');
    base = base ? base + 1 : di.dli_fname;
    return strncmp(base, "libinfinipath", 13) == 0 || strncmp(base, "libpsm", 6) == 0;
}

/* The handlers in place just before ofi_load's dlopen (a program's own,
 * since we load after main): what a psm handler is replaced by once that
 * has run; before it, the default action. */
static struct sigaction before_load[NSIG];
static bool have_before_load;

/*
 * libfabric links the psm provider, whose libinfinipath installs handlers
 * for SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGINT and SIGTERM from its
 * constructor, before main: they print a backtrace and exit(1), so a rank
 * that crashes or is terminated is reported as "exited with status 1" and
 * leaves no core. Unless the user set IPATH_NO_BACKTRACE (which makes the
 * library install none), every handler that lives in those libraries is
 * replaced (by the one in place before ofi_load's dlopen, else by the
 * default action): when libmpiv loads (a program may link
 * libfabric itself), around ofi_load's dlopen, and again after
 * fi_getinfo, which may dlopen more providers. IPATH_NO_BACKTRACE=1 is
 * exported first, so that a copy loaded later, or in a child, installs
 * nothing.
 */
static void ofi_drop_psm_handlers(void)
{
    static bool user_set, checked;
    if (!checked) {
        checked = true;
        user_set = getenv("IPATH_NO_BACKTRACE") != NULL;
        if (!user_set)
            setenv("IPATH_NO_BACKTRACE", "1", 0);
    }
    if (user_set)
        return;
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) != 0)
            continue;
        void *fn = (sa.sa_flags & SA_SIGINFO) ? (void *)sa.sa_sigaction : (void *)sa.sa_handler;
        if (fn == (void *)SIG_DFL || fn == (void *)SIG_IGN || !psm_owns(fn))
            continue;
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, have_before_load ? &before_load[sig] : &dfl, NULL);
    }
}

__attribute__((constructor)) static void ofi_at_load(void) { ofi_drop_psm_handlers(); }

/* Stores the address of `name` at `version` into the function pointer at
 * fp (memcpy: ISO C has no cast from an object pointer to a function
 * pointer). An empty version: a libfabric built without symbol versions. */
static bool fab_bind(void *lib, const char *name, const char *version, void *fp)
{
    void *sym = *version ? dlvsym(lib, name, version) : dlsym(lib, name);
    if (sym)
        memcpy(fp, &sym, sizeof sym);
    return sym != NULL;
}

/* libfabric, and MPIV_SUCCESS; or MPIV_ERR_NET saying what is missing.
 * The test hook MPIV_TEST_OFI_LIBRARY names another library to load
 * (tests/server: one that is not there, or one without libfabric's
 * functions). */
static int ofi_load(void)
{
    pthread_mutex_lock(&fab_lock);
    int rc = MPIV_SUCCESS;
    if (!fab_loaded) {
        const char *name = getenv("MPIV_TEST_OFI_LIBRARY");
        void *lib = NULL;
        ofi_drop_psm_handlers(); /* exports IPATH_NO_BACKTRACE first */
        for (int sig = 1; sig < NSIG; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                sigaction(sig, NULL, &before_load[sig]);
        have_before_load = true;
        if (!name || !*name) {
            /* the copy we were configured with first, then the loader's
             * search (a libfabric moved since, or found through
             * LD_LIBRARY_PATH) */
            name = MPIV_FABRIC_SONAME;
            if (*MPIV_FABRIC_LIBDIR)
                lib = dlopen(MPIV_FABRIC_LIBDIR "/" MPIV_FABRIC_SONAME, RTLD_NOW | RTLD_LOCAL);
        }
        if (!lib)
            lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            rc = util_err(MPIV_ERR_NET,
                          "ofi: cannot load %s (%s); the ofi backend needs libfabric "
                          "(Debian: libfabric1), or choose another with MPIV_NET",
                          name, dlerror());
        } else if (!fab_bind(lib, "fi_getinfo", MPIV_FI_GETINFO_VERSION, &fab.getinfo) ||
                   !fab_bind(lib, "fi_freeinfo", MPIV_FI_FREEINFO_VERSION, &fab.freeinfo) ||
                   !fab_bind(lib, "fi_dupinfo", MPIV_FI_DUPINFO_VERSION, &fab.dupinfo) ||
                   !fab_bind(lib, "fi_fabric", MPIV_FI_FABRIC_VERSION, &fab.fabric) ||
                   !fab_bind(lib, "fi_strerror", MPIV_FI_STRERROR_VERSION, &fab.strerror)) {
            rc = util_err(MPIV_ERR_NET,
                          "ofi: %s lacks a libfabric function at the version libmpiv was "
                          "built for (fi_getinfo@%s ...): %s",
                          name, MPIV_FI_GETINFO_VERSION, dlerror());
            memset(&fab, 0, sizeof fab);
            dlclose(lib);
        } else {
            fab_loaded = true;
        }
        ofi_drop_psm_handlers();
    }
    pthread_mutex_unlock(&fab_lock);
    return rc;
}

/* --- init ------------------------------------------------------------------ */

static int ofi_pick_provider(const struct util_config *cfg, char *prov, size_t n)
{
    if (cfg->ofi_provider[0]) {
        snprintf(prov, n, "%s", cfg->ofi_provider);
        return MPIV_SUCCESS;
    }
    bool one_host;
    int rc = srv_all_on_one_host(&one_host);
    if (rc)
        return rc;
    snprintf(prov, n, "%s", one_host ? "shm" : "tcp;ofi_rxm");
    return MPIV_SUCCESS;
}

static void ofi_finalize(struct srv_backend *be);

/* Whether ADDR, in libfabric's address format FMT, is a loopback address
 * (127.0.0.0/8 or ::1): one no other host can reach. */
static bool ofi_addr_is_loopback(uint32_t fmt, const void *addr, size_t len)
{
    if (!addr)
        return false;
    const struct sockaddr *sa = addr;
    if (fmt != FI_SOCKADDR && fmt != FI_SOCKADDR_IN && fmt != FI_SOCKADDR_IN6)
        return false;
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = addr;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = addr;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return false;
}

/* A job that spans hosts must not listen on a loopback interface: the
 * other hosts' ranks would dial 127.0.0.1 and reach nothing (tcp's
 * provider lists lo first while a fresh interface has no carrier yet, and
 * ofi_rxm then retries its connection for ever). Keeps in *INFO the first
 * entry whose source address is not loopback, and frees the rest. */
static int ofi_skip_loopback(struct fi_info **info)
{
    bool one_host;
    int rc = srv_all_on_one_host(&one_host);
    if (rc || one_host)
        return rc;
    struct fi_info *fi = *info;
    while (fi && ofi_addr_is_loopback(fi->addr_format, fi->src_addr, fi->src_addrlen))
        fi = fi->next;
    if (!fi)
        return util_err(MPIV_ERR_NET,
                        "ofi: provider %s offers only loopback interfaces (first: %s), and "
                        "this job spans hosts; is the network interface up and has it an "
                        "address? FI_TCP_IFACE names the one to use",
                        (*info)->fabric_attr->prov_name, (*info)->domain_attr->name);
    if (fi == *info)
        return MPIV_SUCCESS;
    struct fi_info *keep = fab.dupinfo(fi);
    if (!keep)
        return util_err(MPIV_ERR_NO_RESOURCES, "ofi: fi_dupinfo failed");
    fab.freeinfo(*info);
    *info = keep;
    return MPIV_SUCCESS;
}

/* libfabric's shm provider names its region in /dev/shm after the pid
 * ("<pid>:<uid>:<n>"). A rank killed with SIGKILL leaves its region behind,
 * and when a later process gets the same pid (pid_max is 32768 on many
 * hosts), the provider finds the stale file, sees that its owner "is
 * alive" (it is itself) and fi_enable fails with EBUSY. A random part in
 * the name keeps two processes from ever meeting on one. Returns 0 or a
 * negative libfabric error. */
static int ofi_name_shm_region(struct srv_backend *be)
{
    if (strcmp(be->info->fabric_attr->prov_name, "shm") != 0)
        return 0;
    uint64_t nonce = util_random_u64();
    char name[64];
    snprintf(name, sizeof name, "mpiv-%d-%016" PRIx64, (int)getpid(), nonce);
    return fi_setname(&be->ep->fid, name, strlen(name) + 1);
}

static int ofi_init(const struct util_config *cfg, int rank, int size, struct srv_backend **out)
{
    struct srv_backend *be = calloc(1, sizeof *be);
    if (!be)
        return util_err(MPIV_ERR_NO_RESOURCES, "ofi: out of memory");
    be->rank = rank;
    be->size = size;
    atomic_init(&be->next_key, 1);
    int rc = ofi_pick_provider(cfg, be->prov, sizeof be->prov);
    if (rc) {
        free(be);
        return rc;
    }

    rc = ofi_load();
    if (rc) {
        free(be);
        return rc;
    }
    struct fi_info *hints = fab.dupinfo(NULL); /* fi_allocinfo */
    if (!hints) {
        free(be);
        return util_err(MPIV_ERR_NO_RESOURCES, "ofi: fi_allocinfo failed");
    }
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA | FI_SOURCE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    /* Same (source, tag) must arrive in order: sends from one endpoint to
     * one peer must not overtake each other. */
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->fabric_attr->prov_name = strdup(be->prov);

    rc = fab.getinfo(OFI_VERSION, NULL, NULL, 0, hints, &be->info);
    if (rc == -FI_ENODATA) {
        /* FI_SOURCE is a secondary capability: retry without it */
        hints->caps &= ~FI_SOURCE;
        rc = fab.getinfo(OFI_VERSION, NULL, NULL, 0, hints, &be->info);
    }
    fab.freeinfo(hints);
    ofi_drop_psm_handlers();
    if (rc) {
        rc = util_err(MPIV_ERR_NET,
                      "libfabric provider '%s' offers no reliable-datagram endpoint with "
                      "messages, RMA and remote CQ data (fi_getinfo: %s); set "
                      "MPIV_OFI_PROVIDER (e.g. shm, tcp;ofi_rxm)",
                      be->prov, fab.strerror(-rc));
        free(be);
        return rc;
    }
    if ((rc = ofi_skip_loopback(&be->info)))
        goto fail;
    struct fi_info *fi = be->info;
    if (fi->domain_attr->cq_data_size < 8) {
        rc = util_err(MPIV_ERR_NET,
                      "libfabric provider '%s' carries %zu bytes of remote CQ data; MPIv "
                      "needs 8",
                      fi->fabric_attr->prov_name, fi->domain_attr->cq_data_size);
        goto fail;
    }
    be->mr_mode = fi->domain_attr->mr_mode;
    /* A mixed job hands shm peers and ofi peers one registration (mr.c,
     * M2), whose raddr is a virtual address. A provider that addresses by
     * offset (tcp;ofi_rxm) and lets us pick keys gets keys that carry
     * their region's base (ofi_reg), from which a writer finds the offset
     * (ofi_target). Otherwise offsets stay, and the core does not mix. */
    be->key_base = srv_mixed_job() && !(be->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY)) &&
                   fi->domain_attr->mr_key_size >= 8;
    be->inject_size = fi->tx_attr->inject_size;
    be->ctx2 = (fi->mode & FI_CONTEXT2) != 0;
    be->source = (fi->caps & FI_SOURCE) != 0;
    be->max_write = OFI_MAX_WRITE;
    if (fi->ep_attr->max_msg_size && fi->ep_attr->max_msg_size < be->max_write)
        be->max_write = fi->ep_attr->max_msg_size;
    if (!be->source)
        util_log_warn("ofi: provider %s cannot name a message's source (no FI_SOURCE); the "
                      "sender's rank in the CQ data is trusted",
                      fi->fabric_attr->prov_name);
    util_log_info("ofi: provider %s, fabric %s, domain %s, mr_mode 0x%" PRIx64
                  ", inject %zu, mode 0x%" PRIx64,
                  fi->fabric_attr->prov_name, fi->fabric_attr->name, fi->domain_attr->name,
                  be->mr_mode, be->inject_size, (uint64_t)fi->mode);

    if ((rc = fab.fabric(fi->fabric_attr, &be->fabric, NULL))) {
        rc = ofi_fail("fi_fabric", rc);
        goto fail;
    }
    if ((rc = fi_domain(be->fabric, fi, &be->domain, NULL))) {
        rc = ofi_fail("fi_domain", rc);
        goto fail;
    }
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = (size_t)size};
    if ((rc = fi_av_open(be->domain, &av_attr, &be->av, NULL))) {
        rc = ofi_fail("fi_av_open", rc);
        goto fail;
    }
    struct fi_cq_attr cq_attr = {
        .format = FI_CQ_FORMAT_DATA,
        .wait_obj = FI_WAIT_NONE,
        .size = fi->tx_attr->size + fi->rx_attr->size,
    };
    if ((rc = fi_cq_open(be->domain, &cq_attr, &be->cq, NULL))) {
        rc = ofi_fail("fi_cq_open", rc);
        goto fail;
    }
    if ((rc = fi_endpoint(be->domain, fi, &be->ep, NULL))) {
        rc = ofi_fail("fi_endpoint", rc);
        goto fail;
    }
    if ((rc = fi_ep_bind(be->ep, &be->av->fid, 0))) {
        rc = ofi_fail("fi_ep_bind(av)", rc);
        goto fail;
    }
    if ((rc = fi_ep_bind(be->ep, &be->cq->fid, FI_TRANSMIT | FI_RECV))) {
        rc = ofi_fail("fi_ep_bind(cq)", rc);
        goto fail;
    }
    if ((rc = ofi_name_shm_region(be))) {
        rc = ofi_fail("fi_setname", rc);
        goto fail;
    }
    if ((rc = fi_enable(be->ep))) {
        rc = ofi_fail("fi_enable", rc);
        goto fail;
    }
    *out = be;
    return MPIV_SUCCESS;
fail:
    ofi_finalize(be); /* closes whatever was opened (be is zeroed) */
    return rc;
}

/* --- memory registration ---------------------------------------------------- */

/* What the provider wants as the target address of a write at the peer's
 * raddr in its region with key rkey: raddr itself, except with key_base
 * keys (every rank of a job has them or none: same provider, same mix),
 * where raddr is a virtual address and the provider wants its offset from
 * the region's base, which the key carries. An raddr below the base makes
 * an offset past any region: the provider refuses it. */
static uint64_t ofi_target(const struct srv_backend *be, uint64_t raddr, uint64_t rkey)
{
    if (!be->key_base)
        return raddr;
    return raddr - (rkey & ((UINT64_C(1) << OFI_KEY_BASE_BITS) - 1));
}

static int ofi_reg(struct srv_backend *be, void *buf, size_t len, uint64_t access,
                   struct fid_mr **mrp)
{
    uint64_t key = 0;
    if (!(be->mr_mode & FI_MR_PROV_KEY))
        key = atomic_fetch_add_explicit(&be->next_key, 1, memory_order_relaxed);
    if (be->key_base) {
        /* base in the low OFI_KEY_BASE_BITS, a generation above it: keys
         * of live regions differ (two live regions with one base would
         * need 2^16 registrations between them), and a key comes back
         * only after 2^16 registrations at the same address */
        if ((uintptr_t)buf >> OFI_KEY_BASE_BITS)
            return util_err(MPIV_ERR_NET, "ofi: address %p above 2^%d: cannot carry it in a key",
                            buf, OFI_KEY_BASE_BITS);
        key = (key << OFI_KEY_BASE_BITS) | (uint64_t)(uintptr_t)buf;
    }
    int rc = fi_mr_reg(be->domain, buf, len, access, 0, key, 0, mrp, NULL);
    if (rc)
        return util_err(MPIV_ERR_NET, "libfabric fi_mr_reg(%p, %zu bytes): %s", buf, len,
                        fab.strerror(-rc));
    if (be->mr_mode & FI_MR_ENDPOINT) {
        if ((rc = fi_mr_bind(*mrp, &be->ep->fid, 0)) || (rc = fi_mr_enable(*mrp))) {
            fi_close(&(*mrp)->fid);
            return ofi_fail("fi_mr_bind/enable", rc);
        }
    }
    return MPIV_SUCCESS;
}

static int ofi_reg_pool(struct srv_backend *be, struct pkt_pool *pool)
{
    void *base;
    size_t len;
    pkt_pool_region(pool, &base, &len);
    be->pool = pool;
    be->data_size = pkt_data_size(pool);
    be->pool_base = (uintptr_t)base;
    be->pool_end = (uintptr_t)base + len;
    if (be->ctx2) {
        be->ctx2_table = calloc(pkt_count(pool), sizeof(struct fi_context2));
        if (!be->ctx2_table)
            return util_err(MPIV_ERR_NO_RESOURCES, "ofi: out of memory for contexts");
    }
    int rc = ofi_reg(be, base, len, FI_SEND | FI_RECV, &be->pool_mr);
    if (rc)
        return rc;
    be->pool_desc = fi_mr_desc(be->pool_mr);
    return MPIV_SUCCESS;
}

static int ofi_mr_reg(struct srv_backend *be, void *buf, size_t len, srv_mr *mr, void **handle)
{
    struct fid_mr *m;
    int rc = ofi_reg(be, buf, len,
                     FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                     &m);
    if (rc)
        return rc;
    mr->rkey = fi_mr_key(m);
    mr->base = (uintptr_t)buf;
    mr->raddr = (be->mr_mode & FI_MR_VIRT_ADDR) || be->key_base ? (uint64_t)(uintptr_t)buf : 0;
    mr->desc = fi_mr_desc(m);
    *handle = m;
    return MPIV_SUCCESS;
}

static void ofi_mr_dereg(struct srv_backend *be, void *handle)
{
    (void)be;
    int rc = fi_close(&((struct fid_mr *)handle)->fid);
    if (rc)
        util_log_warn("ofi: fi_close(mr): %s", fab.strerror(-rc));
}

static bool ofi_mr_pins(struct srv_backend *be)
{
    /* The software providers resolve virtual addresses at transfer time
     * (shm: process_vm_readv or a bounce buffer; tcp, udp, sockets: a
     * copy through the socket). The rest pin pages. */
    const char *p = be->info->fabric_attr->prov_name;
    static const char *const soft[] = {"shm", "tcp", "udp", "sockets"};
    for (size_t i = 0; i < sizeof soft / sizeof soft[0]; i++) {
        size_t n = strlen(soft[i]);
        if (strncmp(p, soft[i], n) == 0 && (p[n] == '\0' || p[n] == ';'))
            return false;
    }
    return true;
}

/* Writes 24 bytes with CQ data to ourselves and looks at the length the
 * target's completion reports (see the top of the file). */
static int ofi_probe_write_len(struct srv_backend *be)
{
    _Alignas(64) static unsigned char src[64], dst[64];
    struct fid_mr *ms = NULL, *md = NULL;
    int rc = ofi_reg(be, src, sizeof src, FI_WRITE | FI_READ | FI_SEND | FI_RECV, &ms);
    if (!rc)
        rc = ofi_reg(be, dst, sizeof dst, FI_REMOTE_WRITE | FI_REMOTE_READ, &md);
    if (rc)
        goto out;
    /* static, as the buffers: the provider holds on to the context until
     * the write completes */
    static struct fi_context2 ctx;
    uint64_t raddr = (be->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)dst : 0;
    /* key_base keys: ofi_reg put dst in the key, the offset is 0 */

    ssize_t n;
    uint64_t deadline = util_now_ns() + (uint64_t)OFI_PROBE_S * 1000000000u;
    while ((n = fi_writedata(be->ep, src, 24, fi_mr_desc(ms), (uint64_t)be->rank << 32,
                             (fi_addr_t)be->rank, raddr, fi_mr_key(md), &ctx)) == -FI_EAGAIN) {
        struct fi_cq_data_entry junk; /* nothing else is in flight yet */
        fi_cq_read(be->cq, &junk, 1);
        if (util_now_ns() > deadline)
            break;
    }
    bool local = false, remote = false;
    size_t len = 0;
    /* the remote completion is waited for 5 s (a provider may not make
     * one: then writes are notified), our own until the deadline */
    uint64_t remote_deadline = util_now_ns() + 5000000000ull;
    while (n == 0 && !(local && remote) && util_now_ns() < deadline &&
           (!local || util_now_ns() < remote_deadline)) {
        struct fi_cq_data_entry e;
        ssize_t k = fi_cq_read(be->cq, &e, 1);
        if (k == 1 && (e.flags & FI_REMOTE_WRITE)) {
            remote = true;
            len = e.len;
        } else if (k == 1) {
            local = true;
        } else if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(be->cq, &err, 0);
            break;
        }
    }
    if (n == 0 && !local) {
        /* Still in flight: going on would let it complete later into
         * whatever the CQ's reader takes its context for, and closing its
         * regions under it is no better. A loaded machine (TCP connection
         * set-up to ourselves) takes seconds, not this long. */
        rc = util_err(MPIV_ERR_NET, "ofi: a 24-byte RDMA write to ourselves did not complete "
                                    "in %d s (provider %s)",
                      OFI_PROBE_S, be->info->fabric_attr->prov_name);
        goto out;
    }
    if (n != 0 || !local || !remote)
        util_log_info("ofi: the write-length probe did not complete; writes are notified");

    be->notify = !(n == 0 && local && remote && len == 24);
    util_log_info("ofi: RDMA writes are announced by %s",
                  be->notify ? "a message after delivery" : "remote CQ data");
out:
    if (md)
        fi_close(&md->fid);
    if (ms)
        fi_close(&ms->fid);
    return rc;
}

/* --- address exchange ------------------------------------------------------- */

static int ofi_exchange(struct srv_backend *be)
{
    unsigned char mine[OFI_ADDR_MAX + 8] = {0};
    size_t alen = OFI_ADDR_MAX;
    int rc = fi_getname(&be->ep->fid, mine + 8, &alen);
    if (rc)
        return ofi_fail("fi_getname", rc);
    uint64_t l = alen;
    memcpy(mine, &l, 8);
    size_t slot = sizeof mine;
    unsigned char *all = malloc(slot * (size_t)be->size);
    if (!all)
        return util_err(MPIV_ERR_NO_RESOURCES, "ofi: out of memory for addresses");
    rc = boot_allgather(mine, slot, all);
    if (rc) {
        free(all);
        return rc;
    }
    const int *host = NULL;
    if ((rc = srv_host_map(be->size, &host))) {
        free(all);
        return rc;
    }
    for (int r = 0; r < be->size; r++) {
        unsigned char *a = all + slot * (size_t)r;
        memcpy(&l, a, 8);
        if (l <= OFI_ADDR_MAX && host[r] != host[be->rank] &&
            ofi_addr_is_loopback(be->info->addr_format, a + 8, l)) {
            free(all);
            return util_err(MPIV_ERR_NET,
                            "ofi: rank %d, on another host, listens only on a loopback "
                            "address, which this host cannot reach; its network interface "
                            "had no usable address when it started (FI_TCP_IFACE names the "
                            "one to use)",
                            r);
        }
        fi_addr_t fa = FI_ADDR_NOTAVAIL;
        int n = l <= OFI_ADDR_MAX ? fi_av_insert(be->av, a + 8, 1, &fa, 0, NULL) : -1;
        if (n != 1 || fa != (fi_addr_t)r) {
            free(all);
            return util_err(MPIV_ERR_NET,
                            "libfabric fi_av_insert of rank %d's address failed (%d, fi_addr "
                            "%" PRIu64 ")",
                            r, n, (uint64_t)fa);
        }
    }
    free(all);
    return ofi_probe_write_len(be);
}

/* --- data path -------------------------------------------------------------- */

static int ofi_post_send(struct srv_backend *be, pkt_t *p, int peer)
{
    ssize_t rc;
    if (p->len <= be->inject_size) {
        rc = fi_injectdata(be->ep, p->data, p->len, (uint64_t)be->rank, (fi_addr_t)peer);
        if (rc == 0)
            return SRV_DONE;
    } else {
        rc = fi_senddata(be->ep, p->data, p->len, be->pool_desc, (uint64_t)be->rank,
                         (fi_addr_t)peer, pkt_ctx(be, p, OFI_POSTED_SEND));
        if (rc == 0)
            return MPIV_SUCCESS;
    }
    if (rc == -FI_EAGAIN)
        return SRV_AGAIN;
    return util_err(MPIV_ERR_NET, "libfabric send of %u bytes to rank %d: %s", p->len, peer,
                    fab.strerror((int)-rc));
}

static int ofi_post_recv(struct srv_backend *be, pkt_t *p)
{
    ssize_t rc = fi_recv(be->ep, p->data, be->data_size, be->pool_desc, FI_ADDR_UNSPEC,
                         pkt_ctx(be, p, OFI_POSTED_RECV));
    if (rc == 0)
        return MPIV_SUCCESS;
    if (rc == -FI_EAGAIN)
        return SRV_AGAIN;
    return util_err(MPIV_ERR_NET, "libfabric fi_recv: %s", fab.strerror((int)-rc));
}

static size_t ofi_max_write(struct srv_backend *be) { return be->max_write; }

static int ofi_rdma_write_imm(struct srv_backend *be, struct srv_rdma_op *op)
{
    if (op->len > be->max_write)
        return util_err(MPIV_ERR_ARG, "libfabric RDMA write of %zu bytes to rank %d (at most %zu)",
                        op->len, op->peer, be->max_write);
    if (be->notify) {
        struct iovec iov = {.iov_base = (void *)op->buf, .iov_len = op->len};
        void *desc = op->desc;
        struct fi_rma_iov rma = {.addr = ofi_target(be, op->raddr, op->rkey), .len = op->len,
                                 .key = op->rkey};
        struct fi_msg_rma msg = {.msg_iov = &iov, .desc = &desc, .iov_count = op->len ? 1 : 0,
                                 .addr = (fi_addr_t)op->peer, .rma_iov = &rma,
                                 .rma_iov_count = 1, .context = op->be};
        op->note[0] = op->imm;
        op->note[1] = op->len;
        ssize_t rc = fi_writemsg(be->ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
        if (rc == 0)
            return MPIV_SUCCESS;
        if (rc == -FI_EAGAIN)
            return SRV_AGAIN;
        return util_err(MPIV_ERR_NET, "libfabric fi_writemsg of %zu bytes to rank %d: %s",
                        op->len, op->peer, fab.strerror((int)-rc));
    }
    uint64_t data = ((uint64_t)(uint32_t)be->rank << 32) | op->imm;
    ssize_t rc = fi_writedata(be->ep, op->buf, op->len, op->desc, data, (fi_addr_t)op->peer,
                              ofi_target(be, op->raddr, op->rkey), op->rkey, op->be);
    if (rc == 0)
        return MPIV_SUCCESS;
    if (rc == -FI_EAGAIN)
        return SRV_AGAIN;
    return util_err(MPIV_ERR_NET, "libfabric fi_writedata of %zu bytes to rank %d: %s", op->len,
                    op->peer, fab.strerror((int)-rc));
}

static int ofi_read_error(struct srv_backend *be, struct srv_cqe *ev)
{
    struct fi_cq_err_entry e = {0};
    ssize_t rc = fi_cq_readerr(be->cq, &e, 0);
    if (rc == -FI_EAGAIN)
        return 0;
    if (rc < 0)
        return -ofi_fail("fi_cq_readerr", (int)rc);
    char buf[160];
    const char *prov = fi_cq_strerror(be->cq, e.prov_errno, e.err_data, buf, sizeof buf);
    pkt_t *p = ctx_pkt(be, e.op_context);
    memset(ev, 0, sizeof *ev);
    /* A cancelled operation (the endpoint closing) did not happen either:
     * to the core it is a failed one like any other. */
    ev->err = MPIV_ERR_NET;
    if (p && p->srv_ctx[4] == (void *)(uintptr_t)OFI_POSTED_RECV) {
        ev->kind = SRV_CQE_RECV;
        ev->p = p;
        ev->src = -1;
        if (e.err != FI_ECANCELED)
            util_log_error("ofi: receive failed: %s (%s)", fab.strerror(e.err), prov);
    } else if (p) {
        ev->kind = SRV_CQE_SEND;
        ev->p = p;
        ev->src = p->peer;
        util_log_error("ofi: send to rank %d failed: %s (%s)", p->peer, fab.strerror(e.err), prov);
    } else if (e.op_context) {
        struct srv_rdma_op *op = e.op_context;
        ev->kind = SRV_CQE_WRITE;
        ev->op = op;
        ev->src = op->peer;
        util_log_error("ofi: RDMA write of %zu bytes to rank %d failed: %s (%s)", op->len,
                       op->peer, fab.strerror(e.err), prov);
    } else {
        /* An incoming RDMA write that failed here: the writer's own
         * completion fails too and its protocol tells ours; the error entry
         * names no source we could trust, so nothing goes to the core. */
        util_log_error("ofi: remote operation failed: %s (%s)", fab.strerror(e.err), prov);
        return 0;
    }
    return 1;
}

/* Announces a delivered write to its target: MPIV_SUCCESS, SRV_AGAIN, or
 * MPIV_ERR_NET (logged) — then the target never hears of the write, and the
 * write's completion must say so. */
static int ofi_notify(struct srv_backend *be, struct srv_rdma_op *op)
{
    ssize_t rc = fi_injectdata(be->ep, op->note, sizeof op->note,
                               (uint64_t)be->rank | OFI_NOTE_BIT, (fi_addr_t)op->peer);
    if (util_unlikely(be->fail_notes > 0) && rc == 0) {
        be->fail_notes--;
        rc = -FI_EIO; /* the peer got it, but this is the path under test */
    }
    if (rc == -FI_EAGAIN)
        return SRV_AGAIN;
    if (rc) {
        util_log_error("ofi: announcing a write of %zu bytes to rank %d: %s", op->len, op->peer,
                       fab.strerror((int)-rc));
        return MPIV_ERR_NET;
    }
    return MPIV_SUCCESS;
}

/* The source of an incoming completion, as the transport knows it: the
 * fi_addr (rank r is fi_addr r) when the provider names one; the rank the
 * sender put in the CQ data (`claim`, -1 if none) must agree with it. -1
 * for a completion whose source is unknown or contradicts itself. */
static int ofi_source(struct srv_backend *be, fi_addr_t from, int64_t claim)
{
    if (be->source && from != FI_ADDR_NOTAVAIL) {
        if (from >= (fi_addr_t)be->size || (claim >= 0 && claim != (int64_t)from))
            return -1;
        return (int)from;
    }
    /* no FI_SOURCE (warned at init), or none for this completion */
    return claim >= 0 && claim < be->size ? (int)claim : -1;
}

/* Counts a malformed completion and logs it, rate-limited. */
static void ofi_dropped(struct srv_backend *be, const char *what, fi_addr_t from, uint64_t data,
                        size_t len)
{
    uint64_t quiet;
    if (srv_ratelimit_hit(&be->drops, &quiet))
        util_log_error("ofi: dropped %s (fi_addr %" PRIu64 ", CQ data 0x%" PRIx64 ", %zu bytes): "
                       "source unknown or inconsistent; %" PRIu64 " dropped in all, %" PRIu64
                       " not logged",
                       what, (uint64_t)from, data, len, be->drops.count, quiet);
}

/* Turns one successful completion into *e; false if it yields none. */
static bool ofi_complete(struct srv_backend *be, const struct fi_cq_data_entry *c, fi_addr_t from,
                         struct srv_cqe *e)
{
    memset(e, 0, sizeof *e);
    bool cq_data = (c->flags & FI_REMOTE_CQ_DATA) != 0;
    if (c->flags & FI_REMOTE_WRITE) {
        e->kind = SRV_CQE_IMM;
        e->src = ofi_source(be, from, cq_data ? (int64_t)(c->data >> 32) : -1);
        e->imm = (uint32_t)c->data;
        e->len = c->len;
        if (e->src < 0 || !cq_data) {
            ofi_dropped(be, "an RDMA write", from, c->data, c->len);
            return false;
        }
        return true;
    }
    if ((c->flags & FI_RECV) && cq_data && (c->data & OFI_NOTE_BIT)) {
        /* a write announced by message: the receive packet goes back */
        uint64_t note[2];
        e->kind = SRV_CQE_IMM;
        e->p = ctx_pkt(be, c->op_context);
        e->src = ofi_source(be, from, (int64_t)(uint32_t)c->data);
        if (e->src < 0 || c->len != sizeof note) {
            /* no immediate from nobody: only the packet goes back */
            ofi_dropped(be, "a write notification", from, c->data, c->len);
            e->kind = SRV_CQE_RECV;
            e->err = MPIV_ERR_NET;
            e->src = -1;
            return true;
        }
        /* The writer's backend is the only one that knows the length. */
        memcpy(note, e->p->data, sizeof note);
        e->imm = (uint32_t)note[0];
        e->len = (size_t)note[1];
        return true;
    }
    if (c->flags & FI_RECV) {
        e->kind = SRV_CQE_RECV;
        e->p = ctx_pkt(be, c->op_context);
        e->len = c->len;
        e->src = ofi_source(be, from, cq_data ? (int64_t)(uint32_t)c->data : -1);
        if (e->src < 0) {
            ofi_dropped(be, "a message", from, c->data, c->len);
            e->err = MPIV_ERR_NET; /* the core puts the packet back */
        }
        return true;
    }
    if (c->flags & FI_SEND) {
        e->kind = SRV_CQE_SEND;
        e->p = ctx_pkt(be, c->op_context);
        e->src = e->p->peer;
        return true;
    }
    if (c->flags & (FI_WRITE | FI_RMA)) {
        struct srv_rdma_op *op = c->op_context;
        e->kind = SRV_CQE_WRITE;
        e->op = op;
        e->src = op->peer;
        if (be->notify) {
            int rc = ofi_notify(be, op);
            if (rc == SRV_AGAIN) {
                op->qnext = (uintptr_t)be->note_pending; /* order does not matter */
                be->note_pending = op;
                return false;
            }
            e->err = rc;
        }
        return true;
    }
    util_log_warn("ofi: completion with unexpected flags 0x%" PRIx64, (uint64_t)c->flags);
    return false;
}

static int ofi_poll(struct srv_backend *be, struct srv_cqe *ev, int max)
{
    struct fi_cq_data_entry ent[32];
    fi_addr_t from[32];
    if (max > 32)
        max = 32;
    int out = 0;
    while (be->note_pending && out < max) {
        struct srv_rdma_op *op = be->note_pending;
        int rc = ofi_notify(be, op);
        if (rc == SRV_AGAIN)
            break;
        be->note_pending = (struct srv_rdma_op *)op->qnext;
        ev[out++] = (struct srv_cqe){.kind = SRV_CQE_WRITE, .err = rc, .src = op->peer, .op = op};
    }
    if (out == max)
        return out;
    ssize_t n = be->source ? fi_cq_readfrom(be->cq, ent, (size_t)(max - out), from)
                           : fi_cq_read(be->cq, ent, (size_t)(max - out));
    if (n == -FI_EAGAIN)
        return out;
    if (n == -FI_EAVAIL)
        return out ? out : ofi_read_error(be, ev);
    if (n < 0)
        return out ? out : -ofi_fail("fi_cq_read", (int)n);
    for (ssize_t i = 0; i < n; i++)
        if (ofi_complete(be, &ent[i], be->source ? from[i] : FI_ADDR_NOTAVAIL, &ev[out]))
            out++;
    return out;
}

/* --- test hooks (srv_test_hooks.h) ------------------------------------------ */

void srv_ofi_test_set_notify(struct srv_backend *be, bool on) { be->notify = on; }

void srv_ofi_test_fail_notes(struct srv_backend *be, int n) { be->fail_notes = n; }

int srv_ofi_test_send_data(struct srv_backend *be, pkt_t *p, int peer, uint64_t data)
{
    ssize_t rc = fi_senddata(be->ep, p->data, p->len, be->pool_desc, data, (fi_addr_t)peer,
                             pkt_ctx(be, p, OFI_POSTED_SEND));
    if (rc == 0)
        return MPIV_SUCCESS;
    return rc == -FI_EAGAIN ? SRV_AGAIN : ofi_fail("fi_senddata", (int)rc);
}

uint64_t srv_ofi_test_dropped(struct srv_backend *be) { return be->drops.count; }

static void ofi_finalize(struct srv_backend *be)
{
    if (!be)
        return;
    if (be->ep)
        fi_close(&be->ep->fid);
    if (be->pool_mr)
        fi_close(&be->pool_mr->fid);
    if (be->cq)
        fi_close(&be->cq->fid);
    if (be->av)
        fi_close(&be->av->fid);
    if (be->domain)
        fi_close(&be->domain->fid);
    if (be->fabric)
        fi_close(&be->fabric->fid);
    fab.freeinfo(be->info);
    free(be->ctx2_table);
    free(be);
}

const struct srv_backend_ops srv_ofi_ops = {
    .name = "ofi",
    .init = ofi_init,
    .exchange = ofi_exchange,
    .reg_pool = ofi_reg_pool,
    .post_send = ofi_post_send,
    .post_recv = ofi_post_recv,
    .rdma_write_imm = ofi_rdma_write_imm,
    .max_write = ofi_max_write,
    .mr_reg = ofi_mr_reg,
    .mr_dereg = ofi_mr_dereg,
    .poll = ofi_poll,
    .mr_pins = ofi_mr_pins,
    .finalize = ofi_finalize,
};
