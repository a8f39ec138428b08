"""The daemon's own view in a swap: the stand-in under a load generator standing in for Curio, deployed
with `stop = "term"` (what was in flight is lost, and the journal says how many) and `stop = "drain"`
(nothing lost), a drain that times out, and readiness by a completed proof. Real sshd, real processes."""

import json
import os
import re
import signal
import subprocess
import urllib.request

import pytest
from loadgen import LoadGen
from test_daemon_view import Answering  # whoever holds a status port, answering what the test says

from swapctl import playbook as pb

from lab import free_port, prover_config, swapctl, wait_until
from test_deploy import journal  # each line read back whole as a JournalEntry: the drain's members too


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def snapshot(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


class Daemon:
    """The box's daemon with jobs from outside: its listen and status ports, its config, its playbook."""

    def __init__(self, box, synth_ms: int, partitions: int = 3, **daemon: object):
        self.box, self.port, self.status_port = box, free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.status_port}/status"
        self.config = (prover_config(memory_mib=8, jobs=0, partitions=partitions, partition_mib=1, synth_ms=synth_ms,
                                     gpu_ms=synth_ms // 2, listen=f"127.0.0.1:{self.port}",
                                     status_listen=f"127.0.0.1:{self.status_port}") +
                       "srs_load_ms = 100\n")  # not a quarter of a 20 s proof: the first proof is not what is tested
        box.write_playbook(daemon={"status_url": self.url, **daemon})

    def start(self, binary) -> int:
        pid = self.box.start_by_hand(binary, self.config)
        wait_until(lambda: self._answers(), what="the status endpoint")
        return pid

    def _answers(self) -> bool:
        try:
            return "pipelines" in snapshot(self.url)
        except OSError:
            return False

    def load(self, pending: int, gap_s: float = 0) -> LoadGen:
        return LoadGen(f"127.0.0.1:{self.port}", pending, gap_s=gap_s).start()

    def deploy(self, binary, *extra: str) -> subprocess.CompletedProcess:
        return swapctl("deploy", "lab", "--binary", str(binary), "--yes", "-p", str(self.box.playbook_path), *extra)


def started_one(gen: LoadGen) -> None:
    wait_until(lambda: any(j.started for j in gen.jobs), what="a proof to start")


def test_term_deploy_loses_the_proof_in_flight_and_the_journal_says_so(box, prover, prover_b):
    """A proof far longer than the deploy: SIGTERM finds it mid-way; the stop loses it."""
    d = Daemon(box, synth_ms=20000, stop="term")
    d.start(prover)
    gen = d.load(pending=1)
    try:
        started_one(gen)
        r = d.deploy(prover_b)
        assert r.returncode == 0, r.stderr
        wait_until(lambda: gen.counts()["lost"] == 1, what="the load generator to see its proof lost")
    finally:
        gen.stop()
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed" and entry["lost"] == 1
    [lost] = [j for j in gen.jobs if j.outcome == "lost"]
    assert [p["job_id"] for p in entry["in_flight_at_stop"]] == [lost.job_id]
    assert "1 proof in flight (job " in " ".join(r.stderr.split())


def test_drained_deploy_loses_no_proof_and_fails_none(box, prover, prover_b):
    """Curio's proofs with pauses between them (its next task arriving): the drain stops in a pause."""
    d = Daemon(box, synth_ms=300, stop="drain", drain_timeout_s=30)
    old = d.start(prover)
    gen = d.load(pending=1, gap_s=3)
    try:
        started_one(gen)
        r = d.deploy(prover_b)
        assert r.returncode == 0, r.stderr
        done_before = gen.counts()["done"]
        gen.wait_done(done_before + 1)  # the new daemon proves what comes next
    finally:
        gen.stop()
    counts = gen.counts()
    assert counts["lost"] == 0 and counts["failed"] == 0, counts
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed" and entry["lost"] == 0 and entry["in_flight_at_stop"] == []
    assert "drained in" in " ".join(r.stderr.split())
    assert "received SIGINT, shutting down" in box.log.read_text()  # the scheduler stopped before the stop
    assert old not in box.daemons()


