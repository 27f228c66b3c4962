#!/usr/bin/env bash
# Starts a one-node Slurm on this host for the tests: munged, slurmctld and
# slurmd, as root, without systemd, every file of theirs (key, slurm.conf,
# sockets, spool, logs, pid files) under one state directory, so that it
# neither reads nor changes /etc/slurm or /etc/munge, nor meets a Slurm or
# munge that the machine runs already (its own ports and munge socket).
#
# Usage: start_slurm.sh STATE_DIR
#   Then: export SLURM_CONF=STATE_DIR/slurm.conf; srun ...; stop_slurm.sh STATE_DIR
# Exit status: 0 when `sinfo` shows the node idle; 77 when Slurm cannot be
# started here (not root, packages missing, ports taken), with the reason
# on stderr; 1 when it was started and failed (the daemons' logs are printed).
# Every wait is bounded (MPIV_SLURM_START_TIMEOUT seconds, 60 by default).
set -u

die_skip() { echo "start_slurm: cannot start Slurm here: $*" >&2; exit 77; }

[ $# -eq 1 ] || { echo "usage: start_slurm.sh STATE_DIR" >&2; exit 2; }
state=$1
here=$(cd "$(dirname "$0")" && pwd)
limit=${MPIV_SLURM_START_TIMEOUT:-60}
case $limit in ''|*[!0-9]*) echo "start_slurm: MPIV_SLURM_START_TIMEOUT=$limit: expected whole seconds" >&2; exit 2;; esac

[ "$(id -u)" -eq 0 ] || die_skip "needs root (slurmd runs jobs as their user; run as root, e.g. in CI's container)"
for tool in munged slurmctld slurmd sinfo srun scontrol; do
  command -v "$tool" >/dev/null 2>&1 ||
    PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null 2>&1 ||
    die_skip "'$tool' not found (Debian: apt-get install munge slurmctld slurmd slurm-client; scripts/deps.sh)"
done
export PATH=$PATH:/usr/sbin:/sbin

# Ports: one pair unlike Slurm's defaults (6817/6818), so that a real Slurm
# on the machine is never confused with ours.
ctld_port=${MPIV_SLURMCTLD_PORT:-16817}
slurmd_port=$((ctld_port + 1))

# A Slurm of ours still running from an earlier run (a test killed before
# its cleanup): stop it first, so that this run starts from a clean state.
"$here/stop_slurm.sh" "$state" >/dev/null 2>&1

port_busy() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }
for p in "$ctld_port" "$slurmd_port"; do
  port_busy "$p" && die_skip "TCP port $p is in use (another Slurm? set MPIV_SLURMCTLD_PORT to a free pair)"
done

mkdir -p "$state" || die_skip "cannot create $state"
state=$(cd "$state" && pwd)
rm -rf "${state:?}"/{munge,ctld,spool,log}
mkdir -p "$state"/{munge,ctld,spool,log}
chmod 755 "$state/munge"

# munge: a fresh key, its own socket. munged refuses a key readable by
# others and a directory writable by others; the socket's directory must be
# searchable by all (munged warns otherwise).
dd if=/dev/urandom of="$state/munge/munge.key" bs=1024 count=1 status=none ||
  die_skip "cannot write the munge key"
chmod 400 "$state/munge/munge.key"
munged --force --key-file="$state/munge/munge.key" --socket="$state/munge/munge.socket" \
       --pid-file="$state/munge/munged.pid" --log-file="$state/log/munged.log" \
       --seed-file="$state/munge/munged.seed" ||
  { cat "$state/log/munged.log" >&2 2>/dev/null; die_skip "munged did not start"; }

# The node as slurmd sees it: its real CPUs, sockets, cores and memory
# (slurmd -C), so that slurmd does not drain the node for a mismatch.
# Its NodeName is the short host name, which slurmd registers under.
node_line=$(slurmd -C 2>/dev/null | head -n 1)
case $node_line in
  NodeName=*' 'CPUs=*) ;;
  *) die_skip "'slurmd -C' printed no node line (got '$node_line')";;
esac
node=${node_line%% *}
node=${node#NodeName=}
node_rest=${node_line#* }

cat > "$state/slurm.conf" <<EOF
# Written by tests/slurm/start_slurm.sh: a one-node cluster for tests.
ClusterName=mpivtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$state/munge/munge.socket
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool/%n
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups: the container may have none to give, and no systemd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
# a step whose tasks are killed is gone within seconds
KillWait=5
MessageTimeout=10
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=60
NodeName=$node NodeAddr=127.0.0.1 $node_rest State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=30 State=UP
EOF
export SLURM_CONF=$state/slurm.conf

slurmctld -f "$SLURM_CONF" -i ||
  { cat "$state/log/slurmctld.log" >&2 2>/dev/null; echo "start_slurm: slurmctld did not start" >&2; "$here/stop_slurm.sh" "$state"; exit 1; }
slurmd -f "$SLURM_CONF" ||
  { cat "$state/log/slurmd.log" >&2 2>/dev/null; echo "start_slurm: slurmd did not start" >&2; "$here/stop_slurm.sh" "$state"; exit 1; }

# Wait for the node to be idle; sinfo itself is bounded by `timeout`, as a
# slurmctld that accepts and never answers would hold it.
deadline=$((SECONDS + limit))
st=""
while [ $SECONDS -lt $deadline ]; do
  st=$(timeout 10 sinfo -h -n "$node" -o '%T' 2>/dev/null | head -n 1)
  case $st in
    idle) echo "start_slurm: node $node idle (SLURM_CONF=$SLURM_CONF)"; exit 0;;
  esac
  sleep 1
done
echo "start_slurm: node $node not idle after $limit s (state '${st:-no answer}'); logs:" >&2
for f in slurmctld slurmd munged; do
  echo "--- $f.log (last 30 lines)" >&2
  tail -n 30 "$state/log/$f.log" >&2 2>/dev/null
done
"$here/stop_slurm.sh" "$state"
exit 1
