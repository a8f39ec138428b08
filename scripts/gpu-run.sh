#!/usr/bin/env bash
# On a GPU machine with no network (the device tool's H200): bring up what swapctl needs from carried
# files, then run benchmarks/gpu_pinned_vs_pageable.py. Carried: .whl/ (the wheels scripts/gpu-wheels.txt
# names, for Python 3.12) and .debs/ (the Debian packages scripts/gpu-debs.txt names: OpenSSH, unpacked,
# not installed). See ../shared/gpu-machine.md for how this was worked out.
#   bash scripts/gpu-run.sh --fetch     here, with network: download .whl/ and .debs/
#   bash scripts/gpu-run.sh --setup     there: only bring up Python packages and OpenSSH
#   bash scripts/gpu-run.sh [ARGS]      there: set up, then the benchmark with ARGS
#                                       ($GPU_BENCH, default benchmarks/gpu_pinned_vs_pageable.py)
# Running it again changes nothing and warns of nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
names() { grep -o '^[A-Za-z0-9._-]\+' "$1"; }
wheel_name() { sed 's/-[0-9].*//' | tr 'A-Z.-' 'a-z__'; }  # PyNaCl or pynacl-1.6.2-cp38-...whl: pynacl

if [ "${1:-}" = --fetch ]; then
  rm -rf .whl .debs && mkdir -p .whl .debs
  # resolved together, so the versions fit each other; the list names every wheel that comes
  python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d .whl -r scripts/gpu-wheels.txt
  extra=$(comm -13 <(names scripts/gpu-wheels.txt | wheel_name | sort) <(ls .whl | wheel_name | sort))
  [ -z "$extra" ] || { echo "scripts/gpu-wheels.txt does not name $(echo $extra): add them" >&2; exit 1; }
  # as root, apt's download sandbox user cannot write here; it is a download, not an install
  (cd .debs && apt-get -q -o APT::Sandbox::User=root download $(names ../scripts/gpu-debs.txt) >/dev/null)
  echo "fetched $(ls .whl | wc -l) wheels into .whl/ and $(ls .debs | wc -l) packages into .debs/"
  exit 0
fi

# Everything the lists name must be there before anything is touched: one line saying what is not.
missing=()
for dir in .whl .debs; do [ -d "$dir" ] || missing+=("$dir/ (absent)"); done
have=$(ls .whl 2>/dev/null | grep '\.whl$' | wheel_name || true)
[ -d .whl ] && for w in $(names scripts/gpu-wheels.txt); do
  grep -qx "$(wheel_name <<<"$w")" <<<"$have" || missing+=(".whl/$w")
done
[ -d .debs ] && for d in $(names scripts/gpu-debs.txt); do
  compgen -G ".debs/${d}_*.deb" >/dev/null || missing+=(".debs/$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-run.sh: missing ${missing[*]}; fetch them on a machine with network: bash scripts/gpu-run.sh --fetch" >&2
  exit 2
fi

python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
  --root-user-action=ignore --target /tmp/site .whl/*.whl
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
if [ "${1:-}" = --setup ]; then
  python3 -m swapctl --version && sshd -V 2>&1 | head -1
  echo "set up: PYTHONPATH=$PYTHONPATH PATH=$PATH"
  exit 0
fi
nvidia-smi -L
python3 -u "${GPU_BENCH:-benchmarks/gpu_pinned_vs_pageable.py}" "$@"
