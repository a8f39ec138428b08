"""The journal's lines as one frozen type: what host/swap/swap.sh's `finish` writes for every swap, and what swapctl
writes itself (an experiment's decision). Pure and standard library only: the Ansible collection ships it.

A journal is read back from the host, and a host is not trusted: every line is checked against the schema
here (`parse`) and one that is no entry is skipped and counted (`read`), never half-read. Members no
swapctl writes are left out; a release id is 12 hex digits and a sha256 64, as releases.py says; a word
(action, outcome) and a name (host, a step) hold no control character, so none reaches a file name or a
terminal unseen."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from .daemon_view import Proof
from .releases import RELEASE_ID, SHA256

JOURNAL = "journal.jsonl"  # in the state directory
# The host's journal is rotated past CAP_BYTES to its last KEEP entries (a line is about 1 KB), and a deploy
# reads only its last 1000 entries (inspect.sh): it grows by a line every swap, for as long as the host lives.
KEEP, CAP_BYTES = 2000, 4 << 20

WORD = re.compile(r"[a-z][a-z0-9-]{0,39}")  # deploy, auto-rollback, rolled-back, keep...
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # C0, DEL, C1 and the Unicode line breaks
Timings = tuple[tuple[str, float], ...]  # (step, seconds) in the order written


class NotAnEntry(ValueError):
    """A member no journal line swapctl writes could have."""


@dataclass(frozen=True)
class Upload:
    """How a deploy's binary reached the host (what swap.upload returns), and the local file it was sent
    from (`sent_from`, for the journal)."""

    method: str  # present | patch | zstd | sftp
    wire_bytes: int
    seconds: float
    resumed_from: int = 0
    base: str | None = None  # the release a patch was made against
    source: str | None = None  # "from": the uploader's path, shown to that uploader by `history`

    def sent_from(self, source: str) -> Upload:
        """For the journal: how it went, its seconds rounded to the ms, and `source`, the local file."""
        return replace(self, seconds=round(self.seconds, 3), source=source)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"method": self.method, "wire_bytes": self.wire_bytes, "seconds": self.seconds}
        if self.resumed_from:
            d["resumed_from"] = self.resumed_from
        if self.base:
            d["base"] = self.base
        if self.source is not None:
            d["from"] = self.source
        return d


@dataclass(frozen=True)
class StopView:
    """What the daemon's own status said at the stop (drain.sh's stop_json; absent without a status_url):
    the proofs in flight then and how many the stop lost (None: the status did not answer), what waited,
    and with a drain its wait and what was in flight when it began."""

    in_flight: tuple[Proof, ...] | None
    lost: int | None
    queued: int | None = None
    drain_s: float | None = None
    in_flight_at_drain: tuple[Proof, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"in_flight_at_stop": _proof_records(self.in_flight), "lost": self.lost}
        if self.queued is not None:
            d["queued_at_stop"] = self.queued
        if self.drain_s is not None:
            d["drain_s"] = self.drain_s
        if self.in_flight_at_drain is not None:
            d["in_flight_at_drain"] = _proof_records(self.in_flight_at_drain)
        return d


@dataclass(frozen=True)
class CordonView:
    """Curio's cordon around the swap (curio.sh's cordon_json): the nodes this swap cordoned, how long they
    stayed cordoned and how long they took to own nothing, the cuzk tasks they owned at the cordon
    (id, name, age_s), and whether they were uncordoned when the line was written."""

    nodes: str
    cordon_s: float | None
    drain_s: float | None
    tasks: tuple[tuple[int, str, int], ...]
    uncordoned: bool

    def to_dict(self) -> dict[str, Any]:
        return {"cordon": {"nodes": self.nodes, "cordon_s": self.cordon_s, "drain_s": self.drain_s,
                           "tasks_at_cordon": [{"id": i, "name": n, "age_s": a} for i, n, a in self.tasks],
                           "uncordoned": self.uncordoned}}


def _cordon(v: object) -> CordonView | None:
    if v is None:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("tasks_at_cordon"), list):
        raise NotAnEntry("cordon: not a cordon record")
    tasks = []
    for t in v["tasks_at_cordon"]:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise NotAnEntry("cordon: a task is not {id, name, age_s}")
        tasks.append((_whole(t, "id"), _name(t, "name") or "?", _whole(t, "age_s")))
    uncordoned = _flag(v, "uncordoned")
    return CordonView(_text(v, "nodes") or "", _seconds(v, "cordon_s"), _seconds(v, "drain_s"), tuple(tasks),
                      bool(uncordoned))


@dataclass(frozen=True, kw_only=True)
class JournalEntry:
    """One line of the journal. A swap's (action deploy, rollback or auto-rollback) has an outcome; an
    experiment's has a decision."""

    action: str  # deploy | rollback | auto-rollback | experiment
    time: str = ""
    by: str = ""  # user@host; "HOST itself (...)" when the host finished a swap alone
    host: str = ""  # the host's name in the playbook (or the inventory)
    outcome: str | None = None  # deployed | rolled-back | no-daemon | rollback-failed
    current: str | None = None  # the release id that runs after it (None: none)
    from_sha: str | None = None  # "from": the sha256 that ran before
    to_sha: str | None = None  # "to": the sha256 that runs after it
    log_offset: int | None = None  # where the started daemon's output begins in its log
    pid: int | None = None
    steps: Timings = ()
    upload: Upload | None = None
    failed_log: str | None = None  # the way back from a failed start: where its log is
    marked_bad: bool | None = None
    rollback_steps: Timings | None = None
    reason: str | None = None  # why the way back did not end where it began
    stop: StopView | None = None
    cordon: CordonView | None = None
    release: str | None = None  # an experiment's B (its sha256)
    decision: str | None = None  # keep | rollback
    verdict: str | None = None

    @property
    def way_back(self) -> bool:
        """The line of a failed start's way back (an auto-rollback, or a rollback whose target did not come
        up): it puts back what ran, and lands nothing new."""
        return bool(self.failed_log or self.reason)

    def to_dict(self) -> dict[str, Any]:
        """The line as it was written: a swap's (one with an outcome) has its release members and steps
        even when null or empty, as swap.sh writes them; any other member None is left out."""
        d: dict[str, Any] = {"action": self.action, "time": self.time, "by": self.by, "host": self.host}
        swap = {"outcome": self.outcome, "current": self.current, "from": self.from_sha, "to": self.to_sha,
                "log_offset": self.log_offset, "pid": self.pid, "steps": dict(self.steps)}
        if self.outcome is not None:
            d.update(swap)
        else:
            d.update({k: v for k, v in swap.items() if v})
        more = {"failed_log": self.failed_log, "marked_bad": self.marked_bad, "reason": self.reason,
                "release": self.release, "decision": self.decision, "verdict": self.verdict,
                "rollback_steps": None if self.rollback_steps is None else dict(self.rollback_steps),
                "upload": self.upload.to_dict() if self.upload else None}
        d.update({k: v for k, v in more.items() if v is not None})
        if self.stop is not None:
            d.update(self.stop.to_dict())
        if self.cordon is not None:
            d.update(self.cordon.to_dict())
        return d

    def to_json(self) -> str:
        """One journal line (no newline), members sorted as swap.sh writes them; the steps in their order."""
        return json.dumps(dict(sorted(self.to_dict().items())))


