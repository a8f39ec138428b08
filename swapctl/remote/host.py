"""The host interface and its local implementation (swapctl run on the GPU box itself)."""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import RemoteCommandFailed, RemoteOutputTooLarge, RemoteTimeout
from .cmd import Cmd

LineSink = Callable[[str], None]
Progress = Callable[[int], None]  # bytes done so far


@dataclass(frozen=True)
class Result:
    cmd: Cmd
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Host(ABC):
    """A machine swapctl works on. Commands are `Cmd`s; every call has a deadline."""

    name: str

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float = 120, check: bool = True,
            hint: str = "", max_output: int | None = None) -> Result:
        """Runs `cmd` to completion; raises RemoteCommandFailed on a non-zero exit when `check`, and
        RemoteOutputTooLarge past `max_output` bytes of stdout (MAX_OUTPUT), lines cut to MAX_LINE."""
        lines = _Lines(None, self._too_large(cmd), max_output or MAX_OUTPUT)
        code, err = self.stream_bytes(cmd, lines.feed, stdin=stdin, timeout=timeout)
        result = Result(cmd, code, lines.finish(), err.decode("utf-8", "replace"))
        if check and not result.ok:
            tail = (result.stderr or result.stdout)[-2000:]
            raise RemoteCommandFailed(self.name, str(cmd), result.exit_code, tail, hint)
        return result

    def shown(self, cmd: Cmd) -> str:
        """`cmd` as a person should see it run on this host (secrets masked)."""
        return str(cmd)

    def stream(self, cmd: Cmd, on_line: LineSink, *, stdin: bytes | None = None, timeout: float = 120) -> Result:
        """Runs `cmd`, handing each stdout line to `on_line` as it arrives (cut to MAX_LINE); the Result
        keeps at most MAX_OUTPUT bytes of it, and never raises for more: a swap streams to its end."""
        lines = _Lines(on_line)
        # a swap past its deadline is left to finish alone, as when its connection drops: cut between its
        # stop and its start, it would leave the host without a daemon
        code, err = self.stream_bytes(cmd, lines.feed, stdin=stdin, timeout=timeout, end_late=False)
        return Result(cmd, code, lines.finish(), err.decode("utf-8", "replace"))

    def _too_large(self, cmd: Cmd) -> Callable[[int], RemoteOutputTooLarge]:
        return lambda cap: RemoteOutputTooLarge(
            f"`{cmd}` sent more than {cap >> 20} MiB, more than swapctl reads back; a file it reads on the host "
            f"(a manifest, the journal) has grown past any real size: look at it", host=self.name)

    @abstractmethod
    def stream_bytes(self, cmd: Cmd, on_data: Callable[[bytes], None], *, stdin: bytes | None = None,
                     timeout: float = 120, end_late: bool = True) -> tuple[int, bytes]:
        """Runs `cmd`, handing its stdout to `on_data` as raw bytes; returns (exit code, stderr). Past its
        deadline it raises RemoteTimeout, and with `end_late` the command and what it started (its process
        group; on SSH its session) are killed on the host first: nobody reads them any more."""

    def send(self, cmd: Cmd, chunks: Iterable[bytes], *, timeout: float = 120) -> Result:
        """Runs `cmd` with `chunks` streamed to its stdin; `timeout` bounds any stall and the wait at the end."""
        return self.prepare(cmd).send(chunks, timeout=timeout)

    @abstractmethod
    def prepare(self, cmd: Cmd) -> Prepared:
        """Starts `cmd` now, its stdin waiting for Prepared.send: the host's shell start-up (a .bashrc) is
        paid while other work goes on. A command started before it may act must wait for its input to
        say so, as RECEIVE waits for GO."""

    @abstractmethod
    def put(self, local: BinaryIO, remote_path: str, size: int, progress: Progress | None = None,
            offset: int = 0) -> None:
        """Writes a local stream to `remote_path` (a temporary name: the caller renames it). With `offset`,
        appends to the `offset` bytes already there; `local` is positioned at `offset` by the caller."""

    @abstractmethod
    def hold(self, cmd: Cmd, timeout: float = 30) -> Held:
        """Starts `cmd` and keeps it running until the returned handle is closed or the connection drops.

        Its first stdout line is returned in `Held.first_line` (a lock's "got it" or "held by")."""

    def close(self) -> None:  # noqa: B027 (a host with no connection has nothing to close)
        pass

    def _late(self, cmd: Cmd, timeout: float) -> RemoteTimeout:
        return RemoteTimeout(f"`{cmd}` did not finish within {timeout:.0f} s", host=self.name)

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Held:
    first_line: str
    closer: Callable[[], None]
    writer: Callable[[bytes], None] | None = None  # writes to the held command's stdin (a heartbeat)

    def close(self) -> None:
        self.closer()

    def write(self, data: bytes) -> None:
        """Sends `data` to the held command's stdin; raises OSError (or the transport's error) once it is gone."""
        if self.writer is None:
            raise OSError("this held command takes no input")
        self.writer(data)


