"""cuzk timing logs, parsed as they really are, in one streaming pass.

stdout: tracing lines with ANSI colour and `key=value` fields (`partition=Some(3)`): GPU_TIMING,
FIN_TIMING, `partition synthesis complete`, `partition GPU prove complete`, `Phase 7`. stderr, no
timestamp: `CUZK_TIMING: k=v ...`, `CUZK_NTT_H: k=Xms ...`, `TIMELINE,offset_ms,EVENT,job,detail`.
Unknown lines are counted, never fatal. Phase values are kept as float32 arrays (4 bytes a value, the
7 significant digits the logs print), so percentiles are exact and a multi-GB log fits in little memory.
"""

from __future__ import annotations

import os
import re
from array import array
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Iterable

ANSI = re.compile(rb"\x1b\[[0-9;]*m")
CUZK = re.compile(rb"CUZK_TIMING: ([^\n]*)")
NTT = re.compile(rb"CUZK_NTT_H: ([^\n]*)")
TIMELINE = re.compile(rb"TIMELINE,([^\n]*)")
TRACING = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z")
MS_FIELD = re.compile(rb"\b(\w++)(?<=_ms)=(-?\d+(?:\.\d+)?)\b")  # possessive: no backtracking in a word
NTT_FIELD = re.compile(rb"\b(\w++)=(-?\d+(?:\.\d+)?)ms\b")
GPU_TID = re.compile(rb"gpu_tid=(\d+)")
TL_OFFSET = re.compile(rb"^(\d+(?:\.\d+)?),", re.M)
# GPU_START / GPU_END with the worker and partition of their detail (worker=W,partition=N[,gpu_ms=X])
TL_GPU = re.compile(rb"^(\d+(?:\.\d+)?),(GPU_START|GPU_END),([^,\n]*),worker=(\d+),partition=(\d+)", re.M)

# tracing messages -> the prefix their `*_ms` fields get when two messages share a field name;
# the fields are those after the message (the span's fields come before it)
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
# one scan per literal prefix the messages share: GPU_TIMING, FIN_TIMING, partition, Phase 7
MESSAGE_PATTERNS = [
    re.compile(re.escape(prefix) + b"(" + b"|".join(re.escape(m[len(prefix):]) for m in MESSAGES if m.startswith(prefix))
               + rb")([^\n]*)")
    for prefix in (b"GPU_TIMING ", b"FIN_TIMING ", b"partition ", b"Phase 7: ")
]
MESSAGE_PREFIXES = (b"GPU_TIMING ", b"FIN_TIMING ", b"partition ", b"Phase 7: ")


