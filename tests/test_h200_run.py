"""What came back from the real H200 run (benchmarks/gpu_pinned_vs_pageable.py via scripts/gpu-run.sh):
nvidia-smi while the stand-in daemon ran on the GPU, and the daemon's real logs before and after
`swapctl deploy` swapped the pageable build for the pinned one."""

import json
from pathlib import Path

import pytest

from swapctl.facts import nvidia
from swapctl.logs.timings import compare, parse

RUN = Path(__file__).parent / "data" / "h200-run"


def report(name: str) -> dict:
    with open(RUN / f"{name}.log", "rb") as f:
        return parse([f]).report()


def test_nvidia_smi_while_the_daemon_ran():
    [gpu] = nvidia.parse_query_gpu((RUN / "query-gpu-daemon.csv").read_text())
    assert gpu.name == "NVIDIA H200" and gpu.memory_used_mib == 1551 and gpu.utilization_pct == 99
    assert gpu.throttle_reasons == () and gpu.ecc_uncorrected == 0
    [app] = nvidia.parse_compute_apps((RUN / "compute-apps-daemon.csv").read_text())
    assert app.name == "/tmp/swapctl-gpu/data/cuzk" and app.used_mib == 1542 and app.gpu_uuid == gpu.uuid


def test_status_json_from_the_gpu_host_shows_the_daemon_on_the_gpu():
    st = json.loads((RUN / "status.json").read_text())["hosts"]["h200"]
    [daemon] = st["daemons"]
    [app] = st["gpu_processes"]
    assert app["pid"] == daemon["pid"] and st["gpu_error"] is None
    assert daemon["rss_kib"] > 8 * (1 << 20)  # the 8 GiB "SRS" it holds


def test_pinned_build_takes_the_copy_out_of_ntt_kernels_on_a_real_gpu():
    before, after = report("pageable"), report("pinned")
    assert before["pageable_share"] == 1.0 and after["pageable_share"] == 0.0
    assert before["skipped_lines"] == 0 and after["skipped_lines"] == 0
    ntt_before, ntt_after = before["phases"]["ntt_kernels"]["p50"], after["phases"]["ntt_kernels"]["p50"]
    assert (ntt_before, ntt_after) == (182.0, 70.0)
    c = compare(before, after)
    assert c["phases"]["gpu_total_ms"]["change_pct"] < -30
    assert c["phases"]["job_total_ms"]["after_p50"] < c["phases"]["job_total_ms"]["before_p50"]


def test_swap_timings_recorded_by_the_deploy():
    summary = json.loads((RUN / "summary.json").read_text())
    assert summary["deploy_exit"] == 0
    steps = summary["steps"]
    assert set(steps) >= {"stop", "memory", "start", "ready"}
    probe = {line.split()[1]: float(line.split("GB/s=")[1].split()[0]) for line in summary["probe"]}
    assert probe["pinned"] > 5 * probe["pageable"]


# -- swapctl experiment on the H200 (benchmarks/gpu_experiment.py): the pageable build, then the pinned --

EXP = Path(__file__).parent / "data" / "h200-experiment"


def _experiment():
    from swapctl.gpu.samples import parse_dmon, read_samples
    from swapctl.logs.timings import parse as parse_log

    with open(EXP / "cuzk.log", "rb") as f:
        log = parse_log([f])
    return log, read_samples([EXP / "gpu-samples.dmon"]), parse_dmon((EXP / "dmon-independent.txt").read_text())


def test_gpu_busy_from_the_sampler_agrees_with_an_independent_dmon_over_each_run_within_5_points():
    from datetime import timedelta

    from swapctl.gpu.samples import window
    from swapctl.logs import gpu

    log, ours, theirs = _experiment()
    assert [r.pageable for r in log.runs] == [39, 0] and log.runs[1].pinned == 45
    report = gpu.report(log, "all", ours)
    for row, run in zip(report["runs"], log.runs, strict=False):
        start, end = gpu.run_window(run)
        independent = window(theirs, start, end + timedelta(seconds=1), 0)
        assert independent.count >= 85
        assert abs(row["gpu_busy"]["0"] - independent.sm_mean) < 5, (row["gpu_busy"], independent)
    # the GPU's own counter rose from the pageable to the pinned build while the phase share fell
    busy = [row["gpu_busy"]["0"] for row in report["runs"]]
    share = [row["gpu_phase_share"] for row in report["runs"]]
    assert busy[1] > busy[0] + 15 and share[1] < share[0]


def test_where_the_time_goes_adds_up_and_shows_the_copy_wait_only_in_the_pageable_build():
    from swapctl.logs import gpu

    log, ours, _ = _experiment()
    pageable, pinned = (gpu.gpu_view(r, ours)["0"] for r in log.runs)
    for view in (pageable, pinned):
        assert sum(view["time"].values()) == pytest.approx(1.0)
    assert pageable["time"]["copy_wait"] > 0.1 and pinned["time"].get("copy_wait", 0) < 0.02
    assert pageable["rx_in_phase_mbps"] > 1000  # the pageable copy shows as PCIe RX inside the GPU phases
    # what the stand-in spends most idle time on: its one synthesis thread writing 4 GiB a partition
    assert pageable["largest_idle_cause"] == "synthesis"


def test_the_experiments_verdict_on_the_h200_calls_the_pinned_build_faster():
    from swapctl.experiment import verdict

    log, ours, _ = _experiment()
    v = verdict(log.runs[:1], log.runs[1:], ours)
    ntt = v.phases["ntt_kernels"]
    assert ntt.significant and -0.55 < ntt.delta < -0.4 and ntt.high < 0
    assert v.after.proofs_per_hour > v.before.proofs_per_hour
    # the experiment judged B on the log as far as its window went; the saved log runs a little longer
    saved = json.loads((EXP / "summary.json").read_text())["verdict"]
    assert saved.split(",")[0] == v.summary.split(",")[0] == "ntt_kernels -48% [-48%"
