/*
 * config.c — every MPIV_* environment variable, in one table.
 *
 * Each entry names the variable, its kind (integer, size with K/M/G suffix,
 * one of a set of words, free string), its range or words, its default and
 * what it is for. util_config_load parses them all and stops at the first
 * bad one with a message naming it and what it accepts; util_config_help
 * prints the table for --help. The README's table is written from this.
 *
 * Whitespace: a value's leading and trailing whitespace (spaces, tabs,
 * newlines, as `$(cat file)` or a quoted "3 " leaves them) is ignored, for
 * every kind alike, so " 3", "3 " and " 3 " all mean 3. Whitespace inside a
 * value is not ("64 K" is rejected), and a value of whitespace only is
 * rejected (it is set, but says nothing); an empty value means the
 * default.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

enum cfg_kind { CFG_INT, CFG_SIZE, CFG_WORDS, CFG_STRING };

struct cfg_var {
    const char *name;
    enum cfg_kind kind;
    size_t offset; /* into struct util_config */
    int64_t min, max, dflt;
    const char *words; /* CFG_WORDS: "a|b|c", value = index */
    const char *help;
};

#define OFF(f) offsetof(struct util_config, f)

static const struct cfg_var cfg_vars[] = {
    {"MPIV_WORKERS", CFG_INT, OFF(workers), 0, 4096, 0, NULL,
     "worker pthreads per process; 0 = cores per local rank minus one for the server (at least 1)"},
    {"MPIV_BIND", CFG_WORDS, OFF(bind), 0, 2, UTIL_BIND_CORE, "core|none|workers",
     "core: pin workers and the server to cores, and bind the thread that calls mpiv_init (and "
     "the threads it creates later) to the rank's cores, as mpirun --bind-to core does (local "
     "ranks get disjoint cores while there are enough); workers: pin only the workers and the "
     "server; none: no binding"},
    {"MPIV_STACK_SIZE", CFG_SIZE, OFF(stack_size), 16 << 10, 1 << 30, 64 << 10, NULL,
     "virtual size of each ULT stack, committed lazily; a guard page below it catches overflow"},
    {"MPIV_MAX_ULTS", CFG_INT, OFF(max_ults), 64, 1 << 24, 1 << 20, NULL,
     "ULTs that may exist at once on one worker"},
    {"MPIV_LOG", CFG_WORDS, OFF(log_level), 0, 4, UTIL_LOG_WARN, "none|error|warn|info|debug",
     "what MPIv prints on stderr"},
    {"MPIV_PACKET_SIZE", CFG_SIZE, OFF(packet_size), 256, 1 << 20, 8 << 10, NULL,
     "bytes of a network packet (header + eager payload)"},
    {"MPIV_PACKETS", CFG_INT, OFF(packets), 4, 1 << 22, 1024, NULL,
     "packets in this process's pool (registered with the network once)"},
    {"MPIV_RECV_DEPTH", CFG_INT, OFF(recv_depth), 1, 1 << 16, 64, NULL,
     "receive packets the server keeps posted; must be below MPIV_PACKETS"},
    {"MPIV_EAGER_LIMIT", CFG_SIZE, OFF(eager_limit), 0, 1 << 20, 0, NULL,
     "largest message sent eagerly, at most MPIV_PACKET_SIZE minus the 32-byte header; "
     "0 = as much as a packet holds"},
    {"MPIV_EAGER_CREDIT", CFG_SIZE, OFF(eager_credit), 0, 1 << 30, 0, NULL,
     "eager bytes a rank may have waiting unreceived at each peer; past it sends wait for "
     "their receive; 0 = 4M or 64 packets, whichever is more"},
    {"MPIV_HT_BUCKETS", CFG_INT, OFF(ht_buckets), 0, 1 << 20, 0, NULL,
     "initial matching-table buckets (64 B each), a power of two; the table grows and shrinks "
     "back by itself; 0 = sized from MPIV_PACKETS"},
    {"MPIV_NET", CFG_WORDS, OFF(net), 0, 3, UTIL_NET_AUTO, "auto|ofi|ibv|shm",
     "network backend; shm = MPIv's own shared-memory rings (every rank on one host); auto = "
     "shm when every rank is on one host, else ibv where every rank has a verbs device, else ofi"},
    {"MPIV_SHM_CMA", CFG_WORDS, OFF(shm_cma), 0, 1, 0, "off|on",
     "shm backend: off = rendezvous bytes stream through the rings in 32K-64K pieces, the sender "
     "copying in while the receiver copies out; on = one copy where the kernel allows it (the "
     "receiver reads with process_vm_readv, or the sender writes with process_vm_writev), "
     "for hosts where that copy is faster or memory bandwidth is short"},
    {"MPIV_SERVER", CFG_WORDS, OFF(server), 0, 2, UTIL_SERVER_AUTO, "auto|thread|inline",
     "who moves the network: thread = a server thread per rank; inline = the threads that wait "
     "(idle workers, waiting pthreads), MPI-style, with no extra thread; auto = inline when the "
     "rank has fewer cores than MPIV_WORKERS + 1, else thread"},
    {"MPIV_ONE_THREAD", CFG_WORDS, OFF(one_thread), 0, 1, 1, "off|auto",
     "auto = while a single thread communicates (no server thread; one pthread, or one worker "
     "running every ULT), its locks and request completions use no locked instruction; the "
     "first other thread to communicate turns that off for good at the cost of one "
     "membarrier(2); off = always lock"},
    {"MPIV_SHM_EAGER_LIMIT", CFG_SIZE, OFF(shm_eager_limit), 0, 1 << 20, 0, NULL,
     "shm backend: largest message sent eagerly, straight into the receiver's ring (no packet, "
     "so it may exceed MPIV_PACKET_SIZE); at most a quarter of a ring less 56 bytes (rings are "
     "4M per pair on 2 ranks, down to 256K from 32 ranks on); below what a packet holds it "
     "changes nothing; 0 = 32K, or what a ring takes if less; every rank must use the same"},
    {"MPIV_SHM_RING", CFG_SIZE, OFF(shm_ring), 0, 1 << 30, 0, NULL,
     "shm backend: bytes of each ring (one per pair of ranks, in each direction), a power of "
     "two from 64K, enough for 4 packets; 0 = 4M, halved while ranks x ring passes 8M, down to "
     "256K (so /dev/shm holds max(8M, ranks x 256K) per rank); every rank must use the same"},
    {"MPIV_SHM_COPY", CFG_WORDS, OFF(shm_copy), 0, 2, 0, "auto|whole|pieces",
     "shm backend, x86-64: how a sender copies a payload of more than 2K into a ring; whole = "
     "one string copy, which stores lines without reading them first (the faster way when "
     "the receiver's core is far); pieces = string copies of 2K (the faster way when the "
     "two cores share a cache); auto = pieces up to 16K while a line takes under 100 ns to "
     "come from the receiver's core (timed on the ring's head), else whole"},
    {"MPIV_SERVER_CORE", CFG_INT, OFF(server_core), -1, 4095, -1, NULL,
     "core the server thread is pinned to; -1 = the last core of this rank's share"},
    {"MPIV_BOOT_TIMEOUT", CFG_INT, OFF(boot_timeout), 1, 86400, 60, NULL,
     "seconds a rank waits for one step of joining the job before failing"},
    {"MPIV_IBV_GID_INDEX", CFG_INT, OFF(ibv_gid_index), -1, 255, -1, NULL,
     "verbs GID index; -1 = the RoCE v2 IPv4 GID, or 0 on InfiniBand"},
    {"MPIV_OFI_PROVIDER", CFG_STRING, OFF(ofi_provider), 0, 0, 0, NULL,
     "libfabric provider, e.g. shm or tcp;ofi_rxm; empty = shm on one host, tcp;ofi_rxm across hosts"},
    {"MPIV_IBV_DEVICE", CFG_STRING, OFF(ibv_device), 0, 0, 0, NULL,
     "verbs device name (see ibv_devinfo); empty = the first one"},
};

