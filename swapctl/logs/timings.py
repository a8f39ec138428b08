"""cuzk timing logs, parsed as they really are, in one streaming pass.

stdout: tracing lines with ANSI colour and `key=value` fields (`partition=Some(3)`): GPU_TIMING,
FIN_TIMING, `partition synthesis complete`, `partition GPU prove complete`, `Phase 7`. stderr, no
timestamp: `CUZK_TIMING: k=v ...`, `CUZK_NTT_H: k=Xms ...`, `TIMELINE,offset_ms,EVENT,job,detail`.
Unknown lines are counted, never fatal. Values are kept as compact arrays, so percentiles are exact
and memory stays bounded (8 bytes a value) on multi-GB logs.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Iterable

ANSI = re.compile(rb"\x1b\[[0-9;]*m")
FIELD = re.compile(rb"(\w+)=(\S+)")
TRACING = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z\s+\w+\s")

# tracing messages -> the prefix their `*_ms` fields get when two messages share a field name
MESSAGES = {
    b"GPU_TIMING hot_path pre-prove overhead": "",
    b"GPU_TIMING spawn_blocking prove_start": "",
    b"GPU_TIMING prove_start returned": "",
    b"FIN_TIMING finalizer partition": "finalizer_",
    b"FIN_TIMING malloc_trim": "",
    b"partition synthesis complete": "",
    b"partition GPU prove complete": "",
    b"Phase 7: all partitions complete, proof assembled": "job_",
}


@dataclass
class Timings:
    """What one or more logs say; `phases` maps a phase name to its values in ms."""

    phases: dict[str, array] = field(default_factory=dict)
    lines: int = 0
    skipped_lines: int = 0
    pinned: int = 0
    pageable: int = 0
    jobs: int = 0
    timeline_busy_ms: float = 0  # sum of GPU_START..GPU_END intervals
    timeline_first_ms: float | None = None
    timeline_last_ms: float | None = None
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    gpus: set = field(default_factory=set)
    _open: dict = field(default_factory=dict, repr=False)  # (job, worker) -> GPU_START offset
    _gaps: array = field(default_factory=lambda: array("d"), repr=False)
    _last_end: dict = field(default_factory=dict, repr=False)  # worker -> last GPU_END offset

    def add(self, name: str, value: float) -> None:
        values = self.phases.get(name)
        if values is None:
            values = self.phases[name] = array("d")
        values.append(value)

    # -- one line ---------------------------------------------------------------------------------

    def feed(self, raw: bytes) -> None:
        self.lines += 1
        line = ANSI.sub(b"", raw).rstrip(b"\r\n")
        if line.startswith(b"CUZK_TIMING: "):
            self._fields(line[13:], suffix=b"")
        elif line.startswith(b"CUZK_NTT_H: "):
            self._fields(line[12:], suffix=b"ms", prefix="ntt_h_" )
        elif line.startswith(b"TIMELINE,"):
            self._timeline(line)
        else:
            m = TRACING.match(line)
            if not m or not self._tracing(line, m):
                self.skipped_lines += 1

    def _fields(self, text: bytes, suffix: bytes, prefix: str = "") -> None:
        for k, v in FIELD.findall(text):
            key = k.decode()
            if key == "gpu_tid":
                self.gpus.add(v)
                continue
            if suffix:  # CUZK_NTT_H: every field is a time with an `ms` unit
                if not v.endswith(suffix):
                    continue
                v = v[: -len(suffix)]
                name = prefix + key if key == "total" else key
            elif key.endswith("_ms"):
                name = key
            else:
                continue
            try:
                self.add(name, float(v))
            except ValueError:
                pass

    def _tracing(self, line: bytes, m: re.Match) -> bool:
        for message, prefix in MESSAGES.items():
            at = line.find(message)
            if at < 0:
                continue
            ts = datetime.fromisoformat(m.group(1).decode())
            self.first_ts = self.first_ts or ts
            self.last_ts = ts
            fields = dict(FIELD.findall(line[at + len(message):]))
            if message.startswith(b"partition synthesis"):
                pinned = fields.get(b"is_pinned")
                if pinned == b"true":
                    self.pinned += 1
                elif pinned == b"false":
                    self.pageable += 1
            if message.startswith(b"Phase 7"):
                self.jobs += 1
            for k, v in fields.items():
                if k.endswith(b"_ms"):
                    try:
                        self.add(prefix + k.decode(), float(v))
                    except ValueError:
                        pass
            return True
        return bool(line)  # other tracing lines (start-up, ready) are known, not timings

    def _timeline(self, line: bytes) -> None:
        parts = line.split(b",", 4)
        if len(parts) < 4:
            self.skipped_lines += 1
            return
        try:
            offset = float(parts[1])
        except ValueError:
            self.skipped_lines += 1
            return
        self.timeline_first_ms = offset if self.timeline_first_ms is None else min(self.timeline_first_ms, offset)
        self.timeline_last_ms = offset if self.timeline_last_ms is None else max(self.timeline_last_ms, offset)
        event, job = parts[2], parts[3]
        detail = dict(kv.split(b"=", 1) for kv in parts[4].split(b",") if b"=" in kv) if len(parts) > 4 else {}
        worker = detail.get(b"worker", b"0")
        if event == b"GPU_START":
            self._open[(job, worker, detail.get(b"partition"))] = offset
            if worker in self._last_end:
                self._gaps.append(offset - self._last_end[worker])
        elif event == b"GPU_END":
            start = self._open.pop((job, worker, detail.get(b"partition")), None)
            if start is not None:
                self.timeline_busy_ms += offset - start
            self._last_end[worker] = offset

    # -- results ----------------------------------------------------------------------------------

    @property
    def wall_ms(self) -> float | None:
        if self.timeline_first_ms is not None and self.timeline_last_ms is not None \
                and self.timeline_last_ms > self.timeline_first_ms:
            return self.timeline_last_ms - self.timeline_first_ms
        if self.first_ts and self.last_ts and self.last_ts > self.first_ts:
            return (self.last_ts - self.first_ts).total_seconds() * 1000
        return None

    def gpu_busy_fraction(self) -> float | None:
        """sum(mutex_held_ms - barrier_wait_ms) / wall time, per GPU: the GPU's real kernel time."""
        held, barrier, wall = self.phases.get("mutex_held_ms"), self.phases.get("barrier_wait_ms"), self.wall_ms
        if not held or not wall:
            return None
        busy = sum(held) - (sum(barrier) if barrier else 0)
        return busy / (wall * max(1, len(self.gpus)))

    def timeline_busy_fraction(self) -> float | None:
        """GPU_START..GPU_END over wall time: includes the CPU's waits inside that span, so it overstates."""
        wall = self.wall_ms
        workers = max(1, len(self._last_end))
        return self.timeline_busy_ms / (wall * workers) if wall else None

    def report(self) -> dict:
        phases = {name: summarize(values) for name, values in sorted(self.phases.items())}
        synth = phases.get("synth_ms", {}).get("p50")
        gpu = (phases.get("gpu_total_ms") or phases.get("gpu_ms") or {}).get("p50")
        partitions = self.pinned + self.pageable
        mutex_wait = phases.get("mutex_wait_ms", {})
        barrier = phases.get("barrier_wait_ms", {})
        gaps = summarize(self._gaps) if self._gaps else None
        return {
            "phases": phases,
            "gpu_busy_fraction": self.gpu_busy_fraction(),
            "timeline_busy_fraction": self.timeline_busy_fraction(),
            "wall_ms": self.wall_ms,
            "jobs": self.jobs,
            "partitions": partitions,
            "pageable_share": self.pageable / partitions if partitions else None,
            "synth_to_gpu_ratio": synth / gpu if synth and gpu else None,
            "starved": {
                "mutex_wait_p50_ms": mutex_wait.get("p50"),
                "barrier_wait_nonzero": sum(1 for v in self.phases.get("barrier_wait_ms", ()) if v > 0),
                "barrier_wait_p95_ms": barrier.get("p95"),
                "gap_between_partitions_ms": gaps,
                "likely": bool(mutex_wait and mutex_wait["p50"] < 1 and gaps and gaps["p50"] > 0
                               and (gpu is None or gaps["p50"] > 0.1 * gpu)),
            },
            "lines": self.lines,
            "skipped_lines": self.skipped_lines,
        }


