/*
 * boot_probe — a rank of a bootstrap test job. It links only mpiv_util and
 * the bootstrap, so it tests joining a job without any network backend.
 *
 *   boot_probe check [METHOD [SIZE]]  join; check rank/size (and the method
 *                                     and size when given); allgathers of
 *                                     several sizes and barriers; leave.
 *   boot_probe wrong-secret           join with a corrupted MPIV_JOB_SECRET:
 *                                     must be refused (exit 0 if it was).
 *   boot_probe leave-early            the last rank joins and exits 0 at once,
 *                                     without leaving the job (mpiv_run must
 *                                     end the job and name it);
 *                                     the others' allgather must fail (exit 0
 *                                     if it did).
 *   boot_probe kill-early             the last rank joins and kills itself;
 *                                     the others wait in an allgather.
 *   boot_probe garbage                rank 0 first sends junk to the exchange
 *                                     (must be cut off), then all check.
 *   boot_probe early-bye              the last rank joins and leaves properly
 *                                     at once; the others' allgather fails.
 *   boot_probe stall                  the last rank joins, sleeps 3 s, exits;
 *                                     the others' allgather must time out
 *                                     (run with MPIV_BOOT_TIMEOUT=1).
 *   boot_probe flood [METHOD [SIZE]]  before joining, start a child that holds
 *                                     FLOOD_CONNS idle connections to the
 *                                     exchange (reopening any it loses, up to
 *                                     FLOOD_MAX in all); then as check.
 *   boot_probe exit-before-init [M [N]] the last rank exits 0 without joining;
 *                                     the others as check (which fails).
 *   boot_probe leave-shm              join; the last rank then creates the
 *                                     files a rank killed during start-up
 *                                     may leave (/dev/shm/mpiv-<job key>-<r>,
 *                                     libfabric's /dev/shm/<pid>:0:0), prints
 *                                     their names and kills itself (SIGKILL);
 *                                     the others wait in an allgather.
 *   boot_probe shared VAR V0 V1 ...   rank r sets VAR=Vr, then joins and runs
 *                                     boot_check_shared: prints "shared ok"
 *                                     or "shared refused: <detail>" (exit 0
 *                                     either way, 1 on any other error).
 *   boot_probe join                   join, one allgather of 8 bytes, leave:
 *                                     a rank that costs its launcher as much
 *                                     as any and does nothing else (for
 *                                     timing start-up, bench/boot).
 *   boot_probe secret-scan            join; once every rank has joined (so
 *                                     every launcher is up), look for the
 *                                     job secret in each process's
 *                                     /proc/PID/cmdline and environ that
 *                                     other users may read; exit 1 if found.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/boot.h"

#define FAIL(...)                                                                  \
    do {                                                                           \
        fprintf(stderr, "boot_probe: " __VA_ARGS__);                               \
        fprintf(stderr, " [%s]\n", mpiv_error_detail());                          \
        exit(1);                                                                   \
    } while (0)

static void fill(unsigned char *p, size_t len, int rank, unsigned round)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(rank * 131 + i * 7 + round);
}

static int check(int argc, char **argv)
{
    int rank, size;
    if (boot_init(&rank, &size))
        FAIL("boot_init failed: %s", mpiv_strerror(MPIV_ERR_BOOTSTRAP));
    if (rank < 0 || rank >= size)
        FAIL("rank %d of %d", rank, size);
    if (argc > 2 && strcmp(argv[2], boot_method_name()) != 0)
        FAIL("method %s, expected %s", boot_method_name(), argv[2]);
    if (argc > 3 && atoi(argv[3]) != size)
        FAIL("size %d, expected %s", size, argv[3]);
    const char *env_rank = getenv("MPIV_RANK");
    if (strcmp(boot_method_name(), "mpiv_run") == 0 && (!env_rank || atoi(env_rank) != rank))
        FAIL("rank %d but MPIV_RANK=%s", rank, env_rank ? env_rank : "(unset)");

    static const size_t lens[] = {1, 8, 100, 4096, 65536};
    for (unsigned k = 0; k < sizeof lens / sizeof *lens; k++) {
        size_t len = lens[k];
        unsigned char *mine = malloc(len), *all = malloc(len * (size_t)size),
                      *want = malloc(len);
        if (!mine || !all || !want)
            FAIL("out of memory");
        fill(mine, len, rank, k);
        if (boot_allgather(mine, len, all))
            FAIL("rank %d: allgather of %zu bytes failed", rank, len);
        for (int r = 0; r < size; r++) {
            fill(want, len, r, k);
            if (memcmp(all + (size_t)r * len, want, len) != 0)
                FAIL("rank %d: allgather of %zu bytes: wrong data from rank %d", rank, len, r);
        }
        free(mine);
        free(all);
        free(want);
        if (boot_barrier())
            FAIL("rank %d: barrier failed", rank);
    }
    if (boot_allgather(NULL, 0, NULL))
        FAIL("rank %d: empty allgather failed", rank);
    printf("boot_probe: rank %d of %d via %s ok\n", rank, size, boot_method_name());
    fflush(stdout);
    boot_finalize();
    return 0;
}

static int wrong_secret(void)
{
    const char *s = getenv("MPIV_JOB_SECRET");
    char bad[256];
    snprintf(bad, sizeof bad, "%s", s ? s : "00");
    bad[0] = bad[0] == '0' ? '1' : '0';
    setenv("MPIV_JOB_SECRET", bad, 1);
    int rank, size;
    int rc = boot_init(&rank, &size);
    if (rc != MPIV_ERR_BOOTSTRAP)
        FAIL("a wrong secret gave %d, expected MPIV_ERR_BOOTSTRAP", rc);
    printf("boot_probe: refused as expected: %s\n", mpiv_error_detail());
    return 0;
}

/* Connects to MPIV_BOOT_ADDR (IPv4 host:port) without the bootstrap, sends
 * junk, and expects the exchange to close the connection. */
