#!/bin/sh
# run_crash_signal.sh MPIV_RUN PROBE: a rank that dies of SIGSEGV, SIGABRT
# or SIGBUS under MPIV_NET=ofi is reported by mpiv_run as killed by that
# signal, with exit status 128 + signal (libfabric's psm provider links
# libinfinipath, whose handlers would turn it into "exited with status 1").
run=$1
probe=$2
fail=0
# Under AddressSanitizer its own handlers would report SIGSEGV and SIGBUS
# and exit 1: the test is about what the backend's libraries do.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0:handle_sigbus=0"
export ASAN_OPTIONS
for sig in 11 6 7; do
  out=$(env -u IPATH_NO_BACKTRACE MPIV_NET=ofi "$run" -n 2 --timeout 25 "$probe" "$sig" 2>&1)
  rc=$?
  if ! printf '%s\n' "$out" | grep -q "rank 1 (pid [0-9]*) killed by signal $sig "; then
    echo "signal $sig: mpiv_run did not report it; its output:"
    printf '%s\n' "$out"
    fail=1
  elif [ "$rc" -ne $((128 + sig)) ]; then
    echo "signal $sig: mpiv_run exited with $rc, want $((128 + sig))"
    fail=1
  else
    echo "signal $sig: reported, exit status $rc"
  fi
done
exit $fail
