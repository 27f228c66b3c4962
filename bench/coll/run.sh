#!/usr/bin/env bash
# run.sh — every collective of MPIv, MPICH and Open MPI side by side.
#
# Builds bench/coll (coll.c against each implementation), runs it with 2
# ranks under each implementation's own launcher, one core per rank (as
# bench/pt2pt/run.sh pins them), and writes
#   OUT/coll.csv     every measurement: collective,impl,size_bytes,mean_us
#   OUT/coll.md      one table per collective with MPIv's speedup over each
#                    MPI (> 1: MPIv is faster)
#   OUT/coll.png     one panel per collective, time against size (gnuplot)
#   OUT/raw/*.txt    each run's output (and errors)
# Sizes: 8 B, 1 KiB, 64 KiB, 1 MiB per rank's contribution (see coll.c).
#
# Usage: bench/coll/run.sh [--quick] [--build DIR] [--out DIR]
#          [--impl mpiv,mpich,openmpi] [--bind core|none] [--timeout S]
#          [--no-build] [--report-only]
set -u -o pipefail

invocation="bench/coll/run.sh${*:+ $*}"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build-bench"
out=""
quick=0
impls="mpiv,mpich,openmpi"
bind=core
timeout_s=600
do_build=1
report_only=0

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --build) build=$2; shift ;;
    --out) out=$2; shift ;;
    --impl) impls=$2; shift ;;
    --bind) bind=$2; shift ;;
    --timeout) timeout_s=$2; shift ;;
    --no-build) do_build=0 ;;
    --report-only) report_only=1; do_build=0 ;;
    -h|--help) usage ;;
    *) echo "run.sh: unknown option $1" >&2; usage ;;
    esac
    shift
done
case "$bind" in core|none) ;; *) echo "run.sh: --bind core|none" >&2; exit 2 ;; esac
[ -n "$out" ] || out="$build/bench/coll/results"
mkdir -p "$out/raw" "$out/dat"
bin="$build/bench/coll"
IFS=, read -r -a impl_list <<<"$impls"
for impl in "${impl_list[@]}"; do
    case $impl in mpiv|mpich|openmpi) ;; *) echo "run.sh: unknown implementation '$impl'" >&2; exit 2 ;; esac
done
colls="barrier bcast reduce allreduce gather gatherv scatter scatterv allgather allgatherv alltoall alltoallv reduce_scatter scan"
say() { printf '%s\n' "$*" >&2; }

if [ $do_build = 1 ]; then
    [ -f "$build/CMakeCache.txt" ] ||
        cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    for impl in "${impl_list[@]}"; do
        case $impl in mpiv) targets="mpiv_run coll_bench" ;; *) targets="coll_$impl" ;; esac
        # shellcheck disable=SC2086
        cmake --build "$build" -j2 --target $targets >"$out/raw/build.$impl.log" 2>&1 ||
            say "run.sh: building the $impl variant failed (see $out/raw/build.$impl.log)"
    done
fi

if [ $report_only = 0 ]; then
    {
        echo "Command: $invocation"
        echo "Git: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet HEAD -- src include 2>/dev/null || echo ' (+ uncommitted changes in src/)')"
    } >"$out/raw/meta.txt"
fi

launch() {
    case $1 in
    mpiv) echo "env MPIV_BIND=$bind $build/tools/mpiv_run -n 2 --timeout $timeout_s $bin/coll_bench" ;;
    mpich) echo "timeout $timeout_s mpiexec.mpich -n 2 -bind-to $bind $bin/coll_bench_mpich" ;;
    openmpi) echo "timeout $timeout_s mpirun.openmpi --allow-run-as-root -n 2 --bind-to $bind --map-by core $bin/coll_bench_openmpi" ;;
    esac
}

args=""
[ $quick = 1 ] && args="--quick"
declare -A status
for impl in "${impl_list[@]}"; do
    raw="$out/raw/coll.$impl.txt"
    if [ $report_only = 1 ]; then
        status[$impl]=$(cat "$raw.status" 2>/dev/null || echo "?")
        continue
    fi
    cmd="$(launch "$impl") $args"
    exe=$(echo "$cmd" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /coll_bench/) print $i}')
    if [ ! -x "$exe" ]; then
        say "== $impl: not built, skipped"
        echo "# not built" >"$raw"; status[$impl]="not built"; echo "not built" >"$raw.status"
        continue
    fi
    say "== $impl: $cmd"
    start=$(date +%s)
    # shellcheck disable=SC2086
    $cmd >"$raw" 2>"$raw.err"
    rc=$?
    say "   $(( $(date +%s) - start )) s, exit status $rc"
    if [ $rc -ne 0 ]; then
        status[$impl]="failed ($rc)"
        sed 's/^/   | /' "$raw.err" | head -5 >&2
    else
        status[$impl]=ok
    fi
    echo "# command: $cmd" >>"$raw"
    echo "${status[$impl]}" >"$raw.status"
done
[ $report_only = 1 ] || echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')" >>"$out/raw/meta.txt"

