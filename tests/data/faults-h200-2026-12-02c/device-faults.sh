#!/usr/bin/env bash
# On the device machine: sshd and wheels (gpu-run.sh --setup), ip/tc/iptables from .debs-x where missing,
# then $N fault campaigns of 60 runs at once (seeds $SEEDS), cut off at $LIMIT s; all records in one tar.
set -u
cd "$(dirname "$0")/.."
bash scripts/gpu-run.sh --setup > /tmp/setup.txt 2>&1 || { tail -20 /tmp/setup.txt; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PATH="/tmp/bin:$PATH"
mkdir -p /tmp/bin /tmp/ipr /tmp/rec
for f in .debs-x/*.deb; do dpkg -x "$f" /tmp/ipr; done
libs=/tmp/ipr/usr/lib/x86_64-linux-gnu:/tmp/ipr/lib/x86_64-linux-gnu
for t in ip tc; do
  command -v $t >/dev/null && continue
  real=$(ls /tmp/ipr/usr/sbin/$t /tmp/ipr/sbin/$t /tmp/ipr/bin/$t 2>/dev/null | head -1)
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$real" > /tmp/bin/$t; chmod +x /tmp/bin/$t
done
if ! command -v iptables >/dev/null; then
  for mode in nft legacy; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s XTABLES_LIBDIR=/tmp/ipr/usr/lib/x86_64-linux-gnu/xtables exec /tmp/ipr/usr/sbin/xtables-%s-multi iptables "$@"\n' "$libs" "$mode" > /tmp/bin/iptables
    chmod +x /tmp/bin/iptables
    ip netns add ipt && ip netns exec ipt iptables -A INPUT -p tcp --dport 9 -j DROP && ip netns exec ipt iptables -F INPUT && ok=$mode
    ip netns del ipt 2>/dev/null
    [ -n "${ok:-}" ] && break
  done
fi
only=""
if ! { ip netns add ipt && ip netns exec ipt iptables -L INPUT >/dev/null; }; then
  only="--only=$(python3 -c "import sys; sys.path[:0]=['benchmarks','tests']; import faults; print(','.join(n for n in faults.CAMPAIGN if n != 'half-open'))")"
fi
ip netns del ipt 2>/dev/null
{ nproc; for t in ip tc iptables unshare setpriv nsenter sshd; do echo "$t: $(command -v $t)"; done
  echo "iptables mode: ${ok:-system}"; echo "only: ${only:-all}"; python3 --version; } > /tmp/rec/tools.txt 2>&1
cat /tmp/rec/tools.txt
for s in $SEEDS; do
  timeout "$LIMIT" python3 -u benchmarks/faults.py --runs 60 --seed "$s" --bins build/provers ${only:+"$only"} > /tmp/rec/seed-$s.txt 2>&1 &
  sleep 1
done
wait
tar -C /tmp/rec -czf "$OUT/records.tgz" .
for s in $SEEDS; do echo "== seed $s: $(grep -c '^run ' /tmp/rec/seed-$s.txt) runs"; grep -i "violation" /tmp/rec/seed-$s.txt | grep -v " 0 violation" | head -5; done
