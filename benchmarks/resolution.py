#!/usr/bin/env python3
"""The experiment's resolution, end to end (issue 34): repeated `swapctl experiment --resolve 3%` runs on a
lab host, against builds whose NTT kernels take a known 0%, 3% and 10% longer, and how often each verdict
says ntt_kernels moved.

Each run starts from a fresh lab host (tests/promises.py Host: a real sshd in its own network, mount and PID
namespace) running build A, started by hand, proving without end; the stand-in's NTT kernels vary
partition to partition (gpu_jitter_pct, a normal spread), as real kernels do and a sleep does not. After
--baseline-s of A's proofs, `swapctl experiment lab --binary B --resolve 3% --then rollback --json` runs:
it plans B's window from A's spread, looks at it four times (ending at the first look where a headline
phase moved, at 0.05 / 4) and judges. Recorded per run: the verdict on ntt_kernels (moved or `~`, its
change and interval), the proofs the experiment said B needs, the proofs B made, the resolution a `~`
states, and, from the same baseline, the proofs a single look at 0.05 would need (the window's length
against "the proofs the stated power needs").

Builds: A and B0 differ only in their tag (same speed), B3 and B10 take NTT_PCT=103 and 110 (make
NTT_PCT=...: the NTT kernels' compute, not the copy before them, so ntt_kernels itself moves slightly
less than that). Prints, per build: runs, verdicts that said it moved (with a 95% Clopper-Pearson
interval), the window's proofs against the needed, the stated resolution. Needs root, sshd, ip, tc, and
g++ unless --bins names the builds. `--jobs J` runs J hosts at once; run i is run i's build and seed
however the campaign is split; --record/--resume as benchmarks/faults.py. A benchmark, not a CI test:
~60 s a run. Usage:
python3 benchmarks/resolution.py [--runs 60] [--jobs 1] [--record F] [--resume F] [--bins DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from faults import _cut, _records, collect  # noqa: E402

from lab import build_prover, prover_config  # noqa: E402
from promises import Host  # noqa: E402

# build -> NTT_PCT; the share of the runs each gets (a change of 0 needs the most runs: its error rate is small)
BUILDS = {"b0": 100, "b3": 103, "b10": 110}
SHARE = ("b0", "b0", "b3", "b3", "b10")
CONFIG = dict(memory_mib=16, jobs=-1, partitions=4, partition_mib=1, synth_ms=200, gpu_ms=400)
JITTER_PCT = 2.0


def builds(where: Path) -> dict[str, Path]:
    out = {"a": build_prover(where / "prover-a", TIMING="1", TAG="a")}
    for b, pct in BUILDS.items():
        out[b] = build_prover(where / f"prover-{b}", TIMING="1", TAG=b, NTT_PCT=str(pct))
    return out


class ProvingHost(Host):
    """A lab host whose daemon proves without end, its NTT kernels spread as real ones are."""

    def write_config(self, slow_release: bool = False) -> None:
        (self.data / "cuzk.toml").write_text(prover_config(**CONFIG) + f"gpu_jitter_pct = {JITTER_PCT}\n")


def build_of(i: int) -> str:
    return SHARE[i % len(SHARE)]


def one(host: ProvingHost, build: str, baseline_s: float, for_s: float, dest: Path) -> dict:
    """One experiment of `build` against A on a fresh host; what its verdict said of ntt_kernels."""
    from swapctl.experiment import need, without_warmup
    from swapctl.logs.timings import parse

    host.reset()
    time.sleep(baseline_s)  # A's proofs: the baseline the window is planned from
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "swapctl", "experiment", "lab", "--binary", str(host.bins[build]), "--resolve",
            "3%", "--for", f"{for_s:g}s", "--then", "rollback", "--json", "--yes", "-p", str(host.playbook),
            "--dest", str(dest)]
    ran = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **host.env}, timeout=for_s + 300)
    r: dict = {"build": build, "code": ran.returncode, "seconds": round(time.monotonic() - t0, 1)}
    needs = re.search(r"B needs (\d+) proofs to resolve a 3% change in (\w+)", ran.stderr)
    r["needed"], r["phase"] = (int(needs[1]), needs[2]) if needs else (None, None)
    r["early"] = bool(re.search(r"moved at \d+ proofs \(a look of", ran.stderr))
    try:
        v = json.loads(ran.stdout)
    except json.JSONDecodeError:
        r["error"] = ran.stderr.strip().splitlines()[-3:]
        return r
    c = v["phases"].get("ntt_kernels", {})
    r.update(moved=bool(c.get("significant")), delta=c.get("delta"), low=c.get("low"), high=c.get("high"),
             p=c.get("p"), resolution=c.get("resolution"), proofs_a=v["before"]["proofs"],
             proofs_b=v["after"]["proofs"], summary=v["summary"])
    log = dest / "lab" / "cuzk.log"
    with open(log, "rb") as f:
        runs = parse([f]).runs
    base = without_warmup(runs[:1], 1)[0]  # A's run, from its start by hand to its stop: the baseline
    one_look = need(base, 0.03, 1)
    r["needed_one_look"] = one_look.proofs if one_look else None
    r["ntt_p50"] = [run.report()["phases"].get("ntt_kernels", {}).get("p50") for run in runs[:2]]
    return r


def worker(args: argparse.Namespace) -> None:
    part, parts = (int(x) for x in args.worker.split("/"))
    signal.signal(signal.SIGTERM, _cut)
    with tempfile.TemporaryDirectory(prefix="swapctl-resolution-") as tmp:
        host = ProvingHost(Path(tmp), builds(args.bins), prefix="srs", disk_mib=64)
        try:
            done = {r["i"] for r in _records(args.resume)}
            for i in range(part, args.runs, parts):
                if i in done:
                    continue
                dest = Path(tmp) / f"logs-{i}"
                r = one(host, build_of(i), args.baseline_s, args.for_s, dest)
                print(json.dumps({"i": i, **r}), flush=True)
        finally:
            host.close()


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of k successes in n: each end by bisection on a binomial tail."""
    from math import comb

    def at_most(j: int, p: float) -> float:  # P(X <= j), falling as p rises
        return sum(comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(j + 1))

    def where(f, target: float) -> float:  # the p at which the falling f(p) crosses target
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) > target else (lo, mid)
        return (lo + hi) / 2

    a = (1 - level) / 2
    low = 0.0 if k == 0 else where(lambda p: at_most(k - 1, p), 1 - a)  # P(X >= k) = a
    high = 1.0 if k == n else where(lambda p: at_most(k, p), a)  # P(X <= k) = a
    return low, high