#define NVARS (sizeof cfg_vars / sizeof cfg_vars[0])

/* Whether p holds nothing but whitespace (or nothing). */
static bool only_space(const char *p)
{
    while (isspace((unsigned char)*p))
        p++;
    return *p == '\0';
}

/* s without its leading and trailing whitespace: its start, and its
 * length in *len. */
static const char *trimmed(const char *s, size_t *len)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    *len = n;
    return s;
}

int util_parse_size(const char *s, int64_t *out)
{
    if (!s || !*s)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '-' || *s == '+')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++; /* accept KiB-style "Ki" */
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (!only_space(end))
        return -1;
    if (v > ((unsigned long long)INT64_MAX >> shift))
        return -1;
    *out = (int64_t)(v << shift);
    return 0;
}

/* strtoll skips leading whitespace itself */
static int parse_int(const char *s, int64_t *out)
{
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || !only_space(end) || errno)
        return -1;
    *out = v;
    return 0;
}

static int parse_words(const char *s, const char *words, int64_t *out)
{
    int64_t idx = 0;
    size_t len;
    s = trimmed(s, &len);
    if (len == 0)
        return -1;
    for (const char *w = words; *w; idx++) {
        const char *bar = strchr(w, '|');
        size_t wl = bar ? (size_t)(bar - w) : strlen(w);
        if (wl == len && strncasecmp(w, s, len) == 0) {
            *out = idx;
            return 0;
        }
        if (!bar)
            break;
        w = bar + 1;
    }
    return -1;
}

