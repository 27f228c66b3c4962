#!/bin/bash
# mt3.sh ROUNDS BENCH PAIRS BUILDS...: --threads pthread, builds in turn, probe before each round
r=$1; bench=$2; pairs=$3; shift 3
. /work/main/bench/pt2pt/results/2026-11-29-e/paired/phase.sh
for i in $(seq 1 $r); do
  calm 3
  line="round $i probe $p"
  for b in "$@"; do
    out=$(MPIV_BIND=core $b/tools/mpiv_run -n 2 --timeout 120 $b/bench/pt2pt/pt2pt_$bench --threads pthread -p $pairs -t 5 2>&1 | grep -v "^#" | grep -v anchor | awk '{printf "%s:%.2fM ", $1, $(NF)/1e6}')
    line="$line | $(basename $b) $out"
  done
  echo "$line"
done
