"""What the host scripts report: the words they print (`WORD args...`) and one pure parser per script,
from lines to a frozen result. Tested on transcripts of real runs (tests/data/transcripts/)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum


class Word(StrEnum):
    """Every word a script starts a report line with."""

    # lock.sh
    LOCKED = "LOCKED"  # the deploy lock is ours until the channel closes
    HELD = "HELD"  # info: another deploy holds it
    SWAPPING = "SWAPPING"  # a swap cut off from its deploy still runs
    FAILED = "FAILED"  # why: lock.sh and swap.sh could not go on
    UNSAFE = "UNSAFE"  # dir owner mode: a state directory others may write to (lock.sh)
    # receive.sh, install.sh
    INSTALLED = "INSTALLED"
    MISMATCH = "MISMATCH"  # sha256: what arrived is not the binary
    MISSING = "MISSING"  # a shared library the release needs and the host lacks
    OFFSET = "OFFSET"  # bytes: the partial upload is not what the resume expected
    NOSPACE = "NOSPACE"  # free_kib: the disk filled up; the partial file is gone
    BROKEN = "BROKEN"  # why: the stream ended early or was damaged
    SHORT = "SHORT"  # bytes: the stream ended before the binary did
    # stop.sh, swap.sh
    KIDS = "KIDS"  # pids: the old daemon's descendants, waited for too
    SIGKILL = "SIGKILL"  # still running after the grace period
    STOPPED = "STOPPED"  # ms
    R = "R"  # ms avail_kib alive gpu_used: a memory reading
    DONE = "DONE"  # ms: memory is back
    TIMEOUT = "TIMEOUT"  # ms: memory did not come back
    STARTED = "STARTED"  # pid log_offset [invocation]: the unit's InvocationID, when it went through one
    LOG = "LOG"  # a line of the new daemon's log
    READY = "READY"
    EXITED = "EXITED"  # the new daemon exited while it was awaited
    WATCH = "WATCH"  # ms: ready, and watched that long more (ready_stable_s)
    ALIVE = "ALIVE"  # 0 or 1: whether it runs at the end
    NOTREADY = "NOTREADY"  # not ready, and swapctl listens: the host leaves the rollback to it

    @classmethod
    def of(cls, line: str) -> tuple[Word | None, str]:
        """A report line's word (None for a line that is not a report) and the rest of the line."""
        head, _, rest = line.partition(" ")
        try:
            return cls(head), rest
        except ValueError:
            return None, line


DAMAGED = (Word.MISMATCH, Word.BROKEN, Word.SHORT)


@dataclass(frozen=True)
class InstallReport:
    """What receive.sh or install.sh said about an upload."""

    installed: bool = False
    failure: Word | None = None  # one of MISMATCH NOSPACE BROKEN SHORT OFFSET, when it did not install
    detail: str = ""  # the failure's words: the sha256 that arrived, KiB free, why it broke, bytes there
    missing: tuple[str, ...] = ()  # shared libraries the release needs and the host lacks

    @property
    def damaged(self) -> bool:
        """The bytes on the host are not the binary (a patch on another base, a cut or corrupted stream)."""
        return self.failure in DAMAGED

    def summary(self) -> str:
        return f"{self.failure.value} {self.detail}".strip() if self.failure else "INSTALLED"


def parse_install(lines: Iterable[str]) -> InstallReport:
    """receive.sh's or install.sh's output as an InstallReport."""
    report = InstallReport()
    missing: list[str] = []
    for line in lines:
        word, rest = Word.of(line)
        if word is Word.INSTALLED:
            report = replace(report, installed=True)
        elif word is Word.MISSING:
            missing.append(rest.strip())
        elif word in (*DAMAGED, Word.NOSPACE, Word.OFFSET) and report.failure is None:
            report = replace(report, failure=word, detail=rest.strip())
    return replace(report, missing=tuple(missing))


@dataclass(frozen=True)
class LockReport:
    """What lock.sh said: its first line."""

    word: Word | None  # LOCKED HELD SWAPPING FAILED UNSAFE; None when it ended without a word
    detail: str = ""  # HELD: who holds it (JSON); FAILED: why


def parse_lock(first_line: str) -> LockReport:
    word, rest = Word.of(first_line)
    return LockReport(word, rest.strip() if word else first_line.strip())


@dataclass(frozen=True)
class Reading:
    """One memory reading of the memory wait."""

    ms: int
    avail_kib: int
    alive: tuple[int, ...]  # the old processes still alive
    gpu_used: str = ""  # nvidia-smi's index,mib;... when GPUs are watched

    @classmethod
    def parse(cls, rest: str) -> Reading:
        parts = rest.split()
        alive = tuple(int(p) for p in parts[2].split(",") if p.isdigit()) if len(parts) > 2 else ()  # or "-"
        return cls(int(parts[0]), int(parts[1]), alive, parts[3] if len(parts) > 3 else "")


