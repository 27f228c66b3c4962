#!/bin/sh
# veth_pair.sh NS_A NS_B ADDR_A ADDR_B: joins two existing network
# namespaces by a veth pair named mpiv0 on both sides (so that one
# FI_TCP_IFACE fits both), with ADDR_A/24 and ADDR_B/24, brings it and lo
# up, and returns once both ends have a carrier. Until then the kernel
# reports the interface without its address, libfabric's tcp provider
# offers only lo, and a rank started in that window cannot be reached from
# the other namespace. Exits 1 with a message if the carrier does not come
# within 10 s. Needs root.
set -u
[ $# -eq 4 ] || { echo "usage: veth_pair.sh NS_A NS_B ADDR_A ADDR_B" >&2; exit 2; }
A=$1 B=$2
tmp=mpv$$
ip link add "${tmp}a" netns "$A" type veth peer name "${tmp}b" netns "$B" || exit 1
ip -n "$A" link set "${tmp}a" name mpiv0 && ip -n "$B" link set "${tmp}b" name mpiv0 &&
ip -n "$A" addr add "$3/24" dev mpiv0 && ip -n "$B" addr add "$4/24" dev mpiv0 &&
ip -n "$A" link set lo up && ip -n "$B" link set lo up &&
ip -n "$A" link set mpiv0 up && ip -n "$B" link set mpiv0 up || exit 1
i=0
while [ $i -lt 200 ]; do
    up=0
    for ns in "$A" "$B"; do
        [ "$(ip netns exec "$ns" cat /sys/class/net/mpiv0/operstate)" = up ] && up=$((up + 1))
    done
    [ $up -eq 2 ] && exit 0
    sleep 0.05
    i=$((i + 1))
done
echo "veth_pair.sh: mpiv0 in $A and $B has no carrier after 10 s" >&2
exit 1
