#!/usr/bin/env bash
# Renders the test logs in tests/data/cuzk-real/ through the real tracing-subscriber (see README.md).
# Needs cargo and Debian's librust-tracing-subscriber-dev (apt-get install librust-tracing-subscriber-dev).
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release --quiet
bin=target/release/cuzk_core
out=../data/cuzk-real
mkdir -p "$out"
rm -f "$out"/*.log "$out"/*.manifest
# three runs appended to one log, as restarts do (`>> log 2>&1`): two GPUs, two workers each, ANSI on;
# C++ lines every few microseconds from another thread cut some TIMELINE lines
for run in "1 0" "2 0" "3 1"; do
  set -- $run
  "$bin" gpus=2 jobs=3 partitions=6 seed="$1" pinned="$2" noise=3 manifest="$out/two-gpu-three-runs.manifest" \
    >> "$out/two-gpu-three-runs.log" 2>&1
done
# one GPU, NO_COLOR
NO_COLOR=1 "$bin" gpus=1 jobs=2 partitions=6 seed=4 noise=3 manifest="$out/one-gpu-nocolor.manifest" \
  >> "$out/one-gpu-nocolor.log" 2>&1
# the engine's start alone, in both shapes (which GPU workers a build runs): two GPUs with two pipeline
# workers each, appended to by one GPU's monolithic worker, as a restart with pipeline.enabled = false does
"$bin" starts=pipeline gpus=2 workers=2 >> "$out/engine-starts.log" 2>&1
"$bin" starts=monolithic gpus=1 >> "$out/engine-starts.log" 2>&1
wc -c "$out"/*
