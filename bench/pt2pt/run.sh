#!/usr/bin/env bash
# run.sh — point-to-point benchmarks of MPIv, MPICH and Open MPI side by side.
#
# Builds the pt2pt benchmarks (bench/pt2pt/CMakeLists.txt), runs each one
# with 2 ranks under each implementation's own launcher, prints tables with
# MPIv's speedup over each MPI (> 1 means MPIv is better), and writes
#   OUT/pt2pt.csv      every measurement: benchmark,impl,size,pairs,metric,value
#   OUT/pt2pt.md       the tables, in Markdown
#   OUT/pt2pt.png      four plots (gnuplot)
#   OUT/raw/*.txt      each run's OSU-style output (and errors)
#
# --rounds N runs every benchmark N times, the implementations one after
# another in each round, and reports each figure as the median of its N
# runs (raw files B.IMPL.rK.txt). This machine's speed changes by 2x in
# phases of a minute or so; one run per implementation can catch MPIv and
# an MPI in different phases, and only rounds show how often that happens
# (docs/perf/pt2pt.md, "Two phases of this machine").
#
# Interleaving (the default; --no-interleave runs each benchmark whole):
# each benchmark's range is cut into slices, and every implementation runs
# a slice before any runs the next, so one size's figures for MPIv and the
# MPIs are taken seconds apart, not minutes. Slices: latency 0:64, 128:2K,
# 4K:64K, 128K:4M bytes; bandwidth the same from 1 B; mt_latency and
# mt_msgrate one pair count each (mt_msgrate's rate anchor is measured in
# every slice, and reported as the median of them all). A slice that fails
# or times out costs only its own rows. The slices of a round append to
# that round's raw file.
#
# Phase probe: before and after every slice of every implementation,
# pt2pt_ring_copy (two threads copying 1 KiB records through a ring, no MPI
# at all) times the machine itself, in ns per record (what the project's
# machine reads in each of its phases: docs/perf/pt2pt.md, "2026-11-27").
# The report lists the probes taken before each slice, per implementation,
# and every slice whose probes (before and after, all implementations) lie
# more than 1.5x apart: its ratios there may compare phases, not
# implementations (OUT/raw/probes.txt has them all). A phase can change
# within a slice; bench/pt2pt/phased.sh keeps each phase's runs apart for
# before/after comparisons.
#
# Episodes: a slice whose probe before or after reads more than F times
# the median of the run's probes so far (--episode-factor, default 3) ran
# in an episode: seconds in which a shared or virtual machine runs
# everything several times slower (docs/perf/pt2pt.md, "Table
# 2026-11-29"). Such a slice is run again, up to --episode-retries times
# (default 2; 0 keeps every run), whatever the implementation, each time
# once a probe a second has read under that bound again (at most
# --episode-wait seconds, default 60, which outlasts the episodes that
# docs/perf/pt2pt.md describes).
# The discarded output stays in the raw file as comments,
# OUT/raw/episodes.txt lists the reruns, and the report lists them. A
# slice still in an episode after its retries is kept. The bound follows
# the run's median, so a run that starts inside a long episode judges its
# first slices against the episode itself.
#
# Pinning (--bind core, the default): every rank owns exactly one of the
# machine's cores under all three implementations.
#   MPICH:    mpiexec.mpich -bind-to core          rank r on core r
#   Open MPI: mpirun --bind-to core --map-by core  rank r on core r
#   MPIv:     MPIV_BIND=core (mpiv_run, default)   with 2 local ranks on 2
#             cores each rank gets one core; its worker and its server thread
#             both live on that core (MPIV_WORKERS=1, server on the last core
#             of the rank's share).
# So each implementation gets the same CPU budget — one core per rank —
# and whatever threads it runs (MPI: main + one pthread per pair; MPIv: one
# worker running the ULTs, one server) share it. --bind none lets the OS
# place every thread anywhere instead, for all three.
#
# MPIv runs twice, as two rows of every table: mpiv-ult (the benchmark's
# threads are ULTs) and mpiv-pthread (plain pthreads: main's thread for one
# per rank, one pthread per pair otherwise), i.e. --threads ult|pthread.
# --impl mpiv means both. A third MPIv row, mpi-face, is the MPI sources
# built with mpivcc against MPIv's MPI face (src/mpi/) and run by
# mpiv_run: MPI with pthreads, to be held against mpiv-pthread.
#
# Usage: bench/pt2pt/run.sh [--quick] [--build DIR] [--out DIR]
#          [--impl mpiv-ult,mpiv-pthread,mpi-face,mpich,openmpi]
#          [--bench latency,bandwidth,mt_latency,mt_msgrate]
#          [--pairs 1,2,8,64,1024] [--bind core|none] [--timeout S] [--no-build]
#          [--rounds N]      (N runs of each, medians; default 1)
#          [--no-interleave] (each benchmark whole per implementation)
#          [--gated]         (multi-threaded tests: the start/stop-gate timing)
#          [--episode-retries N] [--episode-factor F] [--episode-wait S]
#                            (see Episodes above)
#          [--report-only]   (tables and plot again from OUT/raw, no runs)
set -u -o pipefail

