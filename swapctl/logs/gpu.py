"""What the GPU itself said during a daemon run, beside what the log says. Three figures, each named
for what it is:
- GPU busy = SM activity: the share of the GPU's SMs busy, from its activity counters (GPM, `dmon
  --gpm-metrics`), a true average over each second; None where the GPU or driver has no GPM;
- duty cycle: `dmon` sm% (`utilization.gpu`), the share of each sample period in which any kernel ran;
- kernel share from the log: the GPU phases less the host-to-device copy and the barrier waits, over
  wall time, per GPU (only where the log times the copy: the stand-in's `h2d_copy_ms`).
Where the time goes comes from the log's phases alone (kernels, copy, barrier, waiting for synthesis,
queued); the counters check it. PCIe RX comes from GPM where there, as MiB per partition too.

A run's TIMELINE offsets become wall time through its epoch (`Run.epoch`: the first tracing timestamp
after a TIMELINE line, less that line's offset). A dmon reading stamped t stands for the second before
t, its GPM values for [t - 1.5 s, t - 0.5 s) (GPM_LAG: on an H200 dmon's GPM readings matched a 200 ms
NVML reader best 0.4-0.8 s earlier than the stamp).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..gpu.samples import DMON, Sample
from .gpu_figures import PARTS, Cycle, GpuFigures, GpuReport
from .timings import GpuTime, Log, Run, RunReport

__all__ = ["PARTS", "GpuFigures", "GpuReport", "gpu_view", "read", "run_window"]

GPM_LAG = timedelta(milliseconds=500)  # a GPM reading stamped t: [t - 1 s - GPM_LAG, t - GPM_LAG)
DUTY_S = 1.0  # a duty-cycle reading stamped t: the second before t
BOOTSTRAP = 2000  # resamples of whole-cycle blocks for SM activity's interval
MIN_BLOCKS = 4  # fewer blocks of whole cycles than this in the window: no interval
# dmon prints GPM values in whole percents and stamps whole seconds (it skips one now and then): a
# reading's own resolution, added to each side of the interval (on an H200, one reading against the
# 200 ms NVML reader over the same second differed by 0.3-0.8 points on average)
RESOLUTION = 1.0

def merged(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals, as sorted disjoint intervals."""
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(spans: Sequence[tuple[float, float]]) -> float:
    return sum(e - s for s, e in spans)


def overlap(spans: Sequence[tuple[float, float]], lo: float, hi: float) -> float:
    """How much of [lo, hi) the disjoint sorted intervals cover."""
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in spans if s < hi and e > lo)


def clip(spans: Sequence[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(s, lo), min(e, hi)) for s, e in spans if s < hi and e > lo]


