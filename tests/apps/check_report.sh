#!/bin/sh
# check_report.sh KIND RANKS CMD...: runs CMD (an application run that must
# pass its own check) and then checks the extra report asked of it:
#   phases        bfs --phases: one line per rank, each kernel time above
#                 0 and at most the search time, and the bound line;
#   phases-none   bfs --phases where no bottom-up level runs: every kernel
#                 time 0 and the line that says the kernel did not run;
#   bound         uts --bound or stencil --reference: the one line of it,
#                 with a rate above 0 and the run's share of it above 0.
# Prints the run's output; exits 0 only if the run passed and the report
# is as described.
kind=$1
ranks=$2
shift 2
out=$("$@" 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 0 ] || ! echo "$out" | grep -q 'result: PASSED'; then
  echo "check_report: the run itself failed (status $rc)"
  exit 1
fi
case $kind in
phases|phases-none)
  echo "$out" | awk -v ranks="$ranks" -v kind="$kind" '
    /^phases: rank [0-9]+: bottom-up kernel / {
      n++; k = $6 + 0; s = $9 + 0
      if (kind == "phases" && !(k > 0 && k <= s)) bad = 1
      if (kind == "phases-none" && k != 0) bad = 1
    }
    /^phases: the slowest rank.s kernel time bounds .* at [0-9.]+x this run/ { bound = 1 }
    /^phases: the shared bottom-up kernel did not run/ { none = 1 }
    END {
      ok = n == ranks && !bad && (kind == "phases" ? bound && !none : none && !bound)
      if (!ok) print "check_report: bad --phases report (" n " rank lines, bad " bad + 0 ", bound " bound + 0 ", none " none + 0 ")"
      exit !ok
    }'
  ;;
bound)
  echo "$out" | awk '
    /^(bound|reference): / {
      n++
      share = $0; sub(/.*this run /, "", share); sub(/%.*/, "", share)
      rate = $0; sub(/ (cell_updates_per_s|nodes\/s); this run.*/, "", rate); sub(/.* /, "", rate)
      if (share + 0 > 0 && rate + 0 > 0) good = 1
    }
    END {
      ok = n == 1 && good
      if (!ok) print "check_report: bad --bound/--reference report (" n " lines)"
      exit !ok
    }'
  ;;
*)
  echo "check_report: unknown kind $kind"
  exit 2
  ;;
esac
