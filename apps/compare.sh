#!/usr/bin/env bash
# compare.sh — run an application's MPIv version against the MPI versions
# on the same input, rank count and pinning, in alternating rounds, and
# print each result and every version's ratio to the best MPI result.
#
# Usage: apps/compare.sh [options] APP [ARGS...]
#   APP          bfs (harmonic-mean TEPS), uts (nodes/s) or stencil (cell
#                updates/s); ARGS go to every version (the options common
#                to all: bfs --scale/--roots/--seed/--edgefactor, uts
#                --tree/-t .../--expect/--sha1, stencil --n/--nx/--ny/--iters)
# Versions (-v, default all that are built):
#   mpiv            <app> on MPIv (mpiv_run)
#   expert-mpich    <app>_expert on MPICH: the program an expert MPI
#                   programmer would write, one single-threaded rank per core
#   expert-openmpi  <app>_expert_openmpi on Open MPI
#   twin-mpich      <app>_mpi on MPICH: the twin, the MPIv program with
#                   pthreads instead of ULTs (MPI_THREAD_MULTIPLE), not how an
#                   MPI programmer would write it
#   twin-openmpi    <app>_mpi_openmpi on Open MPI
#   expert-mpiface  <app>_expert_mpiface: the expert program, unmodified, on
#                   MPIv's MPI face (mpiv_run); not an MPI baseline
# Options:
#   -v LIST      comma-separated versions (e.g. -v mpiv,expert-mpich)
#   -r ROUNDS    rounds (default 3); each round runs every version once, in
#                the order of -v, so that a change in the machine's load hits
#                all versions alike
#   -n RANKS     ranks for every version (default 2)
#   -p core      (default) each rank gets cores/RANKS cores: MPIv pins its
#                workers and server inside the rank's share (MPIV_BIND=core),
#                Hydra and Open MPI bind each rank to such a share
#   -p none      no pinning for any version
#   -m ARGS      extra arguments for mpiv and the twins only (e.g. '--chunk 32')
#   -e ARGS      extra arguments for the expert versions only (e.g. '--poll 8')
#   -t THREADS   pthreads per rank of the twins (default: the worker count
#                MPIv picks, cores per rank minus one, at least 1)
#   -T SECONDS   time limit of each run (default 600)
#   -b DIR       build directory (default: build, next to apps/)
#   -h           this text
# The ratio is version / best MPI (the best median of the versions on MPICH
# and Open MPI):
# above 1, faster than the best MPI run. Each line of a round shows the
# value that version printed; a run that fails or does not validate stops
# the script. Exit status: 0 if every run validated, 1 otherwise, 2 on bad
# usage.
set -u -o pipefail

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }
die_usage() { echo "compare.sh: $*" >&2; echo "Try 'apps/compare.sh -h'." >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
build="$(dirname "$here")/build"
ranks=2 rounds=3 pin=core threads="" limit=600
versions="mpiv,expert-mpich,expert-openmpi,twin-mpich,twin-openmpi,expert-mpiface"
explicit=0
margs="" eargs=""
while getopts "v:r:n:p:m:e:t:T:b:h" opt; do
    case "$opt" in
    v) versions=$OPTARG; explicit=1 ;;
    r) rounds=$OPTARG ;;
    n) ranks=$OPTARG ;;
    p) pin=$OPTARG ;;
    m) margs=$OPTARG ;;
    e) eargs=$OPTARG ;;
    t) threads=$OPTARG ;;
    T) limit=$OPTARG ;;
    b) build=$OPTARG ;;
    h) usage; exit 0 ;;
    *) echo "Try 'apps/compare.sh -h'." >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || die_usage "no application given (bfs, uts or stencil)"
