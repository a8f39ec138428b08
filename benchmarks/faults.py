#!/usr/bin/env python3
"""The fault campaign (issue 27): random operations under random faults at random moments on a lab host.

Each run starts from a fresh host (tests/promises.py Host: a real sshd in its own network, mount and PID
namespace, /data a 32 MiB tmpfs, build A started by hand), lands 0-2 steps without a fault (a good deploy,
or the daemon dying on its own and staying dead), then one operation (a good, crashing or never-ready
deploy, a deploy of the build the binary path holds, or a rollback) under one fault, fired when a chosen
line of swapctl's output appears or after a random delay: the controller SIGKILLed (also at the
"rolling back" line), SIGINT once and twice, SIGSTOP for 1-4 s, the link cut for 1-20 s, a silent
half-open connection (the controller dies while the link is down), a 256 kbit/s link (tc tbf), the
daemon killed, sshd's sessions killed (a restart), the disk full to its last byte, slow memory release.
Then every promise of tests/promises.py `check` (the same code as tests/test_promises.py), among them that
every daemon runs with the first one's command line, cwd, environment and user (issue 44).

Prints a table, fault x operation: runs, faults that landed inside the operation (fired while swapctl
still ran), violations by kind; then each violation. A benchmark, not a CI test: it takes ~5-10 s a run.
Needs root, sshd, tc, and g++ unless --bins names the prover builds. `--jobs J` runs J hosts at once, each
in a process of its own (its namespaces named by its pid). Run i draws from its own generator (seed/i):
the same run whatever --jobs, and a campaign cut short goes on from its --record with --resume. Usage:
python3 benchmarks/faults.py [--runs 40] [--seed 1] [--jobs 1] [--record F] [--resume F] [--only F,...] [--bins DIR]
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from promises import CORDON_MOMENTS, GOOD, MOMENTS, Host, Model, Violation, builds, check, run  # noqa: E402

# fault name -> (the fault, the moments it may fire at, how long it lasts, the operations it is tried with)
OPS = [f"deploy:{b}" for b in GOOD] + ["deploy:crash", "deploy:noready", "rollback", "deploy:same"]
HISTORY = [f"deploy:{b}" for b in GOOD] + ["die"]  # the steps before the faulted one
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


def one(host: Host, rng: random.Random, name: str) -> tuple[str, bool, list[Violation], str]:
    """Run i: a fresh host, up to two steps of history, then the faulted step; its op, whether the fault
    landed, what broke, and where anything did, the faulted step's stderr (a hung controller's stacks too)."""
    fault, moments, holds, ops = CAMPAIGN[name]
    host.reset(slow_release=fault == "slow-release")
    model = Model()
    found: list[Violation] = []
    for _ in range(rng.randint(0, 2)):  # a history to roll back through
        pid = _pid(host)
        found += check(host, model, run(host, rng.choice(HISTORY)), pid)
    op = rng.choice(ops)
    moment = rng.choice((*moments, *CORDON_MOMENTS) if host.curio and "+delay" in moments else moments)
    if moment == "+delay":
        moment = f"+{rng.uniform(0, 2.5):.2f}"
    pid = _pid(host)
    ran = run(host, op, fault, moment, hold=rng.uniform(*holds))
    found += check(host, model, ran, pid)
    said = ran.stderr[-8000:] if found else ""
    return op, ran.landed, [Violation(v.kind, f"[{moment}] {v.detail}") for v in found], said


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


def fault_of(names: list[str], runs: int, seed: int, i: int) -> str:
    """Run i's fault: each in turn (every fault as often as any other), or drawn where the runs are fewer."""
    return names[i % len(names)] if runs >= len(names) else random.Random(f"{seed}/{i}/fault").choice(names)


