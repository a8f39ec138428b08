"""The parser on logs the real tracing-subscriber rendered from cuzk's own macro calls (tests/logrender/):
ANSI on and off, two GPUs with two workers each, three runs in one log, TIMELINE lines cut by other lines.
Each log's manifest holds every value the renderer logged, so each figure is checked against what was
really printed, not against a second parser."""

from __future__ import annotations

import io
import re
from collections import defaultdict
from pathlib import Path

import pytest

from swapctl.logs import timings
from swapctl.logs.timings import parse, summarize

DATA = Path(__file__).parent / "data" / "cuzk-real"
LOGS = ["two-gpu-three-runs", "one-gpu-nocolor"]


def manifest(name: str) -> list[dict]:
    """Per run: phase -> values, GPU -> held ms and partitions, proofs, pinned flags."""
    runs: list[dict] = []
    for line in (DATA / f"{name}.manifest").read_text().splitlines():
        word, *rest = line.split()
        if word == "run":
            runs.append({"phases": defaultdict(list), "held": defaultdict(float), "parts": defaultdict(int),
                         "jobs": 0, "pinned": [], "gpus": int(rest[0])})
        elif word == "phase":
            runs[-1]["phases"][rest[0]].append(float(rest[1]))
        elif word == "phase_count":  # the noise lines: all 0 ms
            runs[-1]["phases"][rest[0]].extend([0.0] * int(rest[1]))
        elif word == "gpu":
            runs[-1]["held"][rest[0]] += float(rest[2])
            runs[-1]["parts"][rest[0]] += 1
        elif word == "job":
            runs[-1]["jobs"] += 1
        elif word == "pinned":
            runs[-1]["pinned"].append(rest[0] == "1")
    return runs


def read(name: str):
    with open(DATA / f"{name}.log", "rb") as f:
        return parse([f])


@pytest.mark.parametrize("name", LOGS)
def test_every_phase_the_daemon_logged_comes_back_with_its_count_and_percentiles(name):
    log, expected = read(name), manifest(name)
    assert len(log.runs) == len(expected)
    for run, want in zip(log.runs, expected, strict=False):
        got = run.report()["phases"]
        assert set(got) == set(want["phases"])
        for phase, values in want["phases"].items():
            assert got[phase] == summarize(values), phase
    everything = defaultdict(list)
    for want in expected:
        for phase, values in want["phases"].items():
            everything[phase] += values
    combined = log.report()["phases"]
    assert {k: combined[k] for k in everything} == {k: summarize(v) for k, v in everything.items()}


@pytest.mark.parametrize("name", LOGS)
def test_proofs_partitions_and_pageable_share_are_counted_once_and_no_known_line_is_skipped(name):
    log, expected = read(name), manifest(name)
    for run, want in zip(log.runs, expected, strict=False):
        r = run.report()
        assert r["jobs"] == want["jobs"] and r["partitions"] == len(want["pinned"])
        assert r["pageable_share"] == want["pinned"].count(False) / len(want["pinned"])
        assert r["skipped_lines"] == 0
    # synth_ms is logged twice a partition (pipeline.rs and engine.rs): counted once
    assert log.report()["phases"]["synth_ms"]["count"] == sum(len(w["pinned"]) for w in expected)


def test_cut_timeline_lines_are_mended_and_the_lines_inside_them_kept():
    raw = (DATA / "two-gpu-three-runs.log").read_bytes()
    cut = [line for line in raw.splitlines() if line.startswith(b"TIMELINE,") and timings.WHOLE.search(line, 9)]
    assert len(cut) >= 3, "the rendered log should hold cut TIMELINE lines"
    log, expected = read("two-gpu-three-runs"), manifest("two-gpu-three-runs")
    for run, want in zip(log.runs, expected, strict=False):
        # every partition's GPU_START..GPU_END pair found: one GPU phase per partition, per GPU
        assert {g: d["phases"] for g, d in run.gpus().items()} == dict(want["parts"])


