/*
 * mpiv_run — starts an MPIv job: N ranks of one program, here or on hosts.
 *
 * How the pieces fit:
 *  - parse_args() reads the command line; place_ranks() decides which host
 *    each rank runs on and its local rank there.
 *  - The key-value exchange (kvs_*) listens on TCP before any rank starts.
 *    Each rank connects, proves it belongs to the job with the random
 *    MPIV_JOB_SECRET, and then every allgather/barrier of src/boot/boot.c
 *    is one message to us and one reply (wire format: boot_wire.h).
 *  - spawn_rank() forks each rank into its own process group (so a launcher
 *    template's children die with it, and the terminal's Ctrl-C reaches
 *    only us, who forward it) with stdout/stderr on pipes.
 *  - run_loop() polls everything: a signalfd (SIGCHLD, SIGINT, SIGTERM,
 *    SIGHUP), the exchange's sockets and the ranks' output, which is
 *    written out a whole line at a time so lines of different ranks never
 *    interleave. When a rank fails, the others get SIGTERM, then SIGKILL
 *    KILL_GRACE_MS later, well within 5 seconds.
 *
 * Exit status: 0 if every rank exited 0; else the first failing rank's exit
 * status (128+N if it died of signal N); 124 when --timeout expired; 2 on
 * bad usage; 1 when mpiv_run itself cannot run the job.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot/boot_wire.h"
#include "util/util.h"

#define EXIT_USAGE 2
#define EXIT_RUNTIME 1
#define EXIT_TIMEOUT 124
#define KILL_GRACE_MS 2000
#define DRAIN_MS 1000
#define LINE_MAX_BUF 65536
/* Connections that have not proved they belong to the job yet. A rank
 * sends its hello as soon as it has connected, so these limits only bite
 * on idle or hostile connections; the one whose hello is oldest makes room
 * for a newer one (and is told to try again: a slow rank then reconnects). */
#define HELLO_PER_ADDR 32 /* from one peer address */
#define HELLO_TOTAL 256   /* from all addresses together */
#define HELLO_MS 2000     /* a connection must prove itself this fast */
#define REFUSAL_LOG_MS 1000 /* at most one line about refusals per second */
#define MAX_LISTENERS 64
#define SPAWN_BATCH 32 /* ranks started per round of the event loop */
#define BYE_WAIT_MS 2000 /* how long a reaped rank's BYE may lag its exit */

static const char *prog_name = "mpiv_run";

/* ---------------------------------------------------------------------- */
/* options                                                                 */
/* ---------------------------------------------------------------------- */

struct opts {
    long nranks;
    char **hosts; /* NULL: every rank local */
    int nhosts;
    const char *launcher; /* template, NULL: fork/exec (or ssh with hosts) */
    const char *bind;     /* address to listen on, NULL: choose */
    int map_block;        /* 0: round robin over hosts, 1: blocks */
    char **xvars;         /* -x VAR or VAR=VAL, as given */
    int nx;
    long timeout_s; /* 0: none */
    int tag_output;
    char **argv; /* the program and its arguments */
};

_Noreturn static void usage_error(const char *fmt, ...) UTIL_PRINTF(1, 2);
_Noreturn static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog_name);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help' for more information.\n", prog_name);
    exit(EXIT_USAGE);
}

static void print_help(void)
{
    printf(
        "Usage: mpiv_run -n N [options] program [args...]\n"
        "Starts N ranks of an MPIv program and joins them into one job.\n"
        "\n"
        "Options:\n"
        "  -n, --np N            number of ranks (1..%d)\n"
        "  -H, --hosts H1,H2,... run ranks on these hosts (a host may be repeated to\n"
        "                        give it more slots). Each rank is started through the\n"
        "                        launcher template (default 'ssh -T -o BatchMode=yes\n"
        "                        -o ConnectTimeout=T {host}', T = MPIV_BOOT_TIMEOUT).\n"
        "                        Without -H every rank runs here (fork/exec).\n"
        "      --map-by rr|block how ranks are spread over the -H list: rr (default)\n"
        "                        gives rank r host r mod H; block gives each host\n"
        "                        ceil(N/H) consecutive ranks.\n"
        "      --launcher TEMPL  command prefixed to each rank's command, split on\n"
        "                        spaces; {host} is replaced by the rank's host, e.g.\n"
        "                        --launcher 'ip netns exec {host}'. The rank's MPIV_*\n"
        "                        variables and -x variables are passed with env(1),\n"
        "                        the job secret on the rank's stdin (read by sh, so\n"
        "                        the launcher must forward stdin); when the launcher\n"
        "                        is ssh the command is shell-quoted and run in the\n"
        "                        current directory.\n"
        "      --bind ADDR       IPv4 address the key-value exchange listens on and\n"
        "                        ranks connect to. Default: 127.0.0.1 without -H;\n"
        "                        with -H, each host is given the local address that\n"
        "                        routes to it, and only those addresses listen (every\n"
        "                        address when a host name does not resolve here; use\n"
        "                        --bind when host names are not network names, e.g.\n"
        "                        network namespaces).\n"
        "  -x VAR[=VAL]          set VAR in every rank (VAR alone: copy our value,\n"
        "                        if we have one).\n"
        "                        Repeatable. Local ranks inherit our whole environment\n"
        "                        anyway; remote ranks get MPIV_* and -x variables only.\n"
        "      --timeout S       kill the job after S seconds (exit status %d)\n"
        "      --tag-output      prefix every output line with [rank]\n"
        "  -h, --help            show this help\n"
        "\n"
        "Output: each rank's stdout and stderr are forwarded to ours, whole lines at\n"
        "a time. Ranks read stdin from /dev/null.\n"
        "Signals: SIGINT, SIGTERM and SIGHUP are forwarded to every rank; ranks\n"
        "still alive %d ms later are killed.\n"
        "Failure: when a rank exits non-zero or dies of a signal, mpiv_run says\n"
        "which and how, terminates the other ranks (SIGTERM, then SIGKILL) and\n"
        "exits with that rank's status (128+N for signal N). A rank that called\n"
        "mpiv_init and exits without mpiv_finalize fails the job the same way,\n"
        "even with status 0 (exit status 1). Bad usage exits 2; mpiv_run's own\n"
        "failures (cannot fork, listen, ...) exit 1.\n"
        "Each rank runs in its own process group, so a launcher's children die\n"
        "with it. Through ssh, mpiv_run ends the local ssh client; a remote rank\n"
        "then loses its connection to the exchange (and its stdout).\n"
        "\n"
        "Variables mpiv_run sets in each rank:\n"
        "  MPIV_BOOT_ADDR        host:port of mpiv_run's key-value exchange\n"
        "  MPIV_JOB_SECRET       random per-job secret presented to the exchange\n"
        "  MPIV_RANK, MPIV_SIZE  the rank and the number of ranks\n"
        "  MPIV_JOB_KEY          random per-job key naming the job's shm segments\n"
        "                        (mpiv_run removes those a killed rank left, and\n"
        "                        libfabric's /dev/shm/<pid>:* of ranks it forked)\n"
        "  MPIV_LOCAL_RANK, MPIV_LOCAL_SIZE  index of the rank among the ranks of\n"
        "                        its host, and their number\n"
        "A program started by mpiv_run joins the job through MPIV_BOOT_ADDR; one\n"
        "started by srun/mpirun/prterun (PMIX_RANK set) through PMIx; one started\n"
        "alone is rank 0 of 1.\n"
        "Variables the bootstrap reads:\n"
        "  MPIV_BOOT_TIMEOUT     integer 1..86400, default 60: seconds a rank waits\n"
        "                        for one step of the exchange before failing. mpiv_run\n"
        "                        reads it too (from -x or its environment): a rank that\n"
        "                        has not joined this long after it was started, while\n"
        "                        others have, ends the job with a message naming it\n"
        "                        and its host; so does a rank that exits before joining\n"
        "                        while others have joined.\n"
        "\n",
        MPIV_RANK_MAX + 1, EXIT_TIMEOUT, KILL_GRACE_MS);
    util_config_help(stdout);
}

static long parse_long(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end != '\0' || errno || v < lo || v > hi)
        usage_error("%s %s: expected an integer from %ld to %ld", opt, s, lo, hi);
    return v;
}

