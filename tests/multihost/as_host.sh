#!/bin/sh
# as_host.sh NETNS COMMAND [ARGS...]: runs COMMAND as if on host NETNS — in
# network namespace NETNS and in a UTS namespace of its own whose host name
# is NETNS. Namespaces of one kernel share the boot id, so the host name is
# what tells MPIv's host identity (host name + boot id, src/server/server.c
# srv_host_map) that two such "hosts" differ, as it does on a real cluster.
# Every step execs in place, so the rank's pid is the launcher's: a signal
# that mpiv_run (or a test) sends it reaches the rank itself.
# Used as mpiv_run's --launcher 'as_host.sh {host}'. Needs root.
[ $# -ge 2 ] || { echo "usage: as_host.sh NETNS COMMAND [ARGS...]" >&2; exit 2; }
ns=$1
shift
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
