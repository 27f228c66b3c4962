/*
 * opts.c — see opts.h.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "par.h"

void opts_start(struct opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->argc = argc;
    o->argv = argv;
    o->i = 1;
}

void opts_fail(struct opts *o, const char *fmt, ...)
{
    if (o->err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->err, sizeof o->err, fmt, ap);
    va_end(ap);
}

int opts_match(struct opts *o, const char *name, int takes_value)
{
    const char *a = o->argv[o->i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        if (!takes_value) {
            opts_fail(o, "option %s takes no value", name);
            return 0;
        }
        o->val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (!takes_value)
        return 1;
    if (o->i + 1 >= o->argc) {
        opts_fail(o, "option %s needs a value", name);
        return 0;
    }
    o->val = o->argv[++o->i];
    return 1;
}

int64_t opts_i64(struct opts *o, const char *name, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(o->val, &end, 10);
    if (errno || end == o->val || *end != '\0' || v < lo || v > hi) {
        opts_fail(o, "%s %s: expected an integer from %lld to %lld", name, o->val, (long long)lo, (long long)hi);
        return lo;
    }
    return v;
}

double opts_f64(struct opts *o, const char *name, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(o->val, &end);
    if (errno || end == o->val || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        opts_fail(o, "%s %s: expected a number from %g to %g", name, o->val, lo, hi);
        return lo;
    }
    return v;
}

void opts_finish(struct opts *o, int help, const char *prog, const char *usage)
{
    if (!help && !o->err[0])
        return;
    if (par_rank() == 0) {
        if (o->err[0])
            fprintf(stderr, "%s: %s\nTry '%s --help'.\n", prog, o->err, prog);
        else
            fputs(usage, stdout);
    }
    fflush(stdout);
    par_finalize();
    exit(o->err[0] ? 2 : 0);
}

void opts_parse(int argc, char **argv, const char *prog, const char *usage, int (*match)(struct opts *o, void *ctx),
                void (*check)(struct opts *o, void *ctx), void *ctx)
{
    struct opts o;
    int help = 0;
    opts_start(&o, argc, argv);
    for (; o.i < argc && !o.err[0]; o.i++) {
        if (opts_match(&o, "--help", 0) || opts_match(&o, "-h", 0))
            help = 1;
        else if (!match(&o, ctx) && !o.err[0])
            opts_fail(&o, "unknown argument '%s'", argv[o.i]);
    }
    if (!o.err[0] && !help && check)
        check(&o, ctx);
    opts_finish(&o, help, prog, usage);
}
