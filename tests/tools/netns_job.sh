#!/bin/sh
# mpiv_run across two network namespaces joined by a veth pair, through the
# launcher template 'ip netns exec {host}':
#  1. a 2-rank bootstrap job (boot_probe check) whose exchange listens on
#     the first namespace's veth address (--bind);
#  2. kill -9 of one rank: mpiv_run ends the job, names the rank, and no
#     process is left (the kill reaches through ip netns exec, which execs
#     the rank in place).
# Needs root and ip(8); exits 77 (skipped) otherwise. Creates and removes
# its own namespaces. Usage: netns_job.sh MPIV_RUN BOOT_PROBE TOOL_PROBE
set -u
RUN=$1 BOOT=$2 PROBE=$3
A=mpivbA$$ B=mpivbB$$
OUT=$(mktemp /tmp/mpiv_netns_XXXXXX)

cleanup() {
    ip netns del "$A" 2>/dev/null
    ip netns del "$B" 2>/dev/null
    rm -f "$OUT"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
command -v ip >/dev/null || { echo "skipped: no ip(8)"; exit 77; }
if ! ip netns add "$A" 2>/dev/null || ! ip netns add "$B"; then
    echo "skipped: cannot create network namespaces"; exit 77
fi
"$(dirname "$0")/../common/veth_pair.sh" "$A" "$B" 10.99.0.1 10.99.0.2 || exit 1

fail() { echo "FAIL: $*"; cat "$OUT"; exit 1; }

# 1. bootstrap across the namespaces; mpiv_run itself runs in A
ip netns exec "$A" timeout -s KILL 25 "$RUN" -n 2 -H "$A,$B" --bind 10.99.0.1 \
    --launcher 'ip netns exec {host}' --tag-output "$BOOT" check mpiv_run 2 >"$OUT" 2>&1 ||
    fail "bootstrap job exited $?"
grep -q '^\[0\] boot_probe: rank 0 of 2 via mpiv_run ok' "$OUT" || fail "rank 0 missing"
grep -q '^\[1\] boot_probe: rank 1 of 2 via mpiv_run ok' "$OUT" || fail "rank 1 missing"
echo "ok: bootstrap over a veth pair between $A and $B"

# 2. kill -9 of rank 1 (in B)
ip netns exec "$A" timeout -s KILL 25 "$RUN" -n 3 -H "$A,$B" --bind 10.99.0.1 \
    --launcher 'ip netns exec {host}' "$PROBE" sleep 60 >"$OUT" 2>&1 &
JOB=$!
i=0
while [ "$(grep -c '^pid=' "$OUT")" -lt 3 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
[ "$(grep -c '^pid=' "$OUT")" = 3 ] || fail "ranks did not start"
PIDS=$(sed -n 's/^pid=\([0-9]*\) rank=.*/\1/p' "$OUT")
VICTIM=$(sed -n 's/^pid=\([0-9]*\) rank=1$/\1/p' "$OUT")
T0=$(date +%s)
kill -9 "$VICTIM"
wait $JOB
RC=$?
T1=$(date +%s)
[ "$RC" = 137 ] || fail "mpiv_run exited $RC, expected 137"
[ $((T1 - T0)) -le 5 ] || fail "took $((T1 - T0)) s"
grep -q "mpiv_run: rank 1 (pid $VICTIM) killed by signal 9 (Killed); terminating the job" "$OUT" ||
    fail "no message naming rank 1"
for p in $PIDS; do
    if [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null &&
        grep -q mpiv_tool_probe "/proc/$p/comm" 2>/dev/null; then
        fail "rank process $p is still alive"
    fi
done
echo "ok: kill -9 through ip netns exec ended the job, nothing left"