@dataclass(frozen=True)
class SwapReport:
    """What swap.sh (or stop.sh) reported, with the seconds each step took as its lines arrived."""

    kids: tuple[int, ...] = ()  # the old daemon's descendants
    sigkill: bool = False
    stopped: bool = False
    stopped_ms: int | None = None  # the stop as the host timed it
    reading: Reading | None = None  # the last memory reading
    memory_ok: bool = False  # DONE; TIMEOUT leaves it False
    pid: int | None = None  # the started daemon
    offset: int = 0  # where its output begins in its log
    invocation: str = ""  # the unit's InvocationID for this start: its lines in the journal
    ready_seen: bool = False
    exited: bool = False  # EXITED: it exited while awaited
    watch_ms: int | None = None  # ready_stable_s, when it was watched after ready
    alive: bool = False  # ALIVE 1: it runs at the end
    host_decides: bool = False  # NOTREADY: not ready, the host left the rollback to swapctl
    failure: str = ""  # FAILED why
    steps: dict[str, float] = field(default_factory=dict)  # stop, memory, start, ready: seconds

    @property
    def ready(self) -> bool:
        return self.ready_seen and self.alive

    @property
    def release_changed(self) -> bool:
        """The release's file is not the binary its sha256 names: swap.sh stopped nothing."""
        return self.failure.startswith("release changed")

    def why_not(self, timeout: float) -> str:
        """Why the started daemon is not ready, in words for the error and the journal."""
        if self.failure:
            return f"it could not be started ({self.failure})"
        if self.ready_seen:
            return "it printed its ready line, then exited"
        if self.exited or not self.alive:
            return "it exited before it was ready"
        return f"not ready after {timeout:g} s"


class SwapParser:
    """Reads swap.sh's lines as they arrive (`feed`), timing the steps by when their lines came."""

    def __init__(self, begin: float):
        self.begin = begin
        self.marks: dict[str, float] = {}
        self.report = SwapReport()

    def feed(self, line: str, at: float) -> tuple[Word | None, str]:
        """Takes one line that arrived at `at` (seconds on the caller's monotonic clock); returns its word."""
        word, rest = Word.of(line)
        if word is not None:
            self.report = _step(self.report, word, rest)
            self._time(word, at)
        return word, rest

    def _time(self, word: Word, at: float) -> None:
        """stop: from the script's start; memory: from the stop; start: from memory back; ready: from the start."""
        marks = self.marks
        if word is Word.STOPPED:
            self._took("stop", at - self.begin)
            marks["stopped"] = at
        elif word in (Word.DONE, Word.TIMEOUT):
            self._took("memory", at - marks.get("stopped", self.begin))
            marks["memory"] = at
        elif word is Word.STARTED:
            self._took("start", at - marks.get("memory", self.begin))
            marks["started"] = at
        elif word is Word.READY and "started" in marks:
            self._took("ready", at - marks["started"])

    def _took(self, step: str, seconds: float) -> None:
        if step not in self.report.steps:
            self.report = replace(self.report, steps={**self.report.steps, step: round(seconds, 3)})

    def finish(self, at: float) -> SwapReport:
        """The report once the script ended at `at`: a start never seen ready is timed to its end."""
        if "started" in self.marks:
            self._took("ready", at - self.marks["started"])
        return self.report


def _step(r: SwapReport, word: Word, rest: str) -> SwapReport:
    """The report after one more line."""
    if word is Word.KIDS:
        return replace(r, kids=tuple(int(p) for p in rest.split() if p.isdigit()))
    if word is Word.SIGKILL:
        return replace(r, sigkill=True)
    if word is Word.STOPPED:
        return replace(r, stopped=True, stopped_ms=int(rest))
    if word is Word.R:
        return replace(r, reading=Reading.parse(rest))
    if word in (Word.DONE, Word.TIMEOUT):
        return replace(r, memory_ok=word is Word.DONE)
    if word is Word.STARTED:
        pid, offset, *inv = rest.split()
        return replace(r, pid=int(pid), offset=int(offset), invocation="".join(inv[:1]))
    if word is Word.READY:
        return replace(r, ready_seen=True)
    if word is Word.EXITED:
        return replace(r, exited=True)
    if word is Word.WATCH:
        return replace(r, watch_ms=int(rest))
    if word is Word.ALIVE:
        return replace(r, alive=rest.strip() == "1")
    if word is Word.NOTREADY:
        return replace(r, host_decides=True)
    if word is Word.FAILED:
        return replace(r, failure=rest.strip())
    return r


def parse_swap(lines: Iterable[tuple[float, str]]) -> SwapReport:
    """A whole transcript of swap.sh: (seconds since it began, line) pairs."""
    parser = SwapParser(0.0)
    end = 0.0
    for at, line in lines:
        parser.feed(line, at)
        end = at
    return parser.finish(end)
