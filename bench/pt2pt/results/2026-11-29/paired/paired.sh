#!/bin/bash
# The loop that took latency-*.txt (2026-11-29, 02:13-02:17 UTC, 0c342de),
# run from the repository's root as `SZ=1M paired.sh 25`. Each row: a phase
# probe, MPIv (rings), MPIv with MPIV_SHM_CMA=on, MPICH, Open MPI, a probe;
# one `pt2pt_latency -m SZ:SZ -T 0.1` each. The number after MPIv's time
# (the "ring" column) is rank 0's line latency to rank 1 in TSC ticks
# (shm_copy.h's running mean; 259 ticks = 100 ns here), printed by a
# temporary line in shm_finalize under MPIV_EXP_LAT that is not in the
# tree; without it the column is empty.
B=build; M=build/bench/pt2pt; S=${SZ:-1M}
pr() { $B/bench/pt2pt/pt2pt_ring_copy 1024 56 100000 2>/dev/null | sed -n 's/.*: \([0-9.]*\) ns a record.*/\1/p'; }
for i in $(seq 1 ${1:-20}); do
  p=$(pr)
  a=$(MPIV_EXP_LAT=1 MPIV_BIND=core $B/tools/mpiv_run -n 2 $B/bench/pt2pt/pt2pt_latency -m $S:$S -T 0.1 2>&1 | awk '/^[0-9]/{v=$2} /EXP rank 0/{l=$7} END{print v, l}')
  c=$(MPIV_SHM_CMA=on MPIV_BIND=core $B/tools/mpiv_run -n 2 $B/bench/pt2pt/pt2pt_latency -m $S:$S -T 0.1 2>&1 | awk '/^[0-9]/{v=$2} END{print v}')
  m=$(timeout 60 mpiexec.mpich -n 2 -bind-to core $M/pt2pt_latency_mpich -m $S:$S -T 0.1 | awk '/^[0-9]/{v=$2} END{print v}')
  o=$(timeout 60 mpirun.openmpi --allow-run-as-root -n 2 --bind-to core --map-by core $M/pt2pt_latency_openmpi -m $S:$S -T 0.1 | awk '/^[0-9]/{v=$2} END{print v}')
  q=$(pr)
  echo "probe $p ring $a cma $c mpich $m ompi $o probe $q"
done
