"""A cuzk log read as it is written: its daemon runs, split at each start line and where TIMELINE
offsets go back (a restart whose start line is not in the log)."""

from __future__ import annotations

from typing import Any

from .figures import RunReport, report
from .mender import Mender
from .patterns import RESTART_MS, START, TIMELINE, TL_OFFSET, joined
from .run import Run


class Log:
    """A daemon log read as it is written: its runs, each with its own figures. Feed it whole lines."""

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.mender = Mender()

    @property
    def run(self) -> Run:
        """The run being read (a new one before the first line)."""
        if not self.runs:
            self.runs.append(Run())
        return self.runs[-1]

    def feed(self, chunk: bytes) -> None:
        """Takes whole lines, in log order."""
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r", b"")
        chunk = self.mender.mend(chunk)
        # a new run at each start line
        bounds, at = [0], chunk.find(START)
        while at >= 0:
            bounds.append(chunk.rfind(b"\n", 0, at) + 1)
            at = chunk.find(START, at + len(START))
        bounds.append(len(chunk))
        for k in range(len(bounds) - 1):
            if k:
                self.runs.append(Run(started=True))
            if bounds[k + 1] > bounds[k]:
                self._segment(chunk[bounds[k]:bounds[k + 1]])

    def _segment(self, seg: bytes) -> None:
        """Feeds lines of one run, or of several where TIMELINE offsets go back (a restart whose start
        line is not in the log)."""
        timeline = TIMELINE.findall(seg)
        if timeline:
            last = self.run.timeline_last_ms
            for i, raw in enumerate(TL_OFFSET.findall(joined(timeline))):
                o = float(raw)
                if last is not None and o < last - RESTART_MS:
                    cut = _nth(seg, b"TIMELINE,", i)
                    cut = seg.rfind(b"\n", 0, cut) + 1
                    if cut:
                        self.run.feed(seg[:cut], timeline[:i])
                    self.runs.append(Run())
                    return self._segment(seg[cut:])
                last = o if last is None else max(last, o)
        self.run.feed(seg, timeline)

    def finish(self) -> Log:
        """The end of the input: a TIMELINE line still in pieces counts as one not understood."""
        if self.mender.pending:
            self.run.lines += 1
            self.run.skipped_lines += 1
            self.mender.pending = b""
        self.runs = [r for r in self.runs if r.lines]
        return self

    def merge(self, b: Log) -> None:
        """Appends `b`, the part of the log right after this one."""
        runs = list(b.runs)
        if runs and not runs[0].started and self.runs:
            self.runs[-1].merge(runs.pop(0))
        self.runs.extend(runs)

    def select(self, which: str | int = "all") -> list[Run]:
        """`all`, `last`, or a run's number (1 is the first)."""
        if which == "all":
            return self.runs
        if which == "last":
            return self.runs[-1:]
        n = int(which)
        if not 1 <= n <= len(self.runs):
            raise IndexError(n)
        return [self.runs[n - 1]]

    def figures(self, which: str | int = "all") -> RunReport:
        """The figures of the runs `which` selects (see select)."""
        return report(self.select(which))

    def report(self, which: str | int = "all") -> dict[str, Any]:
        """The figures of the runs `which` selects, as `swapctl timings --json` prints them."""
        return self.figures(which).as_dict()


def _nth(data: bytes, needle: bytes, n: int) -> int:
    at = -1
    for _ in range(n + 1):
        at = data.find(needle, at + 1)
    return at