static char **split_list(const char *s, int *count)
{
    char *copy = strdup(s);
    int n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!copy || !v) {
        fprintf(stderr, "%s: out of memory\n", prog_name);
        exit(EXIT_RUNTIME);
    }
    int k = 0;
    for (char *tok = copy, *next; tok; tok = next) {
        next = strchr(tok, ',');
        if (next)
            *next++ = '\0';
        if (!*tok)
            usage_error("-H %s: empty host name", s);
        v[k++] = tok;
    }
    *count = k;
    return v;
}

static int valid_var_name(const char *s, size_t len)
{
    if (len == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return 0;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
            return 0;
    return 1;
}

static void parse_args(int argc, char **argv, struct opts *o)
{
    enum { OPT_LAUNCHER = 256, OPT_TIMEOUT, OPT_TAG, OPT_BIND, OPT_MAP };
    static const struct option longopts[] = {
        {"np", required_argument, NULL, 'n'},
        {"hosts", required_argument, NULL, 'H'},
        {"launcher", required_argument, NULL, OPT_LAUNCHER},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"tag-output", no_argument, NULL, OPT_TAG},
        {"bind", required_argument, NULL, OPT_BIND},
        {"map-by", required_argument, NULL, OPT_MAP},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->nranks = -1;
    o->xvars = calloc((size_t)argc + 1, sizeof *o->xvars);
    if (!o->xvars)
        exit(EXIT_RUNTIME);
    opterr = 0;
    int c;
    /* '+': stop at the program's name, its options are its own */
    while ((c = getopt_long(argc, argv, "+:n:H:x:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            o->nranks = parse_long("-n", optarg, 1, MPIV_RANK_MAX + 1L);
            break;
        case 'H':
            o->hosts = split_list(optarg, &o->nhosts);
            break;
        case 'x': {
            size_t nl = strcspn(optarg, "=");
            if (!valid_var_name(optarg, nl))
                usage_error("-x %s: expected VAR or VAR=VALUE", optarg);
            o->xvars[o->nx++] = optarg;
            break;
        }
        case OPT_LAUNCHER:
            if (!*optarg || strspn(optarg, " \t") == strlen(optarg))
                usage_error("--launcher: empty template");
            o->launcher = optarg;
            break;
        case OPT_TIMEOUT:
            o->timeout_s = parse_long("--timeout", optarg, 1, 100000000L);
            break;
        case OPT_TAG:
            o->tag_output = 1;
            break;
        case OPT_BIND: {
            struct in_addr a;
            if (inet_pton(AF_INET, optarg, &a) != 1)
                usage_error("--bind %s: expected an IPv4 address", optarg);
            o->bind = optarg;
            break;
        }
        case OPT_MAP:
            if (strcmp(optarg, "rr") == 0)
                o->map_block = 0;
            else if (strcmp(optarg, "block") == 0)
                o->map_block = 1;
            else
                usage_error("--map-by %s: expected rr or block", optarg);
            break;
        case 'h':
            print_help();
            exit(0);
        case ':':
            usage_error("option %s needs a value", argv[optind - 1]);
        default:
            if (optopt)
                usage_error("unknown option -%c", optopt);
            usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    if (o->nranks < 0)
        usage_error("missing -n N (the number of ranks)");
    if (optind >= argc)
        usage_error("missing the program to run");
    o->argv = argv + optind;
    if (o->launcher && strstr(o->launcher, "{host}") && !o->hosts)
        usage_error("--launcher '%s' names {host} but no hosts were given (-H)", o->launcher);
}

/* Local program given as a name or path: check it exists and is executable
 * here, so that a typo is a usage error and not N failing ranks. */
static void check_program(const char *prog)
{
    if (strchr(prog, '/')) {
        struct stat st;
        if (stat(prog, &st) != 0)
            usage_error("%s: %s", prog, strerror(errno));
        if (!S_ISREG(st.st_mode) || access(prog, X_OK) != 0)
            usage_error("%s: not an executable file", prog);
        return;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    char buf[PATH_MAX];
    for (const char *p = path;;) {
        size_t l = strcspn(p, ":");
        int n = snprintf(buf, sizeof buf, "%.*s%s%s", (int)l, p, l ? "/" : "./", prog);
        struct stat st;
        if (n > 0 && (size_t)n < sizeof buf && stat(buf, &st) == 0 && S_ISREG(st.st_mode) &&
            access(buf, X_OK) == 0)
            return;
        if (!p[l])
            break;
        p += l + 1;
    }
    usage_error("%s: program not found in PATH", prog);
}

/* ---------------------------------------------------------------------- */
/* ranks and their placement                                               */
/* ---------------------------------------------------------------------- */

struct stream {
    int fd; /* -1 once closed */
    int out_fd;
    int rank;
    size_t used;
    char buf[LINE_MAX_BUF];
};

struct rank {
    pid_t pid; /* also its process group */
    int host;  /* index into opts.hosts, -1 local */
    int local_rank, local_size;
    int alive;
    int status; /* wait status once reaped */
    int joined;   /* it presented the secret: it is part of the job       */
    int said_bye; /* it left the job through mpiv_finalize (BYE)          */
    int released; /* we told it the exchange failed: it may exit anyhow   */
    uint64_t spawned_at; /* when we started it, 0: not yet */
    struct stream out, err;
};

static struct opts opt;
static struct rank *ranks;
static int nranks;

/* Orders -H entries by name, then by position (so equal names keep the
 * first one first). */
static int host_cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(opt.hosts[x], opt.hosts[y]);
    return c ? c : (x > y) - (x < y);
}

static void place_ranks(void)
{
    int per_block = opt.nhosts ? (nranks + opt.nhosts - 1) / opt.nhosts : 0;
    for (int r = 0; r < nranks; r++) {
        if (!opt.hosts)
            ranks[r].host = -1;
        else
            ranks[r].host = opt.map_block ? r / per_block : r % opt.nhosts;
    }
    /* Ranks share a host when their host names are equal (so "-H a,a" runs
     * two ranks on a), or when both are local: each -H entry maps to the
     * first entry with its name (found by sorting, not by comparing every
     * pair: a -H list may be as long as the job). */
    int nh = opt.hosts ? opt.nhosts : 1;
    int *order = malloc((size_t)nh * sizeof *order), *same = malloc((size_t)nh * sizeof *same);
    int *seen = calloc((size_t)nh, sizeof *seen), *count = calloc((size_t)nh, sizeof *count);
    if (!order || !same || !seen || !count) {
        fprintf(stderr, "%s: out of memory\n", prog_name);
        exit(EXIT_RUNTIME);
    }
    for (int h = 0; h < nh; h++)
        order[h] = same[h] = h;
    if (opt.hosts) {
        qsort(order, (size_t)nh, sizeof *order, host_cmp);
        for (int i = 1; i < nh; i++)
            if (strcmp(opt.hosts[order[i]], opt.hosts[order[i - 1]]) == 0)
                same[order[i]] = same[order[i - 1]];
    }
    for (int r = 0; r < nranks; r++)
        count[same[ranks[r].host < 0 ? 0 : ranks[r].host]]++;
    for (int r = 0; r < nranks; r++) {
        int h = same[ranks[r].host < 0 ? 0 : ranks[r].host];
        ranks[r].local_rank = seen[h]++;
        ranks[r].local_size = count[h];
    }
    free(order);
    free(same);
    free(seen);
    free(count);
}

/* ---------------------------------------------------------------------- */
/* output forwarding                                                       */
/* ---------------------------------------------------------------------- */

static void write_all(int fd, const char *p, size_t len)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* our stdout is gone: drop, the job goes on */
        p += n;
        len -= (size_t)n;
    }
}

static void emit(int rank, struct stream *s, size_t len, int add_newline)
{
    char tag[32];
    int tl = 0;
    if (opt.tag_output)
        tl = snprintf(tag, sizeof tag, "[%d] ", rank);
    /* one writev-like write per line keeps lines whole on a shared pipe */
    if (tl > 0 || add_newline) {
        char *line = malloc((size_t)tl + len + 1);
        if (line) {
            memcpy(line, tag, (size_t)tl);
            memcpy(line + tl, s->buf, len);
            if (add_newline)
                line[tl + len] = '\n';
            write_all(s->out_fd, line, (size_t)tl + len + (add_newline ? 1 : 0));
            free(line);
            return;
        }
    }
    write_all(s->out_fd, s->buf, len);
}

static void flush_lines(int rank, struct stream *s, int at_eof)
{
    size_t start = 0;
    for (size_t i = 0; i < s->used; i++) {
        if (s->buf[i] != '\n')
            continue;
        if (start) {
            memmove(s->buf, s->buf + start, s->used - start);
            s->used -= start;
            i -= start;
            start = 0;
        }
        emit(rank, s, i + 1, 0);
        start = i + 1;
    }
    if (start) {
        memmove(s->buf, s->buf + start, s->used - start);
        s->used -= start;
    }
    if (s->used && (at_eof || s->used == sizeof s->buf)) {
        emit(rank, s, s->used, opt.tag_output);
        s->used = 0;
    }
}

static int nopen_streams; /* ranks' stdout and stderr pipes still open */

static void stream_close(int rank, struct stream *s)
{
    if (s->fd < 0)
        return;
    flush_lines(rank, s, 1);
    close(s->fd);
    s->fd = -1;
    nopen_streams--;
}

static void stream_read(int rank, struct stream *s)
{
    ssize_t n = read(s->fd, s->buf + s->used, sizeof s->buf - s->used);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        stream_close(rank, s);
        return;
    }
    s->used += (size_t)n;
    flush_lines(rank, s, 0);
}

/* ---------------------------------------------------------------------- */
/* the key-value exchange                                                  */
/* ---------------------------------------------------------------------- */

enum client_state { CL_HELLO, CL_JOINED };

struct client {
    int fd;
    enum client_state state;
    int rank;
    char peer[64];
    uint32_t ip;       /* the peer's IPv4 address (network order) */
    uint64_t hello_by; /* CL_HELLO: dropped if not joined by then */
    char *in; /* bytes received and not yet parsed */
    size_t in_used, in_cap;
    int pending; /* a GATHER is waiting for the others */
    uint32_t pending_len;
    char *pending_data;
    int dead; /* dropped: freed at the end of the event loop's round */
    struct client *next;
};

/* The exchange listens on one socket per local address that some rank
 * connects to (only 127.0.0.1 without -H), not on every address. */
struct listener {
    int fd;
    int port;
    char addr[INET_ADDRSTRLEN];
};
static struct listener listeners[MAX_LISTENERS];
static int nlisteners;
static char job_secret[BOOT_SECRET_HEX + 1];
static uint64_t job_key; /* MPIV_JOB_KEY: names what ranks leave in /dev/shm */
static struct client *hellos; /* connections still in CL_HELLO, newest first */
static int nhellos;
static struct client **client_of_rank; /* joined connections */
static struct client *graveyard; /* dropped, not yet freed */
static int npending;
static int njoined;          /* ranks that have ever joined */
static void startup_check_exits(void);         /* joined connections with a GATHER waiting */
static int bye_rank = -1;    /* the first rank that left with BYE, -1: none */
static int kvs_broken;       /* a rank left; every gather now fails */
static char kvs_why[256];

static void make_secret(void)
{
    unsigned char raw[BOOT_SECRET_BYTES + sizeof job_key];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "%s: getrandom: %s\n", prog_name, strerror(errno));
            exit(EXIT_RUNTIME);
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < BOOT_SECRET_BYTES; i++)
        snprintf(job_secret + 2 * i, 3, "%02x", raw[i]);
    memcpy(&job_key, raw + BOOT_SECRET_BYTES, sizeof job_key);
    if (!job_key)
        job_key = 1; /* 0 means "none" to the ranks */
}

