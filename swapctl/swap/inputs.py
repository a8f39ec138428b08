"""swap.sh's named inputs, from the playbook's own types: the one swap core that both sides call, the
controller (swaprun.swap_cmd) and the Ansible modules on the host (the collection's engine.swap_inputs, shipped
by scripts/build_collection.py), so what the two give the host's swap cannot drift (issue 46: twice it did).
What differs between the sides is said where they call it: who writes the journal line, the deploy lock's
record (the controller's only), the unit (the controller's may come from the running daemon).
Standard library only: it runs inside an Ansible module."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..facts.journal_entry import CAP_BYTES, KEEP
from ..facts.releases import Release
from ..playbook.spec import POST_TASKS, CurioSpec, DaemonSpec, GpuSpec, MemorySpec
from ..remote.cmd import NAME, Piece, Secret

# cuzk logs `Phase 7: all partitions complete, proof assembled` (engine.rs:506-512) before it verifies the
# proof; a PoRep proof that fails that self-check is never returned. Ready means a proof that passed it
# (engine.rs:529; the other paths' lines :767, :860, :2561 end the same); a failed or erring check before
# one passed (:577, :613; :777, :786, :906, :942, :2570, :2578) is a failed start.
PROOF_PASSED = "PoRep proof self-check PASSED"
PROOF_FAILED = "PoRep proof self-check (FAILED|error)"
FALLBACK = ("fb_target", "fb_sha", "fb_cwd", "fb_env", "fb_cmd")


@dataclass(frozen=True)
class Knobs:
    """What a swap reads of the settings: [daemon], [memory], [gpu] and the host's [curio] (its nodes)."""

    daemon: DaemonSpec
    memory: MemorySpec = field(default_factory=MemorySpec)
    gpu: GpuSpec = field(default_factory=GpuSpec)
    curio: CurioSpec = field(default_factory=CurioSpec)

    @property
    def state(self) -> str:
        return self.daemon.state_dir


def ready_mode(d: DaemonSpec, going_back: bool) -> str:
    """daemon.ready; going back to what ran (the rollback after a failed start), "proof" is "status" (or the
    log): no proof may come for a while, and what ran before needs no proof that it can prove."""
    if going_back and d.ready == "proof":
        return "status" if d.status_url else "log"
    return d.ready


def by_proof_log(d: DaemonSpec, going_back: bool) -> bool:
    return ready_mode(d, going_back) == "proof" and not d.status_url


def ready_pattern(d: DaemonSpec, going_back: bool = False) -> str:
    """The log line that means ready: ready_log, or a proof that passed its self-check (ready "proof" with
    no status_url)."""
    return PROOF_PASSED if by_proof_log(d, going_back) else d.ready_log


def unfit_pattern(d: DaemonSpec) -> str:
    """The log line that, before the ready line, makes the start a failure: a proof's failed self-check
    (ready "proof" with no status_url), else none."""
    return PROOF_FAILED if by_proof_log(d, False) else ""


def env_block(rel: Release) -> Secret:
    """A release's environment as the swap script's `start` takes it: `K='v'` lines, each key a variable
    name (environ.NAME, checked where it entered). All of it counts as secret: it goes on stdin only."""
    for k, _ in rel.env or ():
        if not NAME.fullmatch(k):  # never pasted into the shell: the release's manifest was checked already
            raise ValueError(f"{k!r} is not an environment variable name")
    return Secret("".join(f"{k}={shlex.quote(v)}\n" for k, v in rel.env or ()))


def gpu_max(gpus: Iterable[tuple[int | str, str, float]], apps: Iterable[tuple[int, str, float]], pids: list[int],
            slack_mib: float) -> str:
    """swap.sh's gpu_max: per GPU (index, uuid, MiB used), the most memory it may still use once the daemon's
    own (the compute apps (pid, uuid, MiB) among `pids`) is released, with `slack_mib`; "" without GPUs."""
    held: dict[str, float] = {}
    for pid, uuid, used in apps:
        if pid in pids:
            held[uuid] = held.get(uuid, 0) + used
    return ",".join(f"{index}:{int(used - held.get(uuid, 0) + slack_mib)}" for index, uuid, used in gpus)


def deadline_s(k: Knobs) -> float:
    """The longest a swap may take: the swap, then the host's own rollback (a stop, a memory wait and up to
    three starts of the fallback). A cordon's watchdog never lifts it sooner (curio.max_cordon_s)."""
    d, mem = k.daemon, k.memory
    return 2 * (d.stop_grace_s + mem.release_timeout_s) + 4 * (d.ready_timeout_s + d.ready_stable_s) + 120


