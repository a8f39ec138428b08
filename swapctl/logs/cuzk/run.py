"""One daemon run, read from its lines: phase values, proofs, partitions, and the GPU time of each GPU."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

from . import fields
from .calls import Calls
from .fields import Phases
from .figures import RunReport, report
from .patterns import (
    CUZK,
    GPU_SPAN,
    GPU_WORKER_STARTED,
    JOB_DONE,
    MESSAGE_PATTERNS,
    MESSAGE_PREFIXES,
    MESSAGES,
    NTT,
    TL_OFFSET,
    TRACING,
    TRACING_FIRST,
    TRACING_LINE,
    strip_ansi,
    timestamp,
)
from .timeline import Timeline, union


class GpuTime(TypedDict):
    """One GPU of a run: its workers, the held time of their calls, the union of their GPU phases (ms)
    and how many phases that is."""

    workers: list[int]
    held_ms: float
    timeline_ms: float
    phases: int


@dataclass
class Run:
    """What one daemon run (from its start line, or where its TIMELINE offsets begin again) logged;
    `phases` maps a phase name to its values in ms. A part of a run, while a log is read in pieces."""

    phases: Phases = field(default_factory=dict)
    started: bool = False  # begins with the daemon's start line
    lines: int = 0
    skipped_lines: int = 0
    pinned: int = 0
    pageable: int = 0
    jobs: int = 0
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    epoch: datetime | None = None  # wall time of TIMELINE offset 0, from the first tracing line after one
    job_ends: list[datetime] = field(default_factory=list)  # each proof's `Phase 7: ... proof assembled` time
    since: datetime | None = None  # set by leaving its first proofs out: the end of the last one left out
    gpu_of: dict[bytes, bytes] = field(default_factory=dict)  # worker -> GPU, from gpu_worker spans
    gpu_workers: dict[str, int] = field(default_factory=dict)  # pipeline | monolithic -> workers it started
    timeline: Timeline = field(default_factory=Timeline)
    calls: Calls = field(default_factory=Calls)

    # the timeline's figures, read by the GPU view and the plot
    @property
    def timeline_first_ms(self) -> float | None:
        return self.timeline.first_ms

    @property
    def timeline_last_ms(self) -> float | None:
        return self.timeline.last_ms

    @property
    def intervals(self) -> dict[bytes, array[float]]:
        """Worker -> its GPU phases (GPU_START..GPU_END) as flat start, end offsets."""
        return self.timeline.intervals

    @property
    def queued(self) -> array[float]:
        return self.timeline.queued

    @property
    def picked(self) -> array[float]:
        return self.timeline.picked

    # -- a chunk of whole lines of this run -------------------------------------------------------
    # Each kind of line is found with one multiline regex over the chunk and its fields with one
    # findall over the joined matches: the per-line work stays in C.

    def feed(self, chunk: bytes, timeline: list[bytes]) -> None:
        """Takes whole lines (mended, see Log) and their TIMELINE lines. Each kind of line starts with a
        literal (`CUZK_TIMING: `, `TIMELINE,`, a tracing message), which the regex engine finds at memchr
        speed; ANSI codes are stripped only from the fields that are kept."""
        lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
        self.lines += lines
        cuzk = CUZK.findall(chunk)
        ntt = NTT.findall(chunk)
        tracing = sum(chunk.count(t) for t in TRACING_LINE) + chunk.startswith(TRACING_FIRST)
        empty = chunk.count(b"\n\n") + chunk.startswith(b"\n")
        self.skipped_lines += lines - len(cuzk) - len(ntt) - len(timeline) - tracing - empty
        text = b"\n".join(cuzk)
        fields.add_fields(self.phases, text, "ms", b"CUZK_TIMING")
        fields.add_fields(self.phases, b"\n".join(ntt), "ntt", rename={b"total": "ntt_h_total"})
        if timeline:
            self.timeline.read(timeline)
            if self.epoch is None:
                self._anchor(chunk, timeline)
        if b"mutex_held_ms" in text:
            self.calls.scan(chunk)
        if tracing:
            self._tracing(chunk)

    def _tracing(self, chunk: bytes) -> None:
        """The chunk's tracing lines: their times, the workers' GPUs, the messages' fields."""
        first = TRACING.search(chunk)
        last = TRACING.search(chunk, max(0, *(chunk.rfind(t) for t in TRACING_LINE)))
        if first and self.first_ts is None:
            self.first_ts = timestamp(first.group(1))
        if last:
            self.last_ts = timestamp(last.group(1))
        if JOB_DONE in chunk:
            self.job_ends.extend(_line_times(chunk, JOB_DONE))
        if b"GPU worker started" in chunk:
            for kind in GPU_WORKER_STARTED.findall(chunk):
                self.gpu_workers[kind.decode()] = self.gpu_workers.get(kind.decode(), 0) + 1
        if b"gpu_worker" in chunk and (not self.gpu_of or not self.timeline.ended <= self.gpu_of.keys()):
            self.gpu_of.update(GPU_SPAN.findall(chunk))
        for prefix, pattern in zip(MESSAGE_PREFIXES, MESSAGE_PATTERNS, strict=False):
            by_message: dict[bytes, list[bytes]] = {}
            for rest, found in pattern.findall(chunk):
                by_message.setdefault(prefix + rest, []).append(found)
            for message, found_all in by_message.items():
                self._message(message, found_all)

    def _message(self, message: bytes, found: list[bytes]) -> None:
        prefix = MESSAGES[message]
        if prefix is None:
            return
        text = strip_ansi(b"\n".join(found))
        if message == b"partition synthesis complete":
            self.pinned += text.count(b"is_pinned=true")
            self.pageable += text.count(b"is_pinned=false")
        elif prefix == "job_":
            self.jobs += len(found)
        fields.add_fields(self.phases, text, "ms", message, prefix=prefix)

    def _anchor(self, chunk: bytes, timeline: list[bytes]) -> None:
        """The wall time of offset 0, from a SYNTH_END line and the tracing line cuzk writes right after it
        (`partition synthesis complete, pushing to GPU queue`, engine.rs:1752-1763): that line's time,
        less the SYNTH_END's offset. (A SYNTH_START is followed by synthesis, seconds of it.)"""
        line = next((t for t in timeline if b",SYNTH_END," in t[:40]), None)
        at = chunk.find(b"TIMELINE," + line) if line else -1
        m = TRACING.search(chunk, at) if at >= 0 else None
        offset = TL_OFFSET.match(b"\n" + line) if line else None
        if m and offset:
            self.epoch = timestamp(m.group(1)) - timedelta(milliseconds=float(offset.group(1)))

    def merge(self, b: Run) -> None:
        """Adds what `b`, the part of this run right after this one, says: as if one pass had read both."""
        fields.extend(self.phases, b.phases)
        self.lines += b.lines
        self.skipped_lines += b.skipped_lines
        self.pinned += b.pinned
        self.pageable += b.pageable
        self.jobs += b.jobs
        self.gpu_of.update(b.gpu_of)
        for kind, n in b.gpu_workers.items():
            self.gpu_workers[kind] = self.gpu_workers.get(kind, 0) + n
        self.first_ts = self.first_ts or b.first_ts
        self.last_ts = b.last_ts or self.last_ts
        self.epoch = self.epoch or b.epoch
        self.job_ends.extend(b.job_ends)
        self.calls.merge(b.calls)
        self.timeline.merge(b.timeline)

    # -- results ----------------------------------------------------------------------------------

    @property
    def wall_ms(self) -> float | None:
        """The run's span: its TIMELINE offsets', else its tracing lines'."""
        first, last = self.timeline.first_ms, self.timeline.last_ms
        if first is not None and last is not None and last > first:
            return last - first
        if self.first_ts and self.last_ts and self.last_ts > self.first_ts:
            return (self.last_ts - self.first_ts).total_seconds() * 1000
        return None

    @property
    def proving_s(self) -> float | None:
        """The span proofs/h divides by: from `since` (the first proofs left out) to the last line, else the
        run's wall time. Without `since`, a window that left out its first proof and kept that proof's time
        read a fifth to a third low over 3-8 proofs."""
        if self.since is None:
            return None if self.wall_ms is None else self.wall_ms / 1000
        if self.last_ts is None or self.last_ts <= self.since:
            return None
        return (self.last_ts - self.since).total_seconds()

    def gpus(self) -> dict[str, GpuTime]:
        """Per GPU: its workers, the held time of their calls, and the union of their GPU phases (ms)."""
        held = self.calls.held
        by_gpu: dict[str, GpuTime] = {}
        for w in set(held) | set(self.timeline.intervals) | set(self.gpu_of):
            g = self.gpu_of.get(w, b"?").decode()
            d = by_gpu.setdefault(g, GpuTime(workers=[], held_ms=0.0, timeline_ms=0.0, phases=0))
            d["workers"].append(int(w))
            d["held_ms"] += held.get(w, 0.0)
        if not by_gpu and (self.calls.unmatched_ms() or self.phases.get("mutex_held_ms")):
            by_gpu["0"] = GpuTime(workers=[], held_ms=0.0, timeline_ms=0.0, phases=0)
        if len(by_gpu) == 1:  # one GPU: every call was on it, matched to its worker or not
            [d] = by_gpu.values()
            d["held_ms"] = float(sum(self.phases.get("mutex_held_ms", ())))
        for d in by_gpu.values():
            spans = [iv for w in d["workers"] for iv in self.timeline.phases_of(w)]
            d["phases"] = len(spans)
            d["timeline_ms"] = union(spans)
            d["workers"].sort()
        return dict(sorted(by_gpu.items()))

    def gaps(self) -> list[float]:
        """The gaps between each worker's GPU phases, in ms (Timeline.gaps)."""
        return self.timeline.gaps()

    def figures(self) -> RunReport:
        """This run's figures."""
        return report([self])

    def report(self) -> dict[str, Any]:
        """This run's figures, as `swapctl timings --json` prints them."""
        return self.figures().as_dict()


def _line_times(chunk: bytes, needle: bytes) -> list[datetime]:
    """The tracing times of the chunk's lines that hold `needle` (few: one a proof)."""
    out, at = [], chunk.find(needle)
    while at >= 0:
        m = TRACING.search(chunk, chunk.rfind(b"\n", 0, at) + 1, at)
        if m:
            out.append(timestamp(m.group(1)))
        at = chunk.find(needle, at + len(needle))
    return out
