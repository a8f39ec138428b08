#!/usr/bin/env bash
# On the device machine: sshd and wheels (gpu-run.sh --setup), ip/tc/iptables from .debs-x where missing,
# then one fault campaign of $RUNS runs (seed $SEED, $JOBS at once), cut off at $LIMIT s; its records in $OUT.
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
  echo "iptables mode: ${ok:-system}"; echo "only: ${only:-all}"; python3 --version; uptime; } > /tmp/rec/tools.txt 2>&1
cat /tmp/rec/tools.txt
# one campaign: $RUNS runs of seed $SEED, $JOBS hosts at once, cut off at $LIMIT s; a record carried in
# (build/campaign.jsonl, from a call cut short) is counted and its runs not run again
resume=()
if [ -f build/campaign.jsonl ]; then cp build/campaign.jsonl /tmp/rec/campaign.jsonl; resume=(--resume /tmp/rec/campaign.jsonl); fi
( while sleep 30; do uptime; done ) > /tmp/rec/load.txt 2>&1 &
timeout "$LIMIT" python3 -u benchmarks/faults.py --runs "$RUNS" --seed "$SEED" --jobs "$JOBS" --bins build/provers \
  --record /tmp/rec/campaign.jsonl "${resume[@]}" ${only:+"$only"} > /tmp/rec/table.txt 2> /tmp/rec/progress.txt
echo "campaign exit $?" >> /tmp/rec/table.txt
kill %1 2>/dev/null
cp /tmp/rec/* "$OUT/"
tail -25 /tmp/rec/table.txt; grep -c '^run ' /tmp/rec/progress.txt; wc -l < /tmp/rec/campaign.jsonl
