#!/bin/bash
# fine.sh: one-way latency at sizes between the powers of two (64-512 B),
# MPIv (build/) and Open MPI in turn at each size, three rounds, with a
# phase probe per round (fine-256.txt).
B=/work/main/build
for r in 1 2 3; do
 p=$($B/bench/pt2pt/pt2pt_ring_copy 1024 56 100000 | sed -n 's/.*: \([0-9.]*\) ns a record.*/\1/p')
 v=""; o=""
 for s in 64 128 160 192 224 256 320 384 448 512; do
  v="$v $s=$(MPIV_BIND=core $B/tools/mpiv_run -n 2 $B/bench/pt2pt/pt2pt_latency -m $s:$s -T 0.2 2>&1 | awk '/^ *[0-9]+ +[0-9.]+/{print $2}')"
  o="$o $s=$(timeout 60 mpirun.openmpi --allow-run-as-root -n 2 --bind-to core --map-by core $B/bench/pt2pt/pt2pt_latency_openmpi -m $s:$s -T 0.2 2>&1 | awk '/^ *[0-9]+ +[0-9.]+/{print $2}')"
 done
 echo "probe $p"; echo "mpiv $v"; echo "ompi $o"
done
