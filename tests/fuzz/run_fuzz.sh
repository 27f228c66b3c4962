#!/usr/bin/env bash
# The CTest run of the protocol fuzzer (fuzz_decode): RUNS inputs, starting
# from the corpus in the tree, with a fixed seed so that a failure
# reproduces. New inputs go into WORK/new, never into the tree; a crashing
# input is saved as WORK/crash-* and libFuzzer prints how to rerun it.
#   run_fuzz.sh FUZZER CORPUS WORK [RUNS]
# FUZZ_SEED and FUZZ_MAX_TIME (seconds, default 50: a cap for loaded
# machines, where fewer than RUNS inputs then run and the last line says so)
# override the defaults.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 FUZZER CORPUS WORK [RUNS]" >&2
  exit 2
fi
fuzzer=$1 corpus=$2 work=$3 runs=${4:-50000}
[ -x "$fuzzer" ] || { echo "run_fuzz.sh: $fuzzer is not built" >&2; exit 2; }
[ -d "$corpus" ] || { echo "run_fuzz.sh: no corpus at $corpus" >&2; exit 2; }
rm -rf "$work"
mkdir -p "$work/new"
exec "$fuzzer" -runs="$runs" -seed="${FUZZ_SEED:-1}" -max_total_time="${FUZZ_MAX_TIME:-50}" \
  -artifact_prefix="$work/" -print_final_stats=1 "$work/new" "$corpus"
