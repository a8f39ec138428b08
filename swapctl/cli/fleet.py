"""Swapping many hosts: rolling by default, --parallel N, --canary N, --max-fail N|P%.

Deploy and rollback share this. Each host's swap is independent (its own connection, lock, rollback);
the rollout only decides which hosts start. Once failures exceed --max-fail no new host starts, and
hosts in flight finish their swap or roll back.
"""

from __future__ import annotations

import io
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.table import Table

from .. import playbook as pb
from ..errors import BadInput, Refused, SwapctlError
from ..logs.timings import parse
from ..playbook import HostSpec
from ..remote import connect
from ..swap.deploy import EventSink, Interrupts, Outcome, Plan, Swap
from .common import err, out, select_hosts, text
from .progress import FleetView, Reporter

Result = Outcome | SwapctlError
SKIPPED = "skipped"
One = Callable[[HostSpec, Interrupts, EventSink], Result]

ParallelOpt = Annotated[int, typer.Option("--parallel", min=1, help="Hosts swapped at once (1: rolling).")]
CanaryOpt = Annotated[int, typer.Option("--canary", min=0, help="Swap this many hosts first, then go on only if "
                                        "they are up (after --canary-wait, or on confirmation).")]
CanaryWaitOpt = Annotated[float | None, typer.Option(
    "--canary-wait", help="Seconds the canaries run before the rollout goes on by itself.")]
MaxFailOpt = Annotated[str | None, typer.Option(
    "--max-fail", help="Start no new host once more than N (or P%) hosts failed.")]


@dataclass(frozen=True)
class Fleet:
    parallel: int = 1
    canary: int = 0
    canary_wait: float | None = None
    max_fail: str | None = None
    limit: str | None = None


def fail_budget(max_fail: str | None, hosts: int) -> int | None:
    """--max-fail as a number of failed hosts the rollout tolerates; None: no limit."""
    if max_fail is None:
        return None
    try:
        if max_fail.endswith("%"):
            return int(hosts * float(max_fail[:-1]) / 100)
        return int(max_fail)
    except ValueError:
        raise BadInput(f"--max-fail {max_fail!r} is neither a number of hosts nor a percentage (2, or 25%)") from None


@dataclass
class Rollout:
    """Runs `one` over hosts, at most `parallel` at a time, until failures exceed `budget`."""

    one: Callable[[HostSpec], Result]
    parallel: int = 1
    budget: int | None = None

    def __post_init__(self) -> None:
        self.results: dict[str, Result | str] = {}
        self.failures = 0
        self.stopped = ""

    def run(self, specs: list[HostSpec]) -> None:
        queue = list(specs)
        if self.parallel == 1:  # rolling: in this thread, so Ctrl-C reaches the swap as it always did
            while queue and not self.stopped:
                spec = queue.pop(0)
                self._record(spec, self.one(spec))
            for spec in queue:
                self.results[spec.name] = SKIPPED
            return
        with ThreadPoolExecutor(max_workers=max(1, self.parallel)) as pool:
            running: dict[Future, HostSpec] = {}
            while queue or running:
                while queue and len(running) < self.parallel and not self.stopped:
                    spec = queue.pop(0)
                    running[pool.submit(self.one, spec)] = spec
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    self._record(running.pop(fut), fut.result())
            for spec in queue:
                self.results[spec.name] = SKIPPED

    def _record(self, spec: HostSpec, result: Result) -> None:
        self.results[spec.name] = result
        if isinstance(result, SwapctlError):
            self.failures += 1
            if self.budget is not None and self.failures > self.budget and not self.stopped:
                self.stopped = f"{self.failures} hosts failed, more than --max-fail {self.budget}"


def press(interrupts: Interrupts) -> None:
    """One Ctrl-C for one host's swap: before its stop it aborts; after it, the swap finishes or rolls back."""
    if interrupts.critical:
        err.print("Ctrl-C: the old daemon is stopped, so the swap finishes; Ctrl-C again rolls back to it",
                  style="bold yellow") if interrupts.count == 0 else err.print(
            "Ctrl-C again: rolling back to the old daemon", style="bold yellow")
    interrupts.press()


def confirm_fleet(verb: str, count: int) -> None:
    if not sys.stdin.isatty():
        raise BadInput(f"no terminal to confirm on: pass --yes to {verb} without asking")
    try:
        if not typer.confirm(f"{verb} {count} hosts?", err=True):
            raise BadInput("not confirmed; nothing changed")
    except typer.Abort:
        raise Refused("interrupted at the confirmation; nothing changed") from None


def select_fleet(book: pb.Playbook, targets: list[str], fleet: Fleet, yes: bool, dry_run: bool,
                 verb: str) -> list[HostSpec]:
    """The hosts a fleet verb acts on; a bad --max-fail or an unconfirmed fleet stops it before any host."""
    specs = select_hosts(book, targets, fleet.limit)
    fail_budget(fleet.max_fail, len(specs))
    if len(specs) > 1 and not (yes or dry_run):
        confirm_fleet(verb, len(specs))
    return specs


def dry_run_outcome(plan: Plan, action: str) -> Outcome:
    return Outcome(host=plan.host, action=action, outcome="dry-run",
                   old_sha=plan.daemon.sha256 if plan.daemon else None, new_sha=plan.new.sha256)


