#!/usr/bin/env bash
# alternate.sh — latency and bandwidth of two MPIv builds (and of the second
# with a setting changed) in alternating runs, with medians and paired
# ratios: the before/after numbers of docs/perf/pt2pt.md.
#
# Usage: bench/pt2pt/alternate.sh [OPTIONS] BEFORE_BUILD AFTER_BUILD [ROUNDS] [ENV=VAL ...]
#   BEFORE_BUILD, AFTER_BUILD  build trees holding tools/mpiv_run and
#                              bench/pt2pt/pt2pt_{latency,bandwidth}
#   ROUNDS                     rounds of before / after / after+ENV (default 3)
#   ENV=VAL                    settings for the third variant (default
#                              MPIV_SERVER=thread)
#   --sizes A:B                message sizes (default 0:4M)
#   --bench LIST               latency,bandwidth (default both)
#   --threads LIST             ult,pthread (default both)
#   --split                    one run of 0.1 s a size (-T 0.1), before and
#                              after back to back at each size, first one
#                              then the other by turns: pairs a few seconds
#                              apart instead of a whole sweep apart, for a
#                              machine whose speed changes within a sweep
#   --no-env                   no third variant
# Each round runs, for each of --threads, each of --bench over the sizes
# with 2 ranks under each build's own mpiv_run. Prints one table per test:
# median of each variant and the median of the paired after/before ratios.
set -u -o pipefail
usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
sizes=0:4M benches="latency bandwidth" threads="ult pthread" split=0 third=1
while [ $# -gt 0 ]; do
    case "$1" in
        --sizes) sizes=${2:-}; shift 2 ;;
        --bench) benches=${2//,/ }; shift 2 ;;
        --threads) threads=${2//,/ }; shift 2 ;;
        --split) split=1; shift ;;
        --no-env) third=0; shift ;;
        -h|--help) usage ;;
        --*) echo "alternate.sh: unknown option $1" >&2; usage ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || usage
before=$1 after=$2 rounds=${3:-3}
shift 2; [ $# -gt 0 ] && shift
envs=("$@"); [ ${#envs[@]} -gt 0 ] || envs=(MPIV_SERVER=thread)
for b in "$before" "$after"; do
    [ -x "$b/tools/mpiv_run" ] && [ -x "$b/bench/pt2pt/pt2pt_latency" ] ||
        { echo "alternate.sh: $b has no tools/mpiv_run or bench/pt2pt/pt2pt_latency" >&2; exit 2; }
done
case "$rounds" in ''|*[!0-9]*) echo "alternate.sh: ROUNDS is a count" >&2; exit 2 ;; esac
for x in $benches; do case $x in latency|bandwidth) ;; *) echo "alternate.sh: --bench takes latency,bandwidth" >&2; exit 2 ;; esac; done
for x in $threads; do case $x in ult|pthread) ;; *) echo "alternate.sh: --threads takes ult,pthread" >&2; exit 2 ;; esac; done
case "$sizes" in *:*) ;; *) echo "alternate.sh: --sizes takes A:B" >&2; exit 2 ;; esac
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
one() { # variant build bench threads sizes [env...]
    local v=$1 b=$2 bench=$3 t=$4 m=$5; shift 5
    local more=()
    [ $split = 1 ] && more=(-T 0.1)
    env "$@" "$b/tools/mpiv_run" -n 2 --timeout 300 "$b/bench/pt2pt/pt2pt_$bench" --threads "$t" -m "$m" "${more[@]}" 2>&1 |
        awk -v v="$v" -v bench="$bench" -v t="$t" '/^ *[0-9]+ +[0-9.]+/ { print bench, t, v, $1, $2 }'
}
# the sizes of one sweep, as pt2pt_latency makes them (powers of two, and 0)
sweep() {
    local lo hi
    lo=$(numfmt --from=iec "${sizes%%:*}") && hi=$(numfmt --from=iec "${sizes##*:}") ||
        { echo "alternate.sh: --sizes takes A:B (K, M suffixes)" >&2; exit 2; }
    [ "$lo" = 0 ] && { echo 0; lo=1; }
    for ((z = lo; z <= hi; z *= 2)); do echo $z; done
}
points=$(sweep) || exit 2
for ((r = 1; r <= rounds; r++)); do
    for bench in $benches; do
        for t in $threads; do
            if [ $split = 0 ]; then
                one before "$before" $bench $t "$sizes" >>"$raw"
                one after "$after" $bench $t "$sizes" >>"$raw"
                [ $third = 1 ] && one after+env "$after" $bench $t "$sizes" "${envs[@]}" >>"$raw"
                continue
            fi
            for z in $points; do
                if ((r % 2)); then
                    one before "$before" $bench $t $z:$z >>"$raw"
                    one after "$after" $bench $t $z:$z >>"$raw"
                else
                    one after "$after" $bench $t $z:$z >>"$raw"
                    one before "$before" $bench $t $z:$z >>"$raw"
                fi
                [ $third = 1 ] && one after+env "$after" $bench $t $z:$z "${envs[@]}" >>"$raw"
            done
        done
    done
    echo "alternate.sh: round $r of $rounds done" >&2
done
python3 - "$raw" "$([ $third = 1 ] && echo "${envs[*]}")" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    bench, t, v, size, val = line.split()
    d[(bench, t, v, int(size))].append(float(val))
for bench in ("latency", "bandwidth"):
    for t in ("ult", "pthread"):
        if not any(k[0] == bench and k[1] == t for k in d):
            continue
        unit = "us" if bench == "latency" else "MB/s"
        variants = ("before", "after", "after+env") if sys.argv[2] else ("before", "after")
        print(f"\n{bench} ({unit}), --threads {t}" + (f"; after+env: {sys.argv[2]}" if sys.argv[2] else ""))
        print(f"{'size':>9} " + " ".join(f"{v:>10}" for v in variants) + f" {'after/before':>13}")
        for size in sorted({k[3] for k in d if k[0] == bench and k[1] == t}):
            m = [d.get((bench, t, v, size), []) for v in variants]
            med = [f"{statistics.median(x):10.2f}" if x else f"{'-':>10}" for x in m]
            pr = [a / b for a, b in zip(m[1], m[0]) if b]
            print(f"{size:>9} {' '.join(med)} {statistics.median(pr):13.3f}" if pr else f"{size:>9} {' '.join(med)}")
PY