def test_drain_that_times_out_refuses_and_the_daemon_works_on(box, prover, prover_b):
    """drain_timeout = "refuse": proofs still in flight at the limit, so nothing is stopped or signalled."""
    d = Daemon(box, synth_ms=20000, stop="drain", drain_timeout_s=1, drain_timeout="refuse")
    old = d.start(prover)
    gen = d.load(pending=1)
    try:
        started_one(gen)
        r = d.deploy(prover_b)
        in_flight = snapshot(d.url)["pipelines"]
    finally:
        gen.stop()
    assert r.returncode == 3, r.stderr  # refused: nothing changed
    assert "daemon.drain_timeout is \"refuse\": nothing was stopped" in " ".join(r.stderr.split())
    assert box.daemons() == [old] and gen.counts()["lost"] == 0
    assert in_flight and in_flight[0]["partitions_done"] < in_flight[0]["total_partitions"]
    assert "received SIGINT" not in box.log.read_text()


def test_drain_that_times_out_with_stop_stops_anyway_and_counts_the_loss(box, prover, prover_b):
    d = Daemon(box, synth_ms=20000, stop="drain", drain_timeout_s=1, drain_timeout="stop")
    d.start(prover)
    gen = d.load(pending=1)
    try:
        started_one(gen)
        r = d.deploy(prover_b)
        assert r.returncode == 0, r.stderr
        wait_until(lambda: gen.counts()["lost"] == 1, what="the load generator to see its proof lost")
    finally:
        gen.stop()
    entry = journal(box)[-1]
    assert entry["lost"] == 1 and entry["drain_s"] >= 1
    assert "still in flight after 1 s (daemon.drain_timeout): stopping anyway" in " ".join(r.stderr.split())


def test_ready_proof_waits_for_a_completed_proof(box, prover, prover_b):
    """ready = "proof": with no work coming, the new daemon is never ready, and the deploy rolls back."""
    d = Daemon(box, synth_ms=50, ready="proof", ready_timeout_s=3)
    old = d.start(prover)
    r = d.deploy(prover_b)
    assert r.returncode == 4, r.stderr  # rolled back: no proof came
    assert "not ready after 3 s" in " ".join(r.stderr.split())
    back = box.one_daemon()
    assert back != old
    gen = d.load(pending=1)  # with work, the same build is ready after its first proof
    try:
        r = d.deploy(prover_b)
        assert r.returncode == 0, r.stderr
        assert snapshot(d.url)["counters"]["total_completed"] >= 1
    finally:
        gen.stop()


def test_sigterm_kills_the_stand_in_mid_proof_and_sigint_does_not_make_it_exit(box, prover, tmp_path):
    """As cuzk-daemon/src/main.rs:233-239 and 260-266: SIGINT only calls engine.shutdown(); SIGTERM has no
    handler. After SIGINT the daemon finishes what is on the GPU, starts nothing new, and keeps serving."""
    d = Daemon(box, synth_ms=200, partitions=3)
    pid = d.start(prover)
    gen = d.load(pending=3)
    try:
        gen.wait_done(1)
        os.kill(pid, signal.SIGINT)
        wait_until(lambda: "pipeline GPU worker received shutdown signal" in box.log.read_text(), what="shutdown")
        after = snapshot(d.url)  # still serving, still alive
        assert after["counters"]["total_completed"] >= 1
        stranded = [p for p in after["pipelines"] if p["partitions_done"] < p["total_partitions"]]
        assert stranded and any(s["state"] == "pending" for p in stranded for s in p["partitions"])
        assert box.daemons() == [pid]
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not box.daemons(), what="SIGTERM to end it")
        # its clients see the end after the process is gone (the full suite once stopped them first: 0 lost)
        wait_until(gen.ended, what="the load generator to see every job of the dead daemon end")
    finally:
        gen.stop()
    counts = gen.counts()
    assert counts["lost"] + counts["requeued"] >= 2 and counts["failed"] == 0
    assert "received SIGINT, shutting down" in box.log.read_text()


