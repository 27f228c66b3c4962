#!/bin/sh
# compare.sh — run an application's MPIv and MPI + pthreads versions on the
# same input, with the same rank count and pinning, and print the ratio of
# their throughputs (MPIv / MPI: above 1 means MPIv is faster).
#
# Usage: apps/compare.sh [-n RANKS] [-b BUILD_DIR] [-t THREADS] [-p core|none] APP [APP ARGS...]
#   APP        bfs (harmonic-mean TEPS), stencil (cell updates/s) or uts
#              (nodes/s; the MPI version of uts is an extra, not a baseline
#              we tuned)
#   -n RANKS   ranks for both (default 2)
#   -b DIR     build directory (default: build, next to apps/)
#   -t THREADS pthreads per rank of the MPI version (default: the worker
#              count MPIv picks, cores per rank minus one for its server,
#              at least 1)
#   -p core    (default) each rank gets cores/RANKS cores: MPIv pins its
#              workers and server inside the rank's share (MPIV_BIND=core);
#              MPICH's Hydra binds each rank to the same share
#              (-bind-to core:cores/RANKS)
#   -p none    no pinning for either (MPIV_BIND=none, -bind-to none)
# Exit status: 0 if both versions ran and validated, 1 otherwise, 2 on bad
# usage.
set -u

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }

ranks=2
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
threads=""
pin=core
while getopts "n:b:t:p:h" opt; do
    case "$opt" in
    n) ranks=$OPTARG ;;
    b) build=$OPTARG ;;
    t) threads=$OPTARG ;;
    p) pin=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { usage >&2; exit 2; }
app=$1
shift
case "$app" in
bfs) metric=harmonic_mean_TEPS ;;
stencil) metric=cell_updates_per_s ;;
uts) metric=nodes_per_s ;;
*) echo "compare.sh: unknown application '$app' (bfs, stencil or uts)" >&2; exit 2 ;;
esac
case "$pin" in
core | none) ;;
*) echo "compare.sh: -p $pin: expected core or none" >&2; exit 2 ;;
esac
case "$ranks" in
'' | *[!0-9]* | 0) echo "compare.sh: -n $ranks: expected a positive integer" >&2; exit 2 ;;
esac

mpiv_run="$build/tools/mpiv_run"
mpiv_bin="$build/apps/$app/$app"
mpi_bin="$build/apps/$app/${app}_mpi"
mpiexec=$(command -v mpiexec.mpich || command -v mpiexec.hydra || true)
for f in "$mpiv_run" "$mpiv_bin"; do
    [ -x "$f" ] || { echo "compare.sh: $f not found: build it first" >&2; exit 1; }
done
if [ ! -x "$mpi_bin" ] || [ -z "$mpiexec" ]; then
    echo "compare.sh: no MPI version ($mpi_bin) or no mpiexec.mpich: MPICH missing at build time?" >&2
    exit 1
fi

cores=$(nproc)
share=$((cores / ranks))
[ "$share" -ge 1 ] || share=1
if [ -z "$threads" ]; then
    threads=$((share - 1))
    [ "$threads" -ge 1 ] || threads=1
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() { # label, command...
    label=$1
    shift
    echo "== $label: $*"
    if ! "$@" >"$out" 2>&1; then
        cat "$out"
        echo "compare.sh: $label run failed" >&2
        return 1
    fi
    cat "$out"
    grep -q '^result: PASSED' "$out" || { echo "compare.sh: $label did not validate" >&2; return 1; }
    value=$(sed -n "s/^$metric: *//p" "$out" | tail -n 1)
    [ -n "$value" ] || { echo "compare.sh: $label printed no $metric" >&2; return 1; }
}

echo "machine: $(uname -n), $cores cores ($(sed -n 's/^model name\t*: //p' /proc/cpuinfo | head -n 1)); $(date -u '+%Y-%m-%d %H:%M UTC')"
if [ "$pin" = core ]; then bind="core:$share"; else bind=none; fi
run MPIv env MPIV_BIND="$pin" "$mpiv_run" -n "$ranks" "$mpiv_bin" "$@" || exit 1
mpiv_value=$value
run MPI "$mpiexec" -n "$ranks" -bind-to "$bind" "$mpi_bin" --threads "$threads" "$@" || exit 1
mpi_value=$value
awk -v a="$mpiv_value" -v b="$mpi_value" -v m="$metric" -v app="$app" -v n="$ranks" \
    -v pin="$pin" 'BEGIN { printf "%s, %d ranks, pinning %s: %s MPIv %.4g, MPI %.4g, ratio MPIv/MPI %.2f\n", app, n, pin, m, a, b, a / b }'
