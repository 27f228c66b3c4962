#!/bin/sh
# A multi-host job on one machine: two "hosts", each a network namespace
# (joined by a veth pair, 10.78.0.1/24 - 10.78.0.2/24) whose ranks also get
# a UTS namespace named after it (as_host.sh), 2 ranks on each, started by
# mpiv_run -H A,B --map-by block (ranks 0, 1 on A; 2, 3 on B) through the
# launcher 'as_host.sh {host}' instead of ssh.
#  1. The protocol suite (test_p2p) and BFS with MPIV_NET=auto (the
#     default) and MPIV_LOG=info: every rank says its backend is shm+ofi
#     and ofi's provider is tcp;ofi_rxm, and its finalize counters show
#     that what came from the other rank of its host came through shm and
#     what came from the other host through ofi, both carrying messages;
#     the suite's rendezvous wrote through ofi and read through shm.
#  2. The suite with MPIV_NET=ofi: forced, ofi carries every peer.
#  3. SIGKILL of rank 2 (on B) while the suite runs: mpiv_run ends the job
#     on both hosts within 5 s with a message naming rank 2, and no process
#     is left in either namespace.
#  4. Host B's ranks offered loopback only: the job fails within seconds,
#     saying so, instead of hanging.
#  5. One rank on each host: auto picks the network alone; the suite runs.
# Needs root, ip(8) and unshare(1); exits 77 (skipped) otherwise. Creates
# and removes its own namespaces.
# Usage: run_multihost.sh MPIV_RUN AS_HOST TEST_P2P BFS
set -u
RUN=$1 AS_HOST=$2 P2P=$3 BFS=$4
VETH=$(dirname "$0")/../common/veth_pair.sh
tag=$$
A=mpivmhA$tag B=mpivmhB$tag
OUT=$(mktemp /tmp/mpiv_multihost_XXXXXX)

cleanup() {
    for ns in "$A" "$B"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    rm -f "$OUT"
}
trap cleanup EXIT INT TERM

[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 77; }
for t in ip unshare; do
    command -v $t >/dev/null || { echo "skipped: no $t"; exit 77; }
done
if ! ip netns add "$A" 2>/dev/null || ! ip netns add "$B" 2>/dev/null; then
    echo "skipped: cannot create network namespaces"; exit 77
fi
unshare --uts true 2>/dev/null || { echo "skipped: cannot create UTS namespaces"; exit 77; }
"$VETH" "$A" "$B" 10.78.0.1 10.78.0.2 || exit 1

limit=$(awk -v s="${MPIV_TEST_TIMEOUT_SCALE:-1}" 'BEGIN { v = 240 * s; print (v == int(v)) ? v : int(v) + 1 }')
fail() { echo "FAIL: $*"; cat "$OUT"; exit 1; }

# job NET PROGRAM ARGS...: the 4-rank job, mpiv_run itself in A (its
# exchange listens on A's veth address), started through $LAUNCH: as_host.sh
# with FI_TCP_IFACE=mpiv0, or, in step 4, lo on B only
LAUNCH="env FI_TCP_IFACE=mpiv0 $AS_HOST {host}"
job() {
    net=$1
    shift
    ip netns exec "$A" "$RUN" -n "${NP:-4}" -H "$A,$B" --map-by block --bind 10.78.0.1 \
        --launcher "$LAUNCH" --timeout "$limit" --tag-output \
        -x MPIV_NET="$net" -x MPIV_LOG=info -x CK_FORK=no "$@"
}

# check_paths WANT_LOCAL WANT_REMOTE: every rank's log names, for each other
# rank, WANT_LOCAL if it is on the same host (rank / 2) and WANT_REMOTE if
# not; messages arrived through both kinds of peers at every rank.
check_paths() {
    awk -v loc="$1" -v rem="$2" '
        / server: messages from rank:backend:count / {
            r = $1; gsub(/[^0-9]/, "", r); seen[r] = 1
            nl = 0; nr = 0
            for (i = 1; i <= NF; i++) {
                if (split($i, f, ":") != 3 || f[1] !~ /^[0-9]+$/) continue
                if (f[1] == r) continue
                same = int(f[1] / 2) == int(r / 2)
                want = same ? loc : rem
                if (f[2] != want) { printf "rank %s: rank %s via %s, want %s\n", r, f[1], f[2], want; bad = 1 }
                if (same) nl += f[3]; else nr += f[3]
            }
            if (nl == 0) { printf "rank %s: nothing from its own host\n", r; bad = 1 }
            if (nr == 0) { printf "rank %s: nothing from the other host\n", r; bad = 1 }
        }
        END {
            for (r = 0; r < 4; r++) if (!(r in seen)) { printf "rank %d: no counters\n", r; bad = 1 }
            exit bad
        }' "$OUT"
}

