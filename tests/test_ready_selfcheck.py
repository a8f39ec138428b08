"""Ready means a valid proof: `ready = "proof"` without a status_url waits for cuzk's self-check of a proof
(`Phase 7: PoRep proof self-check PASSED`, cuzk-core/src/engine.rs:529 at curio e0294b0f), never for the
`proof assembled` line it logs before that check (:506-512); a failed check before one passed (:577) fails
the start, which the host rolls back as it does a crash. Real sshd, real stand-in processes."""

import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest
from loadgen import LoadGen
from test_ansible import collection  # noqa: F401
from test_drain import Daemon

from lab import free_port, prover_config, wait_until
from test_deploy import deploy, exe_sha, journal, sha

PASSED = "Phase 7: PoRep proof self-check PASSED"
FAILED = "Phase 7: PoRep proof self-check FAILED \u2014 proof will NOT be returned to caller"


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def since_start(box, offset: int) -> str:
    return box.log.read_bytes()[offset:].decode(errors="replace")


def test_a_build_whose_proofs_fail_the_self_check_is_rolled_back_and_the_old_one_runs(box, prover,
                                                                                      prover_selfcheck):
    """Its `proof assembled` line comes, then the FAILED one: before, the Phase 7 line made it deployed (exit 0)."""
    box.write_playbook(daemon={"ready": "proof", "ready_timeout_s": 20})
    box.start_by_hand(prover)  # each start proves one job of its own (prover_config's jobs = 1)
    r = deploy(box, prover_selfcheck)
    said = " ".join(r.stderr.split())
    assert r.returncode == 4, r.stderr
    assert "a proof it made failed cuzk's self-check before one passed" in said
    assert "not ready after" not in said  # failed at the line, not at the time-out
    assert FAILED in r.stderr  # the failed start's log tail is shown
    wait_until(lambda: len(box.daemons()) == 1, what="one daemon")
    assert exe_sha(box.one_daemon()) == sha(prover)
    entry = journal(box)[-1]
    assert entry["action"] == "auto-rollback" and entry["outcome"] == "rolled-back"
    assert entry["from"] == sha(prover_selfcheck) and entry["to"] == sha(prover)
    assert "failed cuzk's self-check" in entry["reason"]
    assert entry["steps"]["ready"] < 20
    bad = json.loads((box.data / ".swapctl/cuzk/releases" / sha(prover_selfcheck)[:12] / "manifest.json").read_text())
    assert bad["status"] == "bad"
    # the failed start's own output: from its offset ("LOG from byte N") to the fallback's start
    failed = box.log.read_bytes()[int(entry["failed_log"].rsplit(" ", 1)[1]):entry["log_offset"]].decode()
    assert failed.index("proof assembled") < failed.index(FAILED) and PASSED not in failed



def test_with_a_status_url_a_failed_proof_before_a_completed_one_rolls_back_at_once(box, prover, prover_selfcheck):
    """ready = "proof" by the status: counters.total_failed rising before total_completed fails the start
    (before, the start waited its whole ready_timeout_s for a completed proof that never came)."""
    d = Daemon(box, synth_ms=50, ready="proof", ready_timeout_s=30)
    d.start(prover)
    gen = d.load(pending=1)
    try:
        r = d.deploy(prover_selfcheck)
    finally:
        gen.stop()
    said = " ".join(r.stderr.split())
    assert r.returncode == 4, r.stderr
    assert "a proof it made failed before one completed (its status: total_failed above 0)" in said
    assert "not ready after" not in said
    entry = journal(box)[-1]
    assert entry["outcome"] == "rolled-back" and entry["to"] == sha(prover) and entry["steps"]["ready"] < 30
    assert exe_sha(box.one_daemon()) == sha(prover)
    assert any(j.outcome == "failed" for j in gen.jobs)  # its caller got the failure, not a proof

def test_a_good_build_is_ready_at_its_first_self_check_passed(box, prover, prover_b):
    box.write_playbook(daemon={"ready": "proof", "ready_timeout_s": 20})
    box.start_by_hand(prover)
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed" and entry["to"] == sha(prover_b)
    assert PASSED in since_start(box, entry["log_offset"])
    assert exe_sha(box.one_daemon()) == sha(prover_b)


def test_a_good_build_with_no_proof_coming_is_not_ready(box, prover, prover_b):
    """The ready line is a proof's self-check, not the start: with no job, the start times out."""
    box.write_playbook(daemon={"ready": "proof", "ready_timeout_s": 2})
    box.start_by_hand(prover, prover_config(jobs=0))
    r = deploy(box, prover_b)
    assert r.returncode == 4 and "not ready after 2 s" in " ".join(r.stderr.split()), r.stderr
    assert exe_sha(box.one_daemon()) == sha(prover)


