#!/usr/bin/env python3
"""Swaps of a Curio-fed daemon, `stop = "term"`, `"drain"` and `"cordon"` by turns in one run (issue 43's
Numbers): proofs lost, Curio retries burned, PoSt tasks failed, cordon time and swap wall time per swap.

The farm lab of the tests (tests/curio_lab.py): a real PostgreSQL holding Curio's harmony tables, the Curio
node stand-in (images/curio/curio_node.py) feeding the box's daemon (the stand-in prover, images/prover) and the
`curio` CLI stand-in on the host; real sshd on loopback, swapctl run as a user runs it. The feeder inserts a
mix of PoRep, UpdateProve, WdPost and WinPost tasks in two shapes (docs/daemon.md): paced (one task every
--gap s) and saturating (the node's MaxPending 10 full and --backlog more kept waiting, no pause). The
node polls every --poll-s (Curio's pollRarely is 30 s; short here so that a run takes minutes).

Each figure has two readers: `lost` from the journal (proofs with work begun at the stop) against the
node's own record (its `retry`/`dropped` lines: every task whose Prove failed, queued ones included), and
that record against Curio's database (harmony_task_history rows with result = false in the swap's
window). A swap's window runs from the deploy's start to the node's first completed task after the
deploy (the new build proving), and the cordon's bound is poll + the longest task the node held at the
cordon (claim to end, its wait in cuzk's queue included) + the swap (the journal's stop, start, ready
steps) + the first proof after it.

Usage: python3 benchmarks/curio_drain.py [--swaps 10] [--shapes paced,saturating] [--poll-s 1]
    [--out benchmarks/results/curio_drain]   (root: postgres runs as the `postgres` user; needs sshd, g++,
    Debian's postgresql, psql; run it under the test lock: flock /tmp/swapctl-test.lock ...)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from curio_lab import Farm, NodeProc, Postgres, set_layer  # noqa: E402

from swapctl.sandbox import build_prover, free_port, make_server, prover_config, start_daemon  # noqa: E402

MODES = ("term", "drain", "cordon")
POST = ("WdPost", "WinPost")


def swapctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swapctl", *args], capture_output=True, text=True, timeout=600)


def journal(data: Path) -> list[dict]:
    return [json.loads(x) for x in (data / ".swapctl" / "cuzk" / "journal.jsonl").read_text().splitlines()]


class Lab:
    """One shape's farm: the box's daemon, the node feeding it, the feeder, and a playbook per mode."""

    def __init__(self, a: argparse.Namespace, shape: str, server, db: Postgres, builds: list[Path], base: Path):
        self.a, self.shape, self.db, self.builds = a, shape, db, builds
        self.dir = base / shape
        self.dir.mkdir(parents=True)
        self.farm = Farm(db, self.dir, builds[0])
        self.data = server.data / shape
        self.data.mkdir()
        port, status_port = free_port(), free_port()
        self.config = self.data / "cuzk.toml"
        self.config.write_text(prover_config(memory_mib=8, jobs=0, partitions=2, partition_mib=1,
                                             synth_ms=a.synth_ms, gpu_ms=a.synth_ms // 2)
                               + f'listen = "127.0.0.1:{port}"\nstatus_listen = "127.0.0.1:{status_port}"\n'
                               "srs_load_ms = 100\n")
        (self.data / "cuzk").write_bytes(builds[0].read_bytes())
        (self.data / "cuzk").chmod(0o755)
        set_layer(db, "cuzk", f'[Cuzk]\nAddress = "127.0.0.1:{port}"\n')
        self.first = start_daemon(self.data / "cuzk", self.config, self.data / "cuzk.log", self.data)
        self.node: NodeProc = self.farm.start_node(poll_s=a.poll_s, prep_s=a.prep_s, max_pending=10)
        curio = {"nodes": [self.node.listen], "cli": str(self.farm.bin / "curio"), "sql": a.psql,
                 "env": {k: v for k, v in db.env().items() if k.startswith("CURIO_DB_")}, "poll_s": a.poll_s,
                 "post_wait_s": a.post_wait_s}
        daemon = {"binary": str(self.data / "cuzk"), "args": ["--config", str(self.config)],
                  "match": re.escape(str(self.data / "cuzk")),  # not another engineer's cuzk on this machine
                  "log": str(self.data / "cuzk.log"), "ready_timeout_s": 60, "stop_grace_s": 5,
                  "status_url": f"http://127.0.0.1:{status_port}/status", "ready": "proof",
                  "drain_timeout": "stop"}
        self.playbooks = {}
        for mode in MODES:
            limit = a.cordon_timeout if mode == "cordon" else a.drain_timeout
            path = self.dir / f"swapctl-{mode}.toml"
            path.write_text(server.playbook(name="box", daemon={**daemon, "stop": mode, "drain_timeout_s": limit},
                                            memory={"release_timeout_s": 30, "min_available_gib": 0.5},
                                            curio=curio))
            self.playbooks[mode] = path
        load = {"gap_s": a.gap} if shape == "paced" else {"backlog": a.backlog}
        self.feeder = self.farm.feed(mix=a.mix, **load)
        self.current = 0  # which build runs: each swap deploys the other one

    def done_after(self, t: float) -> tuple[float, int] | None:
        """The first task completed after `t` (harmony_task_history, result true): (when, id)."""
        got = self.db.query("SELECT EXTRACT(EPOCH FROM work_end AT TIME ZONE 'UTC')::float, task_id "
                            "FROM harmony_task_history WHERE result AND work_end > to_timestamp(%s) AT TIME ZONE 'UTC' "
                            "ORDER BY work_end LIMIT 1", t)
        return (float(got[0][0]), int(got[0][1])) if got else None

    def history(self, t0: float, t1: float) -> list[tuple[int, str, bool, float, float]]:
        """harmony_task_history rows that ended in [t0, t1): (task id, name, result, start, end; epoch s)."""
        return [(tid, name, ok, float(s), float(e)) for tid, name, ok, s, e in self.db.query(
            "SELECT task_id, name, result, EXTRACT(EPOCH FROM work_start AT TIME ZONE 'UTC')::float, "
            "EXTRACT(EPOCH FROM work_end AT TIME ZONE 'UTC')::float FROM harmony_task_history "
            "WHERE work_end >= to_timestamp(%s) AT TIME ZONE 'UTC' AND work_end < to_timestamp(%s) AT TIME ZONE 'UTC' "
            "ORDER BY work_end", t0, t1)]

    def unschedulable(self) -> bool:
        [(flag,)] = self.db.query("SELECT unschedulable FROM harmony_machines WHERE host_and_port = %s",
                                  self.node.listen)
        return bool(flag)

    def stop(self) -> dict:
        self.feeder.stop()
        record = self.node.stop()
        pids = [e["pid"] for e in journal(self.data) if e.get("pid")] if (self.data / ".swapctl").exists() else []
        for pid in [self.first, *pids][-1:]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.farm.stop()
        return record


def one_swap(lab: Lab, mode: str) -> dict:
    lines = len(journal(lab.data)) if (lab.data / ".swapctl").exists() else 0
    t0 = time.time()
    r = swapctl("deploy", "box", "--binary", str(lab.builds[1 - lab.current]), "--yes", "-p",
                str(lab.playbooks[mode]))
    t1 = time.time()
    entry = journal(lab.data)[-1] if r.returncode == 0 and len(journal(lab.data)) > lines else {}
    if entry.get("outcome") == "deployed":
        lab.current = 1 - lab.current
    deadline = time.monotonic() + 60
    while (first := lab.done_after(t1)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the node's record of a failure written at the stop (its own transaction) is in
    t2 = time.time()
    rows = lab.history(t0, t2)
    failed_rows = [x for x in rows if not x[2]]
    row = {"mode": mode, "rc": r.returncode, "outcome": entry.get("outcome"), "deploy_s": round(t1 - t0, 3),
           "journal_lost": entry.get("lost"), "in_flight_at_stop": len(entry.get("in_flight_at_stop") or []),
           "window": [round(t0, 3), round(t2, 3)],
           "db_failed": len(failed_rows), "db_failed_post": sum(x[1] in POST for x in failed_rows),
           "drain_s": entry.get("drain_s"),
           "steps": entry.get("steps"),
           "steps_sum_s": round(sum(float(v) for v in (entry.get("steps") or {}).values()), 3),
           "first_done_after_s": round(first[0] - t1, 3) if first else None,
           "cordoned_after": lab.unschedulable(), "journal": entry, "error": r.stderr[-600:] if r.returncode else ""}
    cordon = entry.get("cordon")
    if cordon:
        row.update(cordon_s=cordon["cordon_s"], cordon_drain_s=cordon["drain_s"],
                   uncordoned=cordon["uncordoned"], tasks_at_cordon=len(cordon["tasks_at_cordon"]))
        row["bound_s"] = cordon_bound(lab, cordon, entry, rows)
    return row


def cordon_bound(lab: Lab, cordon: dict, entry: dict, rows: list) -> float | None:
    """poll + the longest task the node held at the cordon (claim to end, its wait in cuzk's queue
    included) + the new daemon's start and its readiness (ready = "proof": its first proof, self-checked)."""
    held = {t["id"] for t in cordon["tasks_at_cordon"]}
    longest = max((e - s for tid, _, _, s, e in rows if tid in held), default=0.0)
    steps = entry.get("steps") or {}
    if "start" not in steps or "ready" not in steps:
        return None
    return round(lab.a.poll_s + longest + float(steps["start"]) + float(steps["ready"]), 3)


