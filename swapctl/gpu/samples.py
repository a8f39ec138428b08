"""GPU samples as the host's sampler records them: pure parsers of nvidia-smi's periodic output.

Two sources, kept apart because they are different counters over different periods:
- `nvidia-smi dmon -s ut -o DT` (1 s): sm% and mem% (NVML utilization: duty cycles), PCIe rx/tx MB/s,
  and with `--gpm-metrics 2,3,20,21` the GPU's activity counters (true averages over the second: SM
  activity, SM occupancy, PCIe TX/RX MiB/s), known by their `GPM:` unit line;
- `nvidia-smi --query-gpu=timestamp,index,utilization.gpu,... --format=csv -lms 500`: utilization,
  memory used, power, SM clock.

Both print local time with no zone; the sampler runs nvidia-smi with TZ=UTC, so the times here are UTC.
Columns are read by name from the header, never by position: drivers differ in what dmon prints.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..facts.nvidia import _ALIASES, _num

DMON = "dmon"
QUERY = "query"

# What the sampler asks --query-gpu for: names every driver since 2020 accepts.
QUERY_FIELDS = ("timestamp,index,utilization.gpu,utilization.memory,memory.used,power.draw,clocks.sm,"
                "pcie.link.gen.current,pcie.link.width.current")


@dataclass(frozen=True)
class Sample:
    """One GPU's reading at one time; a figure the source does not give is None."""

    time: datetime | None  # UTC; None only for dmon run without `-o DT`
    gpu: int
    sm_pct: float | None  # dmon `sm`, or query-gpu `utilization.gpu`
    mem_pct: float | None  # dmon `mem`, or `utilization.memory`: memory controller busy
    rx_mbps: float | None  # PCIe host-to-device MB/s (dmon -s t only)
    tx_mbps: float | None
    source: str = DMON  # DMON or QUERY: the two are different counters, never mix them in one mean
    mem_used_mib: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    # the GPU's activity counters (GPM, `dmon --gpm-metrics 2,3,20,21`): true averages over the period,
    # unlike sm_pct, a snapshot of whether any kernel ran; None where the GPU or driver has none
    sm_act_pct: float | None = None  # SM activity: the share of SMs busy (NVML_GPM_METRIC_SM_UTIL)
    sm_occ_pct: float | None = None  # SM occupancy: warps resident against the most (SM_OCCUPANCY)
    gpm_rx_mibps: float | None = None  # PCIe host-to-device MiB/s (PCIE_RX_PER_SEC)
    gpm_tx_mibps: float | None = None
    dropped: int = 0  # GPM values of this reading dropped as bogus: negative, over 100%, not a number


@dataclass(frozen=True)
class Window:
    """One GPU's samples over [start, end): how busy the GPU itself says it was."""

    gpu: int
    start: datetime
    end: datetime
    count: int
    sm_mean: float | None
    sm_p50: float | None
    rx_mean_mbps: float | None
    tx_mean_mbps: float | None


def _value(token: str) -> float | None:
    """dmon prints '-' for what a GPU does not support; query-gpu '[N/A]' and units."""
    return None if token in ("-", "") else _num(token)


# dmon's names for the GPM metrics the sampler asks for, by what they are; a PCIe GPM column is known
# by its unit line (`GPM:...`), since dmon's own PCIe columns (rxpci, txpci, MB/s) stand beside it
GPM_COLUMNS = {"smutil": "sm_act_pct", "smocc": "sm_occ_pct"}
GPM_PERCENT = ("sm_act_pct", "sm_occ_pct")


def _gpm_field(name: str) -> str | None:
    if name in GPM_COLUMNS:
        return GPM_COLUMNS[name]
    if "rx" in name:
        return "gpm_rx_mibps"
    if "tx" in name:
        return "gpm_tx_mibps"
    return None


def _gpm(row: dict[str, str]) -> tuple[dict[str, float | None], int]:
    """The GPM fields of one dmon row, and how many of its values were bogus (dropped): NVML's GPM
    metrics are 0-100% (or a rate >= 0); dmon on an H200 printed 1521562998 for gract once."""
    out: dict[str, float | None] = {}
    dropped = 0
    for field, token in row.items():
        value = _value(token)
        if value is None and token not in ("-", ""):
            dropped += 1
        elif value is not None and (value != value or value < 0
                                    or ((field in GPM_PERCENT or field.startswith("_%")) and value > 100)):
            value, dropped = None, dropped + 1
        if not field.startswith("_"):
            out[field] = value
    return out, dropped


