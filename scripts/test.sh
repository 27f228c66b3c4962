#!/usr/bin/env bash
# Installs what is needed, then builds and runs every test:
#   1. Release build with -Werror, all tests;
#   2. AddressSanitizer + UBSan build, all tests but the VM, install,
#      large-memory, Slurm and MPICH/Open-MPI-only ("peer") ones;
#   3. ThreadSanitizer build, the tests labelled "concurrency".
# Usage: scripts/test.sh [--quick]   (--quick: stage 1 only)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc)
quick=0
[ "${1:-}" = "--quick" ] && quick=1

# stage NAME: a heading, with the seconds since the script started (CI's
# budget is for the whole run; these say where it goes)
stage() { echo; echo "=== $* === (${SECONDS} s)"; }
# configure DIR ARGS...: a new build directory gets Ninja (less overhead
# than make's per target, and this tree has ~250 small targets); one that
# exists keeps the generator it was made with.
configure() {
  local dir=$1; shift
  local gen=()
  [ -f "$dir/CMakeCache.txt" ] || ! command -v ninja >/dev/null || gen=(-G Ninja)
  cmake -S . -B "$dir" "${gen[@]}" "$@" >/dev/null
}

stage "Release build (-Werror)"
configure build -DCMAKE_BUILD_TYPE=Release -DMPIV_WERROR=ON
cmake --build build -j"$jobs"
stage "Release tests"
(cd build && ctest --output-on-failure -j"$jobs")
[ $quick -eq 1 ] && exit 0

stage "AddressSanitizer + UBSan build"
configure build-asan -DCMAKE_BUILD_TYPE=Debug -DMPIV_SANITIZE=address -DMPIV_BUILD_BENCH=OFF
cmake --build build-asan -j"$jobs"
stage "AddressSanitizer + UBSan tests"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j"$jobs" -LE "rxe|install|large|slurm|peer")

stage "ThreadSanitizer build (concurrency tests)"
configure build-tsan -DCMAKE_BUILD_TYPE=Debug -DMPIV_SANITIZE=thread -DMPIV_BUILD_BENCH=OFF -DMPIV_BUILD_APPS=OFF
cmake --build build-tsan -j"$jobs"
stage "ThreadSanitizer tests"
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
   ctest --output-on-failure -j"$jobs" -L concurrency)
stage "done"
