#!/usr/bin/env bash
# bench/pt2pt/results/2026-11-29-c/paired/counts.sh BUILD [SIZES]: instructions per call of the send path, counted
# by callgrind on rank 0 (both ranks run under it), one run of each:
#   latency:  pt2pt_latency --threads pthread -m S:S -i 12000 for each S of
#             SIZES (default 8)
#   rate:     pt2pt_mt_msgrate --threads pthread -p 1 -i 1200 (anchor and
#             the 1-pair row, windows of 64 x 8 B)
# Inclusive counts divided by the calls callgrind counted, so start-up is
# not divided in.
# Prints inclusive instructions per call of mpiv_send / mpiv_isend and of the
# shm layer under them (shm_send_inline). (Whole-process counts are left
# out: under valgrind they include the waiting side's polls, which vary
# from run to run.)
set -eu
b=$(cd "$1" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
vg() { MPIV_BIND=none "$b/tools/mpiv_run" -n 2 --timeout 900 valgrind --tool=callgrind \
        --callgrind-out-file="$w/$1.%q{MPIV_RANK}" "${@:2}" >"$w/$1.log" 2>&1; }
percall() { # FILE FUNCTION: inclusive Ir / calls, summed over its callers
    callgrind_annotate --inclusive=yes --tree=caller --threshold=100 "$1" 2>/dev/null |
        awk -v fn="$2" '{ l = $0; gsub(",", "", l) }
            l ~ ("< [^ ]*:[^ ]* \\([0-9]+x\\)") { split(l, f, " "); match(l, /\([0-9]+x\)/)
                ir[n] = f[1]; calls[n++] = substr(l, RSTART + 1, RLENGTH - 3); next }
            l ~ ("[*]  [^ ]*:" fn " ") { for (i = 0; i < n; i++) { s += ir[i]; c += calls[i] }
                printf "%.0f", s / c; exit }
            l !~ /</ { n = 0 }'
}
for sz in ${2:-8}; do
    vg "lat$sz" "$b/bench/pt2pt/pt2pt_latency" --threads pthread -m "$sz:$sz" -i 12000
    echo "latency $sz B: mpiv_send $(percall "$w/lat$sz.0" mpiv_send), shm_send_inline $(percall "$w/lat$sz.0" shm_send_inline) instructions a call"
done
vg r1200 "$b/bench/pt2pt/pt2pt_mt_msgrate" --threads pthread -p 1 -i 1200
echo "rate 8 B: mpiv_isend $(percall "$w/r1200.0" mpiv_isend), shm_send_inline $(percall "$w/r1200.0" shm_send_inline) instructions a call"