app=$1
shift
case "$app" in
bfs) metric=harmonic_mean_TEPS ;;
stencil) metric=cell_updates_per_s ;;
uts) metric=nodes_per_s ;;
*) die_usage "unknown application '$app' (bfs, uts or stencil)" ;;
esac
case "$pin" in core | none) ;; *) die_usage "-p $pin: expected core or none" ;; esac
for o in "n $ranks" "r $rounds" "T $limit"; do
    case "${o#* }" in '' | *[!0-9]* | 0) die_usage "-${o%% *} ${o#* }: expected a positive integer" ;; esac
done
if [ -n "$threads" ]; then
    case "$threads" in *[!0-9]* | 0) die_usage "-t $threads: expected a positive integer" ;; esac
fi
IFS=, read -r -a vlist <<<"$versions"
[ ${#vlist[@]} -ge 1 ] || die_usage "-v: no version given"
for v in "${vlist[@]}"; do
    case "$v" in mpiv | expert-mpich | expert-openmpi | twin-mpich | twin-openmpi | expert-mpiface) ;;
    *) die_usage "-v: unknown version '$v' (mpiv, expert-mpich, expert-openmpi, twin-mpich, twin-openmpi, expert-mpiface)" ;;
    esac
done

cores=$(nproc)
share=$((cores / ranks))
[ "$share" -ge 1 ] || share=1
if [ -z "$threads" ]; then
    threads=$((share - 1))
    [ "$threads" -ge 1 ] || threads=1
fi
mpiexec=$(command -v mpiexec.mpich || command -v mpiexec.hydra || true)
ompirun=$(command -v mpirun.openmpi || true)
dir="$build/apps/$app"

# The command line of version $1, in the array cmd (empty: not available,
# with the reason in why).
command_of() {
    cmd=() why=""
    local ver=$1 bin launcher=() extra=""
    shift
    case "$ver" in
    mpiv) bin="$dir/$app" ;;
    expert-mpich) bin="$dir/${app}_expert" ;;
    expert-openmpi) bin="$dir/${app}_expert_openmpi" ;;
    twin-mpich) bin="$dir/${app}_mpi" ;;
    twin-openmpi) bin="$dir/${app}_mpi_openmpi" ;;
    expert-mpiface) bin="$build/apps/${app}_expert_mpiface" ;;
    esac
    [ -x "$bin" ] || { why="$bin not built (that MPI missing at configure time?)"; return; }
    case "$ver" in
    mpiv | expert-mpiface)
        [ -x "$build/tools/mpiv_run" ] || { why="$build/tools/mpiv_run not built"; return; }
        launcher=(env MPIV_BIND="$pin" "$build/tools/mpiv_run" -n "$ranks") ;;
    *-mpich)
        [ -n "$mpiexec" ] || { why="no mpiexec.mpich"; return; }
        local bind=none
        if [ "$pin" = core ] && [ "$ranks" -le "$cores" ]; then bind="core:$share"; fi
        launcher=("$mpiexec" -n "$ranks" -bind-to "$bind") ;;
    *-openmpi)
        [ -n "$ompirun" ] || { why="no mpirun.openmpi"; return; }
        launcher=("$ompirun" -n "$ranks")
        [ "$(id -u)" != 0 ] || launcher+=(--allow-run-as-root)
        if [ "$pin" = core ] && [ "$ranks" -le "$cores" ]; then
            if [ "$share" = 1 ]; then launcher+=(--map-by core --bind-to core)
            else launcher+=(--map-by "slot:PE=$share" --bind-to core); fi
        else
            launcher+=(--oversubscribe --bind-to none)
        fi ;;
    esac
    case "$ver" in
    expert-*) extra=$eargs ;;
    mpiv) extra=$margs ;;
    twin-*) extra="$margs --threads $threads" ;;
    esac
    # shellcheck disable=SC2206 # the extra arguments are split on purpose
    cmd=(timeout "$limit" "${launcher[@]}" "$bin" "$@" $extra)
}

