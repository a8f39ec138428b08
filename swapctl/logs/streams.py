"""What the log parsers read: a binary stream, or a byte range of a file (a release's part of a log)."""

from __future__ import annotations

from typing import IO, Protocol


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
