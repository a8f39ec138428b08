"""cuzk timing logs, parsed as they really are, in one streaming pass: the names the rest of swapctl
reads them by. The format itself lives in `swapctl.logs.cuzk` (one module per concern); this module
keeps the one place to import from, so a consumer does not follow the package's inner layout."""

from __future__ import annotations

from collections.abc import Iterable

from .cuzk import files
from .cuzk.figures import PHASE_SHARE, RunReport, RunRow, Summary, summarize
from .cuzk.files import ReleasePart, by_release, parse, release_segments
from .cuzk.log import Log
from .cuzk.mender import lines
from .cuzk.patterns import RESTART_MS, START, WHOLE
from .cuzk.run import GpuTime, Run
from .streams import ByteRange, Readable

PARALLEL_MIN = files.PARALLEL_MIN  # files this large are read in pieces on every core (tests set it lower)

__all__ = [
    "PARALLEL_MIN", "PHASE_SHARE", "RESTART_MS", "START", "WHOLE", "ByteRange", "GpuTime", "Log", "Readable",
    "ReleasePart", "Run", "RunReport", "RunRow", "Summary", "by_release", "lines", "parse", "parse_files",
    "release_segments", "summarize",
]


def parse_files(paths: Iterable[str], workers: int | None = None) -> Log:
    """Like parse(), reading each file of PARALLEL_MIN bytes or more in pieces on all cores and merging
    them in order."""
    return files.parse_files(paths, workers, PARALLEL_MIN)
