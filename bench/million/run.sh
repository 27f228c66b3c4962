#!/usr/bin/env bash
# run.sh — the one-message-per-ULT grid of issue 16, with a table and a plot.
#
# For each MPIV_WORKERS in WORKERS, each N in SIZES and each order
#   ults       rank 0 spawns N senders, rank 1 N receivers, at once
#   recvfirst  rank 1's N receivers post their receives, then rank 0 sends
#   spawnrecv  recvfirst with mpiv_ult_spawn_recv: each receiver starts
#              only once its message is in, holding no stack until then
#              (ULTs only)
# one job `mpiv_run -n 2 million N ORDER,pingpong` runs the phase and then
# the 64-pair ping-pong, so the reference per-message cost comes from the
# same job. Then the same orders with N plain pthreads per rank (through
# the same API, 64 KiB stacks, one worker) for the N in PTHREAD_SIZES.
# Every job runs REPS times; the table gives the range. With --warm every
# phase runs once untimed before its timed run (million's "warm"): the
# timed run then finds the stacks its blocked ULTs need already made, as
# every wave of a program after its first does.
#
# Writes OUT/million.csv (every job and rank), OUT/million.md (the table)
# and OUT/million.png (job time and peak RSS against N; gnuplot), and
# OUT/raw/*.txt (each job's output).
#
# Usage: bench/million/run.sh [--build DIR] [--out DIR] [--reps R]
#          [--sizes 1K,64K,1M] [--workers 1,2] [--pthread-sizes 1K,4K]
#          [--timeout S] [--warm] [--report-only]
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
out=$root/build/million-results
reps=3
sizes=1K,64K,1M
workers=1,2
psizes=1K,4K
timeout=900
report_only=0
warm=
invocation="bench/million/run.sh${*:+ $*}"

while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --pthread-sizes) psizes=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --warm) warm=,warm; shift ;;
    --report-only) report_only=1; shift ;;
    *) echo "run.sh: unknown option '$1' (see the top of $0)" >&2; exit 2 ;;
  esac
done

run=$build/tools/mpiv_run
bin=$build/bench/million/million
mkdir -p "$out/raw"

count() { # 64K -> 65536
  case "$1" in
    *K|*k) echo $(( ${1%?} * 1024 )) ;;
    *M|*m) echo $(( ${1%?} * 1048576 )) ;;
    *) echo "$1" ;;
  esac
}

