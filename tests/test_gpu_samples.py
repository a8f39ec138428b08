"""GPU samples: the parsers on real nvidia-smi output from an H200; the host's sampler over real sshd."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from swapctl.gpu.samples import (
    DMON,
    QUERY,
    parse_dmon,
    parse_query,
    phase_split,
    read_samples,
    samples_in,
    window,
    windows,
)

from conftest import own_box
from lab import prover_config, swapctl, wait_until

NV = Path(__file__).parent / "data" / "nvidia-smi"
RUN_DMON = NV / "h200-1gpu" / "dmon-u-t-during-run.txt"
RUN_QUERY = NV / "h200-1gpu" / "query-gpu-500ms-during-run.csv"


def utc(hms: str) -> datetime:
    return datetime.strptime(f"2026-12-01 {hms}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


# -- the parsers, on recorded real output -----------------------------------------------------------

def test_dmon_during_run_parses_every_row_under_its_repeated_header():
    samples = parse_dmon(RUN_DMON.read_text())
    assert len(samples) == 79 - 4  # 79 lines, two header lines printed twice
    first, probe = samples[0], samples[10]
    assert first.time == utc("07:15:32") and first.time.tzinfo is UTC
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
    assert s.time == datetime(2026, 12, 1, 7, 15, 32, 188000, tzinfo=UTC)
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


def test_what_the_sampler_recorded_on_an_h200_parses_as_utc():
    """Recorded by sampler.sh with the real nvidia-smi on an H200 (2026-12-01 08:50:57 UTC; dmon skipped
    08:51:10), started with TZ=Asia/Tokyo: nvidia-smi ran with TZ=UTC, so the times are UTC, not 17:50 JST."""
    dmon = parse_dmon((NV / "h200-1gpu" / "sampler-dmon.dmon").read_text())
    query = parse_query((NV / "h200-1gpu" / "sampler-query.csv").read_text())
    assert dmon[0].time == utc("08:50:57") and dmon[-1].time == utc("08:51:16") and len(dmon) == 19
    assert query[0].time == datetime(2026, 12, 1, 8, 50, 57, 382000, tzinfo=UTC) and len(query) == 40
    assert {s.gpu for s in dmon + query} == {0} and query[0].power_w == 78.87  # the sampler's fields, all answered
    assert (query[0].sm_clock_mhz, query[0].mem_used_mib, dmon[0].rx_mbps) == (345, 0, 2)


def test_what_the_sampler_recorded_under_a_real_load_shows_it():
    """The same sampler on the H200 while matrix products ran from 08:55:07 (README of the fixtures)."""
    dmon = parse_dmon((NV / "h200-1gpu" / "sampler-load-dmon.dmon").read_text())
    query = parse_query((NV / "h200-1gpu" / "sampler-load-query.csv").read_text())
    idle, busy = utc("08:54:59"), utc("08:55:07")
    before, during = window(dmon, idle, busy, 0), window(dmon, busy, utc("08:55:14"), 0)
    assert (before.count, before.sm_mean, during.count, during.sm_mean, during.sm_p50) == (7, 0, 7, 100, 100)
    loaded = [s for s in query if s.time >= busy]
    assert window(query, busy, utc("08:55:14"), 0, QUERY).sm_mean == 100 and min(s.power_w for s in loaded) > 600


def at(hms: str, ms: int = 0) -> datetime:
    return utc(hms) + timedelta(milliseconds=ms)


@pytest.mark.parametrize("phases,inside_s,inside_rx,outside_rx,inside_sm,outside_sm", [
    # readings at :01 and :02 (each +-0.5 s) inside one phase, :00 and :03 outside
    ([(at("07:00:00", 500), at("07:00:02", 500))], 2.0, 8000, 0, 90, 10),
    # two workers' overlapping phases count once
    ([(at("07:00:00", 500), at("07:00:02")), (at("07:00:01"), at("07:00:02", 500))], 2.0, 8000, 0, 90, 10),
    # half of the :00 reading and all of :01
    ([(at("07:00:00"), at("07:00:01", 500))], 1.5, (0.5 * 0 + 8000) / 1.5, (0.5 * 0 + 8000 + 0) / 2.5,
     (0.5 * 10 + 90) / 1.5, (0.5 * 10 + 90 + 10) / 2.5),
    ([], 0.0, None, 4000, None, 50),  # no phase: all of it outside
])
def test_phase_split_weighs_each_reading_by_its_share_inside_the_phases(phases, inside_s, inside_rx, outside_rx,
                                                                        inside_sm, outside_sm):
    dmon = parse_dmon("#Date Time gpu sm mem rxpci txpci\n"
                      " 20261201 07:00:00 0 10 0 0 0\n 20261201 07:00:01 0 90 0 8000 0\n"
                      " 20261201 07:00:02 0 90 0 8000 0\n 20261201 07:00:03 0 10 0 0 0\n"
                      " 20261201 07:00:01 1 0 0 5 0\n")  # another GPU, never counted for GPU 0
    split = phase_split(dmon, phases, at("07:00:00"), at("07:00:04"), gpu=0)
    assert split.inside_s == pytest.approx(inside_s) and split.inside_s + split.outside_s == pytest.approx(4)
    for got, want in ((split.inside_rx_mbps, inside_rx), (split.outside_rx_mbps, outside_rx),
                      (split.inside_sm, inside_sm), (split.outside_sm, outside_sm)):
        assert got == (None if want is None else pytest.approx(want))


def test_phase_split_with_pure_counts_a_reading_wholly_on_one_side_or_not_at_all():
    # the :00 reading (06:59:59.5-07:00:00.5) is half in the phase: dropped; :01 is all in; :02, :03 out
    dmon = parse_dmon("#Date Time gpu sm mem rxpci txpci\n"
                      " 20261201 07:00:00 0 10 0 0 0\n 20261201 07:00:01 0 90 0 8000 0\n"
                      " 20261201 07:00:02 0 30 0 200 0\n 20261201 07:00:03 0 10 0 0 0\n")
    split = phase_split(dmon, [(at("07:00:00"), at("07:00:01", 500))], at("07:00:00"), at("07:00:04"), gpu=0,
                        pure=0.9)
    assert (split.inside_n, split.outside_n) == (1, 2) and (split.inside_s, split.outside_s) == (1, 2)
    assert split.inside_rx_mbps == 8000 and split.outside_rx_mbps == 100 and split.inside_sm == 90


def test_phase_split_on_the_h200_copy_probe():
    """The fixture's 1 GiB pageable copy probe (07:15:42, 8116 MB/s RX) as the one 'phase': RX inside it
    is the copy's, outside it the idle link's."""
    split = phase_split(parse_dmon(RUN_DMON.read_text()), [(at("07:15:41", 500), at("07:15:42", 500))],
                        at("07:15:32"), at("07:15:49"), gpu=0)
    assert split.inside_rx_mbps == 8116 and split.inside_s == 1 and split.outside_rx_mbps < 20


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


RUN_GPM = NV / "h200-1gpu" / "dmon-gpm-metrics-1-2-3-10-during-run.txt"
RUN_NVML = NV / "h200-1gpu" / "nvml-gpm-200ms-during-run.csv"


def test_dmon_gpm_capture_parses_the_activity_counters_beside_the_duty_cycle_and_drops_bogus_values():
    # `nvidia-smi dmon --gpm-metrics 1,2,3,10` on an H200 printed gract 1521562998 and 1525163281 once each
    samples = parse_dmon(RUN_GPM.read_text())
    assert len(samples) == 234 and sum(s.dropped for s in samples) == 2
    first = next(s for s in samples if s.time == utc("18:28:04"))
    assert (first.sm_pct, first.sm_act_pct, first.sm_occ_pct) == (81.0, 96.0, 70.0)
    assert [s.sm_act_pct for s in samples[:2]] == [None, None]  # '-' until GPM has two readings
    # in the same seconds the duty cycle reads 99-100 or 12-16, while SM activity reads 34-99
    busy = [s for s in samples if utc("18:28:05") <= s.time <= utc("18:28:25")]
    assert {s.sm_pct for s in busy} <= {100.0, 99.0, 97.0, 94.0, 16.0, 15.0, 14.0, 13.0, 12.0}
    assert min(s.sm_act_pct for s in busy) == 34.0


def test_dmon_gpm_sm_activity_agrees_with_the_200ms_nvml_reader_over_the_capture():
    import csv

    rows = list(csv.DictReader(line for line in RUN_NVML.read_text().splitlines() if not line.startswith("#")))
    start, end = utc("18:27:40"), utc("18:30:20")

    def nvml(a: datetime, b: datetime) -> float:
        parts = [(min(b, _z(r["t_end_utc"])) - max(a, _z(r["t_start_utc"]))).total_seconds() for r in rows]
        return sum(w * float(r["sm_util"]) for w, r in zip(parts, rows, strict=True) if w > 0) / sum(
            w for w in parts if w > 0)

    # a GPM reading stamped t stands for [t - 1.5 s, t - 0.5 s) (swapctl.logs.gpu.GPM_LAG)
    mine = [s for s in parse_dmon(RUN_GPM.read_text()) if s.sm_act_pct is not None
            and start <= s.time - timedelta(seconds=1.5) and s.time - timedelta(seconds=0.5) <= end]
    ours = sum(s.sm_act_pct for s in mine) / len(mine)
    theirs = nvml(mine[0].time - timedelta(seconds=1.5), mine[-1].time - timedelta(seconds=0.5))
    assert len(mine) > 140 and abs(ours - theirs) < 2, (ours, theirs)


def _z(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


# -- the sampler on a real sshd host ------------------------------------------------------------------
#
# There is no GPU here: the host's `nvidia-smi` is tests/standin_nvidia_smi.py, a stand-in that replays
# the real output recorded on an H200 (tests/data/nvidia-smi/h200-1gpu/), its times rewritten to now.

STANDIN = Path(__file__).parent / "standin_nvidia_smi.py"


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    """One sshd host for this module whose PATH has the replaying nvidia-smi stand-in first."""
    base = tmp_path_factory.mktemp("gpu-host")
    conf = base / "standin.conf"
    tool = (f"#!/bin/sh\nNVIDIA_SMI_STANDIN={shlex.quote(str(conf))} "
            f"exec {shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))} \"$@\"\n")
    with own_box(base, tools={"nvidia-smi": tool}) as box:
        box.standin = conf
        yield box


def sampler_files(box) -> Path:
    return box.data / ".swapctl" / "cuzk" / "gpu"


def end_sampler(box) -> None:
    """Kills what a test left running: the sampler's process group, named by its pid file."""
    try:
        spid = int((sampler_files(box) / "gpu-sampler.pid").read_text().split()[0])
        if Path(f"/proc/{spid}/cmdline").read_bytes().split(b"\0")[0] == b"swapctl-gpu-sampler":
            os.killpg(spid, signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass


@pytest.fixture
def gpu_box(gpu_host):
    box = gpu_host
    box.standin.write_text("delay=0.05\n")
    shutil.rmtree(box.data / ".swapctl", ignore_errors=True)
    if box.binary.is_symlink():  # a deploy's link into the releases just removed
        box.binary.unlink()
    yield box
    end_sampler(box)
    box.kill_all()


def sampler(box, *args: str):
    return swapctl("gpu-sampler", *args, "lab", "-p", str(box.playbook_path), "--json")


def host_status(box) -> dict:
    r = sampler(box, "status")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["hosts"]["lab"]


def dmon_rows(box) -> list:
    return [s for f in sorted(sampler_files(box).glob("gpu-samples-*.dmon")) for s in parse_dmon(f.read_text())]


def lock_free(box) -> bool:
    with open(sampler_files(box) / "gpu-sampler.lock") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False


def group_alive(pgid: int) -> bool:
    """Any live (not zombie) process in process group `pgid`."""
    for p in Path("/proc").iterdir():
        try:
            stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if stat[0] != "Z" and int(stat[2]) == pgid:
            return True
    return False


def test_sampler_records_replayed_samples_after_the_session_ends_and_stops_on_request(gpu_box, prover):
    """A stand-in nvidia-smi replays real H200 output (no GPU here). The sampler outlives the SSH session
    that started it, records dmon and query-gpu in UTC, is one per host, and stops with what it started."""
    daemon = gpu_box.start_by_hand(prover)
    r = sampler(gpu_box, "start", "--query")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)["hosts"]["lab"]
    assert (st["outcome"], st["running"], st["daemon_pid"]) == ("started", True, daemon)
    # swapctl has exited and its SSH session with it: the samples keep coming
    wait_until(lambda: len(dmon_rows(gpu_box)) >= 10, what="dmon rows recorded on the host")
    wait_until(lambda: len(read_samples(sampler_files(gpu_box).glob("gpu-query-*.csv"))) >= 3, what="query rows")
    now = datetime.now(UTC)
    rows = dmon_rows(gpu_box)
    assert all(abs((s.time - now).total_seconds()) < 60 for s in rows)  # UTC: TZ=UTC reached nvidia-smi
    assert {s.source for s in read_samples(sampler_files(gpu_box).glob("gpu-*"))} == {DMON, QUERY}

    r = swapctl("status", "lab", "--json", "-p", str(gpu_box.playbook_path))
    line = json.loads(r.stdout)["hosts"]["lab"]["gpu_sampler"]
    assert line.startswith(f"running (pid {st['pid']}, following daemon pid {daemon})"), line

    again = json.loads(sampler(gpu_box, "start").stdout)["hosts"]["lab"]
    assert (again["outcome"], again["pid"]) == ("already running", st["pid"])  # one sampler per host

    r = sampler(gpu_box, "stop")
    assert r.returncode == 0, r.stderr
    stopped = json.loads(r.stdout)["hosts"]["lab"]
    assert (stopped["outcome"], stopped["running"]) == ("stopped", False)
    assert "stopped: by request" in stopped["note"]
    assert lock_free(gpu_box) and not group_alive(st["pid"])  # the nvidia-smi it ran is gone too
    assert daemon in gpu_box.daemons()  # the daemon is left alone
    assert json.loads(sampler(gpu_box, "stop").stdout)["hosts"]["lab"]["outcome"] == "not running"


