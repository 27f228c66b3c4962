#!/usr/bin/env bash
# check_rounds.sh RUN_SH — run.sh --rounds reports the median of its rounds:
# fake outputs of 3 (then 4) rounds for two implementations (and their
# phase probes), then
# run.sh --report-only, then the figures in the .dat files and the table.
set -u -o pipefail
runsh=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "check_rounds: $*" >&2; exit 1; }
mkdir -p "$out/raw"
# raw OUT B IMPL ROUND LINES...: one round's output and its status
raw() {
    local f="$out/raw/$2.$3.r$4.txt"; shift 4
    printf '%s\n' "# header line" "$@" "# command: fake" >"$f"
    echo ok >"$f.status"
}
raw x latency mpiv-ult 1 "0 0.30" "8 0.30"
raw x latency mpiv-ult 2 "0 0.10" "8 0.12"
raw x latency mpiv-ult 3 "0 0.20" "8 0.90"
raw x latency mpich 1 "0 0.50" "8 0.40"
raw x latency mpich 2 "0 0.40" "8 0.60"
raw x latency mpich 3 "0 0.60" "8 0.50"
"$runsh" --report-only --rounds 3 --impl mpiv-ult,mpich --bench latency --out "$out" >/dev/null 2>&1 ||
    fail "run.sh --report-only failed"
got=$(cat "$out/dat/latency.mpiv-ult.dat")
[ "$got" = "$(printf '0 0.2\n8 0.3')" ] || fail "mpiv-ult medians: got '$got'"
got=$(cat "$out/dat/latency.mpich.dat")
[ "$got" = "$(printf '0 0.5\n8 0.5')" ] || fail "mpich medians: got '$got'"
grep -q '^| 8 | 0.3 | 0.5 | 1.67× |$' "$out/pt2pt.md" || fail "the 8 B row of the table: $(grep '^| 8 ' "$out/pt2pt.md")"
grep -q '^Rounds: 3' "$out/pt2pt.md" || fail "the table does not say it took medians of 3 rounds"
# an even count: the mean of the middle two; a failed round is reported
raw x latency mpiv-ult 4 "0 0.40" "8 0.20"
raw x latency mpich 4 "0 0.70" "8 0.30"
echo "failed (1)" >"$out/raw/latency.mpich.r4.txt.status"
"$runsh" --report-only --rounds 4 --impl mpiv-ult,mpich --bench latency --out "$out" >/dev/null 2>&1 ||
    fail "run.sh --report-only (4 rounds) failed"
got=$(cat "$out/dat/latency.mpiv-ult.dat")
[ "$got" = "$(printf '0 0.25\n8 0.25')" ] || fail "mpiv-ult medians of 4: got '$got'"
grep -q 'mpich: failed (1);' "$out/pt2pt.md" || fail "a failed round is not reported: $(grep '^Runs' "$out/pt2pt.md")"
# phase probes: each implementation's range (of the probes before its
# slices), and the slices whose probes lie more than 1.5x apart
printf '%s\n' "latency r1 -m_0:64 mpiv-ult 60" "latency r1 -m_0:64 mpich 62" \
    "latency r2 -m_0:64 mpiv-ult 61" "latency r2 -m_0:64 mpich 320" \
    "latency r3 -m_0:64 mpiv-ult n/a" "latency r3 -m_0:64 mpich 90" \
    "latency r4 -m_0:64 mpiv-ult 59 62" "latency r4 -m_0:64 mpich 60 330" >"$out/raw/probes.txt"
"$runsh" --report-only --rounds 4 --impl mpiv-ult,mpich --bench latency --out "$out" >/dev/null 2>&1 ||
    fail "run.sh --report-only (probes) failed"
grep -q '^- latency: .*mpiv-ult 59–61 (median 60);' "$out/pt2pt.md" ||
    fail "mpiv-ult's probes: $(grep '^- latency' "$out/pt2pt.md")"
grep -q '^- latency: .*mpich 60–320 (median 62);' "$out/pt2pt.md" ||
    fail "mpich's probes: $(grep '^- latency' "$out/pt2pt.md")"
grep -q '^  - latency, round 2, `-m 0:64`: mpiv-ult 61 ns, mpich 320 ns$' "$out/pt2pt.md" ||
    fail "the slice in different phases is not listed: $(grep '^  - ' "$out/pt2pt.md")"
# a slice whose probe after it reads another phase than the one before
grep -q '^  - latency, round 4, `-m 0:64`: mpiv-ult 59 ns, mpich (after) 330 ns$' "$out/pt2pt.md" ||
    fail "the slice that changed phase is not listed: $(grep '^  - ' "$out/pt2pt.md")"
[ "$(grep -c '^  - ' "$out/pt2pt.md")" = 2 ] || fail "slices within 1.5x listed as well"
echo "check_rounds: medians, statuses and phase probes as expected"
