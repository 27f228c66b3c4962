#!/usr/bin/env bash
# profile.sh — instructions (and estimated cycles) of one 8-byte round trip,
# by component, MPIv against MPICH, counted by valgrind's callgrind.
#
# Timings on a shared 2-core VM without hardware counters are noise at the
# scale of a few hundred nanoseconds; instruction counts are not. Each
# implementation runs the latency benchmark at 8 B twice, with N1 and N2
# round trips, under callgrind (both ranks); rank 0's counts of the first
# run are subtracted from the second's and divided by the extra round trips,
# so start-up, warm-up and finalize cancel out and what is left is the cost
# of one round trip on rank 0: its send, its receive, and the polls its
# receive made while the echo was on its way.
#
# The polls are an artefact of the measurement as much as a cost: under
# valgrind both ranks run ~50x slower, so the waiting side polls more often
# per round trip than it would natively. They are reported on their own
# line ("waiting"), and the other lines are what a round trip costs
# whatever the wait.
#
# Usage: bench/pt2pt/profile.sh [--build DIR] [--n1 N] [--n2 N] [--out FILE]
#   --build DIR  build tree with bench/pt2pt and tools/mpiv_run (default build)
#   --n1, --n2   round trips of the two runs (default 2000 and 12000)
#   --out FILE   also write the table (Markdown) to FILE
# Needs valgrind (apt-get install valgrind; not among the CI packages) and
# MPICH (mpiexec.mpich, scripts/deps.sh).
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build"
n1=2000
n2=12000
out=""
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift ;;
    --n1) n1=$2; shift ;;
    --n2) n2=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "profile.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$n1$n2" in *[!0-9]*) echo "profile.sh: --n1 and --n2 take round-trip counts" >&2; exit 2 ;; esac
[ "$n2" -gt "$n1" ] || { echo "profile.sh: --n2 must be larger than --n1" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "profile.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
bin="$build/bench/pt2pt"
run="$build/tools/mpiv_run"
[ -x "$bin/pt2pt_latency" ] && [ -x "$run" ] ||
    { echo "profile.sh: no $bin/pt2pt_latency or $run: build first (cmake --build $build)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vg=(valgrind --tool=callgrind --cache-sim=yes)

# the latency benchmark warms up with a tenth of its rounds: what rank 0 does
# in all is 1.1 N round trips
trips() { echo $(( $1 + $1 / 10 )); }

# profile IMPL N: leaves $work/IMPL.N.out (rank 0's callgrind file)
profile() {
    local impl=$1 n=$2 f="$work/$1.$2"
    case $impl in
    mpiv-ult|mpiv-pthread)
        MPIV_BIND=none "$run" -n 2 --timeout 900 "${vg[@]}" --callgrind-out-file="$f.%q{MPIV_RANK}" \
            "$bin/pt2pt_latency" --threads "${impl#mpiv-}" -m 8:8 -i "$n" >"$f.log" 2>&1 ;;
    mpich)
        mpiexec.mpich -n 2 "${vg[@]}" --callgrind-out-file="$f.%q{PMI_RANK}" \
            "$bin/pt2pt_latency_mpich" -m 8:8 -i "$n" >"$f.log" 2>&1 ;;
    esac || { echo "profile.sh: $impl with $n round trips failed:" >&2; tail -5 "$f.log" >&2; exit 1; }
    cp "$f.0" "$work/$impl.$n.out"
}