def parse_dmon(text: str) -> list[Sample]:
    """Parses `nvidia-smi dmon` output (any -s selection; -o DT for times; --gpm-metrics); junk lines are
    skipped, bogus GPM values dropped and counted in each Sample's `dropped`.

    dmon repeats its two header lines now and then; the one naming `gpu` gives the columns, the one
    after it their units (`GPM:%` marks the activity counters)."""
    samples: list[Sample] = []
    columns: list[str] | None = None
    gpm: dict[int, str] = {}  # column index -> Sample field, for the GPM columns
    for line in text.splitlines():
        if line.startswith("#"):
            names = line[1:].split()
            if "gpu" in names:
                columns, gpm = [n.lower() for n in names], {}
            elif columns and len(names) == len(columns):
                # a GPM column not kept (gract, dram) is still checked: its bogus values are counted
                gpm = {i: _gpm_field(n) or ("_%" if u == "GPM:%" else "_") + n
                       for i, (n, u) in enumerate(zip(columns, names, strict=True)) if u.startswith("GPM:")}
            continue
        tokens = line.split()
        if not columns or len(tokens) != len(columns):
            continue  # an error nvidia-smi printed, a line cut off by a rotation or a kill
        row = {c: t for i, (c, t) in enumerate(zip(columns, tokens, strict=True)) if i not in gpm}
        counters, dropped = _gpm({f: tokens[i] for i, f in gpm.items()})
        try:
            gpu = int(row["gpu"])
            when = None
            if "date" in row and "time" in row:
                when = datetime.strptime(row["date"] + row["time"], "%Y%m%d%H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            continue
        samples.append(Sample(time=when, gpu=gpu, sm_pct=_value(row.get("sm", "")), mem_pct=_value(row.get("mem", "")),
                              rx_mbps=_value(row.get("rxpci", "")), tx_mbps=_value(row.get("txpci", "")),
                              dropped=dropped, sm_act_pct=counters.get("sm_act_pct"),
                              sm_occ_pct=counters.get("sm_occ_pct"), gpm_rx_mibps=counters.get("gpm_rx_mibps"),
                              gpm_tx_mibps=counters.get("gpm_tx_mibps")))
    return samples


def _query_time(value: str) -> datetime:
    return datetime.strptime(value, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)


def parse_query(text: str) -> list[Sample]:
    """Parses `nvidia-smi --query-gpu=timestamp,... --format=csv -l...` (header with units, `, ` between
    fields, units in values, `[N/A]`). The header may repeat (a new file); a missing `index` means GPU 0."""
    samples: list[Sample] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(", ")]
        if values[0] == "timestamp":
            header = [_ALIASES.get(h, h) for h in (re.sub(r"\s*\[.*\]$", "", v) for v in values)]
            continue
        if not header or len(values) != len(header):
            continue
        row = dict(zip(header, values, strict=True))
        try:
            when = _query_time(row["timestamp"])
            gpu = int(row.get("index", "0"))
        except ValueError:
            continue
        samples.append(Sample(time=when, gpu=gpu, sm_pct=_num(row.get("utilization.gpu")),
                              mem_pct=_num(row.get("utilization.memory")), rx_mbps=None, tx_mbps=None,
                              source=QUERY, mem_used_mib=_num(row.get("memory.used")),
                              power_w=_num(row.get("power.draw")), sm_clock_mhz=_num(row.get("clocks.sm"))))
    return samples


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def window(samples: Iterable[Sample], start: datetime, end: datetime, gpu: int, source: str = DMON) -> Window:
    """Mean and p50 sm%, mean RX/TX of one GPU's samples from `source` with start <= time < end.

    Half-open, so windows that meet share no sample: the README's "07:15:49 to 07:16:15" is
    [07:15:49, 07:16:16)."""
    picked = [s for s in samples if s.gpu == gpu and s.source == source and s.time is not None
              and start <= s.time < end]
    sm = [s.sm_pct for s in picked if s.sm_pct is not None]
    rx = [s.rx_mbps for s in picked if s.rx_mbps is not None]
    tx = [s.tx_mbps for s in picked if s.tx_mbps is not None]
    return Window(gpu=gpu, start=start, end=end, count=len(picked), sm_mean=_mean(sm),
                  sm_p50=statistics.median(sm) if sm else None, rx_mean_mbps=_mean(rx), tx_mean_mbps=_mean(tx))


def windows(samples: Iterable[Sample], start: datetime, end: datetime, source: str = DMON) -> dict[int, Window]:
    """`window` for every GPU that has samples from `source` in [start, end), by GPU index."""
    samples = list(samples)
    gpus = sorted({s.gpu for s in samples if s.source == source and s.time is not None and start <= s.time < end})
    return {g: window(samples, start, end, g, source) for g in gpus}


