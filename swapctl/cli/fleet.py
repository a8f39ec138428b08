"""Swapping many hosts from the terminal: --parallel N, --canary N, --canary-wait S, --max-fail N|P%.

The rollout itself is swapctl.fleet's; this module gives it the terminal: one live view or prefixed
lines, Ctrl-C, the fleet and canary confirmations, and the summary table.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated

import typer
from rich.table import Table

from .. import playbook as pb
from ..canary import check_canary
from ..errors import BadInput, Refused, SwapctlError, UnknownState
from ..fleet import SKIPPED, Canary, CanaryGate, Fleet, Halt, Result, Rollout, Stop, fail_budget, halt_of
from ..fleet import roll_out as core_roll_out
from ..playbook import HostSpec
from ..playbook.curio import shared_nodes, shared_said
from ..swap.deploy import EventSink, Interrupts, Outcome, Plan
from ..swap.ending import Ended
from ..swap.interrupts import Phase
from .common import CtrlC, ctrl_c, err, out, select_hosts, text
from .progress import FleetView, Reporter

__all__ = ["INTERRUPTED", "SKIPPED", "Fleet", "One", "Preview", "confirm_after_plans", "fail_budget", "roll_out",
           "select_fleet", "summary"]

One = Callable[[HostSpec, Interrupts, EventSink], Result]

# Each defaults to the playbook's [rollout] table, then to rolling with no canary and no budget.
ParallelOpt = Annotated[int | None, typer.Option(
    "--parallel", min=1, help="Hosts swapped at once (1: rolling). Default: [rollout] parallel, else 1.")]
CanaryOpt = Annotated[int | None, typer.Option(
    "--canary", min=0, help="Swap this many hosts first, then go on only if they are up (after --canary-wait, "
                            "or on confirmation). Default: [rollout] canary, else 0.")]
CanaryWaitOpt = Annotated[float | None, typer.Option(
    "--canary-wait", help="Seconds the canaries run before the rollout goes on by itself. "
                          "Default: [rollout] canary_wait_s.")]
IgnoreGpuHangOpt = Annotated[bool, typer.Option(
    "--ignore-gpu-hang", help="Swap even though nvidia-smi does not answer (a wedged GPU).")]
MaxFailOpt = Annotated[str | None, typer.Option(
    "--max-fail", help="Start no new host once more than N (or P%) hosts failed. Default: [rollout] max_fail.")]


INTERRUPTED = Stop(Halt.INTERRUPTED, "interrupted (Ctrl-C)")


def confirm_fleet(question: str) -> None:
    try:
        if not typer.confirm(question, err=True):
            raise BadInput("not confirmed; nothing changed")
    except typer.Abort:
        raise Refused("interrupted at the confirmation; nothing changed") from None


def select_fleet(book: pb.Playbook, targets: list[str], fleet: Fleet, yes: bool, dry_run: bool,
                 verb: str) -> list[HostSpec]:
    """The hosts a fleet verb acts on; a bad --max-fail, or a fleet to confirm with no terminal to confirm
    on, stops it before any host."""
    specs = select_hosts(book, targets, fleet.limit)
    fail_budget(fleet.max_fail, len(specs))
    check_cordons(book, specs, fleet.parallel)
    if len(specs) > 1 and not (yes or dry_run) and not sys.stdin.isatty():
        raise BadInput(f"no terminal to confirm on: pass --yes to {verb} without asking")
    return specs


def check_cordons(book: pb.Playbook, specs: list[HostSpec], parallel: int) -> None:
    """With stop = "cordon", hosts swapped at once must cordon nodes of their own: two swaps that cordon one
    node would each think it theirs, and the first to end uncordons it under the other (issue 43)."""
    if book.daemon.stop != "cordon" or parallel < 2 or len(specs) < 2:
        return
    if shared := shared_nodes(book, [s.name for s in specs]):
        said = shared_said(book, shared).replace("(parallel = 1)", "(--parallel 1, or [rollout] parallel = 1)")
        raise BadInput(f"{book.path}: {parallel} hosts at once (--parallel or [rollout] parallel): {said}")


Preview = Callable[[Plan], None]


def confirm_after_plans(book: pb.Playbook, specs: list[HostSpec], plan_one: Callable[[Preview], One],
                        fleet: Fleet, verb: str, what: str) -> None:
    """A fleet's one question, asked once every host's plan is on the screen (each host's preflight as a
    dry run, side by side): it names the hosts, `what` goes there, the warnings and the hosts refused."""
    warned: list[str] = []

    def seen(plan: Plan) -> None:
        warned.extend(f"{plan.host}: {w}" for w in plan.warnings)

    planning = replace(fleet, parallel=max(fleet.parallel, min(len(specs), 16)), canary=0, max_fail=None)
    results, why = roll_out(book, specs, plan_one(seen), planning, True, True)
    if why == INTERRUPTED:  # hosts were skipped: the question would name hosts with no plan on the screen
        raise Refused("interrupted while the plans were made; nothing changed")
    refused = [n for n, r in results.items() if isinstance(r, SwapctlError)]
    for name in refused:
        err.print(text(f"swapctl: {results[name]}"), style="bold red")
    names = ", ".join(s.name for s in specs)
    notes = [f"{len(warned)} warning{'s' * (len(warned) != 1)}"] if warned else []
    notes += [f"{len(refused)} refused: {', '.join(refused)}"] if refused else []
    confirm_fleet(f"{verb} {len(specs)} hosts ({names}) {what}?" + (f" ({'; '.join(notes)}, above)" if notes else ""))


def dry_run_outcome(plan: Plan, action: str) -> Outcome:
    return Outcome(host=plan.host, action=action, outcome=Ended.DRY_RUN,
                   old_sha=plan.daemon.sha256 if plan.daemon else None, new_sha=plan.new.sha256)


class _AtTerminal:
    """One rollout at this terminal: each host's view (a live table, or its own bars), and what a Ctrl-C
    does to the rollout (no host starts after it); what it does to a host's swap is that swap's phase's."""

    def __init__(self, one: One, fleet: Fleet, live: bool, keys: CtrlC | None = None) -> None:
        self.one, self.fleet, self.live = one, fleet, live
        self.keys = keys or ctrl_c()
        self.halt = ""  # why no further host starts: Ctrl-C
        self.done: dict[str, Result] = {}  # each host's result, kept before its Ctrl-C counts as "before any change"
        self.changed = False  # a host's old daemon was stopped: no later Ctrl-C may say "nothing changed"
        self.pressed = threading.Event()  # any Ctrl-C: it ends the canaries' wait
        self.rollouts: list[Rollout] = []
        self.view: FleetView | None = None

    def each(self, spec: HostSpec) -> Result:
        with self.keys.attached(Interrupts()) as interrupts:
            sink = self.view.sink(spec.name) if self.view else Reporter(spec.name, bars=self.fleet.parallel == 1)
            result: Result = Refused("interrupted before any change", host=spec.name)
            try:
                result = self.one(spec, interrupts, sink)
            except SwapctlError as exc:
                result = exc
            except Exception as exc:  # a host's answer no parser foresaw: this host's result, not the rollout's end
                result = UnknownState(f"swapctl stopped on {type(exc).__name__}: {exc} (see `swapctl status "
                                      f"{spec.name}`, and report it)", host=spec.name)
            except KeyboardInterrupt:  # raised only before the stop (Phase.PLANNING); on_press set the halt
                pass
            finally:  # while still attached: a Ctrl-C now is counted, not raised, once the host changed
                self.changed = self.changed or interrupts.stopped
                self.done[spec.name] = result
                if isinstance(sink, Reporter):
                    sink.close()
        if self.view:
            self.view.finish(spec.name, _outcome_word(result))
        return result

    def batch(self, rollout: Rollout, hosts: list[HostSpec]) -> None:
        self.rollouts.append(rollout)
        rollout.stopped = rollout.stopped or self.halt
        if not self.live:
            rollout.run(hosts)
            return
        with FleetView([s.name for s in hosts], err) as v:
            self.view = v
            try:
                rollout.run(hosts)
            finally:
                self.view = None

    def on_press(self) -> None:
        """No host starts after a Ctrl-C: in a batch, or the batch after the canaries."""
        self.halt = self.halt or INTERRUPTED
        self.pressed.set()
        for r in self.rollouts:
            r.stopped = r.stopped or INTERRUPTED

    def wait_for_canaries(self, seconds: float) -> None:
        """The canaries' run before the rest; a Ctrl-C ends it (with --parallel it raises nothing)."""
        err.print(text(f"canaries run for {seconds:g} s before the rollout goes on"))
        self.pressed.wait(seconds)


