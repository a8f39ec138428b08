# The plan: the release a deploy makes, the fallback, the command a release runs with: the swap core's
# (swap/command.py, swap/inputs.py), called as the controller calls them.
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace
from typing import Any

from ansible_collections.swapctl.cuzk.plugins.module_utils.hostrun import who
from ansible_collections.swapctl.cuzk.plugins.module_utils.settings import HostError, Settings
from ansible_collections.swapctl.cuzk.plugins.module_utils.situation import Daemon, Situation, user_ids
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.releases import (
    Release,
    now_iso,
    way_back,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.masking import MASK
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.remote.cmd import Cmd
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import inputs as core
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap.command import (
    NoCommand,
    as_it_starts,
    release_command,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap.command import (
    command_for as core_command_for,
)

# -- the plan -----------------------------------------------------------------------------------------------

def new_release(s: Settings, sit: Situation, sha: str, size: int) -> Release:
    """The release a swap of the file with `sha` runs (preflight.new_release): the command playbook_command
    gives, its record kept where it was deployed before."""
    new = replace(playbook_command(s, sit), sha256=sha, size=size, name=s.binary.rsplit("/", 1)[-1],
                  created=now_iso(), by=f"ansible {who()}")
    old = sit.releases.get(new.id)
    if old and old.sha256 == sha:  # deployed before: keep its record
        new = replace(old, argv=new.argv, cwd=new.cwd, env=new.env, status="ok", uid=new.uid, gid=new.gid)
    return new


def playbook_command(s: Settings, sit: Situation) -> Release:
    """What a release with no record of its own runs with (the swap core's release_command, as the
    controller's preflight.playbook_command calls it), from what runs now: the daemon, else the current
    release; daemon.user's ids as this host has them."""
    base = sit.daemon or sit.releases.get(sit.current or "")
    return release_command(s.knobs().daemon, s.environment, base, user_ids(s.user) if s.user else None)


def as_configured(s: Settings, sit: Situation, rel: Release) -> Release:
    """`rel` as a swap starts it (the swap core's as_it_starts, as the controller's preflight calls it)."""
    return rel if rel.argv and rel.cwd else as_it_starts(rel, playbook_command(s, sit))


def fallback(s: Settings, sit: Situation, new: Release) -> Release | None:
    """What a failed start goes back to (releases.way_back, as swapctl's plan asks it), as it starts."""
    candidate = way_back(sit.known, sit.running, new.id, sit.history)
    return as_configured(s, sit, candidate) if candidate else None


def command_for(s: Settings, rel: Release) -> list[str]:
    """The command line a release runs with (the swap core's command_for, as swaprun.command_for calls it)."""
    try:
        return core_command_for(s.binary, s.state, rel)
    except NoCommand:
        raise HostError(f"release {rel.id} has no recorded command line or directory; nothing changed") from None


def swap_inputs(s: Settings, old: Daemon | None, target: Release, gpu_max: str, fb: Release | None,
                action: str = "deploy", steps: dict[str, float] | None = None) -> dict[str, Any]:
    """swap.sh's named inputs, from swapctl's own swap core (swap/inputs.py), as `swapctl deploy` gives them
    (swaprun.swap_cmd); what this side says in its own way: its journal line's `by` is "ansible user@host",
    it holds no swapctl deploy lock (Ansible's serial orders the hosts), a release with no recorded cwd runs
    in the binary's directory (as_configured). The host rolls back to `fb` itself and writes the journal."""
    k, home, sha = s.knobs(), os.path.dirname(s.binary) or "/", old.sha256 if old and old.sha256 else None
    fb_cmd = Cmd(*command_for(s, fb)).render() if fb is not None else ""
    return {**core.daemon_inputs(k, old.pid if old else None, bool(old and old.group_leader), target, gpu_max, home),
            "unit": s.unit, "reset": "", "lock_info": "",
            **core.fallback_inputs(k, fb, fb_cmd, home), **core.status_inputs(k.daemon, sha),
            **core.cordon_inputs(k, sha),
            **core.journal_inputs(action, f"ansible {who()}", s.host, sha, steps or {})}


def gpu_limits(s: Settings, pids: list[int]) -> str:
    """Per GPU, the most memory it may still use once the daemon's own is released: nvidia-smi read here,
    the formula swapctl's (inputs.gpu_max)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""

    def query(what: str, fields: str) -> list[list[str]]:
        try:
            r = subprocess.run([smi, f"--query-{what}={fields}", "--format=csv,noheader,nounits"],
                               capture_output=True,
                               text=True, check=False, timeout=s.nvidia_smi_timeout_s)
        except subprocess.TimeoutExpired:
            return []
        return [[x.strip() for x in line.split(",")] for line in r.stdout.splitlines() if line.strip()]

    def mib(v: str) -> bool:
        return v.replace(".", "", 1).isdecimal()

    apps = [(int(pid), uuid, float(used)) for pid, uuid, used in query("compute-apps", "pid,gpu_uuid,used_memory")
            if pid.isdecimal() and mib(used)]
    gpus = [(i, uuid, float(used)) for i, uuid, used in query("gpu", "index,uuid,memory.used") if mib(used)]
    return core.gpu_max(gpus, apps, pids, s.gpu_slack_mib)


def shown_command(s: Settings, rel: Release | Daemon | None) -> str:
    """A command line and environment as --diff shows them: secrets as ***."""
    if rel is None:
        return "(no daemon)\n"
    env = "".join(f"  {k}={MASK if s.secret(k, v) else v}\n" for k, v in rel.env or ())
    return f"command: {' '.join(rel.argv or ())}\ncwd: {rel.cwd}\nenvironment:\n{env}"
