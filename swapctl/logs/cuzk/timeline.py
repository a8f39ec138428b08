"""A run's TIMELINE lines: its span of offsets, the GPU phases (GPU_START..GPU_END) of each worker,
the queue's events, and the gaps between a worker's phases."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

from .patterns import TL_GPU, TL_OFFSET, TL_QUEUE, joined

PhaseKey = tuple[bytes, bytes, bytes]  # (job, worker, partition)


def _offsets() -> array[float]:
    return array("d")


@dataclass
class Timeline:
    """What the TIMELINE lines of one run (or of a part of one) say; offsets in ms."""

    first_ms: float | None = None
    last_ms: float | None = None
    # worker -> its GPU phases (GPU_START..GPU_END) as flat start, end offsets
    intervals: dict[bytes, array[float]] = field(default_factory=dict)
    queued: array[float] = field(default_factory=_offsets)  # GPU_QUEUE offsets: a partition for the GPUs
    picked: array[float] = field(default_factory=_offsets)  # GPU_PICKUP offsets: a worker took one
    opened: dict[PhaseKey, float] = field(default_factory=dict)  # phases started, not ended yet
    # key -> offset of the first GPU_END without a start: only a first one can close a phase the part
    # before left open, so the others are not kept (a dict, not a list that grows with the log)
    orphan_ends: dict[PhaseKey, float] = field(default_factory=dict)
    ended: set[bytes] = field(default_factory=set)  # workers with a GPU_END so far
    first_seen_ms: float | None = None  # the first offset of this part (see merge)

    def read(self, lines: list[bytes]) -> None:
        """Takes TIMELINE lines (without `TIMELINE,`), in log order."""
        text = joined(lines)
        first, last = self.first_ms, self.last_ms
        for raw in TL_OFFSET.findall(text):
            o = float(raw)
            if first is None or last is None:
                first = last = self.first_seen_ms = o
            elif o > last:
                last = o
        self.first_ms, self.last_ms = first, last
        for offset, event in TL_QUEUE.findall(text):
            (self.queued if event == b"GPU_QUEUE" else self.picked).append(float(offset))
        opened, intervals = self.opened, self.intervals
        for raw, event, job, worker, partition in TL_GPU.findall(text):
            offset = float(raw)
            key = (job, worker, partition)
            if event == b"GPU_START":
                opened[key] = offset
                continue
            start = opened.pop(key, None)
            if start is not None:
                intervals.setdefault(worker, array("d")).extend((start, offset))
            else:
                self.orphan_ends.setdefault(key, offset)
            self.ended.add(worker)

    def merge(self, b: Timeline) -> None:
        """Adds `b`, the part right after this one: the phases the cut left open here end there."""
        self.queued.extend(b.queued)
        self.picked.extend(b.picked)
        for worker, values in b.intervals.items():
            self.intervals.setdefault(worker, array("d")).extend(values)
        for key, end in b.orphan_ends.items():
            start = self.opened.pop(key, None)
            if start is None:
                self.orphan_ends.setdefault(key, end)
            else:
                self.intervals.setdefault(key[1], array("d")).extend((start, end))
        self.opened.update(b.opened)
        self.ended.update(b.ended)
        if b.first_seen_ms is None:
            return
        if self.first_seen_ms is None:
            self.first_ms, self.last_ms, self.first_seen_ms = b.first_ms, b.last_ms, b.first_seen_ms
            return
        self.last_ms = max(self.last_ms or 0, b.last_ms or 0)

    def phases_of(self, worker: int) -> list[tuple[float, float]]:
        """One worker's GPU phases, as (start, end) offsets."""
        return pairs(self.intervals.get(str(worker).encode(), ()))

    def gaps(self) -> list[float]:
        """Per worker, from the end of all its earlier GPU phases to the start of its next one, where it
        had none open. The finalizer writes a partition's GPU_END, often after the worker's next GPU_START
        (engine.rs:3196): a gap from the last GPU_END alone would count time the worker was busy."""
        spans: dict[bytes, list[tuple[float, float]]] = {w: pairs(flat) for w, flat in self.intervals.items()}
        for (_, worker, _), start in self.opened.items():  # open at the end: no gap after its start
            spans.setdefault(worker, []).append((start, math.inf))
        reach: dict[bytes, float] = {}  # worker -> the end of its phases so far
        for (_, worker, _), end in self.orphan_ends.items():  # phases begun before the log
            reach[worker] = max(reach.get(worker, end), end)
            spans.setdefault(worker, [])
        gaps = []
        for worker, phases in spans.items():
            last = reach.get(worker)
            for start, end in sorted(phases):
                if last is not None and start >= last:
                    gaps.append(start - last)
                last = end if last is None else max(last, end)
        return gaps


def pairs(flat: Iterable[float]) -> list[tuple[float, float]]:
    """Flat start, end, start, end ... values as (start, end) pairs."""
    it = iter(flat)
    return list(zip(it, it, strict=False))


def union(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of intervals: two workers of one GPU overlap their GPU phases."""
    total, end = 0.0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total
