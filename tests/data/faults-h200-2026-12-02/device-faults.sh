#!/usr/bin/env bash
# On the device machine: set up sshd and wheels (gpu-run.sh --setup), ip/tc if missing, then 5 fault
# campaigns of 60 runs each at once (300 runs), each writing its table and its per-run lines to $OUT.
set -u
cd "$(dirname "$0")"
bash scripts/gpu-run.sh --setup > "$OUT/setup.txt" 2>&1 || { cat "$OUT/setup.txt"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PATH="/tmp/bin:$PATH"
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  for f in .debs-x/*.deb; do dpkg -x "$f" /tmp/ipr; done
  libs=/tmp/ipr/usr/lib/x86_64-linux-gnu:/tmp/ipr/lib/x86_64-linux-gnu
  for t in ip tc; do
    real=$(ls /tmp/ipr/usr/sbin/$t /tmp/ipr/sbin/$t /tmp/ipr/usr/bin/$t /tmp/ipr/bin/$t 2>/dev/null | head -1)
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$real" > /tmp/bin/$t; chmod +x /tmp/bin/$t
  done
fi
{ nproc; for t in ip tc unshare setpriv nsenter g++ sshd; do echo "$t: $(command -v $t)"; done
  ip netns add probe && ip netns del probe && echo "netns: ok"; python3 --version; } > "$OUT/tools.txt" 2>&1
cat "$OUT/tools.txt"
python3 -c "import sys; sys.path.insert(0, 'tests'); import promises" || exit 1
for s in 1 2 3 4 5; do
  timeout 520 python3 -u benchmarks/faults.py --runs 60 --seed "$s" --bins build/provers > "$OUT/faults-$s.txt" 2> "$OUT/faults-$s.err" &
  sleep 2
done
wait
for s in 1 2 3 4 5; do echo "== seed $s"; tail -n 25 "$OUT/faults-$s.txt"; tail -n 3 "$OUT/faults-$s.err"; done
