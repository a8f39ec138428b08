"""A fresh H200 run with the GPU's activity counters (benchmarks/gpu_experiment.py through
scripts/gpu-run.sh, 2026-12-01, tests/data/h200-gpm/): the default cycle, gpu_ms=1500 and 2 GiB
partitions, each the pageable build then the pinned one; all three twice (run1/, run2/). Beside
swapctl's sampler (dmon with --gpm-metrics 2,3,20,21) ran an independent NVML GPM reader (pynvml, 200 ms
true averages) and an independent dmon. benchmarks/check_gpu_run.py sets swapctl's figures beside those readers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "h200-gpm"
RUNS = [f"{run}/{cycle}" for run in ("run1", "run2") for cycle in ("default", "gpu1500", "part2048")]
sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

from check_gpu_run import check  # noqa: E402


@pytest.fixture(scope="module")
def checked() -> dict:
    return {name: check(DATA / name) for name in RUNS}


def each(checked):
    for name, c in checked.items():
        assert [r["build"] for r in c["runs"]] == ["pageable", "pinned"], name
        yield from ((name, r) for r in c["runs"])


def test_swapctls_sm_activity_is_within_2_points_of_the_nvml_gpm_reader_over_the_same_span(checked):
    for name, r in each(checked):
        assert abs(r["sm_activity_gap"]) <= 2, (name, r)


def test_the_logs_kernel_share_is_within_1_point_of_the_gpm_reader(checked):
    for name, r in each(checked):
        assert abs(r["kernel_share_gap_to_reader"]) <= 1.0, (name, r)


def test_every_interval_printed_covers_the_reader_and_none_is_printed_where_the_cycles_are_too_few(checked):
    printed = [(name, r) for name, r in each(checked) if r["interval"]]
    assert len(printed) == 10 and all(r["interval_covers_reader"] for _, r in printed), printed
    # gpu_ms=1500 pageable: a 2.17-2.22 s cycle makes blocks of 11 readings, fewer than 4 in the window
    assert checked["run1/gpu1500"]["runs"][0]["interval"] is None is checked["run2/gpu1500"]["runs"][0]["interval"]


def test_where_the_time_goes_shows_the_pinned_copy_at_4_to_8_percent_and_the_pageable_one_in_full(checked):
    for run in ("run1", "run2"):
        assert 4 <= checked[f"{run}/default"]["runs"][1]["copy_share"] <= 8  # 78 ms of each 1.33 s cycle
    for name, c in checked.items():
        pageable, pinned = c["runs"]
        assert pageable["copy_share"] > 15 and pinned["copy_share"] < 8, name


def test_the_duty_cycle_reads_high_on_the_pinned_build_and_a_line_says_why(checked):
    for name, c in checked.items():
        pinned = c["runs"][1]
        assert pinned["duty_cycle"] > 98 and pinned["sm_activity"] < 96, name
        assert any("a duty cycle counts a period as busy when any kernel ran" in line for line in pinned["disagree"])


def test_gpm_rx_per_partition_matches_the_partitions_bytes_within_10_percent(checked):
    for name, r in each(checked):
        assert 0.99 < r["rx_per_partition_over_bytes"] < 1.10, (name, r)
        assert abs(r["rx_gpm_mibps"] / r["reader_rx_mibps"] - 1) < 0.05, (name, r)


def test_the_sampler_recorded_the_activity_counters_and_said_so():
    notes = (DATA / "run1" / "default" / "gpu-sampler.notes").read_text()
    assert "dmon: with the GPU's activity counters (--gpm-metrics 2,3,20,21" in notes
    from swapctl.gpu.samples import read_samples

    samples = read_samples([DATA / "run1" / "default" / "gpu-samples.dmon"])
    assert sum(s.sm_act_pct is not None for s in samples) > 60 and sum(s.gpm_rx_mibps is not None for s in samples) > 60


def test_plain_timings_of_a_log_with_two_runs_prints_one_block_per_run():
    d = DATA / "run1" / "default"
    r = subprocess.run([sys.executable, "-m", "swapctl", "timings", str(d / "cuzk.log"), "--samples",
                        str(d / "gpu-samples.dmon")], capture_output=True, text=True, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "run 1 (pageable buffers, 22 partitions" in out and "run 2 (pinned buffers, 29 partitions" in out
    one, two = out.split("run 2 (")
    assert "GPU busy 65.6% (SM activity, GPM, 95% interval 62.3-69.1)" in one
    assert "kernel share from the log 63.8% (copy 32.9%)" in one and "copy 5.8%" in two
    assert "GPU busy 93.0% (SM activity" in two and "duty cycle 99.5%" in two


def test_the_experiments_verdict_names_the_three_figures():
    from swapctl.experiment import verdict
    from swapctl.gpu.samples import read_samples
    from swapctl.logs.timings import parse

    with open(DATA / "run1" / "default" / "cuzk.log", "rb") as f:
        log = parse([f])
    v = verdict(log.runs[:1], log.runs[1:], read_samples([DATA / "run1" / "default" / "gpu-samples.dmon"]))
    assert "GPU busy (SM activity) 66% -> 93%, duty cycle 68% -> 99%, kernel share (log) 64% -> 93%" in v.summary
    assert v.summary.endswith("the copy was the bottleneck (33% of GPU 0's time, now 6%)")
    assert json.loads(json.dumps(v.as_dict()))["after"]["kernel_share"]["0"] == pytest.approx(0.926, abs=0.001)


def test_docs_gpu_md_gives_the_saved_runs_proofs_per_hour_as_the_fixed_verdict_reads_them():
    """The verdicts saved in run*/*/summary.json were printed while proofs/h kept the warm-up proof's time
    (fixed 2026-12-04); docs/gpu.md gives each cycle's change read again from the same whole logs, and it
    lies within 2 points of the change with no proof left out at all."""
    from swapctl.experiment.judge import side, without_warmup
    from swapctl.logs.timings import parse_files

    doc = (Path(__file__).parent.parent / "docs" / "gpu.md").read_text()
    for cycle in ("default", "gpu1500", "part2048"):
        said = []
        for run in ("run1", "run2"):
            a, b = parse_files([str(DATA / run / cycle / "cuzk.log")], workers=1).runs[:2]
            rate = [side(without_warmup([r], 1)[0], []).proofs_per_hour for r in (a, b)]
            plain = [side([r], []).proofs_per_hour for r in (a, b)]
            change, unwarmed = rate[1] / rate[0] - 1, plain[1] / plain[0] - 1
            assert abs(change - unwarmed) < 0.02, (run, cycle, change, unwarmed)
            said.append(f"{change * 100:+.0f}%")
        assert f"{cycle} {said[0]} and {said[1]}" in doc, (cycle, said)


def test_the_table_in_docs_gpu_md_is_the_saved_runs(checked):
    """docs/gpu.md's table of the figures beside the readers is what check_gpu_run.py reads from the data."""
    doc = (Path(__file__).parent.parent / "docs" / "gpu.md").read_text()
    rows = [line.split("|")[1:-1] for line in doc.splitlines() if line.startswith("| 1 /") or line.startswith("| 2 /")]
    assert len(rows) == 12
    for cells in rows:
        run, cycle, build = (c.strip() for c in cells[0].split("/"))
        name = {"default": "default", "gpu_ms=1500": "gpu1500", "2 GiB": "part2048"}[cycle]
        r = next(x for x in checked[f"run{run}/{name}"]["runs"] if x["build"] == build)
        want = [r["sm_activity"], r["reader_sm_activity"], r["kernel_share_log_in_span"], r["duty_cycle"],
                r["reader_util_gpu"], r["independent_dmon_duty_cycle"]]
        got = [float(cells[i]) for i in (2, 4, 5, 6, 7, 8)]
        assert got == want, (cells[0], got, want)
        assert float(cells[9].strip(" *%")) == r["copy_share"]
        interval = cells[3].strip()
        assert interval == ("none" if r["interval"] is None else f"{r['interval'][0]}-{r['interval'][1]}")
        assert cells[1].strip().startswith(f"{r['cycle_ms']['p50'] / 1000:.2f} s")
