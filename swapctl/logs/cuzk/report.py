"""The figures of one run or of several, as `swapctl timings --json` prints them, and before/after."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .fields import VALUE, Phases, extend

if TYPE_CHECKING:
    from .run import Run

PHASE_SHARE = ("sum(mutex_held_ms - barrier_wait_ms) / wall time, per GPU: the time partitions hold the GPU, "
               "a copy from pageable memory included; not how busy the GPU is")
SHARES = ("gpu_phase_share", "timeline_share")


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """count, p50 (the median), nearest-rank p95 and max. The values are counted, not sorted: a phase
    has few distinct values (whole ms, mostly), so millions of them take kilobytes, not a list."""
    counts = sorted(Counter(values).items())
    n = sum(c for _, c in counts)
    if not n:
        return {"count": 0, "p50": None, "p95": None, "max": None}
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
    return {"count": n, "p50": (low + high) / 2, "p95": p95, "max": top}


def share(busy: float, wall: float) -> float | None:
    """busy / wall, at most 1; None without a wall time."""
    return min(1.0, busy / wall) if wall else None


def iso(t: datetime | None) -> str | None:
    """An aware time as ISO 8601 with a Z."""
    return t.isoformat().replace("+00:00", "Z") if t else None


def _mean_share(gpus: dict[str, dict[str, Any]], key: str) -> float | None:
    values = [d[key] for d in gpus.values() if d[key] is not None]
    return sum(values) / len(values) if values else None


class _Totals:
    """Each GPU's busy, timeline and wall time over the runs it ran in, so no share exceeds 100%."""

    def __init__(self) -> None:
        self.per_gpu: dict[str, dict[str, float]] = {}
        self.gpu_wall = 0.0

    def add(self, r: Run, wall: float) -> dict[str, dict[str, Any]]:
        """Adds one run; returns its shares per GPU."""
        gpus = r.gpus()
        barrier = float(sum(r.phases.get("barrier_wait_ms", ())))
        held = sum(d["held_ms"] for d in gpus.values()) or 1.0
        row: dict[str, dict[str, Any]] = {}
        for g, d in gpus.items():
            busy = d["held_ms"] - barrier * d["held_ms"] / held  # barrier lines name no GPU: shared by held time
            acc = self.per_gpu.setdefault(g, {"busy_ms": 0.0, "timeline_ms": 0.0, "wall_ms": 0.0, "partitions": 0})
            acc["busy_ms"] += busy
            acc["timeline_ms"] += d["timeline_ms"]
            acc["wall_ms"] += wall
            acc["partitions"] += d["phases"]
            row[g] = {"gpu_phase_share": share(busy, wall), "timeline_share": share(d["timeline_ms"], wall)}
            self.gpu_wall += wall
        return row

    def gpus(self) -> dict[str, dict[str, Any]]:
        """Per GPU: its shares over all the runs, and its partitions."""
        return {g: {"gpu_phase_share": share(a["busy_ms"], a["wall_ms"]),
                    "timeline_share": share(a["timeline_ms"], a["wall_ms"]),
                    "partitions": int(a["partitions"])} for g, a in sorted(self.per_gpu.items())}

    def overall(self, key: str) -> float | None:
        """One share over every GPU of every run."""
        return share(sum(a[key] for a in self.per_gpu.values()), self.gpu_wall)


def _run_row(i: int, r: Run, gpus: dict[str, dict[str, Any]]) -> dict[str, Any]:
    partitions = r.pinned + r.pageable
    return {
        "run": i + 1, "started": r.started, "first_ts": iso(r.first_ts), "last_ts": iso(r.last_ts),
        "epoch": iso(r.epoch), "wall_ms": r.wall_ms, "jobs": r.jobs, "partitions": partitions,
        "pageable_share": r.pageable / partitions if partitions else None,
        "gpus": gpus, "gpu_phase_share": _mean_share(gpus, "gpu_phase_share"),
        "timeline_share": _mean_share(gpus, "timeline_share"),
    }


def _starved(phases: Phases, summary: dict[str, dict[str, Any]], gaps: array[float]) -> dict[str, Any]:
    """Signs of a GPU waiting for work: no wait for the GPU's mutex, and gaps between partitions."""
    gpu = (summary.get("gpu_total_ms") or summary.get("gpu_ms") or {}).get("p50")
    mutex_wait = summary.get("mutex_wait_ms", {})
    gap_s = summarize(gaps) if gaps else None
    return {
        "mutex_wait_p50_ms": mutex_wait.get("p50"),
        "barrier_wait_nonzero": sum(1 for v in phases.get("barrier_wait_ms", ()) if v > 0),
        "barrier_wait_p95_ms": summary.get("barrier_wait_ms", {}).get("p95"),
        "gap_between_partitions_ms": gap_s,
        "likely": bool(mutex_wait and mutex_wait["p50"] is not None and mutex_wait["p50"] < 1 and gap_s
                       and gap_s["p50"] > 0 and (gpu is None or gap_s["p50"] > 0.1 * gpu)),
    }


def report(runs: list[Run]) -> dict[str, Any]:
    """The figures of one run or of several: phases over all their values; shares by wall time, each
    GPU's over the runs it ran in, so no share exceeds 100%."""
    phases: Phases = {}
    for r in runs:
        extend(phases, r.phases)
    summary = {name: summarize(values) for name, values in sorted(phases.items())}
    gaps: array[float] = array("d")
    totals, rows, wall_total = _Totals(), [], 0.0
    for i, r in enumerate(runs):
        wall = r.wall_ms or 0.0
        wall_total += wall
        gaps.extend(r.gaps())
        rows.append(_run_row(i, r, totals.add(r, wall)))
    pinned, pageable = sum(r.pinned for r in runs), sum(r.pageable for r in runs)
    partitions = pinned + pageable
    synth = summary.get("synth_ms", {}).get("p50")
    gpu = (summary.get("gpu_total_ms") or summary.get("gpu_ms") or {}).get("p50")
    return {
        "runs": rows,
        "phases": summary,
        "gpu_phase_share": totals.overall("busy_ms"),
        "gpu_phase_share_is": PHASE_SHARE,
        "timeline_share": totals.overall("timeline_ms"),
        "gpus": totals.gpus(),
        "wall_ms": wall_total or None,
        "jobs": sum(r.jobs for r in runs),
        "partitions": partitions,
        "pageable_share": pageable / partitions if partitions else None,
        "synth_to_gpu_ratio": synth / gpu if synth and gpu else None,
        "starved": _starved(phases, summary, gaps),
        "lines": sum(r.lines for r in runs),
        "skipped_lines": sum(r.skipped_lines for r in runs),
    }


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Each phase's p50 before and after, with the change in %; the shares before and after."""
    rows = {}
    for name in sorted(set(before["phases"]) | set(after["phases"])):
        b = before["phases"].get(name, {}).get("p50")
        a = after["phases"].get(name, {}).get("p50")
        rows[name] = {"before_p50": b, "after_p50": a,
                      "change_pct": (a - b) / b * 100 if a is not None and b else None}
    gpu_busy = {g: {"before": (before.get("gpu_busy") or {}).get(g, {}).get("busy_mean"),
                    "after": (after.get("gpu_busy") or {}).get(g, {}).get("busy_mean")}
                for g in sorted(set(before.get("gpu_busy") or {}) | set(after.get("gpu_busy") or {}))}
    return {"phases": rows, **{k: {"before": before[k], "after": after[k]} for k in SHARES}, "gpu_busy": gpu_busy}
