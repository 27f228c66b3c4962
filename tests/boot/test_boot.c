/* Tests of src/boot/: the singleton method in this process, the
 * mpiv_run method's error paths against fake servers, and whole jobs of
 * boot_probe started by mpiv_run and by Open MPI's mpirun (PMIx). */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot/boot.h"
#include "common/check_main.h"
#include "tools/run_cmd.h"

static const char *boot_vars[] = {
    "MPIV_BOOT_ADDR", "MPIV_JOB_SECRET", "MPIV_RANK", "MPIV_SIZE", "MPIV_LOCAL_RANK",
    "MPIV_LOCAL_SIZE", "MPIV_BOOT_TIMEOUT", "PMIX_RANK", "PMIX_NAMESPACE",
    "SLURM_STEP_NUM_TASKS",
};

static void clean_env(void)
{
    for (size_t i = 0; i < sizeof boot_vars / sizeof *boot_vars; i++)
        unsetenv(boot_vars[i]);
}

/* A TCP socket listening on loopback; *port receives its port. */
static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static void set_run_env(int port, const char *rank, const char *size)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    setenv("MPIV_BOOT_ADDR", addr, 1);
    setenv("MPIV_JOB_SECRET", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
    setenv("MPIV_RANK", rank, 1);
    setenv("MPIV_SIZE", size, 1);
}

START_TEST(singleton_is_rank_0_of_1)
{
    clean_env();
    ck_assert_str_eq(boot_method_name(), "none");
    ck_assert_int_eq(boot_barrier(), MPIV_ERR_STATE);
    int rank = -1, size = -1;
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_SUCCESS);
    ck_assert_int_eq(rank, 0);
    ck_assert_int_eq(size, 1);
    ck_assert_str_eq(boot_method_name(), "singleton");
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_ERR_STATE);
    char mine[5] = "abcd", all[5] = "";
    ck_assert_int_eq(boot_allgather(mine, 5, all), MPIV_SUCCESS);
    ck_assert_str_eq(all, "abcd");
    ck_assert_int_eq(boot_allgather(NULL, 5, all), MPIV_ERR_ARG);
    ck_assert_int_eq(boot_barrier(), MPIV_SUCCESS);
    boot_finalize();
    boot_finalize();
    ck_assert_str_eq(boot_method_name(), "none");
    /* joining again after leaving works */
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_SUCCESS);
    boot_finalize();
}
END_TEST

START_TEST(missing_variables_are_explained)
{
    clean_env();
    setenv("MPIV_BOOT_ADDR", "127.0.0.1:1", 1);
    int rank, size;
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_ERR_BOOTSTRAP);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "MPIV_SIZE"));
    setenv("MPIV_SIZE", "2", 1);
    setenv("MPIV_RANK", "2", 1);
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_ERR_BOOTSTRAP);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "MPIV_RANK=2"));
    setenv("MPIV_RANK", "1", 1);
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_ERR_BOOTSTRAP);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "MPIV_JOB_SECRET"));
    set_run_env(1, "1", "2");
    setenv("MPIV_BOOT_ADDR", "no-port-here", 1);
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_ERR_BOOTSTRAP);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "host:port"));
    setenv("MPIV_BOOT_ADDR", "127.0.0.1:1", 1);
    setenv("MPIV_BOOT_TIMEOUT", "soon", 1);
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "MPIV_BOOT_TIMEOUT=soon"));
    ck_assert_str_eq(boot_method_name(), "none");
}
END_TEST

START_TEST(job_key_is_checked)
{
    uint64_t key = 1;
    unsetenv("MPIV_JOB_KEY");
    ck_assert_int_eq(boot_job_key(&key), MPIV_SUCCESS);
    ck_assert_uint_eq(key, 0);
    setenv("MPIV_JOB_KEY", "00000000000000aF", 1);
    ck_assert_int_eq(boot_job_key(&key), MPIV_SUCCESS);
    ck_assert_uint_eq(key, 0xaf);
    static const char *bad[] = {"0000000000000000", "123", "00000000000000afx",
                                "g000000000000000", " 000000000000001"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("MPIV_JOB_KEY", bad[i], 1);
        ck_assert_int_eq(boot_job_key(&key), MPIV_ERR_BOOTSTRAP);
        ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "MPIV_JOB_KEY="));
    }
    unsetenv("MPIV_JOB_KEY");
}
END_TEST

/* Nobody listens: the rank retries until MPIV_BOOT_TIMEOUT, then fails. */
START_TEST(unreachable_exchange_times_out)
{
    clean_env();
    int port;
    int fd = listen_loopback(&port);
    close(fd); /* the port is now (almost certainly) closed */
    set_run_env(port, "0", "2");
    setenv("MPIV_BOOT_TIMEOUT", "1", 1);
    int rank, size;
    double t0 = run_now();
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_ERR_BOOTSTRAP);
    double dt = run_now() - t0;
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "cannot reach mpiv_run"));
    ck_assert(dt >= 0.9 && dt < 5);
}
END_TEST