/* Compares in time that depends only on the expected length, so a client
 * cannot learn the secret a byte at a time from how fast it is refused. */
static int secret_matches(const char *given, size_t len)
{
    volatile unsigned char diff = len != BOOT_SECRET_HEX;
    for (size_t i = 0; i < BOOT_SECRET_HEX; i++) {
        unsigned char g = i < len ? (unsigned char)given[i] : 0;
        diff |= g ^ (unsigned char)job_secret[i];
    }
    return diff == 0;
}

/* The listener on `addr`, made on first use (port chosen by the kernel;
 * the same as the first listener's when it is free there, which keeps the
 * ports a firewall must let through to one). */
static struct listener *listener_on(const char *addr)
{
    for (int i = 0; i < nlisteners; i++)
        if (strcmp(listeners[i].addr, addr) == 0)
            return &listeners[i];
    if (nlisteners == MAX_LISTENERS) {
        fprintf(stderr, "%s: the hosts route through more than %d local addresses; use --bind\n",
                prog_name, MAX_LISTENERS);
        exit(EXIT_RUNTIME);
    }
    struct listener *l = &listeners[nlisteners];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, addr, &sa.sin_addr);
    for (int attempt = 0; attempt < 2; attempt++) {
        l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (l->fd < 0) {
            fprintf(stderr, "%s: socket: %s\n", prog_name, strerror(errno));
            exit(EXIT_RUNTIME);
        }
        sa.sin_port = attempt == 0 && nlisteners ? htons((uint16_t)listeners[0].port) : 0;
        socklen_t sl = sizeof sa;
        /* a deep backlog: a large job's ranks all connect at once */
        if (bind(l->fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(l->fd, 4096) == 0 &&
            getsockname(l->fd, (struct sockaddr *)&sa, &sl) == 0)
            break;
        int e = errno;
        close(l->fd);
        if (attempt == 1 || !nlisteners) {
            fprintf(stderr, "%s: cannot listen on %s for the key-value exchange: %s\n",
                    prog_name, addr, strerror(e));
            exit(EXIT_RUNTIME);
        }
    }
    l->port = ntohs(sa.sin_port);
    snprintf(l->addr, sizeof l->addr, "%s", addr);
    nlisteners++;
    return l;
}

/* The local address that routes to `host` (a UDP connect sends nothing),
 * or 0 when the host name does not resolve. */
static int route_addr_to(const char *host, char *out, size_t outlen)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM};
    struct addrinfo *res;
    if (getaddrinfo(host, "9", &hints, &res) != 0)
        return 0;
    int ok = 0;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 &&
            inet_ntop(AF_INET, &sa.sin_addr, out, (socklen_t)outlen))
            ok = 1;
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return ok;
}

static void hello_unlink(struct client *c)
{
    struct client **pp = &hellos;
    while (*pp && *pp != c)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = c->next;
        nhellos--;
    }
}

static void client_drop(struct client *c)
{
    if (c->dead)
        return;
    if (c->state == CL_HELLO)
        hello_unlink(c);
    if (c->state == CL_JOINED && client_of_rank[c->rank] == c) {
        client_of_rank[c->rank] = NULL;
        npending -= c->pending;
    }
    close(c->fd);
    free(c->in);
    free(c->pending_data);
    c->in = c->pending_data = NULL;
    /* the event loop may still hold c for this round */
    c->dead = 1;
    c->next = graveyard;
    graveyard = c;
}

static void graveyard_free(void)
{
    while (graveyard) {
        struct client *c = graveyard;
        graveyard = c->next;
        free(c);
    }
}

static int send_blocking(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, 10000) <= 0)
                return -1; /* a rank that does not read for 10 s is gone */
            continue;
        }
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void send_failure(struct client *c, const char *why)
{
    uint32_t head[2] = {htonl(BOOT_ST_FAILED), htonl((uint32_t)strlen(why))};
    if (send_blocking(c->fd, head, sizeof head) == 0)
        send_blocking(c->fd, why, strlen(why));
}

/* Ends the exchange for everybody: every pending gather fails now, every
 * later one fails at once. */
static void kvs_break(const char *fmt, ...) UTIL_PRINTF(1, 2);
static void kvs_break(const char *fmt, ...)
{
    if (!kvs_broken) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(kvs_why, sizeof kvs_why, fmt, ap);
        va_end(ap);
        kvs_broken = 1;
    }
    for (int r = 0; r < nranks && npending; r++) {
        struct client *c = client_of_rank[r];
        if (c && c->pending) {
            send_failure(c, kvs_why);
            ranks[r].released = 1;
            client_drop(c);
        }
    }
}

