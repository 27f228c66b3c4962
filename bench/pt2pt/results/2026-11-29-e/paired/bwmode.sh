#!/bin/bash
# bwmode.sh ROUNDS SIZE variants: window bandwidth at one size, variants in turn
n=$1 m=$2; shift 2
. "$(dirname "$0")/phase.sh"
for i in $(seq 1 $n); do
  calm 60
  line="round $i probe $p |"
  for v in "$@"; do
    IFS='|' read -r name b envs <<<"$v"
    r=$(env $envs MPIV_BIND=core $b/tools/mpiv_run -n 2 --timeout 60 $b/bench/pt2pt/pt2pt_bandwidth -m $m:$m -T 0.3 2>&1 | awk '/^ *[0-9]+ +[0-9.]+/{printf "%.0f", $2}')
    line="$line $name=$r"
  done
  echo "$line | after $(probe)"
done
