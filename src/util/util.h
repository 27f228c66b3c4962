/*
 * util.h — the small shared pieces every folder may use: error reporting,
 * configuration, logging, time. Nothing here knows about ULTs or networks.
 *
 * Errors: a failing internal function returns an enum mpiv_error code and,
 * where there is more to say, records a per-thread detail string with
 * util_err(). The public API returns the code; mpiv_error_detail() shows the
 * detail.
 */
#ifndef MPIV_UTIL_H
#define MPIV_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "mpiv.h"

#define UTIL_CACHELINE 64

#if defined(__GNUC__)
#define util_likely(x) __builtin_expect(!!(x), 1)
#define util_unlikely(x) __builtin_expect(!!(x), 0)
#define UTIL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define util_likely(x) (x)
#define util_unlikely(x) (x)
#define UTIL_PRINTF(f, a)
#endif

/* --- errors -------------------------------------------------------------- */

/* Records a detail message for the calling thread and returns `code`, so
 * that a failing path reads `return util_err(MPIV_ERR_ARG, "...", ...);`. */
int util_err(int code, const char *fmt, ...) UTIL_PRINTF(2, 3);
/* Forgets the calling thread's detail (called on entry of public calls that
 * succeed, so an old detail is not shown for a new error). */
void util_err_clear(void);

/* --- memory ------------------------------------------------------------ */

#define UTIL_HUGE_PAGE ((size_t)2 << 20)

/* A zeroed mapping of len bytes, aligned to UTIL_HUGE_PAGE, for memory
 * written from the front (arrays of records, slabs): past its first
 * small_head bytes it asks for 2 MiB pages (mem.c says why and what it
 * costs). NULL if it cannot be mapped. Given back with util_unmap_dense. */
void *util_map_dense(size_t len, size_t small_head);
void util_unmap_dense(void *p, size_t len);

/* --- logging ------------------------------------------------------------- */

enum util_log_level {
    UTIL_LOG_NONE = 0,
    UTIL_LOG_ERROR,
    UTIL_LOG_WARN,
    UTIL_LOG_INFO,
    UTIL_LOG_DEBUG,
};
extern int util_log_level; /* set from MPIV_LOG by util_config_load */

void util_log_write(int level, const char *file, int line, const char *fmt, ...)
    UTIL_PRINTF(4, 5);
#define UTIL_LOG(level, ...)                                                    \
    do {                                                                        \
        if (util_unlikely((level) <= util_log_level))                          \
            util_log_write((level), __FILE__, __LINE__, __VA_ARGS__);          \
    } while (0)
#define util_log_error(...) UTIL_LOG(UTIL_LOG_ERROR, __VA_ARGS__)
#define util_log_warn(...) UTIL_LOG(UTIL_LOG_WARN, __VA_ARGS__)
#define util_log_info(...) UTIL_LOG(UTIL_LOG_INFO, __VA_ARGS__)
#define util_log_debug(...) UTIL_LOG(UTIL_LOG_DEBUG, __VA_ARGS__)

/* The rank printed in log lines; -1 until known. */
void util_log_set_rank(int rank);

/* Prints "mpiv: fatal: <msg>" and aborts. Only for broken invariants. */
_Noreturn void util_fatal(const char *fmt, ...) UTIL_PRINTF(1, 2);

/* --- configuration ------------------------------------------------------- */

/* core: workers, server and the thread that calls mpiv_init (so the
 * threads it creates after) on this rank's cores; workers: only the
 * workers and the server; none: nothing. */
enum util_bind { UTIL_BIND_CORE = 0, UTIL_BIND_NONE = 1, UTIL_BIND_WORKERS = 2 };
enum util_net { UTIL_NET_AUTO = 0, UTIL_NET_OFI = 1, UTIL_NET_IBV = 2, UTIL_NET_SHM = 3 };
/* MPIV_SERVER; util_config_load replaces AUTO with its choice */
enum util_server { UTIL_SERVER_AUTO = 0, UTIL_SERVER_THREAD = 1, UTIL_SERVER_INLINE = 2 };

/* Every MPIV_* variable, parsed once by util_config_load. The table in
 * config.c documents each (name, range, default); README lists them too. */
