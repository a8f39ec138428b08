"""Releases on a host: `<state>/releases/<sha256[:12]>/<binary name>` beside a manifest.json."""

from __future__ import annotations

import getpass
import json
import os
import socket
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path


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
    build: dict | None = None  # image id and build args, when swapctl built it

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
    def from_dict(cls, d: dict) -> Release:
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        if fields.get("argv") is not None:
            fields["argv"] = tuple(fields["argv"])
        if fields.get("env") is not None:
            fields["env"] = tuple(tuple(kv) for kv in fields["env"])
        return cls(**fields)

    def marked(self, status: str) -> Release:
        return replace(self, status=status)


def parse_releases(lines: str) -> dict[str, Release]:
    out: dict[str, Release] = {}
    for line in lines.splitlines():
        try:
            r = Release.from_dict(json.loads(line))
        except (ValueError, TypeError, KeyError):
            continue  # a manifest half-written by a killed swapctl is not a release
        out[r.id] = r
    return out


def deploy_order(releases: dict[str, Release], deployed: list[str]) -> list[str]:
    """Release ids oldest first: adopted and found-on-disk ones, then each deploy's, where it last landed."""
    found = [r.id for r in sorted(releases.values(), key=lambda r: r.created) if r.source != "upload"]
    order: list[str] = []
    for rid in found + deployed:
        if rid in order:
            order.remove(rid)
        order.append(rid)
    # uploads the journal does not know (it was lost or cleared) go by creation time, before the rest
    unknown = [r.id for r in sorted(releases.values(), key=lambda r: r.created) if r.id not in order]
    return unknown + order


def previous_good(releases: dict[str, Release], current: str | None, deployed: list[str]) -> Release | None:
    """The last known-good release before `current` in deploy order; never `current`, never a bad one."""
    order = [rid for rid in deploy_order(releases, deployed) if rid in releases]
    before = order[: order.index(current)] if current in order else order
    for rid in reversed(before):
        if releases[rid].status == "ok" and rid != current:
            return releases[rid]
    return None


def releases_newest_first(releases: dict[str, Release]) -> list[Release]:
    """The order `swapctl history` numbers releases in (1 = newest)."""
    return sorted(releases.values(), key=lambda r: r.created, reverse=True)


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


def state_home() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    path = Path(base) / "swapctl"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def record_local(entry: dict) -> None:
    """Appends a journal entry to the local history (XDG state), one JSON line."""
    with open(state_home() / "history.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
