/*
 * driver.c — see driver.h.
 *
 * Each BFS is validated (validate.c) by the Graph500 rules and its TEPS
 * counts the input edges of the traversed component; the report gives the
 * harmonic mean over the roots, as Graph500 does.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bfs.h"
#include "driver.h"
#include "layout.h"
#include "par.h"

int bfs_common_opt(struct opts *o, struct bfs_config *c)
{
    if (opts_match(o, "--scale", 1))
        c->scale = (int)opts_i64(o, "--scale", 1, 26);
    else if (opts_match(o, "--edgefactor", 1))
        c->edgefactor = (int)opts_i64(o, "--edgefactor", 1, 1024);
    else if (opts_match(o, "--roots", 1))
        c->roots = (int)opts_i64(o, "--roots", 1, 1024);
    else if (opts_match(o, "--seed", 1))
        c->seed = (uint64_t)opts_i64(o, "--seed", 0, INT64_MAX);
    else if (opts_match(o, "--corrupt", 0))
        c->corrupt = 1;
    else if (opts_match(o, "--phases", 0))
        c->phases = 1;
    else
        return 0;
    return 1;
}

/* Picks up to `want` distinct roots with at least one non-loop edge, the
 * same on every rank. */
static int pick_roots(const struct graph *g, uint64_t seed, int want, int64_t *roots)
{
    enum { BATCH = 256 };
    int have = 0;
    uint64_t s = mix64(seed ^ 0x726f6f7473ULL);
    for (int round = 0; round < 64 && have < want; round++) {
        int64_t cand[BATCH], deg[BATCH];
        for (int i = 0; i < BATCH; i++) {
            s += 0x9e3779b97f4a7c15ULL;
            cand[i] = (int64_t)(mix64(s) % (uint64_t)g->n);
            deg[i] = 0;
            if (graph_owner(g, cand[i]) == g->me) {
                int64_t lv = graph_local(g, cand[i]);
                deg[i] = g->off[lv + 1] - g->off[lv];
            }
        }
        par_allreduce_i64(deg, deg, BATCH, PAR_SUM);
        for (int i = 0; i < BATCH && have < want; i++) {
            int dup = deg[i] == 0;
            for (int j = 0; j < have && !dup; j++)
                dup = roots[j] == cand[i];
            if (!dup)
                roots[have++] = cand[i];
        }
    }
    return have;
}

/* Makes one visited vertex (not the root) its own parent: a cycle. */
static void corrupt_tree(const struct graph *g, int64_t *parent, int64_t root)
{
    for (int64_t lv = 0; lv < g->nlocal; lv++) {
        int64_t v = graph_global(g, lv);
        if (parent[lv] >= 0 && v != root) {
            parent[lv] = v;
            return;
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --phases: every rank's time in the shared bottom-up kernel (layout.c)
 * over the searches' time. On one core per rank no version that uses this
 * kernel can search faster than its slowest rank runs the kernel, so
 * searched / that time bounds the speed-up any such version can have over
 * this run. (With several threads per rank the kernel time is CPU time,
 * summed over them, and the bound is for one core per rank.) Collective. */
static void report_phases(double kernel, double searched)
{
    int me = par_rank(), P = par_size();
    double mine[2] = {kernel, searched};
    double *all = malloc((size_t)P * sizeof mine);
    if (!all)
        par_die("bfs: out of memory");
    par_allgather(mine, all, sizeof mine);
    if (me == 0) {
        double slowest = 0;
        for (int r = 0; r < P; r++) {
            printf("phases: rank %d: bottom-up kernel %.4f s of %.4f s searching (%.1f%%)\n", r, all[2 * r],
                   all[2 * r + 1], 100.0 * all[2 * r] / all[2 * r + 1]);
            if (all[2 * r] > slowest)
                slowest = all[2 * r];
        }
        if (slowest > 0)
            printf("phases: the slowest rank's kernel time bounds a version that uses this kernel, one core "
                   "per rank, at %.2fx this run's search time\n",
                   searched / slowest);
        else
            printf("phases: the shared bottom-up kernel did not run (no bottom-up level, or --layout ids)\n");
        fflush(stdout);
    }
    free(all);
}

int bfs_drive(const struct bfs_config *c, const struct bfs_kernel *k, const char *threads)
{
    int me = par_rank(), P = par_size();
    double t0 = par_wtime();
    struct graph g;
    graph_build(&g, c->scale, c->edgefactor, c->seed, P, me);
    par_barrier();
    double tbuild = par_wtime() - t0;
    if (me == 0) {
        printf("bfs (%s): SCALE %d, edgefactor %d: %lld vertices, %lld edges; %d ranks x %s\n", k->name, c->scale,
               c->edgefactor, (long long)g.n, (long long)g.m, P, threads);
        printf("construction: %.3f s\n", tbuild);
        fflush(stdout);
    }

    void *state = k->setup(&g, k->arg);
    int64_t *parent = malloc(((size_t)g.nlocal + 1) * sizeof *parent);
    int64_t *roots = malloc((size_t)c->roots * sizeof *roots);
    double *times = malloc((size_t)c->roots * sizeof *times);
    double *teps = malloc((size_t)c->roots * sizeof *teps);
    if (!parent || !roots || !times || !teps)
        par_die("bfs: out of memory");
    int nroots = pick_roots(&g, c->seed, c->roots, roots);
    if (nroots < c->roots && me == 0)
        printf("only %d vertices with edges found for roots\n", nroots);

    int failed = 0;
    double inv_sum = 0, searched = 0, kernel = 0;
    bfs_layout_timing = c->phases;
    for (int r = 0; r < nroots; r++) {
        bfs_layout_ns = 0; /* no search runs: the last one has returned */
        times[r] = k->run(state, roots[r], parent);
        searched += times[r];
        kernel += (double)__atomic_load_n(&bfs_layout_ns, __ATOMIC_RELAXED) * 1e-9;
        if (c->corrupt && r == 0)
            corrupt_tree(&g, parent, roots[r]);
        int64_t edges = 0;
        int64_t errors = bfs_validate(&g, parent, roots[r], &edges);
        if (errors) {
            if (me == 0)
                printf("root %lld: INVALID (%lld errors)\n", (long long)roots[r], (long long)errors);
            failed = 1;
            break;
        }
        teps[r] = (double)edges / times[r];
        inv_sum += 1.0 / teps[r];
    }
    if (me == 0 && !failed && nroots > 0) {
        qsort(times, (size_t)nroots, sizeof *times, cmp_double);
        qsort(teps, (size_t)nroots, sizeof *teps, cmp_double);
        printf("%d BFS validated (Graph500 rules)\n", nroots);
        printf("time: min %.4f  median %.4f  max %.4f s\n", times[0], times[nroots / 2], times[nroots - 1]);
        printf("TEPS: min %.4g  median %.4g  max %.4g\n", teps[0], teps[nroots / 2], teps[nroots - 1]);
        printf("harmonic_mean_TEPS: %.6g\n", nroots / inv_sum);
    }
    if (c->phases && !failed && nroots > 0)
        report_phases(kernel, searched);
    if (me == 0) {
        printf("result: %s\n", failed || nroots == 0 ? "FAILED" : "PASSED");
        fflush(stdout);
    }
    /* No rank may exit before rank 0 has printed the verdict: a rank that
     * exits with status 1 ends the job, and the verdict would be lost. */
    par_barrier();
    k->teardown(state);
    free(parent);
    free(roots);
    free(times);
    free(teps);
    graph_free(&g);
    return failed || nroots == 0;
}
