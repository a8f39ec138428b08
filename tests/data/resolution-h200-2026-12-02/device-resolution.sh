#!/usr/bin/env bash
# On the device machine: sshd and wheels (gpu-run.sh --setup), ip/tc from .debs-x where missing, then one
# resolution campaign (benchmarks/resolution.py) of $RUNS runs, $JOBS at once, cut off at $LIMIT s; its records in $OUT.
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
{ nproc; for t in ip tc unshare setpriv nsenter sshd; do echo "$t: $(command -v $t)"; done
  python3 --version; uptime; } > /tmp/rec/tools.txt 2>&1
cat /tmp/rec/tools.txt
resume=()
if [ -f build/resolution.jsonl ]; then cp build/resolution.jsonl /tmp/rec/resolution.jsonl; resume=(--resume /tmp/rec/resolution.jsonl); fi
( while sleep 30; do uptime; done ) > /tmp/rec/load.txt 2>&1 &
timeout "$LIMIT" python3 -u benchmarks/resolution.py --runs "$RUNS" --jobs "$JOBS" --bins build/resolution-bins \
  --record /tmp/rec/resolution.jsonl "${resume[@]}" > /tmp/rec/table.txt 2> /tmp/rec/progress.txt
echo "campaign exit $?" >> /tmp/rec/table.txt
kill %1 2>/dev/null
cp /tmp/rec/* "$OUT/"
tail -12 /tmp/rec/table.txt; tail -5 /tmp/rec/progress.txt; wc -l < /tmp/rec/resolution.jsonl
