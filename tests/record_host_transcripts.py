"""Records what the status, launch, fetch-logs and GPU sampler scripts (swapctl/host/) print on a real host
into tests/data/transcripts/host/, for tests/test_host_scripts.py.

    python3 tests/record_host_transcripts.py      (as root, like the tests; rewrites the files)

It runs in a PID namespace of its own (unshare --pid --mount-proc), so `ps` lists only what it started: a
stand-in daemon (a copy of sleep, named cuzk, its output to a log with a ready line) with a state directory
holding a release, a journal line and the GPU sampler's notes, and tests/standin_nvidia_smi.py as nvidia-smi
(the H200's recorded output). Every script is sent by swapctl's own loader through LocalHost, as a run is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from swapctl.facts.launch import launch_cmd  # noqa: E402
from swapctl.facts.status import status_cmd  # noqa: E402
from swapctl.gpu.sampler import sampler_dir  # noqa: E402
from swapctl.host import scripts  # noqa: E402
from swapctl.playbook import DaemonSpec  # noqa: E402
from swapctl.remote.host import LocalHost  # noqa: E402

OUT = HERE / "data" / "transcripts" / "host"
ROOT = Path("/tmp/swapctl-record")  # the paths the transcripts name (tests/test_host_scripts.py: DAEMON)
DAEMON = DaemonSpec(match="cuzk", binary=f"{ROOT}/data/cuzk", log=f"{ROOT}/data/cuzk.log")
READY = "2026-12-02T19:30:00.000000Z  INFO cuzk_daemon: cuzk-daemon ready, serving on 0.0.0.0:9820"


def lay_out() -> subprocess.Popen[bytes]:
    """The host's files and its stand-in daemon, started as a deploy starts it."""
    shutil.rmtree(ROOT, ignore_errors=True)
    data = ROOT / "data"
    release = Path(DAEMON.state_dir) / "releases" / "0123456789ab"
    release.mkdir(parents=True)
    shutil.copy("/bin/sleep", release / "cuzk")
    (data / "cuzk").symlink_to(release / "cuzk")
    manifest = {"id": "0123456789ab", "sha256": "ab" * 32, "size": 1, "name": "cuzk",
                "created": "2026-12-02T19:29:00Z", "by": "recorder"}
    (release / "manifest.json").write_text(json.dumps(manifest) + "\n")
    entry = {"time": "2026-12-02T19:29:30Z", "host": "lab", "action": "deploy", "to": "0123456789ab" + "cd" * 26,
             "outcome": "deployed", "current": "0123456789ab"}  # a landing: status's `landings` holds it
    (Path(DAEMON.state_dir) / "journal.jsonl").write_text(json.dumps(entry) + "\n")
    gpu = Path(sampler_dir(DAEMON.state_dir))
    gpu.mkdir(mode=0o700)
    (gpu / "gpu-sampler.notes").write_text("2026-12-02T19:29:40Z stopped: by request\n")
    (gpu / "gpu-samples-20261202T192900Z-0001.dmon").write_text("#Date Time gpu sm\n")
    tools = ROOT / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'standin_nvidia_smi.py'} \"$@\"\n")
    (tools / "nvidia-smi").chmod(0o755)
    (data / "cuzk.log").write_text(READY + "\n")
    log = open(data / "cuzk.log", "ab")  # noqa: SIM115 (the daemon's stdout, as nohup leaves it)
    return subprocess.Popen([str(data / "cuzk"), "600"], stdout=log, stderr=log, cwd=data, stdin=subprocess.DEVNULL)


def record() -> None:
    os.environ["PATH"] = f"{ROOT / 'bin'}:{os.environ['PATH']}"
    daemon = lay_out()
    try:
        time.sleep(0.2)  # not a wait for readiness: sleep has none; /proc/PID/fd/1 is set at exec
        host = LocalHost()
        gpu = sampler_dir(DAEMON.state_dir)
        runs = {
            "status.txt": status_cmd(DAEMON),
            "launch.txt": launch_cmd(daemon.pid),
            "sampler-ctl.status.txt": scripts.command("sampler-ctl.sh", action="status", dir=gpu, user="",
                                                      **dict.fromkeys(("pid", "max", "quiet", "interval",
                                                                       "query", "fields"), "")),
            "list_logs.txt": scripts.command("list_logs.sh", DAEMON.log, f"{gpu}/gpu-samples-*.dmon"),
        }
        OUT.mkdir(parents=True, exist_ok=True)
        for name, cmd in runs.items():
            result = host.run(cmd, timeout=60)
            (OUT / name).write_text(result.stdout)
            print(f"{OUT / name}: {len(result.stdout)} bytes, exit {result.exit_code}")
    finally:
        daemon.kill()
        daemon.wait()
        shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    if os.environ.get("SWAPCTL_RECORD_NS") != "1":  # again, alone in a PID namespace
        env = {**os.environ, "SWAPCTL_RECORD_NS": "1"}
        sys.exit(subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, __file__],
                                env=env).returncode)
    record()
