"""The verdict of an experiment: what a build (B) did against what ran before it (A), with the evidence.

Pure: it reads two sets of daemon runs (parsed logs) and the GPU samples of the same windows, and says
per phase whether the change is real (swapctl.logs.stats), proofs per hour, GPU busy from the GPU's
own counters, the GPU phase share and where the time goes, and one line an engineer would write.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from ..gpu.samples import Sample
from ..logs import gpu
from ..logs.power import proofs_needed, resolution
from ..logs.stats import ALPHA, Change, compare, moves
from ..logs.timings import Log, Run

# the phases a verdict line names first, when they changed: what cuzk's GPU path spends its time in
HEADLINE = ("ntt_kernels", "coset_intt_sync", "gpu_total_ms", "mutex_held_ms", "synth_ms", "job_total_ms")
MIN_PROOFS = 3


class Decision(StrEnum):
    """What becomes of B once the window ends (the journal's `decision`, `--then`'s answer)."""

    KEEP = "keep"  # B runs on
    ROLLBACK = "rollback"  # the build before B runs again
# A window planned for a change (--resolve) is looked at LOOKS times, at each quarter of its proofs, and ends
# at the first look where a headline phase moved at ALPHA / LOOKS: Bonferroni over the looks keeps the chance
# of calling noise a change at ALPHA or less however the looks fall, and the planned length is the one whose
# last look alone has the power at that level, so the early looks only shorten it.
LOOKS = 4


@dataclass(frozen=True)
class Side:
    """One build's runs, as the verdict reads them."""

    proofs: int
    partitions: int
    wall_s: float  # the wall time its proofs are counted over: from its warm-up's end to its window's end
    proofs_per_hour: float | None  # its proofs over wall_s (never over the span of its proof lines alone)
    phase_share: float | None
    gpu_busy: dict[str, float | None]
    where: dict[str, dict[str, float]]
    largest_idle_cause: dict[str, str | None]
    duty_cycle: dict[str, float | None] = field(default_factory=dict)  # dmon sm%: any kernel ran
    kernel_share: dict[str, float | None] = field(default_factory=dict)  # from the log's phases, 0-1


@dataclass(frozen=True)
class Verdict:
    before: Side
    after: Side
    phases: dict[str, Change]
    summary: str
    # headline phases whose change is noise (`~`): the smallest change this window could have seen
    resolution: dict[str, float | None] = field(default_factory=dict)
    withheld: str = ""  # why there is no verdict (too few proofs on a side); "": the verdict stands

    def lines(self) -> list[str]:
        """benchstat's table: one line a phase that has values on both sides; a `~` of a headline phase
        says what change it could have seen. None where the verdict is withheld: no mark means anything."""
        if self.withheld:
            return []
        width = max((len(n) for n in self.phases), default=0)
        return [c.line(name.ljust(width)) + _unseen(self.resolution.get(name, False))
                for name, c in self.phases.items()]

    def as_dict(self) -> dict[str, Any]:
        if self.withheld:  # the medians and counts as read, no change, interval, p or significance
            phases = {n: {k: getattr(c, k) for k in ("n_before", "n_after", "median_before", "median_after")}
                      for n, c in self.phases.items()}
        else:
            phases = {n: {**c.__dict__, "significant": c.significant, "line": c.line(n),
                          "resolution": self.resolution.get(n)} for n, c in self.phases.items()}
        return {"summary": self.summary, "no_verdict": self.withheld or None, "before": asdict(self.before),
                "after": asdict(self.after), "phases": phases}


def _unseen(res: float | None | bool) -> str:
    if res is False:
        return ""
    if res is None:
        return "; a change of 100% would not show either"
    return f"; a change under {res * 100:.1f}% would not show"


def side(runs: list[Run], samples: list[Sample], until: datetime | None = None) -> Side:
    """One build's figures; with `until` (when its window ended, on the host's clock) proofs/h is over the
    wall time to then, idle time included, else over the runs' own span (a saved log read alone)."""
    log = Log()
    log.runs = runs
    r = gpu.read(log, "all", samples)
    f = r.figures
    wall = wall_s(runs, until)
    return Side(proofs=f.jobs, partitions=f.partitions, wall_s=wall,
                proofs_per_hour=f.jobs / wall * 3600 if wall and f.jobs else None,
                phase_share=f.gpu_phase_share, gpu_busy=r.busy(), where={g: v.time for g, v in r.gpus.items()},
                largest_idle_cause={g: v.largest_idle_cause for g, v in r.gpus.items()},
                duty_cycle={g: v.duty_cycle for g, v in r.gpus.items()},
                kernel_share={g: v.kernel_share for g, v in r.gpus.items()})


