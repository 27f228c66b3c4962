#!/bin/bash
# rate.sh ROUNDS variants...: anchor msg/s of pt2pt_mt_msgrate -p 1, variants in turn
n=$1; shift
. "$(dirname "$0")/phase.sh"
for i in $(seq 1 $n); do
  calm 60
  line="round $i probe $p |"
  for v in "$@"; do
    IFS='|' read -r name b envs <<<"$v"
    r=$(env $envs MPIV_BIND=core $b/tools/mpiv_run -n 2 --timeout 60 $b/bench/pt2pt/pt2pt_mt_msgrate -p 1 2>&1 | awk '$1=="anchor"{print $4}')
    line="$line $name=$r"
  done
  echo "$line | after $(probe)"
done
