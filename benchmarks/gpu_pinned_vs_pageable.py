#!/usr/bin/env python3
"""On a real GPU: find and prove the pageable-vs-pinned diagnosis with swapctl, end to end.

The CUDA build of the stand-in prover runs as the daemon with pageable a/b/c buffers; `swapctl status`
shows it on the GPU; `swapctl deploy` swaps in the pinned build over a real sshd on loopback;
`swapctl fetch-logs` brings the log home, and `swapctl timings --compare` shows the effect.
Writes everything to --out (default $OUT): the real nvidia-smi output while the daemon runs, both logs,
the comparison, and a summary of the numbers. Run scripts/gpu-run.sh on the GPU machine to set up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpubox import gpu_host  # noqa: E402

from swapctl.facts import nvidia  # noqa: E402
from swapctl.sandbox import build_prover, prover_config, start_daemon  # noqa: E402

CONFIG = prover_config(memory_mib=8192, jobs=-1, partitions=8, partition_mib=1024, synth_ms=150, gpu_ms=200)


def swapctl(out: Path, name: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "swapctl", *args], capture_output=True, text=True, env=env)
    with open(out / "transcript.txt", "a") as f:  # at most 8 files come back from the device
        f.write(f"$ swapctl {' '.join(args)}\n# exit {r.returncode}\n{r.stdout}\n{r.stderr}\n")
    if name == "status":
        (out / "status.json").write_text(r.stdout)
    print(f"$ swapctl {' '.join(args)}  -> exit {r.returncode}", flush=True)
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--seconds", type=float, default=25, help="how long each build proves")
    ap.add_argument("--rehearse", action="store_true", help="small sizes, for a machine without a GPU")
    args = ap.parse_args()
    config = CONFIG if not args.rehearse else prover_config(memory_mib=256, jobs=-1, partitions=8,
                                                              partition_mib=64, synth_ms=20, gpu_ms=30)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = Path("/tmp/swapctl-gpu")
    subprocess.run(["pkill", "-KILL", "-f", str(base)])  # a daemon an earlier run left behind
    shutil.rmtree(base, ignore_errors=True)
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state"), "COLUMNS": "120"}

    pageable = build_prover(base / "builds" / "cuzk-pageable", cuda=True, TIMING="1", PINNED="0", TAG="pageable",
                            CUDA_ARCH="sm_90")
    pinned = build_prover(base / "builds" / "cuzk-pinned", cuda=True, TIMING="1", PINNED="1", TAG="pinned",
                          CUDA_ARCH="sm_90")
    probe = subprocess.run([str(pageable), "--probe-h2d", "64" if args.rehearse else "1024"], capture_output=True,
                           text=True).stdout
    print(probe, flush=True)

    server, data, playbook = gpu_host(base, pageable, config)
    try:
        pid = start_daemon(data / "cuzk", data / "cuzk.toml", data / "cuzk.log", data)
        print(f"pageable build runs as pid {pid}", flush=True)
        time.sleep(args.seconds)

        # The real nvidia-smi output while the daemon runs: test data for the parsers.
        if shutil.which("nvidia-smi"):
            for name, query in (("query-gpu-daemon.csv", f"--query-gpu={nvidia.QUERY_FIELDS}"),
                                ("compute-apps-daemon.csv", f"--query-compute-apps={nvidia.QUERY_APPS}")):
                r = subprocess.run(["nvidia-smi", query, "--format=csv"], capture_output=True, text=True)
                (out / name).write_text(r.stdout + r.stderr)
        status = swapctl(out, "status", "status", "h200", "--json", "-p", str(playbook), env=env)
        deployed = swapctl(out, "deploy", "deploy", "h200", "--binary", str(pinned), "--yes", "--json",
                           "-p", str(playbook), env=env)
        time.sleep(args.seconds)
        swapctl(out, "fetch", "fetch-logs", "h200", "--dest", str(base / "logs"), "-p", str(playbook), env=env)
        swapctl(out, "history", "history", "h200", "-p", str(playbook), env=env)

        journal = [json.loads(line) for line in (data / ".swapctl/cuzk/journal.jsonl").read_text().splitlines()]
        offset = journal[-1]["log_offset"]
        fetched = (base / "logs" / "h200" / "cuzk.log").read_bytes()
        (out / "pageable.log").write_bytes(fetched[:offset])
        (out / "pinned.log").write_bytes(fetched[offset:])
        cmp = swapctl(out, "compare", "timings", "--compare", str(out / "pageable.log"), str(out / "pinned.log"),
                      "--json", env=env)
        table = swapctl(out, "compare-table", "timings", "--compare", str(out / "pageable.log"),
                        str(out / "pinned.log"), env=env)
        print(table.stdout)
        summary = {"probe": probe.strip().splitlines(), "deploy_exit": deployed.returncode,
                   "steps": journal[-1].get("steps"), "status_exit": status.returncode}
        try:
            c = json.loads(cmp.stdout)
            phases = ("ntt_kernels", "coset_intt_sync", "gpu_total_ms", "synth_ms")
            summary.update({k: c["phases"].get(k) for k in phases})
            summary["gpu_phase_share"] = c["gpu_phase_share"]
            summary["timeline_share"] = c["timeline_share"]
            st = json.loads(status.stdout)["hosts"]["h200"]
            summary["status_gpus"] = [(g["name"], g["memory_used_mib"], g["utilization_pct"]) for g in st["gpus"]]
            summary["status_gpu_processes"] = st["gpu_processes"]
        except (ValueError, KeyError) as exc:
            summary["error"] = repr(exc)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(summary, indent=1))
    finally:
        subprocess.run(["pkill", "-KILL", "-f", str(base / "data")])
        server.stop()



if __name__ == "__main__":
    main()