def test_sampler_records_the_gpus_activity_counters_where_dmon_has_them(gpu_box, prover):
    """The stand-in answers `dmon -s ut --gpm-metrics 2,3,20,21` with the H200's own capture of it."""
    gpu_box.start_by_hand(prover)
    assert sampler(gpu_box, "start").returncode == 0
    wait_until(lambda: sum(s.sm_act_pct is not None for s in dmon_rows(gpu_box)) >= 5, what="GPM readings")
    rows = dmon_rows(gpu_box)
    assert all(s.sm_pct is not None for s in rows)  # the duty cycle stays beside the counters
    assert any(s.gpm_rx_mibps for s in rows) and any(s.sm_occ_pct for s in rows)
    notes = (sampler_files(gpu_box) / "gpu-sampler.notes").read_text()
    assert "dmon: with the GPU's activity counters (--gpm-metrics 2,3,20,21" in notes


def test_where_dmon_has_no_activity_counters_the_sampler_says_so_once_and_records_the_duty_cycle(gpu_box, prover):
    """gpm=none: the stand-in's dmon rejects --gpm-metrics, as on a GPU before Hopper or an older driver."""
    gpu_box.standin.write_text("delay=0.05 gpm=none\n")
    gpu_box.start_by_hand(prover)
    assert sampler(gpu_box, "start").returncode == 0
    wait_until(lambda: len(dmon_rows(gpu_box)) >= 10, what="dmon rows")
    rows = dmon_rows(gpu_box)
    assert all(s.sm_act_pct is None for s in rows) and all(s.sm_pct is not None for s in rows)
    notes = (sampler_files(gpu_box) / "gpu-sampler.notes").read_text()
    assert notes.count("no GPU activity counters here") == 1
    assert "(dmon --gpm-metrics: exit 3, GPM metrics are not supported on this device or driver)" in notes