run_list=()
for v in "${vlist[@]}"; do
    command_of "$v" "$@"
    if [ ${#cmd[@]} -eq 0 ]; then
        if [ $explicit = 1 ]; then echo "compare.sh: $v: $why" >&2; exit 1; fi
        echo "compare.sh: skipping $v: $why" >&2
        continue
    fi
    run_list+=("$v")
done
[ ${#run_list[@]} -ge 1 ] || { echo "compare.sh: no version to run" >&2; exit 1; }

echo "machine: $(uname -n), $cores cores ($(sed -n 's/^model name\t*: //p' /proc/cpuinfo | head -n 1)); $(date -u '+%Y-%m-%d %H:%M:%S UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$app, $ranks ranks, pinning $pin, $rounds rounds, metric $metric; args: $*"
for v in "${run_list[@]}"; do
    command_of "$v" "$@"
    echo "  $v: ${cmd[*]:2}"
done

# The MPI versions the ratios are taken against: MPICH's and Open MPI's.
is_baseline() { case "$1" in *-mpich | *-openmpi) return 0 ;; *) return 1 ;; esac; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
declare -A values
declare -a round_best round_mpiv
for ((r = 1; r <= rounds; r++)); do
    best=""
    for v in "${run_list[@]}"; do
        command_of "$v" "$@"
        if ! "${cmd[@]}" >"$out" 2>&1; then
            cat "$out"
            echo "compare.sh: round $r, $v failed (exit status above; time limit -T $limit s)" >&2
            exit 1
        fi
        if ! grep -q '^result: PASSED' "$out"; then
            cat "$out"
            echo "compare.sh: round $r, $v did not validate" >&2
            exit 1
        fi
        value=$(sed -n "s/^$metric: *//p" "$out" | tail -n 1)
        [ -n "$value" ] || { cat "$out"; echo "compare.sh: round $r, $v printed no $metric" >&2; exit 1; }
        printf 'round %d  %-15s %s %s  (%s)\n' "$r" "$v" "$metric" "$value" "$(grep -m1 '^time' "$out")"
        values[$v]="${values[$v]:-} $value"
        if is_baseline "$v"; then
            best=$(awk -v a="${best:-0}" -v b="$value" 'BEGIN { print (b > a ? b : a) }')
        elif [ "$v" = mpiv ]; then
            round_mpiv[r]=$value
        fi
    done
    round_best[r]=$best
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%H:%M:%S UTC')"

# Medians, and the best MPI median.
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
best_mpi="" best_v=""
for v in "${run_list[@]}"; do
    is_baseline "$v" || continue
    m=$(echo "${values[$v]}" | median)
    if [ -z "$best_mpi" ] || awk -v a="$m" -v b="$best_mpi" 'BEGIN { exit !(a > b) }'; then
        best_mpi=$m best_v=$v
    fi
done
echo
echo "summary: $app $*, $ranks ranks, pinning $pin; $metric over $rounds rounds"
printf '%-15s %11s %11s %11s  %s\n' version min median max "median / best MPI median"
for v in "${run_list[@]}"; do
    sorted=$(echo "${values[$v]}" | tr ' ' '\n' | sed '/^$/d' | sort -g)
    m=$(echo "${values[$v]}" | median)
    if [ -n "$best_mpi" ]; then
        ratio=$(awk -v a="$m" -v b="$best_mpi" 'BEGIN { printf "%.3g", a / b }')
    else
        ratio="-"
    fi
    printf '%-15s %11.4g %11.4g %11.4g  %s\n' "$v" "$(echo "$sorted" | head -n 1)" "$m" "$(echo "$sorted" | tail -n 1)" "$ratio"
done
if [ -n "$best_mpi" ]; then
    echo "best MPI: $best_v (median $best_mpi)"
    if [ -n "${values[mpiv]:-}" ]; then
        ratios=""
        for ((r = 1; r <= rounds; r++)); do
            ratios="$ratios $(awk -v a="${round_mpiv[r]}" -v b="${round_best[r]}" 'BEGIN { printf "%.3g", a / b }')"
        done
        echo "MPIv / best MPI run of the same round:$ratios"
    fi
fi
