"""Steps 5 to 9 with their way back, in one place: swap a release in, and when it fails, go back to the
fallback (or stop it when there is none), mark it bad and journal what happened."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import RemoteTimeout, RolledBack, UnknownState, Unreachable
from ..remote.cmd import Cmd
from ..remote.host import Prepared
from . import journal, store, swaprun
from .context import Context
from .events import Outcome
from .plan import Daemon, Plan
from .releases import Release
from .report import SwapReport


@dataclass(frozen=True)
class Attempt:
    """A start that failed: why, what was started, and that swap's own step times."""

    why: str
    run: SwapReport
    steps: dict[str, float]


@dataclass(frozen=True)
class After:
    """What follows a swap that went well: its journal line then `then` (pruning), through `shell`, a shell
    started on the host before the swap (journal.epilogue), so that none of it starts a command anew."""

    shell: Prepared | None = None
    then: tuple[Cmd, ...] = ()


def swap_in(ctx: Context, plan: Plan, target: Release, action: str, fallback: Release | None,
            steps: dict[str, float], upload: dict[str, Any] | None = None, after: After = After()) -> Outcome:
    """Stops what runs, waits for memory, starts `target`; rolls back to `fallback` if it fails.

    Used by deploy and rollback alike; `steps` are the times of the steps before; `after` runs only when
    the swap went well. Raises RolledBack (4) or UnknownState (5) on failure."""
    old_sha = plan.daemon.sha256 if plan.daemon else (fallback.sha256 if fallback else None)
    if ctx.interrupts.count:
        raise KeyboardInterrupt
    ctx.interrupts.critical = True
    pids = [plan.daemon.pid] if plan.daemon else []
    try:
        run = swaprun.swap(ctx, plan.daemon, target, swaprun.gpu_limits(ctx, plan.status, pids), fallback,
                           unit=plan.unit)
    except (Unreachable, RemoteTimeout) as exc:
        raise UnknownState(f"{exc.message} while swapping: the host finishes the swap by itself (stop, memory "
                           f"wait, start); check with `swapctl status {ctx.name}` before deploying again",
                           host=ctx.name) from None
    if run.release_changed:  # checked before the stop: nothing changed
        ctx.interrupts.critical = False
        raise swaprun.changed(ctx, run)
    steps = {**steps, **run.steps}  # this attempt's own: a rollback swap after it is timed apart
    if not run.memory_ok:
        journal.write(ctx, {"action": action, "from": old_sha, "to": target.sha256, "outcome": "no-daemon",
                            "steps": steps, "reason": "memory not back"}, upload)
        raise swaprun.memory_error(ctx, run)
    if ctx.interrupts.count >= 2 and fallback:
        return roll_back(ctx, target, fallback, Attempt("a second Ctrl-C", run, steps), action, upload, plan.unit)
    if not run.ready:
        why = run.why_not(ctx.spec.ready_timeout_s)
        return roll_back(ctx, target, fallback, Attempt(why, run, steps), action, upload, plan.unit)
    outcome = Outcome(host=ctx.name, action=action, outcome="deployed" if action == "deploy" else "rolled-back",
                      old_sha=old_sha, new_sha=target.sha256, steps=steps, upload=upload, log_offset=run.offset,
                      pid=run.pid)
    journal.write(ctx, {"action": action, "from": old_sha, "to": target.sha256, "current": target.id,
                        "outcome": outcome.outcome, "pid": run.pid, "log_offset": run.offset, "steps": steps},
                  upload, after.shell, after.then)
    return outcome


def roll_back(ctx: Context, failed: Release, fallback: Release | None, attempt: Attempt, action: str,
              upload: dict[str, Any] | None, unit: str = "") -> Outcome:
    """`failed` did not come up: stop it, start `fallback` as it was recorded, mark `failed` bad. Always raises.
    Under `unit` all of it goes through the unit, which is then reset-failed: a daemon started beside it
    would run next to the one its Restart= starts."""
    started = attempt.run.pid
    tail = swaprun.log_tail(ctx, attempt.run.offset, invocation=attempt.run.invocation) if started or unit else ""
    ctx.emit("rollback", f"{failed.id} failed: {attempt.why}; rolling back")
    store.mark(ctx, failed, "bad")
    log = f"journalctl -u {unit}" if ctx.spec.journal else f"{ctx.spec.log} from byte {attempt.run.offset}"
    entry = {"action": "auto-rollback" if action == "deploy" else "rollback", "from": failed.sha256,
             "steps": attempt.steps, "failed_log": log, "reason": attempt.why}
    if fallback is None:
        stopped = swaprun.stop_only(ctx, started or 0, unit).stopped if started or unit else True
        journal.write(ctx, {**entry, "to": None, "outcome": "no-daemon" if stopped else "unknown"}, upload)
        if not stopped:
            raise UnknownState(f"{failed.id} failed ({attempt.why}), there is no earlier release to go back to, and "
                               f"stopping it did not finish: check `swapctl status {ctx.name}`; its log: {log}",
                               host=ctx.name, detail=tail)
        raise UnknownState(f"{failed.id} failed ({attempt.why}) and there is no earlier release to go back to: "
                           f"no daemon runs now; its log: {log}", host=ctx.name, detail=tail)
    run = swaprun.swap(ctx, Daemon.started(started, unit) if started else None, fallback, "", unit=unit,
                       reset=bool(unit))
    if run.release_changed:  # what to go back to is not what it was: stop the failed start, as with none
        stopped = swaprun.stop_only(ctx, started or 0, unit).stopped if started or unit else True
        journal.write(ctx, {**entry, "to": None, "outcome": "no-daemon" if stopped else "unknown"}, upload)
        raise UnknownState(f"{failed.id} failed ({attempt.why}), and the release to go back to is not the binary it "
                           f"was ({run.failure}): {'no daemon runs now' if stopped else 'stopping it did not finish'}; "
                           f"its log: {log}", host=ctx.name, detail=tail)
    entry["rollback_steps"] = run.steps
    if not run.memory_ok:
        journal.write(ctx, {**entry, "to": fallback.sha256, "outcome": "no-daemon"}, upload)
        raise swaprun.memory_error(ctx, run)
    if not run.ready:
        why = run.why_not(ctx.spec.ready_timeout_s)
        store.mark(ctx, fallback, "bad")
        journal.write(ctx, {**entry, "to": fallback.sha256, "current": fallback.id, "outcome": "rollback-failed"},
                      upload)
        raise UnknownState(f"{failed.id} failed ({attempt.why}), and the rollback to {fallback.id} failed too "
                           f"({why}); no daemon runs now; logs: {log}", host=ctx.name,
                           detail=swaprun.log_tail(ctx, run.offset, invocation=run.invocation))
    journal.write(ctx, {**entry, "to": fallback.sha256, "current": fallback.id, "outcome": "rolled-back",
                        "pid": run.pid, "log_offset": run.offset}, upload)
    if action == "rollback":  # the host runs what it ran, but not what was asked for
        raise UnknownState(f"the rollback to {failed.id} failed ({attempt.why}); {fallback.id}, which ran before, "
                           f"runs again as pid {run.pid}. Failed log: {log}", host=ctx.name, detail=tail)
    raise RolledBack(f"{failed.id} failed ({attempt.why}); rolled back: {fallback.id} runs again as pid {run.pid}. "
                     f"Failed log: {log}", host=ctx.name, detail=tail)


def rollback_fallback(plan: Plan) -> Release | None:
    """What a failed rollback goes back to: what ran before it, when that is a good release."""
    running = plan.known.get(plan.running or "")
    return running if running and running.status == "ok" and running.id != plan.new.id else None
