#!/usr/bin/env bash
# phased.sh — alternating runs of any benchmark commands, each run between
# two phase probes, with medians per phase: how docs/perf/pt2pt.md's
# before/after numbers are taken.
#
# Usage: bench/pt2pt/phased.sh [--rounds N] [--build DIR] CMDFILE
#   CMDFILE   one run per line: LABEL, a tab, then a shell command that
#             prints "size value" lines (every pt2pt benchmark does); lines
#             starting with # are skipped. Each round runs every line once,
#             in the file's order.
#   --rounds  rounds (default 10)
#   --build   the build tree holding bench/pt2pt/pt2pt_ring_copy (default
#             build)
# Why: this machine switches between a fast and a slow phase, often within
# a run (docs/perf/pt2pt.md, "Two phases of this machine"), so a figure
# means something only next to the phase it was taken in, and probes on
# both sides of a run are what says it stayed in one. Before and after every run, pt2pt_ring_copy 1024 56
# 100000 times the machine; a run counts as fast (F) when both probes read
# under 150 ns, slow (S) when both read over 200, and mixed (X, left out of
# the medians) otherwise or when a probe fails. Prints every run as "label
# phase size value round", then the medians per phase and size by label.
set -u -o pipefail
rounds=10 build=build
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=${2:-}; shift 2 ;;
        --build) build=${2:-}; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
[ $# -eq 1 ] || { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
cmds=$1
case "$rounds" in ''|*[!0-9]*|0) echo "phased.sh: --rounds takes a count of 1 or more" >&2; exit 2 ;; esac
[ -r "$cmds" ] || { echo "phased.sh: cannot read $cmds" >&2; exit 2; }
probe_bin=$build/bench/pt2pt/pt2pt_ring_copy
[ -x "$probe_bin" ] || { echo "phased.sh: no $probe_bin (build the pt2pt benchmarks first)" >&2; exit 2; }
grep -q $'\t' "$cmds" || { echo "phased.sh: $cmds has no LABEL<tab>COMMAND line" >&2; exit 2; }

# ns per record, as run.sh's probe reads it; empty if the probe failed
probe() { "$probe_bin" 1024 56 100000 2>/dev/null | sed -n 's/.*: \([0-9.]*\) ns a record.*/\1/p'; }
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for ((i = 1; i <= rounds; i++)); do
    while IFS=$'\t' read -r label cmd || [ -n "$label" ]; do
        case "$label" in ''|'#'*) continue ;; esac
        a=$(probe)
        # stdin from /dev/null: mpirun reads stdin, and would eat the file
        out=$(bash -c "$cmd" 2>&1 </dev/null)
        b=$(probe)
        # a probe that printed nothing counts as mixed, not as fast
        ph=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "" || b == "") print "X";
                                               else if (a < 150 && b < 150) print "F";
                                               else if (a > 200 && b > 200) print "S"; else print "X" }')
        echo "$out" | awk -v l="$label" -v p="$ph" -v i="$i" \
            '$1 + 0 == $1 && $2 + 0 == $2 && NF >= 2 { print l, p, $1, $2, i }' | tee -a "$raw"
    done <"$cmds"
done
echo
awk '
function median(key,   n, v, i, j, t) {
    n = split(vals[key], v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
$2 != "X" { key = $2 SUBSEP $3 SUBSEP $1; vals[key] = vals[key] " " $4; cnt[key]++
            if (!($1 in seen)) { seen[$1] = 1; labels[++nl] = $1 }
            if (!(($2, $3) in hasz)) { hasz[$2, $3] = 1; sizes[$2] = sizes[$2] " " $3 } }
END {
    for (p = 1; p <= 2; p++) {
        ph = p == 1 ? "F" : "S"
        if (!(ph in sizes)) continue
        ns = split(sizes[ph], sz, " ")
        for (i = 2; i <= ns; i++) for (j = i; j > 1 && sz[j - 1] + 0 > sz[j] + 0; j--) { t = sz[j]; sz[j] = sz[j - 1]; sz[j - 1] = t }
        printf "phase %s (%s): median (runs)\n%10s", ph, ph == "F" ? "fast" : "slow", "size"
        for (l = 1; l <= nl; l++) printf " %20s", labels[l]
        printf "\n"
        for (i = 1; i <= ns; i++) {
            printf "%10s", sz[i]
            for (l = 1; l <= nl; l++) {
                key = ph SUBSEP sz[i] SUBSEP labels[l]
                if (key in cnt) printf " %14.6g (%3d)", median(key), cnt[key]; else printf " %20s", "-"
            }
            printf "\n"
        }
    }
}' "$raw"
