"""Which worker, and so which GPU, each C++ start function call held the GPU for. The C++ lines name no
GPU: a call's `mutex_held_ms total_start_fn_ms` line is matched with the Rust `prove_start` line its
thread writes right after it, whose `prove_start_ms` (Rust's clock around the call) fits the C++ time."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from .patterns import HELD, PROVE_START, PROVE_STARTED, WORKER, strip_ansi

PENDING_CALLS = 64  # C++ calls waiting for their prove_start line: more GPU workers than a box has
GROUP = 3  # prove_start lines looked ahead at: calls of more GPUs than that seldom end in one ms


@dataclass
class Calls:
    """The calls of one run (or of a part of it, while a log is read in pieces), matched or waiting."""

    held: dict[bytes, float] = field(default_factory=dict)  # worker -> mutex_held_ms of its calls
    unmatched_held_ms: float = 0.0  # held time of calls no prove_start line matched
    pending: list[tuple[float, float]] = field(default_factory=list)  # (total_start_fn_ms, held) waiting
    # prove_start lines before their call's line: in a part read apart, the line is in the part before
    unheld: list[tuple[bytes, float]] = field(default_factory=list)

    def scan(self, chunk: bytes) -> None:
        """Gives each C++ call's mutex_held_ms in `chunk` to the worker whose prove_start line follows it."""
        # two searches with a literal each (one alternation of both would try every position), in log order
        events: list[tuple[int, re.Match[bytes]]] = sorted(
            [(m.start(), m) for m in HELD.finditer(chunk)] + [(m.start(), m) for m in PROVE_STARTED.finditer(chunk)],
            key=lambda e: e[0])
        # the prove_start lines' fields, stripped of their colour at once
        stripped = iter(strip_ansi(b"\n".join(m[1] for _, m in events if m.re is not HELD)).split(b"\n"))
        proves = [None if m.re is HELD else prove_start_of(next(stripped)) for _, m in events]
        for i, (_, m) in enumerate(events):
            if m.re is HELD:
                self.pending.append((float(m[2]), float(m[1])))
                if len(self.pending) > PENDING_CALLS:  # never matched: its worker is not known
                    self.unmatched_held_ms += self.pending.pop(0)[1]
                continue
            found = proves[i]
            if found is None:
                continue
            # with several calls waiting, the prove_start lines right after this one, before another call's
            # line: calls that ended together are matched together
            ahead = [] if len(self.pending) < 2 else [
                p[1] for p in itertools.takewhile(lambda p: p is not None, proves[i + 1:i + 1 + GROUP]) if p]
            if not self.match(found[0], found[1], ahead):
                self.unheld.append(found)

    def match(self, worker: bytes, prove_start: float, ahead: list[float] | None = None) -> bool:
        """Gives `worker` the pending call its Rust time fits (within 2 ms + 5% of the C++ time). Where
        several fit, the prove_start lines `ahead` are matched with it: the assignment of fewest misses,
        then least time apart, then in log order (the calls' threads print in the order they ended)."""
        if len(self.pending) == 1:  # the usual case: a call's line, then its prove_start line
            choice: int | None = 0 if fits(self.pending[0][0], prove_start) else None
        else:
            choice = assign([prove_start, *(ahead or [])], [c[0] for c in self.pending])
        if choice is None:
            return False
        best = self.pending.pop(choice)
        self.held[worker] = self.held.get(worker, 0.0) + best[1]
        return True

    def merge(self, b: Calls) -> None:
        """Adds `b`, the calls of the part right after this one: its early prove_start lines may match
        the calls still pending here."""
        for worker, prove_start in b.unheld:
            if not self.match(worker, prove_start):
                self.unheld.append((worker, prove_start))
        self.pending.extend(b.pending)
        self.unmatched_held_ms += b.unmatched_held_ms
        for worker, held in b.held.items():
            self.held[worker] = self.held.get(worker, 0.0) + held

    def unmatched_ms(self) -> float:
        """The held time of the calls no worker got."""
        return self.unmatched_held_ms + sum(c[1] for c in self.pending)


def fits(call_ms: float, prove_start: float) -> bool:
    """Whether a C++ call's time and a Rust prove_start_ms can be the same call's."""
    return abs(call_ms - prove_start) <= 2 + 0.05 * prove_start


def prove_start_of(fields: bytes) -> tuple[bytes, float] | None:
    """(worker, prove_start_ms) of a `GPU_TIMING spawn_blocking prove_start` line's fields, ANSI codes
    stripped."""
    worker, prove_start = WORKER.search(fields), PROVE_START.search(fields)
    return (worker[1], float(prove_start[1])) if worker and prove_start else None


def _nearest_fits(calls: list[float], prove_start: float) -> list[int]:
    """The indexes of the few calls nearest `prove_start` that fit it (a stable sort: ties stay in log
    order), so the search in assign() stays small."""
    return sorted((j for j, c in enumerate(calls) if fits(c, prove_start)),
                  key=lambda j: abs(calls[j] - prove_start))[:GROUP + 1]


def assign(proves: list[float], calls: list[float]) -> int | None:
    """The index in `calls` (C++ times, in log order) that `proves[0]` gets when `proves` (Rust times,
    in log order) are matched together: fewest unmatched, then least total difference, then fewest
    pairs out of log order. Nearest-first alone swaps two calls whose times are 1 ms apart when the
    first one's Rust clock read 1 ms more (it wraps the C++ one)."""
    fitting = [_nearest_fits(calls, r) for r in proves]
    if len(fitting[0]) <= 1:
        return fitting[0][0] if fitting[0] else None
    best: tuple[tuple[int, float, int], int] | None = None
    for picks in itertools.product(*[[*f, None] for f in fitting]):
        taken = [j for j in picks if j is not None]
        if picks[0] is None or len(set(taken)) < len(taken):
            continue
        missed = len(picks) - len(taken)
        apart = sum(abs(calls[j] - r) for j, r in zip(picks, proves, strict=True) if j is not None)
        crossed = sum(1 for a, b in itertools.combinations(taken, 2) if a > b)
        key = (missed, apart, crossed)
        if best is None or key < best[0]:
            best = (key, picks[0])
    return best[1] if best else None
