#!/usr/bin/env bash
# rate_pairs.sh BEFORE AFTER N: N pairs of pt2pt_mt_msgrate (anchor, 1 and 8
# ULT pairs; then the pthread anchor), before and after in turn (the order
# flips each pair), rates in M msg/s, one line per pair.
b=$1 a=$2 n=${3:-6}
run() { MPIV_BIND=core "$1/tools/mpiv_run" -n 2 "$1/bench/pt2pt/pt2pt_mt_msgrate" -p 1,8 -t 2 -i 30000 $2 2>&1 |
        awk '$1=="anchor"{x=$4} $1=="1"{y=$4} $1=="8"{z=$4} END{printf "%.2f %.2f %.2f", x/1e6, y/1e6, z/1e6}'; }
for i in $(seq 1 "$n"); do
    if [ $((i % 2)) = 1 ]; then B=$(run "$b"); A=$(run "$a"); BP=$(run "$b" "--threads pthread"); AP=$(run "$a" "--threads pthread")
    else A=$(run "$a"); B=$(run "$b"); AP=$(run "$a" "--threads pthread"); BP=$(run "$b" "--threads pthread"); fi
    echo "pair $i before ult(anchor,1,8) $B after $A | before pthread(anchor,1,8) $BP after $AP"
done
