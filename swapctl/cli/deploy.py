"""`swapctl deploy HOST... --binary PATH`: the safe binary swap."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import PurePosixPath
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.rule import Rule
from rich.text import Text

from .. import playbook as pb
from ..errors import BadInput, ExitCode, Refused, SwapctlError
from ..facts import cordon
from ..fleet import halt_of
from ..gpu.sampler import start_after_swap
from ..playbook.curio import shared_nodes
from ..remote import Host, connect
from ..swap import elf, environ
from ..swap.deploy import DeployPlan, Event, EventSink, Interrupts, Outcome, Plan, Swap
from ..swap.deploy import deploy as run_deploy
from ..swap.ending import Ended
from . import build as build_cli
from .build import BuildArgOpt
from .common import (
    JsonOpt,
    LimitOpt,
    PlaybookOpt,
    RootOptions,
    duration,
    err,
    fail,
    guarded,
    load_playbook,
    out,
    print_json,
    root,
    size,
    text,
    where,
    worst,
)
from .fleet import (
    INTERRUPTED,
    SKIPPED,
    CanaryOpt,
    CanaryWaitOpt,
    Fleet,
    IgnoreGpuHangOpt,
    MaxFailOpt,
    One,
    ParallelOpt,
    Preview,
    confirm_after_plans,
    dry_run_outcome,
    roll_out,
    select_fleet,
    summary,
)


def deploy(
    ctx: typer.Context,
    hosts: Annotated[list[str], typer.Argument(
        metavar="HOST", help="Host names, user@address:port, ssh_config aliases, or @group.")],
    binary: Annotated[str | None, typer.Option("--binary", "-b", help="The new daemon binary (a local file).")] = None,
    build: Annotated[bool, typer.Option("--build", help="Build it first from the playbook's [build] table.")] = False,
    build_arg: BuildArgOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=(
        "With --build, the whole build log as it comes; with --dry-run, each remote command as it would run."))
    ] = False,
    playbook: PlaybookOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check and show the plan; change nothing.")] = False,
    restart: Annotated[bool, typer.Option("--restart", help="Restart even if the same binary runs.")] = False,
    drain: Annotated[bool | None, typer.Option(
        "--drain/--now", help="Wait until no proof is in flight before the stop, or stop at once "
                              "(default: the playbook's daemon.stop).")] = None,
    ignore_gpu_hang: IgnoreGpuHangOpt = False,
    beside: Annotated[bool, typer.Option("--beside", help=(
        "Start the new build even though a process that is not the daemon matches daemon.match: two may "
        "then run side by side."))] = False,
    parallel: ParallelOpt = None,
    canary: CanaryOpt = None,
    canary_wait: CanaryWaitOpt = None,
    max_fail: MaxFailOpt = None,
    limit: LimitOpt = None,
    json: JsonOpt = False,
) -> None:
    """Upload a new daemon binary and swap it in, rolling back by itself if it fails."""
    if build == bool(binary):
        fail(BadInput("give either --binary PATH or --build (which builds it from the playbook's [build] table)"))
    fleet = partial(Fleet.of, parallel=parallel, canary=canary, canary_wait=canary_wait, max_fail=max_fail,
                    limit=limit)  # what the command line leaves out comes from the playbook
    stop = None if drain is None else "drain" if drain else "term"
    guarded(lambda: _deploy(hosts, binary, playbook, yes, dry_run, restart, json, (build_arg or []) if build else None,
                            verbose, fleet, ignore_gpu_hang, beside, stop, root(ctx)))


def env_lines(plan: Plan, secret_env: tuple[str, ...]) -> list[Text]:
    """What the new daemon's environment changes from what runs (secrets as ***), and what is not carried."""
    running = plan.daemon.env if plan.daemon else (plan.known[plan.current].env if plan.current in plan.known
                                                   else None)
    changes = environ.diff(running or (), plan.new.env or (), secret_env) if running is not None else []
    if running is None:
        first = text(f"  environment: {len(plan.new.env or ())} variables (nothing runs to compare with)")
    else:
        first = text(f"  environment: {', '.join(changes) if changes else 'as it runs now'}")
    return [first] + [styled(text(f"  environment: {name} is not carried over ({why})"), "bold yellow")
                   for name, why in plan.env_dropped]


def styled(line: Text, style: str) -> Text:
    line.stylize(style)
    return line


def at_stake(plan: Plan, stop: str) -> str:
    """What the stop would lose, as the daemon's own view says, and what the stop mode does about it."""
    st = plan.status
    if st.daemon_view is None:
        why = st.daemon_view_error or "no daemon.status_url (cuzk's status_listen) to ask"
        return f"in flight: unknown ({why}); the stop loses whatever it is proving"
    view = st.daemon_view
    if not view.in_flight:
        return f"in flight: {view.summary()}"
    then = {"drain": "a drain waits for them first",
            "cordon": "the cordon waits for them to finish before the stop"}.get(stop, "the stop (SIGTERM) loses them")
    return f"would be lost: {view.summary()}; {then}"


