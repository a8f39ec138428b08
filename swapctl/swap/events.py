"""What the core tells its caller: progress events as they happen, and the outcome at the end."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    step: str  # preflight, lock, upload, backup, stop, memory, start, ready, rollback, done
    message: str = ""
    done: int | None = None  # bytes, for the upload
    total: int | None = None
    wire: int | None = None  # bytes the upload put on the wire so far
    log_line: str | None = None  # a line of the daemon's log, while waiting for it


EventSink = Callable[[Event], None]


class Interrupts:
    """Ctrl-C presses, counted by the CLI's signal handler and read by the swap between steps."""

    def __init__(self) -> None:
        self.count = 0
        self.critical = False  # set once the old daemon is being stopped: from then on, finish the swap
        self.swapped = False  # set once the host's swap script has ended: nothing is left to roll back
        self.second = threading.Event()  # a second press: the swap rolls back at once (swaprun tells the host)

    def reset(self) -> None:
        """Before another swap through the same Swap (an experiment's rollback after its deploy)."""
        self.count, self.critical, self.swapped = 0, False, False
        self.second.clear()

    def tally(self) -> None:
        """Counts one press; safe from a signal handler (it sets an event, nothing more)."""
        self.count += 1
        if self.count >= 2:
            self.second.set()

    def press(self) -> None:
        """Before the stop, Ctrl-C aborts at once (nothing changed); after it, it is counted."""
        self.tally()
        if not self.critical:
            raise KeyboardInterrupt


@dataclass(frozen=True)
class Outcome:
    host: str
    action: str
    outcome: str  # deployed | unchanged | rolled-back | failed | dry-run
    old_sha: str | None
    new_sha: str | None
    steps: dict[str, float] = field(default_factory=dict)  # seconds per step
    upload_mb_s: float | None = None
    upload: dict[str, Any] | None = None  # how the binary got there (journal_entry.Upload.to_dict())
    log_offset: int | None = None  # where the started daemon's output begins in its log
    pid: int | None = None
    message: str = ""
