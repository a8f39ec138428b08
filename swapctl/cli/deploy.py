"""`swapctl deploy HOST... --binary PATH`: the safe binary swap."""

from __future__ import annotations

import io
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated

import typer

from .. import playbook as pb
from ..errors import BadInput, Refused, SwapctlError
from ..remote import connect
from ..swap.deploy import Interrupts, Outcome, Plan, Swap, deploy as run_deploy
from ..logs.timings import parse
from . import build as build_cli
from .fleet import SKIPPED, Rollout, fail_budget, summary
from .build import BuildArgOpt, VerboseOpt
from .common import JsonOpt, LimitOpt, PlaybookOpt, err, fail, guarded, out, print_json, select_hosts, size, duration, text, worst
from .progress import Reporter


def deploy(
    hosts: Annotated[list[str], typer.Argument(help="Host names, user@address:port, or @group.")],
    binary: Annotated[str | None, typer.Option("--binary", "-b", help="The new daemon binary (a local file).")] = None,
    build: Annotated[bool, typer.Option("--build", help="Build it first from the playbook's [build] table.")] = False,
    build_arg: BuildArgOpt = None,
    verbose: VerboseOpt = False,
    playbook: PlaybookOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check and show the plan; change nothing.")] = False,
    restart: Annotated[bool, typer.Option("--restart", help="Restart even if the same binary runs.")] = False,
    parallel: Annotated[int, typer.Option("--parallel", min=1, help="Hosts swapped at once (1: rolling).")] = 1,
    canary: Annotated[int, typer.Option("--canary", min=0, help="Deploy this many hosts first, then go on only "
                                        "if they are up (after --canary-wait, or on confirmation).")] = 0,
    canary_wait: Annotated[float | None, typer.Option(
        "--canary-wait", help="Seconds the canaries run before the rollout goes on by itself.")] = None,
    max_fail: Annotated[str | None, typer.Option(
        "--max-fail", help="Start no new host once more than N (or P%) hosts failed.")] = None,
    limit: LimitOpt = None,
    json: JsonOpt = False,
) -> None:
    """Upload a new daemon binary and swap it in, rolling back by itself if it fails."""
    if build == bool(binary):
        fail(BadInput("give either --binary PATH or --build (which builds it from the playbook's [build] table)"))
    fleet = Fleet(parallel, canary, canary_wait, max_fail, limit)
    guarded(lambda: _deploy(hosts, binary, playbook, yes, dry_run, restart, json, build_arg if build else None,
                            verbose, fleet))


@dataclass(frozen=True)
class Fleet:
    parallel: int = 1
    canary: int = 0
    canary_wait: float | None = None
    max_fail: str | None = None
    limit: str | None = None


def show_plan(plan: Plan, dry_run: bool) -> None:
    d, b = plan.daemon, plan.binary
    err.rule(text(f"{plan.host}: deploy plan"))
    if d:
        err.print(text(f"old daemon: pid {d.pid}, rss {size(d.rss_kib)}, up {duration(d.elapsed_s)}, "
                       f"sha256 {d.sha256[:12]}" + (f", systemd unit {d.unit}" if d.unit else "")))
        err.print(text(f"  command line: {' '.join(d.argv)}"))
    else:
        err.print(text("old daemon: none running"))
    if b:
        err.print(text(f"new binary: {b.path}, {b.size / 1e6:.1f} MB, sha256 {b.sha256[:12]}"))
    else:
        err.print(text(f"roll back to: release {plan.new.id} ({plan.new.source}, created {plan.new.created[:19]} "
                       f"by {plan.new.by})"))
    err.print(text(f"  will run as: {' '.join(plan.new.argv or ())}  (cwd {plan.new.cwd})"))
    for src, rel in plan.to_save:
        err.print(text(f"backup: {rel.source} release {rel.id} from {src}"))
    for w in plan.warnings:
        err.print(text(f"warning: {w}"), style="bold yellow")
    if plan.unchanged:
        err.print(text("the daemon already runs this binary: nothing to do (--restart to restart it)"))
    if dry_run:
        err.print("remote commands it would run:")
        for c in plan.commands:
            err.print(text(f"  {c}"))


def _confirm(plan: Plan, yes: bool) -> None:
    if yes or plan.unchanged:
        return
    if not sys.stdin.isatty():
        raise BadInput("no terminal to confirm on: pass --yes to deploy without asking", host=plan.host)
    try:
        confirmed = typer.confirm(f"swap the daemon on {plan.host}?", err=True)
    except typer.Abort:  # Ctrl-C or end of input at the prompt
        raise Refused("interrupted at the confirmation; nothing changed", host=plan.host) from None
    if not confirmed:
        raise BadInput("not confirmed; nothing changed", host=plan.host)


