#!/usr/bin/env python3
"""Where the controller's CPU per host goes as a fleet grows (issue 34): `swapctl status @all` and
`swapctl fetch-logs @all` on the same N namespace hosts as benchmarks/fleet.py (a real sshd each, 100
Mbit/s), by turns, with each host's prover running and then with every prover stopped, so that the
hosts' own load (N provers and N sshd on this machine's cores) can be told from swapctl's own scaling.

Per N and case: wall, the controller's CPU (its own and its children's, wait4) and CPU per host, median of
--runs. `--profile DIR` also records one `status @all` per N and case with py-spy (raw stacks, 250 Hz,
without --idle; yet here threads blocked in a recv or waiting for a lock are sampled too, so a share is
of threads' time, not of CPU) and prints the share of samples by what the innermost frame was doing.
Usage: python3 benchmarks/fleet_cpu.py [--hosts 32,128] [--runs 3] [--profile DIR] [--py-spy PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet import DAEMON, ROOT, Tools, compiled, start_by_hand, timed  # noqa: E402

from lab import NetnsLab, build_prover  # noqa: E402

# What a sample was doing, read from its innermost frame (py-spy's raw format: `thread;frame;...;frame
# count`, a frame `function (path:line)`, the innermost last): the first place whose test holds.
PLACES = [
    ("logging's module lock (paramiko's get_logger)", lambda fn, path: fn == "_acquireLock"),
    ("paramiko's read loop after its recv timed out (its poll)",
     lambda fn, path: "paramiko" in path and fn in ("read_all", "_check_keepalive", "handshake_timed_out")),
    ("paramiko", lambda fn, path: "paramiko/" in path),
    ("cryptography", lambda fn, path: "cryptography/" in path or "nacl/" in path),
    ("rich", lambda fn, path: "rich/" in path),
    ("swapctl's own code", lambda fn, path: "swapctl/" in path),
    ("waiting for a module's import lock", lambda fn, path: fn == "_ModuleLock.acquire"),
    ("importing", lambda fn, path: "importlib" in path),
]


def profile(argv: list[str], env: dict, out: Path, spy: str) -> Counter[str]:
    subprocess.run([spy, "record", "--format", "raw", "-r", "250", "-o", str(out), "--", *argv], env=env,
                   check=True, capture_output=True)
    shares: Counter[str] = Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        fn, _, path = stack.rsplit(";", 1)[-1].partition(" (")
        shares[next((name for name, test in PLACES if test(fn, path)), "other")] += int(count)
    return shares


def one(n: int, args: argparse.Namespace, base: Path, build: Path, rc: Path, env: dict) -> dict[str, list]:
    (base / f"n{n}").mkdir()
    lab = NetnsLab(base / f"n{n}", n, prefix="swc", bashrc=rc)
    got: dict[str, list] = {}
    try:
        lab.start()
        for s in lab.servers:
            subprocess.run(["tc", "qdisc", "add", "dev", f"{s.netns}h", "root", "tbf", "rate", "100mbit",
                            "burst", "256kb", "latency", "100ms"], check=True)
        t = Tools(base / f"n{n}", lab, None, None)
        status = t.swapctl("status", "@all")
        fetch = t.swapctl("fetch-logs", "@all", "--dest", str(base / f"n{n}" / "logs"))
        for case in ("provers running", "provers stopped"):
            if case == "provers running":
                start_by_hand(lab.servers, build)
            else:
                for s in lab.servers:
                    s.exec(f"pkill -9 -f {DAEMON}; true", check=False)
            for _ in range(args.runs):
                got.setdefault(f"status, {case}", []).append(timed(status, env))
                got.setdefault(f"fetch-logs, {case}", []).append(timed(fetch, env))
            if args.profile:
                shares = profile(status, env, args.profile / f"status-n{n}-{case.split()[1]}.txt", args.py_spy)
                total = sum(shares.values()) or 1
                print(f"n={n} {case}: py-spy samples of status @all ({total} at 250 Hz):", flush=True)
                for place, k in shares.most_common():
                    print(f"  {k / total * 100:5.1f}%  {place}", flush=True)
    finally:
        for s in lab.servers:
            if s.proc:
                s.proc.kill()
        lab.close()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="32,128")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", type=Path, help="a directory for py-spy's stacks (one status per N and case)")
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    args = ap.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    compiled(ROOT)
    base = Path(tempfile.mkdtemp(prefix="swapctl-fleetcpu-"))
    rc = base / "bashrc"
    rc.write_text("# a GPU box's root shell: nothing to start\n")
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state"), "XDG_CACHE_HOME": str(base / "cache")}
    build = build_prover(base / "prover-a", TIMING="1", TAG="a")
    results = {}
    try:
        for n in (int(x) for x in args.hosts.split(",")):
            results[n] = one(n, args, base, build, rc, env)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"\nmedian of {args.runs}; CPU = the controller and its children (wait4)")
    print(f"{'N':>4}  {'command, hosts':<30} {'wall s':>7} {'CPU s':>6} {'CPU/host ms':>12}")
    for n, got in results.items():
        for name, runs in got.items():
            wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            print(f"{n:>4}  {name:<30} {wall:7.2f} {cpu:6.2f} {cpu / n * 1000:12.1f}")


if __name__ == "__main__":
    main()
