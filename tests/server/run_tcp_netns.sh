#!/bin/sh
# Two ranks over libfabric tcp;ofi_rxm between two network namespaces joined
# by a veth pair (10.77.0.1/24 — 10.77.0.2/24), created here and removed on
# exit. Needs root. Usage: run_tcp_netns.sh MPIV_RUN TEST_BINARY
# mpiv_run itself runs in the first namespace so that its key-value
# exchange (--bind 10.77.0.1) is reachable from both.
set -eu
RUN=$1
PROG=$2
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
    echo "skipped: needs root and ip(8)"
    exit 77
fi
tag=$$
A=mpivA$tag
B=mpivB$tag
cleanup() {
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
# a backstop only (the test's own waits fail on a stall), times the scale
limit=$(awk -v s="${MPIV_TEST_TIMEOUT_SCALE:-1}" 'BEGIN { v = 180 * s; print (v == int(v)) ? v : int(v) + 1 }')
ip netns add "$A"
ip netns add "$B"
"$(dirname "$0")/../common/veth_pair.sh" "$A" "$B" 10.77.0.1 10.77.0.2
ip netns exec "$A" "$RUN" -n 2 -H "$A,$B" --launcher 'ip netns exec {host}' \
    --bind 10.77.0.1 --timeout "$limit" --tag-output \
    -x 'MPIV_OFI_PROVIDER=tcp;ofi_rxm' -x FI_TCP_IFACE=mpiv0 -x MPIV_NET=ofi \
    -x MPIV_LOG=info \
    "$PROG"
