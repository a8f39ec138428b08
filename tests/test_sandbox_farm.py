"""The sandbox as a small working farm (issue 47): `sandbox up` starts a daemon that proves steadily, serves
cuzk's status and is drained by the deploy; `sandbox up --hosts N` starts N hosts in one group, each its own
box (its own data, processes and loopback), rolled with a canary. Real sshd, real provers, real namespaces."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from swapctl.cli.environment import run as run_in_process
from swapctl.sandbox import build_prover, make_server
from swapctl.sandbox_hosts import port_holder

from lab import free_port, path_without, swapctl, wait_until


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def status(playbook: Path, host: str = "sandbox") -> dict:
    r = swapctl("status", host, "--json", "-p", str(playbook))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["hosts"]


def sandbox_processes(sandbox: Path) -> list[str]:
    """Every process whose command line names the sandbox's directory (its daemons, sshd, host inits)."""
    r = subprocess.run(["pgrep", "-af", str(sandbox.resolve())], capture_output=True, text=True)
    return [line for line in r.stdout.splitlines() if "pgrep" not in line]


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_the_sandbox_daemon_proves_steadily_shows_its_view_is_drained_at_a_deploy_and_proves_again_after(tmp_path):
    """It proved 3 times in 0.3 s and idled, with no status endpoint: status had no daemon's view, the plan
    said "in flight: unknown" and a drain had nothing to wait for. Now it proves until `sandbox down`."""
    sandbox, port = tmp_path / "sandbox", free_port()
    playbook = sandbox / "swapctl.toml"
    try:
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port))
        assert r.returncode == 0, r.stderr
        assert f"its daemon proves steadily (a proof about every 3 s), its status on 127.0.0.1:{port + 1}" in r.stdout
        first = status(playbook)["sandbox"]["daemon_view"]  # the first status: a daemon at work, not one loading
        assert first["completed"] >= 1 and first["failed"] == 0, first
        wait_until(lambda: status(playbook)["sandbox"]["daemon_view"]["completed"] >= 3, timeout=30,
                   what="three proofs")  # a steady feed, not 3 jobs and then idle: 3 proofs at ~2.7 s apart
        view = status(playbook)["sandbox"]["daemon_view"]
        assert view["failed"] == 0 and view["summary"].endswith(("in flight", ")")), view

        plan = swapctl("deploy", "sandbox", "--binary", str(sandbox / "builds" / "prover-b"), "--dry-run",
                       "-p", str(playbook))
        shown = " ".join(plan.stderr.split())
        assert plan.returncode == 0 and "in flight: unknown" not in shown, plan.stderr
        assert "proof in flight (job " in shown or "in flight: 0 proofs in flight" in shown, shown

        r = swapctl("deploy", "sandbox", "--binary", str(sandbox / "builds" / "prover-b"), "--yes", "-p", str(playbook))
        assert r.returncode == 0, r.stderr
        assert "drained in" in " ".join(r.stderr.split())
        h = swapctl("history", "sandbox", "--json", "-p", str(playbook))
        [entry] = json.loads(h.stdout)["journal"]
        assert entry["outcome"] == "deployed" and entry["lost"] == 0 and entry["drain_s"] >= 0, entry

        # the new daemon (build B, started by swapctl with the same config) is fed again
        wait_until(lambda: status(playbook)["sandbox"]["daemon_view"]["completed"] >= 1, timeout=30,
                   what="the new daemon's first proof")
        [daemon] = status(playbook)["sandbox"]["daemons"]
        assert daemon["exe"].startswith(str(sandbox.resolve() / "data" / ".swapctl"))
    finally:
        swapctl("sandbox", "down", "--dir", str(sandbox))
    assert sandbox_processes(sandbox) == [] and not answers(port + 1), port_holder(port + 1)  # nothing proves on


@pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox farm puts each host in namespaces of its own: run as root")
def test_sandbox_up_hosts_3_is_a_farm_of_three_boxes_rolled_with_a_canary_that_stops_a_bad_build(tmp_path):
    """Three hosts with one [daemon] table, as a real farm has: each sees only its own daemon at the same
    path and its own status port; `deploy @farm` rolls, the canary first; a build that crashes is stopped
    at the canary and no other host is touched. `sandbox down` stops every host and all that runs in it."""
    sandbox, port = tmp_path / "sandbox", free_port()
    playbook = sandbox / "swapctl.toml"
    crash = build_prover(tmp_path / "prover-crash", FAULT="crash")
    try:
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port), "--hosts", "3")
        assert r.returncode == 0, r.stderr
        assert f"sandbox up: 3 hosts in group `farm` (sandbox, sandbox-2, ...) at 127.0.0.1:{port}-{port + 2}" \
            in r.stdout
        hosts = status(playbook, "@farm")
        assert sorted(hosts) == ["sandbox", "sandbox-2", "sandbox-3"]
        for name, host in hosts.items():
            [daemon] = host["daemons"]  # its own, though all three run at the one path the playbook names
            assert daemon["exe"] == str(sandbox.resolve() / "data" / "cuzk"), name
            assert host["daemon_view"] is not None, name
        assert len([p for p in sandbox_processes(sandbox) if " --config " in p]) == 3  # three daemons, seen here
        wait_until(lambda: all(h["daemon_view"]["completed"] >= 1 for h in status(playbook, "@farm").values()),
                   timeout=30, what="a proof on every host")

        r = swapctl("deploy", "@farm", "--binary", str(sandbox / "builds" / "prover-b"), "--yes", "--json",
                    "-p", str(playbook), timeout=180)
        assert r.returncode == 0, r.stderr
        assert {h: v["outcome"] for h, v in json.loads(r.stdout)["hosts"].items()} == dict.fromkeys(hosts, "deployed")
        assert "canary sandbox: up as pid" in r.stderr
        shas = {h["current_release"] for h in status(playbook, "@farm").values()}
        assert len(shas) == 1

        r = swapctl("deploy", "@farm", "--binary", str(crash), "--yes", "--json", "-p", str(playbook), timeout=180)
        assert r.returncode == 4, r.stderr
        results = json.loads(r.stdout)["hosts"]
        assert results["sandbox"]["exit_code"] == 4 and "rolled back" in results["sandbox"]["error"], results
        assert results["sandbox-2"] == results["sandbox-3"] == {"skipped": "the canary failed"}, results
        assert "the canary failed: no other host was touched" in r.stderr
        after = status(playbook, "@farm")
        assert {h["current_release"] for h in after.values()} == shas  # the others never touched

        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port))  # one host again
        assert r.returncode == 0, r.stderr
        assert all((sandbox / f"data-{i}" / ".swapctl").is_dir() for i in (2, 3))  # their history kept
    finally:
        swapctl("sandbox", "down", "--dir", str(sandbox))
    assert sandbox_processes(sandbox) == []
    assert not any(answers(port + i) for i in range(3))