invocation="bench/pt2pt/run.sh${*:+ $*}"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build-bench"
out=""
quick=0
impls="mpiv-ult,mpiv-pthread,mpi-face,mpich,openmpi"
benches="latency,bandwidth,mt_latency,mt_msgrate"
pairs=""
bind=core
timeout_s=""
do_build=1
report_only=0
gated=0
rounds=""
interleave=1
episode_retries=2
episode_factor=3
episode_wait=60

usage() { sed -n '2,/^set -u/{/^set -u/d;p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --build) build=$2; shift ;;
    --out) out=$2; shift ;;
    --impl) impls=$2; shift ;;
    --bench) benches=$2; shift ;;
    --pairs) pairs=$2; shift ;;
    --bind) bind=$2; shift ;;
    --timeout) timeout_s=$2; shift ;;
    --no-build) do_build=0 ;;
    --gated) gated=1 ;;
    --rounds) rounds=$2; shift ;;
    --no-interleave) interleave=0 ;;
    --episode-retries) episode_retries=${2:-}; shift ;;
    --episode-factor) episode_factor=${2:-}; shift ;;
    --episode-wait) episode_wait=${2:-}; shift ;;
    --report-only) report_only=1; do_build=0 ;;
    -h|--help) usage ;;
    *) echo "run.sh: unknown option $1" >&2; usage ;;
    esac
    shift
done
case "$bind" in core|none) ;; *) echo "run.sh: --bind core|none" >&2; exit 2 ;; esac
case "$rounds" in ''|*[!0-9]*|0) [ -z "$rounds" ] || { echo "run.sh: --rounds takes a count >= 1" >&2; exit 2; } ;; esac
case "$episode_retries" in ''|*[!0-9]*) echo "run.sh: --episode-retries takes a count >= 0" >&2; exit 2 ;; esac
case "$episode_wait" in ''|*[!0-9]*) echo "run.sh: --episode-wait takes seconds >= 0" >&2; exit 2 ;; esac
awk -v f="$episode_factor" 'BEGIN { exit !(f ~ /^[0-9]+([.][0-9]+)?$/ && f + 0 > 1) }' ||
    { echo "run.sh: --episode-factor takes a number > 1" >&2; exit 2; }
[ -n "$out" ] || out="$build/bench/pt2pt/results"
[ -n "$timeout_s" ] || { [ $quick = 1 ] && timeout_s=300 || timeout_s=1200; }
mkdir -p "$out/raw" "$out/dat"
# --report-only reads the rounds of the run it reports
[ -n "$rounds" ] || rounds=$(sed -n 's/^Rounds: //p' "$out/raw/meta.txt" 2>/dev/null)
[ -n "$rounds" ] || rounds=1
# raw_files B IMPL: the outputs of B under IMPL, one per round
raw_files() {
    if [ "$rounds" -gt 1 ]; then
        for ((k = 1; k <= rounds; k++)); do echo "$out/raw/$1.$2.r$k.txt"; done
    else
        echo "$out/raw/$1.$2.txt"
    fi
}
bin="$build/bench/pt2pt"
impl_list=()
IFS=, read -r -a words <<<"$impls"
for impl in "${words[@]}"; do
    case $impl in
    mpiv) impl_list+=(mpiv-ult mpiv-pthread) ;;
    mpiv-ult|mpiv-pthread|mpi-face|mpich|openmpi) impl_list+=("$impl") ;;
    *) echo "run.sh: unknown implementation '$impl' (mpiv, mpiv-ult, mpiv-pthread, mpi-face, mpich, openmpi)" >&2; exit 2 ;;
    esac
done
IFS=, read -r -a bench_list <<<"$benches"

say() { printf '%s\n' "$*" >&2; }

