"""What came back from the real H200 run (benchmarks/gpu_pinned_vs_pageable.py via scripts/gpu-run.sh):
nvidia-smi while the stand-in daemon ran on the GPU, and the daemon's real logs before and after
`swapctl deploy` swapped the pageable build for the pinned one."""

import json
from pathlib import Path

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
