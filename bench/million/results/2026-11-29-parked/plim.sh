#!/bin/bash
# plim.sh ROUNDS BENCH PAIRS LIMITS...: one build whose p2p.c reads the pollers limit from PLIM (a local patch, not kept)
r=$1; bench=$2; pairs=$3; shift 3
. /work/main/bench/pt2pt/results/2026-11-29-e/paired/phase.sh
for i in $(seq 1 $r); do
  calm 3
  line="round $i probe $p"
  for l in "$@"; do
    out=$(PLIM=$l MPIV_BIND=core /work/main/build/tools/mpiv_run -n 2 --timeout 120 /work/main/build/bench/pt2pt/pt2pt_$bench --threads pthread -p $pairs -t 5 2>&1 | grep -v "^#" | awk '{printf "%s:%.2fM ", $1, $(NF)/1e6}')
    line="$line | L$l $out"
  done
  echo "$line"
done
