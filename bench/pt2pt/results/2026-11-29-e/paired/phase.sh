# phase.sh, sourced by varw.sh, rate.sh and bwmode.sh: the phase probe
# (ns per 1 KiB record between the two cores; 150-210 usual, 600 and more
# an episode) and a wait for it to read under 200 ns, up to MAXWAIT probes
# 10 s apart (the caller's default; 0: none). calm sets p to the last
# probe read.
probe() { /work/main/build/bench/pt2pt/pt2pt_ring_copy 1024 56 100000 2>/dev/null | sed -n 's/.*: \([0-9.]*\) ns a record.*/\1/p'; }
calm() {
  p=$(probe)
  for w in $(seq 1 "$1"); do [ "${p%.*}" -lt 200 ] && break; sleep 10; p=$(probe); done
}
