"""cuzk timing logs, parsed as they really are, in one streaming pass.

stdout: tracing lines with ANSI colour and `key=value` fields (`partition=Some(3)`): GPU_TIMING,
FIN_TIMING, `partition synthesis complete`, `partition GPU prove complete`, `Phase 7`. stderr, no
timestamp: `CUZK_TIMING: k=v ...`, `CUZK_NTT_H: k=Xms ...`, `TIMELINE,offset_ms,EVENT,job,detail`.
Unknown lines are counted, never fatal. Phase values are kept as float32 arrays (4 bytes a value, the
7 significant digits the logs print), so percentiles are exact and a multi-GB log fits in little memory.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import IO, Protocol

from ..swap.journal_entry import JournalEntry, starts

ANSI = re.compile(rb"\x1b\[[0-9;]*m")
CUZK = re.compile(rb"CUZK_TIMING: ([^\n]*)")
NTT = re.compile(rb"CUZK_NTT_H: ([^\n]*)")
TIMELINE = re.compile(rb"TIMELINE,([^\n]*)")
TRACING = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z")
MS_FIELD = re.compile(rb"\b(\w++)(?<=_ms)=(-?\d+(?:\.\d+)?)\b")  # possessive: no backtracking in a word
NTT_FIELD = re.compile(rb"\b(\w++)=(-?\d+(?:\.\d+)?)ms\b")
# over TIMELINE lines joined after a newline each: the literal newline lets the search run at memchr speed
TL_OFFSET = re.compile(rb"\n(\d+(?:\.\d+)?),")
# GPU_START / GPU_END with the worker and partition of their detail (worker=W,partition=N[,gpu_ms=X])
TL_QUEUE = re.compile(rb"\n(\d+(?:\.\d+)?),(GPU_QUEUE|GPU_PICKUP),")
TL_GPU = re.compile(rb"\n(\d+(?:\.\d+)?),(GPU_START|GPU_END),([^,\n]*),worker=(\d+),partition=(\d+)")
# the run's first line (cuzk-daemon/src/main.rs:63)
START = b"cuzk-daemon starting"
# a tracing line's start: the timestamp, dimmed (ANSI on, the default) or not (NO_COLOR)
TRACING_LINE = (b"\n\x1b[2m20", b"\n20")
# `gpu_worker{worker_id=W gpu=G ...}`, the span of a partition's GPU work, with or without ANSI codes
_E = rb"(?:\x1b\[[0-9;]*m)*"
GPU_SPAN = re.compile(rb"gpu_worker" + _E + rb"\{" + _E + rb"worker_id" + _E + rb"=" + _E + rb"(\d+) " + _E
                      + rb"gpu" + _E + rb"=" + _E + rb"(\d+)")
# A C++ start function's held time, and the Rust line that follows its return on the same thread, in
# log order: `prove_start_ms` (Rust's clock around the call) matches `total_start_fn_ms` (C++'s).
HELD = re.compile(rb"CUZK_TIMING: mutex_held_ms=(\d+) total_start_fn_ms=(\d+)")
PROVE_STARTED = re.compile(rb"GPU_TIMING spawn_blocking prove_start ([^\n]*)")
WORKER = re.compile(rb"\bworker_id=(\d+)")
PROVE_START = re.compile(rb"\bprove_start_ms=(\d+)")
# Lines written by one write(2) each, which can land inside a TIMELINE line: `eprintln!` writes it in
# pieces, and tracing (stdout) and C++ (glibc's stderr) do not take Rust's stderr lock.
WHOLE = re.compile(rb"CUZK_TIMING: |CUZK_NTT_H: |\x1b\[2m\d{4}-\d\d-\d\dT|\d{4}-\d\d-\d\dT\d\d:")
# what shows that a line landed inside a TIMELINE line (a superset: WHOLE then finds where it begins)
CUT_MARKS = (b"CUZK_", b"\x1b[", b"Z ")  # a C++ line, a coloured tracing line, a plain one ("...Z  INFO")
LINE_START = re.compile(rb"TIMELINE,|CUZK_TIMING: |CUZK_NTT_H: |\x1b\[2m\d{4}-|\d{4}-\d\d-\d\dT\d\d:")

# tracing messages -> the prefix their `*_ms` fields get when two messages share a field name (None:
# a repeat of another message's values, not counted again); the fields are those after the message
# (the span's fields come before it). Longer messages first: the first alternative that matches wins.
MESSAGES = {
    b"GPU_TIMING hot_path pre-prove overhead": "",
    b"GPU_TIMING spawn_blocking prove_start": "",
    b"GPU_TIMING prove_start returned": "",
    b"FIN_TIMING finalizer partition": "finalizer_",
    b"FIN_TIMING malloc_trim": "",
    b"partition synthesis complete, pushing to GPU queue": None,  # engine.rs:1759: synth_ms again
    b"partition synthesis complete": "",
    b"partition GPU prove complete": "",
    b"Phase 7: all partitions complete, proof assembled": "job_",
}
# one scan per literal prefix the messages share: GPU_TIMING, FIN_TIMING, partition, Phase 7
MESSAGE_PREFIXES = (b"GPU_TIMING ", b"FIN_TIMING ", b"partition ", b"Phase 7: ")
MESSAGE_PATTERNS = [
    re.compile(re.escape(prefix) + b"("
               + b"|".join(re.escape(m[len(prefix):]) for m in MESSAGES if m.startswith(prefix)) + rb")([^\n]*)")
    for prefix in MESSAGE_PREFIXES
]

# kind -> (the pattern of its pairs, what each pair holds once, to count them)
FIELDS = {"ms": (MS_FIELD, b"_ms="), "ntt": (NTT_FIELD, b"=")}
KNOWN_FIELDS: dict[tuple[str, bytes], set[bytes]] = {}
_FIELD_RES: dict[tuple[str, bytes], re.Pattern] = {}


def _field(kind: str, key: bytes) -> re.Pattern:
    """The values of one field: the pattern of its kind with the name fixed."""
    pattern = _FIELD_RES.get((kind, key))
    if pattern is None:
        unit = rb"ms\b" if kind == "ntt" else rb"\b"  # no \b before: the literal name starts the search
        pattern = _FIELD_RES[kind, key] = re.compile(re.escape(key) + rb"=(-?\d+(?:\.\d+)?)" + unit)
    return pattern


VALUE = "f"  # float32: logs print ms with at most 7 significant digits, which it holds exactly
PENDING_CALLS = 64  # C++ calls waiting for their prove_start line: more GPU workers than a box has
RESTART_MS = 1000  # TIMELINE offsets that go back further than this: a new daemon run

PHASE_SHARE = ("sum(mutex_held_ms - barrier_wait_ms) / wall time, per GPU: the time partitions hold the GPU, "
               "a copy from pageable memory included; not how busy the GPU is")


@dataclass
class Run:
    """What one daemon run (from its start line, or where its TIMELINE offsets begin again) logged;
    `phases` maps a phase name to its values in ms. A part of a run, while a log is read in pieces."""

    phases: dict[str, array] = field(default_factory=dict)
    started: bool = False  # begins with the daemon's start line
    lines: int = 0
    skipped_lines: int = 0
    pinned: int = 0
    pageable: int = 0
    jobs: int = 0
    timeline_first_ms: float | None = None
    timeline_last_ms: float | None = None
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    epoch: datetime | None = None  # wall time of TIMELINE offset 0, from the first tracing line after one
    gpu_of: dict[bytes, bytes] = field(default_factory=dict)  # worker -> GPU, from gpu_worker spans
    held: dict[bytes, float] = field(default_factory=dict)  # worker -> mutex_held_ms of its calls
    # worker -> its GPU phases (GPU_START..GPU_END) as flat start, end offsets
    intervals: dict[bytes, array] = field(default_factory=dict)
    queued: array = field(default_factory=lambda: array("d"))  # GPU_QUEUE offsets: a partition for the GPUs
    picked: array = field(default_factory=lambda: array("d"))  # GPU_PICKUP offsets: a worker took one
    _open: dict = field(default_factory=dict, repr=False)  # (job, worker, partition) -> GPU_START offset
    _calls: list = field(default_factory=list, repr=False)  # C++ calls not matched yet: [total_fn, held]
    unmatched_held_ms: float = 0.0  # held time of calls no prove_start line matched
    _workers_seen: set = field(default_factory=set, repr=False)  # workers of GPU phases so far
    _unheld: list = field(default_factory=list, repr=False)  # prove_start lines before their call's line
    # what a part of a log split for parallel parsing leaves for the part before it (see merge)
    _first_seen_ms: float | None = field(default=None, repr=False)  # its first TIMELINE offset
    # key -> offset of the first GPU_END without a start: only a first one can close a phase the part
    # before left open, so the others are not kept (a dict, not a list that grows with the log)
    _orphan_ends: dict = field(default_factory=dict, repr=False)

    def add_fields(self, text: bytes, kind: str, where: bytes = b"", prefix: str = "",
                   rename: dict | None = None) -> None:
        """Appends the `*_ms=X` (kind "ms") or `k=Xms` (kind "ntt") values in `text`. One findall per field
        name, so the per-value work stays in C; when the names seen so far do not account for every
        value (a new name, or one name the tail of another), one findall of all pairs does it. `where`
        (the message, say) keeps the names apart by where they were seen."""
        pattern, mark = FIELDS[kind]
        total = text.count(mark)
        if not total:
            return
        known = KNOWN_FIELDS.setdefault((kind, where), set())
        found = {k: _field(kind, k).findall(text) for k in known}
        if sum(map(len, found.values())) != total:
            pairs = pattern.findall(text)
            known.update(k for k, _ in pairs)
            found = {}
            for k, v in pairs:
                found.setdefault(k, []).append(v)
        for k, values in found.items():
            if values:
                name = (rename or {}).get(k) or prefix + k.decode()
                self.phases.setdefault(name, array(VALUE)).extend(map(float, values))

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
        starts = (b"\x1b[2m20", b"20")
        tracing = sum(chunk.count(t) for t in TRACING_LINE) + chunk.startswith(starts)
        empty = chunk.count(b"\n\n") + chunk.startswith(b"\n")
        self.skipped_lines += lines - len(cuzk) - len(ntt) - len(timeline) - tracing - empty
        text = b"\n".join(cuzk)
        self.add_fields(text, "ms", b"CUZK_TIMING")
        self.add_fields(b"\n".join(ntt), "ntt", rename={b"total": "ntt_h_total"})
        if timeline:
            self._timeline(timeline)
            if self.epoch is None:
                self._anchor(chunk, timeline)
        if b"mutex_held_ms" in text:
            self._calls_in(chunk)
        if tracing:
            first = TRACING.search(chunk)
            last = TRACING.search(chunk, max(0, *(chunk.rfind(t) for t in TRACING_LINE)))
            if first and self.first_ts is None:
                self.first_ts = _ts(first.group(1))
            if last:
                self.last_ts = _ts(last.group(1))
            if b"gpu_worker" in chunk and (not self.gpu_of or not self._workers_seen <= self.gpu_of.keys()):
                self.gpu_of.update(GPU_SPAN.findall(chunk))
            for prefix, pattern in zip(MESSAGE_PREFIXES, MESSAGE_PATTERNS, strict=False):
                by_message: dict[bytes, list[bytes]] = {}
                for rest, fields in pattern.findall(chunk):
                    by_message.setdefault(prefix + rest, []).append(fields)
                for message, found in by_message.items():
                    self._message(message, found)

    def _message(self, message: bytes, found: list[bytes]) -> None:
        prefix = MESSAGES[message]
        if prefix is None:
            return
        fields = strip_ansi(b"\n".join(found))
        if message == b"partition synthesis complete":
            self.pinned += fields.count(b"is_pinned=true")
            self.pageable += fields.count(b"is_pinned=false")
        elif prefix == "job_":
            self.jobs += len(found)
        self.add_fields(fields, "ms", message, prefix=prefix)

    def _anchor(self, chunk: bytes, timeline: list[bytes]) -> None:
        """The wall time of offset 0, from a SYNTH_END line and the tracing line cuzk writes right after it
        (`partition synthesis complete, pushing to GPU queue`, engine.rs:1752-1763): that line's time,
        less the SYNTH_END's offset. (A SYNTH_START is followed by synthesis, seconds of it.)"""
        line = next((t for t in timeline if b",SYNTH_END," in t[:40]), None)
        at = chunk.find(b"TIMELINE," + line) if line else -1
        m = TRACING.search(chunk, at) if at >= 0 else None
        offset = TL_OFFSET.match(b"\n" + line) if line else None
        if m and offset:
            self.epoch = _ts(m.group(1)) - timedelta(milliseconds=float(offset.group(1)))

    def _calls_in(self, chunk: bytes) -> None:
        """Gives each C++ call's mutex_held_ms to the worker whose prove_start line follows it."""
        # two searches with a literal each (one alternation of both would try every position), in log order
        events: list[tuple[int, re.Match[bytes]]] = sorted(
            [(m.start(), m) for m in HELD.finditer(chunk)] + [(m.start(), m) for m in PROVE_STARTED.finditer(chunk)],
            key=lambda e: e[0])
        proves = [None if m.re is HELD else _prove_start(m[1]) for _, m in events]
        for i, (_, m) in enumerate(events):
            if m.re is HELD:
                self._calls.append([float(m[2]), float(m[1])])
                if len(self._calls) > PENDING_CALLS:  # never matched: its worker is not known
                    self.unmatched_held_ms += self._calls.pop(0)[1]
                continue
            found = proves[i]
            if found is None:
                continue
            # the prove_start lines right after this one, before another call's line: calls that ended
            # together are matched together
            ahead = [p[1] for p in itertools.takewhile(lambda p: p is not None, proves[i + 1:i + 1 + GROUP])]
            if not self._match(found[0], found[1], ahead):
                self._unheld.append(found)

    def _match(self, worker: bytes, prove_start: float, ahead: list[float] | None = None) -> bool:
        """Gives `worker` the pending call its Rust time fits (within 2 ms + 5% of the C++ time). Where
        several fit, the prove_start lines `ahead` are matched with it: the assignment of fewest misses,
        then least time apart, then in log order (the calls' threads print in the order they ended)."""
        choice = _assign([prove_start, *(ahead or [])], [c[0] for c in self._calls])
        if choice is None:
            return False
        best = self._calls.pop(choice)
        self.held[worker] = self.held.get(worker, 0.0) + best[1]
        return True

    def _timeline(self, lines: list[bytes]) -> None:
        text = _joined(lines)
        first, last = self.timeline_first_ms, self.timeline_last_ms
        for raw in TL_OFFSET.findall(text):
            o = float(raw)
            if first is None or last is None:
                first = last = self._first_seen_ms = o
            elif o > last:
                last = o
        self.timeline_first_ms, self.timeline_last_ms = first, last
        for offset, event in TL_QUEUE.findall(text):
            (self.queued if event == b"GPU_QUEUE" else self.picked).append(float(offset))
        opened, intervals, ended = self._open, self.intervals, set()
        for offset, event, job, worker, partition in TL_GPU.findall(text):
            offset = float(offset)
            key = (job, worker, partition)
            if event == b"GPU_START":
                opened[key] = offset
            else:
                start = opened.pop(key, None)
                if start is not None:
                    intervals.setdefault(worker, array("d")).extend((start, offset))
                else:
                    self._orphan_ends.setdefault(key, offset)
                ended.add(worker)
        self._workers_seen.update(ended)

    def merge(self, b: Run) -> None:
        """Adds what `b`, the part of this run right after this one, says: as if one pass had read both."""
        for name, values in b.phases.items():
            self.phases.setdefault(name, array(VALUE)).extend(values)
        self.lines += b.lines
        self.skipped_lines += b.skipped_lines
        self.pinned += b.pinned
        self.pageable += b.pageable
        self.jobs += b.jobs
        self.gpu_of.update(b.gpu_of)
        self.first_ts = self.first_ts or b.first_ts
        self.last_ts = b.last_ts or self.last_ts
        self.epoch = self.epoch or b.epoch
        for worker, prove_start in b._unheld:  # prove_start lines whose call's line was in this part
            if not self._match(worker, prove_start):
                self._unheld.append((worker, prove_start))
        self._calls.extend(b._calls)
        self.queued.extend(b.queued)
        self.picked.extend(b.picked)
        self.unmatched_held_ms += b.unmatched_held_ms
        for worker, held in b.held.items():
            self.held[worker] = self.held.get(worker, 0.0) + held
        # GPU phases cut by the split, and the gaps between a worker's last phase here and its first there
        for worker, values in b.intervals.items():
            self.intervals.setdefault(worker, array("d")).extend(values)
        for key, end in b._orphan_ends.items():
            start = self._open.pop(key, None)
            if start is None:
                self._orphan_ends.setdefault(key, end)
            else:
                self.intervals.setdefault(key[1], array("d")).extend((start, end))
        self._open.update(b._open)
        if b._first_seen_ms is None:
            return
        if self._first_seen_ms is None:
            self.timeline_first_ms, self.timeline_last_ms = b.timeline_first_ms, b.timeline_last_ms
            self._first_seen_ms = b._first_seen_ms
            return
        self.timeline_last_ms = max(self.timeline_last_ms or 0, b.timeline_last_ms or 0)

    # -- results ----------------------------------------------------------------------------------

    @property
    def wall_ms(self) -> float | None:
        if self.timeline_first_ms is not None and self.timeline_last_ms is not None \
                and self.timeline_last_ms > self.timeline_first_ms:
            return self.timeline_last_ms - self.timeline_first_ms
        if self.first_ts and self.last_ts and self.last_ts > self.first_ts:
            return (self.last_ts - self.first_ts).total_seconds() * 1000
        return None

    def gpus(self) -> dict[str, dict]:
        """Per GPU: its workers, the held time of their calls, and the union of their GPU phases (ms)."""
        workers = set(self.held) | set(self.intervals) | set(self.gpu_of)
        by_gpu: dict[str, dict] = {}
        for w in workers:
            g = self.gpu_of.get(w, b"?").decode()
            d = by_gpu.setdefault(g, {"workers": [], "held_ms": 0.0, "timeline_ms": 0.0, "phases": 0})
            d["workers"].append(int(w))
            d["held_ms"] += self.held.get(w, 0.0)
        unmatched = self.unmatched_held_ms + sum(c[1] for c in self._calls)
        if not by_gpu and (unmatched or self.phases.get("mutex_held_ms")):
            by_gpu["0"] = {"workers": [], "held_ms": 0.0, "timeline_ms": 0.0, "phases": 0}
        if len(by_gpu) == 1:  # one GPU: every call was on it, matched to its worker or not
            [d] = by_gpu.values()
            d["held_ms"] = float(sum(self.phases.get("mutex_held_ms", ())))
        for d in by_gpu.values():
            spans = [iv for w in d["workers"] for iv in _pairs(self.intervals.get(str(w).encode(), ()))]
            d["phases"] = len(spans)
            d["timeline_ms"] = _union(spans)
            d["workers"].sort()
        return dict(sorted(by_gpu.items()))

    def gaps(self) -> list[float]:
        """Per worker, from the end of all its earlier GPU phases to the start of its next one, where it
        had none open. The finalizer writes a partition's GPU_END, often after the worker's next GPU_START
        (engine.rs:3196): a gap from the last GPU_END alone would count time the worker was busy."""
        spans: dict[bytes, list[tuple[float, float]]] = {w: _pairs(flat) for w, flat in self.intervals.items()}
        for (_, worker, _), start in self._open.items():  # open at the end: no gap after its start
            spans.setdefault(worker, []).append((start, math.inf))
        reach: dict[bytes, float] = {}  # worker -> the end of its phases so far
        for (_, worker, _), end in self._orphan_ends.items():  # phases begun before the log
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

    def report(self) -> dict:
        return _report([self])


