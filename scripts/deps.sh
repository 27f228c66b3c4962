#!/usr/bin/env bash
# Installs the Debian 12 packages MPIv needs to build, test and benchmark.
# Idempotent: does nothing (and needs no network) when all are present.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config check libhwloc-dev libboost-context-dev
      libfabric-dev libibverbs-dev librdmacm-dev libpmix-dev libssl-dev
      mpich libmpich-dev openmpi-bin libopenmpi-dev gnuplot-nox iproute2 procps
      clang libclang-rt-dev
      # a local Slurm for tests/slurm; its PMIx plugin loads libpmix.so of
      # libpmix-dev (above)
      munge slurmd slurmctld slurm-client)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
