#!/usr/bin/env python3
"""On a real GPU: `swapctl experiment` from the pageable to the pinned build, with a second reader.

The CUDA build of the stand-in prover runs as the daemon (pageable a/b/c buffers), started by hand
behind a real sshd on loopback. An independent `nvidia-smi dmon` runs for the whole time, apart from
swapctl. `swapctl experiment` samples the GPU, measures the baseline, swaps in the pinned build, runs
the window and gives its verdict and HTML report. Then `swapctl timings` reads each build's run with
the sampler's files, and its GPU busy is checked against the independent dmon over the same windows.
Everything goes to --out (default $OUT; at most 8 files come back from the device). Run it through
scripts/gpu-run.sh (GPU_BENCH=benchmarks/gpu_experiment.py) on the GPU machine.
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

from swapctl.gpu.samples import QUERY, QUERY_FIELDS, parse_dmon, parse_query, read_samples, window  # noqa: E402
from swapctl.logs.gpu import run_window  # noqa: E402
from swapctl.logs.timings import parse  # noqa: E402
from swapctl.sandbox import build_prover, prover_config, start_daemon  # noqa: E402

# Partitions of 4 GiB a/b/c (a pageable copy of ~0.6 s on an H200) and 1.5 s of kernels: phases long
# enough that a 1 s dmon reading lies inside or outside one. The stand-in synthesizes on its own thread
# ahead of the GPU worker (two a/b/c buffers), as cuzk's synthesis workers keep its GPU fed; writing
# 4 GiB takes it about 0.5 s a partition, well under the GPU's 2 s, so the GPU does not wait for it.
# gpu_ms 1250 makes a partition's cycle about 1.77 s pageable (0.52 s copy) and 1.33 s pinned: not a
# multiple of dmon's 1 s. At gpu_ms 1500 the pageable cycle was 2.0 s, and each 1 s reader saw the same
# two phases for minutes (99, 13, 99, 13...): two dmon readers of one GPU over one window read 71.8%
# and 64.5% (saved in tests/data/h200-experiment/aliased/).
CONFIG = prover_config(memory_mib=8192, jobs=-1, partitions=4, partition_mib=4096, synth_ms=150, gpu_ms=1250)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--seconds", type=float, default=30, help="the baseline's and the window's length")
    ap.add_argument("--rehearse", action="store_true", help="small sizes, for a machine without a GPU")
    args = ap.parse_args()
    config = CONFIG if not args.rehearse else prover_config(memory_mib=256, jobs=-1, partitions=8,
                                                              partition_mib=64, synth_ms=20, gpu_ms=30)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = Path("/tmp/swapctl-gpu")
    subprocess.run(["pkill", "-KILL", "-f", str(base)])
    shutil.rmtree(base, ignore_errors=True)
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state"), "COLUMNS": "120"}
    transcript = open(out / "transcript.txt", "w")

    def swapctl(*a: str) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, "-m", "swapctl", *a], capture_output=True, text=True, env=env)
        transcript.write(f"$ swapctl {' '.join(a)}\n# exit {r.returncode}\n{r.stdout}\n{r.stderr}\n")
        transcript.flush()
        print(f"$ swapctl {' '.join(a)}  -> exit {r.returncode}", flush=True)
        return r

    cuda = not args.rehearse
    pageable = build_prover(base / "builds" / "cuzk-pageable", cuda=cuda, TIMING="1", PINNED="0", TAG="pageable",
                            CUDA_ARCH="sm_90" if cuda else "")
    pinned = build_prover(base / "builds" / "cuzk-pinned", cuda=cuda, TIMING="1", PINNED="1", TAG="pinned",
                          CUDA_ARCH="sm_90" if cuda else "")
    probe = subprocess.run([str(pageable), "--probe-h2d", "64" if args.rehearse else "1024"], capture_output=True,
                           text=True).stdout
    transcript.write(probe)
    server, data, playbook = gpu_host(base, pageable, config)
    reader = fast = None
    try:
        # the second reader: its own nvidia-smi, apart from swapctl's sampler, for the whole run
        if shutil.which("nvidia-smi"):
            reader = subprocess.Popen(["nvidia-smi", "dmon", "-s", "ut", "-d", "1", "-o", "DT"],
                                      stdout=open(out / "dmon-independent.txt", "w"), stderr=subprocess.STDOUT,
                                      env={**os.environ, "TZ": "UTC"})
            # a third reader, ten times as often: utilization.gpu every 100 ms, no 1 s phase to lock to
            fast = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY_FIELDS}", "--format=csv", "-lms", "100"],
                                    stdout=open(out / "query-100ms.csv", "w"), stderr=subprocess.STDOUT,
                                    env={**os.environ, "TZ": "UTC"})
        pid = start_daemon(data / "cuzk", data / "cuzk.toml", data / "cuzk.log", data)
        print(f"pageable build runs as pid {pid}", flush=True)
        time.sleep(3)
        swapctl("gpu-sampler", "start", "h200", "-p", str(playbook))
        time.sleep(args.seconds)
        logs = base / "logs"
        r = swapctl("experiment", "h200", "--binary", str(pinned), "--for", f"{args.seconds:g}s", "--baseline",
                    f"{args.seconds:g}s", "--then", "keep", "--yes", "--json", "--dest", str(logs),
                    "--report", str(out / "report.html"), "-p", str(playbook))
        verdict = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}
        swapctl("fetch-logs", "h200", "--dest", str(logs), "-p", str(playbook))
        swapctl("gpu-sampler", "stop", "h200", "-p", str(playbook))
        for r_ in (reader, fast):
            if r_:
                r_.terminate()
                r_.wait()
        fetched = logs / "h200"
        swapctl("timings", str(fetched / "cuzk.log"), "--plot", str(out / "timeline.png"))
        table = swapctl("timings", str(fetched / "cuzk.log"))
        print(table.stdout, flush=True)
        summary = {"probe": probe.strip().splitlines(), "experiment_exit": r.returncode,
                   "verdict": verdict.get("summary"), "runs": []}
        ours = read_samples(sorted(fetched.glob("gpu-samples-*.dmon")))
        theirs = parse_dmon((out / "dmon-independent.txt").read_text()) if reader else []
        quick = parse_query((out / "query-100ms.csv").read_text()) if fast else []
        log = parse([open(fetched / "cuzk.log", "rb")])
        for i, run in enumerate(log.runs, 1):
            bounds = run_window(run)
            rep = run.report()
            row = {"run": i, "partitions": rep["partitions"], "pageable_share": rep["pageable_share"],
                   "gpu_phase_share": rep["gpu_phase_share"], "window": [str(b) for b in bounds or ()]}
            if bounds:
                from datetime import timedelta

                end = bounds[1] + timedelta(seconds=1)
                a, b = window(ours, bounds[0], end, 0), window(theirs, bounds[0], end, 0)
                q = window(quick, bounds[0], bounds[1], 0, QUERY)
                row.update({"sampler_sm_mean": a.sm_mean, "sampler_n": a.count, "independent_sm_mean": b.sm_mean,
                            "independent_n": b.count, "sampler_rx_mean": a.rx_mean_mbps,
                            "query_100ms_util_mean": q.sm_mean, "query_100ms_n": q.count})
            summary["runs"].append(row)
        j = swapctl("timings", str(fetched / "cuzk.log"), "--json")
        try:
            rep = json.loads(j.stdout)
            summary["timings_runs"] = [{k: r.get(k) for k in ("run", "gpu_busy", "where_time_goes", "gpu_phase_share",
                                                              "partitions")} for r in rep["runs"]]
        except ValueError as exc:
            summary["error"] = repr(exc)
        # what the sampler recorded and the log, for tests/data (one file each: at most 8 come back)
        segments = sorted(fetched.glob("gpu-samples-*.dmon"))
        (out / "gpu-samples.dmon").write_text("".join(p.read_text() for p in segments))
        shutil.copy(fetched / "cuzk.log", out / "cuzk.log")
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        print(json.dumps(summary, indent=1, default=str), flush=True)
    finally:
        for r_ in (reader, fast):
            if r_ and r_.poll() is None:
                r_.kill()
        subprocess.run(["pkill", "-KILL", "-f", str(base / "data")])
        server.stop()
        transcript.close()


if __name__ == "__main__":
    main()