GROUP = 3  # prove_start lines looked ahead at: calls of more GPUs than that seldom end in one ms


def _fits(call_ms: float, prove_start: float) -> bool:
    return abs(call_ms - prove_start) <= 2 + 0.05 * prove_start


def _prove_start(fields: bytes) -> tuple[bytes, float] | None:
    """(worker, prove_start_ms) of a `GPU_TIMING spawn_blocking prove_start` line's fields."""
    fields = strip_ansi(fields)
    worker, prove_start = WORKER.search(fields), PROVE_START.search(fields)
    return (worker[1], float(prove_start[1])) if worker and prove_start else None


def _assign(proves: list[float], calls: list[float]) -> int | None:
    """The index in `calls` (C++ times, in log order) that `proves[0]` gets when `proves` (Rust times,
    in log order) are matched together: fewest unmatched, then least total difference, then fewest
    pairs out of log order. Nearest-first alone swaps two calls whose times are 1 ms apart when the
    first one's Rust clock read 1 ms more (it wraps the C++ one)."""
    # each line's few nearest fits (a stable sort: ties stay in log order), so the search stays small
    fits = [sorted((j for j, c in enumerate(calls) if _fits(c, r)), key=lambda j, r=r: abs(calls[j] - r))[:GROUP + 1]
            for r in proves]
    if not fits[0]:
        return None
    if len(fits[0]) == 1:
        return fits[0][0]
    best: tuple[tuple[int, float, int], int] | None = None
    for picks in itertools.product(*[[*f, None] for f in fits]):
        taken = [j for j in picks if j is not None]
        if picks[0] is None or len(set(taken)) < len(taken):
            continue
        missed = len(picks) - len(taken)
        apart = sum(abs(calls[j] - r) for j, r in zip(picks, proves, strict=True) if j is not None)
        crossed = sum(1 for a, b in itertools.combinations(taken, 2) if a > b)
        key = (missed, apart, crossed)
        if best is None or key < best[0]:
            best = (key, picks[0])
    return best[1] if best else None


