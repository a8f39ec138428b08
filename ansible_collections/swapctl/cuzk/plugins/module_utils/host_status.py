# The status module: the daemon, memory, GPUs, releases, unit, journal and cordon as one fact.
from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

from ansible_collections.swapctl.cuzk.plugins.module_utils.settings import PROOF_LOG, Settings
from ansible_collections.swapctl.cuzk.plugins.module_utils.situation import Situation, cordon_view, situation
from ansible_collections.swapctl.cuzk.plugins.module_utils.steps import noted, shown
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts import cordon, journal_entry
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.releases import (
    releases_newest_first,
    rollback_target,
)

# -- status ---------------------------------------------------------------------------------------------------

def _meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo", encoding="utf-8") as f:
        for line in f:
            key, rest = (line + ":").split(":", 1)
            if key in ("MemTotal", "MemAvailable"):
                out[key] = int(rest.split()[0])
    return {"total_kib": out.get("MemTotal", 0), "available_kib": out.get("MemAvailable", 0)}


def _gpus(s: Settings) -> tuple[list[dict[str, Any]], str]:
    """Each GPU nvidia-smi lists (bounded by gpu.nvidia_smi_timeout_s), and what went wrong asking."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return [], "no GPU tools (nvidia-smi) on the host"
    fields = ("index", "name", "uuid", "memory.used", "memory.total", "utilization.gpu", "temperature.gpu")
    try:
        r = subprocess.run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, check=False, timeout=s.nvidia_smi_timeout_s)
    except subprocess.TimeoutExpired:
        return [], f"nvidia-smi did not answer within {s.nvidia_smi_timeout_s:g} s"
    if r.returncode != 0:
        return [], f"nvidia-smi failed ({r.returncode}): {r.stderr.strip()[-200:]}"
    rows = [[x.strip() for x in line.split(",")] for line in r.stdout.splitlines() if line.strip()]
    return [dict(zip((f.replace(".", "_") for f in fields), row, strict=False)) for row in rows], ""


def _unit(name: str) -> dict[str, str]:
    if not name or not shutil.which("systemctl"):
        return {}
    r = subprocess.run(["systemctl", "show", "-p", "Id,LoadState,ActiveState,SubState,MainPID,ExecMainStatus",
                        "--", name], capture_output=True, text=True, check=False, timeout=30)
    return dict(line.partition("=")[::2] for line in r.stdout.splitlines() if "=" in line)


def _since(s: Settings, offset: int, proof_log: str) -> dict[str, Any]:
    """What the daemon's log holds after byte `offset` (its start): proofs made, timing lines written."""
    if s.log == "journal":
        return {}
    try:
        with open(s.log, "rb") as f:
            f.seek(offset)
            text = f.read(64 << 20).decode("utf-8", "replace")
    except OSError:
        return {"log_offset": offset, "proofs": 0, "timing_lines": 0}
    return {"log_offset": offset, "proofs": len(re.findall(re.escape(proof_log), text)),
            "timing_lines": sum(1 for line in text.splitlines() if "_TIMING" in line or "TIMELINE," in line)}


def _running(s: Settings, sit: Situation, proof_log: str) -> dict[str, Any] | None:
    d = sit.daemon
    if d is None:
        return None
    with open(f"/proc/{d.pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime", encoding="utf-8") as f:
        up = float(f.read().split()[0])
    tick = os.sysconf("SC_CLK_TCK")
    began = journal_entry.started(sit.journal, d.sha256[:12])  # this daemon's start: its pid is the one journaled
    return {"pid": d.pid, "release": d.sha256[:12], "sha256": d.sha256, "argv": list(d.argv), "cwd": d.cwd,
            "uid": d.uid or 0, "uptime_s": int(up - int(fields[19]) / tick),
            "rss_kib": int(fields[21]) * os.sysconf("SC_PAGE_SIZE") // 1024,
            "since_start": _since(s, began.offset, proof_log) if began and began.pid == d.pid else {}}


def status(s: Settings, proof_log: str = PROOF_LOG) -> dict[str, Any]:
    """The status module's result: the fact swapctl_status (the daemon and what its log holds since this
    release started, memory, GPUs, releases, unit, the journal's last line), and the journal's warnings."""
    sit = situation(s)
    gpus, gpu_error = _gpus(s)
    return noted(sit, {"changed": False, "ansible_facts": {"swapctl_status": {
        "daemon": _running(s, sit, proof_log), "memory": _meminfo(), "gpus": gpus, "gpu_error": gpu_error,
        "releases": [{"id": r.id, "status": r.status, "source": r.source, "created": r.created,
                      "current": r.id == sit.current, "running": r.id == sit.running}
                     for r in releases_newest_first(sit.releases)],
        "current": sit.current, "unit": _unit(s.unit), "journal": shown(sit.journal[-1] if sit.journal else None),
        "rollback_to": getattr(rollback_target(sit.known, sit.running, sit.journal, sit.history), "id", None),
        "cordon": _cordon(s),
    }}})


def _cordon(s: Settings) -> dict[str, Any] | None:
    """The cordon as `swapctl status --json` shows it (facts/cordon.shown), with curio.nodes set; else None."""
    if not s.curio.nodes:
        return None
    return cordon.shown(cordon_view(s, lift=False), s.curio.nodes, s.host)