static void kvs_try_complete(void)
{
    if (kvs_broken) {
        kvs_break("%s", kvs_why);
        return;
    }
    if (bye_rank >= 0) {
        kvs_break("rank %d already left the job (boot_finalize), so an allgather or "
                  "barrier cannot complete", bye_rank);
        return;
    }
    if (npending < nranks)
        return;
    uint32_t len = 0;
    for (int r = 0; r < nranks; r++) {
        struct client *c = client_of_rank[r];
        if (r == 0)
            len = c->pending_len;
        else if (c->pending_len != len) {
            kvs_break("allgather with different sizes: rank 0 gave %u bytes, rank %d %u",
                      len, r, c->pending_len);
            return;
        }
    }
    size_t total = (size_t)len * (size_t)nranks;
    char *all = total ? malloc(total) : NULL;
    if (total && !all) {
        kvs_break("mpiv_run is out of memory for an allgather of %zu bytes", total);
        return;
    }
    for (int r = 0; r < nranks; r++) {
        struct client *c = client_of_rank[r];
        if (len)
            memcpy(all + (size_t)r * len, c->pending_data, len);
        free(c->pending_data);
        c->pending_data = NULL;
        c->pending = 0;
    }
    npending = 0;
    uint32_t head[2] = {htonl(BOOT_ST_OK), htonl((uint32_t)total)};
    for (int r = 0; r < nranks; r++) {
        struct client *c = client_of_rank[r];
        if (send_blocking(c->fd, head, sizeof head) != 0 ||
            (total && send_blocking(c->fd, all, total) != 0)) {
            client_drop(c);
            kvs_break("rank %d stopped reading from the exchange", r);
        }
    }
    free(all);
}

/* One line about a refused connection, at most one per REFUSAL_LOG_MS
 * (plus a count of those left out): whoever can reach the port can make
 * refusals as fast as they like. */
static uint64_t refusal_log_until;
static unsigned refusals_unlogged;

static void refusal_log_flush(void)
{
    if (refusals_unlogged)
        fprintf(stderr, "%s: ... and %u more connections to the key-value exchange refused or "
                        "dropped\n", prog_name, refusals_unlogged);
    refusals_unlogged = 0;
}

static void log_refusal(const struct client *c, const char *why)
{
    uint64_t now = util_now_ns();
    if (now < refusal_log_until) {
        refusals_unlogged++;
        return;
    }
    refusal_log_flush();
    fprintf(stderr, "%s: refused a connection to the key-value exchange from %s: %s\n",
            prog_name, c->peer, why);
    refusal_log_until = now + (uint64_t)REFUSAL_LOG_MS * 1000000ull;
}

/* A client that said hello and is not part of this job: it learns why (a
 * rank then fails at once instead of retrying), and is dropped. */
static void refuse(struct client *c, const char *why)
{
    log_refusal(c, why);
    send_failure(c, why);
    client_drop(c);
}

/* A connection that has not said hello in time, or makes room for a newer
 * one: told to try again (a rank does, until its MPIV_BOOT_TIMEOUT). */
static void turn_away(struct client *c, const char *why)
{
    log_refusal(c, why);
    uint32_t busy = htonl(BOOT_ST_BUSY);
    send(c->fd, &busy, sizeof busy, MSG_NOSIGNAL | MSG_DONTWAIT);
    client_drop(c);
}

/* Parses what c has sent so far; returns 0 if c was dropped. */
static int client_parse(struct client *c)
{
    for (;;) {
        if (c->state == CL_HELLO) {
            const size_t fixed = BOOT_WIRE_MAGIC_LEN + 12;
            if (c->in_used >= BOOT_WIRE_MAGIC_LEN &&
                memcmp(c->in, BOOT_WIRE_MAGIC, BOOT_WIRE_MAGIC_LEN) != 0) {
                log_refusal(c, "not an MPIv bootstrap client");
                client_drop(c);
                return 0;
            }
            if (c->in_used < fixed)
                return 1;
            uint32_t f[3];
            memcpy(f, c->in + BOOT_WIRE_MAGIC_LEN, sizeof f);
            uint32_t rank = ntohl(f[0]), size = ntohl(f[1]), slen = ntohl(f[2]);
            if (slen > 4 * BOOT_SECRET_HEX) {
                refuse(c, "wrong job secret");
                return 0;
            }
            if (c->in_used < fixed + slen)
                return 1;
            if (!secret_matches(c->in + fixed, slen)) {
                refuse(c, "wrong job secret");
                return 0;
            }
            if (size != (uint32_t)nranks || rank >= (uint32_t)nranks) {
                char why[96];
                snprintf(why, sizeof why, "rank %u of %u does not fit this job of %d ranks",
                         rank, size, nranks);
                refuse(c, why);
                return 0;
            }
            if (client_of_rank[rank] || ranks[rank].said_bye) {
                char why[64];
                snprintf(why, sizeof why, "rank %u joined twice", rank);
                refuse(c, why);
                return 0;
            }
            hello_unlink(c);
            c->state = CL_JOINED;
            c->rank = (int)rank;
            client_of_rank[rank] = c;
            ranks[rank].joined = 1;
            njoined++;
            startup_check_exits();
            memmove(c->in, c->in + fixed + slen, c->in_used - fixed - slen);
            c->in_used -= fixed + slen;
            uint32_t ack = htonl(BOOT_ST_OK);
            if (send_blocking(c->fd, &ack, sizeof ack) != 0) {
                client_drop(c);
                kvs_break("rank %u lost its connection while joining", rank);
                return 0;
            }
            continue;
        }
        if (c->in_used < 8)
            return 1;
        uint32_t h[2];
        memcpy(h, c->in, sizeof h);
        uint32_t op = ntohl(h[0]), len = ntohl(h[1]);
        if (op == BOOT_OP_BYE) {
            ranks[c->rank].said_bye = 1;
            if (bye_rank < 0)
                bye_rank = c->rank;
            client_drop(c);
            /* others already waiting in an allgather can never complete */
            if (npending)
                kvs_try_complete();
            return 0;
        }
        if (op != BOOT_OP_GATHER || len > BOOT_MAX_BLOB || c->pending) {
            int r = c->rank;
            client_drop(c);
            kvs_break("rank %d broke the exchange protocol", r);
            return 0;
        }
        if (c->in_used < 8 + (size_t)len)
            return 1;
        c->pending_data = len ? malloc(len) : NULL;
        if (len && !c->pending_data) {
            kvs_break("mpiv_run is out of memory");
            return !c->dead;
        }
        if (len)
            memcpy(c->pending_data, c->in + 8, len);
        c->pending_len = len;
        c->pending = 1;
        npending++;
        memmove(c->in, c->in + 8 + len, c->in_used - 8 - len);
        c->in_used -= 8 + len;
        kvs_try_complete();
        /* a client sends one request per reply; a broken exchange may have
         * dropped it just now */
        return !c->dead;
    }
}