static int bad_var(const struct cfg_var *v, const char *val)
{
    switch (v->kind) {
    case CFG_INT:
        return util_err(MPIV_ERR_CONFIG, "%s=%s: expected an integer from %lld to %lld",
                        v->name, val, (long long)v->min, (long long)v->max);
    case CFG_SIZE:
        return util_err(MPIV_ERR_CONFIG,
                        "%s=%s: expected a size from %lld to %lld bytes (suffixes K, M, G)",
                        v->name, val, (long long)v->min, (long long)v->max);
    case CFG_WORDS:
        return util_err(MPIV_ERR_CONFIG, "%s=%s: expected one of %s", v->name, val, v->words);
    case CFG_STRING:
        return util_err(MPIV_ERR_CONFIG, "%s=%s: expected 1 to 63 characters", v->name, val);
    }
    return MPIV_ERR_INTERNAL;
}

static int env_int(const char *name, int dflt)
{
    const char *s = getenv(name);
    int64_t v;
    if (s && parse_int(s, &v) == 0 && v >= 0 && v < INT_MAX)
        return (int)v;
    return dflt;
}

/* The count a variable starts with ("4", "2(x3),1": 4 and 2), or 0. */
static int env_leading_int(const char *name)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno || v <= 0 || v >= INT_MAX || (*end && *end != '(' && *end != ','))
        return 0;
    return (int)v;
}

/* How many ranks of this job share the host, from whichever launcher
 * started us: mpiv_run, Open MPI, Slurm, MPICH's hydra. */
static void find_local_ranks(struct util_config *c)
{
    c->local_ranks = env_int("MPIV_LOCAL_SIZE", 0);
    c->local_rank = env_int("MPIV_LOCAL_RANK", -1);
    if (c->local_ranks <= 0) {
        c->local_ranks = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 0);
        c->local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
    }
    if (c->local_ranks <= 0) {
        c->local_ranks = env_int("MPI_LOCALNRANKS", 0);
        c->local_rank = env_int("MPI_LOCALRANKID", -1);
    }
    if (c->local_ranks <= 0) {
        /* srun sets SLURM_TASKS_PER_NODE for every step ("4", or "2(x3),1"
         * for uneven layouts: the leading count is ours on all but odd
         * layouts, good enough for sizing defaults); SLURM_NTASKS_PER_NODE
         * only with --ntasks-per-node. */
        c->local_ranks = env_leading_int("SLURM_TASKS_PER_NODE");
        if (c->local_ranks <= 0)
            c->local_ranks = env_int("SLURM_NTASKS_PER_NODE", 0);
        c->local_rank = env_int("SLURM_LOCALID", -1);
    }
    if (c->local_ranks <= 0)
        c->local_ranks = 1;
    if (c->local_rank < 0 || c->local_rank >= c->local_ranks)
        c->local_rank = 0;
}

/* The value of numeric variable v from the environment (its default when
 * unset or empty), or MPIV_ERR_CONFIG naming it. */
static int numeric_var(const struct cfg_var *v, int64_t *out)
{
    const char *s = getenv(v->name);
    *out = v->dflt;
    if (!s || !*s)
        return MPIV_SUCCESS;
    int64_t val;
    int rc = v->kind == CFG_INT    ? parse_int(s, &val)
             : v->kind == CFG_SIZE ? util_parse_size(s, &val)
                                   : parse_words(s, v->words, &val);
    if (rc != 0 || val < v->min || val > v->max)
        return bad_var(v, s);
    *out = val;
    return MPIV_SUCCESS;
}

int util_config_int(const char *name, int64_t *out)
{
    for (size_t i = 0; i < NVARS; i++)
        if (cfg_vars[i].kind != CFG_STRING && strcmp(cfg_vars[i].name, name) == 0)
            return numeric_var(&cfg_vars[i], out);
    return util_err(MPIV_ERR_INTERNAL, "%s is not a numeric MPIv variable", name);
}

/* The cores this rank may count on: its affinity mask when the launcher
 * (Slurm, mpirun --bind-to) gave it fewer than the host's, since that mask
 * is then its share; else an even split of the host among its ranks. At
 * least 1. */