class Prepared:
    """A started command waiting for its stdin; used once by send(), or ended unused by close()."""

    def __init__(self, cmd: Cmd, send: Callable[[Iterable[bytes], float], Result], close: Callable[[], None]):
        self.cmd, self._send, self._close, self.used = cmd, send, close, False

    def send(self, chunks: Iterable[bytes], *, timeout: float = 120) -> Result:
        """Streams `chunks` to its stdin, then waits for it to end; as Host.send."""
        self.used = True
        return self._send(chunks, timeout)

    def close(self) -> None:
        """Ends it unused: EOF on its stdin."""
        if not self.used:
            self.used = True
            self._close()


# What swapctl reads back from a host is bounded: a hostile or broken host can send a line or an output of
# any size. A process's argv and environment together are at most 6 MiB on Linux (ARG_MAX's ceiling), 8 MiB
# as base64: no line swapctl needs is longer than MAX_LINE. Longer lines are cut, the rest counted, not kept.
MAX_LINE = 10 << 20
MAX_OUTPUT = 256 << 20  # bytes of stdout kept for a Result: run() raises past it, stream() stops keeping
MAX_STDERR = 1 << 20  # the last bytes of stderr kept: an error shows only its tail


def keep_tail(buf: bytearray, data: bytes, cap: int = MAX_STDERR) -> None:
    """Appends `data` to `buf`, keeping only its last `cap` bytes (in amortized linear time)."""
    buf += data
    if len(buf) > 2 * cap:
        del buf[:-cap]


class _Lines:
    """Splits a byte stream into text lines as data arrives. Each byte is scanned for a newline once (the
    pending line is never split again: that was quadratic on a long line), a line is cut at MAX_LINE, and
    at most `max_output` bytes are kept; past that `too_large` is raised, or without it nothing more kept."""

    def __init__(self, sink: LineSink | None, too_large: Callable[[int], Exception] | None = None,
                 max_output: int = MAX_OUTPUT):
        self.sink, self.too_large, self.max_output = sink, too_large, max_output
        self.line, self.cut = bytearray(), 0
        self.kept, self.dropped = bytearray(), 0

    def feed(self, data: bytes) -> None:
        view, start = memoryview(data), 0
        while (nl := data.find(b"\n", start)) >= 0:
            self._add(view[start:nl])
            self._end(newline=True)
            start = nl + 1
        if start < len(data):
            self._add(view[start:])

    def _add(self, piece: memoryview) -> None:
        room = MAX_LINE - len(self.line)
        if len(piece) > room:
            self.cut += len(piece) - room
            piece = piece[:room]
        self.line += piece

    def _end(self, newline: bool) -> None:
        if self.sink is not None:
            text = self.line.decode("utf-8", "replace")
            self.sink(f"{text} [swapctl: {self.cut} more bytes of this line not read]" if self.cut else text)
        size = len(self.line) + newline
        if len(self.kept) + size <= self.max_output:
            self.kept += self.line
            if newline:
                self.kept += b"\n"
        else:
            self.dropped += size
            if self.too_large:
                raise self.too_large(self.max_output)
        self.line.clear()
        self.cut = 0

    def finish(self) -> str:
        if self.line or self.cut:
            self._end(newline=False)
        return self.kept.decode("utf-8", "replace")


