"""cuzk logs from streams and files: one pass, or a large file in pieces on every core; and the parts
of a log each release wrote."""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from ...facts.journal_entry import JournalEntry, starts
from ..streams import ByteRange, Readable
from .fields import VALUE
from .figures import RunReport
from .log import Log
from .mender import CHUNK, blocks

PARALLEL_MIN = 64 << 20  # below this a second process costs more than it saves
PART_CHUNK = 2 << 20  # two parts are read at once: smaller chunks, less memory in flight


def parse(streams: Iterable[Readable], chunk: int = CHUNK) -> Log:
    """Feeds every stream (binary), in chunks of whole lines, into one Log."""
    log = Log()
    for stream in streams:
        for block in blocks(stream, chunk):
            log.feed(block)
    return log.finish()


def _parse_range(path: str, start: int, end: int) -> tuple[Log, list[list[tuple[str, int]]], str]:
    """Parses bytes [start, end) of `path` in a worker process. The values go back through a spill file,
    not the result pipe: pickling them would hold them twice on each side."""
    import tempfile

    with open(path, "rb") as f:
        log = parse([ByteRange(f, start, end)], PART_CHUNK)
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


def parse_files(paths: Iterable[str], workers: int | None = None, parallel_min: int = PARALLEL_MIN) -> Log:
    """Like parse(), reading each file of `parallel_min` bytes or more in pieces on all cores and merging
    them in order."""
    workers = workers or os.cpu_count() or 1
    total = Log()
    for path in paths:
        if workers < 2 or os.path.getsize(path) < parallel_min:
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


@dataclass(frozen=True)
class ReleasePart:
    """The part of a daemon log one release wrote (bytes [from_byte, to_byte)), and its figures."""

    release: str
    from_byte: int
    to_byte: int
    report: RunReport


def by_release(path: str, journal: Iterable[JournalEntry]) -> list[ReleasePart]:
    """One report per release, each from the part of the log it wrote."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return [ReleasePart(release, start, end, parse([ByteRange(f, start, end)]).figures())
                for release, start, end in release_segments(journal, size)]