static int rank_share(const struct util_config *c)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int mask = CPU_COUNT(&set);
        if (mask > 0 && mask < c->ncores)
            return mask;
    }
    int share = c->ncores / (c->local_ranks > 0 ? c->local_ranks : 1);
    return share > 0 ? share : 1;
}

int util_config_load(struct util_config *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NVARS; i++) {
        const struct cfg_var *v = &cfg_vars[i];
        if (v->kind == CFG_STRING) {
            const char *s = getenv(v->name);
            char *dst = (char *)c + v->offset;
            if (s && *s) {
                size_t len;
                const char *t = trimmed(s, &len);
                if (len == 0 || len >= 64)
                    return bad_var(v, s);
                memcpy(dst, t, len);
                dst[len] = '\0';
            }
            continue;
        }
        int rc = numeric_var(v, (int64_t *)((char *)c + v->offset));
        if (rc != MPIV_SUCCESS)
            return rc;
    }

    /* rules that tie variables together */
    if (c->recv_depth >= c->packets)
        return util_err(MPIV_ERR_CONFIG,
                        "MPIV_RECV_DEPTH=%lld must be below MPIV_PACKETS=%lld",
                        (long long)c->recv_depth, (long long)c->packets);
    if (c->ht_buckets && (c->ht_buckets & (c->ht_buckets - 1)))
        return util_err(MPIV_ERR_CONFIG, "MPIV_HT_BUCKETS=%lld: expected a power of two",
                        (long long)c->ht_buckets);
    if (c->shm_ring && ((c->shm_ring & (c->shm_ring - 1)) || c->shm_ring < (64 << 10)))
        return util_err(MPIV_ERR_CONFIG,
                        "MPIV_SHM_RING=%lld: expected a power of two of at least 64K (65536)",
                        (long long)c->shm_ring);
    /* a packet holds the header and at most the rest as eager payload */
    int64_t payload = c->packet_size - UTIL_PACKET_HEADER_BYTES;
    if (c->eager_limit > payload)
        return util_err(MPIV_ERR_CONFIG,
                        "MPIV_EAGER_LIMIT=%lld does not fit in a packet: with MPIV_PACKET_SIZE=%lld "
                        "(of which %d bytes are the header) it can be at most %lld",
                        (long long)c->eager_limit, (long long)c->packet_size,
                        UTIL_PACKET_HEADER_BYTES, (long long)payload);

    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->ncores = n > 0 ? (int)n : 1;
    find_local_ranks(c);
    c->rank_cores = rank_share(c);
    if (c->workers == 0)
        c->workers = c->rank_cores > 2 ? c->rank_cores - 1 : 1;
    /* A server thread pays off only on a core of its own: sharing one with
     * a worker, each message waits for the OS to switch between the two.
     * Without one, the threads that wait move the network themselves. */
    if (c->server == UTIL_SERVER_AUTO)
        c->server = c->rank_cores < c->workers + 1 ? UTIL_SERVER_INLINE : UTIL_SERVER_THREAD;
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0)
        c->stack_size = (c->stack_size + page - 1) / page * page;
    util_log_level = (int)c->log_level;
    return MPIV_SUCCESS;
}

void util_config_help(void *file)
{
    FILE *f = file;
    fprintf(f, "Environment variables read by every MPIv process:\n");
    for (size_t i = 0; i < NVARS; i++) {
        const struct cfg_var *v = &cfg_vars[i];
        fprintf(f, "  %-20s ", v->name);
        switch (v->kind) {
        case CFG_INT:
            fprintf(f, "integer %lld..%lld, default %lld\n", (long long)v->min,
                    (long long)v->max, (long long)v->dflt);
            break;
        case CFG_SIZE:
            fprintf(f, "size %lld..%lld bytes (K/M/G), default %lld\n", (long long)v->min,
                    (long long)v->max, (long long)v->dflt);
            break;
        case CFG_WORDS: {
            char d[32] = "";
            const char *w = v->words;
            for (int64_t k = 0; k < v->dflt && w; k++) {
                w = strchr(w, '|');
                if (w)
                    w++;
            }
            if (w) {
                size_t l = strcspn(w, "|");
                snprintf(d, sizeof d, "%.*s", (int)l, w);
            }
            fprintf(f, "%s, default %s\n", v->words, d);
            break;
        }
        case CFG_STRING:
            fprintf(f, "string, default empty\n");
            break;
        }
        fprintf(f, "  %-20s   %s\n", "", v->help);
    }
}
