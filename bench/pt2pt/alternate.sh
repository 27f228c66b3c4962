#!/usr/bin/env bash
# alternate.sh — latency and bandwidth of two MPIv builds (and of the second
# with a setting changed) in alternating runs, with medians and paired
# ratios: the before/after numbers of docs/perf/pt2pt.md.
#
# Usage: bench/pt2pt/alternate.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [ENV=VAL ...]
#   BEFORE_BUILD, AFTER_BUILD  build trees holding tools/mpiv_run and
#                              bench/pt2pt/pt2pt_{latency,bandwidth}
#   ROUNDS                     rounds of before / after / after+ENV (default 3)
#   ENV=VAL                    settings for the third variant (default
#                              MPIV_SERVER=thread)
# Each round runs, for --threads ult and pthread, latency and bandwidth over
# 0 B - 4 MiB with 2 ranks under each build's own mpiv_run. Prints one table
# per test: median of each variant and the median of the paired after/before
# ratios.
set -u -o pipefail
[ $# -ge 2 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
before=$1 after=$2 rounds=${3:-3}
shift 2; [ $# -gt 0 ] && shift
envs=("$@"); [ ${#envs[@]} -gt 0 ] || envs=(MPIV_SERVER=thread)
for b in "$before" "$after"; do
    [ -x "$b/tools/mpiv_run" ] && [ -x "$b/bench/pt2pt/pt2pt_latency" ] ||
        { echo "alternate.sh: $b has no tools/mpiv_run or bench/pt2pt/pt2pt_latency" >&2; exit 2; }
done
case "$rounds" in ''|*[!0-9]*) echo "alternate.sh: ROUNDS is a count" >&2; exit 2 ;; esac
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
one() { # variant build bench threads [env...]
    local v=$1 b=$2 bench=$3 t=$4; shift 4
    env "$@" "$b/tools/mpiv_run" -n 2 --timeout 300 "$b/bench/pt2pt/pt2pt_$bench" --threads "$t" -m 0:4M 2>&1 |
        awk -v v="$v" -v bench="$bench" -v t="$t" '/^ *[0-9]+ +[0-9.]+/ { print bench, t, v, $1, $2 }'
}
for ((r = 1; r <= rounds; r++)); do
    for bench in latency bandwidth; do
        for t in ult pthread; do
            one before "$before" $bench $t >>"$raw"
            one after "$after" $bench $t >>"$raw"
            one after+env "$after" $bench $t "${envs[@]}" >>"$raw"
        done
    done
    echo "alternate.sh: round $r of $rounds done" >&2
done
python3 - "$raw" "${envs[*]}" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    bench, t, v, size, val = line.split()
    d[(bench, t, v, int(size))].append(float(val))
for bench in ("latency", "bandwidth"):
    for t in ("ult", "pthread"):
        unit = "us" if bench == "latency" else "MB/s"
        print(f"\n{bench} ({unit}), --threads {t}; after+env: {sys.argv[2]}")
        print(f"{'size':>9} {'before':>10} {'after':>10} {'after+env':>10} {'after/before':>13}")
        for size in sorted({k[3] for k in d if k[0] == bench and k[1] == t}):
            m = [d.get((bench, t, v, size), []) for v in ("before", "after", "after+env")]
            med = [f"{statistics.median(x):10.2f}" if x else f"{'-':>10}" for x in m]
            pr = [a / b for a, b in zip(m[1], m[0]) if b]
            print(f"{size:>9} {' '.join(med)} {statistics.median(pr):13.3f}" if pr else f"{size:>9} {' '.join(med)}")
PY
