"""Rolling a swap out over many hosts: rolling by default, parallel, canaries first, a failure budget.

Deploy and rollback share this. Each host's swap is independent (its own connection, lock, rollback);
the rollout only decides which hosts start. Once failures exceed the budget no new host starts, and
hosts in flight finish their swap or roll back. The core never prints or asks: the caller passes what
runs one host, and callbacks that show progress and confirm the canaries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import StrEnum

from . import playbook as pb
from .errors import BadInput, SwapctlError
from .playbook import HostSpec
from .swap.deploy import Outcome

Result = Outcome | SwapctlError
SKIPPED = "skipped"


class Halt(StrEnum):
    """Why a rollout stopped before every host had its turn."""

    MAX_FAIL = "max-fail"  # more hosts failed than --max-fail allows
    CANARY_FAILED = "canary-failed"  # a canary's swap failed
    CANARY_DOWN = "canary-down"  # a canary swapped, then no longer ran the new build
    NOT_CONFIRMED = "not-confirmed"  # the canaries were shown and the rollout was not confirmed
    INTERRUPTED = "interrupted"  # Ctrl-C


class Stop(str):
    """A rollout's stop: the words said (it is that string: printed, compared and written to --json as it),
    and its `halt`, which callers branch on."""

    halt: Halt

    def __new__(cls, halt: Halt, said: str) -> Stop:
        stop = super().__new__(cls, said)
        stop.halt = halt
        return stop


def halt_of(why: str) -> Halt | None:
    """The Halt of a rollout's stop (None: it did not stop, or a caller's own words)."""
    return why.halt if isinstance(why, Stop) else None


@dataclass(frozen=True)
class Fleet:
    parallel: int = 1
    canary: int = 0
    canary_wait: float | None = None
    max_fail: str | None = None
    limit: str | None = None

    @classmethod
    def of(cls, rollout: pb.RolloutSpec, parallel: int | None, canary: int | None, canary_wait: float | None,
           max_fail: str | None, limit: str | None) -> Fleet:
        """The command line's options; those it leaves out come from the playbook's [rollout] table."""
        return cls(rollout.parallel if parallel is None else parallel, rollout.canary if canary is None else canary,
                   rollout.canary_wait_s if canary_wait is None else canary_wait,
                   rollout.max_fail if max_fail is None else max_fail, limit)


def fail_budget(max_fail: str | None, hosts: int) -> int | None:
    """--max-fail as a number of failed hosts the rollout tolerates; None: no limit."""
    if max_fail is None:
        return None
    try:
        if max_fail.endswith("%"):
            return int(hosts * float(max_fail[:-1]) / 100)
        return int(max_fail)
    except ValueError:
        raise BadInput(f"--max-fail {max_fail!r} is neither a number of hosts nor a percentage (2, or 25%)") from None


@dataclass
class Rollout:
    """Runs `one` over hosts, at most `parallel` at a time, until failures exceed `budget`."""

    one: Callable[[HostSpec], Result]
    parallel: int = 1
    budget: int | None = None
    results: dict[str, Result | str] = field(default_factory=dict)
    failures: int = 0
    stopped: str = ""  # why no further host starts; set by a failure, or from outside (Ctrl-C)

    def run(self, specs: list[HostSpec]) -> None:
        queue = list(specs)
        if self.parallel == 1:  # rolling: in the caller's thread, so Ctrl-C reaches the swap as it always did
            while queue and not self.stopped:
                spec = queue.pop(0)
                self._record(spec, self.one(spec))
            for spec in queue:
                self.results[spec.name] = SKIPPED
            return
        with ThreadPoolExecutor(max_workers=max(1, self.parallel)) as pool:
            running: dict[Future[Result], HostSpec] = {}
            while queue or running:
                while queue and len(running) < self.parallel and not self.stopped:
                    spec = queue.pop(0)
                    running[pool.submit(self.one, spec)] = spec
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    self._record(running.pop(fut), fut.result())
            for spec in queue:
                self.results[spec.name] = SKIPPED

    def _record(self, spec: HostSpec, result: Result) -> None:
        self.results[spec.name] = result
        if isinstance(result, SwapctlError):
            self.failures += 1
            if self.budget is not None and self.failures > self.budget and not self.stopped:
                self.stopped = Stop(Halt.MAX_FAIL, f"{self.failures} hosts failed, more than --max-fail "
                                                   f"{self.budget}")


@dataclass(frozen=True)
class Canary:
    """A canary after its swap, as checked before the rollout goes on."""

    host: str
    pid: int
    ready_s: float
    partitions: int
    p50_ms: dict[str, float]  # synth_ms, ntt_kernels, gpu_total_ms where its log has them
    gpu_phase_share: float | None  # from its log: held GPU / wall, not how busy the GPU is


def _pause(seconds: float) -> None:
    threading.Event().wait(seconds)


@dataclass(frozen=True)
class CanaryGate:
    """What decides whether the rollout goes on after its canaries."""

    book: pb.Playbook
    check: Callable[[pb.Playbook, str, Outcome], Canary | str]  # a canary after its swap, or why it went down
    wait_s: float | None = None  # let the canaries run this long first
    confirm: Callable[[list[Canary]], bool] = lambda canaries: True  # shown the canaries; False stops
    waiting: Callable[[float], None] = field(default=lambda s: _pause(s))  # injectable for tests

    def verdict(self, results: dict[str, Result | str]) -> str:
        """Why the rollout stops after its canaries, or "" to go on."""
        if any(isinstance(r, SwapctlError) for r in results.values()):
            return Stop(Halt.CANARY_FAILED, "the canary failed")
        if self.wait_s:
            self.waiting(self.wait_s)
        canaries = []
        for name, outcome in results.items():
            if not isinstance(outcome, Outcome):
                continue
            found = self.check(self.book, name, outcome)
            if isinstance(found, str):
                return Stop(Halt.CANARY_DOWN, found)
            canaries.append(found)
        return "" if self.confirm(canaries) else Stop(Halt.NOT_CONFIRMED, "stopped after the canary")


Batch = Callable[[Rollout, list[HostSpec]], None]


def roll_out(specs: list[HostSpec], one: Callable[[HostSpec], Result], fleet: Fleet, gate: CanaryGate, *,
             dry_run: bool = False, batch: Batch | None = None,
             halted: Callable[[], str] = lambda: "") -> tuple[dict[str, Result | str], str]:
    """Runs `one` on every host as `fleet` says: canaries first, then the rest within the failure budget.

    `batch` runs a Rollout over some hosts (the CLI wraps it in its live view); `halted` says why no
    further host may start (Ctrl-C). Returns each host's result (or SKIPPED) and why the rollout
    stopped early ("" if it did not)."""
    budget = fail_budget(fleet.max_fail, len(specs))
    run = batch or (lambda rollout, hosts: rollout.run(hosts))
    results: dict[str, Result | str] = {}
    why, rest = "", specs
    if fleet.canary and len(specs) > 1 and not dry_run:
        canaries, rest = specs[:fleet.canary], specs[fleet.canary:]
        first = Rollout(one, fleet.parallel)
        run(first, canaries)
        results.update(first.results)
        why = first.stopped or halted() or gate.verdict(first.results)
    if why:
        results.update({s.name: SKIPPED for s in rest})
        return results, why
    done = sum(isinstance(r, SwapctlError) for r in results.values())
    rollout = Rollout(one, fleet.parallel, None if budget is None else budget - done)
    run(rollout, rest)
    results.update(rollout.results)
    return results, rollout.stopped or halted()