if [ $report_only = 0 ]; then
  if [ ! -x "$run" ] || [ ! -x "$bin" ]; then
    echo "run.sh: build first: cmake --build $build --target million mpiv_run" >&2
    exit 2
  fi
  jobs=()
  for w in ${workers//,/ }; do
    for n in ${sizes//,/ }; do
      for o in ults recvfirst spawnrecv; do jobs+=("ult $w $n $o"); done
    done
  done
  for n in ${psizes//,/ }; do
    for o in ults recvfirst; do jobs+=("pthread 1 $n $o"); done
  done
  for r in $(seq 1 "$reps"); do
    for j in "${jobs[@]}"; do
      set -- $j
      kind=$1 w=$2 n=$3 o=$4
      phases=$o$warm
      [ "$kind" = ult ] && phases=$o,pingpong$warm
      f=$out/raw/$kind-w$w-$n-$o-r$r.txt
      echo "== $kind workers $w N $n $o (rep $r)"
      max=$(( $(count "$n") / w + 1024 ))
      [ $max -lt 1048576 ] && max=1048576
      MPIV_WORKERS=$w MPIV_MAX_ULTS=$max timeout $((timeout + 30)) \
        "$run" -n 2 --timeout "$timeout" "$bin" "$n" "$phases" "$kind" >"$f" 2>&1
      echo "   exit $?"; grep -E '^rank [01] ' "$f" | grep -v posting | sed 's/^/   /'
    done
  done
fi

# CSV: kind,workers,n,order,rep,rank,phase,seconds,ns_per_msg,rss_mib
csv=$out/million.csv
echo "kind,workers,n,order,rep,rank,phase,seconds,ns_per_msg,rss_mib" >"$csv"
for f in "$out"/raw/*.txt; do
  [ -e "$f" ] || continue
  b=$(basename "$f" .txt)
  IFS=- read -r kind w n o r <<<"$b"
  w=${w#w} r=${r#r}
  awk -v k="$kind" -v w="$w" -v n="$(count "$n")" -v o="$o" -v r="$r" '
    /^rank [01]  [a-z]+ +N / {
      printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", k, w, n, o, r, $2, $3, $6, $8, $12 }' "$f" >>"$csv"
done

# Per (kind, workers, n, order): job time = the slower rank's phase time;
# ranges over the reps; ping-pong per message; RSS per rank.
md=$out/million.md
dat=$out/million.dat
awk -F, -v dat="$dat.tmp" '
  NR == 1 { next }
  {
    key = $1 "," $2 "," $3 "," $4; rep = $5
    if ($7 == $4) {
      jk = key SUBSEP rep
      if ($8 > jt[jk]) jt[jk] = $8
      rk = key SUBSEP $6
      if (!(rk in rmin) || $10 < rmin[rk]) rmin[rk] = $10
      if ($10 > rmax[rk]) rmax[rk] = $10
      keys[key] = 1
    } else if ($7 == "pingpong" && $6 == 0) {
      pk = key SUBSEP rep; pp[pk] = $9
    }
    reps[key, rep] = 1
  }
  END {
    for (key in keys) {
      split(key, f, ",")
      tmin = ""; tmax = ""; pmin = ""; pmax = ""; qmin = ""; qmax = ""; rlo = ""; rhi = ""
      for (kr in jt) {
        split(kr, kk, SUBSEP); if (kk[1] != key) continue
        t = jt[kr]; if (tmin == "" || t < tmin) tmin = t; if (tmax == "" || t > tmax) tmax = t
        per = t * 1e6 / f[3]
        if (pmin == "" || per < pmin) pmin = per; if (pmax == "" || per > pmax) pmax = per
        if ((kk[1] SUBSEP kk[2]) in pp) {
          q = pp[kk[1] SUBSEP kk[2]] / 1000; ratio = per / q
          if (qmin == "" || q < qmin) qmin = q; if (qmax == "" || q > qmax) qmax = q
          if (rlo == "" || ratio < rlo) rlo = ratio; if (rhi == "" || ratio > rhi) rhi = ratio
        }
      }
      pps = qmin == "" ? "–" : sprintf("%.2f–%.2f", qmin, qmax)
      rat = rlo == "" ? "–" : sprintf("%.1f–%.1f×", rlo, rhi)
      # a sort key first (threads, workers, order, N), cut off below
      printf "%s %s %s %09d| %s | %s | %s | %d | %.4f–%.4f | %.2f–%.2f | %s | %s | %.0f–%.0f | %.0f–%.0f |\n", \
        f[1], f[2], f[4], f[3], f[1], f[2], f[4], f[3], tmin, tmax, pmin, pmax, pps, rat, \
        rmin[key SUBSEP 0], rmax[key SUBSEP 0], rmin[key SUBSEP 1], rmax[key SUBSEP 1]
      r0 = rmax[key SUBSEP 0]; r1 = rmax[key SUBSEP 1]
      printf "%s-w%s-%s %d %.6f %.1f\n", f[1], f[2], f[4], f[3], tmin, (r0 > r1 ? r0 : r1) > dat
    }
  }' "$csv" | sort >"$md.rows"
{
  echo "Generated by \`$invocation\` on $(uname -srm), $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')."
  echo "Job time: the slower rank's phase time (ranges over the reps); per message: job time / N;"
  echo "ping-pong: the same job's 64-pair ping-pong, time per message sent by rank 0."
  if grep -qs '  warm$' "$out"/raw/*.txt; then
    echo "Warm: every phase ran once untimed before its timed run (stacks already made)."
  fi
  echo
  echo "| threads | workers | order | N | job time (s) | per message (µs) | 64-pair ping-pong per message (µs) | ratio | peak RSS rank 0 (MiB) | peak RSS rank 1 (MiB) |"
  echo "|---|---:|---|---:|---|---|---|---|---|---|"
  sed 's/^[^|]*|/|/' "$md.rows"
} >"$md"
rm -f "$md.rows"
sort -k1,1 -k2,2n "$dat.tmp" >"$dat" && rm -f "$dat.tmp"
cat "$md"

# The plot: one series per (threads, workers, order); best time and the
# larger rank's peak RSS against N, log-log.
if command -v gnuplot >/dev/null; then
  series=$(awk '{print $1}' "$dat" | sort -u)
  t_plot="" m_plot=""
  for s in $series; do
    grep "^$s " "$dat" >"$out/series-$s.dat"
    t_plot+="'$out/series-$s.dat' using 2:3 with linespoints title '$s', "
    m_plot+="'$out/series-$s.dat' using 2:4 with linespoints title '$s', "
  done
  gnuplot <<EOF
set terminal pngcairo size 1200,500 noenhanced
set output '$out/million.png'
set multiplot layout 1,2 title 'N one-message threads between 2 ranks (bench/million)'
set logscale xy
set key top left
set grid
set xlabel 'N (messages = threads per rank)'
set ylabel 'job time (s, best of reps)'
plot ${t_plot%, }
set ylabel 'peak RSS of the larger rank (MiB)'
plot ${m_plot%, }
unset multiplot
EOF
  echo "wrote $out/million.md, $out/million.csv, $out/million.png"
else
  echo "wrote $out/million.md, $out/million.csv (no gnuplot: no plot)"
fi