# 1. auto: shm on each host, ofi (tcp) between them
for prog in p2p bfs; do
    if [ $prog = p2p ]; then
        job auto "$P2P" >"$OUT" 2>&1 || fail "protocol suite exited $?"
    else
        job auto "$BFS" --scale 10 >"$OUT" 2>&1 || fail "bfs exited $?"
    fi
    for r in 0 1 2 3; do
        grep -q "^\[$r\] .*server: rank $r of 4, backend shm+ofi," "$OUT" ||
            fail "$prog: rank $r does not say shm+ofi"
        grep -q "^\[$r\] .*ofi: provider tcp;ofi_rxm," "$OUT" ||
            fail "$prog: rank $r's ofi is not tcp;ofi_rxm"
    done
    check_paths shm ofi || fail "$prog: a pair took the wrong path"
    grep 'server: traffic via' "$OUT"
    if [ $prog = p2p ]; then
        # the suite's rendezvous: written across hosts (ofi's keys that
        # carry their region's base), and within a host too, through the
        # shm rings (MPIV_SHM_CMA is off by default: nothing is read)
        grep -Eq 'traffic via ofi: .* [1-9][0-9]* writes' "$OUT" ||
            fail "p2p: no RDMA write went through ofi"
        grep -Eq 'traffic via shm: .* [1-9][0-9]* writes' "$OUT" ||
            fail "p2p: no RDMA write went through shm"
    fi
    echo "ok: $prog over 2 hosts x 2 ranks: shm within a host, ofi (tcp) between"
done

# 2. forced: ofi for every peer
job ofi "$P2P" >"$OUT" 2>&1 || fail "protocol suite with MPIV_NET=ofi exited $?"
check_paths ofi ofi || fail "MPIV_NET=ofi: a pair did not take ofi"
echo "ok: MPIV_NET=ofi carries every pair"

# 3. kill -9 of rank 2 (on host B) mid-job. $OUT is emptied first: the
# background job truncates it only once it starts, and the wait below
# would otherwise count step 2's lines and check after the truncation.
: >"$OUT"
job auto "$P2P" >"$OUT" 2>&1 &
JOB=$!
i=0
while [ "$(grep -c 'server: progress by' "$OUT")" -lt 4 ] && [ $i -lt 600 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ "$(grep -c 'server: progress by' "$OUT")" -ge 4 ] || fail "the ranks did not start"
VICTIM=
for p in $(ip netns pids "$B"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx MPIV_RANK=2; then
        VICTIM=$p
    fi
done
[ -n "$VICTIM" ] || fail "rank 2 not found in $B"
T0=$(date +%s)
kill -9 "$VICTIM"
wait $JOB
RC=$?
T1=$(date +%s)
[ "$RC" = 137 ] || fail "mpiv_run exited $RC after the kill, expected 137"
[ $((T1 - T0)) -le 5 ] || fail "the job took $((T1 - T0)) s to end"
grep -q "mpiv_run: rank 2 (pid $VICTIM) killed by signal 9 (Killed); terminating the job" "$OUT" ||
    fail "no message naming rank 2"
sleep 0.5
for ns in "$A" "$B"; do
    left=$(ip netns pids "$ns")
    [ -z "$left" ] || fail "processes left in $ns: $left"
done
echo "ok: kill -9 of rank 2 on one host ended the job on both within $((T1 - T0)) s"

# 5 (before 4, which changes the launcher). One rank on each host: auto
#    picks the network alone (shm would carry nothing), and the suite runs.
NP=2 job auto "$P2P" >"$OUT" 2>&1 || fail "one rank per host: the suite exited $?"
for r in 0 1; do
    grep -q "^\[$r\] .*server: rank $r of 2, backend ofi," "$OUT" ||
        fail "one rank per host: rank $r's backend is not ofi alone"
done
grep -q "server: shm carries" "$OUT" && fail "one rank per host: shm carries a rank"
echo "ok: one rank per host: ofi alone"

# 4. host B's ranks find only loopback (FI_TCP_IFACE=lo there: what tcp
#    offers while an interface has no carrier yet), which the other host
#    cannot reach; the job ends at once, saying so (it used to start and
#    hang in the first message across hosts)
LB=$(mktemp /tmp/mpiv_multihost_lo_XXXXXX)
trap 'rm -f "$LB"; cleanup' EXIT INT TERM
printf '#!/bin/sh\nh=$1\nif [ "$h" = "%s" ]; then i=lo; else i=mpiv0; fi\nexec env FI_TCP_IFACE=$i "%s" "$@"\n' \
    "$B" "$AS_HOST" >"$LB" && chmod +x "$LB" || fail "cannot write the launcher"
LAUNCH="$LB {host}"
T0=$(date +%s)
job auto "$P2P" >"$OUT" 2>&1 && fail "the job ran with host B's interface down"
T1=$(date +%s)
grep -q "offers only loopback interfaces .* this job spans hosts" "$OUT" ||
    fail "no message that the network interface is missing"
[ $((T1 - T0)) -le 30 ] || fail "the job took $((T1 - T0)) s to fail"
echo "ok: with host B's interface down the job failed in $((T1 - T0)) s, naming the cause"
