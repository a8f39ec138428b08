"""Steps 5 to 8 as one script on the host (sh/swap.sh): stop, wait for memory, start, readiness. No round
trip sits between the old daemon's exit and the new start, and the host finishes alone if the
connection drops."""

from __future__ import annotations

import shlex
import time

from ..errors import LockHeld, Refused, UnknownState
from ..facts.status import HostStatus
from ..remote.cmd import NAME, Cmd, Piece, Secret
from . import scripts
from .context import Context
from .plan import Daemon
from .releases import Release
from .report import SwapParser, SwapReport, Word, parse_swap


def command_for(ctx: Context, rel: Release) -> list[str]:
    """The command line a release runs with, as it was recorded, as the uid and gid it ran as."""
    spec = ctx.spec
    argv = rel.argv or (spec.binary,)
    # The daemon runs from the binary path (now the release) when that is its recorded argv[0]; a
    # command recorded with another argv[0] (an adopted daemon) runs from its saved copy, with that argv[0].
    if argv[0] == spec.binary and "=" not in argv[0]:
        command = list(argv)
    else:
        command = ["perl", "-e", scripts.PERL_ARGV0, rel.path(ctx.state), *argv]
    if rel.uid:  # not root: setpriv drops to it (its groups from /etc/group) before the daemon starts
        command = ["setpriv", f"--reuid={rel.uid}", f"--regid={rel.gid or 0}", "--init-groups", *command]
    return command


def env_block(rel: Release) -> Secret:
    """A release's environment as the swap script's `start` takes it: `K='v'` lines, each key a variable
    name (environ.NAME, checked where it entered). All of it counts as secret: it goes on stdin only."""
    for k, _ in rel.env or ():
        if not NAME.fullmatch(k):  # never pasted into the shell: the release's manifest was checked already
            raise ValueError(f"{k!r} is not an environment variable name")
    return Secret("".join(f"{k}={shlex.quote(v)}\n" for k, v in rel.env or ()))


def fallback_inputs(ctx: Context, target: Release, fallback: Release | None) -> dict[str, Piece]:
    """What the swap script needs to go back to `fallback` by itself if this deploy loses its connection
    and `target` fails: its path, cwd, environment, command line (rendered once, as the channel would), and
    what its journal line names (the host writes that line whole)."""
    if fallback is None:
        return dict.fromkeys(("fb_target", "fb_sha", "fb_cwd", "fb_env", "fb_cmd", "fb_host", "fb_from", "fb_to",
                              "fb_current"), "")
    command = Cmd(*command_for(ctx, fallback)).render()
    return {"fb_target": fallback.path(ctx.state), "fb_sha": fallback.sha256, "fb_cwd": fallback.cwd or "/",
            "fb_env": env_block(fallback),
            "fb_cmd": command, "fb_host": ctx.name, "fb_from": target.sha256, "fb_to": fallback.sha256,
            "fb_current": fallback.id}


def gpu_limits(ctx: Context, status: HostStatus, pids: list[int]) -> str:
    """Per GPU, the most memory it may still use once the daemon's own is released."""
    if not status.gpus:
        return ""
    held: dict[str, float] = {}
    for app in status.gpu_processes:
        if app.pid in pids:
            held[app.gpu_uuid] = held.get(app.gpu_uuid, 0) + (app.used_mib or 0)
    slack = ctx.book.memory.gpu_slack_mib
    return ",".join(f"{g.index}:{int((g.memory_used_mib or 0) - held.get(g.uuid, 0) + slack)}" for g in status.gpus)


def unit_of(old: Daemon | None, unit: str) -> str:
    """The unit a swap goes through: the one given, else the one the old daemon runs under."""
    return unit or (old.unit if old and old.unit else "")


def swap_cmd(ctx: Context, old: Daemon | None, target: Release, gpu_max: str, fallback: Release | None,
             unit: str = "", reset: bool = False) -> Cmd:
    spec, mem = ctx.spec, ctx.book.memory
    inputs: dict[str, Piece | int] = {
        "pid": str(old.pid) if old else "", "grace_ms": int(spec.stop_grace_s * 1000),
        "group": "1" if old and old.group_leader else "0", "unit": unit_of(old, unit),
        "reset": "1" if reset else "",
        "timeout_ms": int(mem.release_timeout_s * 1000), "min_kib": int(mem.min_available_gib * (1 << 20)),
        "smi_cs": max(1, round(ctx.book.gpu.nvidia_smi_timeout_s * 100)),
        "gpu_max": gpu_max, "bin": spec.binary, "target": target.path(ctx.state), "sha": target.sha256,
        "run_gid": str(target.gid) if target.uid else "", "cwd": target.cwd or "/",
        "log": spec.log, "re": spec.ready_log, "ready_s": int(spec.ready_timeout_s),
        "port": str(spec.ready_port or ""), "stable_ms": int(spec.ready_stable_s * 1000),
        "envq": env_block(target), **fallback_inputs(ctx, target, fallback)}
    return scripts.command_of("swap.sh", inputs, *command_for(ctx, target),
                              bash=bool(spec.ready_port))  # /dev/tcp is bash's