# ---------------------------------------------------------------- build ---
if [ $do_build = 1 ]; then
    [ -f "$build/CMakeCache.txt" ] ||
        cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    for impl in "${impl_list[@]}"; do
        case $impl in
        mpiv-*) targets="mpiv_run pt2pt_latency pt2pt_bandwidth pt2pt_mt_latency pt2pt_mt_msgrate pt2pt_ring_copy" ;;
        mpi-face) targets="mpiv_run pt2pt_mpiface" ;;
        *) targets="pt2pt_$impl" ;;
        esac
        # shellcheck disable=SC2086
        if ! cmake --build "$build" -j2 --target $targets >"$out/raw/build.$impl.log" 2>&1; then
            say "run.sh: building the $impl variants failed (see $out/raw/build.$impl.log)"
        fi
    done
fi

# The MPIv sources measured, recorded before the runs (--report-only keeps it).
if [ $report_only = 0 ]; then
    {
        echo "Command: $invocation"
        echo "Git: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet HEAD -- src include 2>/dev/null || echo ' (+ uncommitted changes in src/)')"
        echo "Rounds: $rounds"
        echo "Interleave: $([ $interleave = 1 ] && echo slices || echo off)"
        echo "Episodes: retries $episode_retries, wait $episode_wait s, factor $episode_factor"
    } >"$out/raw/meta.txt"
    : >"$out/raw/probes.txt"
    : >"$out/raw/episodes.txt"
fi

# ------------------------------------------------------------------ run ---
# launch IMPL: prints the launcher command line for 2 ranks.
launch() {
    case $1 in
    mpiv-*|mpi-face)
        echo "env MPIV_BIND=$bind $build/tools/mpiv_run -n 2 --timeout $timeout_s" ;;
    mpich)
        echo "timeout $timeout_s mpiexec.mpich -n 2 -bind-to $bind" ;;
    openmpi)
        echo "timeout $timeout_s mpirun.openmpi --allow-run-as-root -n 2 --bind-to $bind --map-by core" ;;
    esac
}
exe() {
    case $1 in
    mpiv-ult) echo "$bin/pt2pt_$2 --threads ult" ;;
    mpiv-pthread) echo "$bin/pt2pt_$2 --threads pthread" ;;
    mpi-face) echo "$bin/pt2pt_$2_mpiface" ;;
    *) echo "$bin/pt2pt_$2_$1" ;;
    esac
}

# probe: ns per 1 KiB record through a ring between CPUs 0 and 1 now.
probe() {
    local v
    v=$("$bin/pt2pt_ring_copy" 1024 56 100000 2>/dev/null | sed -n 's/.*: \([0-9.]*\) ns a record.*/\1/p')
    echo "${v:-n/a}"
}

