#!/usr/bin/env bash
# Quick start: install what is needed, build MPIv, and run the main job —
# Graph500 BFS on two local ranks — then the same BFS written as an expert
# MPI programmer would (bfs_expert, on MPICH: same graph, roots and
# validation), and print both results side by side. Arguments go to both
# programs (the options they share: --scale, --roots, --seed, --edgefactor).
# Exit status: the MPIv run's.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
if [ ! -x build/apps/bfs/bfs ]; then
  exec build/tools/mpiv_run -n 2 build/examples/hello "$@"
fi
out=$(mktemp)
trap 'rm -f "$out" "$out.mpi"' EXIT
rc=0
build/tools/mpiv_run -n 2 build/apps/bfs/bfs "$@" | tee "$out" || rc=$?
teps() { sed -n 's/^harmonic_mean_TEPS: *//p' "$1"; }
if [ $rc -ne 0 ] || [ ! -x build/apps/bfs/bfs_expert ] || ! command -v mpiexec.mpich >/dev/null; then
  exit $rc
fi
echo
echo "== the same BFS as an expert MPI programmer would write it (bfs_expert, MPICH):"
if mpiexec.mpich -n 2 -bind-to core build/apps/bfs/bfs_expert "$@" >"$out.mpi" 2>&1; then
  grep -E '^(bfs|TEPS|harmonic|result)' "$out.mpi" || true
  echo
  awk -v a="$(teps "$out")" -v b="$(teps "$out.mpi")" 'BEGIN {
    printf "harmonic-mean TEPS: MPIv %.3g, expert MPI (MPICH) %.3g: MPIv / expert MPI = %.3g\n", a, b, a / b }'
  echo "(apps/compare.sh runs both MPIs and the twins in alternating rounds; docs/perf/apps.md has the results)"
else
  cat "$out.mpi"
  echo "quickstart: the expert MPI run failed (it takes only the options both programs share)" >&2
fi
exit $rc
