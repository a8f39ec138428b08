"""Rendering swap events for people: an upload bar, step lines, the daemon's log while it starts."""

from __future__ import annotations

import time

from rich.markup import escape
from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                           TransferSpeedColumn)
from rich.text import Text

from ..swap.deploy import Event
from .common import err, text


class Reporter:
    """Turns core events into terminal output on stderr (stdout stays for --json)."""

    def __init__(self, host: str, quiet: bool = False, bars: bool = True):
        self.host, self.quiet, self.bars = host, quiet, bars  # no bars when hosts run side by side
        self.progress: Progress | None = None
        self.task = None
        self.last_memory = 0.0

    def __call__(self, e: Event) -> None:
        if self.quiet:
            return
        if e.step == "upload" and e.total:
            if not self.bars:
                if e.done == e.total:
                    err.print(text(f"{self.host} upload: {e.total / 1e6:.1f} MB, {(e.wire or 0) / 1e6:.2f} MB sent"))
                return
            if self.progress is None:
                self.progress = Progress(TextColumn(escape(f"{self.host} upload")), BarColumn(), DownloadColumn(),
                                         TransferSpeedColumn(), TextColumn("{task.fields[wire]}"),
                                         TimeRemainingColumn(), console=err, transient=False)
                self.progress.start()
                self.task = self.progress.add_task("upload", total=e.total, wire="")
            wire = f"{e.wire / 1e6:.1f} MB on the wire" if e.wire is not None else ""
            self.progress.update(self.task, completed=e.done, wire=wire)
            if e.done == e.total:
                self.close()
            return
        self.close()
        if e.log_line is not None:
            err.print(Text("  | ") + Text.from_ansi(e.log_line), style="dim")
            return
        if e.step == "memory" and e.message.startswith("MemAvailable"):
            now = time.monotonic()
            if now - self.last_memory < 2:
                return  # a reading every 2 s is enough for a person
            self.last_memory = now
        style = "bold red" if e.step == "rollback" else None
        err.print(text(f"{self.host} {e.step}: {e.message}"), style=style)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