@pytest.mark.parametrize("standin", ["delay=0.05", "delay=0.05 term=ignore"])
def test_sampler_ends_by_itself_when_the_daemon_exits(gpu_box, prover, standin):
    """The stand-in replays recorded real nvidia-smi output; there is no GPU here. One that ignores
    SIGTERM is killed all the same: nothing the sampler started outlives it."""
    gpu_box.standin.write_text(standin + "\n")
    daemon = gpu_box.start_by_hand(prover)
    st = json.loads(sampler(gpu_box, "start").stdout)["hosts"]["lab"]
    assert st["running"], st
    wait_until(lambda: len(dmon_rows(gpu_box)) >= 3, what="first dmon rows")
    os.kill(daemon, signal.SIGTERM)
    wait_until(lambda: not group_alive(st["pid"]), timeout=10, what="the sampler to end after the daemon")
    after = host_status(gpu_box)
    assert not after["running"] and f"done: the daemon (pid {daemon}) exited" in after["note"]
    assert lock_free(gpu_box)


def test_sample_files_stay_within_their_bound(gpu_box, prover):
    """The stand-in replays recorded real dmon lines quickly (no GPU here) so that segments fill in seconds."""
    gpu_box.standin.write_text("delay=0.01\n")
    gpu_box.start_by_hand(prover)
    bound = 8192
    r = sampler(gpu_box, "start", "--query", "--max-mib", str(bound / (1 << 20)))
    assert r.returncode == 0, r.stderr
    d = sampler_files(gpu_box)
    # the 6th segment of each kind (or a later one: the GPM columns make dmon's rows the longer): two
    # have been removed by then
    def last(pattern: str) -> int:
        return max((int(f.name.rsplit("-", 1)[1].split(".")[0]) for f in d.glob(pattern)), default=0)

    wait_until(lambda: last("gpu-samples-*.dmon") >= 6 and last("gpu-query-*.csv") >= 6,
               timeout=30, what="six segments of each kind")
    assert len(list(d.glob("gpu-samples-*.dmon"))) <= 4 and len(list(d.glob("gpu-query-*.csv"))) <= 4
    assert sampler(gpu_box, "stop").returncode == 0  # what it leaves, read while nothing writes
    for pattern, header in (("gpu-samples-*.dmon", "#Date"), ("gpu-query-*.csv", "timestamp, ")):
        files = sorted(d.glob(pattern))
        assert 2 <= len(files) <= 4 and not any(f.name.endswith("-0001." + f.name.rsplit(".", 1)[1]) for f in files)
        assert sum(f.stat().st_size for f in files) <= bound
        for f in files:  # each segment reads alone: it begins with its header
            assert f.read_text().startswith(header), f
    assert len(parse_dmon(files_text := "".join(f.read_text() for f in sorted(d.glob("gpu-samples-*.dmon"))))) > 20
    assert "Failed" not in files_text


