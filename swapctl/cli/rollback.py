"""`swapctl rollback HOST [--to RELEASE]`: back to a known-good daemon in one command."""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from .. import playbook as pb
from ..errors import Refused, SwapctlError
from ..remote import connect
from ..swap.deploy import Interrupts, Swap, rollback as run_rollback
from .common import PlaybookOpt, err, fail, guarded, out, select_hosts, text, worst
from .deploy import _confirm, _press, show_plan
from .progress import Reporter


def rollback(
    hosts: Annotated[list[str], typer.Argument(help="Host names, user@address:port, or @group.")],
    to: Annotated[str | None, typer.Option("--to", help="A sha256 prefix or an index from `swapctl history`.")] = None,
    playbook: PlaybookOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan; change nothing.")] = False,
) -> None:
    """Go back to the previous known-good release (or --to one), started exactly as it ran."""
    guarded(lambda: _rollback(hosts, to, playbook, yes, dry_run))


def _rollback(targets: list[str], to: str | None, playbook_path: str | None, yes: bool, dry_run: bool) -> int:
    book = pb.load(playbook_path)
    book.require_daemon()
    codes: list[int] = []
    specs = select_hosts(book, targets)
    for spec in specs:
        interrupts = Interrupts()
        reporter = Reporter(spec.name)
        previous = signal.signal(signal.SIGINT, lambda *_: _press(interrupts))
        try:
            with connect(spec) as host:
                sw = Swap(host, book, reporter, interrupts)
                plan = sw.plan_rollback(to)
                show_plan(plan, dry_run)
                if dry_run:
                    out.print(text(f"{spec.name}: dry run, nothing changed"))
                    codes.append(0)
                    continue
                _confirm(plan, yes)
                o = run_rollback(sw, plan)
                out.print(text(f"{spec.name}: rolled back to {plan.new.id} as pid {o.pid}"), style="bold green")
                codes.append(0)
        except SwapctlError as exc:
            if len(specs) == 1:
                fail(exc)
            err.print(text(f"swapctl: {exc}"), style="bold red")
            codes.append(int(exc.exit_code))
        except KeyboardInterrupt:
            exc = Refused("interrupted before any change", host=spec.name)
            if len(specs) == 1:
                fail(exc)
            codes.append(int(exc.exit_code))
        finally:
            reporter.close()
            signal.signal(signal.SIGINT, previous)
    return worst(codes)