def summarize(rows: list[dict]) -> dict:
    out: dict = {}
    for shape in sorted({r["shape"] for r in rows}):
        for mode in MODES:
            mine = [r for r in rows if r["shape"] == shape and r["mode"] == mode]
            if not mine:
                continue
            ok = [r for r in mine if r["rc"] == 0]
            s = {"swaps": len(mine), "deployed": len(ok),
                 **{k: sum(r[k] or 0 for r in mine) for k in ("journal_lost", "node_retries", "node_dropped",
                                                              "node_failed_post", "db_failed", "db_failed_post",
                                                              "winpost_dropped")},
                 "swaps_losing": sum((r["journal_lost"] or 0) > 0 for r in mine),
                 "readers_agree": all(r["node_retries"] + r["node_dropped"] == r["db_failed"] for r in mine),
                 "left_cordoned": sum(r["cordoned_after"] for r in mine),
                 "deploy_s_median": round(statistics.median(r["deploy_s"] for r in mine), 2),
                 "deploy_s_max": round(max(r["deploy_s"] for r in mine), 2)}
            if mode == "cordon" and ok:
                s["cordon_s_median"] = round(statistics.median(r["cordon_s"] for r in ok), 2)
                s["cordon_s_max"] = round(max(r["cordon_s"] for r in ok), 2)
                s["over_bound"] = sum(r.get("bound_s") is None or r["cordon_s"] > r["bound_s"] for r in ok)
                s["node_read_the_cordon"] = sum(r.get("node_cordoned_polls", 0) > 0 for r in ok)
                s["node_span_within_cordon_s"] = all((r.get("node_cordoned_span_s") or 0) <= r["cordon_s"] for r in ok)
            out.setdefault(shape, {})[mode] = s
    return out