def test_a_host_without_nvidia_smi_gets_a_note_and_no_sampler(box, prover, tmp_path):
    assert shutil.which("nvidia-smi") is None, "this test needs a host without nvidia-smi"
    box.start_by_hand(prover)
    r = swapctl("gpu-sampler", "start", "lab", "-p", str(box.playbook_path))
    assert r.returncode == 3 and "lab: no nvidia-smi on this host: no GPU samples" in r.stderr, r
    assert len(r.stderr.strip().splitlines()) == 1
    st = json.loads(swapctl("gpu-sampler", "status", "lab", "-p", str(box.playbook_path), "--json").stdout)
    st = st["hosts"]["lab"]
    assert not st["running"] and "not started: no nvidia-smi on this host" in st["note"]
    r = swapctl("status", "lab", "-p", str(box.playbook_path))  # the note shows where people look
    shown = " ".join(r.stdout.split())  # rich wraps long lines at the terminal's width
    assert "GPU sampler: not running; last note: " in shown and "not started: no nvidia-smi on this host" in shown
    notes = box.data / ".swapctl" / "cuzk" / "gpu" / "gpu-sampler.notes"
    assert not (notes.parent / "gpu-sampler.pid").exists()
    # fetch-logs brings the note home beside the logs
    box.write_playbook(logs={"paths": [str(box.log)]})
    r = swapctl("fetch-logs", "lab", "--dest", str(tmp_path / "logs"), "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "logs" / "lab" / "gpu-sampler.notes").read_text() == notes.read_text()


def test_an_nvidia_smi_that_hangs_is_killed_and_noted(gpu_box, prover):
    """The stand-in's dmon prints nothing, ever, as a hung driver call does (no GPU here)."""
    gpu_box.standin.write_text("dmon=hang\n")
    gpu_box.start_by_hand(prover)
    r = sampler(gpu_box, "start", "--quiet-s", "1")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)["hosts"]["lab"]
    wait_until(lambda: not group_alive(st["pid"]), timeout=10, what="the sampler to give up on a silent nvidia-smi")
    after = host_status(gpu_box)
    assert not after["running"] and "dmon: nvidia-smi printed nothing for 1 s: killed it" in after["note"]
    assert lock_free(gpu_box)  # the next start is not kept out
    gpu_box.standin.write_text("delay=0.05\n")
    assert json.loads(sampler(gpu_box, "start").stdout)["hosts"]["lab"]["outcome"] == "started"


