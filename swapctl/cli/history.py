"""`swapctl history HOST`: the releases on a host and the journal of what swapctl did there."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import typer
from rich.table import Table

from .. import playbook as pb
from ..facts.catalog import catalog as read_catalog
from ..facts.journal_entry import JournalEntry
from ..facts.releases import releases_newest_first, who_am_i
from ..remote import connect
from .common import JsonOpt, PlaybookOpt, guarded, out, print_json, select_hosts, stacked, text, warn, when
from .history_table import releases_table


def uploaded_from_here(entries: Iterable[JournalEntry]) -> dict[str, str]:
    """sha256 -> the local file a deploy from this machine (this user) uploaded it from, the latest."""
    me, found = who_am_i(), {}
    for e in entries:
        source = e.upload.source if e.upload else None
        if e.by == me and e.action == "deploy" and source is not None and e.to_sha:
            found[e.to_sha] = source
    return found


def history(
    host: Annotated[str, typer.Argument(
        metavar="HOST", help="A host name, user@address:port, or an ssh_config alias.")],
    playbook: PlaybookOpt = None,
    json: JsonOpt = False,
) -> None:
    """Show a host's releases (numbered for `rollback --to`) and its deploy journal."""
    guarded(lambda: _history(host, playbook, json))


def _history(target: str, playbook_path: str | None, as_json: bool) -> int:
    book = pb.load(playbook_path)
    book.require_daemon()
    [spec] = select_hosts(book, [target])
    with connect(spec) as h:
        catalog = read_catalog(h, book.daemon)
    releases, current, entries = catalog.releases, catalog.current, catalog.journal
    warn(catalog.notes())
    ordered = releases_newest_first(releases)
    back = catalog.rollback_target()
    back_to = back.id if back else ""
    if as_json:
        print_json({"host": spec.name, "current": current, "rollback_target": back_to or None,
                    "releases": [{"index": i, **{k: v for k, v in r.__dict__.items() if k != "env"}}
                                 for i, r in enumerate(ordered, 1)],
                    "journal": [e.to_dict() for e in entries]})
        return 0
    t = releases_table(f"{spec.name}: releases", releases, current, back_to, uploaded_from_here(entries))
    out.print(t)
    out.print(text("* runs now   < `swapctl rollback` goes back to it (what ran before *)" if back_to else
                   "* runs now   (no release for `swapctl rollback` to go back to)"))
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
