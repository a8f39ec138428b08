"""cuzk's log format, the first LogFormat (../format.py): its lines (patterns), TIMELINE lines cut by
other lines put back (mender), the C++ calls given to their GPU (calls), the GPU phases (timeline),
one daemon run (run) and a log of several (log), their figures (report), and files read on every core
(files)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..format import LogFormat, Readable
from . import files, mender
from .log import Log


class CuzkFormat:
    """The cuzk daemon's log: tracing lines on stdout, C++ and TIMELINE lines on stderr, in one file."""

    name = "cuzk"

    def parse(self, streams: Iterable[Readable]) -> Log:
        """Every stream (binary), read in one pass into one log."""
        return files.parse(streams)

    def parse_files(self, paths: Iterable[str], workers: int | None = None) -> Log:
        """Like parse(), large files read in pieces on `workers` cores (all of them by default)."""
        return files.parse_files(paths, workers)

    def lines(self, streams: Iterable[Readable]) -> Iterator[bytes]:
        """The lines of the streams, cut TIMELINE lines mended."""
        return mender.lines(streams)


FORMAT: LogFormat = CuzkFormat()
