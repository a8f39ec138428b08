"""nvidia-smi facts: the query command and pure parsers of its CSV output.

Parsed by header, not position: the driver prints fields under their current names
(`clocks.sm` as `clocks.current.sm [MHz]`, `clocks_throttle_reasons.active` as
`clocks_event_reasons.active`) and units ride in the header and in each value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Asked for under the names every driver since 2020 accepts; newer drivers answer under new names.
QUERY_FIELDS = (
    "index,uuid,name,driver_version,pci.bus_id,memory.total,memory.used,memory.free,utilization.gpu,"
    "utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,"
    "clocks_throttle_reasons.active,ecc.errors.uncorrected.volatile.total,pcie.link.gen.current,"
    "pcie.link.gen.max,pcie.link.width.current,persistence_mode,compute_mode"
)
QUERY_APPS = "pid,process_name,used_memory,gpu_uuid"

# Every host script that calls nvidia-smi (status.sh, the swap's memory wait) calls it through smi.sh's
# `smi`, which swapctl.host.scripts puts in place of its `. ./smi.sh` line: a wedged GPU never answers.


_ALIASES = {
    "clocks.current.sm": "clocks.sm",
    "clocks_event_reasons.active": "clocks_throttle_reasons.active",
    "used_gpu_memory": "used_memory",
}

# nvmlClocksEventReasons bits.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    driver: str
    bus_id: str
    memory_total_mib: float | None
    memory_used_mib: float | None
    utilization_pct: float | None
    memory_utilization_pct: float | None
    temperature_c: float | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: float | None
    max_sm_clock_mhz: float | None
    throttle_reasons: tuple[str, ...]
    ecc_uncorrected: int | None
    pcie_gen: int | None
    pcie_gen_max: int | None
    pcie_width: int | None

    @property
    def active_throttles(self) -> tuple[str, ...]:
        """Throttle reasons worth a warning: idle and sync boost are normal."""
        return tuple(r for r in self.throttle_reasons if r not in ("gpu_idle", "sync_boost"))


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_mib: float | None
    gpu_uuid: str


class NvidiaSmiError(ValueError):
    """nvidia-smi answered, but with an error (an NVML failure, an unknown field)."""


def _rows(text: str) -> list[dict[str, str]]:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines or "," not in lines[0]:
        raise NvidiaSmiError(lines[0].strip() if lines else "nvidia-smi printed nothing")
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in lines[0].split(", ")]
    header = [_ALIASES.get(h, h) for h in header]
    rows = []
    for line in lines[1:]:
        values = [v.strip() for v in line.split(", ")]
        if len(values) != len(header):
            raise NvidiaSmiError(line.strip())
        rows.append(dict(zip(header, values, strict=True)))
    return rows


def _num(value: str | None) -> float | None:
    """'143771 MiB' -> 143771.0; '[N/A]', 'N/A', '[Not Supported]' -> None."""
    if value is None:
        return None
    m = re.match(r"^(-?\d+(?:\.\d+)?)", value)
    return float(m.group(1)) if m else None


def _int(value: str | None) -> int | None:
    n = _num(value)
    return int(n) if n is not None else None


def decode_throttle(value: str | None) -> tuple[str, ...]:
    if not value or not value.startswith("0x"):
        return ()
    bits = int(value, 16)
    return tuple(name for bit, name in THROTTLE_REASONS.items() if bits & bit)


def parse_query_gpu(text: str) -> list[Gpu]:
    """Parses `nvidia-smi --query-gpu=QUERY_FIELDS --format=csv` (with its header line)."""
    return [
        Gpu(
            index=int(r["index"]),
            uuid=r.get("uuid", ""),
            name=r.get("name", ""),
            driver=r.get("driver_version", ""),
            bus_id=r.get("pci.bus_id", ""),
            memory_total_mib=_num(r.get("memory.total")),
            memory_used_mib=_num(r.get("memory.used")),
            utilization_pct=_num(r.get("utilization.gpu")),
            memory_utilization_pct=_num(r.get("utilization.memory")),
            temperature_c=_num(r.get("temperature.gpu")),
            power_w=_num(r.get("power.draw")),
            power_limit_w=_num(r.get("power.limit")),
            sm_clock_mhz=_num(r.get("clocks.sm")),
            max_sm_clock_mhz=_num(r.get("clocks.max.sm")),
            throttle_reasons=decode_throttle(r.get("clocks_throttle_reasons.active")),
            ecc_uncorrected=_int(r.get("ecc.errors.uncorrected.volatile.total")),
            pcie_gen=_int(r.get("pcie.link.gen.current")),
            pcie_gen_max=_int(r.get("pcie.link.gen.max")),
            pcie_width=_int(r.get("pcie.link.width.current")),
        )
        for r in _rows(text)
    ]


def parse_compute_apps(text: str) -> list[GpuProcess]:
    """Parses `nvidia-smi --query-compute-apps=QUERY_APPS --format=csv`."""
    return [
        GpuProcess(int(r["pid"]), r.get("process_name", ""), _num(r.get("used_memory")), r.get("gpu_uuid", ""))
        for r in _rows(text)
    ]
