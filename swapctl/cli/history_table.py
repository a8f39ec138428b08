"""The releases table `history` and `status` both print: one numbering (releases_newest_first, the index
`rollback --to` takes), one set of headers, so a number read off either names the same release."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.table import Table

from ..facts.journal_entry import JournalEntry, deployed
from ..facts.releases import Release, releases_newest_first, rollback_target, trusted_release, who_am_i
from .common import stacked, when


def releases_table(title: str, releases: dict[str, Release], current: str | None, back_to: str = "",
                   sources: Mapping[str, str] | None = None) -> Table:
    """Numbered newest first; `*` marks `current` (an id), `<` marks `back_to`. At 80 columns short fields
    stack two to a cell, so the build and the command line keep a real width and fold."""
    t = Table(title=title, title_justify="left")
    t.add_column("#", no_wrap=True)
    t.add_column("", no_wrap=True)
    t.add_column("release\nsource, status", no_wrap=True)  # the id is copied into `rollback --to`: never broken
    t.add_column("created\nby", no_wrap=True, overflow="ellipsis", max_width=19)
    t.add_column("build\ncommand line", overflow="fold", ratio=1)
    for i, r in enumerate(releases_newest_first(releases), 1):
        args = (r.build or {}).get("args", {})
        built = " ".join(f"{k}={v}" for k, v in args.items()) or ("docker" if r.build else "")
        if sources and r.sha256 in sources:
            built = f"{built} from {sources[r.sha256]}".strip()
        mark = "*" if r.id == current else "<" if back_to and r.id == back_to else ""
        t.add_row(str(i), mark, stacked(r.id, f"{r.source}, {r.status}"),
                  stacked(when(r.created), r.by or "-"), stacked(built or "-", " ".join(r.argv or ()) or "-"),
                  style="red" if r.status == "bad" else None)
    return t


def legend(back_to: str) -> str:
    """The line under the table: what its marks mean."""
    return ("* runs now   < `swapctl rollback` goes back to it (what ran before *)" if back_to else
            "* runs now   (no release for `swapctl rollback` to go back to)")


def back_to(releases: dict[str, Release], current: str | None, journal: Iterable[JournalEntry]) -> str:
    """The id of the release `swapctl rollback` goes back to, or "" (releases.rollback_target)."""
    journal = tuple(journal)
    back = rollback_target(releases, current, journal, list(deployed(journal)))
    return back.id if back else ""


def uploaded_from_here(entries: Iterable[JournalEntry]) -> dict[str, str]:
    """sha256 -> the local file a deploy from this machine (this user) uploaded it from, the latest."""
    me, found = who_am_i(), {}
    for e in entries:
        source = e.upload.source if e.upload else None
        if e.by == me and e.action == "deploy" and source is not None and e.to_sha:
            found[e.to_sha] = source
    return found


def from_manifests(manifests: Iterable[Any]) -> tuple[dict[str, Release], int]:
    """The releases status read (manifests from the host, any field of any type) as history reads them, and
    how many were no release swapctl could have written (left out, as history leaves them out)."""
    found: dict[str, Release] = {}
    skipped = 0
    for m in manifests:
        sha = m.get("sha256") if isinstance(m, dict) else None
        r = trusted_release(m, sha[:12]) if isinstance(sha, str) else None
        if r is None:
            skipped += 1
        else:
            found[r.id] = r
    return found, skipped