def show_plan(plan: Plan, dry_run: bool, secret_env: tuple[str, ...] = (), stop: str = "term",
              more: tuple[str, ...] = (), commands: bool = False) -> None:
    """The plan, in one print: above a fleet's live view, each print draws the view again (issue 34); `more`:
    lines after the old daemon's (the cordon's); a dry run's steps, with `commands` each one's remote command."""
    lines = plan_lines(plan, dry_run, secret_env, stop, commands)
    at = next((i for i, line in enumerate(lines) if not line.plain.startswith(("old daemon", "  "))), len(lines))
    lines[at:at] = [text(line) for line in more]
    err.print(Group(Rule(text(f"{plan.host}: deploy plan")), *lines))


def cordon_first(host: Host, book: pb.Playbook, events: EventSink, lift: bool) -> tuple[str, ...]:
    """With Curio nodes (the host's, book.curio_of): a cordon swapctl left lifted before a swap plans (`lift`;
    said in one line), and the lines its plan shows with stop = "cordon" (one host call). A cordon of swapctl's
    that cannot be lifted refuses the swap: the swap would take the node for someone else's and leave it
    cordoned."""
    cur, d = book.curio_of(host.name), book.daemon
    if not cur.nodes:
        return ()
    view = cordon.read(host, book, lift=lift)
    said = cordon.lifted_said(view, host.name)
    if said is not None and view.lifted != "ok":
        raise Refused(f"{said}: nothing was changed; fix it, then `swapctl uncordon {host.name}`", host=host.name)
    if said is not None:
        events(Event("preflight", said))
    left = cordon.left_said(view)
    lines = (left,) if left and not said else ()
    if d.stop != "cordon":
        return lines
    return lines + tuple(cordon.plan_lines(view, cur.nodes, cur.poll_s, cur.post_wait_s, d.drain_timeout_s,
                                           cur.max_cordon_s)) + shared_lines(book, host.name)


def shared_lines(book: pb.Playbook, host: str) -> tuple[str, ...]:
    """A plan's warning where another host of the playbook is fed by a node this swap cordons: one host at a
    time is safe (the loader and the rollout refuse two at once), but that host gets no work from the node
    meanwhile."""
    others = [h for h in book.hosts if h != host]
    shared = {n: hs for n, hs in shared_nodes(book, [host, *others]).items() if host in hs}
    return tuple(f"warning: node {node} also feeds {', '.join(h for h in hosts if h != host)}: this swap cordons "
                 f"it for them too (name each host's own nodes: curio_nodes under [hosts.NAME], docs/curio.md)"
                 for node, hosts in shared.items())


def plan_lines(plan: Plan, dry_run: bool, secret_env: tuple[str, ...], stop: str, commands: bool = False) -> list[Text]:
    d, b = plan.daemon, plan.binary if isinstance(plan, DeployPlan) else None
    lines: list[Text] = []
    if d:
        lines += [text(f"old daemon: pid {d.pid}, rss {size(d.rss_kib)}, up {duration(d.elapsed_s)}, "
                       f"sha256 {d.sha256[:12]}" + (f", systemd unit {d.unit}" if d.unit else "")),
                  text(f"  command line: {' '.join(d.argv)}"), text(f"  {at_stake(plan, stop)}")]
    else:
        lines.append(text("old daemon: none running" + (f" (systemd unit {plan.unit})" if plan.unit else "")))
    if plan.unit:
        lines.append(text(f"  through the unit: systemctl stop {plan.unit}, then systemctl start {plan.unit}"))
    if b:
        lines.append(text(f"new binary: {b.path}, {b.size / 1e6:.1f} MB, sha256 {b.sha256[:12]}"))
    else:
        lines.append(text(f"roll back to: release {plan.new.id} ({plan.new.source}, created "
                          f"{plan.new.created[:19]} by {plan.new.by})"))
    who = f", uid {plan.new.uid} gid {plan.new.gid}" if plan.new.uid else ""
    lines.append(text(f"  will run as: {' '.join(plan.new.argv or ())}  (cwd {plan.new.cwd}{who})"))
    lines += env_lines(plan, secret_env)
    lines += [text(f"backup: {saved.release.source} release {saved.release.id} from {saved.source}")
              for saved in plan.to_save]
    lines += [styled(text(f"warning: {line}"), "bold yellow") for line in plan.warnings]
    if plan.unchanged:
        lines.append(text("the daemon already runs this binary: nothing to do (--restart to restart it)"))
    if dry_run and commands:
        lines += [text("remote commands it would run:"),
                  *(text(f"  {line}") for what, cmd in plan.commands for line in (f"# {what}", cmd) if line)]
    elif dry_run:
        lines += [text("what it would do (--verbose: each remote command as it would run):"),
                  *(text(f"  {n}. {what}") for n, (what, _) in enumerate(plan.commands, 1))]
    return lines


