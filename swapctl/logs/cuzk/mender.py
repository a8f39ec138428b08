"""TIMELINE lines cut by other lines, put back together. `eprintln!` writes a TIMELINE line in 9 pieces;
tracing (stdout) and C++ (glibc's stderr) lines are single writes that can land between them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..streams import Readable
from .patterns import CUT_MARKS, LINE_START, TIMELINE, WHOLE

CHUNK = 8 << 20  # bytes read at a time


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
        for start, inner in cut_lines(chunk, at):
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


def cut_lines(chunk: bytes, at: int) -> list[tuple[int, int]]:
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


def blocks(stream: Readable, size: int) -> Iterator[bytes]:
    """The stream in blocks of whole lines (about `size` bytes each; the last may lack its newline)."""
    rest = b""
    while block := stream.read(size):
        block = rest + block
        cut = block.rfind(b"\n") + 1
        if cut:
            yield block[:cut]
            rest = block[cut:]
        else:
            rest = block
    if rest:
        yield rest


def lines(streams: Iterable[Readable]) -> Iterator[bytes]:
    """The lines of the streams, cut TIMELINE lines mended."""
    for stream in streams:
        mender = Mender()
        for block in blocks(stream, CHUNK):
            yield from mender.mend(block).splitlines()
