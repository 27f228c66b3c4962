#!/bin/sh
# The server test started by Open MPI's mpirun, so that every rank joins the
# job through PMIx (not mpiv_run's exchange): N ranks over shm, and each rank
# must say it bootstrapped through pmix and pass all its checks.
# Usage: run_mpirun.sh MPIRUN N TEST_BINARY [LSAN_SUPPRESSIONS]
set -u
MPIRUN=$1
N=$2
PROG=$3
SUPP=${4:-}
# a backstop only (the test's own waits fail on a stall), times the scale
limit=$(awk -v s="${MPIV_TEST_TIMEOUT_SCALE:-1}" 'BEGIN { v = 180 * s; print (v == int(v)) ? v : int(v) + 1 }')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# mpirun refuses root without --allow-run-as-root; -x hands each variable
# to the ranks whatever the launcher's own environment policy.
"$MPIRUN" --allow-run-as-root --oversubscribe -n "$N" --timeout "$limit" \
    -x MPIV_TEST_TIMEOUT_SCALE="${MPIV_TEST_TIMEOUT_SCALE:-1}" \
    -x MPIV_NET=ofi -x MPIV_OFI_PROVIDER=shm -x MPIV_LOG=info \
    -x LSAN_OPTIONS="suppressions=$SUPP:print_suppressions=0" \
    "$PROG" >"$out" 2>&1
rc=$?
cat "$out"
if [ $rc -ne 0 ]; then
    echo "FAIL: mpirun exited $rc"
    exit 1
fi
boots=$(grep -c "bootstrap pmix" "$out")
passes=$(grep -c "100%: Checks: [1-9][0-9]*, Failures: 0, Errors: 0" "$out")
if [ "$boots" -ne "$N" ] || [ "$passes" -ne "$N" ]; then
    echo "FAIL: $boots of $N ranks bootstrapped through pmix, $passes of $N passed"
    exit 1
fi
echo "ok: $N ranks joined through PMIx and passed"
