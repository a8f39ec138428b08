"""`swapctl rollback HOST... [--to RELEASE]`: back to a known-good daemon in one command."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated

import typer

from .. import playbook as pb
from ..gpu.sampler import start_after_swap
from ..remote import connect
from ..swap.deploy import EventSink, Interrupts, Outcome, Swap
from ..swap.deploy import rollback as run_rollback
from .common import JsonOpt, LimitOpt, PlaybookOpt, RootOptions, guarded, load_playbook, root
from .deploy import _confirm, cordon_first, report, shown_only
from .fleet import (
    CanaryOpt,
    CanaryWaitOpt,
    Fleet,
    IgnoreGpuHangOpt,
    MaxFailOpt,
    One,
    ParallelOpt,
    Preview,
    confirm_after_plans,
    roll_out,
    select_fleet,
)


def rollback(
    ctx: typer.Context,
    hosts: Annotated[list[str], typer.Argument(
        metavar="HOST", help="Host names, user@address:port, ssh_config aliases, or @group.")],
    to: Annotated[str | None, typer.Option("--to", help="A sha256 prefix or an index from `swapctl history`.")] = None,
    playbook: PlaybookOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan; change nothing.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=(
        "With --dry-run, each remote command as it would run."))] = False,
    ignore_gpu_hang: IgnoreGpuHangOpt = False,
    parallel: ParallelOpt = None,
    canary: CanaryOpt = None,
    canary_wait: CanaryWaitOpt = None,
    max_fail: MaxFailOpt = None,
    limit: LimitOpt = None,
    json: JsonOpt = False,
) -> None:
    """Go back to the previous known-good release (or --to one), started exactly as it ran."""
    fleet = partial(Fleet.of, parallel=parallel, canary=canary, canary_wait=canary_wait, max_fail=max_fail,
                    limit=limit)  # what the command line leaves out comes from the playbook
    guarded(lambda: _rollback(hosts, to, playbook, yes, dry_run, fleet, json, ignore_gpu_hang, verbose, root(ctx)))


def _rollback(targets: list[str], to: str | None, playbook_path: str | None, yes: bool, dry_run: bool,
              fleet_of: Callable[[pb.RolloutSpec], Fleet], as_json: bool, ignore_gpu_hang: bool,
              verbose: bool, opts: RootOptions) -> int:
    book = load_playbook(playbook_path, opts)
    book.require_daemon()
    fleet = fleet_of(book.rollout)
    specs = select_fleet(book, targets, fleet, yes, dry_run, "roll back")
    many = len(specs) > 1

    def rollback_one(preview: Preview | None = None) -> One:
        """Each host's rollback; with `preview`, only its plan, shown and handed to `preview` (a dry run)."""
        def one(spec: pb.HostSpec, interrupts: Interrupts, events: EventSink) -> Outcome:
            with connect(spec) as host:
                more = cordon_first(host, book, events, lift=not dry_run and preview is None)
                sw = Swap(host, book, events, interrupts, ignore_gpu_hang=ignore_gpu_hang)
                plan = sw.plan_rollback(to)
                if (shown := shown_only(plan, book, dry_run, preview, "rollback", more, verbose)) is not None:
                    return shown
                _confirm(plan, yes or many)
                outcome = run_rollback(sw, plan)
                return outcome.noted(start_after_swap(host, book.daemon, outcome.started, plan.status))
        return one

    if many and not (yes or dry_run):
        confirm_after_plans(book, specs, rollback_one, fleet, "roll back", f"to {to or 'what ran before'}")
        yes = True
    results, why = roll_out(book, specs, rollback_one(), fleet, yes, dry_run)
    return report(results, why, as_json)
