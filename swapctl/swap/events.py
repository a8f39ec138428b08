"""What the core tells its caller: progress events as they happen, and the outcome at the end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..facts.journal_entry import Upload
from .ending import Ended
from .interrupts import Interrupts

__all__ = ["Event", "EventSink", "Interrupts", "Outcome"]  # Interrupts: where the swap's callers found it


@dataclass(frozen=True)
class Event:
    step: str  # preflight, lock, upload, backup, stop, memory, start, ready, rollback, done
    message: str = ""
    done: int | None = None  # bytes, for the upload
    total: int | None = None
    wire: int | None = None  # bytes the upload put on the wire so far
    log_line: str | None = None  # a line of the daemon's log, while waiting for it


EventSink = Callable[[Event], None]


@dataclass(frozen=True)
class Outcome:
    host: str
    action: str
    outcome: Ended
    old_sha: str | None
    new_sha: str | None
    steps: dict[str, float] = field(default_factory=dict)  # seconds per step
    upload_mb_s: float | None = None
    upload: Upload | None = None  # how the binary got there
    log_offset: int | None = None  # where the started daemon's output begins in its log
    pid: int | None = None
    message: str = ""
    lost: int | None = None  # proofs in flight the stop lost, as the daemon's status said (None: not known)

    @property
    def started(self) -> int | None:
        """The pid of the daemon this swap started (None where it started none: unchanged, a dry run)."""
        return None if self.outcome in (Ended.UNCHANGED, Ended.DRY_RUN) else self.pid

    def as_dict(self) -> dict[str, Any]:
        """As `--json` gives it: the upload as the journal writes it."""
        return {**self.__dict__, "upload": self.upload.to_dict() if self.upload else None}

    def noted(self, note: str) -> Outcome:
        """This outcome with `note` after its message (itself when the note is empty)."""
        return replace(self, message=f"{self.message} {note}".strip()) if note else self
