"""The GPU machine as a swapctl host, for the GPU benchmarks: a real sshd on 127.0.0.1:40612 whose data
directory holds the daemon binary, its config and its log, and the playbook for it."""

from __future__ import annotations

import shutil
from pathlib import Path

from swapctl.sandbox import SshServer, make_server


def gpu_host(base: Path, binary: Path, config: str) -> tuple[SshServer, Path, Path]:
    """Starts the sshd and lays out the daemon (not started); returns (server, its data dir, the playbook).
    The memory wait asks for half of what is available now: the GPU box runs nothing else."""
    server = make_server(base / "sshd", port=40612, data=base / "data")
    server.start()
    server.trust()
    data = base / "data"
    shutil.copy(binary, data / "cuzk")
    (data / "cuzk.toml").write_text(config)
    avail_kib = int(next(line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemAvailable")))
    playbook = base / "swapctl.toml"
    playbook.write_text(server.playbook(
        name="h200",
        daemon={"binary": str(data / "cuzk"), "args": ["--config", str(data / "cuzk.toml")],
                "match": str(data / "cuzk"), "log": str(data / "cuzk.log"), "ready_timeout_s": 120,
                "stop_grace_s": 30},
        memory={"min_available_gib": round(avail_kib / (1 << 20) * 0.5, 1), "release_timeout_s": 300},
        logs={"paths": [str(data / "cuzk.log")]}))
    return server, data, playbook