def _joined(lines: list[bytes]) -> bytes:
    """TIMELINE lines (without `TIMELINE,`), each after a newline, for TL_OFFSET and TL_GPU."""
    return b"\n" + b"\n".join(lines)


def _pairs(flat: Iterable[float]) -> list[tuple[float, float]]:
    it = iter(flat)
    return list(zip(it, it, strict=False))


def _union(spans: list[tuple[float, float]]) -> float:
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


def _ts(raw: bytes) -> datetime:
    return datetime.fromisoformat(raw.decode()).replace(tzinfo=UTC)


class Mender:
    """Puts TIMELINE lines cut by other lines back together: the lines written inside one keep their own
    line, and its pieces join up, in the order they were written. Holds a line still in pieces."""

    def __init__(self) -> None:
        self.pending = b""

    def mend(self, chunk: bytes) -> bytes:
        """Whole lines in, whole lines out; a chunk with no cut line passes as it is. Only the lines from
        a cut TIMELINE line to its last piece are looked at one by one."""
        out: list[bytes] = []
        at = self._join(chunk, 0, out) if self.pending else 0
        for start, inner in _cut_lines(chunk, at):
            if start < at:  # mended already, as a piece of the line before
                continue
            end = chunk.find(b"\n", start)
            end = len(chunk) if end < 0 else end + 1
            out.append(chunk[at:start])
            self.pending = chunk[start:inner]
            out.append(chunk[inner:end])
            at = self._join(chunk, end, out)
        if not out:
            return chunk
        out.append(chunk[at:])
        return b"".join(out)

    def _join(self, chunk: bytes, at: int, out: list[bytes]) -> int:
        """With a TIMELINE line in pieces: keeps the whole lines that follow, then joins the next piece
        to it (and mends that again, if another line landed inside). Returns where to go on."""
        while self.pending and at < len(chunk):
            end = chunk.find(b"\n", at)
            end = len(chunk) if end < 0 else end + 1
            if LINE_START.match(chunk, at):
                out.append(chunk[at:end])
            else:
                line = self.pending + chunk[at:end]
                m = WHOLE.search(line, len(self.pending))
                if m:
                    self.pending = line[:m.start()]
                    out.append(line[m.start():])
                else:
                    self.pending = b""
                    out.append(line)
            at = end
        return at


