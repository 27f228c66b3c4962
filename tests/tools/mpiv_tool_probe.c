/*
 * mpiv_tool_probe — a rank for the mpiv_run tests. Its name is unique so
 * that the tests can look for leftover processes by name.
 *
 *   env [VAR...]         print this rank's MPIV_* job variables and VARs
 *   exit RANK CODE       rank RANK exits with CODE after 100 ms; the others
 *                        sleep 30 s (mpiv_run must stop them)
 *   sleep S              print "pid=<pid> rank=<r>", then sleep S seconds
 *   lines K              print K long lines, each naming rank and number
 *   trap                 print "ready", then wait for SIGTERM, report it, exit 0
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *env_or(const char *name)
{
    const char *s = getenv(name);
    return s ? s : "(unset)";
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static volatile sig_atomic_t got_term;
static void on_term(int sig)
{
    (void)sig;
    got_term = 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "env";
    int rank = atoi(env_or("MPIV_RANK"));
    if (strcmp(mode, "env") == 0) {
        printf("rank=%s size=%s local_rank=%s local_size=%s addr=%s secret_len=%zu",
               env_or("MPIV_RANK"), env_or("MPIV_SIZE"), env_or("MPIV_LOCAL_RANK"),
               env_or("MPIV_LOCAL_SIZE"), env_or("MPIV_BOOT_ADDR"),
               strlen(getenv("MPIV_JOB_SECRET") ? getenv("MPIV_JOB_SECRET") : ""));
        for (int i = 2; i < argc; i++)
            printf(" %s=%s", argv[i], env_or(argv[i]));
        printf("\n");
        return 0;
    }
    if (strcmp(mode, "exit") == 0 && argc > 3) {
        if (rank == atoi(argv[2])) {
            sleep_ms(100);
            return atoi(argv[3]);
        }
        sleep_ms(30000);
        return 0;
    }
    if (strcmp(mode, "sleep") == 0 && argc > 2) {
        printf("pid=%d rank=%d\n", (int)getpid(), rank);
        fflush(stdout);
        sleep_ms(atol(argv[2]) * 1000);
        return 0;
    }
    if (strcmp(mode, "lines") == 0 && argc > 2) {
        /* several partial writes per line: mpiv_run must still keep each
         * line whole */
        int k = atoi(argv[2]);
        char pad[201];
        memset(pad, 'a' + rank % 26, 200);
        pad[200] = '\0';
        for (int i = 0; i < k; i++) {
            printf("line rank=%d n=%d ", rank, i);
            fflush(stdout);
            printf("%s", pad);
            fflush(stdout);
            printf(" end\n");
            fflush(stdout);
        }
        fprintf(stderr, "stderr of rank %d\n", rank);
        return 0;
    }
    if (strcmp(mode, "trap") == 0) {
        struct sigaction sa = {.sa_handler = on_term};
        sigaction(SIGTERM, &sa, NULL);
        printf("ready rank=%d\n", rank);
        fflush(stdout);
        for (int i = 0; i < 3000 && !got_term; i++)
            sleep_ms(10);
        printf("rank %d got SIGTERM: %s\n", rank, got_term ? "yes" : "no");
        return 0;
    }
    fprintf(stderr, "mpiv_tool_probe: bad arguments\n");
    return 2;
}
