#!/usr/bin/env bash
# far-vs-mpi.sh BUILD [ROUNDS]: rounds of one-way latency 64 KiB-1 MiB, MPIv
# (BUILD, from a ULT), MPICH and Open MPI one after another (the MPI
# binaries of build/), and a phase probe before each round.
b=$1 n=${2:-6}
B=build/bench/pt2pt
pick() { grep -v '^#' | awk '{printf "%s=%s ", $1, $2}'; }
for i in $(seq 1 "$n"); do
    p=$($B/pt2pt_ring_copy 1024 56 100000 2>/dev/null | sed -n 's/.*: \([0-9.]*\) ns a record.*/\1/p')
    v=$(MPIV_BIND=core "$b/tools/mpiv_run" -n 2 --timeout 150 "$b/bench/pt2pt/pt2pt_latency" --threads ult -m 64K:1M | pick)
    m=$(timeout 60 mpiexec.mpich -n 2 -bind-to core $B/pt2pt_latency_mpich -m 64K:1M | pick)
    o=$(timeout 60 mpirun.openmpi --allow-run-as-root -n 2 --bind-to core --map-by core $B/pt2pt_latency_openmpi -m 64K:1M | pick)
    echo "probe $p | mpiv $v | mpich $m | ompi $o"
done
