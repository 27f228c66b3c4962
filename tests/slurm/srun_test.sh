#!/usr/bin/env bash
# One CTest test on the Slurm of start_slurm.sh STATE_DIR.
#
#   srun_test.sh STATE_DIR run    SECONDS SRUN_ARGS... PROGRAM ARGS...
#       srun --mpi=pmix SRUN_ARGS PROGRAM ARGS must exit 0.
#   srun_test.sh STATE_DIR killed SECONDS RANK SRUN_ARGS... PROGRAM ARGS...
#       PROGRAM's rank RANK kills itself (tests/slurm/rank_killed.c): srun
#       must end the job, exit 128+9 or 128+15 and name the task in its
#       message.
#   srun_test.sh STATE_DIR refused SECONDS TEXT SRUN_ARGS... PROGRAM ARGS...
#       srun --mpi=pmix SRUN_ARGS PROGRAM ARGS (SRUN_ARGS may override
#       --mpi) must fail, and its output must hold TEXT.
#   srun_test.sh STATE_DIR sbatch SECONDS SBATCH_ARGS... SCRIPT ARGS...
#       sbatch --wait SBATCH_ARGS SCRIPT ARGS must finish with the job
#       COMPLETED, and its output file must hold "result: PASSED".
#
# SECONDS bounds the whole run (timeout(1)); a run that hits it fails with
# the daemons' logs. Exit 77 (skipped) when start_slurm.sh did not start a
# Slurm (it printed why).
set -u
state=$1 mode=$2 limit=$3
shift 3
export PATH=$PATH:/usr/sbin:/sbin
export SLURM_CONF=$state/slurm.conf

if ! [ -f "$state/slurmctld.pid" ] || ! kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
  echo "srun_test: no Slurm running from $state (slurm_start was skipped or failed: see its output)"
  exit 77
fi

fail() {
  echo "srun_test: FAILED: $*"
  for f in slurmctld slurmd; do
    echo "--- $f.log (last 20 lines)"
    tail -n 20 "$state/log/$f.log" 2>/dev/null
  done
  exit 1
}

# The PMIx plugin is what MPIv joins the job through (src/boot/boot_pmix.c)
timeout 20 srun --mpi=list 2>&1 | grep -qw pmix ||
  fail "this Slurm has no PMIx plugin (srun --mpi=list)"

out=$(mktemp)
trap 'rm -f "$out"' EXIT

case $mode in
run)
  timeout -k 5 "$limit" srun --mpi=pmix "$@" >"$out" 2>&1
  rc=$?
  cat "$out"
  [ $rc -eq 124 ] && fail "srun did not finish within $limit s"
  [ $rc -eq 0 ] || fail "srun exited with status $rc"
  ;;
killed)
  rank=$1
  shift
  start=$SECONDS
  timeout -k 5 "$limit" srun --mpi=pmix "$@" >"$out" 2>&1
  rc=$?
  took=$((SECONDS - start))
  cat "$out"
  echo "srun_test: srun exited with status $rc after $took s"
  [ $rc -eq 124 ] && fail "the job did not end within $limit s of rank $rank's death"
  grep -q "rank $rank: killing itself" "$out" || fail "rank $rank did not reach its kill"
  # srun names the task (= the rank) that the signal ended
  grep -Eq "srun: error: [^:]*: task $rank: Killed" "$out" ||
    fail "no 'task $rank: Killed' message from srun"
  # srun exits with the highest status of its tasks: 128 + SIGKILL from the
  # victim, or 128 + SIGTERM from a rank that srun ended
  [ $rc -eq 137 ] || [ $rc -eq 143 ] ||
    fail "exit status $rc, expected 137 or 143 (128 + SIGKILL or SIGTERM)"
  ;;
refused)
  text=$1
  shift
  timeout -k 5 "$limit" srun --mpi=pmix "$@" >"$out" 2>&1
  rc=$?
  cat "$out"
  [ $rc -eq 124 ] && fail "srun did not finish within $limit s"
  [ $rc -ne 0 ] || fail "srun exited with status 0, expected a failure"
  grep -qF -- "$text" "$out" || fail "no '$text' in the output"
  ;;
sbatch)
  timeout -k 5 "$limit" sbatch --wait --parsable --output="$out" "$@" >"$out.id" 2>&1
  rc=$?
  job=$(head -n 1 "$out.id")
  cat "$out.id"
  cat "$out"
  rm -f "$out.id"
  [ $rc -eq 124 ] && { timeout 10 scancel "$job" 2>/dev/null; fail "job $job did not finish within $limit s"; }
  [ $rc -eq 0 ] || fail "sbatch --wait exited with status $rc (job $job)"
  grep -q "result: PASSED" "$out" || fail "job $job's output has no 'result: PASSED'"
  ;;
*)
  echo "srun_test: unknown mode '$mode' (run, killed, refused or sbatch)"
  exit 2
  ;;
esac
exit 0
