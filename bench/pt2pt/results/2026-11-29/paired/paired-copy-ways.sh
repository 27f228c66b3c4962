#!/bin/bash
# The loop that took latency-8K-copy-ways.txt (2026-11-29, 02:16 UTC,
# 0c342de), run from the repository's root as `paired-copy-ways.sh 12`:
# MPIv's 8 KiB latency with the copy way chosen (auto), fixed whole, fixed
# in pieces (MPIV_SHM_COPY), and MPICH's, one `-T 0.1` run each a row.
B=build; M=build/bench/pt2pt; S=${SZ:-8K}
pr() { $B/bench/pt2pt/pt2pt_ring_copy 1024 56 100000 2>/dev/null | sed -n 's/.*: \([0-9.]*\) ns a record.*/\1/p'; }
run() { env "$@" MPIV_BIND=core $B/tools/mpiv_run -n 2 $B/bench/pt2pt/pt2pt_latency -m $S:$S -T 0.1 2>&1 | awk '/^[0-9]/{v=$2} END{print v}'; }
for i in $(seq 1 ${1:-10}); do
  p=$(pr)
  a=$(run X=1); w=$(run MPIV_SHM_COPY=whole); c=$(run MPIV_SHM_COPY=pieces)
  m=$(timeout 60 mpiexec.mpich -n 2 -bind-to core $M/pt2pt_latency_mpich -m $S:$S -T 0.1 | awk '/^[0-9]/{v=$2} END{print v}')
  q=$(pr)
  echo "probe $p auto $a whole $w pieces $c mpich $m probe $q"
done
