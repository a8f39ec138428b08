#!/usr/bin/env python3
"""Fleet scaling: `status` and `deploy --parallel` on 8 hosts against 1 host, in one run.

Eight hosts, each its own sshd in its own network, mount and PID namespace (tests/lab.py), behind a
veth shaped to 100 Mbit/s (`tc ... tbf`), each running the stand-in prover started by hand. Each
figure is the wall time of the swapctl command, median of --runs runs.

All hosts share this machine's cores with the controller, and by default each runs this machine's
~/.bashrc for every remote command (160 ms of CPU here: pyenv init). --plain-bashrc gives each host an
empty one of its own (a bind mount in its mount namespace), as a GPU box without pyenv has: the hosts'
CPU then weighs less on the cores the controller needs.
Usage: python3 benchmarks/fleet.py [--hosts 8] [--runs 3] [--plain-bashrc]   (root; needs sshd, g++, tc)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from lab import NetnsLab, build_prover, prover_config, wait_until  # noqa: E402

DAEMON = "'^(\\./|/data/)cuzk '"


def swapctl(*args: str, env: dict) -> tuple[float, float]:
    """Wall seconds of the command, and the CPU seconds the controller (swapctl itself) used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "swapctl", *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"swapctl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def start_by_hand(servers, binary: Path) -> None:
    for s in servers:
        s.exec(f"pkill -9 -f {DAEMON}; rm -rf /data/.swapctl /data/cuzk /data/cuzk.log; true", check=False)
        shutil.copy(binary, s.data / "cuzk")
        (s.data / "cuzk.toml").write_text(prover_config())
        s.exec("cd /data && setsid ./cuzk --config /data/cuzk.toml >> /data/cuzk.log 2>&1 < /dev/null &")
    for s in servers:
        wait_until(lambda s=s: "ready" in (s.data / "cuzk.log").read_text(errors="replace"), what="ready")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--plain-bashrc", action="store_true", help="each host gets an empty ~/.bashrc")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="swapctl-fleet-"))
    builds = {t: build_prover(base / f"prover-{t}", TIMING="1", TAG=t) for t in ("a", "b", "c")}
    rc = None
    if args.plain_bashrc:
        rc = base / "bashrc"
        rc.write_text("# a GPU box's root shell: nothing to start\n")
    lab = NetnsLab(base, args.hosts, prefix="swb", bashrc=rc)
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state"), "XDG_CACHE_HOME": str(base / "cache")}
    try:
        lab.start()
        for s in lab.servers:
            subprocess.run(["tc", "qdisc", "add", "dev", f"{s.netns}h", "root", "tbf", "rate", "100mbit",
                            "burst", "256kb", "latency", "100ms"], check=True)
        book = base / "farm.toml"
        names = ", ".join(f'"gpu-{i}"' for i in range(args.hosts))
        book.write_text("".join(s.playbook(name=f"gpu-{i}") + "\n" for i, s in enumerate(lab.servers)) +
                        f"[groups]\nfarm = [{names}]\n\n[daemon]\nbinary = \"/data/cuzk\"\n"
                        'args = ["--config", "/data/cuzk.toml"]\nmatch = "/data/cuzk"\nlog = "/data/cuzk.log"\n'
                        "ready_timeout_s = 30\nstop_grace_s = 5\n\n[memory]\nrelease_timeout_s = 30\n")
        p = ["-p", str(book)]
        one_status, all_status, one_deploy, all_deploy = [], [], [], []
        for _ in range(args.runs):
            start_by_hand(lab.servers, builds["a"])
            one_status.append(swapctl("status", "gpu-0", *p, env=env))
            all_status.append(swapctl("status", "@farm", *p, env=env))
            one_deploy.append(swapctl("deploy", "gpu-0", "--binary", str(builds["b"]), "--yes", *p, env=env))
            all_deploy.append(swapctl("deploy", "@farm", "--binary", str(builds["c"]), "--parallel",
                                      str(args.hosts), "--yes", *p, env=env))
    finally:
        lab.close()
        shutil.rmtree(base, ignore_errors=True)

    med = statistics.median
    n = args.hosts
    shell = "an empty ~/.bashrc" if args.plain_bashrc else "this machine's ~/.bashrc"
    print(f"{n} hosts, each behind 100 Mbit/s, with {shell}; median of {args.runs}; wall time of the swapctl "
          "command, and the")
    print("CPU time of the controller (swapctl itself: SSH crypto, Python) beside it\n")
    print(f"  {'':24} {'1 host':>8} {f'{n} hosts':>8} {'ratio':>7}  {'goal':<16} {'controller CPU 1 / ' + str(n)}")
    for what, one, many in (("status", one_status, all_status), (f"deploy --parallel {n}", one_deploy, all_deploy)):
        w1, wn = med(x[0] for x in one), med(x[0] for x in many)
        c1, cn = med(x[1] for x in one), med(x[1] for x in many)
        ratio = wn / w1
        print(f"  {what:<24} {w1:>7.2f}s {wn:>7.2f}s {ratio:>6.2f}x  <= 1.5x: {'ok' if ratio <= 1.5 else 'MISSED':<7} "
              f"{c1:.2f} s / {cn:.2f} s")


if __name__ == "__main__":
    main()
