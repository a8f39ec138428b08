"""What a daemon's log format gives the rest of swapctl: a parser of its runs, the same on every core
for a large file, and its lines as written (mended where the daemon cuts them). cuzk's is the first
(`swapctl.logs.cuzk.FORMAT`); a second daemon's format is a package beside it implementing LogFormat."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, Protocol


class Readable(Protocol):
    """A binary stream, or a byte range of a file (ByteRange)."""

    def read(self, n: int = -1, /) -> bytes: ...


class ByteRange:
    """Bytes [start, end) of a file, read like a stream. Each read seeks to where this range left off, so
    ranges of one open file made together read their own bytes (a release's starts, read as one log: each
    range read from where the last one made had left the file, and a release started twice had the wrong
    proof count)."""

    def __init__(self, f: IO[bytes], start: int, end: int):
        self.f, self.at, self.left = f, start, end - start

    def read(self, n: int = -1, /) -> bytes:
        """Up to `n` bytes (all that are left with -1), never past the range's end."""
        n = self.left if n < 0 else min(n, self.left)
        if n <= 0:
            return b""
        self.f.seek(self.at)
        data = self.f.read(n)
        self.at += len(data)
        self.left -= len(data)
        return data


class DaemonLog(Protocol):
    """A parsed log: its daemon runs, and their figures."""

    @property
    def runs(self) -> Sequence[Any]: ...

    def report(self, which: str | int = "all") -> dict[str, Any]: ...


class LogFormat(Protocol):
    """One daemon's log format."""

    name: str

    def parse(self, streams: Iterable[Readable]) -> DaemonLog:
        """Every stream (binary), read in one pass into one log."""
        ...

    def parse_files(self, paths: Iterable[str], workers: int | None = None) -> DaemonLog:
        """Like parse(), large files read in pieces on `workers` cores (all of them by default)."""
        ...

    def lines(self, streams: Iterable[Readable]) -> Iterator[bytes]:
        """The lines of the streams, as the daemon meant them."""
        ...