# median_rows: rows "x v1 v2 ..." (one per round) -> one row per x, in the
# order of first appearance, each column the median of its values (the
# mean of the middle two for an even count). Plain awk (no asort).
median_rows() {
    awk '{ if (!($1 in n)) { xs[++nx] = $1; n[$1] = 0; w[$1] = NF }
           k = ++n[$1]; for (c = 2; c <= NF; c++) v[$1, c, k] = $c }
         END {
           for (i = 1; i <= nx; i++) {
               x = xs[i]; m = n[x]; line = x
               for (c = 2; c <= w[x]; c++) {
                   for (a = 1; a <= m; a++) t[a] = v[x, c, a] + 0
                   for (a = 2; a <= m; a++) { y = t[a]; for (b = a - 1; b >= 1 && t[b] > y; b--) t[b + 1] = t[b]; t[b + 1] = y }
                   med = m % 2 ? t[(m + 1) / 2] : (t[m / 2] + t[m / 2 + 1]) / 2
                   line = line " " med
               }
               print line
           }
         }'
}
# Every probe of the run (numbers only), for the episode rule.
probe_log=()
# over_bound PROBE MEDIAN: whether PROBE is a number above episode_factor
# times MEDIAN.
over_bound() {
    awk -v a="$1" -v m="$2" -v f="$episode_factor" 'BEGIN { exit !(a ~ /^[0-9.]+$/ && a > f * m) }'
}
# episode BEFORE AFTER: whether either probe is over the bound of the
# median of probe_log (which needs 5 probes before it says anything);
# prints that median either way.
episode() {
    local med=""
    [ ${#probe_log[@]} -ge 5 ] && med=$(printf 'p %s\n' "${probe_log[@]}" | median_rows | cut -d' ' -f2)
    echo "${med:-n/a}"
    [ -n "$med" ] && { over_bound "$1" "$med" || over_bound "$2" "$med"; }
}
log_probe() { local v; for v in "$@"; do [[ $v =~ ^[0-9.]+$ ]] && probe_log+=("$v"); done; return 0; }

args=()
[ $quick = 1 ] && args+=(--quick)
# slices B: one line of extra arguments per slice of B (one empty line: B whole)
slices() {
    if [ $interleave = 0 ]; then echo ""; return; fi
    local p
    case $1 in
    latency) printf '%s\n' "-m 0:64" "-m 128:2K" "-m 4K:64K" "-m 128K:4M" ;;
    bandwidth) printf '%s\n' "-m 1:64" "-m 128:2K" "-m 4K:64K" "-m 128K:4M" ;;
    mt_*) IFS=, read -r -a ps <<<"${pairs:-1,2,8,64,1024}"
          for p in "${ps[@]}"; do echo "-p $p"; done ;;
    *) echo "" ;;
    esac
}
declare -A status
for ((round = 1; round <= rounds; round++)); do
[ "$rounds" -gt 1 ] && [ $report_only = 0 ] && say "=== round $round of $rounds"
for b in "${bench_list[@]}"; do
    bargs=("${args[@]}")
    case $b in mt_*)
        [ -n "$pairs" ] && [ $interleave = 0 ] && bargs+=(-p "$pairs")
        [ $gated = 1 ] && bargs+=(--gated) ;;
    esac
    if [ $report_only = 1 ]; then
        for impl in "${impl_list[@]}"; do
            raw=$(raw_files "$b" "$impl" | sed -n "${round}p")
            st=$(cat "$raw.status" 2>/dev/null || echo "?")
            # a benchmark is "ok" if every round was; else its first failure
            [ "${status[$b.$impl]:-ok}" = ok ] && status[$b.$impl]=$st
        done
        continue
    fi
    first=1
    while IFS= read -r slice; do
    for impl in "${impl_list[@]}"; do
        x=$(exe "$impl" "$b")
        raw=$(raw_files "$b" "$impl" | sed -n "${round}p")
        if [ $first = 1 ]; then : >"$raw"; echo ok >"$raw.status"; : >"$raw.err"; fi
        if [ ! -x "${x%% *}" ] || { [ "${impl%-*}" != mpich ] && [ "$impl" != openmpi ] && [ ! -x "$build/tools/mpiv_run" ]; }; then
            [ $first = 1 ] && say "== $b / $impl: not built, skipped"
            echo "# not built" >"$raw"
            status[$b.$impl]="not built"
            echo "not built" >"$raw.status"
            continue
        fi
        cmd="$(launch "$impl") $x ${bargs[*]}${slice:+ $slice}"
        sl=${slice:-whole}
        tmp="$out/raw/slice.tmp"
        # the machine's phase just before this slice and just after it
        # (n/a: no probe built); rerun while that was an episode
        for ((try = 0; ; try++)); do
            pr=$(probe)
            say "== $b / $impl (probe $pr ns): $cmd"
            start=$(date +%s)
            # shellcheck disable=SC2086
            $cmd >"$tmp" 2>>"$raw.err" </dev/null
            rc=$?
            pa=$(probe)
            say "   $(( $(date +%s) - start )) s, exit status $rc (probe after: $pa ns)"
            med=$(episode "$pr" "$pa"); ep=$?
            log_probe "$pr" "$pa"
            [ $ep -eq 0 ] && [ $rc -eq 0 ] || break
            if [ "$try" -ge "$episode_retries" ]; then
                echo "$b r$round ${sl// /_} $impl $pr $pa $med kept" >>"$out/raw/episodes.txt"
                break
            fi
            echo "$b r$round ${sl// /_} $impl $pr $pa $med rerun" >>"$out/raw/episodes.txt"
            {
                echo "# discarded, an episode (probes $pr / $pa ns, the run's median $med ns):"
                sed 's/^/# | /' "$tmp"
            } >>"$raw"
            say "   an episode (the run's median probe: $med ns): the slice again, $((try + 1)) of $episode_retries, once a probe reads under ${episode_factor}x that"
            # wait for the episode to pass (these probes stay out of the
            # median: they are taken while the machine is known to be off)
            for ((w = 0; w < episode_wait; w++)); do
                sleep 1
                pw=$(probe)
                [[ $pw =~ ^[0-9.]+$ ]] && ! over_bound "$pw" "$med" && break
            done
        done
        echo "# phase probe: $pr ns per 1 KiB record" >>"$raw"
        cat "$tmp" >>"$raw"
        rm -f "$tmp"
        echo "$b r$round ${sl// /_} $impl $pr $pa" >>"$out/raw/probes.txt"
        echo "# phase probe after: $pa ns per 1 KiB record" >>"$raw"
        if [ $rc -ne 0 ]; then
            st="failed ($rc)"
            tail -5 "$raw.err" | sed 's/^/   | /' >&2
        else
            st=ok
        fi
        [ "${status[$b.$impl]:-ok}" = ok ] && status[$b.$impl]=$st
        echo "# command: $cmd" >>"$raw"
        # the round's status: its first failed slice, if any
        [ "$(cat "$raw.status")" = ok ] && echo "$st" >"$raw.status"
    done
    first=0
    done < <(slices "$b")
