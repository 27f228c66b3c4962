#!/bin/bash
# pth-alt.sh ROUNDS N: million N recvfirst,ults pthread, before (/tmp/build-new) and after (/tmp/build-new2) in turn; rank 1's phase seconds
for i in $(seq 1 $1); do
  line="round $i"
  for b in /tmp/build-new /tmp/build-new2; do
    out=$($b/tools/mpiv_run -n 2 --timeout 300 $b/bench/million/million $2 recvfirst,ults pthread 2>&1 | awk '$1=="rank" && $2==1 && ($3=="recvfirst" || $3=="ults") {printf "%s %s s ", $3, $6}')
    line="$line | $(basename $b) $out"
  done
  echo "$line"
done