def test_each_partition_is_attributed_to_its_gpu_and_shares_are_per_gpu():
    log, expected = read("two-gpu-three-runs"), manifest("two-gpu-three-runs")
    for run, want in zip(log.runs, expected, strict=False):
        gpus = run.gpus()
        assert set(gpus) == {"0", "1"}
        assert {g: d["workers"] for g, d in gpus.items()} == {"0": [0, 1], "1": [2, 3]}
        assert {g: d["held_ms"] for g, d in gpus.items()} == dict(want["held"])
        r = run.report()
        for g, share in r["gpus"].items():
            assert share["gpu_phase_share"] == pytest.approx(want["held"][g] / run.wall_ms)  # no barrier waits
        assert r["gpu_phase_share"] == pytest.approx(sum(want["held"].values()) / (2 * run.wall_ms))


def test_three_runs_in_one_log_are_reported_apart_and_no_share_exceeds_one():
    log = read("two-gpu-three-runs")
    report = log.report()
    assert [r["run"] for r in report["runs"]] == [1, 2, 3] and all(r["started"] for r in report["runs"])
    assert report["wall_ms"] == pytest.approx(sum(r.wall_ms for r in log.runs))
    firsts = [r["first_ts"] for r in report["runs"]]
    assert firsts == sorted(firsts) and len(set(firsts)) == 3
    shares = [report["gpu_phase_share"], report["timeline_share"]]
    shares += [g[k] for g in report["gpus"].values() for k in ("gpu_phase_share", "timeline_share")]
    shares += [r[k] for r in report["runs"] for k in ("gpu_phase_share", "timeline_share")]
    assert all(0 < s <= 1 for s in shares)
    assert log.report("last")["partitions"] == 18 and log.report(2)["runs"][0]["run"] == 1
    # the last run is the pinned build
    assert log.report("last")["pageable_share"] == 0 and log.report(1)["pageable_share"] == 1


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_real_log_parsed_in_pieces_says_what_one_pass_says(parts, monkeypatch, tmp_path):
    one_pass = read("two-gpu-three-runs").report()
    monkeypatch.setattr(timings, "PARALLEL_MIN", 0)
    pieces = timings.parse_files([str(DATA / "two-gpu-three-runs.log")], workers=parts).report()
    assert _same(pieces, one_pass)


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9)
    return a == b


def _interleaved(prove_first: str, prove_3_ms: int) -> bytes:
    """two-gpu-three-runs.log with two calls of run 2 that ended together, as two GPUs' calls can: worker 3's
    (GPU 1: mutex_held_ms=30 total_start_fn_ms=31, lines 10418 and 10420) and worker 1's (GPU 0: 21 and 32,
    lines 10460-10461). Worker 1's C++ line is moved to before worker 3's prove_start line; `prove_first`
    says whose prove_start line comes next, and worker 3's prove_start_ms reads `prove_3_ms` (32: Rust's
    clock wraps the C++ one, so it reads 1 ms more when a ms boundary falls between the two)."""
    lines = (DATA / "two-gpu-three-runs.log").read_bytes().split(b"\n")
    held_3, prove_3, held_1, prove_1 = (lines[i] for i in (10417, 10419, 10459, 10460))
    assert held_3 == b"CUZK_TIMING: mutex_held_ms=30 total_start_fn_ms=31"
    assert held_1 == b"CUZK_TIMING: mutex_held_ms=21 total_start_fn_ms=32"
    assert b"prove_start" in prove_3 and b"\x1b[2m=\x1b[0m3 " in prove_3 and b"\x1b[2m=\x1b[0m1 " in prove_1
    prove_3 = re.sub(rb"(prove_start_ms(?:\x1b\[[0-9;]*m)*=(?:\x1b\[[0-9;]*m)*)31\b", rb"\g<1>%d" % prove_3_ms, prove_3)
    assert b"=\x1b[0m%d" % prove_3_ms in prove_3
    proves = [prove_3, prove_1] if prove_first == "3" else [prove_1, prove_3]
    return b"\n".join(lines[:10418] + [held_1] + lines[10418:10419] + proves + lines[10420:10459] + lines[10461:])