/* Reads what is available; returns 0 if c was dropped. */
static int client_read(struct client *c)
{
    for (;;) {
        if (c->in_cap - c->in_used < 4096) {
            size_t cap = c->in_cap ? 2 * c->in_cap : 8192;
            if (cap > BOOT_MAX_BLOB + 8192) {
                int r = c->state == CL_JOINED ? c->rank : -1;
                client_drop(c);
                if (r >= 0)
                    kvs_break("rank %d sent too much to the exchange", r);
                return 0;
            }
            char *in = realloc(c->in, cap);
            if (!in)
                return 1;
            c->in = in;
            c->in_cap = cap;
        }
        ssize_t n = recv(c->fd, c->in + c->in_used, c->in_cap - c->in_used, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return client_parse(c);
        if (n <= 0) {
            if (!client_parse(c))
                return 0;
            if (c->state == CL_HELLO) {
                client_drop(c);
                return 0;
            }
            int r = c->rank;
            client_drop(c);
            kvs_break("rank %d left the exchange (it exited or lost its connection) without "
                      "leaving the job through mpiv_finalize", r);
            return 0;
        }
        c->in_used += (size_t)n;
    }
}

/* Drops connections that did not join in time; returns the earliest
 * deadline of those still saying hello (UINT64_MAX: none). */
static uint64_t kvs_expire(uint64_t now)
{
    uint64_t next = UINT64_MAX;
    for (struct client *c = hellos, *n; c; c = n) {
        n = c->next;
        if (now >= c->hello_by)
            turn_away(c, "no valid hello in time");
        else if (c->hello_by < next)
            next = c->hello_by;
    }
    return next;
}

/* Makes room for one more connection from `ip`: turns away the oldest
 * connection still saying hello from that address when it has
 * HELLO_PER_ADDR of them, or the oldest of all at HELLO_TOTAL. */
static void hello_make_room(uint32_t ip)
{
    int same = 0;
    struct client *oldest_same = NULL, *oldest = NULL;
    for (struct client *c = hellos; c; c = c->next) {
        if (c->ip == ip) {
            same++;
            oldest_same = c; /* newest first: the last one seen is oldest */
        }
        oldest = c;
    }
    if (same >= HELLO_PER_ADDR)
        turn_away(oldest_same, "too many connections from one address without a valid hello");
    else if (nhellos >= HELLO_TOTAL)
        turn_away(oldest, "too many connections without a valid hello");
}

static void kvs_accept(int lfd)
{
    for (;;) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        struct client *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->state = CL_HELLO;
        c->rank = -1;
        c->hello_by = util_now_ns() + HELLO_MS * 1000000ull;
        c->ip = sa.sin_addr.s_addr;
        char a[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &sa.sin_addr, a, sizeof a);
        snprintf(c->peer, sizeof c->peer, "%s:%u", a, ntohs(sa.sin_port));
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        hello_make_room(c->ip);
        c->next = hellos;
        hellos = c;
        nhellos++;
        /* a rank's hello is usually here already: read it now, so that it
         * joins before any later connection can push it out */
        client_read(c);
    }
}

/* ---------------------------------------------------------------------- */
/* starting ranks                                                          */
/* ---------------------------------------------------------------------- */

static sigset_t handled_signals, old_mask;
/* ssh gives up on a host that does not answer within the bootstrap's
 * timeout instead of trying for minutes */
static char ssh_template[96];
static char boot_addr_default[128]; /* host:port of the exchange for local ranks */
static char **boot_addr_of; /* per -H host: the host:port it connects to */

/* Everything built for one rank's command line and environment is noted
 * here and freed once the rank is forked. */
static void **scratch;
static size_t nscratch, scratch_cap;

static void *keep(void *p)
{
    if (!p || nscratch == scratch_cap) {
        size_t cap = scratch_cap ? 2 * scratch_cap : 64;
        void **v = p ? realloc(scratch, cap * sizeof *v) : NULL;
        if (!v) {
            fprintf(stderr, "%s: out of memory\n", prog_name);
            exit(EXIT_RUNTIME);
        }
        scratch = v;
        scratch_cap = cap;
    }
    scratch[nscratch++] = p;
    return p;
}

static void scratch_free(void)
{
    for (size_t i = 0; i < nscratch; i++)
        free(scratch[i]);
    nscratch = 0;
}

static char *xasprintf(const char *fmt, ...) UTIL_PRINTF(1, 2);
static char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return keep(s);
}

/* The rank's own variables as NAME=VALUE strings, NULL-terminated; with
 * `all_mpiv`, also every MPIV_* variable of ours (for remote ranks, which
 * do not inherit our environment). */
static char **rank_env(int r, int all_mpiv)
{
    extern char **environ;
    size_t cap = 16 + (size_t)opt.nx;
    if (all_mpiv)
        for (char **e = environ; *e; e++)
            cap++;
    char **v = keep(calloc(cap, sizeof *v));
    size_t n = 0;
    const char *addr = ranks[r].host >= 0 ? boot_addr_of[ranks[r].host] : boot_addr_default;
    static const char *ours[] = {"MPIV_BOOT_ADDR=", "MPIV_JOB_SECRET=", "MPIV_JOB_KEY=", "MPIV_RANK=",
                                 "MPIV_SIZE=", "MPIV_LOCAL_RANK=", "MPIV_LOCAL_SIZE="};
    if (all_mpiv) {
        for (char **e = environ; *e; e++) {
            if (strncmp(*e, "MPIV_", 5) != 0)
                continue;
            int skip = 0;
            for (size_t k = 0; k < sizeof ours / sizeof *ours; k++)
                skip |= strncmp(*e, ours[k], strlen(ours[k])) == 0;
            if (!skip)
                v[n++] = *e;
        }
    }
    for (int i = 0; i < opt.nx; i++) {
        const char *x = opt.xvars[i];
        if (strchr(x, '=')) {
            v[n++] = (char *)x;
        } else {
            const char *val = getenv(x);
            if (val)
                v[n++] = xasprintf("%s=%s", x, val);
        }
    }
    v[n++] = xasprintf("MPIV_BOOT_ADDR=%s", addr);
    v[n++] = xasprintf("MPIV_JOB_SECRET=%s", job_secret);
    v[n++] = xasprintf("MPIV_JOB_KEY=%016" PRIx64, job_key);
    v[n++] = xasprintf("MPIV_RANK=%d", r);
    v[n++] = xasprintf("MPIV_SIZE=%d", nranks);
    v[n++] = xasprintf("MPIV_LOCAL_RANK=%d", ranks[r].local_rank);
    v[n++] = xasprintf("MPIV_LOCAL_SIZE=%d", ranks[r].local_size);
    v[n] = NULL;
    return v;
}

/* Single-quotes s for a POSIX shell. */
static char *shell_quote(const char *s)
{
    size_t len = 3;
    for (const char *p = s; *p; p++)
        len += *p == '\'' ? 4 : 1;
    char *q = keep(malloc(len)), *o = q;
    *o++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    *o++ = '\'';
    *o = '\0';
    return q;
}

/* The shell code that reads the job secret from the first line of stdin
 * into the environment, or says why it could not (a launcher that does not
 * forward stdin) and fails the rank. */
static const char *read_secret_sh(int r)
{
    return xasprintf("if IFS= read -r MPIV_JOB_SECRET; then export MPIV_JOB_SECRET; else "
                     "echo 'mpiv_run: rank %d could not read the job secret from its stdin "
                     "(the launcher must forward stdin)' >&2; exit 127; fi",
                     r);
}

/* argv for a rank started through a launcher template: the template's
 * words ({host} replaced), then a shell that reads the job secret from
 * stdin and runs `env VARS... prog args...`. The secret is never on a
 * command line, where ps shows it to every user (the launcher's, and on
 * every host it passes through) for as long as the job runs; spawn_rank
 * writes it to the rank's stdin. When the launcher is ssh, whose remote
 * side hands its arguments to a shell, the whole command is one
 * shell-quoted word that also changes to our directory. */
static char **launcher_argv(int r)
{
    const char *tmpl = opt.launcher ? opt.launcher : ssh_template;
    const char *host = ranks[r].host >= 0 ? opt.hosts[ranks[r].host] : "localhost";
    char **env = rank_env(r, 1);
    size_t nenv = 0, nargs = 0, nwords = 0;
    while (env[nenv])
        nenv++;
    while (opt.argv[nargs])
        nargs++;
    for (const char *p = tmpl; *p; p++)
        nwords += !isspace((unsigned char)*p) && (p == tmpl || isspace((unsigned char)p[-1]));
    char **v = keep(calloc(nwords + nenv + nargs + 8, sizeof *v));
    size_t n = 0;
    char *copy = keep(strdup(tmpl));
    for (char *save = NULL, *w = strtok_r(copy, " \t", &save); w;
         w = strtok_r(NULL, " \t", &save)) {
        char *at = strstr(w, "{host}");
        v[n++] = at ? xasprintf("%.*s%s%s", (int)(at - w), w, host, at + 6) : w;
    }
    const char *base = strrchr(v[0], '/');
    base = base ? base + 1 : v[0];
    if (strcmp(base, "ssh") == 0) {
        char cwd[PATH_MAX];
        char *cmd = xasprintf("%s && cd %s && exec env", read_secret_sh(r),
                              shell_quote(getcwd(cwd, sizeof cwd) ? cwd : "."));
        for (size_t i = 0; i < nenv; i++)
            if (strncmp(env[i], "MPIV_JOB_SECRET=", 16) != 0)
                cmd = xasprintf("%s %s", cmd, shell_quote(env[i]));
        for (size_t i = 0; i < nargs; i++)
            cmd = xasprintf("%s %s", cmd, shell_quote(opt.argv[i]));
        v[n++] = cmd;
    } else {
        v[n++] = "sh";
        v[n++] = "-c";
        v[n++] = xasprintf("%s && exec \"$@\"", read_secret_sh(r));
        v[n++] = "mpiv_rank"; /* $0 of that shell */
        v[n++] = "env";
        for (size_t i = 0; i < nenv; i++)
            if (strncmp(env[i], "MPIV_JOB_SECRET=", 16) != 0)
                v[n++] = env[i];
        for (size_t i = 0; i < nargs; i++)
            v[n++] = opt.argv[i];
    }
    v[n] = NULL;
    return v;
}

