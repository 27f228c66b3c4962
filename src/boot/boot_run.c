/*
 * boot_run.c — the rank's side of mpiv_run's key-value exchange (wire
 * format in boot_wire.h). mpiv_run passes MPIV_BOOT_ADDR=host:port,
 * MPIV_JOB_SECRET, MPIV_RANK and MPIV_SIZE; the rank connects, proves it
 * belongs to the job with the secret, and from then on each allgather or
 * barrier is one request and one reply on that connection.
 *
 * Every step has a deadline (MPIV_BOOT_TIMEOUT seconds from its start), so
 * a rank whose exchange never completes fails with MPIV_ERR_BOOTSTRAP
 * instead of hanging; mpiv_run ends the exchange for everybody as soon as
 * one rank leaves it, so in practice failures are reported at once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot.h"
#include "boot_int.h"
#include "boot_wire.h"

static int run_fd = -1;
static int run_rank, run_size;
static int run_timeout_s;
static char run_addr[256];
/* The last send_all/recv_all failed because the connection was closed or
 * reset (not a timeout): while joining, that means "connect again". */
static int run_conn_lost;

static uint64_t deadline_after(int seconds)
{
    return util_now_ns() + (uint64_t)seconds * 1000000000ull;
}

/* Milliseconds left before `deadline`, 0 if it has passed. */
static int ms_left(uint64_t deadline)
{
    uint64_t now = util_now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static int wait_fd(int fd, short events, uint64_t deadline, const char *what)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int left = ms_left(deadline);
        if (left == 0)
            return util_err(MPIV_ERR_BOOTSTRAP,
                            "bootstrap (mpiv_run at %s): rank %d timed out after %d s while %s "
                            "(MPIV_BOOT_TIMEOUT)",
                            run_addr, run_rank, run_timeout_s, what);
        int n = poll(&p, 1, left);
        if (n > 0)
            return MPIV_SUCCESS;
        if (n < 0 && errno != EINTR)
            return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap (mpiv_run at %s): poll: %s", run_addr,
                            strerror(errno));
    }
}

static int send_all(const void *buf, size_t len, uint64_t deadline, const char *what)
{
    const char *p = buf;
    run_conn_lost = 0;
    while (len) {
        ssize_t n = send(run_fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(run_fd, POLLOUT, deadline, what);
            if (rc)
                return rc;
            continue;
        }
        run_conn_lost = 1;
        return util_err(MPIV_ERR_BOOTSTRAP,
                        "bootstrap (mpiv_run at %s): rank %d lost the connection while %s: %s",
                        run_addr, run_rank, what, strerror(errno));
    }
    return MPIV_SUCCESS;
}

static int recv_all(void *buf, size_t len, uint64_t deadline, const char *what)
{
    char *p = buf;
    run_conn_lost = 0;
    while (len) {
        ssize_t n = recv(run_fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            run_conn_lost = 1;
            return util_err(MPIV_ERR_BOOTSTRAP,
                            "bootstrap (mpiv_run at %s): rank %d: mpiv_run closed the connection "
                            "while %s (the job is ending?)",
                            run_addr, run_rank, what);
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(run_fd, POLLIN, deadline, what);
            if (rc)
                return rc;
            continue;
        }
        run_conn_lost = 1;
        return util_err(MPIV_ERR_BOOTSTRAP,
                        "bootstrap (mpiv_run at %s): rank %d lost the connection while %s: %s",
                        run_addr, run_rank, what, strerror(errno));
    }
    return MPIV_SUCCESS;
}

static void close_conn(void)
{
    if (run_fd >= 0)
        close(run_fd);
    run_fd = -1;
}

static int parse_env_int(const char *name, long lo, long hi, long *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return util_err(MPIV_ERR_BOOTSTRAP,
                        "bootstrap: MPIV_BOOT_ADDR is set but %s is missing (start the job "
                        "with mpiv_run)", name);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || errno || v < lo || v > hi)
        return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap: %s=%s: expected an integer from %ld to %ld",
                        name, s, lo, hi);
    *out = v;
    return MPIV_SUCCESS;
}

/* Splits "host:port" or "[v6addr]:port" into its parts. */
static int split_addr(const char *addr, char *host, size_t hlen, char *port, size_t plen)
{
    const char *colon;
    const char *h = addr;
    size_t hl;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':')
            return -1;
        h = addr + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon)
            return -1;
        hl = (size_t)(colon - addr);
    }
    if (hl == 0 || hl >= hlen || strlen(colon + 1) == 0 || strlen(colon + 1) >= plen)
        return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    strcpy(port, colon + 1);
    return 0;
}