def _deploy(targets: list[str], binary: str | None, playbook_path: str | None, yes: bool, dry_run: bool,
            restart: bool, as_json: bool, build_args: list[str] | None, verbose: bool, fleet: Fleet) -> int:
    book = pb.load(playbook_path)
    book.require_daemon()
    specs = select_hosts(book, targets, fleet.limit)
    budget = fail_budget(fleet.max_fail, len(specs))
    many = len(specs) > 1
    if many and not (yes or dry_run):
        _confirm_fleet(len(specs))
    build = None
    if build_args is not None:  # built once, before any host is touched
        built = build_cli.run(book, build_args, f"build/{PurePosixPath(book.daemon.binary).name}", verbose)
        binary, build = built.path, built.record()
    active: list[Interrupts] = []

    def one(spec: pb.HostSpec) -> Outcome | SwapctlError:
        interrupts = Interrupts()
        active.append(interrupts)
        reporter = Reporter(spec.name, quiet=False, bars=fleet.parallel == 1)
        try:
            with connect(spec) as host:
                sw = Swap(host, book, reporter, interrupts)
                plan = sw.plan(binary, restart=restart, build=build)
                show_plan(plan, dry_run)
                if dry_run:
                    return Outcome(host=spec.name, action="deploy", outcome="dry-run",
                                   old_sha=plan.daemon.sha256 if plan.daemon else None, new_sha=plan.new.sha256)
                _confirm(plan, yes or many)
                return run_deploy(sw, plan)
        except SwapctlError as exc:
            return exc
        except KeyboardInterrupt:
            halt[0] = "interrupted (Ctrl-C)"
            return Refused("interrupted before any change", host=spec.name)
        finally:
            reporter.close()
            active.remove(interrupts)

    halt = [""]  # why no further host starts: Ctrl-C
    rollouts: list[Rollout] = []

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
            _press(i)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        results, why = {}, ""
        rest = specs
        if fleet.canary and many and not dry_run:
            canaries, rest = specs[:fleet.canary], specs[fleet.canary:]
            first = Rollout(one, fleet.parallel)
            rollouts.append(first)
            first.run(canaries)
            results.update(first.results)
            why = _after_canary(book, first.results, fleet, yes)
        if why:
            results.update({s.name: SKIPPED for s in rest})
        else:
            done = sum(isinstance(r, SwapctlError) for r in results.values())
            rollout = Rollout(one, fleet.parallel, None if budget is None else budget - done)
            rollouts.append(rollout)
            rollout.stopped = halt[0]
            rollout.run(rest)
            results.update(rollout.results)
            why = rollout.stopped or halt[0]
    finally:
        signal.signal(signal.SIGINT, previous)
    return _report(results, why, as_json)


def _confirm_fleet(count: int) -> None:
    if not sys.stdin.isatty():
        raise BadInput("no terminal to confirm on: pass --yes to deploy without asking")
    try:
        if not typer.confirm(f"swap the daemon on {count} hosts?", err=True):
            raise BadInput("not confirmed; nothing changed")
    except typer.Abort:
        raise Refused("interrupted at the confirmation; nothing changed") from None


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
    return "" if typer.confirm("the canary is up: go on with the other hosts?", err=True) else "stopped after the canary"


def _report(results: dict, why: str, as_json: bool) -> int:
    codes = [int(r.exit_code) for r in results.values() if isinstance(r, SwapctlError)]
    if as_json:
        print_json({"hosts": {n: ({"skipped": why} if isinstance(r, str) else
                                  {"error": str(r), "exit_code": int(r.exit_code)} if isinstance(r, SwapctlError)
                                  else r.__dict__) for n, r in results.items()}, "stopped": why or None})
        return worst(codes)
    if len(results) == 1:
        [r] = results.values()
        if isinstance(r, SwapctlError):
            fail(r)
        _summary(r)
        return 0
    for r in results.values():
        if isinstance(r, SwapctlError):
            err.print(text(f"swapctl: {r}"), style="bold red")
    summary(results, why)
    if why:
        out.print(text(f"rollout stopped: {why}"), style="bold red")
    return worst(codes)


def _press(interrupts: Interrupts) -> None:
    if interrupts.critical:
        err.print("Ctrl-C: the old daemon is stopped, so the swap finishes; Ctrl-C again rolls back to it",
                  style="bold yellow") if interrupts.count == 0 else err.print(
            "Ctrl-C again: rolling back to the old daemon", style="bold yellow")
    interrupts.press()


def _summary(o: Outcome) -> None:
    if o.outcome == "unchanged":
        out.print(text(f"{o.host}: {o.message}"))
        return
    if o.outcome == "dry-run":
        out.print(text(f"{o.host}: dry run, nothing changed"))
        return
    steps = ", ".join(f"{k} {v:.2f}s" for k, v in o.steps.items())
    up = o.upload or {}
    rate = (f", upload by {up['method']}: {up['wire_bytes'] / 1e6:.2f} MB sent, {o.upload_mb_s:.1f} MB/s effective"
            if o.upload_mb_s else f", upload: {up['method']}" if up else "")
    out.print(text(f"{o.host}: {o.outcome} {(o.new_sha or '')[:12]} as pid {o.pid} ({steps}{rate})"),
              style="bold green")