def table(summary: dict, a: argparse.Namespace) -> str:
    head = ["| load | mode | swaps (deployed) | lost (journal) | swaps losing | retries burned (node / DB) "
            "| dropped | PoSt failed (node / DB) | WinPost dropped | left cordoned | cordon s median / max "
            "| over the bound | deploy s median / max |", "|" + " --- |" * 13]
    names = {"paced": f"paced: a task every {a.gap:g} s",
             "saturating": f"saturating: MaxPending 10, backlog {a.backlog}"}
    for shape, modes in summary.items():
        for mode, s in modes.items():
            cordon = (f"{s['cordon_s_median']} / {s['cordon_s_max']}", str(s["over_bound"])) if "cordon_s_median" in s \
                else ("-", "-")
            head.append(f"| {names[shape]} | {mode} | {s['swaps']} ({s['deployed']}) | {s['journal_lost']} "
                        f"| {s['swaps_losing']} | {s['node_retries']} / {s['db_failed'] - s['node_dropped']} "
                        f"| {s['node_dropped']} | {s['node_failed_post']} / {s['db_failed_post']} "
                        f"| {s['winpost_dropped']} | {s['left_cordoned']} | {cordon[0]} | {cordon[1]} "
                        f"| {s['deploy_s_median']} / {s['deploy_s_max']} |")
    return "\n".join(head)