static void child_fail(const char *what, const char *arg)
{
    char msg[512];
    int len = snprintf(msg, sizeof msg, "%s: %s %s: %s\n", prog_name, what, arg, strerror(errno));
    if (len > 0)
        write_all(2, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1);
    _exit(127);
}

/* pid -> rank, open addressing (linear probing) in a table of at least
 * twice the ranks, so that reaping one rank does not look at all. */
static int *pid_slots;
static size_t pid_mask;
static int nalive; /* ranks started and not yet reaped */
static struct rlimit user_nofile; /* RLIMIT_NOFILE as we found it */

static void pid_index_init(void)
{
    size_t n = 16;
    while (n < 2 * (size_t)nranks)
        n *= 2;
    pid_slots = malloc(n * sizeof *pid_slots);
    if (!pid_slots) {
        fprintf(stderr, "%s: out of memory\n", prog_name);
        exit(EXIT_RUNTIME);
    }
    for (size_t i = 0; i < n; i++)
        pid_slots[i] = -1;
    pid_mask = n - 1;
}

static void pid_index_add(pid_t pid, int r)
{
    size_t i = (size_t)pid * 2654435761u & pid_mask;
    while (pid_slots[i] >= 0)
        i = (i + 1) & pid_mask;
    pid_slots[i] = r;
}

/* The rank whose process is pid, or -1. */
static int pid_index_find(pid_t pid)
{
    for (size_t i = (size_t)pid * 2654435761u & pid_mask; pid_slots[i] >= 0;
         i = (i + 1) & pid_mask)
        if (ranks[pid_slots[i]].pid == pid)
            return pid_slots[i];
    return -1;
}

static void spawn_rank(int r)
{
    int out[2], err[2], in[2] = {-1, -1};
    /* through a launcher the secret goes to the rank's stdin; a rank we
     * fork ourselves has it in its environment, which only its owner can
     * read (/proc/PID/environ is mode 0400) */
    int remote = opt.launcher || opt.hosts, secret_on_stdin = remote;
    char **argv = remote ? launcher_argv(r) : opt.argv;
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
        (secret_on_stdin && pipe2(in, O_CLOEXEC) != 0)) {
        fprintf(stderr, "%s: pipe: %s\n", prog_name, strerror(errno));
        exit(EXIT_RUNTIME);
    }
    char **env = remote ? NULL : rank_env(r, 0);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", prog_name, strerror(errno));
        exit(EXIT_RUNTIME);
    }
    if (pid == 0) {
        /* Own process group: we can kill the rank and everything it
         * started (a launcher's children) with one kill(-pid). */
        setpgid(0, 0);
        /* If mpiv_run dies without cleaning up, the rank goes with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        for (int s = 1; s < NSIG; s++)
            if (sigismember(&handled_signals, s) == 1)
                signal(s, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        int null = in[0] >= 0 ? in[0] : open("/dev/null", O_RDONLY);
        if (null < 0 || dup2(null, 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0)
            _exit(127);
        if (null > 2)
            close(null);
        /* the rank gets the user's limit, not the one we raised for
         * ourselves */
        setrlimit(RLIMIT_NOFILE, &user_nofile);
        if (env)
            for (char **e = env; *e; e++)
                putenv(*e);
        execvp(argv[0], argv);
        child_fail("cannot execute", argv[0]);
    }
    setpgid(pid, pid); /* also here: no race with an early kill(-pid) */
    scratch_free();
    if (secret_on_stdin) {
        /* 65 bytes always fit in an empty pipe: this never blocks */
        close(in[0]);
        char line[BOOT_SECRET_HEX + 2];
        int len = snprintf(line, sizeof line, "%s\n", job_secret);
        write_all(in[1], line, (size_t)len);
        close(in[1]);
    }
    close(out[1]);
    close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    ranks[r].pid = pid;
    ranks[r].alive = 1;
    ranks[r].spawned_at = util_now_ns();
    ranks[r].out.fd = out[0];
    ranks[r].out.out_fd = 1;
    ranks[r].out.rank = r;
    ranks[r].err.fd = err[0];
    ranks[r].err.out_fd = 2;
    ranks[r].err.rank = r;
    nopen_streams += 2;
    nalive++;
    pid_index_add(pid, r);
}

/* ---------------------------------------------------------------------- */
/* the event loop                                                          */
/* ---------------------------------------------------------------------- */

static int exit_code;          /* first failure's status, 0 so far */
static int terminating;        /* ranks have been told to stop */
static uint64_t kill_at_ns;    /* when survivors get SIGKILL; 0: not armed */
static int killed_hard;
static int boot_timeout_s;     /* MPIV_BOOT_TIMEOUT, as the ranks see it */
static int unjoined_exit = -1; /* the first rank that exited 0 without joining */
static int first_unjoined;     /* no rank below it is still to join */
#define STARTUP_GRACE_NS 1000000000ull

static void signal_all(int sig)
{
    for (int r = 0; r < nranks; r++)
        if (ranks[r].pid > 0)
            kill(-ranks[r].pid, sig); /* the group, even if its leader is reaped */
}

static void terminate_job(int sig)
{
    if (!terminating) {
        terminating = 1;
        kill_at_ns = util_now_ns() + (uint64_t)KILL_GRACE_MS * 1000000ull;
    }
    signal_all(sig);
}

static const char *host_of(int r)
{
    return ranks[r].host >= 0 ? opt.hosts[ranks[r].host] : "localhost";
}

/* Start-up cannot complete because of rank r: says so, fails the pending
 * exchanges of the ranks that joined (with the same reason) and ends the
 * job, so that nobody waits out MPIV_BOOT_TIMEOUT and nobody else is
 * blamed for the timeouts that would follow. */
static void startup_failed(int r, const char *fmt, ...) UTIL_PRINTF(2, 3);
static void startup_failed(int r, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "%s: rank %d (pid %d, host %s) %s; terminating the job\n", prog_name, r,
            (int)ranks[r].pid, host_of(r), why);
    kvs_break("rank %d %s", r, why);
    if (!exit_code)
        exit_code = EXIT_RUNTIME;
    terminate_job(SIGTERM);
}

/* A rank that exited with status 0 without joining is fine while nobody
 * joins (a program that is not an MPIv program), but once any rank has
 * joined, that one waits for it in vain. */
static void startup_check_exits(void)
{
    if (unjoined_exit >= 0 && njoined > 0 && !terminating)
        startup_failed(unjoined_exit, "exited with status 0 before joining the job (before "
                                      "mpiv_init), while other ranks joined it");
}

/* A rank that has not joined MPIV_BOOT_TIMEOUT seconds after we started it,
 * while others have joined and wait for it (a host that does not answer, a
 * launcher that hangs), ends the job, naming it and its host. `now` may be
 * ahead of the clock (a grace). Returns when to look again. */
static uint64_t startup_check_deadline(uint64_t now)
{
    while (first_unjoined < nranks &&
           (ranks[first_unjoined].joined || (ranks[first_unjoined].spawned_at &&
                                              !ranks[first_unjoined].alive)))
        first_unjoined++;
    if (terminating || first_unjoined == nranks || !ranks[first_unjoined].spawned_at)
        return UINT64_MAX;
    uint64_t due = ranks[first_unjoined].spawned_at + (uint64_t)boot_timeout_s * 1000000000ull;
    if (now < due || njoined == 0)
        return due;
    startup_failed(first_unjoined,
                   "has not joined the job %d s after it was started (MPIV_BOOT_TIMEOUT), while "
                   "other ranks wait for it: is host %s reachable, and does its launcher work?",
                   boot_timeout_s, host_of(first_unjoined));
    return UINT64_MAX;
}