def parse(line: str) -> JournalEntry | None:
    """The entry a journal line holds, or None when it holds none: not JSON, not an object, cut short, or
    a member of another type or shape than swapctl writes."""
    try:
        d = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: a line of 30000 '['
        return None
    try:
        return entry_of(d)
    except NotAnEntry:
        return None


def entry_of(d: object) -> JournalEntry:
    """`d` (a journal line's JSON) as an entry; NotAnEntry names the first member that is not one."""
    if not isinstance(d, dict):
        raise NotAnEntry("not a JSON object")
    action = _word(d, "action")
    if action is None:
        raise NotAnEntry("action: missing")
    stop = None
    if "in_flight_at_stop" in d or "lost" in d:
        stop = StopView(_proofs(d, "in_flight_at_stop"), _count(d, "lost"), _count(d, "queued_at_stop"),
                        _seconds(d, "drain_s"), _proofs(d, "in_flight_at_drain"))
    return JournalEntry(
        action=action, time=_name(d, "time") or "", by=_text(d, "by") or "", host=_name(d, "host") or "",
        outcome=_word(d, "outcome"), current=_id(d, "current", RELEASE_ID), from_sha=_id(d, "from", SHA256),
        to_sha=_id(d, "to", SHA256), log_offset=_count(d, "log_offset"), pid=_count(d, "pid", least=1),
        steps=_timings(d, "steps") or (), upload=_upload(d.get("upload")), failed_log=_text(d, "failed_log"),
        marked_bad=_flag(d, "marked_bad"), rollback_steps=_timings(d, "rollback_steps"), reason=_text(d, "reason"),
        stop=stop, cordon=_cordon(d.get("cordon")), release=_id(d, "release", SHA256),
        decision=_word(d, "decision"), verdict=_text(d, "verdict"))


