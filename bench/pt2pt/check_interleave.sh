#!/usr/bin/env bash
# check_interleave.sh RUN_SH — run.sh runs each benchmark in slices, every
# implementation one slice before any runs the next, and joins a round's
# slices into one output; --no-interleave runs each benchmark whole.
# Fake benchmarks and a fake mpiv_run (no MPI needed) log every call.
set -u -o pipefail
runsh=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_interleave: $*" >&2; exit 1; }
mkdir -p "$tmp/b/tools" "$tmp/b/bench/pt2pt"
log=$tmp/calls.log
# mpiv_run -n 2 --timeout S PROGRAM ARGS...: runs PROGRAM once
cat >"$tmp/b/tools/mpiv_run" <<'EOF'
#!/usr/bin/env bash
shift 4
exec "$@"
EOF
# A fake benchmark: one line per size of -m (doubling from A, 0 then 1),
# or per pair of -p (with the anchor first); the figure is 1 under ULTs
# and 2 under pthreads. The pthread latency of 4K:64K fails.
cat >"$tmp/b/bench/pt2pt/fake" <<'EOF'
#!/usr/bin/env bash
b=$1; shift
t="" m="0:4194304" p="1,2,8,64,1024"
while [ $# -gt 0 ]; do
    case $1 in
    --threads) t=$2; shift ;;
    -m) m=$2; shift ;;
    -p) p=$2; shift ;;
    esac
    shift
done
echo "$b $t $m $p" >>"$CHECK_LOG"
v=1; [ "$t" = pthread ] && v=2
num() { case $1 in *K) echo $(( ${1%K} * 1024 )) ;; *M) echo $(( ${1%M} * 1048576 )) ;; *) echo "$1" ;; esac; }
echo "# fake $b"
if [ "$b" = latency ]; then
    [ "$t" = pthread ] && [ "$m" = 4K:64K ] && { echo "fake failure" >&2; exit 1; }
    s=$(num "${m%%:*}"); hi=$(num "${m##*:}")
    while [ "$s" -le "$hi" ]; do echo "$s $v"; if [ "$s" = 0 ]; then s=1; else s=$((s * 2)); fi; done
else
    echo "anchor 8 1.0 $((v * 100))   # rate anchor"
    IFS=, read -r -a ps <<<"$p"
    for q in "${ps[@]}"; do echo "$q 8 1.0 $((v * 10 + q))"; done
fi
EOF
printf '#!/usr/bin/env bash\nexec "${0%%/*}/fake" latency "$@"\n' >"$tmp/b/bench/pt2pt/pt2pt_latency"
printf '#!/usr/bin/env bash\nexec "${0%%/*}/fake" mt_msgrate "$@"\n' >"$tmp/b/bench/pt2pt/pt2pt_mt_msgrate"
chmod +x "$tmp/b/tools/mpiv_run" "$tmp/b/bench/pt2pt/"*
export CHECK_LOG=$log

out=$tmp/out
CHECK_LOG=$log "$runsh" --no-build --build "$tmp/b" --out "$out" --impl mpiv-ult,mpiv-pthread \
    --bench latency,mt_msgrate --rounds 2 >/dev/null 2>"$tmp/err" ||
    fail "run.sh failed: $(tail -3 "$tmp/err")"
# the calls of round 1: per slice, ULT then pthread
want="latency ult 0:64 1,2,8,64,1024
latency pthread 0:64 1,2,8,64,1024
latency ult 128:2K 1,2,8,64,1024
latency pthread 128:2K 1,2,8,64,1024
latency ult 4K:64K 1,2,8,64,1024
latency pthread 4K:64K 1,2,8,64,1024
latency ult 128K:4M 1,2,8,64,1024
latency pthread 128K:4M 1,2,8,64,1024
mt_msgrate ult 0:4194304 1
mt_msgrate pthread 0:4194304 1
mt_msgrate ult 0:4194304 2
mt_msgrate pthread 0:4194304 2
mt_msgrate ult 0:4194304 8
mt_msgrate pthread 0:4194304 8
mt_msgrate ult 0:4194304 64
mt_msgrate pthread 0:4194304 64
mt_msgrate ult 0:4194304 1024
mt_msgrate pthread 0:4194304 1024"
got=$(head -18 "$log")
[ "$got" = "$want" ] || fail "round 1's calls are not interleaved by slice: $got"
[ "$(wc -l <"$log")" -eq 36 ] || fail "expected 36 calls in 2 rounds, got $(wc -l <"$log")"
# every size of every slice in the ULT rows; the failed slice's sizes missing
# from the pthread rows, the others there, and the round marked failed
[ "$(wc -l <"$out/dat/latency.mpiv-ult.dat")" -eq 24 ] ||
    fail "ULT latency rows: $(wc -l <"$out/dat/latency.mpiv-ult.dat") of 24"
got=$(awk '{print $1}' "$out/dat/latency.mpiv-pthread.dat" | tr '\n' ' ')
[ "$got" = "0 1 2 4 8 16 32 64 128 256 512 1024 2048 131072 262144 524288 1048576 2097152 4194304 " ] ||
    fail "pthread latency rows: $got"
grep -q '^failed (1)$' "$out/raw/latency.mpiv-pthread.r1.txt.status" || fail "the failed slice left no status"
grep -q '^ok$' "$out/raw/latency.mpiv-ult.r1.txt.status" || fail "the ULT round is not ok"
grep -q 'mpiv-pthread: failed (1);' "$out/pt2pt.md" || fail "the table does not report the failed slice"
# every pair count once, and the anchor from all slices
got=$(awk '{print $1, $2}' "$out/dat/mt_msgrate.mpiv-ult.dat" | tr '\n' ' ')
[ "$got" = "1 11 2 12 8 18 64 74 1024 1034 " ] || fail "ULT message-rate rows: $got"
grep -q '^1-thread-anchor 200' "$out/dat/mt_msgrate_anchor.mpiv-pthread.dat" ||
    fail "pthread anchor: $(cat "$out/dat/mt_msgrate_anchor.mpiv-pthread.dat")"
grep -q '^Interleaved: ' "$out/pt2pt.md" || fail "the table does not say it interleaved"

# --no-interleave: one call per benchmark and implementation, whole
: >"$log"
"$runsh" --no-build --build "$tmp/b" --out "$tmp/out2" --impl mpiv-ult,mpiv-pthread \
    --bench mt_msgrate --pairs 2,8 --no-interleave >/dev/null 2>"$tmp/err" ||
    fail "run.sh --no-interleave failed: $(tail -3 "$tmp/err")"
want="mt_msgrate ult 0:4194304 2,8
mt_msgrate pthread 0:4194304 2,8"
[ "$(cat "$log")" = "$want" ] || fail "--no-interleave calls: $(cat "$log")"
grep -q '^Interleaved: ' "$tmp/out2/pt2pt.md" && fail "--no-interleave's table says it interleaved"
echo "check_interleave: slices interleaved, joined and reported as expected"