done
done

[ $report_only = 1 ] || echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')" >>"$out/raw/meta.txt"

# ------------------------------------------------------------ results ---
# rounds B IMPL: every round's output of B under IMPL, concatenated
rounds_of() { local f; for f in $(raw_files "$1" "$2"); do [ -f "$f" ] && cat "$f"; done; }

# Data lines of the OSU-style output -> .dat (x value [value2]) and CSV:
# only lines that start with a number (a failed run's error text does not);
# with --rounds, the median over the rounds.
csv="$out/pt2pt.csv"
echo "benchmark,impl,size_bytes,pairs,metric,value" >"$csv"
for b in "${bench_list[@]}"; do
    for impl in "${impl_list[@]}"; do
        dat="$out/dat/$b.$impl.dat"
        : >"$dat"
        case $b in
        latency)
            rounds_of "$b" "$impl" | awk '$1 ~ /^[0-9]+$/ && NF>=2 {print $1, $2}' | median_rows >"$dat"
            awk -v i="$impl" '{printf "latency,%s,%s,1,latency_us,%s\n", i, $1, $2}' "$dat" >>"$csv" ;;
        bandwidth)
            rounds_of "$b" "$impl" | awk '$1 ~ /^[0-9]+$/ && NF>=2 {print $1, $2}' | median_rows >"$dat"
            awk -v i="$impl" '{printf "bandwidth,%s,%s,1,bandwidth_MBps,%s\n", i, $1, $2}' "$dat" >>"$csv" ;;
        mt_latency)
            rounds_of "$b" "$impl" | awk '$1 ~ /^[0-9]+$/ && NF>=4 {print $1, $3, $4, $2}' | median_rows >"$dat"
            awk -v i="$impl" '{printf "mt_latency,%s,%s,%s,latency_us,%s\nmt_latency,%s,%s,%s,msgs_per_s,%s\n", i, $4, $1, $2, i, $4, $1, $3}' "$dat" >>"$csv" ;;
        mt_msgrate)
            # the rate anchor (one thread per rank, no other) has a line of
            # its own, "anchor" in the pairs column: a row of the table, not
            # a point of the plot
            rounds_of "$b" "$impl" | awk '$1 ~ /^[0-9]+$/ && NF>=4 {print $1, $4, $3, $2}' | median_rows >"$dat"
            awk -v i="$impl" '{printf "mt_msgrate,%s,%s,%s,msgs_per_s,%s\nmt_msgrate,%s,%s,%s,bandwidth_MBps,%s\n", i, $4, $1, $2, i, $4, $1, $3}' "$dat" >>"$csv"
            rounds_of "$b" "$impl" | awk '$1 == "anchor" && NF>=4 {print "1-thread-anchor", $4, $3, $2}' | median_rows >"$out/dat/mt_msgrate_anchor.$impl.dat"
            awk -v i="$impl" '{printf "mt_msgrate_anchor,%s,%s,1,msgs_per_s,%s\n", i, $4, $2}' "$out/dat/mt_msgrate_anchor.$impl.dat" >>"$csv"
            cat "$out/dat/mt_msgrate_anchor.$impl.dat" "$dat" >"$out/dat/mt_msgrate_table.$impl.dat" ;;
        esac
    done
done

