"""The GPU figures as types: one GPU's view of a run or of several, a log's report with them, and a
before/after comparison. swapctl.logs.gpu computes them; the timings CLI, the experiment's verdict and
its HTML read them by attribute; `as_dict()` writes `swapctl timings --json`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .cuzk.figures import RunReport

DISAGREE = 3.0  # points: two figures further apart than this get a line saying why
PARTS = {
    "kernels": "kernels: the log's GPU phases less the copy and the barrier waits",
    "copy": "host-to-device copy (the log's h2d_copy_ms): the GPU phase waits for it",
    "gpu_phase": "GPU phase: copy and kernels together (the log does not time the copy)",
    "barrier": "barrier waits inside the GPU phase (GPU waits for CPU preparation)",
    "synthesis": "waiting for synthesis: nothing queued for the GPU",
    "queued": "a partition queued, none in the GPU phase yet (host preparation, lock hand-over)",
}
IDLE = ("copy", "barrier", "synthesis", "queued")
FIGURES = {
    "gpu_busy": "GPU busy = SM activity: the share of SMs busy, the GPU's activity counters (GPM), per GPU",
    "duty_cycle": "duty cycle: nvidia-smi dmon sm% (utilization.gpu), the share of each period any kernel ran",
    "kernel_share": "kernel share from the log: GPU phases less copy and barrier waits, over wall time",
}


@dataclass(frozen=True)
class Cycle:
    """One partition's cycle on the GPU, GPU_START to the next, in ms: p50 and its range over the run."""

    p50: float
    min: float
    max: float
    n: int


@dataclass(frozen=True)
class GpuFigures:
    """One GPU over one run (`runs` None) or several: where its wall time went (`time`, from the log's
    phases: a share of each of PARTS, largest first, adding up to 1), the three figures (FIGURES) and what
    its counters said. Percent where the counters give it (busy_mean, duty_cycle, sm_occupancy), 0-1 where
    the log does (kernel_share, copy_share). An interval, a span, a cycle and a window only for one run."""

    time: dict[str, float]
    samples: int = 0  # dmon readings whose whole period lies in the window
    dropped: int = 0  # bogus GPM values left out
    busy_mean: float | None = None  # SM activity (GPM), None without GPM counters
    busy_interval: tuple[float, float] | None = None  # its 95% interval, where it holds
    busy_span: tuple[str, str] | None = None  # the time its readings cover
    duty_cycle: float | None = None  # dmon sm%
    kernel_share: float | None = None
    copy_share: float | None = None
    sm_occupancy: float | None = None
    rx_gpm_mibps: float | None = None
    rx_per_partition_mib: float | None = None
    cycle_ms: Cycle | None = None
    window: tuple[str, str] | None = None  # the run's wall-clock window
    runs: int | None = None  # how many runs, where several were combined

    @property
    def busy_is(self) -> str | None:
        return "sm_activity" if self.busy_mean is not None else None

    @property
    def largest_idle_cause(self) -> str | None:
        idle = {k: v for k, v in self.time.items() if k in IDLE}
        return max(idle, key=lambda k: idle[k]) if idle else None

    @property
    def disagree(self) -> list[str]:
        """One line for each pair of the three figures further apart than DISAGREE points, saying why."""
        busy, duty = self.busy_mean, self.duty_cycle
        kernel = self.kernel_share * 100 if self.kernel_share is not None else None
        lines = []
        if busy is not None and duty is not None and abs(duty - busy) > DISAGREE:
            lines.append(f"duty cycle {duty:.1f}% against SM activity {busy:.1f}%: a duty cycle counts a period as "
                         f"busy when any kernel ran; SM activity counts the SMs that were busy")
        if busy is not None and kernel is not None and abs(kernel - busy) > DISAGREE:
            lines.append(f"the log's kernel share {kernel:.1f}% against SM activity {busy:.1f}%: the kernels leave "
                         f"SMs idle, or the GPU phase holds time that is neither copy nor kernel")
        if busy is None and duty is not None and kernel is not None and abs(duty - kernel) > DISAGREE:
            lines.append(f"duty cycle {duty:.1f}% against the log's kernel share {kernel:.1f}%: a duty cycle is a "
                         f"snapshot of whether any kernel ran, not how long kernels ran")
        return lines

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.runs is None:
            del d["runs"]
        return {**d, "busy_is": self.busy_is, "largest_idle_cause": self.largest_idle_cause,
                "disagree": self.disagree}


@dataclass(frozen=True)
class GpuReport:
    """A log's figures (`figures`) with the GPU's: per run of figures.runs and GPU (`runs`), and per GPU
    over them all (`gpus`); `sampled`: GPU samples were read, so the counters' figures could be there."""

    figures: RunReport
    runs: list[dict[str, GpuFigures]]
    gpus: dict[str, GpuFigures]
    sampled: bool

    def as_dict(self) -> dict[str, Any]:
        """`swapctl timings --json`: the log's report, each run's row with its GPU figures (`gpu` in full;
        `gpu_busy`, `duty_cycle`, `kernel_share` and `where_time_goes` by GPU), and those over the runs."""
        result = self.figures.as_dict()
        for row, view in zip(result["runs"], self.runs, strict=False):
            row["gpu"] = {g: v.as_dict() for g, v in view.items()}
            row["gpu_busy"] = {g: v.busy_mean for g, v in view.items()}
            row["duty_cycle"] = {g: v.duty_cycle for g, v in view.items()}
            row["kernel_share"] = {g: v.kernel_share for g, v in view.items()}
            row["where_time_goes"] = {g: v.time for g, v in view.items()}
        combined = {g: v.as_dict() for g, v in self.gpus.items()}
        result["gpu_busy"] = combined if self.sampled else None
        result["gpu_figures"] = combined
        result["gpu_figures_are"] = FIGURES
        result["gpu_busy_is"] = FIGURES["gpu_busy"]
        result["where_time_goes"] = {g: {"parts": v.time, "largest_idle_cause": v.largest_idle_cause}
                                     for g, v in self.gpus.items()}
        result["where_time_goes_parts"] = PARTS
        return result

    def busy(self) -> dict[str, float | None]:
        """GPU busy (SM activity) per GPU over the runs; no GPU at all without samples."""
        return {g: v.busy_mean for g, v in self.gpus.items()} if self.sampled else {}


@dataclass(frozen=True)
class Pair:
    before: float | None
    after: float | None


@dataclass(frozen=True)
class PhaseChange:
    before_p50: float | None
    after_p50: float | None
    change_pct: float | None


@dataclass(frozen=True)
class Comparison:
    """`swapctl timings --compare`: each phase's p50 before and after, with the change in %; the shares,
    and GPU busy per GPU, before and after."""

    phases: dict[str, PhaseChange]
    gpu_phase_share: Pair
    timeline_share: Pair
    gpu_busy: dict[str, Pair] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(before: GpuReport, after: GpuReport) -> Comparison:
    b, a = before.figures, after.figures
    rows = {}
    for name in sorted(set(b.phases) | set(a.phases)):
        p0, p1 = b.p50(name), a.p50(name)
        rows[name] = PhaseChange(p0, p1, (p1 - p0) / p0 * 100 if p1 is not None and p0 else None)
    busy0, busy1 = before.busy(), after.busy()
    return Comparison(rows, Pair(b.gpu_phase_share, a.gpu_phase_share), Pair(b.timeline_share, a.timeline_share),
                      {g: Pair(busy0.get(g), busy1.get(g)) for g in sorted(set(busy0) | set(busy1))})