/* The server accepts (the kernel does, from the backlog) and never answers:
 * the rank fails after MPIV_BOOT_TIMEOUT instead of hanging. */
START_TEST(silent_exchange_times_out)
{
    clean_env();
    int port;
    int fd = listen_loopback(&port);
    set_run_env(port, "0", "2");
    setenv("MPIV_BOOT_TIMEOUT", "1", 1);
    int rank, size;
    double t0 = run_now();
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_ERR_BOOTSTRAP);
    double dt = run_now() - t0;
    ck_assert_msg(strstr(mpiv_error_detail(), "timed out"), "detail: %s", mpiv_error_detail());
    ck_assert(dt >= 0.9 && dt < 5);
    close(fd);
}
END_TEST

static struct run_result run_job(int n, const char *mode, const char *method)
{
    char ns[16];
    snprintf(ns, sizeof ns, "%d", n);
    char *argv[] = {MPIV_RUN, "-n", ns, BOOT_PROBE, (char *)mode, (char *)method, ns, NULL};
    return run_cmd(argv, 25);
}

static void job_ok(int n)
{
    struct run_result r = run_job(n, "check", "mpiv_run");
    ck_assert_msg(run_code(&r) == 0, "mpiv_run -n %d exit %d:\n%s", n, run_code(&r), r.out);
    ck_assert_int_eq(count_str(r.out, " via mpiv_run ok"), n);
    for (int k = 0; k < n; k++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d of %d via mpiv_run ok", k, n);
        ck_assert_msg(strstr(r.out, want), "missing '%s' in:\n%s", want, r.out);
    }
    free(r.out);
}

/* A task of a multi-task srun step without PMIx is refused, naming the
 * fix; a one-task step, and PMIx's or mpiv_run's variables, are not. */
START_TEST(srun_without_pmix_is_refused)
{
    clean_env();
    int rank = -1, size = -1;
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_ERR_BOOTSTRAP);
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "one of 4 tasks"));
    ck_assert_ptr_nonnull(strstr(mpiv_error_detail(), "srun --mpi=pmix"));
    ck_assert_str_eq(boot_method_name(), "none");
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    ck_assert_int_eq(boot_init(&rank, &size), MPIV_SUCCESS);
    ck_assert_int_eq(size, 1);
    boot_finalize();
    clean_env();
}
END_TEST

START_TEST(mpiv_run_1_rank) { job_ok(1); }
END_TEST
START_TEST(mpiv_run_2_ranks) { job_ok(2); }
END_TEST
START_TEST(mpiv_run_4_ranks) { job_ok(4); }
END_TEST

START_TEST(probe_alone_is_singleton)
{
    clean_env();
    char *argv[] = {BOOT_PROBE, "check", "singleton", "1", NULL};
    struct run_result r = run_cmd(argv, 25);
    ck_assert_msg(run_code(&r) == 0, "exit %d:\n%s", run_code(&r), r.out);
    ck_assert_ptr_nonnull(strstr(r.out, "rank 0 of 1 via singleton ok"));
    free(r.out);
}
END_TEST

START_TEST(wrong_secret_is_refused)
{
    struct run_result r = run_job(2, "wrong-secret", NULL);
    ck_assert_msg(run_code(&r) == 0, "exit %d:\n%s", run_code(&r), r.out);
    /* mpiv_run logs refusals at most once a second (plus a count) */
    ck_assert_msg(strstr(r.out, "refused a connection to the key-value exchange"), "%s", r.out);
    /* and tells each rank why */
    ck_assert_msg(strstr(r.out, "refused rank 0: wrong job secret"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "refused rank 1: wrong job secret"), "%s", r.out);
    ck_assert_int_eq(count_str(r.out, "refused as expected"), 2);
    free(r.out);
}
END_TEST

/* Each rank first holds 64 idle connections open to the exchange (no
 * secret needed to connect): the job must still start, and mpiv_run must
 * say so in a bounded number of lines (at most 2 a second). */
START_TEST(idle_connections_do_not_deny_the_exchange)
{
    struct run_result r = run_job(4, "flood", "mpiv_run");
    size_t len = strlen(r.out);
    ck_assert_msg(run_code(&r) == 0, "exit %d; the output's end:\n%s", run_code(&r),
                  r.out + (len > 3000 ? len - 3000 : 0));
    ck_assert_int_eq(count_str(r.out, " via mpiv_run ok"), 4);
    int lines = count_str(r.out, "mpiv_run: ");
    ck_assert_msg(lines <= 2 * (int)r.seconds + 4, "%d lines from mpiv_run in %.1f s:\n%s", lines,
                  r.seconds, r.out);
    free(r.out);
}
END_TEST

