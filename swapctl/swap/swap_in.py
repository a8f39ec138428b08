"""The SwapIn step, a deploy's and a rollback's alike: stop, memory wait, start and readiness, and, when the
start fails, the host's own way back: it goes back to the fallback by itself (host/swap/swap.sh), marks the
failed release bad and journals what it did. This side reads what the host says (swap/ending.py) and turns
it into an outcome or an error."""

from __future__ import annotations

from ..errors import RemoteTimeout, RolledBack, SwapctlError, UnknownState, Unreachable
from ..facts.journal_entry import JournalEntry, Upload, parse
from ..facts.releases import Release
from . import cordon, swaprun
from .context import Context
from .ending import Ending, done_as, ending
from .events import Outcome
from .interrupts import Phase
from .journal import record_local
from .plan import Plan
from .words import SwapReport

INTERRUPTED = "a second Ctrl-C"  # the host's reason for a rollback asked for (host/swap/swap.sh's why_failed)


def swap_in(ctx: Context, plan: Plan, target: Release, action: str, fallback: Release | None,
            steps: dict[str, float], upload: Upload | None = None) -> Outcome:
    """Stops what runs, waits for memory, starts `target`; the host rolls back to `fallback` if it fails.

    Used by deploy and rollback alike (their SwapIn step); `steps` are the times of the steps before.
    Raises RolledBack (4) or UnknownState (5) on failure, and UnknownState when the connection is lost in
    any part of it: the host finishes alone, its rollback included."""
    old_sha = plan.daemon.sha256 if plan.daemon else (fallback.sha256 if fallback else None)
    ctx.interrupts.stop_begins()  # a press counted before it aborts: nothing changed
    pids = [plan.daemon.pid] if plan.daemon else []
    record = swaprun.Record(action, old_sha, steps, upload)
    try:
        run = swaprun.swap(ctx, plan.daemon, target, swaprun.gpu_limits(ctx, plan.status, pids), fallback, record,
                           unit=plan.unit)
    except (Unreachable, RemoteTimeout) as exc:
        raise UnknownState(f"{exc.message} while swapping: the host finishes the swap by itself (stop, memory "
                           f"wait, start, and the rollback if the start fails) and journals how it ended; check "
                           f"with `swapctl status {ctx.name}` and `swapctl history {ctx.name}` before deploying "
                           f"again", host=ctx.name) from None
    if run.release_changed:  # checked before the stop: nothing changed
        ctx.interrupts.enter(Phase.PLANNING)
        raise swaprun.changed(ctx, run)
    if run.cordon_refused:  # the cordon refused before the stop, and lifted itself: nothing was stopped
        ctx.interrupts.enter(Phase.PLANNING)
        raise cordon.refused(ctx, run)
    if run.drain_refused:  # proofs still in flight at the drain's limit: nothing was stopped
        ctx.interrupts.enter(Phase.PLANNING)
        raise swaprun.drain_refused(ctx, run)
    ctx.interrupts.enter(Phase.SWAPPED)
    line = _recorded(run)
    end = ending(run, fallback is not None)
    if end in (Ending.NO_OUTCOME, Ending.UNKNOWN):
        how = (f"with an outcome swapctl does not know ({run.outcome!r})" if run.outcome else
               f"without saying how the swap ended ({run.failure or 'no outcome'})")
        raise UnknownState(f"the swap script on the host ended {how}; check `swapctl status {ctx.name}`",
                           host=ctx.name)
    if end is Ending.NO_DAEMON:  # before any start: the memory wait timed out
        raise swaprun.memory_error(ctx, run)
    if end is not Ending.DONE:
        raise failed(ctx, target, fallback, run, end, action, line, swaprun.unit_of(plan.daemon, plan.unit))
    return Outcome(host=ctx.name, action=action, outcome=done_as(run), old_sha=old_sha, new_sha=target.sha256,
                   steps={**steps, **run.steps}, upload=upload, log_offset=run.offset, pid=run.outcome_pid,
                   message=_unjournaled(ctx, run), lost=line.stop.lost if line and line.stop else None)


def _recorded(run: SwapReport) -> JournalEntry | None:
    """The host's journal line, kept in the local history too; None when the host sent none (or no entry)."""
    line = parse(run.journal) if run.journal else None
    if line is not None:
        record_local(line)
    return line


def _unjournaled(ctx: Context, run: SwapReport) -> str:
    return "" if run.journal_ok else (f"the host could not write its journal line ({ctx.state}/journal.jsonl: is "
                                      f"the disk full?); `swapctl history` will not show this swap.")


def failed(ctx: Context, target: Release, fallback: Release | None, run: SwapReport, end: Ending, action: str,
           line: JournalEntry | None, unit: str = "") -> SwapctlError:
    """The error for a start that failed (or a second Ctrl-C), once the host has gone back by itself: 4 when
    the fallback runs again after a deploy, else 5. An interrupted build was not marked bad, and the error is
    the last thing printed (no log tail after it)."""
    why, pid = run.back_why, run.outcome_pid
    log = f"journalctl -u {unit}" if ctx.spec.journal else f"{ctx.spec.log} from byte {run.offset}"
    interrupted = why == INTERRUPTED
    tail = "" if interrupted or not (run.pid or unit) else \
        ("\n".join(run.tail) + "\n" if run.tail else _tail(ctx, run.offset, run.invocation))
    reason = (line.reason if line else None) or why
    note = f" {_unjournaled(ctx, run)}" if not run.journal_ok else ""
    back = fallback.id if fallback else "-"
    tries = f" (after {run.retries + 1} starts)" if run.retries else ""
    if end is Ending.WENT_BACK:
        if interrupted:
            return RolledBack(f"interrupted (a second Ctrl-C): {target.id} was stopped (not marked bad); {back} "
                              f"runs again as pid {pid}{tries}.{note}", host=ctx.name)
        if action == "rollback":  # the host runs what it ran, but not what was asked for
            return UnknownState(f"the rollback to {target.id} failed ({why}); {back}, which ran before, runs again "
                                f"as pid {pid}{tries}. Failed log: {log}{note}", host=ctx.name, detail=tail)
        return RolledBack(f"{target.id} failed ({why}); rolled back: {back} runs again as pid {pid}{tries}. Failed "
                          f"log: {log}{note}", host=ctx.name, detail=tail)
    if end is Ending.NO_FALLBACK:
        return UnknownState(f"{target.id} failed ({why}) and there is no earlier release to go back to: no daemon "
                            f"runs now; its log: {log}{note}", host=ctx.name, detail=tail)
    if end is Ending.FALLBACK_UNREADY:
        return UnknownState(f"{target.id} failed ({why}), and the rollback to {back} is not ready ({reason}); it "
                            f"runs as pid {pid}; logs: {log}{note}", host=ctx.name, detail=tail)
    return UnknownState(f"{target.id} failed ({why}), and the rollback to {back} failed too ({reason}); no daemon "
                        f"runs now; logs: {log}{note}", host=ctx.name, detail=tail)


def _tail(ctx: Context, offset: int, invocation: str) -> str:
    """The failed start's log tail, for the error; a connection lost by now costs it, not the exit code."""
    try:
        return swaprun.log_tail(ctx, offset, invocation=invocation)
    except SwapctlError:
        return ""