static int status_code(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return 1;
}

static void rank_exited(int r, int st)
{
    ranks[r].alive = 0;
    nalive--;
    ranks[r].status = st;
    /* A BYE it sent just before exiting may still sit in our socket or,
     * for a rank behind ssh or a launcher, still be on its way: its exit
     * status travels on another connection and can come first. A local
     * rank's socket is closed by now, so this returns at once for it. */
    uint64_t bye_by = util_now_ns() + (uint64_t)BYE_WAIT_MS * 1000000ull;
    while (client_of_rank[r] && !ranks[r].said_bye) {
        uint64_t now = util_now_ns();
        if (now >= bye_by)
            break;
        struct pollfd p = {.fd = client_of_rank[r]->fd, .events = POLLIN};
        if (poll(&p, 1, (int)((bye_by - now) / 1000000u) + 1) <= 0)
            break;
        client_read(client_of_rank[r]);
    }
    int bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* A rank that joined and fails just as another's start-up deadline
     * comes most likely gave up waiting for that one: blame the one that
     * never joined. */
    if (ranks[r].joined && bad)
        startup_check_deadline(util_now_ns() + STARTUP_GRACE_NS);
    if (!ranks[r].joined && !bad && unjoined_exit < 0) {
        unjoined_exit = r;
        startup_check_exits();
    }
    /* Joined the job but never left it with mpiv_finalize's BYE (nor was
     * told by us that the exchange failed): its peers may be waiting for
     * messages that will never come, so even a status of 0 ends the job (as
     * Open MPI's mpirun does for a process that exits without finalizing). */
    int unfinished = ranks[r].joined && !ranks[r].said_bye && !ranks[r].released;
    if (unfinished) {
        /* its connection may be gone already: EOF is often read first */
        if (client_of_rank[r])
            client_drop(client_of_rank[r]);
        kvs_break("rank %d exited without calling mpiv_finalize", r);
    } else if (!ranks[r].said_bye && bad) {
        kvs_break("rank %d exited before joining the exchange", r);
    }
    if ((!bad && !unfinished) || terminating)
        return;
    fflush(stdout);
    if (WIFSIGNALED(st))
        fprintf(stderr, "%s: rank %d (pid %d) killed by signal %d (%s); terminating the job\n",
                prog_name, r, (int)ranks[r].pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
    else if (bad)
        fprintf(stderr, "%s: rank %d (pid %d) exited with status %d; terminating the job\n",
                prog_name, r, (int)ranks[r].pid, WEXITSTATUS(st));
    else
        fprintf(stderr,
                "%s: rank %d (pid %d) exited with status 0 without calling mpiv_finalize; "
                "terminating the job\n",
                prog_name, r, (int)ranks[r].pid);
    if (!exit_code)
        exit_code = bad ? status_code(st) : 1;
    terminate_job(SIGTERM);
}

static int reap(void)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0)
            break;
        int r = pid_index_find(pid);
        if (r >= 0 && ranks[r].alive)
            rank_exited(r, st);
    }
    return nalive;
}

/* Removes what killed ranks left in /dev/shm, once every rank is gone:
 * MPIv's shm segments are named after the job key (the ranks unlink them
 * as soon as all have mapped them, so only a rank killed during start-up
 * leaves one), and libfabric's shm provider names its files after the
 * process id ("<pid>:..."), which we know for the ranks we forked here
 * (through a launcher we do not). Only our own files, and never one whose
 * pid is alive again. */
static int pid_cmp(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

static void clean_dev_shm(void)
{
    int dfd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    pid_t *pids = NULL;
    int npids = 0;
    if (!opt.launcher && !opt.hosts && (pids = malloc((size_t)nranks * sizeof *pids))) {
        for (int r = 0; r < nranks; r++)
            if (ranks[r].pid > 0)
                pids[npids++] = ranks[r].pid;
        qsort(pids, (size_t)npids, sizeof *pids, pid_cmp);
    }
    char ours[32];
    int ol = snprintf(ours, sizeof ours, "mpiv-%016" PRIx64 "-", job_key);
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        int take = strncmp(n, ours, (size_t)ol) == 0;
        if (!take && npids && isdigit((unsigned char)n[0])) {
            char *end;
            long pid = strtol(n, &end, 10);
            pid_t p = (pid_t)pid;
            take = *end == ':' && pid > 0 && pid <= INT_MAX &&
                   bsearch(&p, pids, (size_t)npids, sizeof p, pid_cmp) &&
                   kill(p, 0) != 0 && errno == ESRCH;
        }
        struct stat st;
        if (take && fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_uid == geteuid())
            unlinkat(dfd, n, 0);
    }
    closedir(d);
    free(pids);
}