def room_needed_kib(size: int, known: bool) -> int:
    """The free space beside the binary a deploy of `size` bytes needs: the upload and the backup of what
    runs (the upload alone when the host has that release already), and 1 GiB to spare."""
    return size * (1 if known else 2) // 1024 + 1024


def cordoning(k: Knobs) -> bool:
    return k.daemon.stop == "cordon" and bool(k.curio.nodes)


def daemon_inputs(k: Knobs, pid: int | None, group_leader: bool, target: Release, gpu_max: str,
                  home: str = "") -> dict[str, Piece | int]:
    """The stop, the memory wait, the start of `target` and its readiness; `home`: the cwd of a release with
    none recorded (the controller gives every release it starts its own)."""
    d, mem = k.daemon, k.memory
    return {
        "pid": str(pid) if pid else "", "grace_ms": int(d.stop_grace_s * 1000), "group": "1" if group_leader else "0",
        "timeout_ms": int(mem.release_timeout_s * 1000), "min_kib": int(mem.min_available_gib * (1 << 20)),
        "smi_cs": max(1, round(k.gpu.nvidia_smi_timeout_s * 100)), "gpu_max": gpu_max, "bin": d.binary,
        "target": target.path(k.state), "sha": target.sha256, "run_gid": str(target.gid) if target.uid else "",
        "cwd": target.cwd or home, "log": d.log, "re": ready_pattern(d), "bad_re": unfit_pattern(d),
        "ready_s": int(d.ready_timeout_s), "port": str(d.ready_port or ""), "stable_ms": int(d.ready_stable_s * 1000),
        "envq": env_block(target)}


def fallback_inputs(k: Knobs, fallback: Release | None, command: str, home: str = "") -> dict[str, Piece]:
    """What the swap script needs to go back to `fallback` by itself when the start fails: its path, cwd,
    environment and command line (`command`: rendered once, as the channel would)."""
    if fallback is None:
        return dict.fromkeys(FALLBACK, "")
    return {"fb_target": fallback.path(k.state), "fb_sha": fallback.sha256, "fb_cwd": fallback.cwd or home,
            "fb_env": env_block(fallback), "fb_cmd": command}


def status_inputs(d: DaemonSpec, old_sha: str | None, going_back: bool = False) -> dict[str, Piece | int]:
    """The daemon's own view for the swap script (drain.sh): its GET /status, the stop mode, the drain's
    limit and what it does then, and the readiness probe ("status" or "proof" through the status). A daemon
    of no known build (a start that failed, stopped by the rollback) is never drained."""
    url = d.status_url or ""
    drain = url and d.stop == "drain" and old_sha
    ready, back = ready_mode(d, going_back), ready_mode(d, True)
    return {"status_url": url, "stop_mode": "drain" if drain else "term",
            "drain_ms": int(d.drain_timeout_s * 1000), "drain_fail": d.drain_timeout,
            "probe": ready if ready != "log" and url else "",
            "fb_probe": back if back != "log" and url else "", "fb_re": ready_pattern(d, True)}


def cordon_inputs(k: Knobs, old_sha: str | None) -> dict[str, Piece | int]:
    """Curio's cordon for the swap script (curio.sh): the nodes to cordon (none unless stop is "cordon" and a
    daemon of a known build runs), how to reach them and their database (its environment on stdin only), the
    poll, the PoSt wait and the cordon's longest; with a proof as readiness, the line after which the nodes
    feed the new build."""
    cur, d = k.curio, k.daemon
    on = cordoning(k) and bool(old_sha)
    return {"cordon_nodes": " ".join(cur.nodes) if on else "", "curio_via": cur.via, "curio_cli": cur.cli,
            "curio_sql": cur.sql,
            "curio_env": Secret("".join(f"{name}={shlex.quote(v)}\n" for name, v in cur.env)),
            "cuzk_tasks": ",".join(cur.tasks), "post_tasks": ",".join(POST_TASKS),
            "poll_ms": int(cur.poll_s * 1000), "post_wait_ms": int(cur.post_wait_s * 1000),
            "max_cordon_ms": int(max(cur.max_cordon_s, cur.poll_s + d.drain_timeout_s + deadline_s(k)) * 1000),
            "up_re": d.ready_log if on and d.ready == "proof" else ""}


def journal_inputs(action: str, by: str, host: str, old_sha: str | None, steps: dict[str, float],
                   extra: str = "") -> dict[str, Piece | int]:
    """The journal line's parts the swap script writes in (JSON members, sorted as swapctl writes its own;
    the steps in the order they ran, as the plan has them); `extra`: more members (the upload's)."""
    return {"action": action, "j_by": by, "j_host": host, "j_from": old_sha or "", "j_extra": extra,
            "j_steps": json.dumps(steps)[1:-1], "keep": KEEP, "cap_bytes": CAP_BYTES}