@dataclass(frozen=True)
class PhaseSplit:
    """One GPU's samples split by how much of each one's period fell inside the given phases (the log's
    GPU phases, say) and outside them: what RX and sm% were during the phases against between them."""

    gpu: int
    inside_s: float  # sample time counted inside the phases
    outside_s: float
    inside_sm: float | None
    outside_sm: float | None
    inside_rx_mbps: float | None
    outside_rx_mbps: float | None
    inside_n: float = 0  # readings (or shares of readings) counted inside, and outside
    outside_n: float = 0


# The time a reading stands for. dmon prints whole seconds, for a reading taken somewhere in that second
# over the second before it: centred on the printed second, +-0.5 s. query-gpu prints milliseconds, for
# the -lms period just ended.
_PERIOD = {DMON: (timedelta(seconds=-0.5), timedelta(seconds=0.5)), QUERY: (timedelta(seconds=-0.5), timedelta(0))}


def _union(intervals: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    merged: list[tuple[datetime, datetime]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def phase_split(samples: Iterable[Sample], phases: Iterable[tuple[datetime, datetime]], start: datetime,
                end: datetime, gpu: int, source: str = DMON, pure: float | None = None) -> PhaseSplit:
    """Means of sm% and RX inside `phases` (overlapping phases, two workers on one GPU, count once) and
    outside them, over readings with start <= time < end.

    Each reading is weighed by the share of its period inside the phases; with `pure`, a reading counts
    wholly inside when at least `pure` of it is, wholly outside when at most 1 - `pure` is, and not at all
    between. A reading is a snapshot from somewhere in its period (two dmon readers of one H200 read 0
    and 99% for the same second), so a reading half in a phase says little about either side."""
    merged = _union(phases)
    lo, hi = _PERIOD[source]
    sums = {k: [0.0, 0.0] for k in ("in_sm", "out_sm", "in_rx", "out_rx")}  # weighted sum, weight
    seconds = {"in": 0.0, "out": 0.0}
    count = {"in": 0.0, "out": 0.0}
    for s in samples:
        if s.gpu != gpu or s.source != source or s.time is None or not start <= s.time < end:
            continue
        a, b = s.time + lo, s.time + hi
        span = (b - a).total_seconds()
        inside = sum(max(0.0, (min(b, q) - max(a, p)).total_seconds()) for p, q in merged) / span
        if pure is not None:
            if pure > inside > 1 - pure:
                continue
            inside = 1.0 if inside >= pure else 0.0
        for where, w in (("in", inside), ("out", 1 - inside)):
            seconds[where] += w * span
            count[where] += w
            for key, value in (("sm", s.sm_pct), ("rx", s.rx_mbps)):
                if value is not None:
                    sums[f"{where}_{key}"][0] += w * value
                    sums[f"{where}_{key}"][1] += w

    def mean(key: str) -> float | None:
        total, weight = sums[key]
        return total / weight if weight > 1e-9 else None

    return PhaseSplit(gpu=gpu, inside_s=seconds["in"], outside_s=seconds["out"], inside_sm=mean("in_sm"),
                      outside_sm=mean("out_sm"), inside_rx_mbps=mean("in_rx"), outside_rx_mbps=mean("out_rx"),
                      inside_n=count["in"], outside_n=count["out"])


# The sampler's file names on the host, kept as they are by fetch-logs (see swapctl.gpu.sampler).
DMON_GLOB = "gpu-samples-*.dmon"
QUERY_GLOB = "gpu-query-*.csv"


def read_samples(paths: Iterable[str | Path]) -> list[Sample]:
    """The samples in these files (`.dmon` or `.csv`), each reading once, sorted by time then GPU.

    A fetched copy restarted after a rotation holds some lines twice; they are counted once."""
    seen: dict[tuple[object, ...], Sample] = {}
    for path in paths:
        path = Path(path)
        text = path.read_text(errors="replace")
        parsed = parse_query(text) if path.suffix == ".csv" else parse_dmon(text)
        for s in parsed:
            seen.setdefault((s.source, s.time, s.gpu) if s.time else (s.source, len(seen)), s)
    far = datetime.min.replace(tzinfo=UTC)
    return sorted(seen.values(), key=lambda s: (s.time or far, s.gpu, s.source))


def samples_in(directory: str | Path) -> list[Sample]:
    """Every sample fetch-logs brought into `directory` (DEST/<host>/), dmon and query-gpu alike."""
    d = Path(directory)
    return read_samples(sorted(d.glob(DMON_GLOB)) + sorted(d.glob(QUERY_GLOB)))