def minus(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """a less b, both disjoint and sorted."""
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def queued_spans(run: Run) -> list[tuple[float, float]]:
    """When at least one partition waited in the GPU queue (GPU_QUEUE .. GPU_PICKUP)."""
    # at one offset a queueing comes before the pick-up (a partition is queued, then taken at once)
    events = sorted([(o, 1) for o in run.queued] + [(o, -1) for o in run.picked], key=lambda e: (e[0], -e[1]))
    spans, depth, since = [], 0, 0.0
    for at, step in events:
        if step > 0:
            if depth == 0:
                since = at
            depth += 1
        elif depth > 0:  # a pick-up of a partition queued before the log began: nothing to close
            depth -= 1
            if depth == 0:
                spans.append((since, at))
    return spans


def run_window(run: Run) -> tuple[datetime, datetime] | None:
    """The run's wall-clock window: its TIMELINE span through its epoch, else its first and last lines."""
    if run.epoch and run.timeline_first_ms is not None and run.timeline_last_ms is not None:
        return (run.epoch + timedelta(milliseconds=run.timeline_first_ms),
                run.epoch + timedelta(milliseconds=run.timeline_last_ms))
    if run.first_ts and run.last_ts and run.last_ts > run.first_ts:
        return run.first_ts, run.last_ts
    return None


def gpu_starts(run: Run, workers: Iterable[int]) -> list[float]:
    """The offsets at which the GPU's partitions began (GPU_START), in order."""
    return sorted(s for w in workers for s, _ in run.timeline.phases_of(w))


def cycle_ms(starts: Sequence[float]) -> Cycle | None:
    """One partition's cycle on the GPU, GPU_START to the next: p50 and its range over the run."""
    gaps = sorted(b - a for a, b in zip(starts, starts[1:], strict=False))
    if not gaps:
        return None
    return Cycle(gaps[len(gaps) // 2], gaps[0], gaps[-1], len(gaps))


def _copy_ms(run: Run, gpus: dict[str, GpuTime], d: GpuTime) -> float | None:
    """This GPU's host-to-device copy time from the log (h2d_copy_ms); lines name no GPU, so with
    several GPUs each gets a share by held time. None where the log does not time the copy."""
    values = run.phases.get("h2d_copy_ms")
    if values is None:
        return None
    held_all = sum(x["held_ms"] for x in gpus.values())
    return float(sum(values)) * (d["held_ms"] / held_all if len(gpus) > 1 and held_all else 1.0)


def log_parts(run: Run, gpus: dict[str, GpuTime], d: GpuTime) -> dict[str, float]:
    """Where one GPU's wall time went, in ms, from the log's phases alone."""
    first, last = run.timeline_first_ms or 0.0, run.timeline_last_ms or 0.0
    phases = clip(merged(iv for w in d["workers"] for iv in run.timeline.phases_of(w)),
                  first, last)
    in_phase = length(phases)
    outside = minus([(first, last)], phases)
    queued = clip(merged(queued_spans(run)), first, last)
    barrier = float(sum(run.phases.get("barrier_wait_ms", ())))
    held_all = sum(x["held_ms"] for x in gpus.values()) or 1.0
    barrier_g = min(in_phase, barrier * d["held_ms"] / held_all)
    parts = {"synthesis": length(minus(outside, queued)), "queued": overlap_all(outside, queued),
             "barrier": barrier_g}
    copy = _copy_ms(run, gpus, d)
    if copy is None:
        parts["gpu_phase"] = in_phase - barrier_g
    else:
        parts["copy"] = min(copy, in_phase - barrier_g)
        parts["kernels"] = in_phase - barrier_g - parts["copy"]
    return parts


def partitions(run: Run, d: GpuTime) -> list[tuple[float, float, float]] | None:
    """Each of one GPU's partitions as (GPU_START, GPU_END, copy ms), in order: the log's h2d_copy_ms
    lines follow the GPU phases one for one (one GPU). None where they do not pair up."""
    spans = sorted((e, s) for w in d["workers"] for s, e in run.timeline.phases_of(w))
    copies = run.phases.get("h2d_copy_ms")
    if copies is None or len(copies) != len(spans):
        return None
    return [(s, e, float(c)) for (e, s), c in zip(spans, copies, strict=True)]


def kernel_share_in(run: Run, d: GpuTime, lo: float, hi: float) -> float | None:
    """The log's kernel share over offsets [lo, hi): each partition's GPU phase less its copy, which
    comes first in the phase (cuzk's ntt_kernels starts with it)."""
    parts = partitions(run, d)
    if not parts or hi <= lo:
        return None
    kernels = sum(max(0.0, min(e, hi) - max(s + c, lo)) for s, e, c in parts)
    return kernels / (hi - lo)


def gpu_view(run: Run, samples: list[Sample]) -> dict[str, GpuFigures]:
    """Per GPU of the run (the log's GPU ordinal): the three figures, where its wall time went (from the
    log, fractions adding up to 1), its partition cycle, and what the counters said over the window."""
    gpus = run.gpus()
    wall = run.wall_ms
    if not gpus or run.timeline_first_ms is None or run.timeline_last_ms is None or not wall:
        return {}
    bounds = run_window(run)
    out = {}
    for g, d in gpus.items():
        parts = log_parts(run, gpus, d)
        time = {k: v / wall for k, v in sorted(parts.items(), key=lambda kv: -kv[1])}
        starts = gpu_starts(run, d["workers"])
        view = GpuFigures(time, kernel_share=time.get("kernels"), copy_share=time.get("copy"),
                          cycle_ms=cycle_ms(starts), window=(_iso(bounds[0]), _iso(bounds[1])) if bounds else None)
        out[g] = counters(view, samples, int(g) if g.isdecimal() else -1, bounds,
                          [run.epoch + timedelta(milliseconds=o) for o in starts] if run.epoch else [])
    return out


def _inside(samples: Iterable[Sample], gpu: int, a: datetime, b: datetime, lag: timedelta,
            period: timedelta) -> list[Sample]:
    return [s for s in samples if s.gpu == gpu and s.source == DMON and s.time
            and s.time - period - lag >= a and s.time - lag <= b]


def counters(view: GpuFigures, samples: list[Sample], gpu: int, bounds: tuple[datetime, datetime] | None,
             starts: list[datetime]) -> GpuFigures:
    """`view` with what the GPU's counters said over the window: readings whose whole period lies inside it."""
    if not bounds:
        return view
    second = timedelta(seconds=DUTY_S)
    duty = _inside(samples, gpu, bounds[0], bounds[1], timedelta(0), second)
    lagged, firsts = _inside(samples, gpu, bounds[0], bounds[1], GPM_LAG, second), _gpm_starts(samples, gpu)
    gpm = [s for s in lagged if s.sm_act_pct is not None and id(s) not in firsts]  # firsts once, not per reading
    view = replace(view, samples=len(duty), duty_cycle=_mean([s.sm_pct for s in duty if s.sm_pct is not None]),
                   dropped=sum(s.dropped for s in lagged))
    if not gpm:
        return view
    act = [s.sm_act_pct for s in gpm if s.sm_act_pct is not None]
    first, last = gpm[0].time, gpm[-1].time
    assert first is not None and last is not None  # _inside keeps timed readings only
    span = (first - second - GPM_LAG, last - GPM_LAG)
    rx = [s.gpm_rx_mibps for s in gpm if s.gpm_rx_mibps is not None]
    parts = sum(1 for t in starts if span[0] <= t < span[1])
    cycle = view.cycle_ms
    return replace(view, busy_mean=_mean(act), busy_span=(_iso(span[0]), _iso(span[1])),
                   busy_interval=block_interval(act, cycle.p50 / 1000 if cycle else None),
                   sm_occupancy=_mean([s.sm_occ_pct for s in gpm if s.sm_occ_pct is not None]),
                   rx_gpm_mibps=_mean(rx), rx_per_partition_mib=sum(rx) * DUTY_S / parts if rx and parts else None)


def _gpm_starts(samples: list[Sample], gpu: int) -> set[int]:
    """The first GPM reading of each dmon run (after its '-' readings, or a gap): it averages over a
    period that began before dmon's, not over the second before it (on an H200: 76% in a run of 95%)."""
    firsts, before = set(), None
    for s in samples:
        if s.gpu != gpu or s.source != DMON or s.time is None:
            continue
        if s.sm_act_pct is not None and (before is None or before.sm_act_pct is None
                                         or s.time - before.time > timedelta(seconds=2.5)):  # type: ignore[operator]
            firsts.add(id(s))
        before = s
    return firsts


def block_length(cycle_s: float) -> int:
    """Readings (1 s each) in a block of whole cycles: the fewest, at least 2, within 0.15 s of a whole
    number of cycles (a 1.9 s cycle: 2 readings; 1.33 s: 4 readings, three cycles)."""
    for k in range(1, 7):
        n = round(k * cycle_s)
        if n >= 2 and abs(k * cycle_s - n) <= 0.15:
            return n
    return max(2, round(6 * cycle_s))


def block_interval(values: Sequence[float], cycle_s: float | None) -> tuple[float, float] | None:
    """The 95% interval of the mean of 1 s true averages by a circular block bootstrap over whole cycles
    (seeded: the same data gives the same interval), widened by the readings' RESOLUTION. None without a
    cycle or with too few blocks."""
    if not cycle_s or cycle_s <= 0:
        return None
    n, block = len(values), block_length(cycle_s)
    if n < MIN_BLOCKS * block:
        return None
    rng = random.Random(0)
    means = []
    for _ in range(BOOTSTRAP):
        total = 0.0
        for _ in range(n // block):
            at = rng.randrange(n)
            total += sum(values[(at + i) % n] for i in range(block))
        means.append(total / (n // block * block))
    means.sort()  # a share: widened by the resolution, it still lies within 0-100%
    return (max(0.0, means[int(0.025 * BOOTSTRAP)] - RESOLUTION),
            min(100.0, means[int(0.975 * BOOTSTRAP) - 1] + RESOLUTION))


def overlap_all(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    return sum(overlap(b, s, e) for s, e in a)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


WEIGHED = ("busy_mean", "duty_cycle", "kernel_share", "copy_share", "sm_occupancy", "rx_gpm_mibps",
           "rx_per_partition_mib")


def combine(views: list[dict[str, GpuFigures]], walls: list[float]) -> dict[str, GpuFigures]:
    """Several runs' views, each GPU's figures weighted by the runs' wall times (a figure over the runs
    that have it); an interval, a span, a cycle and a window only for one run, where they mean what they say."""
    result = {}
    for g in dict.fromkeys(g for view in views for g in view):  # in the order the runs name them
        mine = [(view[g], wall) for view, wall in zip(views, walls, strict=False) if g in view]
        total = sum(wall for _, wall in mine)
        time: dict[str, float] = {}
        for v, wall in mine:
            for k, f in v.time.items():
                time[k] = time.get(k, 0.0) + f * wall
        weighed: dict[str, Any] = {}
        for k in WEIGHED:
            have = [(getattr(v, k), wall) for v, wall in mine if getattr(v, k) is not None]
            weight = sum(wall for _, wall in have)
            weighed[k] = sum(x * wall for x, wall in have) / weight if weight else None
        one = mine[0][0] if len(mine) == 1 else GpuFigures({})
        result[g] = GpuFigures(
            {k: v / total for k, v in sorted(time.items(), key=lambda kv: -kv[1])},
            samples=sum(v.samples for v, _ in mine), dropped=sum(v.dropped for v, _ in mine), runs=len(mine),
            busy_interval=one.busy_interval, busy_span=one.busy_span, cycle_ms=one.cycle_ms, window=one.window,
            **weighed)
    return result


def read(log: Log, which: str | int = "all", samples: list[Sample] | None = None,
         figures: RunReport | None = None) -> GpuReport:
    """The log's figures (Log.figures; `figures`, where its caller has them already) with the GPU's: per
    run and GPU, and per GPU over the runs chosen."""
    runs = log.select(which)
    views = [gpu_view(r, samples or []) for r in runs]
    return GpuReport(figures or log.figures(which), views, combine(views, [r.wall_ms or 0.0 for r in runs]),
                     sampled=bool(samples))

