"""Getting a binary onto a host fast and intact.

Methods, best first: nothing (the host has the release), a zstd patch against a release the host has
(`--patch-from`: a rebuilt binary costs kilobytes), a zstd stream whose level follows the link, or
pipelined SFTP when the host has no zstd. Every method writes to one temporary name per release, so an
interrupted upload resumes from the bytes already there, and the host checks the sha256 before the
file becomes a release (host/swap/install.sh, host/swap/receive.sh).
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import zstandard

from ..errors import Refused
from ..facts.journal_entry import Upload
from ..host import scripts
from ..remote import Cmd, Host, Piece, Prepared
from .plan import Base, Method
from .words import InstallReport, Word, parse_install

__all__ = ["CACHE_KEEP", "CHUNK", "PIECE", "Base", "Cache", "Frames", "Method", "Patch", "Uploader"]

CHUNK = 4 << 20  # one zstd frame per chunk: the level can change between frames
# The levels the stream moves along (0 would mean zstd's default, 3). Negative levels trade ratio for
# speed: where the link outruns the compressor (a LAN, or loopback on a busy 2-core machine) they win.
LADDER = (-7, -5, -3, -1, 1, 2, 3, 4, 6, 9, 12)
DEPTH = 4  # compressed chunks waiting for the link
PIECE = 256 << 10  # what the wire is handed at a time, and the bar moves by
EARLY_FRAMES = 32  # made before the upload begins: at most 128 MiB of the binary, compressed, in memory
CACHE_KEEP = 6  # binaries kept locally as the old side of future patches

Progress = Callable[[int, int], None]  # (source bytes done, bytes on the wire)


class Cache:
    """Binaries this machine uploaded, by sha256 ($XDG_CACHE_HOME/swapctl/binaries): patches need the
    old binary on both sides."""

    def __init__(self, root: Path | None = None):
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        self.root = root or Path(base) / "swapctl" / "binaries"

    def get(self, sha256: str) -> Path | None:
        path = self.root / sha256
        return path if path.is_file() else None

    def add(self, path: str, sha256: str) -> None:
        """Keeps a copy (a hard link where it can); the oldest beyond CACHE_KEEP go."""
        target = self.root / sha256
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            if target.exists():
                os.utime(target)
            else:
                fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".add-")
                os.close(fd)
                shutil.copyfile(path, tmp)
                os.replace(tmp, target)
            kept = sorted((p for p in self.root.iterdir() if not p.name.startswith(".")),
                          key=lambda p: p.stat().st_mtime, reverse=True)
            for old in kept[CACHE_KEEP:]:
                old.unlink(missing_ok=True)
        except OSError:
            pass  # a cache: a full local disk costs the next upload its patch, nothing else


class Frames:
    """A binary from `offset` on as independent zstd frames, compressed by a worker thread.

    The worker can start before the upload (during the preflight, on a CPU that mostly waits for the
    host then): until the upload begins it compresses at `level` and keeps up to EARLY_FRAMES frames.
    From then on the level adapts as zstd's --adapt does: when frames made during the upload pile up
    the link is the bottleneck, so spend more CPU on a smaller stream; when the link waits for frames,
    compress faster."""

    def __init__(self, path: str, offset: int = 0, level: int = 1):
        self.path, self.offset, self.level = path, offset, level
        self.out: queue.Queue[tuple[int, bytes | BaseException]] = queue.Queue(EARLY_FRAMES)
        self.sending = threading.Event()
        self.stop = threading.Event()
        self.early = 0  # frames made before the upload began and not sent yet
        self.counting = threading.Lock()  # `early` changes on both threads
        self.worker = threading.Thread(target=self._work, name="zstd", daemon=True)
        self.worker.start()

    def _offer(self, item: tuple[int, bytes | BaseException]) -> None:
        while not self.stop.is_set():
            try:
                return self.out.put(item, timeout=0.2)
            except queue.Full:
                continue

    def _work(self) -> None:
        step = LADDER.index(self.level)
        compressors: dict[int, zstandard.ZstdCompressor] = {}
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                while not self.stop.is_set() and (chunk := f.read(CHUNK)):
                    if self.sending.is_set():
                        waiting = self.out.qsize() - self.early
                        if waiting >= DEPTH - 1:
                            step = min(step + 1, len(LADDER) - 1)
                        elif waiting <= 0:
                            step = max(step - 1, 0)
                    else:
                        with self.counting:
                            self.early += 1
                    lvl = LADDER[step]
                    cz = compressors.setdefault(lvl, zstandard.ZstdCompressor(level=lvl))
                    self._offer((len(chunk), cz.compress(chunk)))
                    if self.sending.is_set():
                        self._wait_below(DEPTH)
        except BaseException as exc:  # noqa: BLE001 (handed to the consumer)
            self._offer((-1, exc))
            return
        self._offer((0, b""))

    def _wait_below(self, depth: int) -> None:
        """Backpressure once sending: no more than `depth` frames made during the upload wait."""
        while not self.stop.is_set() and self.out.qsize() - self.early >= depth:
            time.sleep(0.002)

    def send(self, progress: Callable[[int], None]) -> Iterator[bytes]:
        """The frames, in order, for the wire, in pieces of PIECE; `progress` gets each piece's share of its
        frame's source bytes once the piece is sent (the shares of a frame add up to its source bytes)."""
        self.sending.set()
        try:
            while True:
                n, data = self.out.get()
                with self.counting:
                    self.early = max(0, self.early - 1)
                if isinstance(data, BaseException):  # n < 0: the worker failed
                    raise data
                if n == 0:
                    return
                # the wire takes a frame in pieces, and the bar moves with each: a 4 MiB frame is 2 s of a
                # 16 Mbit/s link, too long for a bar without a rate (issue 30's test caught it under load).
                # A piece's share of the frame's source bytes is its share of the frame: exact at its end
                # (a zstd frame is never empty: it has a header)
                for at in range(0, len(data), PIECE):
                    end = min(len(data), at + PIECE)
                    yield data[at:end]
                    progress(n * end // len(data) - n * at // len(data))
        finally:
            self.close()

    def close(self) -> None:
        self.stop.set()
        self.worker.join()


class Patch:
    """A zstd patch that turns a cached base into `new` (`zstd --patch-from`, long-distance matching).

    Made once per (base, binary) in this process: the hosts of a fleet that run the same base read one
    patch. Its process starts at once and a thread collects what it writes, so the patch is made while
    the preflight runs, and a host that comes later finds it made."""

    _made: dict[tuple[Path, str], Patch] = {}
    _guard = threading.Lock()

    @classmethod
    def of(cls, base: Base, new: str) -> Patch:
        """The patch from `base` to `new`, started now or shared; each caller calls release() once."""
        with cls._guard:
            p = cls._made.get((base.local_path, new))
            if p is None or p.broken:
                p = cls._made[(base.local_path, new)] = cls(base.local_path, new)
            p.users += 1
            return p

    @staticmethod
    def possible() -> bool:
        return shutil.which("zstd") is not None

    def __init__(self, old: Path, new: str):
        self.old, self.new = old, new
        self.users = 0
        self.parts: list[bytes] = []  # the patch so far: small for a rebuilt binary
        self.done, self.broken, self.error = False, False, ""
        self.cond = threading.Condition()
        # level 1, one thread: the patch is as small as at level 3 (the old binary matches nearly all of
        # it), in 0.42 s instead of 0.68 s for 75 MB, and in 160 MB of memory instead of 230 MB
        self.proc = subprocess.Popen(["zstd", "-q", "-c", "-1", "--single-thread", f"--patch-from={old}", new],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        threading.Thread(target=self._collect, name="zstd-patch", daemon=True).start()

    def _collect(self) -> None:
        assert self.proc.stdout and self.proc.stderr
        with self.proc.stdout, self.proc.stderr:
            while data := self.proc.stdout.read(1 << 20):
                with self.cond:
                    self.parts.append(data)
                    self.cond.notify_all()
            err = self.proc.stderr.read().decode("utf-8", "replace").strip()
        failed = self.proc.wait() != 0
        with self.cond:
            self.done, self.error = True, (err or f"exit {self.proc.returncode}") if failed else ""
            self.broken = self.broken or failed
            self.cond.notify_all()

    def chunks(self) -> Iterator[bytes]:
        """The patch from its start, as it is made."""
        i = 0
        while True:
            with self.cond:
                self.cond.wait_for(lambda: i < len(self.parts) or self.done)  # noqa: B023 (called at once)
                if i == len(self.parts):
                    if self.error:
                        raise OSError(f"zstd --patch-from failed: {self.error}")
                    return
                data = self.parts[i]
            i += 1
            yield data

    def release(self) -> None:
        """One reader less; the last one stops a patch still being made, which nobody will read."""
        with Patch._guard, self.cond:
            self.users -= 1
            if self.users or self.done:
                return
            self.broken = True
        self.proc.kill()


class Uploader:
    """Sends one local binary to a temporary name on one host and installs it as a release there."""

    def __init__(self, host: Host, path: str, size: int, tmp: str, install: Mapping[str, Piece],
                 progress: Progress):
        """`install`: the release's dir, name, sha and manifest, as host/swap/install.sh takes them."""
        self.host, self.path, self.size, self.tmp = host, path, size, tmp
        self.install, self.progress = dict(install), progress
        self.wire = 0
        self.ready: Prepared | None = None  # the first receive, started ahead

    def first_cmd(self, method: Method) -> Cmd:
        """The host's side of what `method` sends: a receive (zstd) or an install after the SFTP put."""
        if method.kind == "patch" and method.base:
            return self.receive_cmd(0, method.base.remote_path)
        return self.receive_cmd(method.offset, "") if method.kind == "zstd" else self.install_cmd()

    def prepare(self, method: Method) -> Prepared | None:
        """Starts, now, the host side of the receive that run(method) begins with: its shell starts while
        the deploy takes the lock. It waits for GO, so it acts only once the upload does."""
        return self.host.prepare(self.first_cmd(method)) if method.kind in ("patch", "zstd") else None

    def run(self, method: Method, made: Patch | None = None, early: Frames | None = None,
            ready: Prepared | None = None) -> tuple[Upload, InstallReport]:
        """Sends the binary by `method` and installs it; returns how it went and what the host's install
        said. A patch (`made`, or made now against the method's base) that does not reproduce the binary is
        retried as a full zstd upload. `made` and `early` (frames compressed during the preflight) and
        `ready` (from prepare()) are released here, used or not."""
        self.ready = ready
        try:
            return self._run(method, made, early)
        finally:
            if made:
                made.release()
            if early:
                early.close()
            if self.ready:
                self.ready.close()

    def _run(self, method: Method, made: Patch | None, early: Frames | None) -> tuple[Upload, InstallReport]:
        started = time.monotonic()
        offset, base = method.offset, method.base
        self.progress(offset, 0)  # the upload has begun: a bar from its first byte, not from its first frame
        if method.kind == "patch" and base:
            patch = made or Patch.of(base, self.path)
            try:
                report = self._receive(patch.chunks(), 0, base.remote_path)
            finally:
                if patch is not made:
                    patch.release()
            if not report.damaged:
                self.progress(self.size, self.wire)
                return Upload("patch", self.wire, time.monotonic() - started, base=base.id), report
            offset = 0  # the host's copy of the base is not what this machine has: send it all
        if method.kind != "sftp":
            done = offset

            def step(n: int) -> None:
                nonlocal done
                done += n
                self.progress(done, self.wire)

            if early is None or early.offset != offset or early.path != self.path:
                early = Frames(self.path, offset)
            try:
                report = self._receive(early.send(step), offset, "")
            finally:
                early.close()
            return Upload("zstd", self.wire, time.monotonic() - started, resumed_from=offset), report

        def sftp_step(done: int) -> None:
            self.wire = done - offset
            self.progress(done, self.wire)

        with open(self.path, "rb") as f:
            f.seek(offset)
            try:
                self.host.put(f, self.tmp, self.size, sftp_step, offset=offset)
            except Refused:
                if (full := self._disk_full()) is None:
                    raise
                return Upload("sftp", self.wire, time.monotonic() - started, resumed_from=offset), full
        report = parse_install(self.host.run(self.install_cmd()).stdout.splitlines())
        return Upload("sftp", self.wire, time.monotonic() - started, resumed_from=offset), report

    def install_cmd(self) -> Cmd:
        """What installs a file sent by SFTP (host/swap/install.sh)."""
        return scripts.command_of("install.sh", {"tmp": self.tmp, **self.install})

    def _disk_full(self) -> InstallReport | None:
        """After a failed write: NOSPACE with the KiB free (the partial file removed) when the disk is full."""
        free = self.host.run(scripts.command("free_kib.sh", path=self.tmp, label="df"), check=False).stdout.strip()
        if free.isdecimal() and int(free) * 1024 < self.size:
            self.host.run(Cmd("rm", "-f", "--", self.tmp), check=False)
            return InstallReport(failure=Word.NOSPACE, detail=free)
        return None

    def _counted(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.wire += len(chunk)
            yield chunk

    def receive_cmd(self, offset: int, base: str) -> Cmd:
        return scripts.command_of("receive.sh", {"tmp": self.tmp, "off": offset, "base": base, "size": self.size,
                                                 **self.install})

    def _receive(self, chunks: Iterator[bytes], offset: int, base: str) -> InstallReport:
        cmd = self.receive_cmd(offset, base)
        ready, self.ready = self.ready, None
        if ready is None or ready.cmd != cmd:
            if ready:
                ready.close()
            ready = self.host.prepare(cmd)
        result = ready.send(itertools.chain([b"GO\n"], self._counted(chunks)), timeout=600)
        if result.exit_code != 0:
            return InstallReport(failure=Word.BROKEN, detail=f"exit {result.exit_code}: {result.stderr.strip()[-200:]}")
        report = parse_install(result.stdout.splitlines())
        if report.failure is Word.OFFSET:
            raise Refused(f"the partial upload {self.tmp} changed while resuming ({report.detail} bytes, "
                          f"expected {offset}); run the deploy again", host=self.host.name)
        return report
