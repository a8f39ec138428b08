"""`swapctl history HOST`: the releases on a host and the journal of what swapctl did there."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from .. import playbook as pb
from ..remote import connect
from ..swap.deploy import Swap
from ..swap.releases import releases_newest_first
from .common import JsonOpt, PlaybookOpt, guarded, out, print_json, select_hosts, text


def history(
    host: Annotated[str, typer.Argument(help="A host name or user@address:port.")],
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
    t = Table(title=f"{spec.name}: releases", title_justify="left")
    for col in ("#", "", "release", "created", "by", "source", "status"):
        t.add_column(col, no_wrap=True)  # ids are copied into `rollback --to`: never broken
    t.add_column("build", overflow="fold")  # which instrumentation it was built with
    t.add_column("command line", overflow="fold")
    for i, r in enumerate(ordered, 1):
        args = (r.build or {}).get("args", {})
        built = " ".join(f"{k}={v}" for k, v in args.items()) or ("docker" if r.build else "")
        t.add_row(str(i), "*" if r.id == current else "", r.id, text(r.created[:19]), text(r.by), r.source,
                  r.status, text(built), text(" ".join(r.argv or ())), style="red" if r.status == "bad" else None)
    out.print(t)
    j = Table(title="journal", title_justify="left")
    for col in ("when", "action", "from", "to", "outcome"):
        j.add_column(col, no_wrap=True)
    j.add_column("who", overflow="fold")
    j.add_column("steps (s)", overflow="fold")
    for e in entries:
        steps = " ".join(f"{k}={v:.2f}" for k, v in (e.get("steps") or {}).items())
        j.add_row(text(str(e.get("time", ""))[:19]), text(e.get("action", "")), text((e.get("from") or "-")[:12]),
                  text((e.get("to") or "-")[:12]), text(e.get("outcome", "")), text(e.get("by", "")), text(steps))
    out.print(j)
    return 0
