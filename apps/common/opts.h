/*
 * opts.h — command-line parsing shared by the applications.
 *
 * Options are "--name value" or "--name=value". Parsing happens on every
 * rank (they all see the same argv), so every rank reaches the same verdict;
 * only rank 0 prints it. A bad argument ends the program with exit code 2.
 */
#ifndef APPS_OPTS_H
#define APPS_OPTS_H

#include <stddef.h>
#include <stdint.h>

struct opts {
    int argc;
    char **argv;
    int i;            /* index of the argument being looked at */
    const char *val;  /* value of the option just matched */
    char err[256];    /* first error met, "" if none */
};

void opts_start(struct opts *o, int argc, char **argv);
/* 1 if argv[i] is "--name" or "--name=v" and (when takes_value) a value is
 * present; on a missing value records an error and returns 0. */
int opts_match(struct opts *o, const char *name, int takes_value);
/* Parse o->val; on failure record an error (naming the option). */
int64_t opts_i64(struct opts *o, const char *name, int64_t lo, int64_t hi);
double opts_f64(struct opts *o, const char *name, double lo, double hi);
/* Record an error unless one is already recorded. */
void opts_fail(struct opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* After parsing: prints usage (help) or the error on rank 0, finalises the
 * runtime and exits (0 for help, 2 for an error). Returns if neither. */
void opts_finish(struct opts *o, int help, const char *prog, const char *usage);

/* The whole parse: --help and -h, then every other argument through
 * match(o, ctx), which returns 1 if it took it (an argument nobody takes is
 * an error); then, if there is neither an error nor --help, check(o, ctx)
 * (may be NULL) to record what is wrong with the options as a whole; then
 * opts_finish(). Returns only if the program is to run. */
void opts_parse(int argc, char **argv, const char *prog, const char *usage, int (*match)(struct opts *o, void *ctx),
                void (*check)(struct opts *o, void *ctx), void *ctx);

#endif /* APPS_OPTS_H */