def test_the_selfcheck_build_logs_as_cuzk_fails_its_callers_and_counts_them_failed(prover_selfcheck, tmp_path):
    """The stand-in's FAULT=selfcheck build: cuzk's ERROR lines (engine.rs:572-598), the caller's answer is a
    failure (JobStatus::Failed, :630-638) and /status counts it in total_failed (status.rs:364-378)."""
    port, status_port = free_port(), free_port()
    config = tmp_path / "cuzk.toml"
    config.write_text(prover_config(memory_mib=8, jobs=0, partition_mib=1) +
                      f'listen = "127.0.0.1:{port}"\nstatus_listen = "127.0.0.1:{status_port}"\nsrs_load_ms = 10\n')
    log = tmp_path / "cuzk.log"
    proc = subprocess.Popen([str(prover_selfcheck), "--config", str(config)], stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"}, start_new_session=True)
    gen = None
    try:
        wait_until(lambda: "cuzk-daemon ready" in log.read_text(), what="the ready line")
        gen = LoadGen(f"127.0.0.1:{port}", 1).start()
        wait_until(lambda: gen.counts()["failed"] >= 2, what="two proofs failed")
        gen.stop()
        with urllib.request.urlopen(f"http://127.0.0.1:{status_port}/status", timeout=5) as answer:
            counters = json.load(answer)["counters"]
    finally:
        if gen is not None:
            gen.stop()
        proc.kill()
        proc.wait()
    assert counters["total_completed"] == 0 and counters["total_failed"] >= 2
    assert counters["failed_by_kind"]["porep-c2"] == counters["total_failed"]
    failed = next(j for j in gen.jobs if j.outcome == "failed")
    assert re.fullmatch(rf"FAILED {failed.job_id} PoRep proof self-check failed: assembled proof did not verify "
                        r"\(sector=\d+, miner=1000\)", failed.detail)
    text = log.read_text()
    line = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z ERROR cuzk_core::engine: " + re.escape(FAILED) +
                      rf" job_id={failed.job_id} proof_len=1920 sector=\d+ miner=1000$", re.M)
    assert line.search(text), text[-2000:]
    assert text.index(f"proof assembled job_id={failed.job_id}") < line.search(text).start()
    assert PASSED not in text


@pytest.mark.parametrize("url", ["", "http://127.0.0.1:9821/status"])
def test_the_ansible_module_waits_for_the_same_self_check_lines_as_deploy(collection, url):  # noqa: F811
    """The collection restates the ready line (engine.swap_inputs): for ready = "proof" it is swapctl's, the
    failed self-check too; with a status_url neither (the status counts the proofs)."""
    sys.path.insert(0, str(collection))
    try:
        from ansible_collections.swapctl.cuzk.plugins.module_utils import engine
    finally:
        sys.path.remove(str(collection))
    from swapctl import playbook as pb
    from swapctl.facts.releases import Release
    from swapctl.swap import swaprun
    from swapctl.swap.context import Context
    from swapctl.swap.plan import Daemon

    daemon = {"binary": "/data/cuzk", "log": "/data/cuzk.log", "ready": "proof", "status_url": url}
    book = pb.parse("[daemon]\n" + "".join(f'{k} = "{v}"\n' for k, v in daemon.items() if v), "lab.toml")
    ctx = Context(type("H", (), {"name": "gpu-0"})(), book, book.require_daemon())  # type: ignore[arg-type]
    new = Release(sha256="b" * 64, size=1, name="cuzk", created="2026", by="me", argv=("/data/cuzk",), cwd="/data")
    theirs = dict(swaprun.swap_cmd(ctx, Daemon.started(4242), new, "", None).inputs)
    s = engine.Settings.of({"daemon": {k: v for k, v in daemon.items() if v}, "host": "gpu-0"})
    ours = engine.swap_inputs(s, engine.Daemon(pid=4242), engine.Release(**new.__dict__), "", None)
    assert (ours["re"], ours["bad_re"]) == (theirs["re"], theirs["bad_re"])
    if url:
        assert (theirs["re"], theirs["bad_re"]) == ("cuzk-daemon ready", "")
        return
    assert re.search(theirs["re"], PASSED) and not re.search(theirs["re"], FAILED)
    error = "Phase 7: PoRep proof self-check error \u2014 proof will NOT be returned to caller"  # engine.rs:613
    assert re.search(theirs["bad_re"], FAILED) and re.search(theirs["bad_re"], error)
    assert not re.search(theirs["bad_re"], PASSED)