static void send_garbage(void)
{
    const char *addr = getenv("MPIV_BOOT_ADDR");
    char host[64];
    int port;
    if (!addr || sscanf(addr, "%63[^:]:%d", host, &port) != 2)
        FAIL("MPIV_BOOT_ADDR=%s", addr ? addr : "(unset)");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        FAIL("cannot connect to %s", addr);
    static const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    if (write(fd, junk, sizeof junk - 1) != (ssize_t)(sizeof junk - 1))
        FAIL("write");
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c;
    if (poll(&p, 1, 5000) != 1 || read(fd, &c, 1) != 0)
        FAIL("the exchange did not close a junk connection");
    close(fd);
    printf("boot_probe: junk connection closed\n");
}

#define FLOOD_CONNS 64
#define FLOOD_MAX 4000

static int connect_boot_addr(void)
{
    const char *addr = getenv("MPIV_BOOT_ADDR");
    char host[64];
    int port;
    if (!addr || sscanf(addr, "%63[^:]:%d", host, &port) != 2)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A child that holds FLOOD_CONNS connections to the exchange open without
 * saying anything, as someone who wants to deny it would; returns once
 * they are all open. */
static pid_t start_flood(void)
{
    int ready[2];
    if (pipe(ready) != 0)
        FAIL("pipe");
    pid_t pid = fork();
    if (pid < 0)
        FAIL("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(ready[0]);
        struct pollfd p[FLOOD_CONNS];
        int opened = 0;
        for (int i = 0; i < FLOOD_CONNS; i++, opened++)
            if ((p[i].fd = connect_boot_addr()) < 0)
                _exit(3);
        if (write(ready[1], "r", 1) != 1)
            _exit(3);
        close(ready[1]);
        for (;;) {
            for (int i = 0; i < FLOOD_CONNS; i++)
                p[i].events = POLLIN;
            if (poll(p, FLOOD_CONNS, -1) < 0)
                continue;
            for (int i = 0; i < FLOOD_CONNS; i++) {
                char buf[64];
                if (p[i].fd < 0 || !p[i].revents || read(p[i].fd, buf, sizeof buf) > 0)
                    continue;
                close(p[i].fd); /* closed on us: come back at once */
                p[i].fd = opened++ < FLOOD_MAX ? connect_boot_addr() : -1;
            }
        }
    }
    close(ready[1]);
    char c;
    if (read(ready[0], &c, 1) != 1)
        FAIL("the flood could not connect to the exchange");
    close(ready[0]);
    return pid;
}

/* 1 if /proc/<pid>/<file> is readable by other users and holds `secret`. */
static int leaks(const char *pid, const char *file, const char *secret)
{
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/%s", pid, file);
    struct stat st;
    if (stat(path, &st) != 0 || !(st.st_mode & S_IROTH))
        return 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    static char buf[1 << 20];
    size_t used = 0;
    ssize_t n;
    while (used < sizeof buf - 1 && (n = read(fd, buf + used, sizeof buf - 1 - used)) > 0)
        used += (size_t)n;
    close(fd);
    /* NUL-separated words: the secret may sit inside any of them */
    for (size_t i = 0; i < used; i++)
        if (buf[i] == '\0')
            buf[i] = '\n';
    buf[used] = '\0';
    return strstr(buf, secret) != NULL;
}

static int secret_scan(void)
{
    const char *s = getenv("MPIV_JOB_SECRET");
    if (!s || strlen(s) < 16)
        FAIL("no MPIV_JOB_SECRET in the environment");
    char secret[256];
    snprintf(secret, sizeof secret, "%s", s);
    int rank, size;
    if (boot_init(&rank, &size) || boot_barrier())
        FAIL("joining the job failed");
    DIR *d = opendir("/proc");
    struct dirent *e;
    int procs = 0, found = 0;
    while (d && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        procs++;
        static const char *files[] = {"cmdline", "environ"};
        for (int k = 0; k < 2; k++) {
            if (leaks(e->d_name, files[k], secret)) {
                fprintf(stderr, "boot_probe: rank %d: the job secret is in /proc/%s/%s\n",
                        rank, e->d_name, files[k]);
                found = 1;
            }
        }
    }
    if (d)
        closedir(d);
    /* the others keep their launchers up until everybody has looked */
    if (boot_barrier())
        FAIL("second barrier failed");
    boot_finalize();
    if (found)
        return 1;
    printf("boot_probe: rank %d: secret in no readable cmdline or environ of %d processes\n",
           rank, procs);
    return 0;
}

static int shared(int argc, char **argv)
{
    const char *rs = getenv("MPIV_RANK"), *ns = getenv("MPIV_SIZE");
    int r = rs ? atoi(rs) : 0, n = ns ? atoi(ns) : 1;
    if (argc < 3 + n)
        FAIL("shared: need VAR and one value per rank");
    setenv(argv[2], argv[3 + r], 1);
    struct util_config cfg;
    if (util_config_load(&cfg))
        FAIL("rank %d: util_config_load", r);
    int rank, size;
    if (boot_init(&rank, &size))
        FAIL("boot_init failed");
    int rc = boot_check_shared(&cfg);
    if (rc == MPIV_SUCCESS)
        printf("boot_probe: rank %d: shared ok\n", rank);
    else if (rc == MPIV_ERR_CONFIG)
        printf("boot_probe: rank %d: shared refused: %s\n", rank, mpiv_error_detail());
    else
        FAIL("rank %d: boot_check_shared gave %d", rank, rc);
    boot_finalize();
    return 0;
}

static void make_shm_file(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0)
        FAIL("cannot create %s", path);
    close(fd);
    printf("boot_probe: left /dev/shm/%s\n", name);
}