def _median(xs: list[float]) -> float:
    return xs[len(xs) // 2]


def table(records: list[dict]) -> str:
    lines = [f"{'build':>6} {'NTT':>5} {'runs':>5} {'moved':>6} {'share moved [95% CI]':>24} {'ended early':>12} "
             f"{'B proofs / needed (1 look)':>27} {'stated resolution (~)':>22}"]
    for build, pct in BUILDS.items():
        rs = [r for r in records if r["build"] == build and "moved" in r]
        if not rs:
            continue
        k, n = sum(r["moved"] for r in rs), len(rs)
        low, high = clopper_pearson(k, n)
        ratios = sorted(r["proofs_b"] / r["needed_one_look"] for r in rs if r.get("needed_one_look"))
        res = sorted(r["resolution"] for r in rs if r.get("resolution") is not None)
        lines.append(f"{build:>6} {pct - 100:>+4}% {n:>5} {k:>6} {k / n:>9.2f} [{low:.2f}, {high:.2f}] "
                     f"{sum(r['early'] for r in rs):>12} "
                     f"{'-' if not ratios else f'median {_median(ratios):.2f}, max {ratios[-1]:.2f}':>27} "
                     f"{'-' if not res else f'median {_median(res) * 100:.1f}%':>22}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=1, help="hosts at once, each a process of its own")
    ap.add_argument("--baseline-s", type=float, default=30, help="A's proving before each experiment")
    ap.add_argument("--for-s", type=float, default=120, help="the window's upper bound (--for)")
    ap.add_argument("--bins", type=Path, help="the prover builds, made already (on a machine without make or g++)")
    ap.add_argument("--record", type=Path, help="append each run's result here, a JSON line each")
    ap.add_argument("--resume", type=Path, help="a --record file: its runs are counted, not run again")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.bins = (args.bins or Path(tempfile.mkdtemp(prefix="swapctl-resolution-bins-"))).resolve()
    if args.worker:
        worker(args)
        return 0
    builds(args.bins)
    records = _records(args.resume)
    own = ["--runs", str(args.runs), "--baseline-s", str(args.baseline_s), "--for-s", str(args.for_s),
           "--bins", str(args.bins), *(["--resume", str(args.resume)] if args.resume else [])]
    procs = [subprocess.Popen([sys.executable, "-u", __file__, *own, f"--worker={k}/{args.jobs}"],
                              stdout=subprocess.PIPE, text=True) for k in range(args.jobs)]
    record = args.record.open("a") if args.record else None
    t0 = time.monotonic()

    def said(r: dict) -> None:
        records.append(r)
        what = (f"moved {r['delta'] * 100:+.1f}%" if r.get("moved") else "~" if "moved" in r
                else f"no verdict (exit {r['code']}): {r.get('error')}")
        print(f"run {r['i'] + 1} ({len(records)} of {args.runs}): {r['build']}: {what}, B {r.get('proofs_b')} "
              f"proofs (needed {r.get('needed')}, one look {r.get('needed_one_look')}), {r['seconds']} s",
              file=sys.stderr, flush=True)

    cut = collect(procs, record, said)
    failed = [f"worker {k} exited {p.returncode}" for k, p in enumerate(procs) if p.returncode not in (0, 143, -15)]
    print(table(records))
    print(f"\n{len(records)} runs{' (cut short)' if cut else ''}, {args.jobs} at once, "
          f"{time.monotonic() - t0:.0f} s; {sum('moved' not in r for r in records)} without a verdict")
    if failed:
        print(f"\nthe campaign itself failed: {', '.join(failed)} (its error is above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