def roll_out(book: pb.Playbook, specs: list[HostSpec], one: One, fleet: Fleet, yes: bool,
             dry_run: bool) -> tuple[dict[str, Result | str], str]:
    """The core's rollout (swapctl.fleet) with this terminal's views, Ctrl-C and canary confirmation.

    Returns each host's result (or SKIPPED) and why the rollout stopped early ("" if it did not)."""
    # the live table only where the cursor can move: rich draws nothing on a pipe or at TERM=dumb
    run = _AtTerminal(one, fleet, live=len(specs) > 1 and err.is_interactive)
    gate = CanaryGate(book, check_canary, fleet.canary_wait,
                      lambda canaries: _confirm_canaries(canaries, fleet, yes), run.wait_for_canaries)
    with run.keys.listening(run.on_press, quiet=fleet.parallel > 1):  # with --parallel the swaps run on workers
        try:
            results, why = core_roll_out(specs, run.each, fleet, gate, dry_run=dry_run, batch=run.batch,
                                         halted=lambda: run.halt)
        except KeyboardInterrupt:  # between hosts, or in the canary's wait: the hosts done are reported as they are
            if not run.changed:
                raise
            results, why = {s.name: run.done.get(s.name, SKIPPED) for s in specs}, INTERRUPTED
        finally:  # the verb's report is still to print: a Ctrl-C from now on says so
            if run.changed:
                run.keys.verb.enter(Phase.FINISHED)
    if halt_of(why) is Halt.CANARY_FAILED:
        err.print("the canary failed: no other host was touched", style="bold red")
    elif halt_of(why) is Halt.CANARY_DOWN:
        err.print(text(why), style="bold red")
    return results, why


