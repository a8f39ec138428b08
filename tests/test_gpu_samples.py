"""GPU samples: the parsers on real nvidia-smi output from an H200; the host's sampler over real sshd."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from swapctl.gpu.samples import DMON, QUERY, parse_dmon, parse_query, read_samples, window, windows

NV = Path(__file__).parent / "data" / "nvidia-smi"
RUN_DMON = NV / "h200-1gpu" / "dmon-u-t-during-run.txt"
RUN_QUERY = NV / "h200-1gpu" / "query-gpu-500ms-during-run.csv"


def utc(hms: str) -> datetime:
    return datetime.strptime(f"2026-12-01 {hms}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)


# -- the parsers, on recorded real output -----------------------------------------------------------

def test_dmon_during_run_parses_every_row_under_its_repeated_header():
    samples = parse_dmon(RUN_DMON.read_text())
    assert len(samples) == 79 - 4  # 79 lines, two header lines printed twice
    first, probe = samples[0], samples[10]
    assert first.time == utc("07:15:32") and first.time.tzinfo is timezone.utc
    assert (first.gpu, first.sm_pct, first.mem_pct, first.rx_mbps, first.tx_mbps) == (0, 0, 0, 4, 0)
    assert probe.time == utc("07:15:42") and (probe.rx_mbps, probe.tx_mbps) == (8116, 735)  # the 1 GiB copy probe
    assert {s.source for s in samples} == {DMON}


@pytest.mark.parametrize("start,end,sm_mean,sm_p50,rx_mean,count", [
    # pageable build, steady (one second, 07:15:48, was not printed)
    ("07:15:49", "07:16:16", 31.7, 14.5, 1611.77, 26),
    ("07:16:21", "07:16:47", 56.0, 68, 3341.88, 25),  # pinned build, steady: twice the RX at the same load
])
def test_dmon_windows_reproduce_the_fixture_readme(start, end, sm_mean, sm_p50, rx_mean, count):
    """The README of the fixtures: dmon sm% mean 31.7 (pageable) and 56.0 (pinned) over the steady windows
    (RX means checked against awk on the same file)."""
    w = window(parse_dmon(RUN_DMON.read_text()), utc(start), utc(end), gpu=0)
    assert w.count == count and round(w.sm_mean, 1) == sm_mean and w.sm_p50 == sm_p50
    assert w.rx_mean_mbps == pytest.approx(rx_mean)


@pytest.mark.parametrize("start,end,util_mean,count", [
    ("07:15:49", "07:16:16", 39.7, 54),
    ("07:16:21", "07:16:47", 54.0, 52),
])
def test_query_gpu_windows_reproduce_the_fixture_readme(start, end, util_mean, count):
    w = window(parse_query(RUN_QUERY.read_text()), utc(start), utc(end), gpu=0, source=QUERY)
    assert w.count == count and round(w.sm_mean, 1) == util_mean
    assert w.rx_mean_mbps is None  # query-gpu has no PCIe throughput


def test_query_gpu_reads_units_and_renamed_fields():
    samples = parse_query(RUN_QUERY.read_text())
    assert len(samples) == 156
    s = samples[0]
    assert s.time == datetime(2026, 12, 1, 7, 15, 32, 188000, tzinfo=timezone.utc)
    assert (s.gpu, s.sm_pct, s.mem_pct, s.mem_used_mib, s.power_w, s.sm_clock_mhz) == (0, 0, 0, 0, 78.67, 345)
    assert s.source == QUERY  # `clocks.sm` came back as `clocks.current.sm [MHz]`


@pytest.mark.parametrize("text,expected", [
    # dmon without -o DT and with other columns (h200-2gpu/dmon.txt): no time, columns by name
    ((NV / "h200-2gpu" / "dmon.txt").read_text(), [(None, 0, 0, 0, None), (None, 1, 0, 0, None)] * 2),
    # a column the driver left out and '-' for an unsupported counter
    ("#Date Time gpu sm mem rxpci txpci\n#YYYYMMDD HH:MM:SS Idx % % MB/s MB/s\n 20261201 07:00:00 0 - 5 12 3\n",
     [(utc("07:00:00"), 0, None, 5, 12)]),
    # what nvidia-smi prints when NVML fails, and a line cut short by a kill: skipped
    ("Failed to initialize NVML: Driver/library version mismatch\n", []),
    ("".join(RUN_DMON.read_text().splitlines(keepends=True)[:3]) + " 20261201    07:15:33       0      1",
     [(utc("07:15:32"), 0, 0, 0, 4)]),
    # rows before any header (a file cut mid-way) cannot be read
    (" 20261201 07:15:33 0 1 0 0 0 0 0 0 0\n", []),
])
def test_dmon_columns_come_from_the_header(text, expected):
    got = [(s.time, s.gpu, s.sm_pct, s.mem_pct, s.rx_mbps) for s in parse_dmon(text)]
    assert got == expected


@pytest.mark.parametrize("text,expected", [
    ("timestamp, index, utilization.gpu [%], power.draw [W]\n2026/12/01 07:00:00.500, 1, 7 %, [N/A]\n",
     [(1, 7, None)]),
    ("timestamp, utilization.gpu [%], power.draw [W]\n2026/12/01 07:00:00.500, 7 %, 80.5 W\n", [(0, 7, 80.5)]),
    ('Field "bogus.field" is not a valid field to query.\n', []),
    ("timestamp, utilization.gpu [%]\n2026/12/01 07:00:00.500, 7 %, extra\n", []),
])
def test_query_gpu_rows(text, expected):
    assert [(s.gpu, s.sm_pct, s.power_w) for s in parse_query(text)] == expected


def test_windows_are_per_gpu_and_never_mix_sources(tmp_path):
    dmon = tmp_path / "gpu-samples-20261201T070000Z-0001.dmon"
    dmon.write_text("#Date Time gpu sm mem rxpci txpci\n"
                    " 20261201 07:00:00 0 10 1 100 1\n 20261201 07:00:00 1 90 1 5000 1\n"
                    " 20261201 07:00:01 0 30 1 300 1\n 20261201 07:00:01 1 70 1 7000 1\n")
    again = tmp_path / "gpu-samples-20261201T070000Z-0001.dmon.1"  # a re-fetched copy: same lines
    again.write_text(dmon.read_text())
    query = tmp_path / "gpu-query-20261201T070000Z-0001.csv"
    query.write_text("timestamp, index, utilization.gpu [%]\n2026/12/01 07:00:00.500, 0, 99 %\n")
    samples = read_samples([dmon, again, query])
    assert len(samples) == 5  # each reading once
    w = windows(samples, utc("07:00:00"), utc("07:00:02"))
    assert set(w) == {0, 1}
    assert (w[0].sm_mean, w[0].sm_p50, w[0].rx_mean_mbps, w[0].count) == (20, 20, 200, 2)
    assert (w[1].sm_mean, w[1].rx_mean_mbps) == (80, 6000)
    assert window(samples, utc("07:00:00"), utc("07:00:01"), 0).count == 1  # the end is left out
    assert window(samples, utc("07:00:00"), utc("07:00:02"), 0, QUERY).sm_mean == 99
    empty = window(samples, utc("08:00:00"), utc("08:00:01"), 0)
    assert (empty.count, empty.sm_mean, empty.sm_p50, empty.rx_mean_mbps) == (0, None, None, None)
