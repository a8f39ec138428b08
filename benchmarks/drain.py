#!/usr/bin/env python3
"""Swaps under continuous load, `stop = "term"` against `stop = "drain"`: proofs lost, failed, and the
swap's added time (the drain's wait) per swap.

A real sshd on loopback, the stand-in prover taking jobs from outside (images/prover: cuzk's pipeline and
signal behaviour), and tests/loadgen.py standing in for Curio: `--pending` proofs kept pending, each slot
pausing `--gap` seconds after a result (Curio's next task arriving; 0: saturating). Swaps alternate term
and drain, build A and build B. Per swap: the jobs lost (work begun, no result), requeued (taken, not
begun: no work lost), failed, the drain's wait, and the longest of the proofs in flight when the drain
began (their whole proof time, from the load generator's records): the goal is 0 lost with drain and a
wait no longer than that.

Usage: python3 benchmarks/drain.py [--swaps 20] [--pending 2] [--gap 1.5] [--drain-timeout 10]
(root; needs sshd, g++; run it under the machine's shared lock: flock /tmp/swapctl-cpu.lock ...)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from loadgen import LoadGen  # noqa: E402

from swapctl.sandbox import build_prover, free_port, make_server, prover_config, start_daemon  # noqa: E402


def swapctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swapctl", *args], capture_output=True, text=True, timeout=300)


def journal(data: Path) -> list[dict]:
    return [json.loads(x) for x in (data / ".swapctl" / "cuzk" / "journal.jsonl").read_text().splitlines()]


def snapshot(gen: LoadGen) -> dict[str, str]:
    with gen._lock:
        return {j.job_id: j.outcome for j in gen.jobs}


def one_swap(mode: str, binary: Path, playbook: Path, data: Path, gen: LoadGen) -> dict:
    before = snapshot(gen)
    t = time.monotonic()
    r = swapctl("deploy", "box", "--binary", str(binary), "--yes", "-p", str(playbook),
                "--drain" if mode == "drain" else "--now")
    took = time.monotonic() - t
    if r.returncode != 0:
        raise SystemExit(f"deploy ({mode}) failed: {r.stderr[-2000:]}")
    entry = journal(data)[-1]
    time.sleep(0.5)  # the load generator notices the connections the stop closed (a reading, not a wait for work)
    after = snapshot(gen)
    changed = {k: v for k, v in after.items() if before.get(k, "pending") != v}
    totals = {j.job_id: j.total_ms for j in gen.jobs if j.total_ms}
    at_drain = [p["job_id"] for p in entry.get("in_flight_at_drain", [])]
    longest = max((totals.get(job, 0) / 1000 for job in at_drain), default=0.0)
    return {"mode": mode, "lost": sum(v == "lost" for v in changed.values()),
            "requeued": sum(v == "requeued" for v in changed.values()),
            "failed": sum(v == "failed" for v in changed.values()),
            "journal_lost": entry.get("lost"), "drain_s": entry.get("drain_s", 0.0), "deploy_s": round(took, 2),
            "longest_in_flight_s": round(longest, 2)}


def stop_own(data: Path) -> None:
    """Kills the daemon this run started last (its pid in the journal; it leads its own process group)."""
    import os
    import signal

    pids = [e["pid"] for e in journal(data) if e.get("pid")] if (data / ".swapctl").exists() else []
    for pid in pids[-1:]:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--swaps", type=int, default=20)
    ap.add_argument("--pending", type=int, default=2, help="proofs kept pending (Curio's MaxPending is 10)")
    ap.add_argument("--gap", type=float, default=1.5, help="each slot's pause after a result, s (0: saturating)")
    ap.add_argument("--drain-timeout", type=float, default=10)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="swapctl-drain-bench-"))
    builds = [build_prover(base / "bin" / f"prover-{t}", TAG=t) for t in ("a", "b")]
    server = make_server(base / "sshd")
    server.start()
    server.trust()
    data = server.data
    port, status_port = free_port(), free_port()
    config = data / "cuzk.toml"
    config.write_text(prover_config(memory_mib=8, jobs=0, partitions=4, partition_mib=1, synth_ms=250, gpu_ms=120)
                      + f'listen = "127.0.0.1:{port}"\nstatus_listen = "127.0.0.1:{status_port}"\n')
    (data / "cuzk").write_bytes(builds[0].read_bytes())
    (data / "cuzk").chmod(0o755)
    playbook = base / "swapctl.toml"
    playbook.write_text(server.playbook(name="box", daemon={
        "binary": str(data / "cuzk"), "args": ["--config", str(config)], "log": str(data / "cuzk.log"),
        "ready_timeout_s": 60, "stop_grace_s": 5, "status_url": f"http://127.0.0.1:{status_port}/status",
        "drain_timeout_s": a.drain_timeout, "drain_timeout": "stop"}, memory={"release_timeout_s": 30}))
    first = start_daemon(data / "cuzk", config, data / "cuzk.log", data)
    gen = LoadGen(f"127.0.0.1:{port}", a.pending, gap_s=a.gap).start()
    rows = []
    try:
        time.sleep(3)  # the first proofs under way (and the SRS loaded) before the first swap
        for i in range(a.swaps):
            row = one_swap("term" if i % 2 == 0 else "drain", builds[(i + 1) % 2], playbook, data, gen)
            rows.append(row)
            if not a.json:
                print(json.dumps(row), flush=True)
    finally:
        gen.stop()
        if not rows:
            import os
            import signal
            os.killpg(first, signal.SIGKILL)
        stop_own(data)
        server.stop()
    summary = {}
    for mode in ("term", "drain"):
        mine = [r for r in rows if r["mode"] == mode]
        if mine:
            summary[mode] = {"swaps": len(mine), "lost": sum(r["lost"] for r in mine),
                             "requeued": sum(r["requeued"] for r in mine), "failed": sum(r["failed"] for r in mine),
                             "drain_s_median": statistics.median(r["drain_s"] or 0 for r in mine),
                             "drain_s_max": max(r["drain_s"] or 0 for r in mine),
                             "waits_over_longest_proof": sum((r["drain_s"] or 0) > r["longest_in_flight_s"] > 0
                                                             for r in mine)}
    print(json.dumps({"load": {"pending": a.pending, "gap_s": a.gap}, "summary": summary,
                      **({"swaps": rows} if a.json else {})}, indent=2))


if __name__ == "__main__":
    main()
