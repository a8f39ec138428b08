"""The warm-up proof: the stand-in loads its SRS at the first proof, as cuzk does (srs_manager.rs:157-230,
from process_batch, engine.rs:2200-2210), and `experiment --warmup N` leaves the first N proofs of a run
that begins at the daemon's start out of the verdict."""

import io
import subprocess

from swapctl.experiment import verdict, without_warmup
from swapctl.logs.timings import parse

from lab import build_prover, prover_config


def test_the_srs_loads_once_at_the_first_proof_not_at_the_start(lab_dir, tmp_path):
    binary = build_prover(lab_dir / "bin" / "prover-warm", TAG="warm")
    config = tmp_path / "c.toml"
    config.write_text(prover_config(memory_mib=4, jobs=3, partitions=2, partition_mib=1))
    proc = subprocess.Popen([str(binary), "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={"NO_COLOR": "1"})
    lines = []
    try:
        assert proc.stdout is not None
        while sum("Phase 7: all partitions complete" in line for line in lines) < 3:  # its own jobs end after 3
            line = proc.stdout.readline()
            assert line, f"the daemon ended early: {lines[-3:]}"
            lines.append(line)
    finally:
        proc.kill()
        proc.wait()
    out = "".join(lines)
    ready = next(i for i, line in enumerate(lines) if "cuzk-daemon ready" in line)
    [load] = [i for i, line in enumerate(lines) if "loading SRS from disk" in line]
    first_synth = next(i for i, line in enumerate(lines) if "partition synthesis complete" in line)
    assert ready < load < first_synth
    assert out.count("SRS loaded successfully") == 1 and out.count("Phase 7: all partitions complete") == 3


def _log(totals: list[int], start: bool = True) -> bytes:
    head = "2026-12-01T10:00:00.000000Z  INFO cuzk_daemon: cuzk-daemon starting build=a\n" if start else ""
    body = "".join(f"2026-12-01T10:00:0{i}.000000Z  INFO cuzk_core::engine: Phase 7: all partitions complete, proof "
                   f"assembled job_id=j{i} proof_len=1920 total_ms={t} synth_ms=10 gpu_ms=10\n"
                   for i, t in enumerate(totals))
    return (head + body).encode()


def test_warmup_leaves_the_first_proof_of_a_fresh_daemon_out_of_the_verdict():
    before = parse([io.BytesIO(_log([1260, 1000, 1000, 1000]))]).runs
    after = parse([io.BytesIO(_log([1260, 1000, 1000, 1000]))]).runs
    kept, left = without_warmup(after, 1)
    assert left == 1 and kept[0].jobs == 3 and list(kept[0].phases["job_total_ms"]) == [1000, 1000, 1000]
    assert list(after[0].phases["job_total_ms"]) == [1260, 1000, 1000, 1000]  # the runs themselves are unchanged
    v = verdict(without_warmup(before, 1)[0], kept)
    c = v.phases["job_total_ms"]
    assert c.n_after == 3 and c.median_after == 1000 and c.spread_after == 0 and v.after.proofs == 3


def test_a_run_read_from_its_middle_has_no_warmup_to_leave_out():
    runs = parse([io.BytesIO(_log([1000, 1000], start=False))]).runs
    kept, left = without_warmup(runs, 1)
    assert left == 0 and list(kept[0].phases["job_total_ms"]) == [1000, 1000]