# worker 3's line first, reading 1 ms more: nearest-first gave it worker 1's call (32 ms); in the other order
# the times alone tell the calls apart
@pytest.mark.parametrize("prove_first,prove_3_ms", [("3", 32), ("1", 31)])
def test_calls_of_two_gpus_that_end_together_keep_their_own_gpu(prove_first, prove_3_ms):
    log = parse([io.BytesIO(_interleaved(prove_first, prove_3_ms))])
    run, want = log.runs[1], manifest("two-gpu-three-runs")[1]
    assert {g: d["held_ms"] for g, d in run.gpus().items()} == dict(want["held"])
    for g, share in run.report()["gpus"].items():
        assert share["gpu_phase_share"] == pytest.approx(want["held"][g] / run.wall_ms)


def _idle_gaps(name: str) -> list[list[float]]:
    """Per run, the gaps the log shows: at a worker's GPU_START with none of its GPU phases open, the time
    since its last GPU_END. The finalizer writes GPU_END (engine.rs:3196), often after the worker's next
    GPU_START: in one-gpu-nocolor.log worker 0 starts partition 4 at 81 ms while partition 1 ends at 86."""
    runs: list[list[float]] = []
    open_, last_end = defaultdict(set), {}
    for line in timings.lines([open(DATA / f"{name}.log", "rb")]):
        if b"cuzk-daemon starting" in line:
            runs.append([])
            open_.clear()
            last_end.clear()
        if not line.startswith(b"TIMELINE,") or b",GPU_START," not in line and b",GPU_END," not in line:
            continue
        _, offset, event, job, detail = line.decode().split(",", 4)
        fields = dict(kv.split("=") for kv in detail.split(","))
        worker, key = fields["worker"], (job, fields["partition"])
        if event == "GPU_START":
            if not open_[worker] and worker in last_end:
                runs[-1].append(float(offset) - last_end[worker])
            open_[worker].add(key)
        else:
            open_[worker].discard(key)
            last_end[worker] = float(offset)
    return runs


@pytest.mark.parametrize("name", LOGS)
def test_gaps_between_partitions_count_only_time_a_worker_had_nothing_on_the_gpu(name):
    log, expected = read(name), _idle_gaps(name)
    assert len(log.runs) == len(expected)
    for run, gaps in zip(log.runs, expected, strict=True):
        assert run.report()["starved"]["gap_between_partitions_ms"] == summarize(gaps)
    assert sum(map(len, expected)) == (1 if name == "one-gpu-nocolor" else 42)  # 9 and 42 counted before


def test_a_file_read_in_pieces_on_two_cores_reads_as_one_stream_and_its_typed_report_is_the_json():
    from swapctl.logs.cuzk import files

    log = files.parse_files([str(DATA / "two-gpu-three-runs.log")], workers=2, parallel_min=1)
    assert _same(log.report(), read("two-gpu-three-runs").report())
    figures = read("two-gpu-three-runs").figures("last")
    assert figures.as_dict() == read("two-gpu-three-runs").report("last")
    assert figures.runs[0].gpus["1"].gpu_phase_share == figures.as_dict()["runs"][0]["gpus"]["1"]["gpu_phase_share"]
    assert figures.phases["synth_ms"].count == 18 and figures.starved.gap_between_partitions_ms.count == 14


def test_each_runs_gpu_workers_are_read_from_its_start_in_both_engine_shapes():
    """engine-starts.log (render.sh): a start with two GPUs of two pipeline workers each, then a restart with
    one monolithic worker. Which shape a build runs is part of what it is (issue 43, item 4): read per run,
    every line known."""
    with open(DATA / "engine-starts.log", "rb") as f:
        log = parse([f])
    assert [r.gpu_workers for r in log.runs] == [{"pipeline": 4}, {"monolithic": 1}]
    assert [r.skipped_lines for r in log.runs] == [0, 0]
    assert [row["gpu_workers"] for row in log.report()["runs"]] == [{"pipeline": 4}, {"monolithic": 1}]
