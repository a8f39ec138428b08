#!/usr/bin/env python3
"""The fault campaign (issue 27): random operations under random faults at random moments on a lab host.

Each run starts from a fresh host (tests/promises.py Host: a real sshd in its own network, mount and PID
namespace, /data a 32 MiB tmpfs, build A started by hand), lands 0-2 good deploys without a fault, then one
operation (a good, crashing or never-ready deploy, or a rollback) under one fault, fired when a chosen
line of swapctl's output appears or after a random delay: the controller SIGKILLed (also at the
"rolling back" line), SIGINT once and twice, SIGSTOP for 1-4 s, the link cut for 1-20 s, a silent
half-open connection (the controller dies while the link is down), a 256 kbit/s link (tc tbf), the
daemon killed, sshd's sessions killed (a restart), the disk full to its last byte, slow memory release.
Then every promise of tests/promises.py `check` (the same code as tests/test_promises.py).

Prints a table, fault x operation: runs, faults that landed inside the operation (fired while swapctl
still ran), violations by kind; then each violation. A benchmark, not a CI test: it takes ~5-10 s a run.
Needs root, sshd, tc, and g++ unless --bins names the prover builds. Several may run at once (each host's
namespaces are named by its pid). Usage: python3 benchmarks/faults.py [--runs 40] [--seed 1] [--only F,...] [--bins DIR]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from promises import GOOD, MOMENTS, Host, Model, Violation, builds, check, run  # noqa: E402

# fault name -> (the fault, the moments it may fire at, how long it lasts, the operations it is tried with)
OPS = [f"deploy:{b}" for b in GOOD] + ["deploy:crash", "deploy:noready", "rollback"]
CAMPAIGN: dict[str, tuple[str, tuple[str, ...], tuple[float, float], list[str]]] = {
    "ctl-kill": ("ctl-kill", (*MOMENTS, "+delay"), (0, 0), OPS),
    "ctl-kill at rolling back": ("ctl-kill", ("rollback",), (0, 0), ["deploy:crash", "deploy:noready"]),
    "sigint": ("sigint", (*MOMENTS, "+delay"), (0, 0), OPS),
    "sigint twice": ("sigint-twice", (*MOMENTS, "+delay"), (0, 0), OPS),
    "ctl-stop 1-4 s": ("ctl-stop", (*MOMENTS, "+delay"), (1, 4), OPS),
    "link cut 1-20 s": ("link-cut", (*MOMENTS, "+delay"), (1, 20), OPS),
    "half-open": ("half-open", (*MOMENTS, "+delay"), (0.5, 2), OPS),
    "slow link 256 kbit/s": ("slow-link", ("start",), (0, 0), OPS),
    "daemon killed": ("daemon-kill", (*MOMENTS, "+delay"), (0, 0), OPS),
    "sshd restart": ("sshd-restart", (*MOMENTS, "+delay"), (0, 0), OPS),
    "disk full": ("disk-full", (*MOMENTS, "+delay"), (0, 0), OPS),
    "slow memory release": ("slow-release", ("start",), (0, 0), OPS),
}


def one(host: Host, rng: random.Random, name: str) -> tuple[str, bool, list[Violation]]:
    fault, moments, holds, ops = CAMPAIGN[name]
    host.reset(slow_release=fault == "slow-release")
    model = Model()
    found: list[Violation] = []
    for _ in range(rng.randint(0, 2)):  # a history to roll back through
        build = rng.choice(GOOD)
        found += check(host, model, run(host, f"deploy:{build}"), _pid(host))
    op = rng.choice(ops)
    moment = rng.choice(moments)
    if moment == "+delay":
        moment = f"+{rng.uniform(0, 2.5):.2f}"
    pid = _pid(host)
    ran = run(host, op, fault, moment, hold=rng.uniform(*holds))
    found += check(host, model, ran, pid)
    return op, ran.landed, [Violation(v.kind, f"[{moment}] {v.detail}") for v in found]


def _pid(host: Host) -> int | None:
    d = host.daemons()
    return d[0].pid if len(d) == 1 else None


def table(rows: dict[tuple[str, str], list], kinds: Counter) -> str:
    out = ["| fault | operation | runs | landed | violations |", "| --- | --- | --- | --- | --- |"]
    for (fault, op), (runs, landed, by_kind) in sorted(rows.items()):
        vs = ", ".join(f"{k}: {n}" for k, n in by_kind.most_common()) or "0"
        out.append(f"| {fault} | {op} | {runs} | {landed} | {vs} |")
    total = sum(r[0] for r in rows.values()), sum(r[1] for r in rows.values())
    out.append(f"| all | all | {total[0]} | {total[1]} | {sum(kinds.values())} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated fault names of the campaign")
    ap.add_argument("--bins", type=Path, help="the prover builds, made already (on a machine without make or g++)")
    args = ap.parse_args()
    names = [n for n in CAMPAIGN if not args.only or n in args.only.split(",")]
    rng = random.Random(args.seed)
    rows: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0, Counter()])
    kinds: Counter[str] = Counter()
    details: list[str] = []
    broken = 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="swapctl-faults-") as tmp:
        host = Host(Path(tmp), builds(args.bins or Path(tmp) / "bin"), prefix="sfb")
        try:
            for i in range(args.runs):
                name = names[i % len(names)] if args.runs >= len(names) else rng.choice(names)
                op, landed, found = one(host, rng, name)
                row = rows[(name, op)]
                row[0] += 1
                row[1] += landed
                row[2].update(v.kind for v in found)
                kinds.update(v.kind for v in found)
                broken += bool(found)
                details += [f"run {i + 1} ({name}, {op}): {v.kind}: {v.detail}" for v in found]
                print(f"run {i + 1}/{args.runs}: {name} x {op}: {'landed' if landed else 'missed'}, "
                      f"{len(found)} violation(s)", *details[len(details) - len(found):], sep="\n  ",
                      file=sys.stderr, flush=True)  # each as it comes: a run cut short still says what it found
        finally:
            host.close()
    print(table(rows, kinds))
    print(f"\n{args.runs} runs (seed {args.seed}) in {time.monotonic() - t0:.0f} s: "
          f"{sum(r[1] for r in rows.values())} faults landed inside the operation, {broken} runs broke a promise "
          f"({sum(kinds.values())} violations)")
    for kind, n in kinds.most_common():
        print(f"- {kind}: {n}")
    if details:
        print("\nviolations:")
        print("\n".join(details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
