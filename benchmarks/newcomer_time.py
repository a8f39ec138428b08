#!/usr/bin/env python3
"""How long the docs' experiment takes on a fresh sandbox (issue 47: a verdict in under 2 minutes by default).

Each run is what a newcomer does in a fresh clone: `swapctl sandbox up` (a new sandbox directory, its
`./swapctl.toml` a link to the sandbox's playbook, as scripts/quickstart leaves it), then docs/commands.md's
`swapctl experiment sandbox --binary .sandbox/builds/prover-b --report exp.html` (with --yes: there is no
terminal here, so `--then ask` rolls B back), then `sandbox down`. It times the whole experiment and, from
the moment each of its stderr lines arrived, its parts: the baseline (the command's start to B's plan),
B's swap and window (to the warm-up line said once the window ends; the experiment says nothing of the swap
itself) and the rest (the verdict, the rollback, the report, the exit). Also the sandbox's own `up`.

Usage: python3 benchmarks/newcomer_time.py [--runs 3] [--out benchmarks/results/newcomer_time]
    (root, as the sandbox is a host of its own only as root; needs sshd, g++; run it under the test lock:
    flock /tmp/swapctl-test.lock ...)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from swapctl.sandbox import free_port  # noqa: E402

GOAL_S = 120.0  # issue 47: a verdict within 2 minutes on the sandbox by default
# the experiment's stderr lines that end each part, in the order they come
MARKS = (("baseline", re.compile(r"^─+ sandbox: deploy plan ─+$")),
         ("B's swap and window", re.compile(r"^warm-up: ")))


def swapctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swapctl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def timed_experiment(clone: Path) -> dict:
    """The docs' experiment, each stderr line stamped as it arrives: its seconds, its parts, what it said."""
    argv = [sys.executable, "-m", "swapctl", "experiment", "sandbox", "--binary", ".sandbox/builds/prover-b",
            "--report", "exp.html", "--yes"]
    began = time.monotonic()
    proc = subprocess.Popen(argv, cwd=clone, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.monotonic() - began, x.rstrip("\n"))
                                                          for x in proc.stderr or ()), daemon=True)
    reader.start()
    out = proc.stdout.read() if proc.stdout else ""  # stderr is the reader's: communicate() would read it too
    proc.wait(timeout=900)
    seconds = time.monotonic() - began
    reader.join()
    parts, last = {}, 0.0
    for name, mark in MARKS:
        at = next((t for t, x in lines if mark.search(x)), None)
        parts[name] = None if at is None else round(at - last, 2)
        last = at if at is not None else last
    parts["verdict, rollback, report"] = round(seconds - last, 2)
    verdict = re.search(r"^(verdict: .+|no verdict: .+)$", out, re.M)
    proofs = re.search(r"^\s+proofs\s+(\d+)\s+(\d+)", out, re.M)
    report = clone / "exp.html"
    window = re.search(r"<td>(\d+) s window</td>", report.read_text()) if report.exists() else None
    return {"seconds": round(seconds, 2), "rc": proc.returncode, "parts_s": parts,
            "verdict": verdict[1] if verdict else None,
            "proofs": {"before": int(proofs[1]), "B": int(proofs[2])} if proofs else None,
            "rolled_back": any("rolled back;" in x for _, x in lines),
            "report_window_s": int(window[1]) if window else None,  # B's window, as the report gives it
            "stderr": [f"{t:7.2f} {x}" for t, x in lines]}


def one_run(base: Path, n: int) -> dict:
    """A fresh clone's directory and sandbox, the experiment, the sandbox down."""
    clone = base / f"clone-{n}"
    clone.mkdir()
    env_state = {"XDG_STATE_HOME": str(clone / "state"), "XDG_CACHE_HOME": str(clone / "cache")}
    os.environ.update(env_state)
    try:
        began = time.monotonic()
        up = swapctl("sandbox", "up", "--port", str(free_port()), cwd=clone)
        up_s = time.monotonic() - began
        if up.returncode:
            return {"rc": up.returncode, "error": up.stderr.strip()[-500:]}
        (clone / "swapctl.toml").symlink_to(".sandbox/swapctl.toml")
        return {"sandbox_up_s": round(up_s, 2), **timed_experiment(clone)}
    finally:
        swapctl("sandbox", "down", cwd=clone)


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    return {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "python": platform.python_version(),
            "loadavg": os.getloadavg(), "root": os.geteuid() == 0}


def commit() -> dict:
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.split("\n")
    return {"head": head, "modified_files": sorted(x[3:] for x in dirty if x.strip())}


def table(runs: list[dict], when: str, where: dict, rev: dict) -> str:
    head = ("| run | sandbox up s | experiment s | baseline s | B's swap and window s | B's window s (report) "
            "| verdict, rollback, report s | exit | proofs before / B | verdict |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = [f"| {i} | {r.get('sandbox_up_s', '-')} | {r.get('seconds', '-')} | "
            + " | ".join(str(v) for v in [*list(r.get("parts_s", {}).values())[:2], r.get("report_window_s"),
                                          *list(r.get("parts_s", {}).values())[2:]])
            + f" | {r['rc']} | {(r.get('proofs') or {}).get('before', '-')} / {(r.get('proofs') or {}).get('B', '-')} "
              f"| {(r.get('verdict') or r.get('error') or '-').replace('|', '/')} |" for i, r in enumerate(runs, 1)]
    took = [r["seconds"] for r in runs if "seconds" in r]
    summary = (f"median {statistics.median(took):.1f} s, max {max(took):.1f} s; {sum(t < GOAL_S for t in took)} of "
               f"{len(runs)} under {GOAL_S:.0f} s with a verdict and exit 0: "
               f"{sum(r['rc'] == 0 and (r.get('verdict') or '').startswith('verdict:') for r in runs)}") if took else ""
    return (f"The docs' experiment on a fresh sandbox, {when}, {where['cpus']} cores ({where['cpu']}), load "
            f"{where['loadavg'][0]:.2f} at the start, commit {rev['head'][:12]}"
            f"{' with ' + str(len(rev['modified_files'])) + ' files modified' if rev['modified_files'] else ''}: "
            f"{summary}\n\n{head}\n" + "\n".join(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="fresh sandboxes, one experiment each")
    ap.add_argument("--out", type=Path, help="write OUT.json (every run) and OUT.md (the table)")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="swapctl-newcomer-bench-"))
    began, where, rev = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), machine(), commit()
    runs = []
    try:
        for n in range(1, a.runs + 1):
            runs.append(one_run(base, n))
            print(json.dumps(runs[-1]), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = table(runs, began, where, rev)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.with_suffix(".json").write_text(json.dumps(
            {"began": began, "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "goal_s": GOAL_S,
             "machine": where, "commit": rev, "command": "swapctl experiment sandbox --binary "
             ".sandbox/builds/prover-b --report exp.html --yes", "runs": runs}, indent=1) + "\n")
        a.out.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