def _outcome_word(result: Result) -> str:
    return f"failed ({int(result.exit_code)})" if isinstance(result, SwapctlError) else result.outcome


def _confirm_canaries(canaries: list[Canary], fleet: Fleet, yes: bool) -> bool:
    """Shows each canary's readiness and first timings; asks whether to go on unless told already."""
    for c in canaries:
        shown = ", ".join(f"{k} {v:,.0f} ms" for k, v in c.p50_ms.items())
        err.print(text(f"canary {c.host}: up as pid {c.pid}, ready in {c.ready_s:.2f} s; "
                       f"{c.partitions} partitions so far" + (f": p50 {shown}" if shown else "") +
                       (f", GPU phase share {c.gpu_phase_share * 100:.0f}%" if c.gpu_phase_share is not None else "")),
                  style="bold green")
    if fleet.canary_wait or yes:
        return True
    if not sys.stdin.isatty():
        raise BadInput("no terminal to confirm the canary on: pass --canary-wait S or --yes")
    return bool(typer.confirm("the canary is up: go on with the other hosts?", err=True))


def summary(results: dict[str, Result | str], why_skipped: str) -> None:
    """One row a host: outcome, how the binary went, memory wait, time to ready."""
    t = Table(title="rollout", title_justify="left")
    for col in ("host", "outcome", "upload", "memory\nwait", "to\nready"):  # whole: names, words and numbers
        t.add_column(col, no_wrap=True)
    t.add_column("note", overflow="fold", ratio=1)  # an error message: it gets what is left, and folds
    for name, r in results.items():
        if isinstance(r, str):
            t.add_row(text(name), "skipped", "", "", "", text(why_skipped), style="dim")
        elif isinstance(r, SwapctlError):
            t.add_row(text(name), f"failed ({int(r.exit_code)})", "", "", "", text(r.message), style="red")
        else:
            how = (r.upload.method if r.upload else "") + (f", {r.upload_mb_s:.0f} MB/s" if r.upload_mb_s else "")
            mem = r.steps.get("memory")
            ready = r.steps.get("ready")
            t.add_row(text(name), r.outcome, text(how), "" if mem is None else f"{mem:.2f} s",
                      "" if ready is None else f"{ready:.2f} s", text(r.message),
                      style="green" if r.outcome in (Ended.DEPLOYED, Ended.ROLLED_BACK) else None)
    out.print(t)
