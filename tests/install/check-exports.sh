#!/usr/bin/env bash
# check-exports.sh LIB PATTERN — every symbol the shared library LIB
# defines for the dynamic linker matches the extended regex PATTERN, and
# there is at least one. libmpiv is built with hidden visibility so that
# its internal calls bind inside it; a part built without it, or an
# archive linked in whole, would show up here as a stray export.
set -u -o pipefail
lib=$1 pattern=$2
syms=$(nm -D --defined-only "$lib" | awk '{print $NF}') || { echo "nm failed on $lib" >&2; exit 1; }
[ -n "$syms" ] || { echo "$lib exports nothing" >&2; exit 1; }
stray=$(printf '%s\n' "$syms" | grep -Ev "$pattern")
if [ -n "$stray" ]; then
    echo "$lib exports $(printf '%s\n' "$stray" | wc -l) symbols outside /$pattern/:" >&2
    printf '%s\n' "$stray" | head -20 >&2
    exit 1
fi
echo "$lib: $(printf '%s\n' "$syms" | wc -l) exports, all /$pattern/"
