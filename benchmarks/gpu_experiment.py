#!/usr/bin/env python3
"""On a real GPU: `swapctl experiment` from the pageable to the pinned build, with independent readers.

The CUDA build of the stand-in prover runs as the daemon (pageable a/b/c buffers), started by hand
behind a real sshd on loopback. Apart from swapctl, for the whole time: an NVML GPM reader
(benchmarks/gpm_reader.py: SM activity and PCIe RX, 200 ms true averages) and an `nvidia-smi dmon -s ut`.
`swapctl experiment` samples the GPU (its activity counters where it has them), measures the baseline,
swaps in the pinned build, runs the window and gives its verdict and HTML report; then `swapctl timings`
reads each build's run, and benchmarks/check_gpu_run.py sets swapctl's three figures beside the readers
over the same spans. --gpu-ms and --partition-mib set the cycle (the stress runs). Everything goes to
--out (default $OUT) as one TAG.tar.gz (at most 8 files come back from the device). Run it through
scripts/gpu-run.sh (GPU_BENCH=benchmarks/gpu_experiment.py) on the GPU machine; docs/gpu.md has the runs.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpubox import gpu_host  # noqa: E402

from swapctl.sandbox import build_prover, prover_config, start_daemon  # noqa: E402


# Partitions of 4 GiB a/b/c (a pageable copy of ~0.6 s on an H200) and 1.25 s of kernels by default;
# --gpu-ms and --partition-mib set the cycle for the stress runs (1500 ms; 2048 MiB). The stand-in
# synthesizes on its own thread ahead of the GPU worker (two a/b/c buffers), as cuzk's synthesis workers
# keep its GPU fed. The pageable cycle follows the machine's copy rate (1.9-2.0 s seen at the default).
def config(gpu_ms: int, partition_mib: int) -> str:
    return prover_config(memory_mib=8192, jobs=-1, partitions=4, partition_mib=partition_mib, synth_ms=150,
                         gpu_ms=gpu_ms)


READERS = {  # the independent readers, apart from swapctl's sampler: file -> command
    "dmon-independent.txt": ["nvidia-smi", "dmon", "-s", "ut", "-d", "1", "-o", "DT"],
    "gpm-200ms.csv": [sys.executable, str(ROOT / "benchmarks" / "gpm_reader.py"), "--interval-ms", "200"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--seconds", type=float, default=30, help="the baseline's and the window's length")
    ap.add_argument("--gpu-ms", type=int, default=1250, help="kernel time per partition (the cycle)")
    ap.add_argument("--partition-mib", type=int, default=4096, help="a/b/c bytes per partition (the copy)")
    ap.add_argument("--tag", help="this run's name: its files go to OUT/TAG.tar.gz (default gGPU_MS-pMIB)")
    ap.add_argument("--rehearse", action="store_true", help="small sizes, for a machine without a GPU")
    args = ap.parse_args()
    conf = config(args.gpu_ms, args.partition_mib) if not args.rehearse else prover_config(
        memory_mib=256, jobs=-1, partitions=8, partition_mib=64, synth_ms=20, gpu_ms=30)
    tag = args.tag or f"g{args.gpu_ms}-p{args.partition_mib}"
    final = Path(args.out)
    final.mkdir(parents=True, exist_ok=True)
    out = Path("/tmp/swapctl-gpu-out") / tag
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    base = Path("/tmp/swapctl-gpu")
    subprocess.run(["pkill", "-KILL", "-f", str(base / "data")])
    shutil.rmtree(base, ignore_errors=True)
    try:
        run(args, conf, base, out)
    finally:
        (out / "config.toml").write_text(conf)
        subprocess.run(["tar", "-czf", str(final / f"{tag}.tar.gz"), "-C", str(out.parent), tag])
        print(f"saved {final / f'{tag}.tar.gz'}", flush=True)


def run(args, conf: str, base: Path, out: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state"), "COLUMNS": "120"}
    transcript = open(out / "transcript.txt", "w")

    def swapctl(*a: str) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, "-m", "swapctl", *a], capture_output=True, text=True, env=env)
        transcript.write(f"$ swapctl {' '.join(a)}\n# exit {r.returncode}\n{r.stdout}\n{r.stderr}\n")
        transcript.flush()
        print(f"$ swapctl {' '.join(a)}  -> exit {r.returncode}", flush=True)
        return r

    cuda = not args.rehearse
    builds = Path("/tmp/swapctl-gpu-builds")  # kept between runs: the stress runs change the config only
    pageable = build_prover(builds / "cuzk-pageable", cuda=cuda, TIMING="1", PINNED="0", TAG="pageable",
                            CUDA_ARCH="sm_90" if cuda else "")
    pinned = build_prover(builds / "cuzk-pinned", cuda=cuda, TIMING="1", PINNED="1", TAG="pinned",
                          CUDA_ARCH="sm_90" if cuda else "")
    probe = subprocess.run([str(pageable), "--probe-h2d", "64" if args.rehearse else "1024"], capture_output=True,
                           text=True).stdout
    transcript.write(probe)
    server, data, playbook = gpu_host(base, pageable, conf)
    readers: list[subprocess.Popen] = []
    try:
        if shutil.which("nvidia-smi"):
            for name, cmd in READERS.items():
                readers.append(subprocess.Popen(cmd, stdout=open(out / name, "w"), stderr=subprocess.STDOUT,
                                                env={**os.environ, "TZ": "UTC"}))
        pid = start_daemon(data / "cuzk", data / "cuzk.toml", data / "cuzk.log", data)
        print(f"pageable build runs as pid {pid}", flush=True)
        time.sleep(3)
        swapctl("gpu-sampler", "start", "h200", "-p", str(playbook))
        time.sleep(args.seconds)
        logs = base / "logs"
        r = swapctl("experiment", "h200", "--binary", str(pinned), "--for", f"{args.seconds:g}s", "--baseline",
                    f"{args.seconds:g}s", "--then", "keep", "--yes", "--json", "--dest", str(logs),
                    "--report", str(out / "report.html"), "-p", str(playbook))
        swapctl("fetch-logs", "h200", "--dest", str(logs), "-p", str(playbook))
        swapctl("gpu-sampler", "stop", "h200", "-p", str(playbook))
        for p in readers:
            p.terminate()
            p.wait()
        fetched = logs / "h200"
        # what the sampler recorded and the log first: the checks below read them, and so do the tests
        segments = sorted(fetched.glob("gpu-samples-*.dmon"))
        (out / "gpu-samples.dmon").write_text("".join(p.read_text() for p in segments))
        for name in ("cuzk.log", "gpu-sampler.notes"):
            if (fetched / name).exists():
                shutil.copy(fetched / name, out / name)
        swapctl("timings", str(fetched / "cuzk.log"), "--plot", str(out / "timeline.png"))
        print(swapctl("timings", str(fetched / "cuzk.log")).stdout, flush=True)
        j = swapctl("timings", str(fetched / "cuzk.log"), "--json")
        summary = {"probe": probe.strip().splitlines(), "experiment_exit": r.returncode,
                   "verdict": (json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}).get("summary")}
        try:
            summary["timings"] = json.loads(j.stdout)
            from check_gpu_run import check  # noqa: PLC0415

            summary["check"] = check(out)
            print(json.dumps(summary["check"], indent=1, default=str), flush=True)
        except Exception as exc:  # the raw files are saved: the check can run again at home
            summary["error"] = repr(exc)
            print(f"check failed: {exc!r}", flush=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    finally:
        for p in readers:
            if p.poll() is None:
                p.kill()
        subprocess.run(["pkill", "-KILL", "-f", str(base / "data")])
        server.stop()
        transcript.close()


if __name__ == "__main__":
    main()