def _cut(*_: object) -> None:
    """The campaign cut short (`timeout` TERMs the whole group, then the campaign its workers): the first
    TERM ends the run, and a second cannot interrupt the host's closing."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(143)


def worker(args: argparse.Namespace, names: list[str]) -> None:
    """Runs i = part, part + parts, ... of the campaign, each on a fresh host and from its own generator
    (seed/i), so run i is the same run however the campaign is split; a JSON line per run on stdout."""
    part, parts = (int(x) for x in args.worker.split("/"))
    signal.signal(signal.SIGTERM, _cut)
    with tempfile.TemporaryDirectory(prefix="swapctl-faults-") as tmp:
        host = Host(Path(tmp), builds(args.bins or Path(tmp) / "bin"), prefix="sfb", curio=args.cordon)
        try:
            done = {r["i"] for r in _records(args.resume)}
            for i in range(args.first + part, args.runs, parts):
                if i in done:
                    continue
                name = fault_of(names, args.runs, args.seed, i)
                op, landed, found, said = one(host, random.Random(f"{args.seed}/{i}"), name)
                print(json.dumps({"i": i, "fault": name, "op": op, "landed": landed,
                                  "violations": [[v.kind, v.detail] for v in found],
                                  **({"stderr": said} if said else {})}), flush=True)
        finally:
            host.close()


def _records(path: Path | None) -> list[dict]:
    """The runs a campaign's --record file holds (a campaign cut short goes on from it with --resume)."""
    if not path or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Tally:
    """The campaign's results as they come: the table's rows, violations by kind, and each violation."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0, Counter()])
        self.kinds: Counter[str] = Counter()
        self.details: list[str] = []
        self.done = self.broken = 0

    def add(self, r: dict) -> list[str]:
        """Counts run `r` (a worker's JSON line); returns its violations' lines."""
        found = [Violation(k, d) for k, d in r["violations"]]
        row = self.rows[(r["fault"], r["op"])]
        row[0] += 1
        row[1] += r["landed"]
        row[2].update(v.kind for v in found)
        self.kinds.update(v.kind for v in found)
        self.done += 1
        self.broken += bool(found)
        lines = [f"run {r['i'] + 1} ({r['fault']}, {r['op']}): {v.kind}: {v.detail}" for v in found]
        self.details += lines
        return lines


def collect(procs: list[subprocess.Popen], record: IO[str] | None, each: Callable[[dict], None]) -> bool:
    """The workers' JSON lines as they come, each appended to `record` and handed to `each`, until every
    worker has ended; True when a TERM (`timeout`) cut the campaign short. The workers are ended either way."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read(out: IO[str]) -> None:
        for line in out:
            lines.put(line)
        lines.put(None)  # this worker has ended

    for proc in procs:
        assert proc.stdout is not None
        threading.Thread(target=read, args=(proc.stdout,), daemon=True).start()
    signal.signal(signal.SIGTERM, _cut)  # `timeout` ends it: the table of what came back
    try:
        ended = 0
        while ended < len(procs):
            try:
                line = lines.get(timeout=1)  # a timeout, so a TERM is handled while it waits
            except queue.Empty:
                continue
            if line is None:
                ended += 1
                continue
            if record:
                print(line.strip(), file=record, flush=True)
            each(json.loads(line))
    except SystemExit:
        return True
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="hosts at once, each a process of its own")
    ap.add_argument("--first", type=int, default=0, help="begin at this run (a campaign split across machines)")
    ap.add_argument("--only", default="", help="comma-separated fault names of the campaign")
    ap.add_argument("--bins", type=Path, help="the prover builds, made already (on a machine without make or g++)")
    ap.add_argument("--cordon", action="store_true",
                    help="every host's daemon fed by a Curio node, every swap cordoning it (tests/promises_curio.py)")
    ap.add_argument("--record", type=Path, help="append each run's result here, a JSON line each")
    ap.add_argument("--resume", type=Path, help="a --record file: its runs are counted, not run again")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # PART/PARTS: one of --jobs' processes
    args = ap.parse_args()
    names = [n for n in CAMPAIGN if not args.only or n in args.only.split(",")]
    if args.worker:
        worker(args, names)
        return 0
    # built once here, not by every worker (make -C: an absolute path)
    args.bins = (args.bins or Path(tempfile.mkdtemp(prefix="swapctl-faults-bins-"))).resolve()
    builds(args.bins)
    tally, t0 = Tally(), time.monotonic()
    for r in _records(args.resume):
        tally.add(r)
    resumed = tally.done
    own = ["--runs", str(args.runs), "--seed", str(args.seed), "--first", str(args.first), "--only", args.only,
           "--bins", str(args.bins), *(["--resume", str(args.resume)] if args.resume else []),
           *(["--cordon"] if args.cordon else [])]
    procs = [subprocess.Popen([sys.executable, "-u", __file__, *own, f"--worker={k}/{args.jobs}"],
                              stdout=subprocess.PIPE, text=True) for k in range(args.jobs)]
    record = args.record.open("a") if args.record else None
    total = args.runs - args.first

    def said(r: dict) -> None:
        found = tally.add(r)
        print(f"run {r['i'] + 1} ({tally.done} of {total} done): {r['fault']} x {r['op']}: "
              f"{'landed' if r['landed'] else 'missed'}, {len(found)} violation(s)", *found, sep="\n  ",
              file=sys.stderr, flush=True)

    if collect(procs, record, said):
        print(f"cut short: {tally.done} of {total} runs done", file=sys.stderr)
    failed = [f"worker {k} exited {p.returncode}" for k, p in enumerate(procs) if p.returncode not in (0, 143, -15)]
    print(table(tally.rows, tally.kinds))
    earlier = f" ({resumed} of them from {args.resume}, run before)" if resumed else ""
    print(f"\n{tally.done} runs{earlier} (seed {args.seed}, runs {args.first + 1}-{args.runs}, {args.jobs} at once), "
          f"{tally.done - resumed} in {time.monotonic() - t0:.0f} s: {sum(r[1] for r in tally.rows.values())} faults "
          f"landed inside the operation, {tally.broken} runs broke a promise ({sum(tally.kinds.values())} violations)")
    for kind, n in tally.kinds.most_common():
        print(f"- {kind}: {n}")
    if tally.details:
        print("\nviolations:")
        print("\n".join(tally.details))
    if failed:  # a worker's error is the harness's: its runs are missing, not counted as kept promises
        print(f"\nthe campaign itself failed: {', '.join(failed)} (its error is above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
