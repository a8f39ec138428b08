"""The swap itself as one script on the host (host/swap/swap.sh): stop, wait for memory, start, readiness. No round
trip sits between the old daemon's exit and the new start, and the host finishes alone if the
connection drops."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from ..errors import LockHeld, Refused, SwapctlError, UnknownState
from ..facts.journal_entry import Upload
from ..facts.releases import Release, who_am_i
from ..facts.status import HostStatus
from ..host import scripts
from ..remote.cmd import Cmd, Piece
from . import cordon, inputs
from .command import NoCommand
from .command import command_for as core_command_for
from .context import Context
from .plan import Daemon
from .words import WHOLE, Reading, SwapParser, SwapReport, Word


def command_for(ctx: Context, rel: Release) -> list[str]:
    """The command line a release runs with (the swap core's command_for); Refused where none is recorded."""
    try:
        return core_command_for(ctx.spec.binary, ctx.state, rel)
    except NoCommand:
        raise Refused(f"release {rel.id} has no recorded command line or directory, and swapctl never starts a "
                      f"bare binary in /: nothing was changed; deploy it (`swapctl deploy`), which records the "
                      f"playbook's", host=ctx.name) from None


@dataclass(frozen=True)
class Record:
    """What the host's journal line for a swap names that the swap script cannot know: deploy or rollback,
    the sha256 that ran before, the steps timed before the swap, how the binary got there."""

    action: str  # deploy | rollback
    old_sha: str | None
    steps: dict[str, float]
    upload: Upload | None = None


def fallback_inputs(ctx: Context, fallback: Release | None) -> dict[str, Piece]:
    """What the swap script needs to go back to `fallback` by itself (inputs.fallback_inputs), its command
    line as it was recorded (command_for)."""
    command = Cmd(*command_for(ctx, fallback)).render() if fallback is not None else ""
    return inputs.fallback_inputs(knobs(ctx), fallback, command)


def journal_inputs(ctx: Context, record: Record) -> dict[str, Piece | int]:
    """The journal line's parts the swap script writes in: swapctl's user@host as `by`, the upload's record."""
    extra = json.dumps({"upload": record.upload.to_dict()})[1:-1] if record.upload is not None else ""
    return inputs.journal_inputs(record.action, who_am_i(), ctx.name, record.old_sha, record.steps, extra)


def gpu_limits(ctx: Context, status: HostStatus, pids: list[int]) -> str:
    """Per GPU, the most memory it may still use once the daemon's own is released."""
    return inputs.gpu_max(((g.index, g.uuid, g.memory_used_mib or 0) for g in status.gpus),
                          ((a.pid, a.gpu_uuid, a.used_mib or 0) for a in status.gpu_processes), pids,
                          ctx.book.memory.gpu_slack_mib)


def knobs(ctx: Context) -> inputs.Knobs:
    """The settings the swap core reads (swap/inputs.py): the playbook's, with the host's Curio nodes."""
    return inputs.Knobs(ctx.spec, ctx.book.memory, ctx.book.gpu, ctx.book.curio_of(ctx.name))


def cordoning(ctx: Context) -> bool:
    return inputs.cordoning(knobs(ctx))


def unit_of(old: Daemon | None, unit: str) -> str:
    """The unit a swap goes through: the one given, else the one the old daemon runs under."""
    return unit or (old.unit if old and old.unit else "")


def swap_cmd(ctx: Context, old: Daemon | None, target: Release, gpu_max: str, fallback: Release | None,
             unit: str = "", reset: bool = False, record: Record | None = None) -> Cmd:
    k, sha = knobs(ctx), old.sha256 if old else None
    named: dict[str, Piece | int] = {
        **inputs.daemon_inputs(k, old.pid if old else None, bool(old and old.group_leader), target, gpu_max),
        "unit": unit_of(old, unit), "reset": "1" if reset else "", "lock_info": ctx.lock_info,
        **fallback_inputs(ctx, fallback), **inputs.status_inputs(ctx.spec, sha), **inputs.cordon_inputs(k, sha),
        **journal_inputs(ctx, record or Record("deploy", sha, {}))}
    return scripts.command_of("swap.sh", named, *command_for(ctx, target),
                              bash=bool(ctx.spec.ready_port))  # /dev/tcp is bash's


def swap(ctx: Context, old: Daemon | None, target: Release, gpu_max: str, fallback: Release | None,
         record: Record, unit: str = "") -> SwapReport:
    """Stops `old`, waits for its memory, starts `target` and waits for it to be ready; when that fails the
    host goes back to `fallback` itself and journals how it ended (`record`). The report says how. With `unit`
    all of it goes through that systemd unit (a rollback's start reset-failed)."""
    spec = ctx.spec
    parser = SwapParser(time.monotonic())

    def line(text: str) -> None:
        word, rest = parser.feed(text, time.monotonic())
        if word in WHOLE or word is Word.ROLLBACK:
            whole(ctx, word, rest, target, fallback)
        elif word is not None and parser.back is not None and fallback is not None:
            progress(ctx, word, rest, parser.back.report, fallback)  # the host's rollback: the fallback's start
        elif word is not None:
            progress(ctx, word, rest, parser.report, target)

    unit = unit_of(old, unit)
    stop = f"systemctl stop {unit}" if unit else f"SIGTERM to {old.pid}" if old else ""
    if old and old.sha256 and cordoning(ctx):
        nodes = ", ".join(ctx.book.curio_of(ctx.name).nodes)
        ctx.emit("stop", f"cordoning {nodes} (Curio) until they own no cuzk task; then {stop}")
    elif old and old.sha256 and spec.status_url and spec.stop == "drain":
        ctx.emit("stop", f"draining {old.pid}: until no proof is in flight (at most {spec.drain_timeout_s:g} s); "
                         f"then SIGINT (it takes no new proof) and {stop}")
    elif stop:
        ctx.emit("stop", stop)
    else:
        ctx.emit("memory", "checking memory")
    deadline = inputs.deadline_s(knobs(ctx))
    done = threading.Event()
    watcher = threading.Thread(target=_second_ctrl_c, args=(ctx, parser, done), daemon=True)
    if fallback is not None:  # with nothing to go back to, a second Ctrl-C lets the swap finish
        watcher.start()
    try:
        ctx.host.stream(swap_cmd(ctx, old, target, gpu_max, fallback, unit, False, record),
                        line, timeout=deadline)
    finally:
        done.set()
    run = parser.finish(time.monotonic())
    if run.failure.startswith("no tool: "):  # found missing before the stop: nothing changed
        raise Refused(f"{run.failure.removeprefix('no tool: ')} (what root runs is never taken from another "
                      f"PATH); install it there, then deploy again: nothing was stopped", host=ctx.name)
    if run.failure.startswith("another swap"):  # it waited 30 s for swap.lock and stopped nothing
        raise LockHeld(f"{run.failure}; this one stopped nothing: wait for it to end, then check "
                       f"`swapctl status {ctx.name}`", host=ctx.name)
    return run


def _second_ctrl_c(ctx: Context, parser: SwapParser, done: threading.Event) -> None:
    """Waits beside the swap for a second Ctrl-C, then tells the swap script (interrupt.sh): it rolls back at
    once, wherever the new build's start is. Sent once, and not once the host rolls back already."""
    while not done.wait(0.05):
        pid = parser.report.script_pid
        if ctx.interrupts.second.is_set() and pid and not parser.rolling_back:
            try:
                ctx.run(scripts.command("interrupt.sh", pid=pid), check=False)
            except SwapctlError:
                pass  # the connection is gone: the swap finishes by itself, as after any cut
            return


def changed(ctx: Context, run: SwapReport) -> Refused:
    """The refusal for a release whose file is not the binary its sha256 names (swap.sh stopped nothing)."""
    return Refused(f"{run.failure.removeprefix('release changed: ')}; it is not the binary it was, so nothing was "
                   f"stopped and the daemon runs on: look at who changed it, then deploy that build again",
                   host=ctx.name)


def drain_refused(ctx: Context, run: SwapReport) -> Refused:
    """The refusal for a drain that timed out with drain_timeout "refuse": the daemon works on."""
    left = run.in_flight.summary() if run.in_flight else "proofs in flight"
    return Refused(f"{left} after the drain's {ctx.spec.drain_timeout_s:g} s, and daemon.drain_timeout is "
                   f"\"refuse\": nothing was stopped and the daemon works on; deploy again at a quieter moment, "
                   f"raise daemon.drain_timeout_s, or deploy with --now to stop it anyway", host=ctx.name)


def progress(ctx: Context, word: Word, rest: str, so_far: SwapReport, target: Release) -> None:
    """The event a line of the swap script is worth, if any."""
    said = cordon.event(ctx, word, rest) if cordoning(ctx) else None
    if said is not None:
        ctx.emit("stop", said)
    elif word is Word.LOG:
        ctx.emit("ready", log_line=rest)
    elif word is Word.INFLIGHT and so_far.in_flight and not so_far.stopped:
        ctx.emit("stop", so_far.in_flight.summary())
    elif word is Word.NOSTATUS:
        ctx.emit("stop", f"the daemon's status did not answer ({rest.strip()}): in-flight work unknown")
    elif word is Word.DRAINED:
        ctx.emit("stop", f"drained in {int(rest) / 1000:.2f} s: nothing in flight at its last reading; SIGINT sent "
                         f"(it takes no new proof), the stop next")
    elif word is Word.UNDRAINED:
        n = rest.split()[1]
        then = "refusing to stop it" if ctx.spec.drain_timeout == "refuse" else "stopping anyway, no SIGINT"
        ctx.emit("stop", f"{n} still in flight after {ctx.spec.drain_timeout_s:g} s (daemon.drain_timeout): {then}")
    elif word is Word.SIGKILL:
        ctx.emit("stop", f"still running after {ctx.spec.stop_grace_s:g} s: SIGKILL")
    elif word is Word.STOPPED:
        kids = f"; waiting for its descendants too ({len(so_far.kids)})" if so_far.kids else ""
        lost = so_far.in_flight.proofs if so_far.in_flight else ()  # the journal's `lost`: its last reading's
        said = f"; lost {so_far.in_flight.summary()}" if so_far.in_flight and lost else ""
        ctx.emit("stop", f"stopped in {int(rest) / 1000:.2f} s{said}{kids}")
    elif word is Word.R and so_far.reading:
        r = so_far.reading
        holding = ",".join(map(str, r.alive)) or "-"
        ctx.emit("memory", f"{memory_said(r)}, holding: {holding}")
    elif word is Word.STARTED:
        ctx.emit("start", f"started {target.id} as pid {so_far.pid}")
    elif word is Word.READY:
        ctx.emit("ready", f"{target.id} is ready")
    elif word is Word.WATCH:
        ctx.emit("ready", f"ready; it must stay up {int(rest) / 1000:g} s (daemon.ready_stable_s)")
    elif word is Word.EXITED and not so_far.ready_seen:
        ctx.emit("ready", f"{target.id} exited before it was ready")


def whole(ctx: Context, word: Word | None, rest: str, target: Release, fallback: Release | None) -> None:
    """The event a line about the whole swap is worth: the host's own rollback and what it did."""
    if word is Word.UNCORDON and cordoning(ctx):
        ctx.emit("stop" if rest.startswith("ok started") else "ready", cordon.event(ctx, word, rest) or rest)
    elif word is Word.ROLLBACK:
        ctx.emit("rollback", f"{target.id} failed: {rest}; rolling back" if rest != "a second Ctrl-C" else
                 f"a second Ctrl-C: stopping {target.id}; rolling back")
    elif word is Word.RETRY and fallback is not None:
        ctx.emit("rollback", f"{fallback.id} did not stay up: starting it again (start {rest})")
    elif word is Word.MARKED:
        ctx.emit("rollback", f"{rest} marked bad: never a rollback target")


def memory_said(r: Reading) -> str:
    """A reading's memory: MemAvailable, and the new daemon's cgroup's room where a limit holds it."""
    said = f"MemAvailable {r.avail_kib / (1 << 20):.1f} GiB"
    return said if r.room_kib is None else f"{said}, its cgroup's room {r.room_kib / (1 << 20):.1f} GiB"


def memory_error(ctx: Context, run: SwapReport) -> UnknownState:
    mem, r = ctx.book.memory, run.reading
    holders = ",".join(map(str, r.alive)) if r and r.alive else "none"
    gpu = f", GPU memory used {r.gpu_used}" if r and r.gpu_used else ""
    return UnknownState(
        f"memory not back after {mem.release_timeout_s:g} s: {memory_said(r) if r else 'MemAvailable 0.0 GiB'} "
        f"(need {mem.min_available_gib:g}), old processes still alive: {holders}{gpu}; no daemon runs "
        f"now: find what holds the memory, then `swapctl deploy` again", host=ctx.name)


def log_tail(ctx: Context, offset: int, lines: int = 20, invocation: str = "") -> str:
    """The daemon's log after byte `offset`, its last `lines` lines; with log "journal", the lines of the
    unit's start `invocation` (else the unit's last lines)."""
    return ctx.run(scripts.command("tail.sh", path=ctx.spec.log, offset=offset, lines=lines,
                                   unit=ctx.spec.unit or "", inv=invocation), check=False).stdout