/* Sleeps before the next try: 10 ms, doubling up to 500 ms, never past the
 * deadline. */
static void back_off(unsigned attempt, uint64_t deadline)
{
    unsigned ms = attempt < 6 ? 10u << attempt : 500u;
    int left = ms_left(deadline);
    if ((int)ms > left)
        ms = (unsigned)left;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Connects, retrying refused connections until the deadline: mpiv_run
 * listens before it starts any rank, but a remote rank may race a slow
 * network. */
static int connect_run(const char *host, const char *port, uint64_t deadline)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap: MPIV_BOOT_ADDR=%s: %s", run_addr,
                        gai_strerror(gai));
    int last_errno = 0;
    for (unsigned attempt = 0;; attempt++) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                            ai->ai_protocol);
            if (fd < 0) {
                last_errno = errno;
                continue;
            }
            int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
            if (rc < 0 && errno == EINPROGRESS) {
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                int left = ms_left(deadline);
                if (left > 0 && poll(&p, 1, left) == 1) {
                    int err = 0;
                    socklen_t el = sizeof err;
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                    rc = err ? -1 : 0;
                    errno = err ? err : ETIMEDOUT;
                } else {
                    errno = ETIMEDOUT;
                }
            }
            if (rc == 0) {
                freeaddrinfo(res);
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                run_fd = fd;
                return MPIV_SUCCESS;
            }
            last_errno = errno;
            close(fd);
        }
        if (ms_left(deadline) == 0)
            break;
        back_off(attempt, deadline);
    }
    freeaddrinfo(res);
    return util_err(MPIV_ERR_BOOTSTRAP,
                    "bootstrap: rank %d cannot reach mpiv_run at MPIV_BOOT_ADDR=%s within %d s: %s",
                    run_rank, run_addr, run_timeout_s, strerror(last_errno));
}

/* One try at joining: connect, HELLO, wait for the answer. Returns
 * MPIV_SUCCESS (joined), -1 when mpiv_run turned us away (try again), or
 * an error. */
static int hello(const char *host, const char *port, const char *secret, uint64_t deadline)
{
    int rc = connect_run(host, port, deadline);
    if (rc)
        return rc;
    size_t slen = strlen(secret);
    char msg[BOOT_WIRE_MAGIC_LEN + 12 + 4 * BOOT_SECRET_HEX];
    uint32_t fields[3] = {htonl((uint32_t)run_rank), htonl((uint32_t)run_size),
                          htonl((uint32_t)slen)};
    memcpy(msg, BOOT_WIRE_MAGIC, BOOT_WIRE_MAGIC_LEN);
    memcpy(msg + BOOT_WIRE_MAGIC_LEN, fields, sizeof fields);
    memcpy(msg + BOOT_WIRE_MAGIC_LEN + sizeof fields, secret, slen);
    uint32_t ack;
    if ((rc = send_all(msg, BOOT_WIRE_MAGIC_LEN + sizeof fields + slen, deadline,
                       "joining the job")) ||
        (rc = recv_all(&ack, sizeof ack, deadline, "joining the job"))) {
        close_conn();
        return run_conn_lost ? -1 : rc;
    }
    ack = ntohl(ack);
    if (ack == BOOT_ST_OK)
        return MPIV_SUCCESS;
    if (ack == BOOT_ST_BUSY) {
        close_conn();
        return -1;
    }
    uint32_t len = 0;
    char why[256];
    size_t keep = 0;
    if (ack == BOOT_ST_FAILED && recv_all(&len, sizeof len, deadline_after(1), "joining") == 0) {
        len = ntohl(len);
        keep = len < sizeof why - 1 ? len : sizeof why - 1;
        if (recv_all(why, keep, deadline_after(1), "joining"))
            keep = 0;
    }
    why[keep] = '\0';
    close_conn();
    return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap: mpiv_run at %s refused rank %d: %s", run_addr,
                    run_rank, keep ? why : "(no reason given)");
}