def test_an_nvidia_smi_that_fails_ends_the_sampler_with_its_message(gpu_box, prover):
    """The stand-in's dmon fails as NVML does after a driver upgrade (no GPU here)."""
    gpu_box.standin.write_text("dmon=fail\n")
    gpu_box.start_by_hand(prover)
    st = json.loads(sampler(gpu_box, "start").stdout)["hosts"]["lab"]
    wait_until(lambda: not group_alive(st["pid"]), timeout=10, what="the sampler to end")
    note = host_status(gpu_box)["note"]
    assert "dmon: nvidia-smi ended (exit 18): Failed to initialize NVML: Driver/library version mismatch" in note
    assert lock_free(gpu_box)


def test_fetch_logs_brings_the_samples_home_incrementally(gpu_box, prover, tmp_path):
    """The stand-in replays recorded real nvidia-smi output (no GPU here)."""
    gpu_box.write_playbook(logs={"paths": [str(gpu_box.log)]})
    gpu_box.start_by_hand(prover)
    assert sampler(gpu_box, "start").returncode == 0
    wait_until(lambda: len(dmon_rows(gpu_box)) >= 5, what="dmon rows")
    dest = tmp_path / "logs"

    def fetched() -> dict:
        r = swapctl("fetch-logs", "lab", "--dest", str(dest), "--json", "-p", str(gpu_box.playbook_path))
        assert r.returncode == 0, r.stderr
        return {Path(f["remote"]).name: f for f in json.loads(r.stdout)["hosts"]["lab"]}

    first = fetched()
    [name] = [n for n in first if n.endswith(".dmon")]
    local, remote = dest / "lab" / name, sampler_files(gpu_box) / name
    have = local.read_bytes()
    assert len(have) == first[name]["new_bytes"] > 0 and remote.read_bytes().startswith(have)
    wait_until(lambda: remote.stat().st_size > len(have) + 500, what="more samples on the host")
    second = fetched()
    assert 0 < second[name]["new_bytes"] and not second[name]["restarted"]
    assert remote.read_bytes().startswith(local.read_bytes()) and local.stat().st_size > len(have)
    assert local.read_bytes().startswith(have)  # appended, never rewritten
    assert "gpu-sampler.notes" in second and "cuzk.log" in second
    assert len(samples_in(dest / "lab")) >= 1