static int leave_shm(void)
{
    int rank, size;
    if (boot_init(&rank, &size))
        FAIL("boot_init failed");
    if (rank == size - 1) {
        const char *key = getenv("MPIV_JOB_KEY");
        if (!key)
            FAIL("no MPIV_JOB_KEY");
        char name[96];
        snprintf(name, sizeof name, "mpiv-%s-%d", key, rank);
        make_shm_file(name);
        snprintf(name, sizeof name, "%d:0:0", (int)getpid());
        make_shm_file(name);
        raise(SIGKILL);
    }
    char c = 'x', all[64];
    if (size > (int)sizeof all)
        FAIL("size %d too large for this test", size);
    if (boot_allgather(&c, 1, all) != MPIV_ERR_BOOTSTRAP)
        FAIL("rank %d: allgather without the last rank did not fail", rank);
    boot_finalize();
    return 0;
}

enum leave { LEAVE_EXIT, LEAVE_KILL, LEAVE_STALL, LEAVE_BYE };

static int leave_early(enum leave how)
{
    int rank, size;
    if (boot_init(&rank, &size))
        FAIL("boot_init failed");
    if (rank == size - 1) {
        if (how == LEAVE_KILL)
            raise(SIGKILL);
        if (how == LEAVE_STALL) {
            sleep(3); /* slow, not broken: it leaves properly */
            boot_finalize();
            _exit(0);
        }
        if (how == LEAVE_BYE) {
            boot_finalize();
            sleep(1); /* still running while the others try */
        }
        _exit(0); /* no boot_finalize: as if it crashed quietly */
    }
    char c = 'x', all[64];
    if (size > (int)sizeof all)
        FAIL("size %d too large for this test", size);
    int rc = boot_allgather(&c, 1, all);
    if (rc != MPIV_ERR_BOOTSTRAP)
        FAIL("rank %d: allgather without the last rank gave %d", rank, rc);
    /* the first rank to time out leaves, which fails the others at once */
    if (how == LEAVE_STALL && !strstr(mpiv_error_detail(), "timed out") &&
        !strstr(mpiv_error_detail(), "left the exchange") &&
        !strstr(mpiv_error_detail(), "already left the job"))
        FAIL("rank %d: allgather failed but did not time out", rank);
    printf("boot_probe: rank %d failed as expected: %s\n", rank, mpiv_error_detail());
    /* a program that handles the failure leaves the job properly */
    boot_finalize();
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "check";
    if (strcmp(mode, "check") == 0)
        return check(argc, argv);
    if (strcmp(mode, "wrong-secret") == 0)
        return wrong_secret();
    if (strcmp(mode, "leave-early") == 0)
        return leave_early(LEAVE_EXIT);
    if (strcmp(mode, "kill-early") == 0)
        return leave_early(LEAVE_KILL);
    if (strcmp(mode, "early-bye") == 0)
        return leave_early(LEAVE_BYE);
    if (strcmp(mode, "garbage") == 0) {
        if (atoi(getenv("MPIV_RANK") ? getenv("MPIV_RANK") : "0") == 0)
            send_garbage();
        return check(argc, argv);
    }
    if (strcmp(mode, "stall") == 0)
        return leave_early(LEAVE_STALL);
    if (strcmp(mode, "flood") == 0) {
        pid_t flood = start_flood();
        int rc = check(argc, argv);
        kill(flood, SIGKILL);
        waitpid(flood, NULL, 0);
        return rc;
    }
    if (strcmp(mode, "exit-before-init") == 0) {
        const char *r = getenv("MPIV_RANK"), *n = getenv("MPIV_SIZE");
        if (r && n && atoi(r) == atoi(n) - 1)
            return 0;
        return check(argc, argv);
    }
    if (strcmp(mode, "join") == 0) {
        int rank, size;
        if (boot_init(&rank, &size))
            FAIL("boot_init failed");
        uint64_t mine = (uint64_t)rank, *all = malloc((size_t)size * sizeof *all);
        if (!all || boot_allgather(&mine, sizeof mine, all))
            FAIL("rank %d: allgather failed", rank);
        for (int r = 0; r < size; r++)
            if (all[r] != (uint64_t)r)
                FAIL("rank %d: wrong data from rank %d", rank, r);
        free(all);
        boot_finalize();
        return 0;
    }
    if (strcmp(mode, "shared") == 0)
        return shared(argc, argv);
    if (strcmp(mode, "leave-shm") == 0)
        return leave_shm();
    if (strcmp(mode, "secret-scan") == 0)
        return secret_scan();
    fprintf(stderr, "boot_probe: unknown mode %s\n", mode);
    return 2;
}