static int run_init(int *rank, int *size)
{
    const char *addr = getenv("MPIV_BOOT_ADDR");
    const char *secret = getenv("MPIV_JOB_SECRET");
    long r, n;
    int rc;
    if ((rc = parse_env_int("MPIV_SIZE", 1, MPIV_RANK_MAX + 1L, &n)) ||
        (rc = parse_env_int("MPIV_RANK", 0, n - 1, &r)))
        return rc;
    run_rank = (int)r;
    run_size = (int)n;
    if (!secret || !*secret)
        return util_err(MPIV_ERR_BOOTSTRAP,
                        "bootstrap: MPIV_BOOT_ADDR is set but MPIV_JOB_SECRET is missing (start "
                        "the job with mpiv_run)");
    if (strlen(secret) > 4 * BOOT_SECRET_HEX)
        return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap: MPIV_JOB_SECRET is too long");
    if ((run_timeout_s = boot_timeout_s()) < 0)
        return MPIV_ERR_CONFIG;
    snprintf(run_addr, sizeof run_addr, "%s", addr);
    char host[256], port[32];
    if (split_addr(addr, host, sizeof host, port, sizeof port) != 0)
        return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap: MPIV_BOOT_ADDR=%s: expected host:port",
                        addr);

    /* mpiv_run turns away connections that have not said hello when too
     * many are waiting (someone may be flooding its port) or when they are
     * slow: then we connect again, until the deadline. A refusal (wrong
     * secret, rank out of range) fails at once. */
    uint64_t deadline = deadline_after(run_timeout_s);
    for (unsigned attempt = 0;; attempt++) {
        rc = hello(host, port, secret, deadline);
        if (rc == MPIV_SUCCESS) {
            *rank = run_rank;
            *size = run_size;
        }
        if (rc != -1)
            return rc;
        if (ms_left(deadline) == 0)
            return util_err(MPIV_ERR_BOOTSTRAP,
                            "bootstrap (mpiv_run at %s): rank %d could not join within %d s "
                            "(MPIV_BOOT_TIMEOUT): mpiv_run kept turning the connection away",
                            run_addr, run_rank, run_timeout_s);
        back_off(attempt, deadline);
    }
}


/* Leaves the job: BYE, then close. Only between requests (a BYE inside a
 * half-sent request would be read as its data). */
static void leave_conn(void)
{
    if (run_fd < 0)
        return;
    uint32_t bye[2] = {htonl(BOOT_OP_BYE), 0};
    /* Best effort: a failed BYE only makes mpiv_run think we left early
     * (and end the job), and we are leaving anyway. */
    send_all(bye, sizeof bye, deadline_after(1), "leaving the job");
    close_conn();
}

static int run_allgather(const void *mine, size_t len, void *all)
{
    if (run_fd < 0)
        return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap: the exchange with mpiv_run already failed");
    if (len > BOOT_MAX_BLOB || len * (size_t)run_size > BOOT_MAX_TOTAL)
        return util_err(MPIV_ERR_ARG, "bootstrap: allgather of %zu bytes from %d ranks is too big",
                        len, run_size);
    uint64_t deadline = deadline_after(run_timeout_s);
    uint32_t head[2] = {htonl(BOOT_OP_GATHER), htonl((uint32_t)len)};
    int rc;
    if ((rc = send_all(head, sizeof head, deadline, "sending to an allgather")) ||
        (len && (rc = send_all(mine, len, deadline, "sending to an allgather"))))
        goto fail;
    uint32_t reply[2];
    if ((rc = recv_all(reply, sizeof reply, deadline, "waiting for the other ranks"))) {
        /* our request went out whole: say that we give up, so that mpiv_run
         * fails the others at once and knows we left on purpose */
        leave_conn();
        return rc;
    }
    uint32_t status = ntohl(reply[0]), rlen = ntohl(reply[1]);
    if (status != BOOT_ST_OK) {
        char why[512];
        size_t keep = rlen < sizeof why - 1 ? rlen : sizeof why - 1;
        /* a deadline of its own: the failure often comes just as ours
         * expires, and its reason is what the user needs to read */
        if (recv_all(why, keep, deadline_after(1), "reading why the exchange failed"))
            keep = 0;
        why[keep] = '\0';
        close_conn();
        return util_err(MPIV_ERR_BOOTSTRAP, "bootstrap (mpiv_run at %s): rank %d: %s", run_addr,
                        run_rank, keep ? why : "the exchange failed");
    }
    if (rlen != len * (size_t)run_size) {
        close_conn();
        return util_err(MPIV_ERR_BOOTSTRAP,
                        "bootstrap (mpiv_run at %s): rank %d expected %zu bytes, got %u", run_addr,
                        run_rank, len * (size_t)run_size, rlen);
    }
    if (rlen && (rc = recv_all(all, rlen, deadline, "receiving an allgather")))
        goto fail;
    return MPIV_SUCCESS;
fail:
    close_conn();
    return rc;
}

static int run_barrier(void)
{
    return run_allgather(NULL, 0, NULL);
}

static void run_finalize(bool graceful)
{
    if (graceful)
        leave_conn();
    else
        close_conn();
}

const struct boot_method boot_method_run = {
    "mpiv_run", run_init, run_allgather, run_barrier, run_finalize,
};