def test_starting_for_a_new_daemon_pid_replaces_the_sampler_of_the_old_one(gpu_box, prover):
    """What deploy does after readiness (Python API, over the real sshd): the old daemon's sampler may
    still run, and is replaced. The stand-in replays recorded real nvidia-smi output (no GPU here)."""
    from swapctl.gpu.sampler import sampler_status, start_sampler, stop_sampler
    from swapctl.playbook import load
    from swapctl.remote import connect

    old = gpu_box.start_by_hand(prover)
    new = subprocess.Popen(["sleep", "600"], start_new_session=True)  # stands for the new daemon
    try:
        book = load(str(gpu_box.playbook_path))
        with connect(book.hosts["lab"]) as host:
            first = start_sampler(host, book.daemon.state_dir, old)
            assert (first.outcome, first.daemon_pid) == ("started", old)
            second = start_sampler(host, book.daemon.state_dir, new.pid)
            assert (second.outcome, second.running, second.daemon_pid) == ("restarted", True, new.pid)
            assert second.pid != first.pid and not group_alive(first.pid)
            assert sampler_status(host, book.daemon.state_dir).daemon_pid == new.pid
            assert stop_sampler(host, book.daemon.state_dir).outcome == "stopped"
    finally:
        new.kill()
        new.wait()


