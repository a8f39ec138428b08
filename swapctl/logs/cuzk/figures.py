"""The figures of one run or of several, as `swapctl timings --json` prints them, and before/after."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .fields import VALUE, Phases, extend

if TYPE_CHECKING:
    from .run import Run

PHASE_SHARE = ("sum(mutex_held_ms - barrier_wait_ms) / wall time, per GPU: the time partitions hold the GPU, "
               "a copy from pageable memory included; not how busy the GPU is")


@dataclass(frozen=True)
class Summary:
    """One phase's values: how many, the median, the nearest-rank p95 and the max (None without values)."""

    count: int
    p50: float | None
    p95: float | None
    max: float | None


def summary(values: Iterable[float]) -> Summary:
    """count, p50 (the median), nearest-rank p95 and max. The values are counted, not sorted: a phase
    has few distinct values (whole ms, mostly), so millions of them take kilobytes, not a list."""
    counts = sorted(Counter(values).items())
    n = sum(c for _, c in counts)
    if not n:
        return Summary(0, None, None, None)
    # the two middle values (one when n is odd), the nearest-rank p95, the max
    ranks = [(n - 1) // 2, n // 2, min(n - 1, max(0, -(-95 * n // 100) - 1)), n - 1]
    picked, seen, i = [], 0, 0
    for rank in ranks:  # ascending
        while seen + counts[i][1] <= rank:
            seen += counts[i][1]
            i += 1
        picked.append(counts[i][0])
    if isinstance(values, array) and values.typecode == VALUE:  # 12.3 comes back from float32 as 12.30000019
        picked = [float(f"{v:.7g}") for v in picked]
    low, high, p95, top = picked
    return Summary(n, (low + high) / 2, p95, top)


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """summary() as the report's JSON writes it."""
    return asdict(summary(values))


@dataclass(frozen=True)
class GpuShares:
    """One GPU's shares of a run's wall time: held (less barrier waits), and GPU_START..GPU_END."""

    gpu_phase_share: float | None
    timeline_share: float | None


@dataclass(frozen=True)
class GpuTotals(GpuShares):
    """One GPU's shares over every run it ran in, and its partitions."""

    partitions: int


@dataclass(frozen=True)
class RunRow:
    """One daemon run's line of the report; times as ISO 8601 with a Z."""

    run: int
    started: bool
    first_ts: str | None
    last_ts: str | None
    epoch: str | None
    wall_ms: float | None
    jobs: int
    partitions: int
    pageable_share: float | None
    gpus: dict[str, GpuShares]
    gpu_phase_share: float | None  # the mean over its GPUs
    timeline_share: float | None
    gpu_workers: dict[str, int]  # the GPU workers its start logged, by engine shape: pipeline | monolithic


@dataclass(frozen=True)
class Starved:
    """Signs of a GPU waiting for work: no wait for the GPU's mutex, and gaps between partitions."""

    mutex_wait_p50_ms: float | None
    barrier_wait_nonzero: int
    barrier_wait_p95_ms: float | None
    gap_between_partitions_ms: Summary | None
    likely: bool


@dataclass(frozen=True)
class RunReport:
    """The figures of one run or of several: `swapctl timings --json`, as as_dict() writes them."""

    runs: list[RunRow]
    phases: dict[str, Summary]
    gpu_phase_share: float | None
    gpu_phase_share_is: str
    timeline_share: float | None
    gpus: dict[str, GpuTotals]
    wall_ms: float | None
    jobs: int
    partitions: int
    pageable_share: float | None
    synth_to_gpu_ratio: float | None
    starved: Starved
    lines: int
    skipped_lines: int

    def p50(self, phase: str) -> float | None:
        """The phase's median, None where the runs did not log it."""
        return self.phases[phase].p50 if phase in self.phases else None

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON writes it: the fields, in order, nested ones too."""
        return asdict(self)


def share(busy: float, wall: float) -> float | None:
    """busy / wall, at most 1; None without a wall time."""
    return min(1.0, busy / wall) if wall else None


def iso(t: datetime | None) -> str | None:
    """An aware time as ISO 8601 with a Z."""
    return t.isoformat().replace("+00:00", "Z") if t else None


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


class _Totals:
    """Each GPU's busy, timeline and wall time over the runs it ran in, so no share exceeds 100%."""

    def __init__(self) -> None:
        self.per_gpu: dict[str, dict[str, float]] = {}
        self.gpu_wall = 0.0

    def add(self, r: Run, wall: float) -> dict[str, GpuShares]:
        """Adds one run; returns its shares per GPU."""
        gpus = r.gpus()
        barrier = float(sum(r.phases.get("barrier_wait_ms", ())))
        held = sum(d["held_ms"] for d in gpus.values()) or 1.0
        row: dict[str, GpuShares] = {}
        for g, d in gpus.items():
            busy = d["held_ms"] - barrier * d["held_ms"] / held  # barrier lines name no GPU: shared by held time
            acc = self.per_gpu.setdefault(g, {"busy_ms": 0.0, "timeline_ms": 0.0, "wall_ms": 0.0, "partitions": 0})
            acc["busy_ms"] += busy
            acc["timeline_ms"] += d["timeline_ms"]
            acc["wall_ms"] += wall
            acc["partitions"] += d["phases"]
            row[g] = GpuShares(share(busy, wall), share(d["timeline_ms"], wall))
            self.gpu_wall += wall
        return row

    def gpus(self) -> dict[str, GpuTotals]:
        """Per GPU: its shares over all the runs, and its partitions."""
        return {g: GpuTotals(share(a["busy_ms"], a["wall_ms"]), share(a["timeline_ms"], a["wall_ms"]),
                             int(a["partitions"])) for g, a in sorted(self.per_gpu.items())}

    def overall(self, key: str) -> float | None:
        """One share over every GPU of every run."""
        return share(sum(a[key] for a in self.per_gpu.values()), self.gpu_wall)


def _run_row(i: int, r: Run, gpus: dict[str, GpuShares]) -> RunRow:
    partitions = r.pinned + r.pageable
    return RunRow(
        run=i + 1, started=r.started, first_ts=iso(r.first_ts), last_ts=iso(r.last_ts), epoch=iso(r.epoch),
        wall_ms=r.wall_ms, jobs=r.jobs, partitions=partitions,
        pageable_share=r.pageable / partitions if partitions else None, gpus=gpus,
        gpu_phase_share=_mean(g.gpu_phase_share for g in gpus.values()),
        timeline_share=_mean(g.timeline_share for g in gpus.values()), gpu_workers=dict(r.gpu_workers),
    )


def _p50(phases: dict[str, Summary], *names: str) -> float | None:
    """The p50 of the first of `names` the runs logged."""
    first = next((phases[n] for n in names if n in phases), None)
    return first.p50 if first else None


def _starved(phases: Phases, summaries: dict[str, Summary], gaps: array[float]) -> Starved:
    gpu = _p50(summaries, "gpu_total_ms", "gpu_ms")
    mutex_wait = _p50(summaries, "mutex_wait_ms")
    gap_s = summary(gaps) if gaps else None
    barrier = summaries.get("barrier_wait_ms")
    return Starved(
        mutex_wait_p50_ms=mutex_wait,
        barrier_wait_nonzero=sum(1 for v in phases.get("barrier_wait_ms", ()) if v > 0),
        barrier_wait_p95_ms=barrier.p95 if barrier else None,
        gap_between_partitions_ms=gap_s,
        likely=bool(mutex_wait is not None and mutex_wait < 1 and gap_s and gap_s.p50 is not None
                    and gap_s.p50 > 0 and (gpu is None or gap_s.p50 > 0.1 * gpu)),
    )


def report(runs: list[Run]) -> RunReport:
    """The figures of one run or of several: phases over all their values; shares by wall time, each
    GPU's over the runs it ran in, so no share exceeds 100%."""
    phases: Phases = {}
    for r in runs:
        extend(phases, r.phases)
    summaries = {name: summary(values) for name, values in sorted(phases.items())}
    gaps: array[float] = array("d")
    totals, rows, wall_total = _Totals(), [], 0.0
    for i, r in enumerate(runs):
        wall = r.wall_ms or 0.0
        wall_total += wall
        gaps.extend(r.gaps())
        rows.append(_run_row(i, r, totals.add(r, wall)))
    pinned, pageable = sum(r.pinned for r in runs), sum(r.pageable for r in runs)
    partitions = pinned + pageable
    synth, gpu = _p50(summaries, "synth_ms"), _p50(summaries, "gpu_total_ms", "gpu_ms")
    return RunReport(
        runs=rows, phases=summaries, gpu_phase_share=totals.overall("busy_ms"), gpu_phase_share_is=PHASE_SHARE,
        timeline_share=totals.overall("timeline_ms"), gpus=totals.gpus(), wall_ms=wall_total or None,
        jobs=sum(r.jobs for r in runs), partitions=partitions,
        pageable_share=pageable / partitions if partitions else None,
        synth_to_gpu_ratio=synth / gpu if synth and gpu else None, starved=_starved(phases, summaries, gaps),
        lines=sum(r.lines for r in runs), skipped_lines=sum(r.skipped_lines for r in runs),
    )