def _cut_lines(chunk: bytes, at: int) -> list[tuple[int, int]]:
    """The TIMELINE lines from `at` with another line inside: (where each starts, where the other line
    in it begins). The TIMELINE lines are searched for signs of one first, all at once."""
    joined = b"\n".join(TIMELINE.findall(chunk, at))
    hits = set()
    for mark in CUT_MARKS:
        p = joined.find(mark)
        while p >= 0:
            hits.add(joined.rfind(b"\n", 0, p) + 1)
            p = joined.find(mark, p + 1)
    cuts = []
    for h in sorted(hits):
        end = joined.find(b"\n", h)
        line = b"TIMELINE," + joined[h:len(joined) if end < 0 else end]
        inner = WHOLE.search(line, 9)
        if inner:
            at = chunk.find(line, at)
            cuts.append((at, at + inner.start()))
            at += len(line)
    return cuts


def lines(streams: Iterable[Readable]) -> Iterator[bytes]:
    """The lines of the streams, cut TIMELINE lines mended."""
    for stream in streams:
        mender, rest = Mender(), b""
        while block := stream.read(CHUNK):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            rest = block[cut:]
            yield from mender.mend(block[:cut]).splitlines()
        if rest:
            yield from mender.mend(rest).splitlines()


class Log:
    """A daemon log read as it is written: its runs, each with its own figures. Feed it whole lines."""

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.mender = Mender()

    @property
    def run(self) -> Run:
        if not self.runs:
            self.runs.append(Run())
        return self.runs[-1]

    def feed(self, chunk: bytes) -> None:
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
            for i, o in enumerate(TL_OFFSET.findall(_joined(timeline))):
                o = float(o)
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

    def report(self, which: str | int = "all") -> dict:
        return _report(self.select(which))


