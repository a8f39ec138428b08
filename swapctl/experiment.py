"""The verdict of an experiment: what a build (B) did against what ran before it (A), with the evidence.

Pure: it reads two sets of daemon runs (parsed logs) and the GPU samples of the same windows, and says
per phase whether the change is real (swapctl.logs.stats), proofs per hour, GPU busy from the GPU's
own counters, the GPU phase share and where the time goes, and one line an engineer would write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .gpu.samples import Sample
from .logs import gpu
from .logs.stats import Change, compare
from .logs.timings import Log, Run

# the phases a verdict line names first, when they changed: what cuzk's GPU path spends its time in
HEADLINE = ("ntt_kernels", "coset_intt_sync", "gpu_total_ms", "mutex_held_ms", "synth_ms", "job_total_ms")
MIN_PROOFS = 3


@dataclass(frozen=True)
class Side:
    """One build's runs, as the verdict reads them."""

    proofs: int
    partitions: int
    wall_s: float
    proofs_per_hour: float | None
    phase_share: float | None
    gpu_busy: dict[str, float | None]
    where: dict[str, dict[str, float]]
    largest_idle_cause: dict[str, str | None]
    report: dict = field(repr=False)


@dataclass(frozen=True)
class Verdict:
    before: Side
    after: Side
    phases: dict[str, Change]
    summary: str

    def lines(self) -> list[str]:
        """benchstat's table: one line a phase that has values on both sides."""
        width = max((len(n) for n in self.phases), default=0)
        return [c.line(name.ljust(width)) for name, c in self.phases.items()]

    def as_dict(self) -> dict:
        def side(s: Side) -> dict:
            return {k: v for k, v in s.__dict__.items() if k != "report"}
        return {"summary": self.summary, "before": side(self.before), "after": side(self.after),
                "phases": {n: {**c.__dict__, "significant": c.significant, "line": c.line(n)}
                           for n, c in self.phases.items()}}


def side(runs: list[Run], samples: list[Sample]) -> Side:
    log = Log()
    log.runs = runs
    r = gpu.report(log, "all", samples)
    wall = (r["wall_ms"] or 0) / 1000
    busy = {g: b["busy_mean"] for g, b in (r["gpu_busy"] or {}).items()}
    where = {g: w["parts"] for g, w in (r["where_time_goes"] or {}).items()}
    causes = {g: w["largest_idle_cause"] for g, w in (r["where_time_goes"] or {}).items()}
    return Side(proofs=r["jobs"], partitions=r["partitions"], wall_s=wall,
                proofs_per_hour=r["jobs"] / wall * 3600 if wall and r["jobs"] else None,
                phase_share=r["gpu_phase_share"], gpu_busy=busy, where=where, largest_idle_cause=causes, report=r)


def verdict(before: list[Run], after: list[Run], samples: list[Sample] | None = None) -> Verdict:
    """B (after) against A (before): every phase with values on both sides, and the headline."""
    samples = samples or []
    a, b = side(before, samples), side(after, samples)
    names = sorted({n for r in before for n in r.phases} & {n for r in after for n in r.phases})
    phases = {}
    for name in names:
        va = [v for r in before for v in r.phases.get(name, ())]
        vb = [v for r in after for v in r.phases.get(name, ())]
        if max(va + vb, default=0) > 0:
            phases[name] = compare(va, vb)
    return Verdict(a, b, phases, headline(a, b, phases))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def headline(a: Side, b: Side, phases: dict[str, Change]) -> str:
    """`ntt_kernels -61% [-64%, -58%], proofs/h +20%, GPU busy 32% -> 56%: the copy was the bottleneck`."""
    parts = []
    moved = [n for n in HEADLINE if n in phases and phases[n].significant]
    moved += [n for n, c in sorted(phases.items(), key=lambda kv: -abs(kv[1].delta or 0))
              if c.significant and n not in moved][:max(0, 2 - len(moved))]
    for n in moved[:2]:
        c = phases[n]
        assert c.delta is not None and c.low is not None and c.high is not None  # significant: all known
        parts.append(f"{n} {c.delta * 100:+.0f}% [{c.low * 100:+.0f}%, {c.high * 100:+.0f}%]")
    if not moved:
        parts.append("no significant change in any phase")
    if a.proofs_per_hour and b.proofs_per_hour:
        parts.append(f"proofs/h {(b.proofs_per_hour / a.proofs_per_hour - 1) * 100:+.0f}%")
    gpus = sorted(set(a.gpu_busy) & set(b.gpu_busy))
    if gpus and all(a.gpu_busy[g] is not None and b.gpu_busy[g] is not None for g in gpus):
        before = sum(a.gpu_busy[g] or 0 for g in gpus) / len(gpus)
        after = sum(b.gpu_busy[g] or 0 for g in gpus) / len(gpus)
        parts.append(f"GPU busy {_pct(before)} -> {_pct(after)}")
    line = ", ".join(parts)
    cause = _cause(a, b)
    return f"{line}: {cause}" if cause else line


def _cause(a: Side, b: Side) -> str:
    """What the breakdowns say changed: the largest idle cause before, and how much of it is left."""
    for g, cause in a.largest_idle_cause.items():
        if not cause:
            continue
        before, after = a.where.get(g, {}).get(cause, 0), b.where.get(g, {}).get(cause, 0)
        if cause == "copy_wait" and after < before / 2:
            return f"the copy was the bottleneck ({before * 100:.0f}% of GPU {g}'s time, now {after * 100:.0f}%)"
        if after < before / 2:
            return f"{gpu.PARTS[cause]} fell from {before * 100:.0f}% to {after * 100:.0f}% of GPU {g}'s time"
        return f"GPU {g} still idles most while {gpu.PARTS[cause]} ({after * 100:.0f}% of its time)"
    return ""


def enough(s: Side, min_proofs: int = MIN_PROOFS) -> bool:
    return s.proofs >= min_proofs