def test_status_shows_the_daemons_pipelines_and_the_plan_what_a_stop_would_lose(box, prover, prover_b):
    d = Daemon(box, synth_ms=20000)
    d.start(prover)
    gen = d.load(pending=2)
    try:
        started_one(gen)
        r = swapctl("status", "lab", "-p", str(box.playbook_path))
        j = swapctl("status", "lab", "-p", str(box.playbook_path), "--json")
        plan = d.deploy(prover_b, "--dry-run")
    finally:
        gen.stop()
    assert r.returncode == 0, r.stderr
    [first] = [job for job in gen.jobs if job.started]
    shown = " ".join(r.stdout.split())  # as wide as the terminal: rich folds long lines
    assert f"in flight: job {first.job_id}: 0/3 partitions" in shown and "1 waiting to start" in shown
    assert "GPU workers: 0 proving, 2 idle" in shown and "SRS 8.0 MiB" in shown
    view = json.loads(j.stdout)["hosts"]["lab"]["daemon_view"]
    assert [p["job_id"] for p in view["in_flight"]] == [first.job_id] and view["waiting"] == 1
    assert view["completed"] == 0 and view["failed"] == 0
    assert f"would be lost: 1 proof in flight (job {first.job_id}: 0/3 partitions" in " ".join(plan.stderr.split())


def test_without_a_status_endpoint_the_plan_says_in_flight_work_is_unknown(box, prover, prover_b):
    box.start_by_hand(prover)
    r = swapctl("deploy", "lab", "--binary", str(prover_b), "--dry-run", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    assert "in flight: unknown (no daemon.status_url" in " ".join(r.stderr.split())


def test_init_from_fills_status_url_from_the_configs_status_listen(box, prover, swapctl_env, tmp_path):
    status_port = free_port()
    box.start_by_hand(prover, prover_config() + f'\n[daemon]\nstatus_listen = "0.0.0.0:{status_port}"\n')
    s = box.server
    ssh = swapctl_env / "home" / ".ssh"
    ssh.mkdir()
    (ssh / "config").write_text(f"Host gpu1\n    HostName {s.address}\n    Port {s.port}\n    User root\n"
                                f"    IdentityFile {s.client_key}\n    UserKnownHostsFile {s.known_hosts}\n")
    out = tmp_path / "from-gpu1.toml"
    r = swapctl("init", str(out), "--from", "gpu1", "--match", re.escape(str(box.data)) + "/cuzk")
    assert r.returncode == 0, r.stderr
    assert pb.load(out).daemon.status_url == f"http://127.0.0.1:{status_port}/status"
    st = swapctl("status", "gpu1", "-p", str(out), "--json")
    view = json.loads(st.stdout)["hosts"]["gpu1"]["daemon_view"]
    assert view["summary"] == "0 proofs in flight" and view["completed"] == 1


@pytest.mark.parametrize("by", ["proof", "port"])
def test_readiness_comes_only_from_the_new_daemons_own_port(box, prover, prover_noready, by):
    """Any user can listen on status_url's port (ready = "proof") or ready_port while the new build never binds
    it: its answer (a completed proof) or its accept must not make a build that never got ready "deployed".
    The daemon serves on ports of its own; another process holds the one readiness is judged on."""
    d = Daemon(box, synth_ms=50)
    old = d.start(prover)
    impostor = {"uptime_secs": 60, "pipelines": [], "counters": {"total_completed": 5, "queue_depth": 0}}
    with Answering(json.dumps(impostor).encode()) as other:
        port = int(other.url.split(":")[2].split("/")[0])
        judged = {"status_url": other.url, "ready": "proof"} if by == "proof" else {"ready_port": port}
        box.write_playbook(daemon={**judged, "ready_timeout_s": 3})
        r = d.deploy(prover_noready)
    # not deployed: the build failed, and the old one, judged by the same rule, is not ready either (no work comes)
    assert r.returncode != 0, r.stderr
    assert "failed (not ready after 3 s)" in " ".join(r.stderr.split())
    assert old not in box.daemons()


def test_the_dry_run_says_the_drain_and_its_sigint_before_the_kill(box, prover, prover_b):
    """With stop = "drain" the dry run said only `kill -TERM ...; after 10 s: kill -KILL`, as if the stop came
    at once (issue 47); it says the drain, its limit and what then, and the SIGINT first, now."""
    d = Daemon(box, synth_ms=200, stop="drain", drain_timeout_s=45, drain_timeout="refuse")
    pid = d.start(prover)
    r = d.deploy(prover_b, "--dry-run")
    said = " ".join(r.stderr.split())
    assert r.returncode == 0, r.stderr
    drain = f"read {d.url} until no proof is in flight (at most 45 s, then refuse); SIGINT (cuzk takes no new work); "
    assert f"{drain}kill -TERM -{pid}" in said, said
    assert box.daemons() == [pid]
