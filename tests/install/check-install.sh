#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds a small program
# against it twice — with pkg-config and with CMake's find_package(MPIV) —
# and runs both as a single rank (no launcher).
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
echo "install check: pkg-config and find_package consumers built and ran"
