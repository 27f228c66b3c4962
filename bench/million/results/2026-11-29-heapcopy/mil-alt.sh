#!/bin/bash
# mil-alt.sh ROUNDS N ORDER WORKERS: rank 1's ns/msg and RSS, before and after in turn
for i in $(seq 1 $1); do
  line="round $i"
  for b in /tmp/build-head /tmp/build-new; do
    out=$(MPIV_WORKERS=$4 $b/tools/mpiv_run -n 2 --timeout 300 $b/bench/million/million $2 $3,pingpong 2>&1)
    u=$(echo "$out" | awk -v o=$3 '$1=="rank" && $2==1 && $3==o {print $8}')
    rss=$(echo "$out" | awk -v o=$3 '$1=="rank" && $2==1 && $3==o {print $12}')
    pp=$(echo "$out" | awk '$1=="rank" && $2==1 && $3=="pingpong" {print $8}')
    line="$line | $(basename $b) $u ns (pp $pp) rss $rss"
  done
  echo "$line"
done