# table BENCH XLABEL UNIT LOWER_IS_BETTER: a Markdown table joining the
# implementations on x, with MPIv's speedup over each MPI.
table() {
    local b=$1 xl=$2 unit=$3 lower=$4
    local files=() names=()
    for impl in "${impl_list[@]}"; do
        files+=("$out/dat/$b.$impl.dat")
        names+=("$impl")
    done
    awk -v xl="$xl" -v unit="$unit" -v lower="$lower" -v names="${names[*]}" '
        BEGIN {
            n = split(names, nm, " ")
            # a speedup column for each MPIv row (mpi-face included)
            # against each MPI
            for (i = 1; i <= n; i++) if (nm[i] ~ /^mpiv|^mpi-face/) mv[++nmv] = i; else mp[++nmp] = i
        }
        # the column is the file'"'"'s place among the arguments: an empty
        # file (a failed run) must not shift the ones after it
        FNR == 1 || f == 0 { for (i = 1; i < ARGC; i++) if (ARGV[i] == FILENAME) f = i }
        { if (!($1 in seen)) { seen[$1] = 1; xs[++nx] = $1 } v[f, $1] = $2 }
        END {
            line = "| " xl; sep = "|---:"
            for (i = 1; i <= n; i++) { line = line " | " nm[i] " " unit; sep = sep "|---:" }
            for (a = 1; a <= nmv; a++)
                for (b = 1; b <= nmp; b++) { line = line " | " nm[mv[a]] " vs " nm[mp[b]]; sep = sep "|---:" }
            print line " |"; print sep "|"
            for (k = 1; k <= nx; k++) {
                x = xs[k]; line = "| " x
                for (i = 1; i <= n; i++) line = line " | " (((i, x) in v) ? v[i, x] : "—")
                for (a = 1; a <= nmv; a++)
                    for (b = 1; b <= nmp; b++) {
                        m = mv[a]; i = mp[b]
                        if (((m, x) in v) && ((i, x) in v) && v[m, x] > 0 && v[i, x] > 0)
                            r = lower ? v[i, x] / v[m, x] : v[m, x] / v[i, x]
                        else r = ""
                        line = line " | " (r == "" ? "—" : sprintf(r >= 10 ? "%.0f×" : r >= 0.1 ? "%.2f×" : "%.2g×", r))
                    }
                print line " |"
            }
        }' "${files[@]}"
}

# phases: the phase probes of the run (see the header), per benchmark:
# each implementation's range, and the slices whose implementations ran
# more than 1.5x apart.
phases() {
    [ -s "$out/raw/probes.txt" ] || return 0
    echo
    echo "### Phase probes (\`pt2pt_ring_copy 1024 56\` before each slice: ns per 1 KiB record between the two cores; lower is a faster machine; slices are also probed after)"
    echo
    awk '$5 != "n/a" { v[$1 "|" $4] = v[$1 "|" $4] " " $5 }
    { k = $1 "|" $2 "|" $3
        for (c = 5; c <= 6 && c <= NF; c++) {
            if ($c == "n/a") continue
            who = $4 (c == 6 ? " (after)" : "")
            if (!(k in lo) || $c + 0 < lo[k]) { lo[k] = $c + 0; lon[k] = who }
            if (!(k in hi) || $c + 0 > hi[k]) { hi[k] = $c + 0; hin[k] = who }
            if (!(k in seen)) { seen[k] = 1; ks[++nk] = k }
        } }
    END {
        for (x in v) {
            n = split(v[x], a, " "); split(x, bi, "|")
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
            line[bi[1]] = line[bi[1]] sprintf("%s %s–%s (median %s); ", bi[2], a[1], a[n], a[int((n + 1) / 2)])
        }
        for (b in line) print "- " b ": " line[b]
        off = 0
        for (i = 1; i <= nk; i++) { k = ks[i]
            if (hi[k] > 1.5 * lo[k]) {
                split(k, f, "|"); gsub("_", " ", f[3])
                if (!off++) print "- slices in different phases (their ratios compare the machine, not the implementations):"
                printf "  - %s, round %s, `%s`: %s %s ns, %s %s ns\n", f[1], substr(f[2], 2), f[3], lon[k], lo[k], hin[k], hi[k]
            } }
        if (!off) print "- every slice ran its implementations within 1.5× of each other"
    }' "$out/raw/probes.txt"
    # the slices run again for an episode (see the header)
    local ef
    ef=$(sed -n 's/^Episodes: .*factor //p' "$out/raw/meta.txt")
    if [ -s "$out/raw/episodes.txt" ]; then
        echo "- slices in an episode (a probe over ${ef:-?}× the run's median): run again (output discarded, kept in the raw files as comments), or kept when out of retries:"
        awk '{ gsub("_", " ", $3); printf "  - %s, round %s, `%s`, %s: probes %s / %s ns, median %s ns: %s\n", $1, substr($2, 2), $3, $4, $5, $6, $7, $8 == "kept" ? "**kept** (no retries left)" : "run again" }' "$out/raw/episodes.txt"
    elif [ -f "$out/raw/episodes.txt" ]; then
        echo "- no slice ran in an episode (no probe over ${ef:-?}× the run's median)"
    fi
}