struct util_config {
    int64_t workers;        /* MPIV_WORKERS: worker pthreads                 */
    int64_t bind;           /* MPIV_BIND: enum util_bind                     */
    int64_t stack_size;     /* MPIV_STACK_SIZE: bytes per ULT stack          */
    int64_t max_ults;       /* MPIV_MAX_ULTS: ULT slots per worker           */
    int64_t log_level;      /* MPIV_LOG: enum util_log_level                 */
    int64_t packet_size;    /* MPIV_PACKET_SIZE: bytes of a packet's data    */
    int64_t packets;        /* MPIV_PACKETS: packets in this process's pool  */
    int64_t recv_depth;     /* MPIV_RECV_DEPTH: receive packets kept posted  */
    int64_t eager_limit;    /* MPIV_EAGER_LIMIT: largest eager message       */
    int64_t eager_credit;   /* MPIV_EAGER_CREDIT: bytes per peer, 0 = default */
    int64_t ht_buckets;     /* MPIV_HT_BUCKETS: matching table buckets (2^k) */
    int64_t net;            /* MPIV_NET: enum util_net                       */
    int64_t shm_cma;        /* MPIV_SHM_CMA: 1 on, 0 off                     */
    int64_t server;         /* MPIV_SERVER: enum util_server, never AUTO     */
    int64_t one_thread;     /* MPIV_ONE_THREAD: 1 auto, 0 off                */
    int64_t shm_eager_limit; /* MPIV_SHM_EAGER_LIMIT: largest eager on shm   */
    int64_t shm_ring;       /* MPIV_SHM_RING: bytes per ring, 0 = by ranks   */
    int64_t shm_copy;       /* MPIV_SHM_COPY: 0 auto, 1 whole, 2 pieces      */
    int64_t server_core;    /* MPIV_SERVER_CORE: core of the server, -1=last */
    int64_t ibv_gid_index;  /* MPIV_IBV_GID_INDEX: -1 = find RoCE v2 IPv4    */
    int64_t boot_timeout;   /* MPIV_BOOT_TIMEOUT: seconds per bootstrap step */
    char ofi_provider[64];  /* MPIV_OFI_PROVIDER: "" = choose                */
    char ibv_device[64];    /* MPIV_IBV_DEVICE: "" = first device            */
    /* facts about the machine and the launch, not variables: */
    int ncores;             /* online cores                                  */
    int local_ranks;        /* ranks of this job on this host (>= 1)         */
    int local_rank;         /* this rank's index among them                  */
    int rank_cores;         /* cores this rank may count on (its share)      */
};

/* Bytes of the protocol header at the start of every packet (proto/'s
 * struct proto_hdr, which asserts it), known here so that the
 * configuration can check MPIV_EAGER_LIMIT against MPIV_PACKET_SIZE. */
#define UTIL_PACKET_HEADER_BYTES 32

/* Fills *cfg from the environment. On a bad value returns MPIV_ERR_CONFIG
 * with a detail naming the variable and what it accepts. Idempotent. */
int util_config_load(struct util_config *cfg);

/* One numeric variable of the table (e.g. "MPIV_BOOT_TIMEOUT"), parsed and
 * checked exactly as util_config_load does, for code that runs before or
 * without a loaded configuration (the bootstrap). */
int util_config_int(const char *name, int64_t *out);

/* Prints every variable with its accepted values and default (for --help). */
void util_config_help(void *file /* FILE* */);

/* Parses a size such as "64K", "8M", "1G" or "4096" into *out (bytes).
 * Returns 0 on success, -1 on junk or overflow. */
int util_parse_size(const char *s, int64_t *out);

/* --- time ---------------------------------------------------------------- */
uint64_t util_now_ns(void);
void util_sleep_ns(uint64_t ns);
/* 64 random bits for names and keys that must differ between processes
 * and runs (not for secrets): getrandom, or the clock and the pid where
 * the kernel refuses it. */
uint64_t util_random_u64(void);

/* --- idle polling (idle.c) ------------------------------------------------
 * A thread that polls for work calls util_idle_step after each poll that
 * found nothing, and util_idle_reset after one that found something. The
 * step spins, then yields; once the quiet spell passes UTIL_IDLE_YIELD_NS
 * it returns UTIL_IDLE_LONG without waiting, and the caller either blocks
 * on something of its own or calls util_idle_nap (a sleep growing to
 * UTIL_IDLE_NAP_MAX_NS) before it polls again. */
#define UTIL_IDLE_SPIN_NS 20000
#define UTIL_IDLE_YIELD_NS 200000
#define UTIL_IDLE_NAP_MAX_NS 64000
/* Many threads napping at once nap longer (util_idle_nap_ns), up to this */
#define UTIL_IDLE_SHARED_NAP_MAX_NS 16000000
enum util_idle_phase { UTIL_IDLE_SPIN, UTIL_IDLE_YIELD, UTIL_IDLE_LONG };
struct util_idle {
    uint64_t start, nap;
    uint32_t n;
    uint8_t phase;
};
void util_idle_reset(struct util_idle *s);
enum util_idle_phase util_idle_step(struct util_idle *s);
void util_idle_nap(struct util_idle *s);
/* util_idle_nap for a thread that polls the network for everyone (no
 * server thread): lengthened while many such threads nap at once (see
 * idle.c) by util_idle_nap_ns: how long a nap of `nap` ns lasts while
 * `napping` of them (this one included) nap: unchanged up to
 * UTIL_IDLE_SHARED_NAPPERS, then in proportion, up to
 * UTIL_IDLE_SHARED_NAP_MAX_NS. */
void util_idle_nap_shared(struct util_idle *s);
#define UTIL_IDLE_SHARED_NAPPERS 4
uint64_t util_idle_nap_ns(uint64_t nap, unsigned napping);

#endif
