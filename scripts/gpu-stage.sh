#!/usr/bin/env bash
# Stages this worktree for the device tool, which sends only the checkout its session started in
# (/work/main here): a copy of what the GPU run needs, in that checkout's ignored build/ folder, for
# `carry: ["build/gpu-wt"]`; the command there starts with `cd build/gpu-wt`.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-/work/main/build/gpu-wt}
rm -rf "$dest" && mkdir -p "$dest"
(cd "$src" && tar -cf - --exclude=__pycache__ swapctl benchmarks images scripts pyproject.toml .whl .debs) | tar -xf - -C "$dest"
du -sh "$dest"
