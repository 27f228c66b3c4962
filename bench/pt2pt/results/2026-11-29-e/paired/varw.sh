#!/bin/bash
# varw.sh ROUNDS SIZES BENCH VARIANT...: one-way latency or window
# bandwidth of MPIv builds and settings, one after another in each round.
# VARIANT is "name|build dir|ENV=VAL ENV=VAL" (ENV may be empty).
# Before each round, waits up to MAXWAIT probes 10 s apart (default 120;
# 0: none) for the phase probe to read under 200 ns; prints the probe
# before and after each round. TH=pthread runs from a pthread; XT passes
# more options (XT="-T 0.2").
n=$1 m=$2 bench=$3; shift 3
. "$(dirname "$0")/phase.sh"
for i in $(seq 1 "$n"); do
  calm "${MAXWAIT:-120}"
  echo "round $i probe $p"
  for v in "$@"; do
    IFS='|' read -r name b envs <<<"$v"
    out=$(env $envs "$b/tools/mpiv_run" -n 2 --timeout 120 "$b/bench/pt2pt/pt2pt_$bench" --threads "${TH:-ult}" -m "$m" ${XT:-} 2>&1 | awk '/^ *[0-9]+ +[0-9.]+/ {printf "%s=%s ", $1, $2}')
    echo "$i $name $out"
  done
  echo "round $i probe-after $(probe)"
done