md="$out/pt2pt.md"
{
    sed -n 's/^Command: \(.*\)/Command: `\1`  /p' "$out/raw/meta.txt"
    sed -n 's/^Date: \(.*\)/Date: \1 (end of the runs)  /p' "$out/raw/meta.txt"
    echo "Machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)  "
    sed -n 's/^Git: .*/&  /p' "$out/raw/meta.txt"
    echo "MPICH: $(mpichversion 2>/dev/null | sed -n 's/^MPICH Version: *//p' | tr -d '\t'), Open MPI: $(mpirun.openmpi --version 2>/dev/null | head -1 | awk '{print $NF}')"
    echo
    [ "$rounds" -gt 1 ] && echo "Rounds: $rounds: every figure is the median of $rounds runs; in each round the implementations ran one after another.  "
    grep -q '^Interleave: slices' "$out/raw/meta.txt" 2>/dev/null &&
        echo "Interleaved: each benchmark ran in slices (a few sizes, or one pair count), every implementation one slice before any ran the next, so each row's figures were taken one slice apart (seconds), not one whole benchmark apart.  "
    echo "Speedup = how many times better MPIv is (> 1: MPIv wins; for latency MPI's time / MPIv's time)."
    for b in "${bench_list[@]}"; do
        st=""
        for impl in "${impl_list[@]}"; do st="$st $impl: ${status[$b.$impl]:-?};"; done
        echo
        case $b in
        latency) echo "### Latency (ping-pong, one-way, µs) — lower is better"; echo; echo "Runs:$st"; echo; table latency "Size (B)" "µs" 1 ;;
        bandwidth) echo "### Bandwidth (window of 64, MB/s) — higher is better"; echo; echo "Runs:$st"; echo; table bandwidth "Size (B)" "MB/s" 0 ;;
        mt_latency) echo "### Multi-threaded latency (8 B ping-pong per pair, one-way µs per thread) — lower is better"; echo; echo "Runs:$st"; echo; table mt_latency "Pairs" "µs" 1 ;;
        mt_msgrate) echo "### Multi-threaded message rate (8 B, window of 64 per pair, messages/s) — higher is better"; echo
            echo "Row \`1-thread-anchor\`: the same window loop on one thread per rank and no other (MPI: main's thread at MPI_THREAD_MULTIPLE), the best single-thread rate MPI reaches; hold MPIv's many-thread rows against it."
            echo; echo "Runs:$st"; echo; table mt_msgrate_table "Pairs" "msg/s" 0 ;;
        esac
    done
    phases
    # The aims of issue 6, from the same run.
    val() { awk -v x="$2" '$1 == x {print $2}' "$out/dat/$1.dat" 2>/dev/null; }
    aim() { # aim TEXT MPIV_VALUE MPICH_VALUE LOWER_IS_BETTER GOAL_RATIO
        if [ -z "$2" ] || [ -z "$3" ]; then echo "| $1 | — | — | — | not measured |"; return; fi
        awk -v t="$1" -v a="$2" -v b="$3" -v lower="$4" -v goal="$5" 'BEGIN {
            r = lower ? b / a : a / b
            printf "| %s | %s | %s | %.2f× | %s |\n", t, a, b, r, (r >= goal ? "met" : "not met") }'
    }
    echo
    # the highest rate in any row of the rate table, over the given impls
    best() { local f=() i; for i in "$@"; do f+=("$out/dat/mt_msgrate_table.$i.dat"); done
        cat "${f[@]}" 2>/dev/null | awk '$2 > m {m = $2} END {if (m > 0) print m}'; }
    echo "### Aims of issues 6, 13 and 18 (this run; MPIv = mpiv-ult unless named)"
    echo
    echo "| aim | MPIv | other | MPIv speedup | |"
    echo "|---|---:|---:|---:|---|"
    aim "8 B latency (µs) ≤ MPICH's" "$(val latency.mpiv-ult 8)" "$(val latency.mpich 8)" 1 1
    aim "8 B latency from a pthread (µs) ≤ MPICH's" "$(val latency.mpiv-pthread 8)" "$(val latency.mpich 8)" 1 1
    aim "8 B latency from a pthread within 1.2× of from a ULT (MPIv = mpiv-pthread, other = mpiv-ult; met at ≥ 0.83×)" "$(val latency.mpiv-pthread 8)" "$(val latency.mpiv-ult 8)" 1 0.8333
    aim "message rate, 64 pairs (msg/s) ≥ 10× MPICH's" "$(val mt_msgrate.mpiv-ult 64)" "$(val mt_msgrate.mpich 64)" 0 10
    aim "message rate, 8 pairs (msg/s) ≥ 10× MPICH's" "$(val mt_msgrate.mpiv-ult 8)" "$(val mt_msgrate.mpich 8)" 0 10
    aim "MPIv's best rate (any row) ≥ 1.5× MPI's best (any row, anchor included)" "$(best mpiv-ult mpiv-pthread)" "$(best mpich openmpi)" 0 1.5
    aim "1 MiB ping-pong (µs; bandwidth = size / time) ≥ 1.2× MPICH's bandwidth" "$(val latency.mpiv-ult 1048576)" "$(val latency.mpich 1048576)" 1 1.2
    # issue 13: the MPI face costs MPIv's path at most 5% (MPIv = mpi-face,
    # other = mpiv-pthread, the same threads; met at >= 0.95x)
    aim "MPI face 8 B latency within 5% of native (µs)" "$(val latency.mpi-face 8)" "$(val latency.mpiv-pthread 8)" 1 0.95
    aim "MPI face 64 KiB bandwidth within 5% of native (MB/s)" "$(val bandwidth.mpi-face 65536)" "$(val bandwidth.mpiv-pthread 65536)" 0 0.95
    aim "MPI face message rate, 8 pairs, within 5% of native (msg/s)" "$(val mt_msgrate.mpi-face 8)" "$(val mt_msgrate.mpiv-pthread 8)" 0 0.95
    echo
    echo "### Commands"
    echo
    for b in "${bench_list[@]}"; do
        for impl in "${impl_list[@]}"; do
            sed -n 's/^# command: \(.*\)/    \1/p' "$(raw_files "$b" "$impl" | head -1)" 2>/dev/null
        done
    done
} >"$md"
cat "$md"

