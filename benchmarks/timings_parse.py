#!/usr/bin/env python3
"""Parse speed and peak memory of `swapctl timings` on a large generated cuzk log, beside `grep -c`.

The log is made from the logs the real tracing-subscriber rendered from cuzk's own macro calls
(tests/data/cuzk-real/: ANSI colour, two GPUs, cut TIMELINE lines), its numbers varied, repeated to the
size asked for: each repeat is three more daemon runs. Goal: >= 50 MB/s and < 200 MB peak RSS on 1 GB.
Usage: python3 benchmarks/timings_parse.py [--mb 1024]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "cuzk-real"


def generate(path: Path, megabytes: int) -> None:
    """A daemon that runs long and restarts every ~100 MB of log: the first rendered run's lines again
    and again, its numbers varied and its TIMELINE offsets going on from where the last copy ended."""
    raw = (SOURCE / "two-gpu-three-runs.log").read_bytes()
    run = raw[:raw.index(b"cuzk-daemon starting", 100)]
    run = run[:run.rfind(b"\n") + 1].splitlines(keepends=True)
    # the renderer's noise thread wrote a C++ line every few microseconds to cut TIMELINE lines; a daemon
    # writes ~30 lines a partition: keep the cut lines and one noise line in 100
    noise = b"CUZK_TIMING: async_dealloc_ms=0\n"
    run = [line for i, line in enumerate(run) if line != noise or i % 100 == 0]
    start, body = run[:3], run[3:]  # starting, configuration loaded, ready
    span = max(int(m[1]) for m in map(OFFSET.match, body) if m) + 50
    rng = random.Random(7)
    # a phase value: `k_ms=N` (with or without its ANSI codes) or `k=Nms`; ids, GPUs and offsets stay
    number = re.compile(rb"(?:(?<=_ms=)|(?<=_ms\x1b\[0m\x1b\[2m=\x1b\[0m)|(?<==)(?=\d+ms\b))(\d+)")
    # copies with other numbers: one factor a copy, so a C++ call still matches its Rust line
    copies = []
    for _ in range(5):
        factor = rng.uniform(0.5, 1.5)
        copies.append([number.sub(lambda m, f=factor: str(int(int(m[1]) * f)).encode(), line) for line in body])
    with open(path, "wb") as f:
        written, since_start, k = 0, 1 << 40, 0
        while written < megabytes << 20:
            if since_start > 100 << 20:
                f.write(b"".join(start))
                since_start, shift = 0, 0
            block = b"".join(OFFSET.sub(lambda m, s=shift: b"TIMELINE,%d," % (int(m[1]) + s), line)
                             for line in copies[k % len(copies)])
            f.write(block)
            written, since_start, shift, k = written + len(block), since_start + len(block), shift + span, k + 1


OFFSET = re.compile(rb"^TIMELINE,(\d+),")


def run_child(code: str) -> tuple[float, float, str]:
    """Runs `code` in a fresh interpreter; returns (seconds, peak RSS MiB, its stdout)."""
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return seconds, peak, r.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "cuzk.log"
        generate(log, args.mb)
        size_mb = log.stat().st_size / 1e6
        # parse_files reads the file in pieces on every core (worker processes) and merges them
        # the parent's peak while the workers run is measured at their end (the pool's shutdown)
        code = ("import os, resource, concurrent.futures.process as cfp\nfrom swapctl.logs import timings\n"
                "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\nseen = []\n"
                "class Pool(cfp.ProcessPoolExecutor):\n"
                "    def shutdown(self, *a, **k):\n        super().shutdown(*a, **k); seen.append(peak())\n"
                "cfp.ProcessPoolExecutor = Pool\n"
                f"t = timings.parse_files([{str(log)!r}]).report()\n"
                "kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
                "print(t['lines'], t['phases']['ntt_kernels']['count'], seen[0], peak(), kids, os.cpu_count(),"
                " len(t['runs']))")
        seconds, _, out = run_child(code)
        start = time.perf_counter()
        grep = subprocess.run(["grep", "-c", "CUZK_NTT_H", str(log)], capture_output=True, text=True)
        grep_s = time.perf_counter() - start
    lines, ntt, during, me, kids, cores, runs = out.split()
    during_mib, me_mib, kid_mib, cores = int(during) / 1024, int(me) / 1024, int(kids) / 1024, int(cores)
    # at once: the parent and its workers while they parse, or the parent alone while it merges after them
    # (an upper bound: pages a worker shares with the parent count twice)
    peak = max(during_mib + kid_mib * cores, me_mib)
    assert int(grep.stdout) == int(ntt), "the parser and grep disagree on the CUZK_NTT_H lines"
    print(f"log: {size_mb:.0f} MB, {int(lines):,} lines, {int(ntt):,} ntt_kernels values, {int(runs):,} daemon runs")
    print(f"swapctl timings: {seconds:.1f} s, {size_mb / seconds:.0f} MB/s on {cores} cores; peak RSS {peak:.0f} MiB "
          f"at once (parent {during_mib:.0f} + {cores} workers x {kid_mib:.0f} while parsing; parent {me_mib:.0f} "
          f"merging after them)")
    print(f"grep -c:         {grep_s:.1f} s, {size_mb / grep_s:.0f} MB/s  (swapctl takes {seconds / grep_s:.1f}x)")
    print(f"goals (>= 50 MB/s, < 200 MB peak RSS): "
          f"{'met' if size_mb / seconds >= 50 and peak < 200 else 'NOT met'}")


if __name__ == "__main__":
    main()