def _nth(data: bytes, needle: bytes, n: int) -> int:
    at = -1
    for _ in range(n + 1):
        at = data.find(needle, at + 1)
    return at


def _share(busy: float, wall: float) -> float | None:
    return min(1.0, busy / wall) if wall else None


def _report(runs: list[Run]) -> dict:
    """The figures of one run or of several: phases over all their values; shares by wall time, each
    GPU's over the runs it ran in, so no share exceeds 100%."""
    phases: dict[str, array] = {}
    for r in runs:
        for name, values in r.phases.items():
            phases.setdefault(name, array(VALUE)).extend(values)
    summary = {name: summarize(values) for name, values in sorted(phases.items())}
    gaps = array("d")
    per_gpu: dict[str, dict] = {}
    barrier_total = 0.0
    wall_total = gpu_wall = 0.0
    run_rows = []
    for i, r in enumerate(runs):
        wall = r.wall_ms or 0.0
        wall_total += wall
        gaps.extend(r.gaps())
        gpus = r.gpus()
        barrier = float(sum(r.phases.get("barrier_wait_ms", ())))
        barrier_total += barrier
        held = sum(d["held_ms"] for d in gpus.values()) or 1.0
        row_gpus = {}
        for g, d in gpus.items():
            busy = d["held_ms"] - barrier * d["held_ms"] / held  # barrier lines name no GPU: shared by held time
            acc = per_gpu.setdefault(g, {"busy_ms": 0.0, "timeline_ms": 0.0, "wall_ms": 0.0, "partitions": 0})
            acc["busy_ms"] += busy
            acc["timeline_ms"] += d["timeline_ms"]
            acc["wall_ms"] += wall
            acc["partitions"] += d["phases"]
            row_gpus[g] = {"gpu_phase_share": _share(busy, wall), "timeline_share": _share(d["timeline_ms"], wall)}
            gpu_wall += wall
        run_rows.append({
            "run": i + 1, "started": r.started, "first_ts": _iso(r.first_ts), "last_ts": _iso(r.last_ts),
            "epoch": _iso(r.epoch), "wall_ms": r.wall_ms, "jobs": r.jobs, "partitions": r.pinned + r.pageable,
            "pageable_share": r.pageable / (r.pinned + r.pageable) if r.pinned + r.pageable else None,
            "gpus": row_gpus, "gpu_phase_share": _mean_share(row_gpus, "gpu_phase_share"),
            "timeline_share": _mean_share(row_gpus, "timeline_share"),
        })
    gpus_out = {g: {"gpu_phase_share": _share(a["busy_ms"], a["wall_ms"]),
                    "timeline_share": _share(a["timeline_ms"], a["wall_ms"]),
                    "partitions": a["partitions"]} for g, a in sorted(per_gpu.items())}
    pinned, pageable = sum(r.pinned for r in runs), sum(r.pageable for r in runs)
    partitions = pinned + pageable
    synth = summary.get("synth_ms", {}).get("p50")
    gpu = (summary.get("gpu_total_ms") or summary.get("gpu_ms") or {}).get("p50")
    mutex_wait = summary.get("mutex_wait_ms", {})
    barrier_s = summary.get("barrier_wait_ms", {})
    gap_s = summarize(gaps) if gaps else None
    return {
        "runs": run_rows,
        "phases": summary,
        "gpu_phase_share": _share(sum(a["busy_ms"] for a in per_gpu.values()), gpu_wall),
        "gpu_phase_share_is": PHASE_SHARE,
        "timeline_share": _share(sum(a["timeline_ms"] for a in per_gpu.values()), gpu_wall),
        "gpus": gpus_out,
        "wall_ms": wall_total or None,
        "jobs": sum(r.jobs for r in runs),
        "partitions": partitions,
        "pageable_share": pageable / partitions if partitions else None,
        "synth_to_gpu_ratio": synth / gpu if synth and gpu else None,
        "starved": {
            "mutex_wait_p50_ms": mutex_wait.get("p50"),
            "barrier_wait_nonzero": sum(1 for v in phases.get("barrier_wait_ms", ()) if v > 0),
            "barrier_wait_p95_ms": barrier_s.get("p95"),
            "gap_between_partitions_ms": gap_s,
            "likely": bool(mutex_wait and mutex_wait["p50"] is not None and mutex_wait["p50"] < 1 and gap_s
                           and gap_s["p50"] > 0 and (gpu is None or gap_s["p50"] > 0.1 * gpu)),
        },
        "lines": sum(r.lines for r in runs),
        "skipped_lines": sum(r.skipped_lines for r in runs),
    }