def wall_s(runs: list[Run], until: datetime | None = None) -> float:
    """The wall time `runs` are read over: each from its warm-up's end (Run.since) or its first line to the
    next run's first line, the last to `until` (its window's end); without `until`, each run's own span
    (Run.proving_s). A daemon that proved twice in 0.3 s and then idled 10 minutes is 10 minutes here."""
    if until is None:
        return sum(run.proving_s or 0 for run in runs)
    total = 0.0
    for run, after in zip(runs, [*runs[1:], None], strict=True):
        begin = run.since or run.first_ts
        end = (after.first_ts if after else until) or run.last_ts
        if begin and end and end > begin:
            total += (end - begin).total_seconds()
    return total


def verdict(before: list[Run], after: list[Run], samples: list[Sample] | None = None,
            alpha: float = ALPHA, ends: tuple[datetime | None, datetime | None] = (None, None)) -> Verdict:
    """B (after) against A (before): every phase with values on both sides, and the headline; a change is
    significant at `alpha` (ALPHA / LOOKS after a sequential window, whose error rate that keeps). `ends`:
    when each side's window ended on the host's clock (A's: B's first line), for proofs/h over it."""
    samples = samples or []
    a, b = side(before, samples, ends[0]), side(after, samples, ends[1])
    names = sorted({n for r in before for n in r.phases} & {n for r in after for n in r.phases})
    phases = {}
    for name in names:
        va = [v for r in before for v in r.phases.get(name, ())]
        vb = [v for r in after for v in r.phases.get(name, ())]
        if max(va + vb, default=0) > 0:
            phases[name] = compare(va, vb, alpha=alpha)
    res = resolutions(before, after, phases, alpha)
    line = headline(a, b, phases)
    if not any(c.significant for c in phases.values()):  # "no change" says how small a change would have shown
        line += _unseen_summary(res)
    return Verdict(a, b, phases, line, res)


def _unseen_summary(res: dict[str, float | None]) -> str:
    """`~` is "too few proofs to know" as much as "no change": the headline says which, for the first phase."""
    for name, r in res.items():
        if r is not None:
            return f" (a change in {name} under {r * 100:.1f}% would not show in this window)"
    return ""


def resolutions(before: list[Run], after: list[Run], phases: dict[str, Change],
                alpha: float = ALPHA) -> dict[str, float | None]:
    """For each headline phase whose change is noise: the smallest change (either way) that a window of B's
    size would have shown against A's own values, at ALPHA with power POWER (swapctl.logs.power)."""
    out: dict[str, float | None] = {}
    for name in HEADLINE:
        c = phases.get(name)
        if c is None or c.p is None or c.significant or not c.median_before:  # no % change of a 0 median
            continue
        va = [v for r in before for v in r.phases.get(name, ())]
        out[name] = resolution(va, c.n_after, alpha=alpha)
    return out


def without_warmup(runs: list[Run], n: int) -> tuple[list[Run], int]:
    """`runs` with the first `n` proofs of each run that begins at the daemon's start left out (the SRS loads
    at the first proof: cuzk's first proof is slower, 116.8 s against 92.8 s in curio PR #1043), and how many
    proofs were left out. A job phase (job_*) loses its first n values, a partition phase as many values as n
    proofs have (its values per proof: its count over the run's proofs), and the time until the last of them
    ended is left out of proofs/h."""
    out, dropped = [], 0
    for r in runs:
        k = min(n, r.jobs) if r.started else 0
        if not k:
            out.append(r)
            continue
        phases = {}
        for name, values in r.phases.items():
            per = 1 if name.startswith("job_") else round(len(values) / r.jobs)
            phases[name] = values[k * per:] if len(values) >= r.jobs else values
        since = r.job_ends[k - 1] if len(r.job_ends) >= k else None  # proofs/h counts from there (Run.proving_s)
        out.append(replace(r, phases=phases, jobs=r.jobs - k, since=since))
        dropped += k
    return out, dropped


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def headline(a: Side, b: Side, phases: dict[str, Change]) -> str:
    """`ntt_kernels -61% [-64%, -58%], proofs/h +20%, GPU busy (SM activity) 66% -> 93%, duty cycle 68% ->
    99%, kernel share (log) 64% -> 93%: the copy was the bottleneck`: each figure only where both sides
    have it (no GPM: no SM activity; the log times no copy: no kernel share)."""
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
    for label, key, scale in (("GPU busy (SM activity)", "gpu_busy", 1), ("duty cycle", "duty_cycle", 1),
                              ("kernel share (log)", "kernel_share", 100)):
        pair = _both(getattr(a, key), getattr(b, key))
        if pair:
            parts.append(f"{label} {_pct(pair[0] * scale)} -> {_pct(pair[1] * scale)}")
    line = ", ".join(parts)
    cause = _cause(a, b)
    return f"{line}: {cause}" if cause else line