# inclusive Ir and estimated cycles of FUNCTION in a callgrind file ("0 0"
# if absent). Cycles: Ir + 10 per L1 miss + 100 per last-level miss, the
# estimate kcachegrind uses.
cost() {
    callgrind_annotate --inclusive=yes --threshold=100 \
        --show=Ir,I1mr,D1mr,D1mw,ILmr,DLmr,DLmw "$1" 2>/dev/null |
        awk -v fn="$2" '
            { line = $0; gsub(",", "", line) }
            line ~ ("[:]" fn " \\[") || ($NF == fn) {
                n = split(line, f, " ")
                ir = f[1]; l1 = f[2] + f[3] + f[4]; ll = f[5] + f[6] + f[7]
                print ir, ir + 10 * l1 + 100 * ll; found = 1; exit }
            END { if (!found) print 0, 0 }'
}
total() {
    callgrind_annotate --show=Ir,I1mr,D1mr,D1mw,ILmr,DLmr,DLmw "$1" 2>/dev/null |
        awk '/PROGRAM TOTALS/ { gsub(",", ""); print $1, $1 + 10 * ($2 + $3 + $4) + 100 * ($5 + $6 + $7); exit }'
}

# per round trip: (second - first) / extra round trips
per_trip() {
    local a b
    read -r -a a <<<"$1"
    read -r -a b <<<"$2"
    local d=$(( $(trips "$n2") - $(trips "$n1") ))
    awk -v i1="${a[0]}" -v c1="${a[1]}" -v i2="${b[0]}" -v c2="${b[1]}" -v d="$d" \
        'BEGIN { printf "%.0f|%.0f", (i2 - i1) / d, (c2 - c1) / d }'
}

row() { # impl label function...
    local impl=$1 label=$2; shift 2
    local s1="0 0" s2="0 0"
    for fn in "$@"; do
        local x y
        x=$(cost "$work/$impl.$n1.out" "$fn"); y=$(cost "$work/$impl.$n2.out" "$fn")
        s1=$(awk -v a="$s1" -v b="$x" 'BEGIN { split(a, p, " "); split(b, q, " "); print p[1] + q[1], p[2] + q[2] }')
        s2=$(awk -v a="$s2" -v b="$y" 'BEGIN { split(a, p, " "); split(b, q, " "); print p[1] + q[1], p[2] + q[2] }')
    done
    local r; r=$(per_trip "$s1" "$s2")
    printf '| %s | %s | %s | %s |\n' "$impl" "$label" "${r%|*}" "${r#*|}"
}

for impl in mpiv-ult mpiv-pthread mpich; do
    for n in "$n1" "$n2"; do
        echo "profile.sh: $impl, $n round trips under callgrind ..." >&2
        profile "$impl" "$n"
    done
done

{
    echo "One 8-byte round trip on rank 0 (callgrind, runs of $n1 and $n2 round trips differenced)."
    echo
    echo "| implementation | component | instructions | est. cycles |"
    echo "|---|---|---|---|"
    for impl in mpiv-ult mpiv-pthread; do
        row "$impl" "send (mpiv_send)" mpiv_send
        # proto_irecv is inlined into mpiv_recv (one file, hidden
        # visibility); the table insert it makes is a call of its own
        row "$impl" "post the receive: its table insert (ht_match_or_insert)" ht_match_or_insert
        row "$impl" "progress: ring poll (shm_poll)" shm_poll
        row "$impl" "progress: an arrival handled in place (proto_on_data)" proto_on_data
        row "$impl" "progress: all (srv_progress)" srv_progress
        row "$impl" "worker thread in all: ULTs, switches, idle polls (worker_main)" worker_main
        row "$impl" "receive in all (mpiv_recv)" mpiv_recv
        s1=$(total "$work/$impl.$n1.out"); s2=$(total "$work/$impl.$n2.out")
        r=$(per_trip "$s1" "$s2")
        printf '| %s | %s | %s | %s |\n' "$impl" "whole process" "${r%|*}" "${r#*|}"
    done
    row mpich "send (MPI_Send)" PMPI_Send
    row mpich "receive in all (MPI_Recv)" PMPI_Recv
    s1=$(total "$work/mpich.$n1.out"); s2=$(total "$work/mpich.$n2.out")
    r=$(per_trip "$s1" "$s2")
    printf '| mpich | whole process | %s | %s |\n' "${r%|*}" "${r#*|}"
} | tee ${out:+"$out"}