def _mean_share(gpus: dict[str, dict], key: str) -> float | None:
    values = [d[key] for d in gpus.values() if d[key] is not None]
    return sum(values) / len(values) if values else None


def _iso(t: datetime | None) -> str | None:
    return t.isoformat().replace("+00:00", "Z") if t else None


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
    """count, p50 (the median), nearest-rank p95 and max. The values are counted, not sorted: a phase
    has few distinct values (whole ms, mostly), so millions of them take kilobytes, not a list."""
    counts = sorted(Counter(values).items())
    n = sum(c for _, c in counts)
    if not n:
        return {"count": 0, "p50": None, "p95": None, "max": None}
    # the two middle values (one when n is odd), the nearest-rank p95, the max
    ranks = [(n - 1) // 2, n // 2, min(n - 1, max(0, -(-95 * n // 100) - 1)), n - 1]
    picked, seen, i = [], 0, 0
    for rank in ranks:  # ascending
        while seen + counts[i][1] <= rank:
            seen += counts[i][1]
            i += 1
        picked.append(counts[i][0])
    if isinstance(values, array) and values.typecode == VALUE:  # 12.3 comes back from float32 as 12.30000019
        picked = [float(f"{v:.7g}") for v in picked]
    low, high, p95, top = picked
    return {"count": n, "p50": (low + high) / 2, "p95": p95, "max": top}


CHUNK = 8 << 20


class Readable(Protocol):
    """A binary stream, or a byte range of a file (_Range)."""

    def read(self, n: int = -1, /) -> bytes: ...


def parse(streams: Iterable[Readable]) -> Log:
    """Feeds every stream (binary), in chunks of whole lines, into one Log."""
    log = Log()
    for stream in streams:
        rest = b""
        while block := stream.read(CHUNK):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut:
                log.feed(block[:cut])
                rest = block[cut:]
            else:
                rest = block
        if rest:
            log.feed(rest)
    return log.finish()


PARALLEL_MIN = 64 << 20  # below this a second process costs more than it saves


def _parse_range(path: str, start: int, end: int) -> tuple[Log, list[list[tuple[str, int]]], str]:
    """Parses bytes [start, end) of `path` in a worker process. The values go back through a spill file,
    not the result pipe: pickling them would hold them twice on each side."""
    import tempfile

    global CHUNK
    CHUNK = 2 << 20  # two of these run at once: smaller chunks, less memory in flight
    with open(path, "rb") as f:
        log = parse([_Range(f, start, end)])
    fd, spill = tempfile.mkstemp(prefix="swapctl-timings-")
    counts = []
    with os.fdopen(fd, "wb") as out:
        for run in log.runs:
            counts.append([(name, len(values)) for name, values in run.phases.items()])
            for values in run.phases.values():
                values.tofile(out)
            run.phases = {}
    return log, counts, spill


def _cuts(path: str, parts: int) -> list[int]:
    """Byte offsets splitting the file into `parts` pieces, each at the start of a TIMELINE line: the line
    before it is whole then (Rust's stderr lock), so no cut TIMELINE line is split between pieces."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for i in range(1, parts):
            f.seek(max(size * i // parts, cuts[-1]))
            f.readline()
            while (line := f.readline()) and not line.startswith(b"TIMELINE,"):
                pass
            cuts.append(min(f.tell() - len(line), size))
    cuts.append(size)
    return sorted(set(cuts))


def parse_files(paths: Iterable[str], workers: int | None = None) -> Log:
    """Like parse(), reading each large file in pieces on all cores and merging them in order."""
    workers = workers or os.cpu_count() or 1
    total = Log()
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
                    for run, run_counts in zip(part.runs, counts, strict=False):
                        for name, n in run_counts:  # read straight into the arrays they extend
                            run.phases.setdefault(name, array(VALUE)).fromfile(f, n)
            finally:
                os.unlink(spill)
            total.merge(part)
    return total


SHARES = ("gpu_phase_share", "timeline_share")


def compare(before: dict, after: dict) -> dict:
    """Each phase's p50 before and after, with the change in %; the shares before and after."""
    rows = {}
    for name in sorted(set(before["phases"]) | set(after["phases"])):
        b = before["phases"].get(name, {}).get("p50")
        a = after["phases"].get(name, {}).get("p50")
        rows[name] = {"before_p50": b, "after_p50": a,
                      "change_pct": (a - b) / b * 100 if a is not None and b else None}
    gpu_busy = {g: {"before": (before.get("gpu_busy") or {}).get(g, {}).get("busy_mean"),
                    "after": (after.get("gpu_busy") or {}).get(g, {}).get("busy_mean")}
                for g in sorted(set(before.get("gpu_busy") or {}) | set(after.get("gpu_busy") or {}))}
    return {"phases": rows, **{k: {"before": before[k], "after": after[k]} for k in SHARES}, "gpu_busy": gpu_busy}


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


def release_segments(journal: Iterable[JournalEntry], size: int) -> list[tuple[str, int, int]]:
    """(release, first byte, end byte) of the daemon log that each release wrote, from the journal's log
    offsets (each start recorded there); what came before the first is labelled by the release it replaced."""
    marks = starts(journal)
    segments = []
    if marks and marks[0].offset > 0:
        segments.append(((marks[0].before or "before")[:12], 0, marks[0].offset))
    for i, mark in enumerate(marks):
        end = marks[i + 1].offset if i + 1 < len(marks) else size
        if mark.offset < end <= size:  # a log truncated since leaves offsets that no longer fit: skipped
            segments.append((mark.release, mark.offset, end))
    return segments


def by_release(path: str, journal: Iterable[JournalEntry]) -> list[dict]:
    """One report per release, each from the part of the log it wrote."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return [{"release": release, "from_byte": start, "to_byte": end,
                 "report": parse([_Range(f, start, end)]).report()}
                for release, start, end in release_segments(journal, size)]
