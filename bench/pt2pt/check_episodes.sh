#!/usr/bin/env bash
# check_episodes.sh RUN_SH — run.sh runs a slice again when a phase probe
# around it read more than --episode-factor times the run's median (an
# episode of the machine), at most --episode-retries times, keeps the
# discarded output as comments, and reports what it did.
# A fake probe reads 100 ns except at the probe numbers listed in
# $EPISODE_AT, where it reads 900; a fake latency benchmark prints 5 for
# every size when the probe just before it was one of those, else 1.
# Between tries run.sh probes once a second until a probe reads normal.
set -u -o pipefail
runsh=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_episodes: $*" >&2; exit 1; }
mkdir -p "$tmp/b/tools" "$tmp/b/bench/pt2pt"
cat >"$tmp/b/tools/mpiv_run" <<'EOF'
#!/usr/bin/env bash
shift 4
exec "$@"
EOF
cat >"$tmp/b/bench/pt2pt/pt2pt_ring_copy" <<'EOF'
#!/usr/bin/env bash
k=$(( $(cat "$CHECK_DIR/probes" 2>/dev/null || echo 0) + 1 ))
echo "$k" >"$CHECK_DIR/probes"
v=100 ep=0
for e in $EPISODE_AT; do [ "$e" = "$k" ] && v=900 ep=1; done
echo "$ep" >"$CHECK_DIR/in_episode"
echo "payload 1024 B at offset 56, records of 1088 B: $v ns a record, 1 MB/s"
EOF
cat >"$tmp/b/bench/pt2pt/pt2pt_latency" <<'EOF'
#!/usr/bin/env bash
m=0:64
while [ $# -gt 0 ]; do [ "$1" = -m ] && m=$2; shift; done
echo "$m" >>"$CHECK_DIR/calls"
v=1; [ "$(cat "$CHECK_DIR/in_episode")" = 1 ] && v=5
num() { case $1 in *K) echo $(( ${1%K} * 1024 )) ;; *M) echo $(( ${1%M} * 1048576 )) ;; *) echo "$1" ;; esac; }
s=$(num "${m%%:*}"); hi=$(num "${m##*:}")
echo "# fake latency"
while [ "$s" -le "$hi" ]; do echo "$s $v"; if [ "$s" = 0 ]; then s=1; else s=$((s * 2)); fi; done
EOF
chmod +x "$tmp/b/tools/mpiv_run" "$tmp/b/bench/pt2pt/"*
export CHECK_DIR=$tmp

# run N EPISODE_AT [run.sh options]: one round of latency under mpiv-ult
run() {
    local n=$1
    rm -f "$tmp/probes" "$tmp/calls"
    EPISODE_AT=$2 "$runsh" --no-build --build "$tmp/b" --out "$tmp/out$n" --impl mpiv-ult \
        --bench latency "${@:3}" >/dev/null 2>"$tmp/err$n" ||
        fail "run.sh failed: $(tail -3 "$tmp/err$n")"
}
# the value each size got in the table's data
val() { awk -v x="$2" '$1 == x { print $2 }' "$tmp/out$1/dat/latency.mpiv-ult.dat"; }

# Slices take probes 1-2, 3-4, 5-6 and 7-8. The rule needs five probes
# of history, so the fourth slice (128K:4M) is the first it can judge.
# Probe 9 is the wait's first, normal: the rerun takes probes 10 and 11.
run 1 "7 8"
[ "$(cat "$tmp/probes")" = 11 ] || fail "expected 11 probes, got $(cat "$tmp/probes")"
[ "$(tr '\n' ' ' <"$tmp/calls")" = "0:64 128:2K 4K:64K 128K:4M 128K:4M " ] ||
    fail "an episode's slice was not run again once: $(tr '\n' ' ' <"$tmp/calls")"