def roll_out(book: pb.Playbook, specs: list[HostSpec], one: One, fleet: Fleet, yes: bool,
             dry_run: bool) -> tuple[dict[str, Result | str], str]:
    """Runs `one` on every host as `fleet` says: canaries first, then the rest within the failure budget.

    Returns each host's result (or SKIPPED) and why the rollout stopped early ("" if it did not)."""
    budget = fail_budget(fleet.max_fail, len(specs))
    many = len(specs) > 1
    live = many and err.is_terminal
    active: list[Interrupts] = []
    halt = [""]  # why no further host starts: Ctrl-C
    rollouts: list[Rollout] = []
    view: list[FleetView] = []

    def each(spec: HostSpec) -> Result:
        interrupts = Interrupts()
        active.append(interrupts)
        sink = view[0].sink(spec.name) if view else Reporter(spec.name, bars=fleet.parallel == 1)
        result: Result
        try:
            result = one(spec, interrupts, sink)
        except SwapctlError as exc:
            result = exc
        except KeyboardInterrupt:
            halt[0] = "interrupted (Ctrl-C)"
            result = Refused("interrupted before any change", host=spec.name)
        finally:
            if isinstance(sink, Reporter):
                sink.close()
            active.remove(interrupts)
        if view:
            view[0].finish(spec.name, _outcome_word(result))
        return result

    def run(rollout: Rollout, hosts: list[HostSpec]) -> None:
        rollouts.append(rollout)
        rollout.stopped = rollout.stopped or halt[0]
        if not live:
            rollout.run(hosts)
            return
        with FleetView([s.name for s in hosts], err) as v:
            view[:] = [v]
            try:
                rollout.run(hosts)
            finally:
                view.clear()

    def on_sigint(*_) -> None:
        for r in rollouts:
            r.stopped = r.stopped or "interrupted (Ctrl-C)"
        if fleet.parallel > 1:  # workers see the count between steps; this thread must not unwind
            for i in list(active):
                i.count += 1
            return
        if not active:
            raise KeyboardInterrupt
        for i in list(active):
            press(i)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        results: dict[str, Result | str] = {}
        why, rest = "", specs
        if fleet.canary and many and not dry_run:
            canaries, rest = specs[:fleet.canary], specs[fleet.canary:]
            first = Rollout(each, fleet.parallel)
            run(first, canaries)
            results.update(first.results)
            why = first.stopped or halt[0] or _after_canary(book, first.results, fleet, yes)
        if why:
            results.update({s.name: SKIPPED for s in rest})
        else:
            done = sum(isinstance(r, SwapctlError) for r in results.values())
            rollout = Rollout(each, fleet.parallel, None if budget is None else budget - done)
            run(rollout, rest)
            results.update(rollout.results)
            why = rollout.stopped or halt[0]
    finally:
        signal.signal(signal.SIGINT, previous)
    return results, why


def _outcome_word(result: Result) -> str:
    return f"failed ({int(result.exit_code)})" if isinstance(result, SwapctlError) else result.outcome


def _after_canary(book: pb.Playbook, results: dict, fleet: Fleet, yes: bool) -> str:
    """Why the rollout stops after its canaries, or "" to go on."""
    if any(isinstance(r, SwapctlError) for r in results.values()):
        err.print("the canary failed: no other host was touched", style="bold red")
        return "the canary failed"
    if fleet.canary_wait:
        err.print(text(f"canaries run for {fleet.canary_wait:g} s before the rollout goes on"))
        time.sleep(fleet.canary_wait)
    for name, outcome in results.items():
        with connect(book.hosts.get(name) or pb.resolve_host(book, name)) as host:
            sw = Swap(host, book)
            daemon = sw.situation().daemon
            if not daemon or daemon.sha256 != outcome.new_sha:
                err.print(text(f"canary {name} no longer runs {outcome.new_sha[:12]}"), style="bold red")
                return f"canary {name} went down"
            report = parse([io.BytesIO(sw.log_tail(outcome.log_offset or 0, 5000).encode())]).report()
        p50 = {k: v["p50"] for k, v in report["phases"].items() if v["p50"]}
        shown = ", ".join(f"{k} {p50[k]:,.0f} ms" for k in ("synth_ms", "ntt_kernels", "gpu_total_ms") if k in p50)
        busy = report["gpu_busy_fraction"]
        err.print(text(f"canary {name}: up as pid {daemon.pid}, ready in {outcome.steps.get('ready', 0):.2f} s; "
                       f"{report['partitions']} partitions so far" + (f": p50 {shown}" if shown else "") +
                       (f", GPU busy {busy * 100:.0f}%" if busy is not None else "")), style="bold green")
    if fleet.canary_wait or yes:
        return ""
    if not sys.stdin.isatty():
        raise BadInput("no terminal to confirm the canary on: pass --canary-wait S or --yes")
    go_on = typer.confirm("the canary is up: go on with the other hosts?", err=True)
    return "" if go_on else "stopped after the canary"


def summary(results: dict[str, Result | str], why_skipped: str) -> None:
    """One row a host: outcome, how the binary went, memory wait, time to ready."""
    t = Table(title="rollout", title_justify="left")
    for col in ("host", "outcome", "upload", "memory wait", "to ready", "note"):
        t.add_column(col, overflow="fold")
    for name, r in results.items():
        if isinstance(r, str):
            t.add_row(text(name), "skipped", "", "", "", text(why_skipped), style="dim")
        elif isinstance(r, SwapctlError):
            t.add_row(text(name), f"failed ({int(r.exit_code)})", "", "", "", text(r.message), style="red")
        else:
            up = r.upload or {}
            how = f"{up.get('method', '')}" + (f", {r.upload_mb_s:.0f} MB/s" if r.upload_mb_s else "")
            mem = r.steps.get("memory")
            ready = r.steps.get("ready")
            t.add_row(text(name), r.outcome, how, "" if mem is None else f"{mem:.2f} s",
                      "" if ready is None else f"{ready:.2f} s", text(r.message),
                      style="green" if r.outcome in ("deployed", "rolled-back") else None)
    out.print(t)
