"""Timing logs: the parser on the reference lines and on real stand-in logs; fetch-logs over real sshd."""

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swapctl.logs.timings import parse, summarize

from lab import build_prover, prover_config, swapctl, wait_until

DATA = Path(__file__).parent / "data" / "logs"


def test_reference_lines_parse_with_ansi_fields():
    with open(DATA / "reference.log", "rb") as f:
        report = parse([f]).report()
    p = report["phases"]
    assert p["total_pre_prove_ms"]["p50"] == 3050 and p["spawn_blocking_wall_ms"]["count"] == 1
    assert p["ntt_kernels"]["p50"] == 8918 and p["coset_intt_sync"]["p50"] == 2
    assert p["ntt_h_total"]["p50"] == 9825  # CUZK_NTT_H's `total`, kept apart from other totals
    assert p["barrier_wait_ms"]["p50"] == 120 and p["gpu_total_ms"]["p50"] == 10500
    assert p["malloc_trim_ms"]["p50"] == 85
    assert "worker_id" not in p and "num_circuits" not in p and "partition" not in p
    assert report["skipped_lines"] == 1  # the unknown line: counted, not fatal
    # busy = (mutex_held - barrier_wait) / wall, wall from the TIMELINE span (1200..11800 ms)
    assert report["gpu_phase_share"] == pytest.approx((10600 - 120) / 10600)
    assert report["timeline_share"] == pytest.approx(1.0)
    assert report["starved"]["barrier_wait_nonzero"] == 1


@pytest.mark.parametrize("values,p50,p95", [
    ([5], 5, 5), ([1, 3], 2, 3), ([3, 1, 2], 2, 3), (list(range(1, 101)), 50.5, 95),
])
def test_percentiles(values, p50, p95):
    s = summarize(values)
    assert (s["count"], s["p50"], s["p95"], s["max"]) == (len(values), p50, p95, max(values))


@settings(deadline=None)  # a timing under load is no property of the parser
@given(st.lists(st.decimals(min_value=0, max_value=9_999_999, places=3).filter(lambda d: len(d.normalize().as_tuple()
                                                                                       .digits) <= 7),
                min_size=1, max_size=60))
