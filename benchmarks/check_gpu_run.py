#!/usr/bin/env python3
"""swapctl's GPU figures for one saved GPU run (benchmarks/gpu_experiment.py's files) beside the
independent readers over the same windows: the pynvml GPM reader (gpm-200ms.csv: 200 ms true averages
of SM activity, PCIe RX, and utilization.gpu at each end) and an independent `nvidia-smi dmon -s ut`.
For each run of the log, over the span swapctl's SM activity covers: swapctl's SM activity, duty cycle
and kernel share from the log, each beside the reader; whether swapctl's interval covers the reader;
the pinned copy share; the GPM RX per partition against the partition's bytes. Prints JSON.
    python3 benchmarks/check_gpu_run.py DIR...     (DIR: an unpacked OUT/TAG.tar.gz)"""

from __future__ import annotations

import csv
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from swapctl.gpu.samples import parse_dmon, read_samples  # noqa: E402
from swapctl.logs.gpu import kernel_share_in, read  # noqa: E402
from swapctl.logs.timings import parse  # noqa: E402


def gpm_rows(path: Path) -> list[dict]:
    """The GPM reader's rows: each a true average over [t_start, t_end)."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    rows = []
    for r in csv.DictReader(lines):
        try:
            rows.append({"start": _t(r["t_start_utc"]), "end": _t(r["t_end_utc"]),
                         **{k: float(r[k]) for k in ("sm_util", "sm_occ", "pcie_rx_mibps", "util_gpu_snapshot")}})
        except (KeyError, ValueError, TypeError):
            continue
    return rows


def _t(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def gpm_mean(rows: list[dict], start: datetime, end: datetime, key: str) -> float | None:
    """The time-weighted mean of `key` over [start, end): each row counts for its overlap."""
    total = weight = 0.0
    for r in rows:
        w = (min(r["end"], end) - max(r["start"], start)).total_seconds()
        if w > 0 and r[key] == r[key]:
            total += w * r[key]
            weight += w
    return total / weight if weight else None


def _r(v: float | None, n: int = 1) -> float | None:
    return None if v is None else round(v, n)


def check(out: Path) -> dict:
    out = Path(out)
    samples = read_samples([out / "gpu-samples.dmon"])
    theirs = parse_dmon((out / "dmon-independent.txt").read_text()) if (out / "dmon-independent.txt").exists() else []
    rows = gpm_rows(out / "gpm-200ms.csv") if (out / "gpm-200ms.csv").exists() else []
    conf = (out / "config.toml").read_text() if (out / "config.toml").exists() else ""
    mib = int(m[1]) if (m := re.search(r"partition_mib = (\d+)", conf)) else None
    log = parse([open(out / "cuzk.log", "rb")])
    rep = read(log, "all", samples).as_dict()
    result: dict = {"name": out.name, "partition_mib": mib, "runs": []}
    for i, (run, row) in enumerate(zip(log.runs, rep["runs"], strict=False), 1):
        v = row["gpu"].get("0")
        if not v or not v["busy_span"] or not run.epoch:
            result["runs"].append({"run": i, "error": "no SM activity from the sampler"})
            continue
        a, b = (_t(x) for x in v["busy_span"])
        lo, hi = ((t - run.epoch).total_seconds() * 1000 for t in (a, b))
        reader = gpm_mean(rows, a, b, "sm_util")
        log_share = kernel_share_in(run, run.gpus()["0"], lo, hi)
        interval = v["busy_interval"]
        ind = [s.sm_pct for s in theirs if s.time and a <= s.time - timedelta(seconds=1) and s.time <= b
               and s.sm_pct is not None]
        result["runs"].append({
            "run": i, "build": "pageable" if run.pageable else "pinned", "span": v["busy_span"],
            "cycle_ms": v["cycle_ms"], "partitions": row["partitions"],
            "sm_activity": _r(v["busy_mean"]), "reader_sm_activity": _r(reader),
            "sm_activity_gap": _r(v["busy_mean"] - reader) if reader is not None else None,
            "interval": [_r(x) for x in interval] if interval else None,
            "interval_covers_reader": (interval[0] <= reader <= interval[1]) if interval and reader is not None
            else None,
            "kernel_share_log_in_span": _r(log_share * 100 if log_share is not None else None),
            "kernel_share_gap_to_reader": _r(log_share * 100 - reader) if log_share is not None and reader else None,
            "kernel_share_log_run": _r(v["kernel_share"] * 100 if v["kernel_share"] is not None else None),
            "copy_share": _r(v["copy_share"] * 100 if v["copy_share"] is not None else None),
            "duty_cycle": _r(v["duty_cycle"]), "reader_util_gpu": _r(gpm_mean(rows, a, b, "util_gpu_snapshot")),
            "independent_dmon_duty_cycle": _r(sum(ind) / len(ind) if ind else None),
            "rx_gpm_mibps": _r(v["rx_gpm_mibps"], 0), "reader_rx_mibps": _r(gpm_mean(rows, a, b, "pcie_rx_mibps"), 0),
            "rx_per_partition_mib": _r(v["rx_per_partition_mib"], 0),
            "rx_per_partition_over_bytes": _r(v["rx_per_partition_mib"] / mib, 3) if mib and v["rx_per_partition_mib"]
            else None,
            "dropped": v["dropped"], "disagree": v["disagree"],
        })
    return result


if __name__ == "__main__":
    print(json.dumps([check(Path(d)) for d in sys.argv[1:]], indent=1, default=str))