@pytest.mark.parametrize("hosts", ["0", "9"])
def test_sandbox_up_with_hosts_out_of_range_says_so_in_one_line(tmp_path, hosts):
    ran = run_in_process(["sandbox", "up", "--dir", str(tmp_path / "sb"), "--hosts", hosts])
    assert ran.code == 2 and ran.stderr.strip() == f"swapctl: --hosts must be 1 to 8, not {hosts}", ran.stderr
    assert not (tmp_path / "sb").exists()


def test_ssh_sessions_elsewhere_on_the_machine_are_not_reported_as_the_sandboxs_own(tmp_path):
    """On a shared machine every sshd session (another sandbox's, a test lab's, a person's) was this
    sandbox's "other session": 15 `root is logged in` warnings per deploy. The sandbox is a host of its own:
    its status and a deploy's plan see only the sessions on it."""
    sandbox, port = tmp_path / "sandbox", free_port()
    other = make_server(tmp_path / "other")  # someone else's sshd on this machine, with two sessions open
    other.start()
    other.trust()
    ssh = ["ssh", "-q", "-p", str(other.port), "-i", str(other.client_key), "-o", "BatchMode=yes",
           "-o", f"UserKnownHostsFile={other.known_hosts}", f"root@{other.address}"]
    marker = f"sleep {60 + port % 1000 / 1000:.3f}"  # their commands, found by an argument no one else uses
    sessions = [subprocess.Popen([*ssh, *tty, marker], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL) for tty in ([], ["-tt"])]
    try:
        wait_until(lambda: len(subprocess.run(["pgrep", "-fx", marker], capture_output=True).stdout.split()) == 2,
                   what="two ssh sessions on the other sshd")
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port))
        assert r.returncode == 0, r.stderr
        playbook = sandbox / "swapctl.toml"
        host = status(playbook)["sandbox"]
        assert [s for s in host["sessions"] if not s["own"]] == [], host["sessions"]
        plan = swapctl("deploy", "sandbox", "--binary", str(sandbox / "builds" / "prover-b"), "--dry-run",
                       "-p", str(playbook))
        assert plan.returncode == 0 and "is logged in" not in plan.stderr, plan.stderr
    finally:
        for s in sessions:
            s.kill()
            s.wait()
        other.stop()
        swapctl("sandbox", "down", "--dir", str(sandbox))


def test_without_namespaces_the_sandbox_comes_up_sharing_the_machine_and_says_so_and_a_farm_is_refused(tmp_path):
    """Where no namespace can be had (no unshare here; a chroot, as scripts/fresh-debian runs the quick start
    in, refuses one), the one host starts among the machine's processes as before and says in one line that
    other sessions show as its own; a farm, whose hosts share one [daemon] table, cannot be built and says why."""
    sandbox, port = tmp_path / "sandbox", free_port()
    env = {"PATH": str(path_without(tmp_path / "bin", "unshare"))}
    try:
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port), env=env)
        assert r.returncode == 0, r.stderr
        [line] = [x for x in r.stdout.splitlines() if "not a host of its own" in x]
        assert line.startswith("the sandbox host is not a host of its own (unshare: ") and line.endswith(
            "other sessions and processes on this machine show as its own"), line
        wait_until(lambda: status(sandbox / "swapctl.toml")["sandbox"]["daemon_view"]["completed"] >= 1,
                   timeout=30, what="a proof")
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port), "--hosts", "2", env=env)
        assert r.returncode == 3 and r.stderr.startswith("swapctl: --hosts 2 needs namespaces for each host "
                                                         "(root, unshare): unshare: "), r.stderr
    finally:
        swapctl("sandbox", "down", "--dir", str(sandbox))
    assert sandbox_processes(sandbox) == []


def test_sandbox_down_leaves_alone_a_process_whose_pid_a_stale_pid_file_names(tmp_path):
    """A pid file outlives a reboot and its pid is reused: down sent SIGTERM to whatever had that pid."""
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "sb" / "sshd").mkdir(parents=True)
        (tmp_path / "sb" / "sshd" / "sshd.pid").write_text(str(stranger.pid))
        assert swapctl("sandbox", "down", "--dir", str(tmp_path / "sb")).returncode == 0
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