/* n ranks of boot_probe shared VAR vals...; the output. */
static char *shared_job(int n, const char *var, const char *const *vals)
{
    char ns[16];
    snprintf(ns, sizeof ns, "%d", n);
    char *argv[16] = {MPIV_RUN, "-n", ns, BOOT_PROBE, "shared", (char *)var};
    for (int i = 0; i < n; i++)
        argv[6 + i] = (char *)vals[i];
    argv[6 + n] = NULL;
    struct run_result r = run_cmd(argv, 25);
    ck_assert_msg(run_code(&r) == 0, "exit %d:\n%s", run_code(&r), r.out);
    return r.out;
}

/* Every shared setting that differs is named with both values, on every
 * rank; equal ones (however spelt) pass. */
START_TEST(shared_settings_must_match)
{
    static const struct {
        const char *var, *vals[3], *want;
    } cases[] = {
        {"MPIV_PACKET_SIZE", {"8192", "4096", "8192"},
         "MPIV_PACKET_SIZE differs: rank 0 has 8192, rank 1 has 4096"},
        {"MPIV_PACKET_SIZE", {"8K", "8192", "16K"},
         "MPIV_PACKET_SIZE differs: rank 0 has 8192, rank 2 has 16384"},
        {"MPIV_EAGER_LIMIT", {"1024", "1024", "2048"},
         "MPIV_EAGER_LIMIT differs: rank 0 has 1024, rank 2 has 2048"},
        {"MPIV_NET", {"ofi", "shm", "ofi"}, "MPIV_NET differs: rank 0 has ofi, rank 1 has shm"},
        {"MPIV_OFI_PROVIDER", {"tcp", "tcp", ""},
         "MPIV_OFI_PROVIDER differs: rank 0 has tcp, rank 2 has (unset)"},
        {"MPIV_EAGER_CREDIT", {"1M", "1M", "2M"},
         "MPIV_EAGER_CREDIT differs: rank 0 has 1048576, rank 2 has 2097152"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out = shared_job(3, cases[i].var, cases[i].vals);
        ck_assert_msg(count_str(out, cases[i].want) == 3, "want '%s' 3 times in:\n%s",
                      cases[i].want, out);
        free(out);
    }
    static const char *const same[] = {"4K", "4096", "4k"};
    char *out = shared_job(3, "MPIV_PACKET_SIZE", same);
    ck_assert_msg(count_str(out, "shared ok") == 3, "%s", out);
    free(out);
}
END_TEST

START_TEST(junk_client_is_cut_off)
{
    struct run_result r = run_job(2, "garbage", "mpiv_run");
    ck_assert_msg(run_code(&r) == 0, "exit %d:\n%s", run_code(&r), r.out);
    ck_assert_ptr_nonnull(strstr(r.out, "junk connection closed"));
    ck_assert_ptr_nonnull(strstr(r.out, "not an MPIv bootstrap client"));
    ck_assert_int_eq(count_str(r.out, "via mpiv_run ok"), 2);
    free(r.out);
}
END_TEST

/* A rank that left with boot_finalize cannot take part in another
 * allgather: the others are told at once. */
START_TEST(allgather_after_a_rank_left_fails)
{
    struct run_result r = run_job(3, "early-bye", NULL);
    ck_assert_msg(run_code(&r) == 0, "exit %d:\n%s", run_code(&r), r.out);
    ck_assert_int_eq(count_str(r.out, "rank 2 already left the job"), 2);
    ck_assert(r.seconds < 10);
    free(r.out);
}
END_TEST

/* The last rank joins and exits 0 without leaving properly (no
 * mpiv_finalize): its peers might wait for it forever, so mpiv_run ends the
 * job at once, names the rank and fails; the others' allgather never waits
 * for MPIV_BOOT_TIMEOUT. */
START_TEST(rank_leaving_early_fails_the_others)
{
    struct run_result r = run_job(3, "leave-early", NULL);
    ck_assert_msg(run_code(&r) == 1, "exit %d:\n%s", run_code(&r), r.out);
    ck_assert_msg(strstr(r.out, "rank 2 (pid ") &&
                      strstr(r.out, "exited with status 0 without calling mpiv_finalize"),
                  "%s", r.out);
    ck_assert_int_eq(count_str(r.out, "timed out"), 0);
    ck_assert(r.seconds < 10);
    free(r.out);
}
END_TEST

START_TEST(rank_killed_early_ends_the_job)
{
    struct run_result r = run_job(3, "kill-early", NULL);
    ck_assert_msg(run_code(&r) == 128 + 9, "exit %d:\n%s", run_code(&r), r.out);
    ck_assert_ptr_nonnull(strstr(r.out, "rank 2 (pid "));
    ck_assert_ptr_nonnull(strstr(r.out, "killed by signal 9"));
    ck_assert(r.seconds < 10);
    free(r.out);
}
END_TEST

/* The last rank joins and then does nothing for 3 s: with
 * MPIV_BOOT_TIMEOUT=1 the others' allgather fails after about a second. */
START_TEST(stalled_exchange_times_out)
{
    char *argv[] = {MPIV_RUN, "-n", "3", "-x", "MPIV_BOOT_TIMEOUT=1", BOOT_PROBE, "stall", NULL};
    struct run_result r = run_cmd(argv, 25);
    ck_assert_msg(run_code(&r) == 0, "exit %d:\n%s", run_code(&r), r.out);
    ck_assert_int_eq(count_str(r.out, "failed as expected"), 2);
    ck_assert_int_ge(count_str(r.out, "timed out after 1 s while waiting for the other ranks"), 1);
    ck_assert(r.seconds < 10);
    free(r.out);
}
END_TEST

static int have_mpirun(void)
{
    return access("/usr/bin/mpirun", X_OK) == 0 && !getenv("MPIV_TEST_NO_MPIRUN");
}

static void mpirun_job(int n)
{
    if (!have_mpirun())
        return;
    clean_env();
    char ns[16];
    snprintf(ns, sizeof ns, "%d", n);
    char *argv[] = {"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-n", ns,
                    BOOT_PROBE, "check", "pmix", ns, NULL};
    /* mpirun passes its environment on to the ranks it starts here */
    char *env[] = {"LSAN_OPTIONS=suppressions=" BOOT_LSAN_SUPP ":print_suppressions=0", NULL};
    struct run_result r = run_cmd_env(argv, env, 25);
    ck_assert_msg(run_code(&r) == 0, "mpirun exit %d:\n%s", run_code(&r), r.out);
    ck_assert_int_eq(count_str(r.out, " via pmix ok"), n);
    free(r.out);
}

/* PMIx: a fence that does not complete ends with MPIV_BOOT_TIMEOUT too
 * (Open MPI's PMIx server honours PMIX_TIMEOUT). mpirun itself then fails
 * the job, since the ranks exit without PMIx_Finalize. */
START_TEST(mpirun_stalled_fence_times_out)
{
    if (!have_mpirun())
        return;
    clean_env();
    char *argv[] = {"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "3",
                    BOOT_PROBE, "stall", NULL};
    char *env[] = {"LSAN_OPTIONS=suppressions=" BOOT_LSAN_SUPP ":print_suppressions=0",
                   "MPIV_BOOT_TIMEOUT=1", NULL};
    struct run_result r = run_cmd_env(argv, env, 25);
    ck_assert_msg(count_str(r.out, "fence timed out after 1 s") >= 1, "%s", r.out);
    ck_assert(r.seconds < 15);
    free(r.out);
}
END_TEST

START_TEST(mpirun_2_ranks_pmix) { mpirun_job(2); }
END_TEST
START_TEST(mpirun_4_ranks_pmix) { mpirun_job(4); }
END_TEST

static Suite *boot_suite(void)
{
    Suite *s = suite_create("boot");
    TCase *unit = tcase_create("in process");
    tcase_add_test(unit, singleton_is_rank_0_of_1);
    tcase_add_test(unit, srun_without_pmix_is_refused);
    tcase_add_test(unit, missing_variables_are_explained);
    tcase_add_test(unit, job_key_is_checked);
    tcase_add_test(unit, unreachable_exchange_times_out);
    tcase_add_test(unit, silent_exchange_times_out);
    suite_add_tcase(s, unit);
    TCase *jobs = tcase_create("jobs");
    tcase_set_timeout(jobs, 30);
    tcase_add_test(jobs, probe_alone_is_singleton);
    tcase_add_test(jobs, mpiv_run_1_rank);
    tcase_add_test(jobs, mpiv_run_2_ranks);
    tcase_add_test(jobs, mpiv_run_4_ranks);
    tcase_add_test(jobs, wrong_secret_is_refused);
    tcase_add_test(jobs, junk_client_is_cut_off);
    tcase_add_test(jobs, idle_connections_do_not_deny_the_exchange);
    tcase_add_test(jobs, shared_settings_must_match);
    tcase_add_test(jobs, allgather_after_a_rank_left_fails);
    tcase_add_test(jobs, rank_leaving_early_fails_the_others);
    tcase_add_test(jobs, rank_killed_early_ends_the_job);
    tcase_add_test(jobs, stalled_exchange_times_out);
    tcase_add_test(jobs, mpirun_2_ranks_pmix);
    tcase_add_test(jobs, mpirun_stalled_fence_times_out);
    tcase_add_test(jobs, mpirun_4_ranks_pmix);
    suite_add_tcase(s, jobs);
    return s;
}

CHECK_MAIN(.suite = boot_suite);
