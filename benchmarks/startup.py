#!/usr/bin/env python3
"""Start-up: what swapctl costs before it does anything, against the tools one would use instead (issue 23).

Two ratios, each the median of --pairs interleaved pairs (one run of each, back to back, so load on a
shared machine falls on both alike):
- `swapctl --help` against the same venv's bare `python -c pass` (goal <= 8x);
- `swapctl status HOST` against a hand `ssh HOST 'ps ...; cat /proc/meminfo; df; who; nvidia-smi'` to the
  same real sshd on loopback (goal <= 1.3x). The host runs no daemon: both read the same things.
Wall-clock times of whole processes, as a person at a terminal waits for them (the ratios), and beside
them each process's CPU time (for ssh: the client's only; sshd's and the host shell's are not counted).
Usage: python3 benchmarks/startup.py [--pairs N]   (needs sshd and ssh)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from swapctl.sandbox import make_server  # noqa: E402

PROBE = "ps -ww -eo pid,ppid,user,etimes,rss,args; cat /proc/meminfo; df -P; who; nvidia-smi"


def compiled(tree: Path) -> None:
    """swapctl's bytecode, as pip writes it when it installs swapctl: this machine's Python runs with
    PYTHONDONTWRITEBYTECODE=1, and an editable checkout would otherwise compile every module on every run
    (0.08 s of a `status HOST` here), which no installed swapctl does."""
    import compileall

    compileall.compile_dir(str(tree / "swapctl"), quiet=1)


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    """Wall seconds, and the CPU seconds of the process (user + system, the OS's accounting: what the
    process itself used, which load from others on the machine moves far less than its wall time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    secs = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 127) and "nvidia-smi" not in done.stderr:  # no GPU here: ssh's probe says so
        sys.exit(f"{argv[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return secs, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def pairs(a: list[str], b: list[str], n: int, env: dict) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    timed(a, env), timed(b, env)  # warm the page cache and sshd once; not counted
    ta, tb = [], []
    for _ in range(n):
        ta.append(timed(a, env))
        tb.append(timed(b, env))
    return ta, tb


def row(name: str, ref_name: str, t: list[tuple[float, float]], ref: list[tuple[float, float]], goal: float) -> str:
    med = statistics.median
    mt, mr = med(x[0] for x in t), med(x[0] for x in ref)
    ratio = med(x[0] / y[0] for x, y in zip(t, ref, strict=False))
    return (f"{name:<22} {mt * 1000:5.0f} ms (CPU {med(x[1] for x in t) * 1000:4.0f})   {ref_name:<26} "
            f"{mr * 1000:5.0f} ms (CPU {med(x[1] for x in ref) * 1000:4.0f})   "
            f"{ratio:5.2f}x  (goal <= {goal:g}x{'' if ratio <= goal else ', NOT met'})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=7)
    args = ap.parse_args()
    bindir = Path(sys.executable).parent
    compiled(ROOT)
    swapctl = str(bindir / "swapctl") if (bindir / "swapctl").exists() else None
    base = [swapctl] if swapctl else [sys.executable, "-m", "swapctl"]
    with tempfile.TemporaryDirectory(prefix="swapctl-startup-") as tmp:
        tmp = Path(tmp)
        home = tmp / "home"
        home.mkdir()
        env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
               "XDG_CACHE_HOME": str(home / "cache"), "PYTHONPATH": str(ROOT)}
        env.pop("SWAPCTL_PLAYBOOK", None), env.pop("SWAPCTL_INVENTORY", None)
        server = make_server(tmp / "host")
        server.start()
        try:
            server.trust()
            playbook = tmp / "swapctl.toml"
            playbook.write_text(server.playbook("lab", daemon={"binary": str(server.data / "cuzk"), "match": "cuzk"}))
            ssh = ["ssh", "-F", "/dev/null", "-q", "-p", str(server.port), "-i", str(server.client_key),
                   "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={server.known_hosts}",
                   "-o", "StrictHostKeyChecking=yes", f"root@{server.address}", PROBE]
            bare = [sys.executable, "-c", "pass"]
            th, tp = pairs([*base, "--help"], bare, args.pairs, env)
            ts, tssh = pairs([*base, "status", "lab", "-p", str(playbook)], ssh, args.pairs, env)
        finally:
            server.stop()
    print(f"start-up, median of {args.pairs} interleaved pairs ({os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}); wall time, the process's own CPU time in brackets:")
    print(row("swapctl --help", "python -c pass", th, tp, 8))
    print(row("swapctl status HOST", "ssh HOST 'ps; meminfo...'", ts, tssh, 1.3))


if __name__ == "__main__":
    main()