def shown_only(plan: Plan, book: pb.Playbook, dry_run: bool, preview: Preview | None, action: str,
               more: tuple[str, ...] = (), commands: bool = False) -> Outcome | None:
    """The plan on the screen; a dry run's outcome (also a fleet's preview's, handed its plan), or None
    to go on with the swap."""
    show_plan(plan, dry_run, book.daemon.secret_env, book.daemon.stop, more, commands)
    if preview is not None:
        preview(plan)
    return dry_run_outcome(plan, action) if dry_run or preview is not None else None


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


def with_stop(book: pb.Playbook, stop: str | None) -> pb.Playbook:
    """The playbook with --drain or --now in place of its daemon.stop."""
    if stop is None:
        return book
    if stop == "drain" and not book.daemon.status_url:
        raise BadInput("--drain reads the daemon's own status: set daemon.status_url in the playbook "
                       "(cuzk's status_listen, e.g. \"http://127.0.0.1:9821/status\")")
    return replace(book, daemon=replace(book.daemon, stop=stop))


def _deploy(targets: list[str], binary: str | None, playbook_path: str | None, yes: bool, dry_run: bool,
            restart: bool, as_json: bool, build_args: list[str] | None, verbose: bool,
            fleet_of: Callable[[pb.RolloutSpec], Fleet], ignore_gpu_hang: bool, beside: bool,
            stop: str | None, opts: RootOptions) -> int:
    book = with_stop(load_playbook(playbook_path, opts), stop)
    daemon = book.require_daemon()
    fleet = fleet_of(book.rollout)
    specs = select_fleet(book, targets, fleet, yes, dry_run, "swap the daemon on")
    many = len(specs) > 1
    build = None
    if build_args is not None:  # built once, before any host is touched
        built = build_cli.run(book, build_args, f"build/{PurePosixPath(daemon.binary).name}", verbose)
        binary, build = built.path, built.record()
    if binary is None:
        raise BadInput("give either --binary PATH or --build")
    local = binary
    size = elf.inspect(local).size  # a missing or wrong file: one line, before any host is asked (kept: read once)

    def deploy_one(preview: Preview | None = None) -> One:
        """Each host's deploy; with `preview`, only its plan, shown and handed to `preview` (a dry run)."""
        def one(spec: pb.HostSpec, interrupts: Interrupts, events: EventSink) -> Outcome:
            events(Event("connect", f"connecting to {where(spec)}..."))  # at once: a silent host takes its timeout
            with connect(spec) as host:
                more = cordon_first(host, book, events, lift=not dry_run and preview is None)
                with Swap(host, book, events, interrupts, ignore_gpu_hang=ignore_gpu_hang, beside=beside) as sw:
                    plan = sw.plan(local, restart=restart, build=build)
                    if (shown := shown_only(plan, book, dry_run, preview, "deploy", more, verbose)) is not None:
                        return shown
                    _confirm(plan, yes or many)
                    outcome = run_deploy(sw, plan)
                    return outcome.noted(start_after_swap(host, book.daemon, outcome.started, plan.status))
        return one

    if many and not (yes or dry_run):
        confirm_after_plans(book, specs, deploy_one, fleet, "swap the daemon on", f"to {local} ({size / 1e6:.1f} MB)")
        yes = True
    results, why = roll_out(book, specs, deploy_one(), fleet, yes, dry_run)
    return report(results, why, as_json)


def report(results: dict[str, Any], why: str, as_json: bool) -> int:
    codes = [int(r.exit_code) for r in results.values() if isinstance(r, SwapctlError)]
    skipped = why == INTERRUPTED and SKIPPED in results.values()
    codes += [int(ExitCode.REFUSED)] * skipped  # a Ctrl-C kept hosts from starting: not all went
    if as_json:
        print_json({"hosts": {n: ({"skipped": why} if isinstance(r, str) else
                                  {"error": str(r), "exit_code": int(r.exit_code)} if isinstance(r, SwapctlError)
                                  else r.as_dict()) for n, r in results.items()}, "stopped": why or None,
                    "halt": halt_of(why)})
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


def _summary(o: Outcome) -> None:
    if o.outcome is Ended.UNCHANGED:
        out.print(text(f"{o.host}: {o.message}"))
        return
    if o.outcome is Ended.DRY_RUN:
        out.print(text(f"{o.host}: dry run, nothing changed"))
        return
    if o.action == "rollback":
        out.print(text(f"{o.host}: rolled back to {(o.new_sha or '')[:12]} as pid {o.pid}"), style="bold green")
        return
    steps = ", ".join(f"{k} {v:.2f}s" for k, v in o.steps.items())
    up = o.upload
    rate = (f", upload by {up.method}: {up.wire_bytes / 1e6:.2f} MB sent, {o.upload_mb_s:.1f} MB/s effective"
            if up and o.upload_mb_s else f", upload: {up.method}" if up else "")
    lost = f"; the stop lost {o.lost} proof{'s' * (o.lost != 1)} in flight" if o.lost else ""
    out.print(text(f"{o.host}: {o.outcome} {(o.new_sha or '')[:12]} as pid {o.pid} ({steps}{rate}){lost}"),
              style="bold yellow" if lost else "bold green")