class LocalHost(Host):
    """Runs the same commands on this machine, through `sh -c`, without SSH."""

    def __init__(self, name: str = "local"):
        self.name = name

    def _popen(self, cmd: Cmd, stdin: bool) -> subprocess.Popen[bytes]:
        """`cmd` started, its named inputs already on its stdin (kept open with `stdin`)."""
        feed = cmd.feed()
        proc = subprocess.Popen(
            ["sh", "-c", cmd.render()],
            stdin=subprocess.PIPE if stdin or feed else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        if feed:
            assert proc.stdin
            proc.stdin.write(feed)
            proc.stdin.flush()
            if not stdin:
                proc.stdin.close()
        return proc

    def _killed_late(self, proc: subprocess.Popen[bytes], cmd: Cmd, timeout: float,
                     end_late: bool = True) -> RemoteTimeout:
        """Past its deadline: the command and everything it started are killed (it leads its group),
        unless it is to finish alone (`end_late` false)."""
        if end_late:
            os.killpg(proc.pid, 9)
            proc.wait()
        return self._late(cmd, timeout)

    def stream_bytes(self, cmd: Cmd, on_data: Callable[[bytes], None], *, stdin: bytes | None = None,
                     timeout: float = 120, end_late: bool = True) -> tuple[int, bytes]:
        proc = self._popen(cmd, stdin is not None)
        if stdin is not None and proc.stdin:
            assert proc.stdin
            proc.stdin.write(stdin)
            proc.stdin.close()
        err = bytearray()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, on_data)  # type: ignore[arg-type]
            sel.register(proc.stderr, selectors.EVENT_READ, lambda d: keep_tail(err, d))  # type: ignore[arg-type]
            try:
                while sel.get_map():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise self._killed_late(proc, cmd, timeout, end_late)
                    for key, _ in sel.select(remaining):
                        data = os.read(key.fd, 65536)
                        if data:
                            key.data(data)
                        else:
                            sel.unregister(key.fileobj)
            except RemoteTimeout:
                raise
            except BaseException:  # too much output, or Ctrl-C: the command does not run on unread
                if proc.poll() is None:
                    os.killpg(proc.pid, 9)
                    proc.wait()
                raise
        try:  # its output closed, yet it may go on running
            return proc.wait(timeout=max(deadline - time.monotonic(), 0)), bytes(err)
        except subprocess.TimeoutExpired:
            raise self._killed_late(proc, cmd, timeout, end_late) from None

    def prepare(self, cmd: Cmd) -> Prepared:
        proc = self._popen(cmd, stdin=True)
        assert proc.stdin

        def send(chunks: Iterable[bytes], timeout: float) -> Result:
            assert proc.stdin
            try:
                for chunk in chunks:
                    proc.stdin.write(chunk)
            except BrokenPipeError:
                pass  # it stopped reading: its exit code and output say why
            finally:
                close()
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise self._killed_late(proc, cmd, timeout) from None
            return Result(cmd, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

        def close() -> None:
            try:
                if proc.stdin:
                    proc.stdin.close()
            except BrokenPipeError:
                pass
            proc.stdin = None  # closed: communicate() would flush it and fail

        return Prepared(cmd, send, close)

    def put(self, local: BinaryIO, remote_path: str, size: int, progress: Progress | None = None,
            offset: int = 0) -> None:
        done = offset
        with open(remote_path, "ab" if offset else "wb") as f:
            while chunk := local.read(1 << 20):
                f.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done)

    def hold(self, cmd: Cmd, timeout: float = 30) -> Held:
        proc = self._popen(cmd, stdin=True)
        assert proc.stdout
        first = proc.stdout.readline(MAX_LINE).decode("utf-8", "replace").rstrip("\n")

        def closer() -> None:
            if proc.stdin:
                proc.stdin.close()  # EOF: the held command ends, as when a connection drops
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

        def writer(data: bytes) -> None:
            assert proc.stdin
            proc.stdin.write(data)
            proc.stdin.flush()

        if proc.poll() is not None:
            closer()
        return Held(first, closer, writer)