def test_logged_values_come_back_exactly_as_printed(values):
    """Phase values are stored as float32; what a log prints (up to 7 significant digits) is what comes back."""
    log = "".join(f"CUZK_TIMING: synth_ms={v} gpu_tid=0\n" for v in values).encode()
    s = parse([io.BytesIO(log)]).report()["phases"]["synth_ms"]
    printed = sorted(float(v) for v in values)
    n = len(printed)
    assert s["max"] == printed[-1] and s["p95"] == printed[min(n - 1, -(-95 * n // 100) - 1)]
    assert s["p50"] == (printed[(n - 1) // 2] + printed[n // 2]) / 2


@pytest.fixture(scope="module")
def two_builds(lab_dir, tmp_path_factory):
    """The same workload from the pageable and the pinned build of the stand-in, as real logs."""
    out = tmp_path_factory.mktemp("builds")
    config = out / "c.toml"
    config.write_text(prover_config(memory_mib=8, partitions=8, partition_mib=48, synth_ms=5, gpu_ms=20) +
                      "exit_after_ms = 0\n")
    logs = {}
    for kind, pinned in (("pageable", "0"), ("pinned", "1")):
        binary = build_prover(lab_dir / "bin" / f"prover-{kind}", TIMING="1", PINNED=pinned, TAG=kind)
        log = out / f"{kind}.log"
        with open(log, "wb") as f:
            subprocess.run([str(binary), "--config", str(config)], stdout=f, stderr=subprocess.STDOUT, timeout=60)
        logs[kind] = log
    return logs


def test_pinned_build_shows_shorter_ntt_kernels(two_builds):
    r = swapctl("timings", "--compare", str(two_builds["pageable"]), str(two_builds["pinned"]), "--json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    ntt = c["phases"]["ntt_kernels"]
    assert ntt["after_p50"] < 0.8 * ntt["before_p50"], ntt  # the copy left ntt_kernels
    assert ntt["change_pct"] < -20


def test_timings_json_contract_and_pageable_share(two_builds):
    r = swapctl("timings", str(two_builds["pageable"]), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ntt = doc["phases"]["ntt_kernels"]
    assert set(ntt) == {"count", "p50", "p95", "max"} and ntt["count"] == 8
    assert 0 < doc["gpu_phase_share"] <= 1 and doc["skipped_lines"] >= 0
    assert doc["pageable_share"] == 1.0 and doc["partitions"] == 8
    pinned = json.loads(swapctl("timings", str(two_builds["pinned"]), "--json").stdout)
    assert pinned["pageable_share"] == 0.0


def test_timings_table_for_people(two_builds):
    r = swapctl("timings", str(two_builds["pageable"]))
    assert r.returncode == 0
    assert "ntt_kernels" in r.stdout and "GPU_START..GPU_END share" in r.stdout and "overstates" in r.stdout
    assert "GPU phase share" in r.stdout and "not how busy the GPU is" in r.stdout


def test_timings_missing_file_is_bad_input(tmp_path):
    r = swapctl("timings", str(tmp_path / "none.log"))
    assert r.returncode == 2 and "none.log: cannot read" in r.stderr


# -- fetch-logs over the real sshd ------------------------------------------------------------------

def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def fetch(box, dest, *extra):
    return swapctl("fetch-logs", "lab", "--dest", str(dest), "--json", "-p", str(box.playbook_path), *extra)


def test_fetch_is_incremental_and_byte_identical(box, prover, tmp_path):
    box.write_playbook(logs={"paths": [str(box.data / "*.log")]})
    box.start_by_hand(prover, prover_config(jobs=2))
    dest = tmp_path / "logs"
    r = fetch(box, dest)
    assert r.returncode == 0, r.stderr
    [first] = json.loads(r.stdout)["hosts"]["lab"]
    local = Path(first["local"])
    assert local == dest / "lab" / "cuzk.log"
    size = local.stat().st_size
    assert first["new_bytes"] == size > 0 and first["method"] == "zstd"
    with open(box.log, "ab") as f:  # the daemon writes more
        f.write(b"TIMELINE,99999,GPU_START,feedface,worker=0,partition=0\n" * 1000)
    r = fetch(box, dest)
    [second] = json.loads(r.stdout)["hosts"]["lab"]
    assert second["new_bytes"] == box.log.stat().st_size - size  # only the new bytes
    assert second["wire_bytes"] < second["new_bytes"] / 5  # compressed on the wire
    assert sha(local) == sha(box.log)
    [third] = json.loads(fetch(box, dest).stdout)["hosts"]["lab"]
    assert third["new_bytes"] == 0


def test_truncated_log_goes_to_a_new_local_file(box, prover, tmp_path):
    box.write_playbook(logs={"paths": [str(box.data / "*.log")]})
    box.log.write_bytes(b"generation one\n" * 100)
    dest = tmp_path / "logs"
    assert fetch(box, dest).returncode == 0
    old = (dest / "lab" / "cuzk.log").read_bytes()
    box.log.write_bytes(b"two\n")  # truncated and rewritten
    [f] = json.loads(fetch(box, dest).stdout)["hosts"]["lab"]
    assert f["restarted"] and Path(f["local"]).name == "cuzk.log.1"
    assert Path(f["local"]).read_bytes() == b"two\n"
    assert (dest / "lab" / "cuzk.log").read_bytes() == old  # never mixed


def test_fetch_killed_midway_resumes_to_an_identical_copy(box, tmp_path):
    box.write_playbook(logs={"paths": [str(box.data / "big.log")]})
    big = box.data / "big.log"
    with open(big, "wb") as f:
        f.write(os.urandom(150 << 20))  # incompressible: the transfer takes a while
    dest = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, "-m", "swapctl", "fetch-logs", "lab", "--dest", str(dest),
                             "-p", str(box.playbook_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    local = dest / "lab" / "big.log"
    wait_until(lambda: local.exists() and local.stat().st_size > (4 << 20), timeout=60, what="a partial download")
    proc.kill()
    proc.wait()
    partial = local.stat().st_size
    assert 0 < partial < big.stat().st_size, "the transfer finished before it could be killed"
    [f] = json.loads(fetch(box, dest).stdout)["hosts"]["lab"]
    assert f["new_bytes"] == big.stat().st_size - partial
    assert sha(local) == sha(big)


def test_a_log_holding_several_daemon_runs_sums_their_wall_time(tmp_path):
    """TIMELINE offsets restart with the daemon: a log appended across a deploy holds two runs."""
    run = (DATA / "reference.log").read_bytes()
    both = tmp_path / "both.log"
    both.write_bytes(run + run)
    with open(DATA / "reference.log", "rb") as f:
        one = parse([f]).report()
    with open(both, "rb") as f:
        two = parse([f]).report()
    assert two["wall_ms"] == 2 * one["wall_ms"]
    assert two["gpu_phase_share"] == pytest.approx(one["gpu_phase_share"])
    assert two["timeline_share"] == pytest.approx(one["timeline_share"])


def test_since_deploy_fetches_only_what_the_current_release_wrote(box, prover, prover_b, tmp_path, swapctl_env):
    box.write_playbook(logs={"paths": [str(box.log)]})
    box.start_by_hand(prover)
    r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    journal = [json.loads(line) for line in (box.data / ".swapctl/cuzk/journal.jsonl").read_text().splitlines()]
    offset, release = journal[-1]["log_offset"], journal[-1]["current"]
    dest = tmp_path / "logs"
    r = fetch(box, dest, "--since-deploy")
    assert r.returncode == 0, r.stderr
    [f] = json.loads(r.stdout)["hosts"]["lab"]
    local = Path(f["local"])
    assert local.name == f"cuzk.log.since-{release}"
    assert local.read_bytes() == box.log.read_bytes()[offset:len(local.read_bytes()) + offset]
    assert b"build" in local.read_bytes() and local.stat().st_size == box.log.stat().st_size - offset
    r = fetch(box, dest)  # the whole log goes to its own local copy, never mixed with the other
    [whole] = json.loads(r.stdout)["hosts"]["lab"]
    assert Path(whole["local"]).name == "cuzk.log" and Path(whole["local"]).read_bytes()[:offset] == \
        box.log.read_bytes()[:offset]


def test_since_deploy_names_its_file_by_the_current_release_never_by_a_line_planted_in_the_journal(
        box, prover, prover_b, tmp_path, swapctl_env):
    box.write_playbook(logs={"paths": [str(box.log)]})
    box.start_by_hand(prover)
    assert swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path)).returncode == 0
    path = box.data / ".swapctl/cuzk/journal.jsonl"
    offset = json.loads(path.read_text().splitlines()[-1])["log_offset"]
    with open(path, "a") as f:  # the last start, as the journal says it, names a "release" with a newline
        f.write(json.dumps({"action": "deploy", "outcome": "deployed", "current": "a\nb", "log_offset": 0}) + "\n")
    dest = tmp_path / "logs"
    r = fetch(box, dest, "--since-deploy")
    assert r.returncode == 0, r.stderr
    assert "1 line skipped (not journal entries)" in r.stderr
    [f] = json.loads(r.stdout)["hosts"]["lab"]
    assert Path(f["local"]).name == f"cuzk.log.since-{sha(prover_b)[:12]}"
    assert Path(f["local"]).read_bytes()[:64] == box.log.read_bytes()[offset:offset + 64]
    assert not [p for p in dest.rglob("*") if "\n" in p.name]


def test_timings_by_release_splits_the_fetched_log_at_each_start(box, prover, prover_b, tmp_path, swapctl_env):
    box.write_playbook(logs={"paths": [str(box.log)]})
    box.start_by_hand(prover)
    wait_until(lambda: b"malloc_trim" in box.log.read_bytes(), what="build A's first proof")
    assert swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path)).returncode == 0
    offset = json.loads((box.data / ".swapctl/cuzk/journal.jsonl").read_text().splitlines()[-1])["log_offset"]
    wait_until(lambda: b"malloc_trim" in box.log.read_bytes()[offset:], what="build B's first proof")
    dest = tmp_path / "logs"
    assert fetch(box, dest).returncode == 0
    r = swapctl("timings", "lab", "--by-release", "--dest", str(dest), "--json", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    a, b = json.loads(r.stdout)["releases"]
    size = box.log.stat().st_size
    assert (a["release"], a["from_byte"], a["to_byte"]) == (sha(prover)[:12], 0, offset)
    assert (b["release"], b["from_byte"], b["to_byte"]) == (sha(prover_b)[:12], offset, size)
    for part in (a, b):  # each part holds its own proof, and only its own
        assert part["report"]["jobs"] == 1 and part["report"]["phases"]["gpu_total_ms"]["count"] >= 1
    table = swapctl("timings", "lab", "--by-release", "--dest", str(dest), "-p", str(box.playbook_path))
    assert sha(prover)[:12] in table.stdout and sha(prover_b)[:12] in table.stdout and "GPU phase share" in table.stdout


def test_plot_draws_each_partitions_phases_per_worker(two_builds, tmp_path):
    from swapctl.logs.plot import intervals

    with open(two_builds["pageable"], "rb") as f:
        lanes = intervals([f])
    assert set(lanes) == {"synthesis", "GPU worker 0", "GPU worker 1"}  # two workers share the GPU
    gpu = [iv for w in ("0", "1") for iv in lanes[f"GPU worker {w}"] if iv[0] == "gpu"]
    copies = [iv for w in ("0", "1") for iv in lanes[f"GPU worker {w}"] if iv[0] == "copy"]
    assert len(gpu) == len(copies) == 8 and len([iv for iv in lanes["synthesis"]]) == 8  # 8 partitions
    assert {c[2] for c in copies} == {g[1] for g in gpu}  # each copy ends where its GPU phase starts
    assert all(s <= e for _, s, e in gpu + copies)
    png = tmp_path / "timeline.png"
    r = swapctl("timings", str(two_builds["pageable"]), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def _same(a, b) -> bool:
    """Reports equal, floats to 1e-9 relative (sums added in another order)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9)
    return a == b


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_a_log_parsed_in_pieces_on_several_cores_says_what_one_pass_says(parts, tmp_path, monkeypatch):
    from swapctl.logs import timings

    data = Path(__file__).parent / "data"
    # two daemon runs back to back (TIMELINE offsets go back to 0), from the real H200 run
    log = tmp_path / "two-runs.log"
    log.write_bytes((data / "h200-run" / "pageable.log").read_bytes() + (data / "h200-run" / "pinned.log").read_bytes()
                    + (data / "logs" / "reference.log").read_bytes())
    with open(log, "rb") as f:
        one_pass = parse([f]).report()
    monkeypatch.setattr(timings, "PARALLEL_MIN", 0)
    pieces = timings.parse_files([str(log)], workers=parts).report()
    assert one_pass["phases"]["ntt_kernels"]["count"] > 0 and one_pass["timeline_share"]
    assert _same(pieces, one_pass)


def test_byte_ranges_of_one_open_file_made_together_each_read_their_own_bytes(tmp_path):
    """timings --by-release reads a release's starts as one log: ranges made before any is read. Each read
    from where the last range made had left the file, so a release started twice was counted wrong."""
    from swapctl.logs.streams import ByteRange

    path = tmp_path / "log"
    path.write_bytes(b"0123456789abcdef")
    with open(path, "rb") as f:
        first, second, third = ByteRange(f, 0, 4), ByteRange(f, 10, 16), ByteRange(f, 4, 6)
        assert [first.read(2), second.read(), first.read(), third.read(-1), third.read()] == [
            b"01", b"abcdef", b"23", b"45", b""]
