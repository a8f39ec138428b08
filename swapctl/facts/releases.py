"""Releases on a host: `<state>/releases/<sha256[:12]>/<binary name>` beside a manifest.json.

A manifest is read back from the host, and a host is not trusted: a release is what its directory's name
says (12 hex digits), and only when its manifest's sha256 is 64 hex digits that start with that name, its
file name a plain name and its environment's keys variable names (trusted_release)."""

from __future__ import annotations

import getpass
import json
import re
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..remote.cmd import NAME

if TYPE_CHECKING:  # journal_entry reads release ids as this module says they are
    from .journal_entry import JournalEntry

RELEASE_ID = re.compile(r"[0-9a-f]{12}")
SHA256 = re.compile(r"[0-9a-f]{64}")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def who_am_i() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


@dataclass(frozen=True)
class Release:
    sha256: str
    size: int
    name: str  # the file name inside the release directory
    created: str
    by: str
    argv: tuple[str, ...] | None = None  # the exact command line it runs with, argv[0] included
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] | None = None
    status: str = "ok"  # ok | bad (failed its start; never a rollback target)
    source: str = "upload"  # upload | adopted (saved from a running daemon) | disk (the file found at binary)
    build: dict[str, Any] | None = None  # image id and build args, when swapctl built it
    uid: int | None = None  # the user and group it runs as (None: as swapctl's commands run, root)
    gid: int | None = None
    says: str | None = None  # what the build said of itself (`--version`) when it was uploaded; None: nothing

    @property
    def id(self) -> str:
        return self.sha256[:12]

    def dir(self, state: str) -> str:
        return f"{state}/releases/{self.id}"

    def path(self, state: str) -> str:
        return f"{self.dir(state)}/{self.name}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Release:
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        if fields.get("argv") is not None:
            fields["argv"] = tuple(fields["argv"])
        if fields.get("env") is not None:
            fields["env"] = tuple(tuple(kv) for kv in fields["env"])
        return cls(**fields)

    def marked(self, status: str) -> Release:
        return replace(self, status=status)


