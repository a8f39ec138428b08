"""Rendering swap events for people: an upload bar, step lines, the daemon's log while it starts."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress_bar import ProgressBar
from rich.status import Status
from rich.table import Table
from rich.text import Text

from ..swap.deploy import Event
from .common import err, text
from .terminal import log_line


class Reporter:
    """Turns core events into terminal output on stderr (stdout stays for --json)."""

    def __init__(self, host: str, quiet: bool = False, bars: bool = True):
        # no bars when hosts run side by side, nor where the cursor cannot move (a pipe, TERM=dumb): a line
        self.host, self.quiet, self.bars = host, quiet, bars and err.is_interactive
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.last_memory = 0.0
        self.waiting: tuple[Status, float] | None = None  # the lock being taken, shown only until it is

    def __call__(self, e: Event) -> None:
        if self.quiet:
            return
        self._taken()
        if e.step == "lock" and self.bars:
            status = err.status(text(f"{self.host} lock: {e.message}"))
            status.start()
            self.waiting = (status, time.monotonic())
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
            if self.task is not None:
                self.progress.update(self.task, completed=e.done, wire=wire)
            if e.done == e.total:
                self.close()
            return
        self.close()
        if e.log_line is not None:
            err.print(Text("  | ") + log_line(e.log_line), style="dim")
            return
        if e.step == "memory" and e.message.startswith("MemAvailable"):
            now = time.monotonic()
            if now - self.last_memory < 2:
                return  # a reading every 2 s is enough for a person
            self.last_memory = now
        style = "bold red" if e.step == "rollback" else None
        err.print(text(f"{self.host} {e.step}: {e.message}"), style=style)

    def _taken(self) -> None:
        """The lock line goes once the next step begins: what stays says it was taken, and in how long."""
        if self.waiting is None:
            return
        status, since = self.waiting
        self.waiting = None
        status.stop()
        err.print(text(f"{self.host} lock: taken in {time.monotonic() - since:.1f} s"))

    def close(self) -> None:
        if self.waiting is not None:
            self.waiting[0].stop()
            self.waiting = None
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class FleetView:
    """One live table while hosts swap side by side: each host's step, what it does now, its upload.

    Transient: the rollout's summary table replaces it at the end. A rollback is also printed above it,
    so it stays on the screen. It costs the rollout little however large the fleet: it is drawn only when a
    host's row changed, at most four times a second, and holds no more rows than the terminal has lines
    (the hosts at work first, then those that failed, then up to five more, done or waiting; a line counts
    the rest). Drawn whole at 128 hosts it cost 75 ms a time, again above every plan printed: more CPU
    than the rollout's SSH work (issue 34)."""

    REFRESH_S = 0.25

    def __init__(self, hosts: list[str], console: Console):
        self.console = console
        self.rows: dict[str, list[Any]] = {h: ["waiting", "", None] for h in hosts}  # step, detail, (done, total, wire)
        self.finished: set[str] = set()  # hosts done, their outcome in their row's step
        self.lock = threading.Lock()
        self.version = 0  # rows changed since the last drawing when it moved
        self.live = Live(self, console=console, auto_refresh=False, transient=True, redirect_stderr=False)
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="fleet-view", daemon=True)

    def __enter__(self) -> FleetView:
        self.live.start(refresh=True)
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._ticker.join()
        self.live.stop()

    def _tick(self) -> None:
        drawn = self.version
        while not self._stop.wait(self.REFRESH_S):
            if self.version != drawn:
                drawn = self.version
                self.live.refresh()

    def sink(self, host: str) -> Callable[[Event], None]:
        return lambda e: self.update(host, e)

    def update(self, host: str, e: Event) -> None:
        with self.lock:
            row = self.rows.setdefault(host, ["waiting", "", None])
            row[0] = e.step
            if e.step == "upload" and e.total:
                row[1], row[2] = "", (e.done or 0, e.total, e.wire)
            elif e.log_line is not None:
                row[1] = log_line(e.log_line).plain
            else:
                row[1] = e.message  # shown through text() in __rich__
            self.version += 1
        if e.step == "rollback":
            self.console.print(text(f"{host} rollback: {e.message}"), style="bold red")

    def finish(self, host: str, outcome: str) -> None:
        with self.lock:
            self.rows[host][:2] = [outcome, ""]
            self.finished.add(host)
            self.version += 1

    def _shown(self, room: int) -> tuple[list[tuple[str, str, str, Any]], Counter[str]]:
        """The rows that fit in `room` lines, in the hosts' order, and what the others are doing."""
        with self.lock:
            rows = [(h, *r) for h, r in self.rows.items()]
            finished = set(self.finished)

        def state(row: tuple[str, str, str, Any]) -> str:
            host, step = row[0], row[1]
            if host in finished:
                return "failed" if _failed(step) else "done"
            return "waiting" if step == "waiting" else "at work"

        rank = {"at work": 0, "failed": 1, "done": 2, "waiting": 3}
        busy = sum(1 for row in rows if rank[state(row)] < 2)  # at work or failed: the rows a person watches
        keep = {row[0] for row in sorted(rows, key=lambda r: rank[state(r)])[:min(room, max(busy + 5, 10))]}
        rest = Counter(state(r) for r in rows if r[0] not in keep)
        return [r for r in rows if r[0] in keep], rest

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        t = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
        for col, kw in (("host", {}), ("step", {}), ("", {"width": 24}), ("", {"overflow": "ellipsis",
                                                                             "no_wrap": True})):
            t.add_column(col, **kw)
        rows, rest = self._shown(max(5, (options.height or console.size.height) - 3))
        for host, step, detail, up in rows:
            bar: ProgressBar | str = ""
            if up:
                done, total, wire = up
                bar = ProgressBar(total=total, completed=done, width=24)
                detail = detail or (f"{done / 1e6:.1f}/{total / 1e6:.1f} MB"
                                    + (f", {wire / 1e6:.1f} MB sent" if wire is not None else ""))
            style = ("red" if _failed(step) else
                     "green" if step in ("deployed", "rolled-back", "unchanged") else None)
            t.add_row(text(host), Text(step, style=style or ""), bar, text(detail))
        yield t
        if rest:
            counts = ", ".join(f"{n} {what}" for what, n in sorted(rest.items()))
            yield Text(f"and {sum(rest.values())} more: {counts}", style="dim")


def _failed(step: str) -> bool:
    return step.startswith(("failed", "rollback"))