def _both(a: dict[str, float | None], b: dict[str, float | None]) -> tuple[float, float] | None:
    """The mean over the GPUs both sides have a figure for, before and after; None where any lacks it."""
    gpus = sorted(set(a) & set(b))
    if not gpus or any(a[g] is None or b[g] is None for g in gpus):
        return None
    return sum(a[g] or 0 for g in gpus) / len(gpus), sum(b[g] or 0 for g in gpus) / len(gpus)


def _cause(a: Side, b: Side) -> str:
    """What the breakdowns say changed: the largest idle cause before, and how much of it is left."""
    for g, cause in a.largest_idle_cause.items():
        if not cause:
            continue
        before, after = a.where.get(g, {}).get(cause, 0), b.where.get(g, {}).get(cause, 0)
        if cause == "copy" and after < before / 2:
            return f"the copy was the bottleneck ({before * 100:.0f}% of GPU {g}'s time, now {after * 100:.0f}%)"
        if after < before / 2:
            return f"{gpu.PARTS[cause]} fell from {before * 100:.0f}% to {after * 100:.0f}% of GPU {g}'s time"
        return f"GPU {g} still idles most while {gpu.PARTS[cause]} ({after * 100:.0f}% of its time)"
    return ""


@dataclass(frozen=True)
class Need:
    """What the window needs to resolve a change in the first headline phase that the baseline has."""

    phase: str
    change: float
    proofs: int | None  # None: even 100,000 values a side would not
    baseline_proofs: int
    values_per_proof: float
    alpha: float = ALPHA

    def line(self) -> str:
        what = f"a {self.change * 100:g}% change in {self.phase}"
        if self.proofs is None:
            return f"{what} is under what this daemon's spread lets any window resolve"
        line = (f"B needs {self.proofs} proofs to resolve {what} (alpha {self.alpha:g}, power 0.8, from the "
                f"baseline's spread)")
        if self.baseline_proofs < self.proofs:
            line += (f"; the baseline has {self.baseline_proofs}, so the verdict will say what it could resolve "
                     f"(--proofs {self.proofs} measures each side until it has that many)")
        return line


def need(baseline: list[Run], change: float, looks: int = 1) -> Need | None:
    """The proofs a side needs to resolve `change` (0.03: 3%) in the first headline phase with values, at
    ALPHA / looks (a sequential window's level at each look)."""
    for name in HEADLINE:
        values = [v for r in baseline for v in r.phases.get(name, ())]
        jobs = sum(r.jobs for r in baseline)
        if len(values) >= 4 and jobs:
            per = len(values) / jobs
            alpha = ALPHA / looks
            return Need(name, change, proofs_needed(values, change, per, alpha=alpha), jobs, per, alpha)
    return None


def moved(before: list[Run], after: list[Run], looks: int = LOOKS) -> str | None:
    """At a look of a sequential window: the first headline phase whose change is significant at
    ALPHA / looks, or None (go on)."""
    for name in HEADLINE:
        va = [v for r in before for v in r.phases.get(name, ())]
        vb = [v for r in after for v in r.phases.get(name, ())]
        if moves(va, vb, ALPHA / looks):
            return name
    return None


def enough(s: Side, min_proofs: int = MIN_PROOFS) -> bool:
    return s.proofs >= min_proofs


def withhold(v: Verdict, min_proofs: int = MIN_PROOFS) -> Verdict:
    """`v`, or no verdict where a side has fewer than `min_proofs` proofs (counted as the verdict counts them,
    the warm-up left out): its summary says why, and nothing in it is marked significant or noise."""
    short = [f"{who} made {s.proofs} proof{'s' * (s.proofs != 1)}{where} after its warm-up"
             for who, s, where in (("the build before", v.before, ""), ("B", v.after, " in the window"))
             if not enough(s, min_proofs)]
    if not short:
        return v
    why = f"{' and '.join(short)} (need {min_proofs} a side): too few to judge"
    return replace(v, summary=f"no verdict: {why}", resolution={}, withheld=why)