def summarize(values: Iterable[float]) -> dict:
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return {"count": 0, "p50": None, "p95": None, "max": None}
    mid = n // 2
    p50 = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2  # the median
    p95 = ordered[min(n - 1, max(0, -(-95 * n // 100) - 1))]  # nearest rank
    return {"count": n, "p50": p50, "p95": p95, "max": ordered[-1]}


def parse(streams: Iterable[IO[bytes]]) -> Timings:
    """Feeds every line of every stream (binary) into one Timings."""
    t = Timings()
    for stream in streams:
        for raw in stream:
            t.feed(raw)
    return t


def compare(before: dict, after: dict) -> dict:
    """Each phase's p50 before and after, with the change in %."""
    rows = {}
    for name in sorted(set(before["phases"]) | set(after["phases"])):
        b = before["phases"].get(name, {}).get("p50")
        a = after["phases"].get(name, {}).get("p50")
        rows[name] = {"before_p50": b, "after_p50": a,
                      "change_pct": (a - b) / b * 100 if a is not None and b else None}
    return {"phases": rows,
            "gpu_busy_fraction": {"before": before["gpu_busy_fraction"], "after": after["gpu_busy_fraction"]},
            "timeline_busy_fraction": {"before": before["timeline_busy_fraction"],
                                       "after": after["timeline_busy_fraction"]}}