# ------------------------------------------------------------ results ---
csv="$out/coll.csv"
echo "collective,impl,size_bytes,mean_us" >"$csv"
for impl in "${impl_list[@]}"; do
    raw="$out/raw/coll.$impl.txt"
    for c in $colls; do
        awk -v c="$c" '$1 == c && NF >= 3 {print $2, $3}' "$raw" 2>/dev/null >"$out/dat/$c.$impl.dat"
    done
    awk -v i="$impl" '!/^#/ && NF >= 3 {printf "%s,%s,%s,%s\n", $1, i, $2, $3}' "$raw" 2>/dev/null >>"$csv"
done

# table COLL: sizes down, implementations across, MPIv's speedup over each MPI
table() {
    local c=$1 files=()
    for impl in "${impl_list[@]}"; do files+=("$out/dat/$c.$impl.dat"); done
    awk -v names="${impl_list[*]}" '
        BEGIN { n = split(names, nm, " "); for (i = 1; i <= n; i++) if (nm[i] == "mpiv") mv = i }
        FNR == 1 { f++ }
        { if (!($1 in seen)) { seen[$1] = 1; xs[++nx] = $1 } v[f, $1] = $2 }
        END {
            line = "| size (B)"; sep = "|---:"
            for (i = 1; i <= n; i++) { line = line " | " nm[i] " µs"; sep = sep "|---:" }
            for (i = 1; i <= n; i++) if (i != mv && mv) { line = line " | mpiv vs " nm[i]; sep = sep "|---:" }
            print line " |"; print sep "|"
            for (k = 1; k <= nx; k++) {
                x = xs[k]; line = "| " x
                for (i = 1; i <= n; i++) line = line " | " (((i, x) in v) ? v[i, x] : "—")
                for (i = 1; i <= n; i++) if (i != mv && mv) {
                    r = (((mv, x) in v) && ((i, x) in v) && v[mv, x] > 0) ? v[i, x] / v[mv, x] : ""
                    line = line " | " (r == "" ? "—" : sprintf("%.2f×", r))
                }
                print line " |"
            }
        }' "${files[@]}"
}

md="$out/coll.md"
{
    sed -n 's/^Command: \(.*\)/Command: `\1`  /p' "$out/raw/meta.txt"
    sed -n 's/^Date: \(.*\)/Date: \1 (end of the runs)  /p' "$out/raw/meta.txt"
    echo "Machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)  "
    sed -n 's/^Git: .*/&  /p' "$out/raw/meta.txt"
    echo "MPICH: $(mpichversion 2>/dev/null | sed -n 's/^MPICH Version: *//p' | tr -d '\t'), Open MPI: $(mpirun.openmpi --version 2>/dev/null | head -1 | awk '{print $NF}')"
    st=""
    for impl in "${impl_list[@]}"; do st="$st $impl: ${status[$impl]:-?};"; done
    echo
    echo "2 ranks, one core each; mean µs per call, the slowest rank's (lower is better). Speedup = MPI's time / MPIv's time (> 1: MPIv faster). Runs:$st"
    for c in $colls; do
        echo
        echo "### $c"
        echo
        table "$c"
    done
    echo
    echo "### Commands"
    echo
    for impl in "${impl_list[@]}"; do
        sed -n 's/^# command: \(.*\)/    \1/p' "$out/raw/coll.$impl.txt" 2>/dev/null
    done
} >"$md"
cat "$md"

# ------------------------------------------------------------------ plot ---
png="$out/coll.png"
if command -v gnuplot >/dev/null; then
    term="png size 1800,1500"
    gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo && term="pngcairo size 1800,1500 font 'Sans,10'"
    plots() { # plots COLL: one gnuplot "plot" argument list
        local c=$1 sep="" s="" color f
        for impl in "${impl_list[@]}"; do
            f="$out/dat/$c.$impl.dat"
            [ -s "$f" ] || continue
            case $impl in mpiv) color="#d62728" ;; mpich) color="#1f77b4" ;; *) color="#2ca02c" ;; esac
            s="$s$sep'$f' using (\$1 == 0 ? 8 : \$1):2 with linespoints lw 2 pt 7 lc rgb '$color' title '$impl'"
            sep=", "
        done
        [ -n "$s" ] && echo "$s" ||
            echo "[1:2] 1 notitle lc rgb 'white', '+' using (1.5):(1):(\"no data\") with labels notitle"
    }
    {
        echo "set terminal $term"
        echo "set output '$png'"
        echo "set multiplot layout 4,4 title \"MPIv vs MPICH vs Open MPI — collectives, 2 ranks, one core each ($(date -u +%Y-%m-%d))\""
        echo "set grid; set key top left; set logscale x 2; set logscale y 10"
        echo "set xtics (\"8\" 8, \"1K\" 1024, \"64K\" 65536, \"1M\" 1048576)"
        echo "set xrange [4:2097152]"
        echo "set xlabel 'bytes per rank (barrier: at 8)'; set ylabel 'µs per call'"
        for c in $colls; do
            echo "set title '$c (lower is better)' noenhanced"
            echo "plot $(plots "$c")"
        done
        echo "unset multiplot"
    } | gnuplot 2>"$out/raw/gnuplot.log" || say "run.sh: gnuplot failed (see $out/raw/gnuplot.log)"
    [ -s "$png" ] && say "wrote $png"
fi
say "wrote $csv and $md"
