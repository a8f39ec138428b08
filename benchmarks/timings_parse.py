#!/usr/bin/env python3
"""Parse speed and peak memory of `swapctl timings` on a large generated cuzk log, beside `grep -c`.

The log is made from real stand-in output captured on the H200 (tests/data/h200-run/), its numbers
varied, repeated to the size asked for. Goal: >= 50 MB/s and < 200 MB peak RSS on 1 GB.
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
SOURCE = ROOT / "tests" / "data" / "h200-run"


def generate(path: Path, megabytes: int) -> None:
    lines = []
    for name in ("pageable.log", "pinned.log"):
        lines += (SOURCE / name).read_bytes().splitlines(keepends=True)
    rng = random.Random(7)
    number = re.compile(rb"(?<=[=,])(\d+)(?=ms|\b)")
    variants = [number.sub(lambda m: str(int(int(m.group(1)) * rng.uniform(0.5, 1.5))).encode(), line)
                for line in lines for _ in range(3)]
    block = b"".join(variants)
    with open(path, "wb") as f:
        written = 0
        while written < megabytes << 20:
            f.write(block)
            written += len(block)


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
                "print(t['lines'], t['phases']['ntt_kernels']['count'], seen[0], peak(), kids, os.cpu_count())")
        seconds, _, out = run_child(code)
        start = time.perf_counter()
        grep = subprocess.run(["grep", "-c", "CUZK_NTT_H", str(log)], capture_output=True, text=True)
        grep_s = time.perf_counter() - start
    lines, ntt, during, me, kids, cores = out.split()
    during_mib, me_mib, kid_mib, cores = int(during) / 1024, int(me) / 1024, int(kids) / 1024, int(cores)
    # at once: the parent and its workers while they parse, or the parent alone while it merges after them
    # (an upper bound: pages a worker shares with the parent count twice)
    peak = max(during_mib + kid_mib * cores, me_mib)
    assert int(grep.stdout) == int(ntt), "the parser and grep disagree on the CUZK_NTT_H lines"
    print(f"log: {size_mb:.0f} MB, {int(lines):,} lines, {int(ntt):,} ntt_kernels values")
    print(f"swapctl timings: {seconds:.1f} s, {size_mb / seconds:.0f} MB/s on {cores} cores; peak RSS {peak:.0f} MiB "
          f"at once (parent {during_mib:.0f} + {cores} workers x {kid_mib:.0f} while parsing; parent {me_mib:.0f} "
          f"merging after them)")
    print(f"grep -c:         {grep_s:.1f} s, {size_mb / grep_s:.0f} MB/s  (swapctl takes {seconds / grep_s:.1f}x)")
    print(f"goals (>= 50 MB/s, < 200 MB peak RSS): "
          f"{'met' if size_mb / seconds >= 50 and peak < 200 else 'NOT met'}")


if __name__ == "__main__":
    main()
