"""What the GPU itself said during a daemon run, beside what the log says: GPU busy from the GPU's own
counters (nvidia-smi dmon sm%), PCIe RX inside and outside the GPU phases, and where each GPU's wall
time went, in parts that add up to 100%.

A run's TIMELINE offsets become wall time through its epoch (`Run.epoch`: the first tracing timestamp
after a TIMELINE line, less that line's offset). A dmon sample stamped t covers the second before t.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..gpu.samples import DMON, Sample, phase_split, window
from .timings import Run, _pairs

# RX inside the GPU phases this many times that outside them, and at least this rate: the phases wait
# for host-to-device copies (a pageable copy runs far below the link's rate while SMs idle)
COPY_RX_RATIO = 2.0
COPY_RX_MIN_MBPS = 100.0
SAMPLE_MS = 1000.0
PURE = 0.9  # of a reading's second inside (or outside) the GPU phases, to count as inside (outside)

PARTS = {
    "kernels": "kernels running (the GPU's own sm%)",
    "copy_wait": "GPU phase, no kernel: waiting for the host-to-device copy (RX high in the phases)",
    "phase_no_kernel": "GPU phase, no kernel running",
    "gpu_phase": "GPU phase (no GPU samples to split it into kernels and the rest)",
    "barrier": "barrier waits inside the GPU phase (GPU waits for CPU preparation)",
    "synthesis": "waiting for synthesis: nothing queued for the GPU",
    "queued": "a partition queued, none in the GPU phase yet (host preparation, lock hand-over)",
}


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


def gpu_view(run: Run, samples: list[Sample]) -> dict[str, dict]:
    """Per GPU of the run (the log's GPU ordinal): GPU busy from its samples over the run's window, RX
    in and outside its GPU phases, and where its wall time went (fractions adding up to 1)."""
    gpus = run.gpus()
    first, last = run.timeline_first_ms, run.timeline_last_ms
    wall = run.wall_ms
    if not gpus or first is None or last is None or not wall:
        return {}
    bounds = run_window(run)
    queued = clip(merged(queued_spans(run)), first, last)
    barrier = float(sum(run.phases.get("barrier_wait_ms", ())))
    held_all = sum(d["held_ms"] for d in gpus.values()) or 1.0
    out = {}
    for g, d in gpus.items():
        phases = clip(merged(iv for w in d["workers"] for iv in _pairs(run.intervals.get(str(w).encode(), ()))),
                      first, last)
        in_phase = length(phases)
        outside = minus([(first, last)], phases)
        parts = {"synthesis": length(minus(outside, queued)), "queued": overlap_all(outside, queued)}
        view: dict[str, Any] = {
                "window": [_iso(t) for t in bounds] if bounds else None, "samples": 0, "busy_mean": None,
                "busy_p50": None, "busy_error": None, "rx_in_phase_mbps": None, "rx_outside_mbps": None,
                "rx_samples": [0, 0]}
        mine = [s for s in samples if g.isdigit() and s.gpu == int(g) and s.source == DMON and s.time]
        if bounds and mine and run.epoch:
            end = bounds[1] + timedelta(milliseconds=SAMPLE_MS)
            w = window(mine, bounds[0], end, int(g))
            inside = [s for s in mine if s.time and bounds[0] <= s.time < end]
            view.update(samples=w.count, busy_mean=w.sm_mean, busy_p50=w.sm_p50, busy_error=busy_error(inside))
            rx_in, rx_out, n_in, n_out = _rx(mine, run.epoch, phases, first, last, int(g))
            view.update(rx_in_phase_mbps=rx_in, rx_outside_mbps=rx_out, rx_samples=[n_in, n_out])
        barrier_g = min(in_phase, barrier * d["held_ms"] / held_all)
        if view["busy_mean"] is not None:
            kernels = min(in_phase - barrier_g, view["busy_mean"] / 100 * wall)
            rest = in_phase - barrier_g - kernels
            rx_in, rx_out = view["rx_in_phase_mbps"], view["rx_outside_mbps"]
            copy = rx_in is not None and rx_in >= COPY_RX_MIN_MBPS and rx_in >= COPY_RX_RATIO * (rx_out or 0)
            parts.update({"kernels": kernels, "copy_wait" if copy else "phase_no_kernel": rest})
        else:
            parts["gpu_phase"] = in_phase - barrier_g
        parts["barrier"] = barrier_g
        view["time"] = {k: v / wall for k, v in sorted(parts.items(), key=lambda kv: -kv[1])}
        idle = {k: v for k, v in view["time"].items() if k != "kernels" and k != "gpu_phase"}
        view["largest_idle_cause"] = max(idle, key=lambda k: idle[k]) if idle and view["busy_mean"] is not None \
            else None
        out[g] = view
    return out


def overlap_all(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    return sum(overlap(b, s, e) for s, e in a)


def _rx(samples: list[Sample], epoch: datetime, phases: list[tuple[float, float]], first: float,
        last: float, gpu: int) -> tuple[float | None, float | None, int, int]:
    """Mean RX MB/s of the readings at least PURE inside the GPU phases, and of those at least PURE
    outside them, over the log's timeline; with how many of each."""
    at = [(epoch + timedelta(milliseconds=lo), epoch + timedelta(milliseconds=hi)) for lo, hi in phases]
    half = timedelta(milliseconds=SAMPLE_MS / 2)  # a dmon reading stands for its second +-0.5 s: all inside
    split = phase_split(samples, at, epoch + timedelta(milliseconds=first) + half,
                        epoch + timedelta(milliseconds=last) - half, gpu, DMON, pure=PURE)
    return split.inside_rx_mbps, split.outside_rx_mbps, int(split.inside_n), int(split.outside_n)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def busy_error(samples: list[Sample]) -> float | None:
    """The 95% interval's half-width of mean sm% (normal approximation): readings swing between 0 and
    99 within a second, so a mean over a few dozen of them is uncertain by several points."""
    sm = [s.sm_pct for s in samples if s.sm_pct is not None]
    if len(sm) < 2:
        return None
    m = sum(sm) / len(sm)
    sd = (sum((v - m) ** 2 for v in sm) / (len(sm) - 1)) ** 0.5
    return 1.96 * sd / len(sm) ** 0.5


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def combine(views: list[dict[str, dict]], walls: list[float]) -> dict[str, dict]:
    """Several runs' views, each GPU's figures weighted by the runs' wall times."""
    out: dict[str, dict] = {}
    for view, wall in zip(views, walls, strict=False):
        for g, v in view.items():
            acc = out.setdefault(g, {"wall": 0.0, "busy_w": 0.0, "busy_wall": 0.0, "time": {}, "samples": 0})
            acc["wall"] += wall
            acc["samples"] += v["samples"]
            if v["busy_mean"] is not None:
                acc["busy_w"] += v["busy_mean"] * wall
                acc["busy_wall"] += wall
            for k, f in v["time"].items():
                acc["time"][k] = acc["time"].get(k, 0.0) + f * wall
    result = {}
    for g, acc in out.items():
        time = {k: v / acc["wall"] for k, v in sorted(acc["time"].items(), key=lambda kv: -kv[1])}
        idle = {k: v for k, v in time.items() if k not in ("kernels", "gpu_phase")}
        busy = acc["busy_w"] / acc["busy_wall"] if acc["busy_wall"] else None
        result[g] = {"samples": acc["samples"], "busy_mean": busy, "time": time,
                     "largest_idle_cause": max(idle, key=lambda k: idle[k]) if idle and busy is not None else None}
    return result


def report(log, which: str | int = "all", samples: list[Sample] | None = None) -> dict:
    """The log's report (timings.Log.report) with, where there are GPU samples, what the GPU said:
    `gpu_busy` per GPU (the GPU's own sm%, over each run's window) and `where_time_goes` per GPU."""
    result = log.report(which)
    samples = samples or []
    runs = log.select(which)
    views = [gpu_view(r, samples) for r in runs]
    for row, view in zip(result["runs"], views, strict=False):
        row["gpu_busy"] = {g: v["busy_mean"] for g, v in view.items()}
        row["where_time_goes"] = {g: v["time"] for g, v in view.items()}
    combined = combine(views, [r.wall_ms or 0.0 for r in runs])
    rx: dict[str, list[float]] = {}
    for view, r in zip(views, runs, strict=False):
        for g, v in view.items():
            acc = rx.setdefault(g, [0.0, 0.0, 0.0, 0.0])
            for i, key in ((0, "rx_in_phase_mbps"), (2, "rx_outside_mbps")):
                if v[key] is not None:
                    acc[i] += v[key] * (r.wall_ms or 0)
                    acc[i + 1] += r.wall_ms or 0
    result["gpu_busy"] = None if not samples else {
        g: {"busy_mean": c["busy_mean"], "samples": c["samples"],
            "busy_p50": views[-1].get(g, {}).get("busy_p50") if len(views) == 1 else None,
            "busy_error": views[-1].get(g, {}).get("busy_error") if len(views) == 1 else None,
            "rx_in_phase_mbps": rx[g][0] / rx[g][1] if rx[g][1] else None,
            "rx_outside_mbps": rx[g][2] / rx[g][3] if rx[g][3] else None}
        for g, c in combined.items()}
    result["gpu_busy_is"] = "nvidia-smi dmon sm%: the share of each second in which a kernel ran, per GPU"
    result["where_time_goes"] = {g: {"parts": c["time"], "largest_idle_cause": c["largest_idle_cause"]}
                                 for g, c in combined.items()}
    result["where_time_goes_parts"] = PARTS
    return result