# ------------------------------------------------------------------ plot ---
png="$out/pt2pt.png"
if command -v gnuplot >/dev/null; then
    term="png size 1600,1100"
    gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo && term="pngcairo size 1600,1100 font 'Sans,11'"
    plots() { # plots BENCH COLUMN: one gnuplot "plot" argument list
        local b=$1 col=$2 sep="" s="" color
        for impl in "${impl_list[@]}"; do
            f="$out/dat/$b.$impl.dat"
            [ -s "$f" ] || continue
            case $impl in mpiv-ult) color="#d62728" ;; mpiv-pthread) color="#ff7f0e" ;; mpi-face) color="#9467bd" ;; mpich) color="#1f77b4" ;; *) color="#2ca02c" ;; esac
            s="$s$sep'$f' using (\$1 == 0 ? 0.5 : \$1):$col with linespoints lw 2 pt 7 lc rgb '$color' title '$impl'"
            sep=", "
        done
        # an empty panel says so instead of failing
        [ -n "$s" ] && echo "$s" ||
            echo "[1:2] 1 notitle lc rgb 'white', '+' using (1.5):(1):(\"no data\") with labels notitle"
    }
    gnuplot 2>"$out/raw/gnuplot.log" <<EOF || say "run.sh: gnuplot failed (see $out/raw/gnuplot.log)"
set terminal $term
set output '$png'
set multiplot layout 2,2 title "MPIv vs MPICH vs Open MPI — point-to-point, 2 ranks, one core each ($(date -u +%Y-%m-%d))"
set grid
set key top left
set offsets graph 0.03, graph 0.03, 0, 0
set logscale x 2
set logscale y 10
set xtics ("0" 0.5, "1" 1, "8" 8, "64" 64, "512" 512, "4K" 4096, "32K" 32768, "256K" 262144, "2M" 2097152)
set xlabel "message size, bytes (0 B plotted at 0.5)"
set ylabel "one-way latency (µs)"
set title "Ping-pong latency (lower is better)"
plot $(plots latency 2)
set ylabel "bandwidth (MB/s)"
set title "Bandwidth, window of 64 (higher is better)"
plot $(plots bandwidth 2)
set xtics (1, 2, 8, 64, 1024)
set format y "%.0s%c"
set xlabel "pairs (threads per rank)"
set ylabel "messages/s (rank 0 sends)"
set title "Multi-threaded message rate, 8 B (higher is better)"
plot $(plots mt_msgrate 2)
set ylabel "one-way latency per thread (µs)"
set format y "10^{%L}"
set title "Multi-threaded ping-pong latency, 8 B (lower is better)"
plot $(plots mt_latency 2)
unset multiplot
EOF
    say "wrote $png"
fi
say "wrote $csv and $md"