VALUE = "f"  # float32: logs print ms with at most 7 significant digits, which it holds exactly


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
    _runs_ms: float = 0  # the spans of earlier daemon runs in the same log
    # what a part of a log split for parallel parsing leaves for the part before it (see merge)
    _first_seen_ms: float | None = field(default=None, repr=False)  # its first TIMELINE offset
    # key -> offset of the first GPU_END without a start: only a first one can close a phase the part
    # before left open, so the others are not kept (a dict, not a list that grows with the log)
    _orphan_ends: dict = field(default_factory=dict, repr=False)
    _first_start: dict = field(default_factory=dict, repr=False)  # worker -> a GPU_START before any GPU_END

    def add(self, name: str, value: float) -> None:
        values = self.phases.get(name)
        if values is None:
            values = self.phases[name] = array(VALUE)
        values.append(value)

    def add_pairs(self, pairs: list[tuple[bytes, bytes]], prefix: str = "", rename: dict | None = None) -> None:
        """Appends (key, value) pairs found by a findall, looking each key's array up once a batch."""
        arrays: dict[bytes, array] = {}
        for k, v in pairs:
            values = arrays.get(k)
            if values is None:
                name = (rename or {}).get(k) or prefix + k.decode()
                values = arrays[k] = self.phases.setdefault(name, array(VALUE))
            values.append(float(v))

    # -- a chunk of whole lines -------------------------------------------------------------------
    # Each kind of line is found with one multiline regex over the chunk and its fields with one
    # findall over the joined matches: the per-line work stays in C.

    def feed(self, chunk: bytes) -> None:
        """Takes whole lines (a chunk that ends at a newline). Each kind of line starts with a literal
        (`CUZK_TIMING: `, `TIMELINE,`, a tracing message), which the regex engine finds at memchr speed;
        ANSI codes are stripped only from the fields that are kept."""
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r", b"")
        lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
        self.lines += lines
        cuzk = CUZK.findall(chunk)
        ntt = NTT.findall(chunk)
        timeline = TIMELINE.findall(chunk)
        # tracing lines start with their timestamp, 20YY-...
        tracing = chunk.count(b"\n20") + chunk.startswith(b"20")
        empty = chunk.count(b"\n\n") + chunk.startswith(b"\n")
        self.skipped_lines += lines - len(cuzk) - len(ntt) - len(timeline) - tracing - empty
        text = b"\n".join(cuzk)
        self.gpus.update(GPU_TID.findall(text))
        self.add_pairs(MS_FIELD.findall(text))
        self.add_pairs(NTT_FIELD.findall(b"\n".join(ntt)), rename={b"total": "ntt_h_total"})
        self._timeline(timeline)
        if tracing:
            first = TRACING.search(chunk)
            last = TRACING.search(chunk, max(0, chunk.rfind(b"\n20", 0, len(chunk) - 1)))
            if first and self.first_ts is None:
                self.first_ts = datetime.fromisoformat(first.group(1).decode())
            if last:
                self.last_ts = datetime.fromisoformat(last.group(1).decode())
            for prefix, pattern in zip(MESSAGE_PREFIXES, MESSAGE_PATTERNS):
                by_message: dict[bytes, list[bytes]] = {}
                for rest, fields in pattern.findall(chunk):
                    by_message.setdefault(prefix + rest, []).append(fields)
                for message, found in by_message.items():
                    self._message(message, found)

    def _message(self, message: bytes, found: list[bytes]) -> None:
        fields = strip_ansi(b"\n".join(found))
        if message == b"partition synthesis complete":
            self.pinned += fields.count(b"is_pinned=true")
            self.pageable += fields.count(b"is_pinned=false")
        elif MESSAGES[message] == "job_":
            self.jobs += len(found)
        self.add_pairs(MS_FIELD.findall(fields), prefix=MESSAGES[message])

    def _timeline(self, lines: list[bytes]) -> None:
        if not lines:
            return
        text = b"\n".join(lines)
        # offsets count from the daemon's start: where one goes back, a restarted daemon's run begins
        first, last, done = self.timeline_first_ms, self.timeline_last_ms, self._runs_ms
        for o in TL_OFFSET.findall(text):
            o = float(o)
            if first is None:
                first = last = self._first_seen_ms = o
            elif o < last - 1000:
                done += last - first
                first = last = o
            elif o > last:
                last = o
        self.timeline_first_ms, self.timeline_last_ms, self._runs_ms = first, last, done
        opened, last_end, gaps = self._open, self._last_end, self._gaps
        for offset, event, job, worker, partition in TL_GPU.findall(text):
            offset = float(offset)
            key = (job, worker, partition)
            if event == b"GPU_START":
                opened[key] = offset
                if worker in last_end:
                    gaps.append(offset - last_end[worker])
                else:
                    self._first_start.setdefault(worker, offset)
            else:
                start = opened.pop(key, None)
                if start is not None:
                    self.timeline_busy_ms += offset - start
                else:
                    self._orphan_ends.setdefault(key, offset)
                last_end[worker] = offset

    def merge(self, b: "Timings") -> None:
        """Adds what `b`, the part of the log right after this one, says: as if one pass had read both."""
        for name, values in b.phases.items():
            self.phases.setdefault(name, array(VALUE)).extend(values)
        self.lines += b.lines
        self.skipped_lines += b.skipped_lines
        self.pinned += b.pinned
        self.pageable += b.pageable
        self.jobs += b.jobs
        self.gpus |= b.gpus
        self.first_ts = self.first_ts or b.first_ts
        self.last_ts = b.last_ts or self.last_ts
        # GPU phases cut by the split, and the gaps between a worker's last phase here and its first there
        self.timeline_busy_ms += b.timeline_busy_ms
        for key, end in b._orphan_ends.items():
            start = self._open.pop(key, None)
            if start is None:
                self._orphan_ends.setdefault(key, end)
            else:
                self.timeline_busy_ms += end - start
        for worker, start in b._first_start.items():
            if worker in self._last_end:
                self._gaps.append(start - self._last_end[worker])
            else:
                self._first_start.setdefault(worker, start)
        self._gaps.extend(b._gaps)
        self._open.update(b._open)
        self._last_end.update(b._last_end)
        # wall time: b's first run goes on from this part's last run, unless the daemon restarted there
        if b._first_seen_ms is None:
            return
        if self._first_seen_ms is None:
            self.timeline_first_ms, self.timeline_last_ms = b.timeline_first_ms, b.timeline_last_ms
            self._runs_ms, self._first_seen_ms = b._runs_ms, b._first_seen_ms
            return
        first, last = self.timeline_first_ms, self.timeline_last_ms
        if b._first_seen_ms >= last - 1000:  # one run across the split
            if b._runs_ms == 0 and b.timeline_first_ms == b._first_seen_ms:
                self.timeline_last_ms = max(last, b.timeline_last_ms)
                return
            self._runs_ms += b._runs_ms + (b._first_seen_ms - first)
        else:
            self._runs_ms += (last - first) + b._runs_ms
        self.timeline_first_ms, self.timeline_last_ms = b.timeline_first_ms, b.timeline_last_ms

    # -- results ----------------------------------------------------------------------------------

    @property
    def wall_ms(self) -> float | None:
        if self.timeline_first_ms is not None and self.timeline_last_ms is not None \
                and self._runs_ms + self.timeline_last_ms > self.timeline_first_ms:
            return self._runs_ms + self.timeline_last_ms - self.timeline_first_ms
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