def trusted_release(d: object, dir_name: str) -> Release | None:
    """The release a manifest read back from `<state>/releases/<dir_name>/` describes, or None when it is
    not one swapctl could have written: every field of the right type, the id its directory's name."""
    if not isinstance(d, dict) or not RELEASE_ID.fullmatch(dir_name):
        return None
    sha, name, argv, env = d.get("sha256"), d.get("name"), d.get("argv"), d.get("env")
    if not (isinstance(sha, str) and SHA256.fullmatch(sha) and sha.startswith(dir_name)):
        return None
    if not (isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\0\n")):
        return None
    if argv is not None and not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return None
    if env is not None and not (isinstance(env, list) and all(
            isinstance(kv, list) and len(kv) == 2 and all(isinstance(x, str) for x in kv) and NAME.fullmatch(kv[0])
            for kv in env)):
        return None
    if not all(d.get(k) is None or type(d.get(k)) is int for k in ("size", "uid", "gid")):
        return None
    if not all(d.get(k) is None or isinstance(d.get(k), str) for k in ("created", "by", "cwd", "status", "source")):
        return None
    says = d.get("says")  # shown in tables and reports: one printable line, as elf.says_of_itself keeps it
    if says is not None and not (isinstance(says, str) and len(says) <= 120 and says.isprintable()):
        return None
    try:
        return Release.from_dict(d)
    except (TypeError, KeyError):
        return None


def parse_releases(lines: str) -> dict[str, Release]:
    """The inspect script's `releases` section: one `DIR<TAB>MANIFEST` line per release directory, with
    `<TAB>bad` after it when the swap script marked the release bad (host/swap/swap.sh's mark_bad)."""
    out: dict[str, Release] = {}
    for line in lines.splitlines():
        dir_name, sep, text = line.partition("\t")
        text, _, flag = text.partition("\t")
        try:
            r = trusted_release(json.loads(text), dir_name) if sep else None
        except ValueError:
            continue  # a manifest half-written by a killed swapctl is not a release
        if r is not None:
            out[r.id] = r.marked("bad") if flag == "bad" else r
    return out


def deploy_order(releases: dict[str, Release], deployed: list[str]) -> list[str]:
    """Release ids oldest first: those no deploy landed (adopted and found-on-disk ones, and uploads the journal
    lost or whose deploy never landed) by creation time, then each deploy's, where it last landed. An upload
    made after the build that runs, whose deploy was cut short before its swap, is never before that build:
    a rollback once went to such a build, which had never run."""
    order = [r.id for r in sorted(releases.values(), key=lambda r: r.created) if r.id not in deployed]
    for rid in deployed:
        if rid in order:
            order.remove(rid)
        order.append(rid)
    return order


def previous_good(releases: dict[str, Release], current: str | None, deployed: list[str]) -> Release | None:
    """The last known-good release before `current` in deploy order; never `current`, never a bad one."""
    order = [rid for rid in deploy_order(releases, deployed) if rid in releases]
    before = order[: order.index(current)] if current in order else order
    for rid in reversed(before):
        if releases[rid].status == "ok" and rid != current:
            return releases[rid]
    return None


LANDED = ("deployed", "rolled-back")


def came_from(journal: Iterable[JournalEntry]) -> dict[str, str]:
    """Release id -> the sha256 of what ran before the journal line that last made it current.

    A deploy and a rollback are landings alike. The way back after a failed start (an auto-rollback, or a
    rollback whose target did not come up) is none: it puts back what ran, and what ran before that stays."""
    before: dict[str, str] = {}
    for e in journal:
        if e.action not in ("deploy", "rollback") or e.outcome not in LANDED:
            continue
        if e.current is None or e.way_back:
            continue  # not a landing, or the way back from a failed start
        if e.from_sha is not None:
            if e.from_sha[:12] != e.current:  # a --restart of what ran lands nothing new
                before[e.current] = e.from_sha
        else:
            before.pop(e.current, None)  # it landed where nothing ran
    return before


def way_back(known: dict[str, Release], running: str | None, new: str, deployed: list[str]) -> Release | None:
    """What a failed start of release `new` goes back to: what runs now, else the last good release before
    it in the deploy order. The controller's plan and the Ansible modules both ask this."""
    candidate = known.get(running or "")
    if candidate is None or candidate.id == new or candidate.status != "ok":
        candidate = previous_good(known, new, deployed)
    return candidate


def rollback_target(releases: dict[str, Release], current: str | None, journal: Iterable[JournalEntry],
                    deployed: list[str]) -> Release | None:
    """What `rollback` goes back to: what ran before `current`, the `from` of the journal line that made it
    current; a bad (or gone) one is skipped for what ran before it, by the same rule. So rollback, deploy,
    rollback returns to the baseline, and two rollbacks toggle. A current release the journal never saw
    land (the journal lost, a daemon adopted) falls back to the deploy order (previous_good)."""
    before = came_from(journal)
    if current not in before:
        return previous_good(releases, current, deployed)
    seen, rid = {current}, current
    while rid in before:
        sha = before[rid]
        rid = sha[:12]
        if rid in seen:
            return None
        seen.add(rid)
        r = releases.get(rid)
        if r is not None and r.sha256 == sha and r.status == "ok":
            return r
    return None


def releases_newest_first(releases: dict[str, Release]) -> list[Release]:
    """The order `swapctl history` numbers releases in (1 = newest)."""
    return sorted(releases.values(), key=lambda r: r.created, reverse=True)


def matching(releases: dict[str, Release], to: str) -> list[Release]:
    """The releases `to` names: an index of `swapctl history` (1 = newest, up to 3 digits) names one; else
    every release whose sha256 starts with `to`. One found: that one; none or several: the caller refuses."""
    ordered = releases_newest_first(releases)
    if to.isdecimal() and len(to) <= 3 and 1 <= int(to) <= len(ordered):
        return [ordered[int(to) - 1]]
    return [r for r in ordered if r.sha256.startswith(to.lower())]


def to_prune(releases: dict[str, Release], keep: int, protect: set[str]) -> list[Release]:
    """Oldest releases beyond `keep`, never one in `protect` (the current and the rollback target)."""
    ordered = sorted(releases.values(), key=lambda r: r.created, reverse=True)
    kept = [r for r in ordered if r.id in protect]
    extra = []
    for r in ordered:
        if r.id in protect:
            continue
        if len(kept) < keep:
            kept.append(r)
        else:
            extra.append(r)
    return extra