static int run_loop(int sfd)
{
    uint64_t deadline = opt.timeout_s ? util_now_ns() + (uint64_t)opt.timeout_s * 1000000000ull
                                      : 0;
    uint64_t drain_until = 0;
    int timed_out = 0;
    size_t cap = 1 + MAX_LISTENERS + 2 * (size_t)nranks + HELLO_TOTAL + (size_t)nranks;
    struct pollfd *pfd = calloc(cap, sizeof *pfd);
    void **what = calloc(cap, sizeof *what);
    if (!pfd || !what)
        exit(EXIT_RUNTIME);
    int alive = 0, nspawned = 0;
    for (;;) {
        /* Ranks start a batch at a time between rounds of the loop, so that
         * the first ones are served while the last ones start: with many
         * ranks, starting them all takes longer than MPIV_BOOT_TIMEOUT. */
        for (int k = 0; k < SPAWN_BATCH && nspawned < nranks && !terminating; k++) {
            spawn_rank(nspawned++);
            alive++;
        }
        int spawning = nspawned < nranks && !terminating;
        if (alive == 0 && nopen_streams == 0 && !spawning)
            break;
        uint64_t now = util_now_ns();
        if (alive == 0 && !spawning && !drain_until)
            drain_until = now + DRAIN_MS * 1000000ull;
        if (drain_until && now >= drain_until)
            break; /* something the ranks started still holds their output */

        if (deadline && now >= deadline && !timed_out) {
            timed_out = 1;
            fflush(stdout);
            fprintf(stderr, "%s: the job timed out after %ld s (--timeout); terminating it\n",
                    prog_name, opt.timeout_s);
            terminate_job(SIGTERM);
        }
        if (kill_at_ns && now >= kill_at_ns && !killed_hard) {
            killed_hard = 1;
            signal_all(SIGKILL);
        }

        uint64_t wake = kvs_expire(now);
        uint64_t due = startup_check_deadline(now);
        if (due < wake)
            wake = due;
        if (deadline && !timed_out && deadline < wake)
            wake = deadline;
        if (kill_at_ns && !killed_hard && kill_at_ns < wake)
            wake = kill_at_ns;
        if (drain_until && drain_until < wake)
            wake = drain_until;
        int timeout_ms = -1;
        if (wake != UINT64_MAX)
            timeout_ms = wake <= now ? 0 : (int)((wake - now + 999999) / 1000000);
        if (spawning)
            timeout_ms = 0;

        size_t n = 0;
        pfd[n] = (struct pollfd){.fd = sfd, .events = POLLIN};
        what[n++] = NULL;
        for (int i = 0; i < nlisteners; i++) {
            pfd[n] = (struct pollfd){.fd = listeners[i].fd, .events = POLLIN};
            what[n++] = &listeners[i];
        }
        size_t first_stream = n;
        for (int r = 0; r < nranks; r++) {
            struct stream *ss[2] = {&ranks[r].out, &ranks[r].err};
            for (int k = 0; k < 2; k++) {
                if (ss[k]->fd < 0)
                    continue;
                pfd[n] = (struct pollfd){.fd = ss[k]->fd, .events = POLLIN};
                what[n++] = ss[k];
            }
        }
        size_t first_client = n;
        for (struct client *c = hellos; c && n < cap; c = c->next) {
            pfd[n] = (struct pollfd){.fd = c->fd, .events = POLLIN};
            what[n++] = c;
        }
        for (int r = 0; r < nranks && n < cap; r++) {
            if (!client_of_rank[r])
                continue;
            pfd[n] = (struct pollfd){.fd = client_of_rank[r]->fd, .events = POLLIN};
            what[n++] = client_of_rank[r];
        }
        int got = poll(pfd, n, timeout_ms);
        if (got < 0 && errno != EINTR) {
            fprintf(stderr, "%s: poll: %s\n", prog_name, strerror(errno));
            terminate_job(SIGKILL);
            return EXIT_RUNTIME;
        }
        if (got <= 0)
            continue;

        /* output first, so that a rank's last words come before the
         * message about its death */
        for (size_t i = first_stream; i < first_client; i++) {
            if (!pfd[i].revents)
                continue;
            struct stream *s = what[i];
            stream_read(s->rank, s);
        }
        for (size_t i = first_client; i < n; i++) {
            if (!pfd[i].revents)
                continue;
            /* a client may have been dropped by an earlier one's failure */
            struct client *c = what[i];
            if (!c->dead)
                client_read(c);
        }
        for (size_t i = 1; i < first_stream; i++)
            if (pfd[i].revents)
                kvs_accept(pfd[i].fd);
        if (pfd[0].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si) {
                int sig = (int)si.ssi_signo;
                if (sig == SIGCHLD)
                    continue;
                if (terminating && !killed_hard) {
                    killed_hard = 1; /* asked twice: stop now */
                    signal_all(SIGKILL);
                } else {
                    fflush(stdout);
                    fprintf(stderr, "%s: got signal %d (%s); forwarding it to the ranks\n",
                            prog_name, sig, strsignal(sig));
                    terminate_job(sig);
                    if (!exit_code)
                        exit_code = 128 + sig;
                }
            }
            alive = reap();
        }
        graveyard_free();
    }
    for (int r = 0; r < nranks; r++) {
        stream_close(r, &ranks[r].out);
        stream_close(r, &ranks[r].err);
    }
    /* Every rank has exited; whatever they started in their process groups
     * goes too, so the job leaves nothing behind. */
    signal_all(SIGKILL);
    clean_dev_shm();
    free(pfd);
    free(what);
    if (timed_out)
        return EXIT_TIMEOUT;
    if (exit_code)
        return exit_code;
    for (int r = 0; r < nranks; r++)
        if (status_code(ranks[r].status))
            return status_code(ranks[r].status);
    return 0;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv, &opt);
    nranks = (int)opt.nranks;
    /* Two pipes and a socket per rank, plus connections still saying
     * hello and a margin: raise our soft limit as far as that needs (the
     * hard limit too where we may), and say so up front if it cannot be,
     * rather than fail with EMFILE halfway through start-up. */
    rlim_t need = 3 * (rlim_t)nranks + HELLO_TOTAL + MAX_LISTENERS + 64;
    if (getrlimit(RLIMIT_NOFILE, &user_nofile) == 0 && user_nofile.rlim_cur < need) {
        struct rlimit rl = user_nofile;
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
            struct rlimit more = {need, need};
            if (setrlimit(RLIMIT_NOFILE, &more) == 0)
                rl = more;
        }
        setrlimit(RLIMIT_NOFILE, &rl);
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
            fprintf(stderr, "%s: %d ranks need about %llu open files in mpiv_run, but its limit "
                    "is %llu (ulimit -n); raise the hard limit (ulimit -Hn, limits.conf) or "
                    "start fewer ranks\n", prog_name, nranks, (unsigned long long)need,
                    (unsigned long long)rl.rlim_cur);
            return EXIT_RUNTIME;
        }
    }
    if (!opt.launcher && !opt.hosts)
        check_program(opt.argv[0]);
    /* the ranks' MPIV_BOOT_TIMEOUT: -x's value wins over ours, as in them */
    for (int i = 0; i < opt.nx; i++)
        if (strncmp(opt.xvars[i], "MPIV_BOOT_TIMEOUT=", 18) == 0)
            setenv("MPIV_BOOT_TIMEOUT", opt.xvars[i] + 18, 1);
    int64_t bt;
    if (util_config_int("MPIV_BOOT_TIMEOUT", &bt) != MPIV_SUCCESS)
        usage_error("%s", mpiv_error_detail());
    boot_timeout_s = (int)bt;
    snprintf(ssh_template, sizeof ssh_template,
             "ssh -T -o BatchMode=yes -o ConnectTimeout=%d {host}", boot_timeout_s);
    ranks = calloc((size_t)nranks, sizeof *ranks);
    client_of_rank = calloc((size_t)nranks, sizeof *client_of_rank);
    if (!ranks || !client_of_rank) {
        fprintf(stderr, "%s: out of memory for %d ranks\n", prog_name, nranks);
        return EXIT_RUNTIME;
    }
    for (int r = 0; r < nranks; r++)
        ranks[r].out.fd = ranks[r].err.fd = -1;
    place_ranks();

    /* Signals arrive through a signalfd, read by the event loop; the
     * children get the old mask and default handlers back before exec. */
    sigemptyset(&handled_signals);
    sigaddset(&handled_signals, SIGCHLD);
    sigaddset(&handled_signals, SIGINT);
    sigaddset(&handled_signals, SIGTERM);
    sigaddset(&handled_signals, SIGHUP);
    sigprocmask(SIG_BLOCK, &handled_signals, &old_mask);
    int sfd = signalfd(-1, &handled_signals, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        fprintf(stderr, "%s: signalfd: %s\n", prog_name, strerror(errno));
        return EXIT_RUNTIME;
    }
    signal(SIGPIPE, SIG_IGN);

    make_secret();
    /* Where the exchange listens: --bind, else 127.0.0.1 without -H; with
     * -H, each host gets the local address that routes to it, and we listen
     * on those only. A host whose name does not resolve here gets our host
     * name, and only then do we listen on every address. */
    const struct listener *l;
    if (!opt.hosts || opt.bind) {
        l = listener_on(opt.bind ? opt.bind : "127.0.0.1");
        snprintf(boot_addr_default, sizeof boot_addr_default, "%s:%d", l->addr, l->port);
    }
    if (opt.hosts) {
        boot_addr_of = calloc((size_t)opt.nhosts, sizeof *boot_addr_of);
        if (!boot_addr_of)
            return EXIT_RUNTIME;
        for (int h = 0; h < opt.nhosts; h++) {
            char a[INET_ADDRSTRLEN], name[100];
            if (opt.bind) {
                boot_addr_of[h] = strdup(boot_addr_default);
            } else if (route_addr_to(opt.hosts[h], a, sizeof a)) {
                l = listener_on(a);
                boot_addr_of[h] = NULL;
                if (asprintf(&boot_addr_of[h], "%s:%d", l->addr, l->port) < 0)
                    boot_addr_of[h] = NULL;
            } else {
                l = listener_on("0.0.0.0");
                if (gethostname(name, sizeof name - 1) != 0)
                    snprintf(name, sizeof name, "127.0.0.1");
                name[sizeof name - 1] = '\0';
                if (asprintf(&boot_addr_of[h], "%s:%d", name, l->port) < 0)
                    boot_addr_of[h] = NULL;
            }
            if (!boot_addr_of[h]) {
                fprintf(stderr, "%s: out of memory\n", prog_name);
                return EXIT_RUNTIME;
            }
        }
    }

    pid_index_init();
    int rc = run_loop(sfd);
    fflush(stdout);

    refusal_log_flush();
    while (hellos)
        client_drop(hellos);
    for (int r = 0; r < nranks; r++)
        if (client_of_rank[r])
            client_drop(client_of_rank[r]);
    graveyard_free();
    free(scratch);
    free(client_of_rank);
    free(ranks);
    if (boot_addr_of)
        for (int h = 0; h < opt.nhosts; h++)
            free(boot_addr_of[h]);
    free(boot_addr_of);
    if (opt.hosts)
        free(opt.hosts[0]); /* the split copy of the -H list */
    free(opt.hosts);
    free(opt.xvars);
    for (int i = 0; i < nlisteners; i++)
        close(listeners[i].fd);
    close(sfd);
    return rc;
}