def run_shape(a: argparse.Namespace, shape: str, server, db: Postgres, builds: list[Path], base: Path) -> tuple:
    lab = Lab(a, shape, server, db, builds, base)
    rows: list[dict] = []
    rng = random.Random(a.seed)
    try:
        time.sleep(a.warm_s)  # the node owns work (and the backlog is full) before the first swap
        for i in range(a.swaps * len(MODES)):
            # each swap waits for the new build's first proof: without a random pause the next one would
            # begin at the same moment of the feed's rhythm every time (paced: right after a proof)
            pause = round(rng.uniform(0, a.jitter_s), 3)
            time.sleep(pause)
            row = {"shape": shape, "i": i, "pause_s": pause, **one_swap(lab, MODES[i % len(MODES)])}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("steps", "error", "journal")}), flush=True)
            if row["error"]:
                print(f"  deploy failed: {row['error'].strip().splitlines()[-1]}", flush=True)
            time.sleep(a.between_s)
    finally:
        record = lab.stop()
    for row in rows:  # the node's own record of each task's end (its log's lines interleave between threads)
        t0, t2 = row["window"]
        ended = [(name, how) for when, _, name, how in record.get("ended", []) if t0 <= when < t2]
        row.update(node_retries=sum(how == "retry" for _, how in ended),
                   node_dropped=sum(how == "dropped" for _, how in ended),
                   node_failed_post=sum(how != "done" and name in POST for name, how in ended),
                   winpost_dropped=sum(how == "dropped" and name == "WinPost" for name, how in ended))
        if "cordon_s" in row:  # the cordon as the node read it: the span of its polls that read it cordoned
            read = [t for t, ok in record.get("polls", []) if t0 <= t < t2 and not ok]
            row["node_cordoned_polls"] = len(read)
            row["node_cordoned_span_s"] = round(read[-1] - read[0], 3) if read else None
    windows = [r["window"] for r in rows]
    outside = [e for e in record.get("ended", []) if e[3] != "done" and not any(t0 <= e[0] < t2 for t0, t2 in windows)]
    return rows, {**{k: record.get(k) for k in ("per_type", "totals")}, "failures_outside_swaps": outside}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--swaps", type=int, default=10, help="swaps per mode and shape")
    ap.add_argument("--shapes", default="paced,saturating")
    ap.add_argument("--mix", default="PoRep=36,UpdateProve=2,WdPost=1,WinPost=1")
    ap.add_argument("--gap", type=float, default=1.5, help="paced: seconds between tasks")
    ap.add_argument("--backlog", type=int, default=10, help="saturating: unclaimed tasks kept waiting")
    ap.add_argument("--poll-s", type=float, default=1.0)
    ap.add_argument("--prep-s", type=float, default=0.2, help="the node's preparation before Prove")
    ap.add_argument("--synth-ms", type=int, default=150)
    ap.add_argument("--post-wait-s", type=float, default=60)
    ap.add_argument("--drain-timeout", type=float, default=3, help="drain's limit, then stop anyway")
    ap.add_argument("--cordon-timeout", type=float, default=120, help="cordon's limit, then stop anyway")
    ap.add_argument("--jitter-s", type=float, default=1.5, help="a random pause (0 to this) before each swap")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warm-s", type=float, default=4)
    ap.add_argument("--between-s", type=float, default=1)
    ap.add_argument("--psql", default="/usr/bin/psql")
    ap.add_argument("--bins", type=Path, help="where the two prover builds are (made there when missing)")
    ap.add_argument("--out", type=Path, help="write OUT.json (every swap) and OUT.md (the table)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` or kill: every process ended first
    base = Path(tempfile.mkdtemp(prefix="swapctl-curio-bench-"))
    os.environ.update(XDG_STATE_HOME=str(base / "state"), XDG_CACHE_HOME=str(base / "cache"))
    bins = a.bins or base / "bin"
    builds = [build_prover(bins / f"prover-{t}", TAG=t) for t in ("a", "b")]
    server = make_server(base / "sshd")
    server.start()
    server.trust()
    db = Postgres().start()
    rows: list[dict] = []
    nodes = {}
    began = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        for shape in a.shapes.split(","):
            got, nodes[shape] = run_shape(a, shape, server, db, builds, base)
            rows += got
    finally:
        db.stop()
        server.stop()
    summary = summarize(rows)
    text = table(summary, a)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}
        a.out.with_suffix(".json").write_text(json.dumps(
            {"began": began, "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "settings": settings,
             "summary": summary, "node_records": nodes, "swaps": rows}, indent=1) + "\n")
        a.out.with_suffix(".md").write_text(text + "\n")
    if all(r["rc"] == 0 for r in rows):
        shutil.rmtree(base, ignore_errors=True)
    else:  # a failed swap: the daemon's, the node's and the database's logs stay for a look
        print(f"a swap failed: the run's logs are kept in {base}", file=sys.stderr)


if __name__ == "__main__":
    main()