def swap(ctx: Context, old: Daemon | None, target: Release, gpu_max: str,
         fallback: Release | None = None, unit: str = "", reset: bool = False) -> SwapReport:
    """Stops `old`, waits for its memory, starts `target` and waits for it to be ready; the report says how.
    With `unit` all of it goes through that systemd unit (`reset`: reset-failed it once started)."""
    spec, mem = ctx.spec, ctx.book.memory
    parser = SwapParser(time.monotonic())

    def line(text: str) -> None:
        word, rest = parser.feed(text, time.monotonic())
        if word is not None:
            progress(ctx, word, rest, parser.report, target)

    unit = unit_of(old, unit)
    if unit:
        ctx.emit("stop", f"systemctl stop {unit}")
    elif old:
        ctx.emit("stop", f"SIGTERM to {old.pid}")
    else:
        ctx.emit("memory", "checking memory")
    deadline = spec.stop_grace_s + mem.release_timeout_s + spec.ready_timeout_s + spec.ready_stable_s + 120
    ctx.host.stream(swap_cmd(ctx, old, target, gpu_max, fallback, unit, reset), line, timeout=deadline)
    run = parser.finish(time.monotonic())
    if run.failure.startswith("another swap"):  # it waited 30 s for swap.lock and stopped nothing
        raise LockHeld(f"{run.failure}; this one stopped nothing: wait for it to end, then check "
                       f"`swapctl status {ctx.name}`", host=ctx.name)
    return run


def changed(ctx: Context, run: SwapReport) -> Refused:
    """The refusal for a release whose file is not the binary its sha256 names (swap.sh stopped nothing)."""
    return Refused(f"{run.failure.removeprefix('release changed: ')}; it is not the binary it was, so nothing was "
                   f"stopped and the daemon runs on: look at who changed it, then deploy that build again",
                   host=ctx.name)


def progress(ctx: Context, word: Word, rest: str, so_far: SwapReport, target: Release) -> None:
    """The event a line of the swap script is worth, if any."""
    if word is Word.LOG:
        ctx.emit("ready", log_line=rest)
    elif word is Word.SIGKILL:
        ctx.emit("stop", f"still running after {ctx.spec.stop_grace_s:g} s: SIGKILL")
    elif word is Word.STOPPED:
        kids = f"; waiting for its descendants too ({len(so_far.kids)})" if so_far.kids else ""
        ctx.emit("stop", f"stopped in {int(rest) / 1000:.2f} s{kids}")
    elif word is Word.R and so_far.reading:
        r = so_far.reading
        holding = ",".join(map(str, r.alive)) or "-"
        ctx.emit("memory", f"MemAvailable {r.avail_kib / (1 << 20):.1f} GiB, holding: {holding}")
    elif word is Word.STARTED:
        ctx.emit("start", f"started {target.id} as pid {so_far.pid}")
    elif word is Word.READY:
        ctx.emit("ready", f"{target.id} is ready")
    elif word is Word.WATCH:
        ctx.emit("ready", f"ready; it must stay up {int(rest) / 1000:g} s (daemon.ready_stable_s)")
    elif word is Word.EXITED and not so_far.ready_seen:
        ctx.emit("ready", f"{target.id} exited before it was ready")


def memory_error(ctx: Context, run: SwapReport) -> UnknownState:
    mem, r = ctx.book.memory, run.reading
    avail = r.avail_kib / (1 << 20) if r else 0
    holders = ",".join(map(str, r.alive)) if r and r.alive else "none"
    gpu = f", GPU memory used {r.gpu_used}" if r and r.gpu_used else ""
    return UnknownState(
        f"memory not back after {mem.release_timeout_s:g} s: MemAvailable {avail:.1f} GiB "
        f"(need {mem.min_available_gib:g}), old processes still alive: {holders}{gpu}; no daemon runs "
        f"now: find what holds the memory, then `swapctl deploy` again", host=ctx.name)


def stop_only(ctx: Context, pid: int, unit: str = "") -> SwapReport:
    """Stops a daemon swapctl started and nothing more (a failed start with nothing to go back to); under
    `unit`, through it (pid 0: its daemon exited, the stop cancels a restart)."""
    out = ctx.run(scripts.command("stop.sh", pid=pid, grace_ms=int(ctx.spec.stop_grace_s * 1000), unit=unit))
    return parse_swap((0.0, line) for line in out.stdout.splitlines())


def log_tail(ctx: Context, offset: int, lines: int = 20, invocation: str = "") -> str:
    """The daemon's log after byte `offset`, its last `lines` lines; with log "journal", the lines of the
    unit's start `invocation` (else the unit's last lines)."""
    return ctx.run(scripts.command("tail.sh", path=ctx.spec.log, offset=offset, lines=lines,
                                   unit=ctx.spec.unit or "", inv=invocation), check=False).stdout
