#!/bin/bash
# mt-alt.sh ROUNDS BENCH PAIRS: before (/tmp/build-new) and after (/tmp/build-new2) in turn, --threads pthread
for i in $(seq 1 $1); do
  line="round $i"
  for b in /tmp/build-new /tmp/build-new2; do
    out=$(MPIV_BIND=core $b/tools/mpiv_run -n 2 --timeout 120 $b/bench/pt2pt/pt2pt_$2 --threads pthread -p $3 -t 5 2>&1 | grep -v "^#" | awk '{printf "%s:%s ", $1, $(NF)}')
    line="$line | $(basename $b) $out"
  done
  echo "$line"
done
