"""`swapctl history HOST`: the releases on a host and the journal of what swapctl did there."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from ..facts.catalog import catalog as read_catalog
from ..facts.releases import releases_newest_first
from ..remote import connect
from .common import (
    JsonOpt,
    PlaybookOpt,
    RootOptions,
    guarded,
    load_playbook,
    out,
    print_json,
    root,
    select_hosts,
    stacked,
    text,
    warn,
    when,
)
from .history_table import legend, releases_table, uploaded_from_here


def history(
    ctx: typer.Context,
    host: Annotated[str, typer.Argument(
        metavar="HOST", help="A host name, user@address:port, or an ssh_config alias.")],
    playbook: PlaybookOpt = None,
    json: JsonOpt = False,
) -> None:
    """Show a host's releases (numbered for `rollback --to`) and its deploy journal."""
    guarded(lambda: _history(host, playbook, json, root(ctx)))


def _history(target: str, playbook_path: str | None, as_json: bool, opts: RootOptions) -> int:
    book = load_playbook(playbook_path, opts)
    book.require_daemon()
    [spec] = select_hosts(book, [target])
    with connect(spec) as h:
        catalog = read_catalog(h, book.daemon)
    releases, current, entries = catalog.releases, catalog.current, catalog.journal
    warn(catalog.notes())
    ordered = releases_newest_first(releases)
    back = catalog.rollback_target()
    back_id = back.id if back else ""
    if as_json:
        print_json({"host": spec.name, "current": current, "rollback_target": back_id or None,
                    "releases": [{"index": i, **{k: v for k, v in r.__dict__.items() if k != "env"}}
                                 for i, r in enumerate(ordered, 1)],
                    "journal": [e.to_dict() for e in entries]})
        return 0
    t = releases_table(f"{spec.name}: releases", releases, current, back_id, uploaded_from_here(entries))
    out.print(t)
    out.print(text(legend(back_id)))
    j = Table(title="journal", title_justify="left")
    j.add_column("when\nwho", no_wrap=True, overflow="ellipsis", max_width=19)
    j.add_column("action\noutcome", no_wrap=True)
    j.add_column("from\nto", no_wrap=True)
    j.add_column("lost", no_wrap=True)  # proofs the stop lost, by the daemon's own status; - : not read
    j.add_column("steps (s)", overflow="fold", ratio=1)
    for e in entries:
        steps = " ".join(f"{k}={v:.2f}" for k, v in e.steps)
        lost = e.stop.lost if e.stop and e.stop.lost is not None else None
        j.add_row(stacked(when(e.time), e.by or "-"), stacked(e.action, e.outcome or ""),
                  stacked((e.from_sha or "-")[:12], (e.to_sha or "-")[:12]), "-" if lost is None else str(lost),
                  text(steps), style="yellow" if lost else None)
    out.print(j)
    return 0