# The codes tracing-subscriber writes (levels, bold, dim, italic, reset): bytes.replace removes each at
# memchr speed, where one regex substitution per code costs more than all the parsing.
COMMON_CODES = tuple(f"\x1b[{c}m".encode() for c in ("0", "1", "2", "3", "31", "32", "33", "34", "35"))


def strip_ansi(chunk: bytes) -> bytes:
    if b"\x1b[" not in chunk:
        return chunk
    for code in COMMON_CODES:
        if code in chunk:
            chunk = chunk.replace(code, b"")
    return ANSI.sub(b"", chunk) if b"\x1b[" in chunk else chunk


def summarize(values: Iterable[float]) -> dict:
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return {"count": 0, "p50": None, "p95": None, "max": None}
    # the two middle values (one when n is odd), the nearest-rank p95, the max
    picked = [ordered[(n - 1) // 2], ordered[n // 2], ordered[min(n - 1, max(0, -(-95 * n // 100) - 1))], ordered[-1]]
    if isinstance(values, array) and values.typecode == VALUE:  # 12.3 comes back from float32 as 12.30000019
        picked = [float(f"{v:.7g}") for v in picked]
    low, high, p95, top = picked
    return {"count": n, "p50": (low + high) / 2, "p95": p95, "max": top}  # p50: the median


CHUNK = 8 << 20


def parse(streams: Iterable[IO[bytes]]) -> Timings:
    """Feeds every stream (binary), in chunks of whole lines, into one Timings."""
    t = Timings()
    for stream in streams:
        rest = b""
        while block := stream.read(CHUNK):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut:
                t.feed(block[:cut])
                rest = block[cut:]
            else:
                rest = block
        if rest:
            t.feed(rest)
    return t


PARALLEL_MIN = 64 << 20  # below this a second process costs more than it saves


def _parse_range(path: str, start: int, end: int) -> tuple[Timings, list[tuple[str, int]], str]:
    """Parses bytes [start, end) of `path` in a worker process. The values go back through a spill file,
    not the result pipe: pickling them would hold them twice on each side."""
    import tempfile

    global CHUNK
    CHUNK = 2 << 20  # two of these run at once: smaller chunks, less memory in flight
    with open(path, "rb") as f:
        t = parse([_Range(f, start, end)])
    fd, spill = tempfile.mkstemp(prefix="swapctl-timings-")
    with os.fdopen(fd, "wb") as out:
        counts = []
        for name, values in t.phases.items():
            values.tofile(out)
            counts.append((name, len(values)))
    t.phases = {}
    return t, counts, spill


def _cuts(path: str, parts: int) -> list[int]:
    """Byte offsets splitting the file into `parts` pieces at line ends."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for i in range(1, parts):
            f.seek(max(size * i // parts, cuts[-1]))
            f.readline()
            cuts.append(min(f.tell(), size))
    cuts.append(size)
    return sorted(set(cuts))


def parse_files(paths: Iterable[str], workers: int | None = None) -> Timings:
    """Like parse(), reading each large file in pieces on all cores and merging them in order."""
    workers = workers or os.cpu_count() or 1
    total = Timings()
    for path in paths:
        if workers < 2 or os.path.getsize(path) < PARALLEL_MIN:
            with open(path, "rb") as f:
                total.merge(parse([f]))
            continue
        from concurrent.futures import ProcessPoolExecutor

        cuts = _cuts(path, workers)
        with ProcessPoolExecutor(workers) as pool:  # the workers are gone before the values come back
            parts = list(pool.map(_parse_range, [path] * (len(cuts) - 1), cuts[:-1], cuts[1:]))
        for part, counts, spill in parts:
            try:
                with open(spill, "rb") as f:
                    for name, n in counts:  # read straight into the arrays they extend
                        total.phases.setdefault(name, array(VALUE)).fromfile(f, n)
            finally:
                os.unlink(spill)
            total.merge(part)
    return total


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


class _Range:
    """Bytes [start, end) of a file, read like a stream."""

    def __init__(self, f: IO[bytes], start: int, end: int):
        f.seek(start)
        self.f, self.left = f, end - start

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.f.read(n) if n > 0 else b""
        self.left -= len(data)
        return data


def release_segments(journal: list[dict], size: int) -> list[tuple[str, int, int]]:
    """(release, first byte, end byte) of the daemon log that each release wrote, from the journal's log
    offsets (each start recorded there); what came before the first is labelled by the release it replaced."""
    marks = [(int(e["log_offset"]), e["current"], e.get("from")) for e in journal
             if e.get("log_offset") is not None and e.get("current")]
    segments = []
    if marks and marks[0][0] > 0:
        segments.append((f"{(marks[0][2] or 'before')[:12]}", 0, marks[0][0]))
    for i, (start, release, _) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else size
        if start < end <= size:  # a log truncated since leaves offsets that no longer fit: skipped
            segments.append((release, start, end))
    return segments


def by_release(path: str, journal: list[dict]) -> list[dict]:
    """One report per release, each from the part of the log it wrote."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return [{"release": release, "from_byte": start, "to_byte": end,
                 "report": parse([_Range(f, start, end)]).report()}
                for release, start, end in release_segments(journal, size)]
