#!/usr/bin/env bash
# Quick start: install what is needed, build MPIv, and run the main job —
# Graph500 BFS on two local ranks (the greeting example until BFS is built).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
if [ -x build/apps/bfs/bfs ]; then
  exec build/tools/mpiv_run -n 2 build/apps/bfs/bfs "$@"
else
  exec build/tools/mpiv_run -n 2 build/examples/hello "$@"
fi