def read(text: str) -> tuple[tuple[JournalEntry, ...], int]:
    """The entries of a journal's text, oldest first, and how many of its lines were none (skipped). Lines
    end at a newline only: a U+2028 inside a member is no line break."""
    entries, skipped = [], 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        entry = parse(line)
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
    return tuple(entries), skipped


def skipped_note(where: str, skipped: int) -> str:
    """What a reader tells the user about the lines it skipped; `where` is HOST:PATH."""
    return f"journal {where}: {skipped} line{'s' if skipped != 1 else ''} skipped (not journal entries)"


def deployed(journal: Iterable[JournalEntry]) -> tuple[str, ...]:
    """Release ids that deploys put in place, oldest first (the deploy order: releases.deploy_order)."""
    return tuple(e.current for e in journal if e.action == "deploy" and e.outcome == "deployed" and e.current)


@dataclass(frozen=True)
class Start:
    """A start the journal recorded: the release that ran from `offset` of the daemon's log on as `pid`, and
    the sha256 of what ran before it (None: nothing did, or the journal does not say)."""

    release: str
    offset: int
    before: str | None = None
    pid: int | None = None


def starts(journal: Iterable[JournalEntry]) -> list[Start]:
    """Every start with a log offset, oldest first: where each release began writing the daemon's log."""
    return [Start(e.current, e.log_offset, e.from_sha, e.pid) for e in journal
            if e.log_offset is not None and e.current is not None]


def started(journal: Iterable[JournalEntry], release: str | None) -> Start | None:
    """Where `release` last started in the daemon's log (what it has written since: from there on)."""
    return next((s for s in reversed(starts(journal)) if s.release == release), None) if release else None


def _text(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise NotAnEntry(f"{key}: not a string")
    return v


def _required(d: dict[str, Any], key: str) -> str:
    v = _text(d, key)
    if v is None:
        raise NotAnEntry(f"{key}: missing")
    return v


def _name(d: dict[str, Any], key: str) -> str | None:
    v = _text(d, key)
    if v is not None and CONTROL.search(v):
        raise NotAnEntry(f"{key}: a control character")
    return v


def _word(d: dict[str, Any], key: str) -> str | None:
    v = _text(d, key)
    if v is not None and not WORD.fullmatch(v):
        raise NotAnEntry(f"{key}: not a word")
    return v


def _id(d: dict[str, Any], key: str, pattern: re.Pattern[str]) -> str | None:
    v = _text(d, key)
    if v is not None and not pattern.fullmatch(v):
        raise NotAnEntry(f"{key}: not {pattern.pattern}")
    return v


def _flag(d: dict[str, Any], key: str) -> bool | None:
    v = d.get(key)
    if v is not None and not isinstance(v, bool):
        raise NotAnEntry(f"{key}: not true or false")
    return v


def _count(d: dict[str, Any], key: str, least: int = 0) -> int | None:
    v = d.get(key)
    if v is not None and not (type(v) is int and v >= least):
        raise NotAnEntry(f"{key}: not a whole number from {least}")
    return v


def _seconds(d: dict[str, Any], key: str) -> float | None:
    return None if d.get(key) is None else _number(d, key)


def _number(d: dict[str, Any], key: str) -> float:
    """A member that must be there: a number of seconds (NaN and Infinity parse as JSON, and are none)."""
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise NotAnEntry(f"{key}: not a number of seconds")
    return float(v)


def _whole(d: dict[str, Any], key: str) -> int:
    """A member that must be there: a whole number from 0."""
    v = _count(d, key)
    if v is None:
        raise NotAnEntry(f"{key}: missing")
    return v


def _timings(d: dict[str, Any], key: str) -> Timings | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise NotAnEntry(f"{key}: not an object")
    for step in v:
        if not step or CONTROL.search(step):
            raise NotAnEntry(f"{key}: a step's name")
    return tuple((step, _number(v, step)) for step in v)


def _proofs(d: dict[str, Any], key: str) -> tuple[Proof, ...] | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(p, dict) for p in v):
        raise NotAnEntry(f"{key}: not a list of proofs")
    return tuple(Proof(_required(p, "job_id"), _whole(p, "partitions_done"), _whole(p, "total_partitions"),
                       _whole(p, "age_s")) for p in v)


def _proof_records(proofs: tuple[Proof, ...] | None) -> list[dict[str, Any]] | None:
    return None if proofs is None else [p.record() for p in proofs]


def _upload(v: object) -> Upload | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise NotAnEntry("upload: not an object")
    method = _word(v, "method")
    if method is None:
        raise NotAnEntry("upload: no method")
    return Upload(method, _whole(v, "wire_bytes"), _number(v, "seconds"), _count(v, "resumed_from") or 0,
                  _id(v, "base", RELEASE_ID), _text(v, "from"))