def test_start_without_a_running_daemon_is_refused_and_starts_nothing(gpu_box):
    r = swapctl("gpu-sampler", "start", "lab", "-p", str(gpu_box.playbook_path))
    assert r.returncode == 3 and "lab: no daemon is running: the sampler follows one" in r.stderr, r
    assert not (sampler_files(gpu_box) / "gpu-sampler.pid").exists()


def test_two_starts_at_once_leave_one_sampler_that_stop_ends(gpu_box, prover):
    """The stand-in replays recorded real nvidia-smi output (no GPU here)."""
    daemon = gpu_box.start_by_hand(prover)
    args = [sys.executable, "-m", "swapctl", "gpu-sampler", "start", "lab", "--pid", str(daemon), "--json",
            "-p", str(gpu_box.playbook_path)]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    started = [json.loads(o)["hosts"]["lab"] for o, _ in outs]
    assert {s["outcome"] for s in started} <= {"started", "already running"}
    assert started[0]["pid"] == started[1]["pid"] and started[0]["running"]
    stopped = json.loads(sampler(gpu_box, "stop").stdout)["hosts"]["lab"]
    assert stopped["outcome"] == "stopped" and not group_alive(started[0]["pid"]) and lock_free(gpu_box)


def test_deploy_and_rollback_leave_the_sampler_following_the_daemon_they_started(gpu_box, prover, prover_b):
    """The stand-in nvidia-smi again (no GPU here): after a deploy the sampler follows the new daemon's
    pid, after a rollback the old build's new pid."""
    gpu_box.start_by_hand(prover)
    for verb, args in (("deploy", ("--binary", str(prover_b))), ("rollback", ())):
        r = swapctl(verb, "lab", *args, "--yes", "--json", "-p", str(gpu_box.playbook_path))
        assert r.returncode == 0, r.stderr
        [pid] = gpu_box.daemons()
        st = host_status(gpu_box)
        assert (st["running"], st["daemon_pid"]) == (True, pid), (verb, st)


def test_the_experiments_window_shows_the_gpus_own_sm_activity(gpu_box, prover, prover_b):
    """With the stand-in nvidia-smi replaying real H200 output (no GPU here), the window's progress
    line carries the sampler's latest SM activity readings (GPM), and the verdict B's GPU busy."""
    gpu_box.write_playbook(logs={"paths": [str(gpu_box.log)]})
    gpu_box.start_by_hand(prover, config=prover_config(memory_mib=8, jobs=-1, partitions=4, synth_ms=5, gpu_ms=20))
    r = swapctl("experiment", "lab", "-p", str(gpu_box.playbook_path), "--dest", str(gpu_box.workdir / "logs"),
                "--yes", "--binary", str(prover_b), "--for", "5s", "--baseline", "3s", "--min-proofs", "2",
                "--then", "keep", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "SM activity " in r.stderr and "readings)" in r.stderr
    v = json.loads(r.stdout)
    assert v["after"]["gpu_busy"]["0"] is not None
