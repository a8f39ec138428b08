"""`swapctl history HOST`: the releases on a host and the journal of what swapctl did there."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from .. import playbook as pb
from ..remote import connect
from ..swap.deploy import Swap
from ..swap.releases import releases_newest_first
from .common import JsonOpt, PlaybookOpt, guarded, out, print_json, select_hosts, stacked, text, when


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
        sw = Swap(h, book)
        catalog = sw.catalog()
    releases, current, entries = catalog.releases, catalog.current, list(catalog.journal)
    ordered = releases_newest_first(releases)
    if as_json:
        print_json({"host": spec.name, "current": current,
                    "releases": [{"index": i, **{k: v for k, v in r.__dict__.items() if k != "env"}}
                                 for i, r in enumerate(ordered, 1)],
                    "journal": entries})
        return 0
    # 80 columns in a pipe: short fields stack two to a cell, so the long ones (the build, the command
    # line, the steps) keep a real width and fold; --json has every field whole.
    t = Table(title=f"{spec.name}: releases", title_justify="left")
    t.add_column("#", no_wrap=True)
    t.add_column("", no_wrap=True)
    t.add_column("release\nsource, status", no_wrap=True)  # the id is copied into `rollback --to`: never broken
    t.add_column("created\nby", no_wrap=True, overflow="ellipsis", max_width=19)
    t.add_column("build\ncommand line", overflow="fold", ratio=1)
    for i, r in enumerate(ordered, 1):
        args = (r.build or {}).get("args", {})
        built = " ".join(f"{k}={v}" for k, v in args.items()) or ("docker" if r.build else "-")
        t.add_row(str(i), "*" if r.id == current else "", stacked(r.id, f"{r.source}, {r.status}"),
                  stacked(when(r.created), r.by or "-"), stacked(built, " ".join(r.argv or ()) or "-"),
                  style="red" if r.status == "bad" else None)
    out.print(t)
    j = Table(title="journal", title_justify="left")
    j.add_column("when\nwho", no_wrap=True, overflow="ellipsis", max_width=19)
    j.add_column("action\noutcome", no_wrap=True)
    j.add_column("from\nto", no_wrap=True)
    j.add_column("steps (s)", overflow="fold", ratio=1)
    for e in entries:
        steps = " ".join(f"{k}={v:.2f}" for k, v in (e.get("steps") or {}).items())
        j.add_row(stacked(when(str(e.get("time", ""))), e.get("by") or "-"),
                  stacked(e.get("action", ""), e.get("outcome", "")),
                  stacked(str(e.get("from") or "-")[:12], str(e.get("to") or "-")[:12]), text(steps))
    out.print(j)
    return 0
