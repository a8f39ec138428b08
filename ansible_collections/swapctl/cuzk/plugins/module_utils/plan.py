# The plan: the release a deploy makes, the fallback, the command and environment a release runs with.
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import replace
from typing import Any

from ansible_collections.swapctl.cuzk.plugins.module_utils.hostrun import who
from ansible_collections.swapctl.cuzk.plugins.module_utils.settings import DEFAULT_PATH, HostError, Settings
from ansible_collections.swapctl.cuzk.plugins.module_utils.situation import Daemon, Situation, user_ids
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.releases import (
    Release,
    now_iso,
    way_back,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.host import scripts
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.masking import MASK
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.remote.cmd import NAME, Cmd, Secret
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import (
    environ,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import inputs as core

# -- the plan -----------------------------------------------------------------------------------------------

def new_release(s: Settings, sit: Situation, sha: str, size: int) -> Release:
    """The release a swap of the file with `sha` runs (preflight.new_release and env_for): the playbook's
    command line, else the running daemon's; its environment, carried over, then daemon.env."""
    base: Daemon | Release | None = sit.daemon or sit.releases.get(sit.current or "")
    args = s.args if s.args is not None else (tuple(base.argv[1:]) if base and base.argv else ())
    cwd = s.cwd or (base.cwd if base and base.cwd else os.path.dirname(s.binary))
    keep = (*s.keep_loader_env, *dict(s.environment))
    default = (("PATH", DEFAULT_PATH), ("HOME", "/root"))
    env = dict(environ.carried(base.env, keep)[0] if base and base.env else default)
    env.update(s.environment)
    uid, gid = run_as(s, base)
    new = Release(sha256=sha, size=size, name=s.binary.rsplit("/", 1)[-1], created=now_iso(), by=f"ansible {who()}",
                  argv=(s.binary, *args), cwd=cwd, env=tuple(env.items()), uid=uid, gid=gid)
    old = sit.releases.get(new.id)
    if old and old.sha256 == sha:  # deployed before: keep its record
        new = replace(old, argv=new.argv, cwd=new.cwd, env=new.env, status="ok", uid=uid, gid=gid)
    return new


def run_as(s: Settings, base: Daemon | Release | None) -> tuple[int | None, int | None]:
    """Who a new release runs as: daemon.user, else whom what it replaces ran as; (None, None): root
    (preflight.run_as)."""
    ids = user_ids(s.user) if s.user else None
    uid, gid = ids if ids else ((base.uid, base.gid) if base else (None, None))
    return (uid, gid) if uid else (None, None)


def as_configured(s: Settings, rel: Release) -> Release:
    """`rel` as it starts: with its recorded command line; one with none on record (saved from the disk) as a
    deploy with these settings starts a build: daemon.args, daemon.cwd (else the binary's directory), the
    default environment then daemon.env. Never the bare binary in /."""
    if rel.argv is not None:
        return rel
    env = {"PATH": DEFAULT_PATH, "HOME": "/root", **dict(s.environment)}
    return replace(rel, argv=(s.binary, *(s.args or ())), cwd=s.cwd or os.path.dirname(s.binary) or "/",
                   env=tuple(env.items()))


def fallback(s: Settings, sit: Situation, new: Release) -> Release | None:
    """What a failed start goes back to (releases.way_back, as swapctl's plan asks it), as it starts."""
    candidate = way_back(sit.known, sit.running, new.id, sit.history)
    return as_configured(s, candidate) if candidate else None


def command_for(s: Settings, rel: Release) -> list[str]:
    """The command line a release runs with (swaprun.command_for)."""
    cmd = list(rel.argv or (s.binary, *(s.args or ())))
    if not (cmd[0] == s.binary and "=" not in cmd[0]):
        cmd = ["perl", "-e", scripts.PERL_ARGV0, rel.path(s.state), *cmd]
    if rel.uid:
        cmd = ["setpriv", f"--reuid={rel.uid}", f"--regid={rel.gid or 0}", "--init-groups", *cmd]
    return cmd


def env_block(rel: Release) -> Secret:
    """A release's environment as `K='v'` lines (swaprun.env_block): on stdin only."""
    for k in dict(rel.env or ()):
        if not NAME.fullmatch(k):
            raise HostError(f"{k!r} is not an environment variable name")
    return Secret("".join(f"{k}={shlex.quote(v)}\n" for k, v in rel.env or ()))


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
    """Per GPU, the most memory it may still use once the daemon's own is released (swaprun.gpu_limits)."""
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

    held: dict[str, float] = {}
    for pid, uuid, used in query("compute-apps", "pid,gpu_uuid,used_memory"):
        if pid.isdigit() and int(pid) in pids and used.replace(".", "").isdigit():
            held[uuid] = held.get(uuid, 0) + float(used)
    return ",".join(f"{i}:{int(float(used) - held.get(uuid, 0) + s.gpu_slack_mib)}"
                    for i, uuid, used in query("gpu", "index,uuid,memory.used") if used.replace(".", "").isdigit())


def shown_command(s: Settings, rel: Release | Daemon | None) -> str:
    """A command line and environment as --diff shows them: secrets as ***."""
    if rel is None:
        return "(no daemon)\n"
    env = "".join(f"  {k}={MASK if s.secret(k, v) else v}\n" for k, v in rel.env or ())
    return f"command: {' '.join(rel.argv or ())}\ncwd: {rel.cwd}\nenvironment:\n{env}"