[ "$(val 1 131072)" = 1 ] || fail "the episode's figure was kept: $(val 1 131072)"
[ "$(val 1 0)" = 1 ] || fail "a slice outside the episode changed: $(val 1 0)"
[ "$(wc -l <"$tmp/out1/dat/latency.mpiv-ult.dat")" -eq 24 ] ||
    fail "the rerun doubled or lost rows: $(wc -l <"$tmp/out1/dat/latency.mpiv-ult.dat") of 24"
grep -q '^# discarded, an episode (probes 900 / 900 ns, the run.s median 100 ns):' \
    "$tmp/out1/raw/latency.mpiv-ult.txt" || fail "the discarded output's header is missing"
grep -q '^# | 131072 5$' "$tmp/out1/raw/latency.mpiv-ult.txt" || fail "the discarded output is not kept as comments"
[ "$(cat "$tmp/out1/raw/episodes.txt")" = "latency r1 -m_128K:4M mpiv-ult 900 900 100 rerun" ] ||
    fail "episodes.txt: $(cat "$tmp/out1/raw/episodes.txt")"
grep -q 'latency, round 1, `-m 128K:4M`, mpiv-ult: probes 900 / 900 ns, median 100 ns: run again' \
    "$tmp/out1/pt2pt.md" || fail "the report does not list the rerun"

# The rerun waits for the episode to pass: probes 9 and 10 (the wait's)
# still read 900, 11 does not, and the rerun takes 12 and 13, normal.
run 5 "7 8 9 10"
[ "$(grep -c '128K:4M' "$tmp/calls")" -eq 2 ] || fail "after the wait: $(grep -c '128K:4M' "$tmp/calls") runs, not 2"
[ "$(cat "$tmp/probes")" = 13 ] || fail "the wait did not probe until the episode passed: $(cat "$tmp/probes") probes"
[ "$(val 5 131072)" = 1 ] || fail "the rerun after the wait was not kept: $(val 5 131072)"

# An episode that outlasts the retries (no wait): run 1 + 2 times, the
# last one kept.
run 2 "7 8 9 10 11 12" --episode-retries 2 --episode-wait 0
[ "$(grep -c '128K:4M' "$tmp/calls")" -eq 3 ] || fail "expected 3 runs of the slice, got $(grep -c '128K:4M' "$tmp/calls")"
[ "$(val 2 131072)" = 5 ] || fail "the last run was not kept: $(val 2 131072)"
[ "$(awk '{print $8}' "$tmp/out2/raw/episodes.txt" | tr '\n' ' ')" = "rerun rerun kept " ] ||
    fail "episodes.txt: $(cat "$tmp/out2/raw/episodes.txt")"
grep -q '\*\*kept\*\* (no retries left)' "$tmp/out2/pt2pt.md" || fail "the report does not say the slice was kept"

# --episode-retries 0: every run kept, and reported as kept.
run 3 "7 8" --episode-retries 0
[ "$(grep -c '128K:4M' "$tmp/calls")" -eq 1 ] || fail "--episode-retries 0 ran the slice again"
[ "$(val 3 131072)" = 5 ] || fail "--episode-retries 0 lost the figure: $(val 3 131072)"

# A probe 9x the median is not an episode at --episode-factor 10; none at all
# is reported as such.
run 4 "7 8" --episode-factor 10
[ "$(grep -c '128K:4M' "$tmp/calls")" -eq 1 ] || fail "--episode-factor 10 ran the slice again"
grep -q 'no slice ran in an episode (no probe over 10× the run' "$tmp/out4/pt2pt.md" ||
    fail "the report does not say no slice ran in an episode"

# Bad values are refused before anything runs.
for bad in "--episode-retries -1" "--episode-retries x" "--episode-factor 1" "--episode-factor abc" \
    "--episode-wait -2" "--episode-wait 1.5"; do
    # shellcheck disable=SC2086
    if "$runsh" --no-build --build "$tmp/b" --out "$tmp/bad" $bad >/dev/null 2>&1; then
        fail "run.sh accepted $bad"
    fi
done
echo "check_episodes: episodes run again, kept, reported and refused as expected"
