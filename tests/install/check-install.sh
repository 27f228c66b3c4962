#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds a small program
# against it twice — with pkg-config and with CMake's find_package(MPIV) —
# and runs both as a single rank (no launcher); then an MPI program three
# times on the MPI face — with the installed mpivcc, with pkg-config
# mpiv-mpi and with find_package's MPIV::mpiv_mpi — run alone and under the
# installed mpiv_run with 2 ranks.
# Usage: check-install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
libdir=$(ls -d "$work"/prefix/lib*/ | head -n1)
export PKG_CONFIG_PATH="$libdir/pkgconfig"
export LD_LIBRARY_PATH="$libdir"

cp "$src/tests/install/consumer.c" "$work/"
cc -std=c11 -Wall -Wextra -Werror "$work/consumer.c" -o "$work/consumer-pc" \
   $(pkg-config --cflags --libs mpiv)
"$work/consumer-pc"

mkdir -p "$work/cm"
cat > "$work/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(MPIV REQUIRED)
add_executable(consumer ../consumer.c)
target_link_libraries(consumer PRIVATE MPIV::mpiv)
CM
cmake -S "$work/cm" -B "$work/cm/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cm/build" >/dev/null
"$work/cm/build/consumer"

cp "$src/tests/install/mpi_consumer.c" "$work/"
# the wrapper finds its prefix from where it lies; -show prints, not runs
"$work/prefix/bin/mpivcc" -show -c x.c | grep -q -- "-I$work/prefix/include/mpiv-mpi"
"$work/prefix/bin/mpivcc" --help | grep -q "usage: mpivcc"
"$work/prefix/bin/mpivcc" -std=c11 -Wall -Wextra -Werror "$work/mpi_consumer.c" -o "$work/mpi-cc"
cc -std=c11 -Wall -Wextra -Werror "$work/mpi_consumer.c" -o "$work/mpi-pc" \
   $(pkg-config --cflags --libs mpiv-mpi)
cat > "$work/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(mpi_consumer C)
find_package(MPIV REQUIRED)
add_executable(mpi_consumer ../mpi_consumer.c)
target_link_libraries(mpi_consumer PRIVATE MPIV::mpiv_mpi)
CM
rm -rf "$work/cm/build"
cmake -S "$work/cm" -B "$work/cm/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cm/build" >/dev/null
for p in "$work/mpi-cc" "$work/mpi-pc" "$work/cm/build/mpi_consumer"; do
  "$p"
  "$work/prefix/bin/mpiv_run" -n 2 "$p"
done
echo "install check: pkg-config and find_package consumers, and MPI programs built with mpivcc, pkg-config mpiv-mpi and MPIV::mpiv_mpi, built and ran"
