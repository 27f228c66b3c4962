#!/bin/bash
# rounds of: probe, MPIv ULT bw 1:64 + lat 0:8K, probe, MPICH same, probe, Open MPI same, probe
B=build/bench/pt2pt; M=build
pr() { $B/pt2pt_ring_copy 1024 56 100000 2>/dev/null | sed -n 's/.*: \([0-9.]*\) ns a record.*/\1/p'; }
pick() { awk '$1==8||$1==64||$1==1024||$1==8192{printf "%s=%s ",$1,$2}'; }
for i in $(seq 1 ${1:-10}); do
  p0=$(pr)
  a=$(MPIV_BIND=core $M/tools/mpiv_run -n 2 --timeout 150 $B/pt2pt_bandwidth --threads ult -m 8:64 -T 0.1 | pick)
  a2=$(MPIV_BIND=core $M/tools/mpiv_run -n 2 --timeout 150 $B/pt2pt_latency --threads ult -m 8:8K -T 0.05 | pick)
  p1=$(pr)
  m=$(timeout 60 mpiexec.mpich -n 2 -bind-to core $B/pt2pt_bandwidth_mpich -m 8:64 -T 0.1 | pick)
  m2=$(timeout 60 mpiexec.mpich -n 2 -bind-to core $B/pt2pt_latency_mpich -m 8:8K -T 0.05 | pick)
  p2=$(pr)
  o=$(timeout 60 mpirun.openmpi --allow-run-as-root -n 2 --bind-to core --map-by core $B/pt2pt_bandwidth_openmpi -m 8:64 -T 0.1 | pick)
  o2=$(timeout 60 mpirun.openmpi --allow-run-as-root -n 2 --bind-to core --map-by core $B/pt2pt_latency_openmpi -m 8:8K -T 0.05 | pick)
  p3=$(pr)
  echo "$p0 | mpiv bw $a lat $a2 | $p1 | mpich bw $m lat $m2 | $p2 | ompi bw $o lat $o2 | $p3"
done
