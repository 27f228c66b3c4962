/*
 * run_cmd.h — runs a command for a test and collects what it printed.
 * Shared by tests/boot and tests/tools (header-only, static functions).
 *
 * The command runs in its own process group with stdout and stderr in one
 * temporary file; if it has not finished after `timeout_s` the whole group
 * is killed and the result's timed_out is set, so a test never hangs.
 */
#ifndef MPIV_TESTS_RUN_CMD_H
#define MPIV_TESTS_RUN_CMD_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct run_result {
    int status;     /* wait status */
    int timed_out;  /* killed after timeout_s */
    double seconds; /* how long it ran */
    pid_t pid;
    char *out;      /* stdout and stderr, NUL-terminated (free it) */
};

static inline double run_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* envp_extra: NULL-terminated NAME=VALUE list set in the child, may be NULL. */
static inline struct run_result run_cmd_env(char *const argv[], char *const envp_extra[],
                                            int timeout_s)
{
    struct run_result res = {0};
    char path[] = "/tmp/mpiv_test_out_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        res.status = -1;
        res.out = strdup("mkstemp failed");
        return res;
    }
    unlink(path);
    double t0 = run_now();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (envp_extra)
            for (char *const *e = envp_extra; *e; e++)
                putenv(*e);
        execv(argv[0], argv);
        perror("execv");
        _exit(127);
    }
    setpgid(pid, pid);
    res.pid = pid;
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        if (run_now() - t0 > timeout_s) {
            res.timed_out = 1;
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        usleep(10000);
    }
    res.seconds = run_now() - t0;
    res.status = st;
    off_t len = lseek(fd, 0, SEEK_END);
    res.out = malloc((size_t)(len > 0 ? len : 0) + 1);
    if (res.out) {
        ssize_t got = len > 0 ? pread(fd, res.out, (size_t)len, 0) : 0;
        res.out[got > 0 ? got : 0] = '\0';
    }
    close(fd);
    return res;
}

static inline struct run_result run_cmd(char *const argv[], int timeout_s)
{
    return run_cmd_env(argv, NULL, timeout_s);
}

/* Exit code of a finished run (128+N for signal N, -1 if it timed out). */
static inline int run_code(const struct run_result *r)
{
    if (r->timed_out)
        return -1;
    if (WIFEXITED(r->status))
        return WEXITSTATUS(r->status);
    if (WIFSIGNALED(r->status))
        return 128 + WTERMSIG(r->status);
    return -1;
}

/* Number of times `needle` occurs in `hay`. */
static inline int count_str(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

#endif
