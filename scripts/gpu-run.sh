#!/usr/bin/env bash
# On a GPU machine with no network (the device tool's H200): bring up what swapctl needs from carried
# files, then run benchmarks/gpu_pinned_vs_pageable.py. Carried: .whl/ (Python wheels the image lacks,
# for Python 3.12) and .debs/ (Debian's OpenSSH packages, unpacked, not installed). See
# ../shared/gpu-machine.md for how this was worked out.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
root=/tmp/ssh-root
mkdir -p "$root" /tmp/bin /run/sshd
for f in .debs/*.deb; do dpkg -x "$f" "$root"; done
libs="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
for tool in usr/sbin/sshd usr/bin/ssh-keygen usr/bin/ssh; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$root/$tool" > "/tmp/bin/$(basename $tool)"
  chmod +x "/tmp/bin/$(basename $tool)"
done
id sshd >/dev/null 2>&1 || useradd -r -d /run/sshd -s /usr/sbin/nologin sshd
export PATH="/tmp/bin:$PATH:$(dirname "$(command -v nvidia-smi)")"
touch /var/run/utmp
nvidia-smi -L
python3 -u "${GPU_BENCH:-benchmarks/gpu_pinned_vs_pageable.py}" "$@"
