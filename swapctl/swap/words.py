"""What the host scripts report: the words they print (`WORD args...`) and one pure parser per script,
from lines to a frozen result. Tested on transcripts of real runs (tests/data/transcripts/)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..facts.daemon_view import Proof, summary
from ..host.scripts import ReportWord


class Word(ReportWord):
    """Every word a swap script starts a report line with."""

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
    # backup.sh
    GONE = "GONE"  # the process whose /proc/PID/exe was to be saved has exited: nothing saved
    # stop.sh, swap.sh
    KIDS = "KIDS"  # pids: the old daemon's descendants, waited for too
    SIGKILL = "SIGKILL"  # still running after the grace period
    STOPPED = "STOPPED"  # ms
    R = "R"  # ms avail_kib[/room_kib] alive gpu_used: a memory reading
    DONE = "DONE"  # ms: memory is back
    TIMEOUT = "TIMEOUT"  # ms: memory did not come back
    STARTED = "STARTED"  # pid log_offset [invocation]: the unit's InvocationID, when it went through one
    LOG = "LOG"  # a line of the new daemon's log
    READY = "READY"
    EXITED = "EXITED"  # the new daemon exited while it was awaited
    WATCH = "WATCH"  # ms: ready, and watched that long more (ready_stable_s)
    ALIVE = "ALIVE"  # 0 or 1: whether it runs at the end
    NOTREADY = "NOTREADY"  # (swap scripts before the host's own rollback) not ready, left to swapctl
    SWAP = "SWAP"  # pid: the swap script's, for a second Ctrl-C (interrupt.sh)
    ROLLBACK = "ROLLBACK"  # why: the start failed; the lines after it are the host's own rollback
    TAIL = "TAIL"  # line: the failed start's log, its last lines, sent before the rollback
    RETRY = "RETRY"  # n: the fallback died before it was ready and stable; its n-th start
    MARKED = "MARKED"  # id: the failed release is marked bad
    OUTCOME = "OUTCOME"  # word pid: deployed | rolled-back | no-daemon | rollback-failed, and what runs (or -)
    JOURNAL = "JOURNAL"  # ok|lost line: the journal line the host wrote itself (lost: the disk refused it)
    # drain.sh (in swap.sh, before the stop, when the daemon has a status_url)
    INFLIGHT = "INFLIGHT"  # ms queue q n [job:done/total:age_s ...]: the proofs in flight, as the daemon says
    NOSTATUS = "NOSTATUS"  # why: its status did not answer; the stop goes on as a plain one
    DRAINED = "DRAINED"  # ms: nothing in flight at the last reading, SIGINT sent (one begun since is lost)
    UNDRAINED = "UNDRAINED"  # ms n: still n in flight at the drain's limit
    # curio.sh (in swap.sh, with [curio] nodes and stop "cordon")
    OTHERCORDON = "OTHERCORDON"  # node: cordoned already, not by this swap: left as it is
    POSTWAIT = "POSTWAIT"  # ms n [id:name:age_s ...]: a PoSt task the nodes own: no cordon until it ends
    CORDON = "CORDON"  # ms n [id:name:age_s ...]: the nodes cordoned; their cuzk-backed tasks then
    TASKS = "TASKS"  # ms n [id:name:age_s ...]: what they still own while the swap waits
    UNCORDON = "UNCORDON"  # ok|failed why: the cordon ended (why: started, the outcome, watchdog, ...)


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
    avail_kib: int  # MemAvailable
    alive: tuple[int, ...]  # the old processes still alive
    gpu_used: str = ""  # nvidia-smi's index,mib;... when GPUs are watched
    room_kib: int | None = None  # the new daemon's cgroup's room (cgroup.sh), None without a limit

    @classmethod
    def parse(cls, rest: str) -> Reading:
        parts = rest.split()
        alive = tuple(int(p) for p in parts[2].split(",") if p.isdecimal()) if len(parts) > 2 else ()  # or "-"
        avail, _, room = parts[1].partition("/")
        return cls(int(parts[0]), int(avail), alive, parts[3] if len(parts) > 3 else "",
                   int(room) if room.isdecimal() else None)


PROOF = re.compile(r"(?P<job>.+):(?P<done>[^:/]*)/(?P<total>[^:]*):(?P<age>[^:]*)")  # job:done/total:age


def _whole(text: str) -> int:
    """A count, age or time the host wrote: its digits, else 0 (the daemon's NaN or negative age is no age)."""
    return int(text) if text.isascii() and text.isdecimal() and len(text) < 19 else 0


@dataclass(frozen=True)
class InFlight:
    """One INFLIGHT line: the proofs in flight and how many wait to start (queued: stopped, they lose no work)."""

    ms: int
    queued: int
    proofs: tuple[Proof, ...] = ()

    @classmethod
    def parse(cls, rest: str) -> InFlight:
        parts = [*rest.split(), "", "", ""]  # ms queue q n job:done/total:age ...
        proofs = tuple(Proof(m["job"], _whole(m["done"]), _whole(m["total"]), _whole(m["age"]))
                       for m in map(PROOF.fullmatch, parts[4:]) if m)
        return cls(_whole(parts[0]), _whole(parts[2]), proofs)

    def summary(self) -> str:
        """"2 proofs in flight (job a1b2: 7/10 partitions, 41 s in; ...)", and how many wait."""
        return summary(self.proofs, self.queued)

    def record(self) -> list[dict[str, Any]]:
        return [p.record() for p in self.proofs]


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
    script_pid: int | None = None  # SWAP: the swap script's pid
    back_why: str = ""  # ROLLBACK why: the host rolled back by itself, for this reason
    back: SwapReport | None = None  # the rollback's own stop, memory wait, start and readiness
    retries: int = 0  # RETRY: the fallback's starts after its first
    marked: str = ""  # MARKED id: the release marked bad
    tail: tuple[str, ...] = ()  # TAIL: the failed start's last lines of log
    outcome: str = ""  # OUTCOME: how the host says the swap ended
    outcome_pid: int | None = None  # OUTCOME's pid: what runs now (None: nothing)
    journal: str = ""  # JOURNAL: the host's own journal line (JSON text)
    journal_ok: bool = False  # JOURNAL ok: written; False with a line: the disk refused it
    in_flight: InFlight | None = None  # the last reading before the stop (None: no status_url, or no answer)
    first_in_flight: InFlight | None = None  # the first: what a drain found in flight when it began
    status_note: str = ""  # NOSTATUS: why the daemon's status could not be read
    drained_ms: int | None = None  # DRAINED: the drain's wait
    undrained_ms: int | None = None  # UNDRAINED: proofs were still in flight at the drain's limit, after ms
    cordon_tasks: tuple[str, ...] | None = None  # CORDON: the nodes' tasks at the cordon (None: no cordon)
    post_wait: tuple[str, ...] = ()  # POSTWAIT: the PoSt tasks a cordon waited for
    other_cordons: tuple[str, ...] = ()  # OTHERCORDON: nodes someone else had cordoned
    uncordon: str = ""  # UNCORDON: "ok WHY" or "failed WHY"

    @property
    def cordon_refused(self) -> bool:
        """The cordon refused before the stop (curio.sh), every node uncordoned: nothing was stopped."""
        return self.failure.startswith("curio:") or (self.cordon_tasks is not None and self.drain_refused)

    @property
    def drain_refused(self) -> bool:
        """The drain timed out with drain_timeout "refuse": nothing was stopped."""
        return self.failure.startswith("drain:")

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


# the words about the whole swap: after ROLLBACK they are not the rollback's own
WHOLE = (Word.TAIL, Word.RETRY, Word.MARKED, Word.OUTCOME, Word.JOURNAL, Word.SWAP, Word.UNCORDON)


class SwapParser:
    """Reads swap.sh's lines as they arrive (`feed`), timing the steps by when their lines came. The lines
    after ROLLBACK go to a parser of their own (`back`): the host's rollback, a swap in the swap."""

    def __init__(self, begin: float):
        self.begin = begin
        self.marks: dict[str, float] = {}
        self.report = SwapReport()
        self.back: SwapParser | None = None

    def feed(self, line: str, at: float) -> tuple[Word | None, str]:
        """Takes one line that arrived at `at` (seconds on the caller's monotonic clock); returns its word."""
        word, rest = Word.of(line)
        if self.back is not None and word not in WHOLE:
            return self.back.feed(line, at)
        if word is Word.ROLLBACK:
            self.back = SwapParser(at)
        if word is not None:
            try:
                self.report = _step(self.report, word, rest)
            except (ValueError, IndexError):  # a line the host garbled says nothing: the ones after it still count
                return None, line
            self._time(word, at)
        return word, rest

    @property
    def rolling_back(self) -> bool:
        return self.back is not None

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
        if self.back is not None:
            self.report = replace(self.report, back=self.back.finish(at))
        return self.report


def _step(r: SwapReport, word: Word, rest: str) -> SwapReport:
    """The report after one more line."""
    if word is Word.KIDS:
        return replace(r, kids=tuple(int(p) for p in rest.split() if p.isdecimal()))
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
    return _host_step(r, word, rest)


def _host_step(r: SwapReport, word: Word, rest: str) -> SwapReport:
    """The report after a line about the whole swap, as the host ended it."""
    if word is Word.SWAP and rest.strip().isdecimal():
        return replace(r, script_pid=int(rest))
    if word is Word.ROLLBACK:
        return replace(r, back_why=rest.strip())
    if word is Word.RETRY:
        return replace(r, retries=r.retries + 1)
    if word is Word.TAIL:
        return replace(r, tail=(*r.tail, rest))
    if word is Word.MARKED:
        return replace(r, marked=rest.strip())
    if word is Word.OUTCOME:
        what, _, pid = rest.strip().partition(" ")
        return replace(r, outcome=what, outcome_pid=int(pid) if pid.isdecimal() else None)
    if word is Word.JOURNAL:
        state, _, line = rest.partition(" ")
        return replace(r, journal=line, journal_ok=state == "ok")
    return _cordon_step(r, word, rest)


def _cordon_step(r: SwapReport, word: Word, rest: str) -> SwapReport:
    """The cordon's lines (curio.sh)."""
    if word is Word.UNCORDON:
        return replace(r, uncordon=rest.strip())
    if word is Word.OTHERCORDON:
        return replace(r, other_cordons=(*r.other_cordons, rest.strip()))
    if word in (Word.CORDON, Word.POSTWAIT) and not r.stopped:
        _, n, *tasks = rest.split()
        int(n)  # a line without its count says nothing
        return replace(r, cordon_tasks=tuple(tasks)) if word is Word.CORDON else replace(r, post_wait=tuple(tasks))
    return _drain_step(r, word, rest)


def _drain_step(r: SwapReport, word: Word, rest: str) -> SwapReport:
    """The drain's lines (drain.sh): only those before the stop say what the stop lost."""
    if r.stopped:
        return r
    if word is Word.INFLIGHT:
        seen = InFlight.parse(rest)
        return replace(r, in_flight=seen, first_in_flight=r.first_in_flight or seen)
    if word is Word.NOSTATUS:
        return replace(r, status_note=rest.strip())
    if word is Word.DRAINED:
        return replace(r, drained_ms=int(rest))
    if word is Word.UNDRAINED:
        ms, _ = map(int, rest.split())  # both, as the stream's view shows the count too, or the line says nothing
        return replace(r, undrained_ms=ms)
    return r


def parse_swap(lines: Iterable[tuple[float, str]]) -> SwapReport:
    """A whole transcript of swap.sh: (seconds since it began, line) pairs."""
    parser = SwapParser(0.0)
    end = 0.0
    for at, line in lines:
        parser.feed(line, at)
        end = at
    return parser.finish(end)
