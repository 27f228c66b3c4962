/* Tests of tools/mpiv_run: job variables, -x, --tag-output, exit status,
 * a rank killed with SIGKILL, signal forwarding, --timeout, placement over
 * -H hosts through a launcher template, and bad command lines. */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check_main.h"
#include "tools/run_cmd.h"

#define PROBE_NAME "mpiv_tool_probe"

static struct run_result mpiv_run(char *const args[])
{
    char *argv[32] = {MPIV_RUN};
    int n = 1;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return run_cmd(argv, 25);
}

#define RUN(...) mpiv_run((char *const[]){__VA_ARGS__, NULL})
#define EXPECT_CODE(r, code)                                                     \
    ck_assert_msg(run_code(&(r)) == (code), "exit %d, expected %d; output:\n%s", \
                  run_code(&(r)), (code), (r).out)
#define EXPECT_OUT(r, s) ck_assert_msg(strstr((r).out, (s)), "no '%s' in:\n%s", (s), (r).out)

/* Processes (not zombies) whose command name is PROBE_NAME. */
static int count_probes(void)
{
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *close = strrchr(buf, ')');
        if (strstr(buf, "(" PROBE_NAME ")") && close && close[1] == ' ' && close[2] != 'Z')
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

static int probe_gone(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *close = strrchr(buf, ')');
    return !strstr(buf, "(" PROBE_NAME ")") || (close && close[2] == 'Z');
}

START_TEST(job_variables_1_2_4_ranks)
{
    static const char *ns[] = {"1", "2", "4"};
    for (int k = 0; k < 3; k++) {
        struct run_result r = RUN("-n", (char *)ns[k], PROBE, "env");
        EXPECT_CODE(r, 0);
        int n = atoi(ns[k]);
        for (int i = 0; i < n; i++) {
            char want[160];
            snprintf(want, sizeof want,
                     "rank=%d size=%d local_rank=%d local_size=%d addr=127.0.0.1:", i, n, i, n);
            EXPECT_OUT(r, want);
        }
        ck_assert_int_eq(count_str(r.out, "secret_len=64"), n);
        free(r.out);
    }
}
END_TEST

START_TEST(x_forwards_variables)
{
    setenv("MPIV_TEST_COPIED", "from-parent", 1);
    unsetenv("MPIV_TEST_NOT_SET");
    struct run_result r = RUN("-n", "2", "-x", "MPIV_TEST_SET=a b=c", "-x", "MPIV_TEST_COPIED",
                              "-x", "MPIV_TEST_NOT_SET", PROBE, "env", "MPIV_TEST_SET",
                              "MPIV_TEST_COPIED", "MPIV_TEST_NOT_SET");
    EXPECT_CODE(r, 0);
    ck_assert_int_eq(count_str(r.out, "MPIV_TEST_SET=a b=c "), 2);
    ck_assert_int_eq(count_str(r.out, "MPIV_TEST_COPIED=from-parent "), 2);
    ck_assert_int_eq(count_str(r.out, "MPIV_TEST_NOT_SET=(unset)"), 2);
    free(r.out);
}
END_TEST

/* Every line arrives whole and tagged although each is written in pieces
 * and four ranks write at once. */
START_TEST(tag_output_keeps_lines_whole)
{
    struct run_result r = RUN("-n", "4", "--tag-output", PROBE, "lines", "200");
    EXPECT_CODE(r, 0);
    int lines = 0;
    for (char *save = NULL, *l = strtok_r(r.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        int tag, rank, num;
        char end[8] = "";
        if (strstr(l, "stderr of rank")) {
            ck_assert_msg(sscanf(l, "[%d] stderr of rank %d", &tag, &rank) == 2 && tag == rank,
                          "bad line: %s", l);
            continue;
        }
        ck_assert_msg(sscanf(l, "[%d] line rank=%d n=%d %*s %7s", &tag, &rank, &num, end) == 4,
                      "bad line: %s", l);
        ck_assert_int_eq(tag, rank);
        ck_assert_str_eq(end, "end");
        ck_assert_uint_eq(strlen(l), strlen("[0] line rank=0 n= ") + 200 + 4 +
                                         (size_t)snprintf(NULL, 0, "%d", num));
        lines++;
    }
    ck_assert_int_eq(lines, 800);
    free(r.out);
}
END_TEST

START_TEST(untagged_output_is_plain)
{
    struct run_result r = RUN("-n", "2", PROBE, "lines", "3");
    EXPECT_CODE(r, 0);
    ck_assert_ptr_null(strstr(r.out, "[0]"));
    ck_assert_int_eq(count_str(r.out, " end\n"), 6);
    free(r.out);
}
END_TEST

START_TEST(first_failure_status_is_propagated)
{
    struct run_result r = RUN("-n", "3", PROBE, "exit", "1", "5");
    EXPECT_CODE(r, 5);
    EXPECT_OUT(r, "mpiv_run: rank 1 (pid ");
    EXPECT_OUT(r, "exited with status 5; terminating the job");
    ck_assert_msg(r.seconds < 5, "took %.1f s", r.seconds);
    free(r.out);
    ck_assert_int_eq(count_probes(), 0);
}
END_TEST

/* The job's processes as printed by "sleep" ranks: waits until all n have
 * printed their pid into the output file. */
static int read_pids(int fd, pid_t *pids, int n, double timeout)
{
    double t0 = run_now();
    while (run_now() - t0 < timeout) {
        char buf[8192];
        ssize_t len = pread(fd, buf, sizeof buf - 1, 0);
        buf[len > 0 ? len : 0] = '\0';
        int got = 0;
        for (char *p = buf; (p = strstr(p, "pid=")); p += 4) {
            int pid, rank;
            if (sscanf(p, "pid=%d rank=%d", &pid, &rank) == 2 && rank >= 0 && rank < n) {
                pids[rank] = pid;
                got++;
            }
        }
        if (got == n)
            return 1;
        usleep(20000);
    }
    return 0;
}

struct bg {
    pid_t pid;
    int fd;
};

static struct bg start_bg(char *const argv[])
{
    struct bg b;
    char path[] = "/tmp/mpiv_run_test_XXXXXX";
    b.fd = mkstemp(path);
    ck_assert_int_ge(b.fd, 0);
    unlink(path);
    b.pid = fork();
    if (b.pid == 0) {
        dup2(b.fd, 1);
        dup2(b.fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    ck_assert_int_gt(b.pid, 0);
    return b;
}

/* Waits for the background mpiv_run; returns its wait status, or -1 after
 * `timeout` seconds (then kills it). */
static int wait_bg(struct bg *b, double timeout, double *took)
{
    double t0 = run_now();
    int st;
    for (;;) {
        if (waitpid(b->pid, &st, WNOHANG) == b->pid)
            break;
        if (run_now() - t0 > timeout) {
            kill(b->pid, SIGKILL);
            waitpid(b->pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
    *took = run_now() - t0;
    return st;
}

static char *bg_output(struct bg *b)
{
    static char buf[16384];
    ssize_t len = pread(b->fd, buf, sizeof buf - 1, 0);
    buf[len > 0 ? len : 0] = '\0';
    return buf;
}

START_TEST(kill_9_of_one_rank_ends_the_job)
{
    struct bg b = start_bg((char *const[]){MPIV_RUN, "-n", "4", PROBE, "sleep", "60", NULL});
    pid_t pids[4];
    ck_assert_msg(read_pids(b.fd, pids, 4, 10), "ranks did not start:\n%s", bg_output(&b));
    ck_assert_int_eq(kill(pids[2], SIGKILL), 0);
    double took = 0;
    int st = wait_bg(&b, 10, &took);
    ck_assert_msg(st != -1, "mpiv_run did not exit:\n%s", bg_output(&b));
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + 9, "status %#x:\n%s", st,
                  bg_output(&b));
    ck_assert_msg(took < 5, "took %.1f s", took);
    char want[96];
    snprintf(want, sizeof want, "mpiv_run: rank 2 (pid %d) killed by signal 9 (Killed); "
             "terminating the job", (int)pids[2]);
    ck_assert_msg(strstr(bg_output(&b), want), "no '%s' in:\n%s", want, bg_output(&b));
    for (int i = 0; i < 4; i++)
        ck_assert_msg(probe_gone(pids[i]), "rank %d (pid %d) is still there", i, (int)pids[i]);
    ck_assert_int_eq(count_probes(), 0);
    close(b.fd);
}
END_TEST

START_TEST(sigterm_is_forwarded)
{
    struct bg b = start_bg((char *const[]){MPIV_RUN, "-n", "2", "--tag-output", PROBE, "trap",
                                           NULL});
    double t0 = run_now();
    while (count_str(bg_output(&b), "ready rank=") < 2 && run_now() - t0 < 10)
        usleep(10000);
    ck_assert_int_eq(kill(b.pid, SIGTERM), 0);
    double took = 0;
    int st = wait_bg(&b, 10, &took);
    ck_assert_msg(st != -1, "mpiv_run did not exit:\n%s", bg_output(&b));
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGTERM, "status %#x:\n%s", st,
                  bg_output(&b));
    ck_assert_msg(strstr(bg_output(&b), "[0] rank 0 got SIGTERM: yes"), "%s", bg_output(&b));
    ck_assert_msg(strstr(bg_output(&b), "[1] rank 1 got SIGTERM: yes"), "%s", bg_output(&b));
    ck_assert_msg(strstr(bg_output(&b), "forwarding it to the ranks"), "%s", bg_output(&b));
    close(b.fd);
}
END_TEST

START_TEST(timeout_kills_the_job)
{
    struct run_result r = RUN("-n", "2", "--timeout", "1", PROBE, "sleep", "30");
    EXPECT_CODE(r, 124);
    EXPECT_OUT(r, "timed out after 1 s");
    ck_assert_msg(r.seconds < 5, "took %.1f s", r.seconds);
    free(r.out);
    ck_assert_int_eq(count_probes(), 0);
}
END_TEST

/* -H through a launcher template that runs the rank here: placement and
 * local ranks per host, round robin and in blocks. */
START_TEST(hosts_round_robin_and_block)
{
    struct run_result r = RUN("-n", "4", "-H", "hosta,hostb", "--launcher",
                              "env MPIV_TEST_HOST={host}", PROBE, "env", "MPIV_TEST_HOST");
    EXPECT_CODE(r, 0);
    EXPECT_OUT(r, "rank=0 size=4 local_rank=0 local_size=2");
    EXPECT_OUT(r, "rank=1 size=4 local_rank=0 local_size=2");
    EXPECT_OUT(r, "rank=2 size=4 local_rank=1 local_size=2");
    EXPECT_OUT(r, "rank=3 size=4 local_rank=1 local_size=2");
    ck_assert_int_eq(count_str(r.out, "MPIV_TEST_HOST=hosta"), 2);
    ck_assert_int_eq(count_str(r.out, "MPIV_TEST_HOST=hostb"), 2);
    free(r.out);

    r = RUN("-n", "3", "-H", "hosta,hostb", "--map-by", "block", "--launcher",
            "env MPIV_TEST_HOST={host}", PROBE, "env", "MPIV_TEST_HOST");
    EXPECT_CODE(r, 0);
    /* ceil(3/2) = 2 ranks per host: 0,1 on hosta; 2 on hostb */
    ck_assert_msg(strstr(r.out, "rank=0 size=3 local_rank=0 local_size=2") &&
                      strstr(r.out, "rank=1 size=3 local_rank=1 local_size=2") &&
                      strstr(r.out, "rank=2 size=3 local_rank=0 local_size=1"),
                  "%s", r.out);
    ck_assert_int_eq(count_str(r.out, "MPIV_TEST_HOST=hosta"), 2);
    free(r.out);
}
END_TEST

/* A whole job joined through the exchange with ranks started by a launcher
 * template and hosts that resolve to this machine. */
START_TEST(launcher_job_joins_the_exchange)
{
    struct run_result r = RUN("-n", "3", "-H", "localhost,127.0.0.1", "--launcher", "env",
                              BOOT_PROBE, "check", "mpiv_run", "3");
    EXPECT_CODE(r, 0);
    ck_assert_int_eq(count_str(r.out, "via mpiv_run ok"), 3);
    free(r.out);
}
END_TEST

/* With an ssh launcher the command crosses a remote shell: a fake ssh that
 * runs its last argument with sh checks that words with spaces, quotes and
 * dollars arrive intact, and that the rank gets its variables. */
START_TEST(ssh_launcher_quotes_the_command)
{
    char dir[] = "/tmp/mpiv_fake_ssh_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char ssh[64], tmpl[96];
    snprintf(ssh, sizeof ssh, "%s/ssh", dir);
    FILE *f = fopen(ssh, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\n"
          "while [ $# -gt 0 ]; do case \"$1\" in -o) shift 2;; -*) shift;; *) break;; esac; done\n"
          "host=$1; shift\n"
          "case \"$*\" in *MPIV_JOB_SECRET=*) echo 'fake ssh: secret on the command line' >&2; exit 8;; esac\n"
          "[ $# -eq 1 ] || { echo \"fake ssh: expected one command word, got $#\" >&2; exit 9; }\n"
          "exec sh -c \"$1\"\n", f);
    fclose(f);
    chmod(ssh, 0755);
    snprintf(tmpl, sizeof tmpl, "%s -T -o BatchMode=yes {host}", ssh);
    struct run_result r = RUN("-n", "2", "-H", "h1,h2", "--launcher", tmpl, "-x",
                              "MPIV_TEST_Q=it's \"q\" $HOME `x`", PROBE, "env", "MPIV_TEST_Q",
                              "two words");
    EXPECT_CODE(r, 0);
    ck_assert_int_eq(count_str(r.out, "MPIV_TEST_Q=it's \"q\" $HOME `x` two words=(unset)"), 2);
    EXPECT_OUT(r, "rank=0 size=2 local_rank=0 local_size=1 addr=");
    EXPECT_OUT(r, "rank=1 size=2 local_rank=0 local_size=1 addr=");
    ck_assert_int_eq(count_str(r.out, "secret_len=64"), 2);
    free(r.out);

    /* and a whole job joins through it (the secret travels on stdin) */
    r = RUN("-n", "2", "-H", "localhost", "--launcher", tmpl, BOOT_PROBE, "check", "mpiv_run",
            "2");
    EXPECT_CODE(r, 0);
    ck_assert_int_eq(count_str(r.out, "via mpiv_run ok"), 2);
    free(r.out);
    unlink(ssh);
    rmdir(dir);
}
END_TEST

/* The job secret must be on no command line (ps shows every process's to
 * every user): not through a launcher that stays up as the rank's parent
 * (timeout(1) keeps its whole command line), with or without -H, nor when
 * ranks are forked here. Each rank looks, once the whole job is up. */
START_TEST(secret_is_on_no_command_line)
{
    struct run_result r = RUN("-n", "2", "--launcher", "timeout 60", BOOT_PROBE, "secret-scan");
    EXPECT_CODE(r, 0);
    ck_assert_int_eq(count_str(r.out, "secret in no readable cmdline"), 2);
    free(r.out);
    r = RUN("-n", "2", "-H", "localhost,127.0.0.1", "--launcher", "timeout 60", BOOT_PROBE,
            "secret-scan");
    EXPECT_CODE(r, 0);
    ck_assert_int_eq(count_str(r.out, "secret in no readable cmdline"), 2);
    free(r.out);
    r = RUN("-n", "2", BOOT_PROBE, "secret-scan");
    EXPECT_CODE(r, 0);
    ck_assert_int_eq(count_str(r.out, "secret in no readable cmdline"), 2);
    free(r.out);
}
END_TEST

/* A launcher that does not forward stdin: the rank says why it cannot
 * join instead of hanging or joining with no secret. */
START_TEST(launcher_without_stdin_is_explained)
{
    char dir[] = "/tmp/mpiv_no_stdin_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char launcher[64];
    snprintf(launcher, sizeof launcher, "%s/no-stdin", dir);
    FILE *f = fopen(launcher, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\nexec \"$@\" </dev/null\n", f);
    fclose(f);
    chmod(launcher, 0755);
    struct run_result r = RUN("-n", "2", "--launcher", launcher, BOOT_PROBE, "check");
    EXPECT_CODE(r, 127);
    EXPECT_OUT(r, "could not read the job secret from its stdin");
    free(r.out);
    unlink(launcher);
    rmdir(dir);
}
END_TEST

/* Rank 3 of 4 exits with status 0 without joining while the others join
 * and wait for it: the job ends at once (not after MPIV_BOOT_TIMEOUT, 60 s
 * here), naming rank 3, and no other rank is blamed. */
START_TEST(rank_exiting_before_init_is_named)
{
    struct run_result r = RUN("-n", "4", BOOT_PROBE, "exit-before-init");
    EXPECT_CODE(r, 1);
    EXPECT_OUT(r, "mpiv_run: rank 3 (pid ");
    EXPECT_OUT(r, "exited with status 0 before joining the job (before mpiv_init), while other "
                  "ranks joined it; terminating the job");
    ck_assert_msg(count_str(r.out, "terminating the job") == 1, "%s", r.out);
    free(r.out);
}
END_TEST

/* A launcher that hangs for one host (as ssh to a host that never answers
 * would): the job ends once that rank is MPIV_BOOT_TIMEOUT late, naming it
 * and its host, and blames nobody else. */
START_TEST(host_that_never_answers_is_named)
{
    char dir[] = "/tmp/mpiv_hang_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char launcher[64], tmpl[96];
    snprintf(launcher, sizeof launcher, "%s/hang-for-dead", dir);
    FILE *f = fopen(launcher, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\n[ \"$1\" = dead ] && exec sleep 600\nshift\nexec \"$@\"\n", f);
    fclose(f);
    chmod(launcher, 0755);
    snprintf(tmpl, sizeof tmpl, "%s {host}", launcher);
    struct run_result r = RUN("-n", "3", "-H", "live,dead", "--launcher", tmpl, "-x",
                              "MPIV_BOOT_TIMEOUT=5", BOOT_PROBE, "check");
    EXPECT_CODE(r, 1);
    EXPECT_OUT(r, "mpiv_run: rank 1 (pid ");
    EXPECT_OUT(r, "host dead) has not joined the job 5 s after it was started "
                  "(MPIV_BOOT_TIMEOUT), while other ranks wait for it: is host dead reachable");
    ck_assert_msg(count_str(r.out, "terminating the job") == 1, "%s", r.out);
    free(r.out);
    unlink(launcher);
    rmdir(dir);
}
END_TEST

/* Every "left /dev/shm/NAME" line of out must name a file that is gone. */
static void expect_shm_gone(const char *out, int want)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, "left /dev/shm/")); n++) {
        p += strlen("left ");
        char path[128];
        size_t l = strcspn(p, "\n");
        snprintf(path, sizeof path, "%.*s", (int)l, p);
        ck_assert_msg(access(path, F_OK) != 0, "%s is still there:\n%s", path, out);
        unlink(path);
    }
    ck_assert_msg(n == want, "%d files reported, expected %d:\n%s", n, want, out);
}

/* A rank killed during start-up leaves its shm segment and libfabric's
 * file behind: mpiv_run removes them (and nothing that is not the job's:
 * a file named after a live pid stays). */
START_TEST(killed_rank_leaves_nothing_in_dev_shm)
{
    char keep[64];
    snprintf(keep, sizeof keep, "/dev/shm/%d:0:0", (int)getpid());
    int fd = open(keep, O_RDWR | O_CREAT, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    struct run_result r = RUN("-n", "3", BOOT_PROBE, "leave-shm");
    EXPECT_CODE(r, 128 + SIGKILL);
    EXPECT_OUT(r, "rank 2 (pid ");
    expect_shm_gone(r.out, 2);
    ck_assert_msg(access(keep, F_OK) == 0, "mpiv_run removed %s", keep);
    unlink(keep);
    free(r.out);
}
END_TEST

/* The same with the real library over libfabric: the rank killed after
 * mpiv_init leaves /dev/shm/<pid>:*, the others are ended by mpiv_run. */
START_TEST(killed_ofi_rank_leaves_nothing_in_dev_shm)
{
    struct run_result r = RUN("-n", "2", "-x", "MPIV_NET=ofi", INIT_PROBE, "kill-after-init");
    EXPECT_CODE(r, 128 + SIGKILL);
    int n = 0;
    for (const char *p = r.out; (p = strstr(p, "pid=")); n++) {
        int pid = atoi(p + 4);
        p += 4;
        DIR *d = opendir("/dev/shm");
        ck_assert_ptr_nonnull(d);
        struct dirent *e;
        char prefix[32];
        int pl = snprintf(prefix, sizeof prefix, "%d:", pid);
        while ((e = readdir(d)))
            ck_assert_msg(strncmp(e->d_name, prefix, (size_t)pl) != 0,
                          "/dev/shm/%s of rank pid %d is still there:\n%s", e->d_name, pid,
                          r.out);
        closedir(d);
    }
    ck_assert_msg(n == 2, "%s", r.out);
    free(r.out);
}
END_TEST

/* Two ranks with different MPIV_PACKET_SIZE: mpiv_init fails on both at
 * once with MPIV_ERR_CONFIG naming the setting and both values (over ofi
 * it used to report a false truncation and hang; over shm it failed with
 * a guess). */
static void packet_size_mismatch(char *net)
{
    struct run_result r = RUN("-n", "2", "-x", net, INIT_PROBE, "packet-size", "8192", "4096");
    EXPECT_CODE(r, 0);
    ck_assert_msg(count_str(r.out, "refused: MPIV_PACKET_SIZE differs: rank 0 has 8192, rank 1 "
                                   "has 4096") == 2, "%s: %s", net, r.out);
    free(r.out);
}

START_TEST(packet_size_mismatch_fails_every_rank)
{
    packet_size_mismatch("MPIV_NET=ofi");
    packet_size_mismatch("MPIV_NET=shm");
}
END_TEST

/* 100 ranks under a limit of 128 open files (mpiv_run holds about three
 * per rank): mpiv_run raises its own limit where it may (root: the hard
 * one too) and the job runs; where it may not, it says so before starting
 * anything. Either way no "Too many open files" halfway through. */
START_TEST(open_file_limit_is_raised_or_explained)
{
    if (access("/usr/bin/prlimit", X_OK) != 0)
        return; /* nothing to set the limit with */
    char *argv[] = {"/usr/bin/prlimit", "--nofile=128:128", MPIV_RUN, "-n", "100", BOOT_PROBE,
                    "join", NULL};
    struct run_result r = run_cmd(argv, 60);
    /* raising the hard limit needs CAP_SYS_RESOURCE */
    if (run_code(&r) != 0) {
        EXPECT_CODE(r, 1);
        EXPECT_OUT(r, "100 ranks need about");
    }
    ck_assert_msg(!strstr(r.out, "Too many open files"), "%s", r.out);
    free(r.out);
}
END_TEST

START_TEST(help_documents_options_and_variables)
{
    struct run_result r = RUN("--help");
    EXPECT_CODE(r, 0);
    static const char *want[] = {"-n, --np", "-H, --hosts", "--launcher", "-x VAR", "--timeout",
                                 "--tag-output", "--bind", "--map-by", "MPIV_BOOT_ADDR",
                                 "MPIV_JOB_SECRET", "MPIV_LOCAL_RANK", "MPIV_BOOT_TIMEOUT",
                                 "MPIV_WORKERS", "MPIV_NET", "MPIV_OFI_PROVIDER"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        EXPECT_OUT(r, want[i]);
    free(r.out);
}
END_TEST

START_TEST(bad_usage_exits_2)
{
    char *const *bad[] = {
        (char *const[]){NULL},
        (char *const[]){"-n", "0", PROBE, NULL},
        (char *const[]){"-n", "two", PROBE, NULL},
        (char *const[]){"-n", "2", NULL},
        (char *const[]){"-n", NULL},
        (char *const[]){PROBE, NULL},
        (char *const[]){"-n", "2", "--frobnicate", PROBE, NULL},
        (char *const[]){"-n", "2", "-q", PROBE, NULL},
        (char *const[]){"-n", "2", "/nonexistent/mpiv_prog", NULL},
        (char *const[]){"-n", "2", "mpiv-no-such-program-anywhere", NULL},
        (char *const[]){"-n", "2", "/etc/passwd", NULL},
        (char *const[]){"-n", "2", "-x", "1BAD=x", PROBE, NULL},
        (char *const[]){"-n", "2", "--timeout", "-1", PROBE, NULL},
        (char *const[]){"-n", "2", "--bind", "not-an-ip", PROBE, NULL},
        (char *const[]){"-n", "2", "--map-by", "diagonal", PROBE, NULL},
        (char *const[]){"-n", "2", "-H", "a,,b", PROBE, NULL},
        (char *const[]){"-n", "2", "--launcher", "ip netns exec {host}", PROBE, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct run_result r = mpiv_run(bad[i]);
        ck_assert_msg(run_code(&r) == 2, "case %zu: exit %d:\n%s", i, run_code(&r), r.out);
        ck_assert_msg(strncmp(r.out, "mpiv_run: ", 10) == 0, "case %zu: %s", i, r.out);
        free(r.out);
    }
}
END_TEST

static Suite *run_suite(void)
{
    Suite *s = suite_create("mpiv_run");
    TCase *tc = tcase_create("jobs");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, job_variables_1_2_4_ranks);
    tcase_add_test(tc, x_forwards_variables);
    tcase_add_test(tc, tag_output_keeps_lines_whole);
    tcase_add_test(tc, untagged_output_is_plain);
    tcase_add_test(tc, first_failure_status_is_propagated);
    tcase_add_test(tc, kill_9_of_one_rank_ends_the_job);
    tcase_add_test(tc, sigterm_is_forwarded);
    tcase_add_test(tc, timeout_kills_the_job);
    tcase_add_test(tc, hosts_round_robin_and_block);
    tcase_add_test(tc, launcher_job_joins_the_exchange);
    tcase_add_test(tc, ssh_launcher_quotes_the_command);
    tcase_add_test(tc, secret_is_on_no_command_line);
    tcase_add_test(tc, rank_exiting_before_init_is_named);
    tcase_add_test(tc, host_that_never_answers_is_named);
    tcase_add_test(tc, killed_rank_leaves_nothing_in_dev_shm);
    tcase_add_test(tc, killed_ofi_rank_leaves_nothing_in_dev_shm);
    tcase_add_test(tc, packet_size_mismatch_fails_every_rank);
    tcase_add_test(tc, open_file_limit_is_raised_or_explained);
    tcase_add_test(tc, launcher_without_stdin_is_explained);
    tcase_add_test(tc, help_documents_options_and_variables);
    tcase_add_test(tc, bad_usage_exits_2);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(.suite = run_suite);
