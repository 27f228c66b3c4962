#!/usr/bin/env bash
# Stops the Slurm that start_slurm.sh STATE_DIR started: cancels its jobs,
# then ends its slurmd, slurmctld, munged and any slurmstepd left from its
# jobs, by the process ids it recorded (pid files; a slurmstepd is known by
# its open files under STATE_DIR), never by name. SIGTERM, then SIGKILL
# after 10 s. Safe to run when nothing runs. Keeps the logs in STATE_DIR/log.
# Usage: stop_slurm.sh STATE_DIR
set -u
[ $# -eq 1 ] || { echo "usage: stop_slurm.sh STATE_DIR" >&2; exit 2; }
[ -d "$1" ] || exit 0
state=$(cd "$1" && pwd)
export PATH=$PATH:/usr/sbin:/sbin

# The job steps' slurmstepd: each keeps the slurmd log or its socket in the
# spool open.
stepds() {
  local p c
  for p in /proc/[0-9]*; do
    # read, not $(cat): a fork per process is slow on a loaded machine
    c=""
    read -r c 2>/dev/null < "$p/comm"
    [ "$c" = slurmstepd ] || continue
    ls -l "$p/fd" 2>/dev/null | grep -q -- "-> $state/" && echo "${p#/proc/}"
  done
}

pid_of() {
  local f=$state/$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null)
  case $pid in ''|*[!0-9]*) return 0;; esac
  # only if it is still the daemon we started (the pid may have been reused)
  case $(cat "/proc/$pid/comm" 2>/dev/null) in
    "$2") echo "$pid";;
  esac
}

if [ -f "$state/slurm.conf" ] && [ -n "$(pid_of slurmctld.pid slurmctld)" ]; then
  SLURM_CONF=$state/slurm.conf timeout 10 scancel --quiet --full --user=root >/dev/null 2>&1
fi

pids="$(pid_of slurmd.pid slurmd) $(pid_of slurmctld.pid slurmctld) $(stepds)"
pids=$(echo $pids)
if [ -n "$pids" ]; then
  kill -TERM $pids 2>/dev/null
  for _ in $(seq 1 100); do
    alive=""
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  [ -n "${alive:-}" ] && kill -KILL $alive 2>/dev/null
fi

# munged last: the daemons above authenticate through it until they exit
m=$(pid_of munge/munged.pid munged)
if [ -n "$m" ]; then
  kill -TERM "$m" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$m" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$m" 2>/dev/null
fi
rm -f "$state"/slurmd.pid "$state"/slurmctld.pid "$state"/munge/munged.pid
exit 0
