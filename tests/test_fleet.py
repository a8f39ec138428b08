"""Deploying to a farm: three hosts, each in its own network, mount and PID namespace with its own sshd."""

import fcntl
import json
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from lab import NetnsLab, free_port, prover_config, swapctl, swapctl_ctrl_c_at, swapctl_in_background, wait_until
from test_deploy import sha

HOSTS = 3
DAEMON = "'^(\\./|/data/)cuzk '"  # started by hand (./cuzk) or by swapctl (/data/cuzk), never this shell


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    lab = NetnsLab(tmp_path_factory.mktemp("farm"), HOSTS, prefix="swf")
    try:
        lab.start()
        yield lab
    finally:
        lab.close()


@pytest.fixture
def fleet(farm, prover, tmp_path, swapctl_env):
    """Every host runs build A, started by hand, and has no swapctl state; returns the playbook path."""
    for s in farm.servers:
        s.exec(f"pkill -9 -f {DAEMON}; rm -rf /data/.swapctl /data/cuzk /data/cuzk.log; true", check=False)
        shutil.copy(prover, s.data / "cuzk")
        (s.data / "cuzk.toml").write_text(prover_config())
        s.exec("cd /data && setsid ./cuzk --config /data/cuzk.toml >> /data/cuzk.log 2>&1 < /dev/null &")
    for s in farm.servers:
        wait_until(lambda s=s: "ready" in (s.data / "cuzk.log").read_text(errors="replace"), what="ready")
    hosts = "".join(s.playbook(name=f"gpu-{i}") + "\n" for i, s in enumerate(farm.servers))
    book = tmp_path / "farm.toml"
    names = ", ".join(f'"gpu-{i}"' for i in range(HOSTS))
    book.write_text(hosts + f"[groups]\nfarm = [{names}]\n\n[daemon]\nbinary = \"/data/cuzk\"\n"
                    'args = ["--config", "/data/cuzk.toml"]\nmatch = "/data/cuzk"\nlog = "/data/cuzk.log"\n'
                    "ready_timeout_s = 20\nstop_grace_s = 5\n\n[memory]\nrelease_timeout_s = 20\n")
    yield book
    for s in farm.servers:
        s.exec(f"pkill -9 -f {DAEMON}; true", check=False)


def running(server) -> list[str]:
    """sha256 of each daemon running on a namespace host, seen from inside it."""
    r = server.exec(f"for p in $(pgrep -f {DAEMON}); do sha256sum < /proc/$p/exe; done", check=False)
    return [line.split()[0] for line in r.stdout.splitlines()]


def journal(server) -> list[dict]:
    path = server.data / ".swapctl" / "cuzk" / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_parallel_deploy_swaps_every_host_and_prints_one_summary(farm, fleet, prover_b):
    r = swapctl("deploy", "@farm", "--binary", str(prover_b), "--parallel", str(HOSTS), "--yes", "-p", str(fleet))
    assert r.returncode == 0, r.stderr
    for s in farm.servers:
        assert running(s) == [sha(prover_b)]
    assert r.stdout.count("deployed") >= HOSTS and "rollout" in r.stdout


def test_failing_canary_stops_the_rollout_and_leaves_the_other_hosts_untouched(farm, fleet, prover, prover_crash):
    r = swapctl("deploy", "@farm", "--binary", str(prover_crash), "--canary", "1", "--yes", "-p", str(fleet))
    assert r.returncode == 4  # the canary rolled back
    assert "the canary failed: no other host was touched" in r.stderr
    assert running(farm.servers[0]) == [sha(prover)] and journal(farm.servers[0])[-1]["action"] == "auto-rollback"
    for s in farm.servers[1:]:
        assert running(s) == [sha(prover)] and journal(s) == []
    assert r.stdout.count("skipped") == HOSTS - 1


def test_canary_that_stays_up_lets_the_rollout_continue(farm, fleet, prover_b):
    r = swapctl("deploy", "@farm", "--binary", str(prover_b), "--canary", "1", "--canary-wait", "1", "--yes",
                "-p", str(fleet))
    assert r.returncode == 0, r.stderr
    assert "canary gpu-0" in r.stderr
    for s in farm.servers:
        assert running(s) == [sha(prover_b)]


def test_a_ctrl_c_in_the_canarys_wait_with_parallel_starts_no_other_host(farm, fleet, prover, prover_b):
    """With --parallel the Ctrl-C handler only counts presses: one in the canaries' wait went unseen, the
    wait ran its whole length, and the rest of the farm was swapped."""
    proc, lines, reader = swapctl_in_background("deploy", "@farm", "--binary", str(prover_b), "--canary", "1",
                                                "--canary-wait", "60", "--parallel", "2", "--yes", "-p", str(fleet))
    wait_until(lambda: any("canaries run for 60 s" in line for line in lines), timeout=60, what="the canaries' wait")
    proc.send_signal(signal.SIGINT)
    try:
        out = proc.communicate(timeout=45)[0]  # not the wait's 60 s
    except subprocess.TimeoutExpired:
        proc.kill()  # it would go on to swap the other hosts under the next test
        proc.wait()
        pytest.fail("the Ctrl-C did not end the canaries' wait:\n" + "".join(lines)[-3000:])
    reader.join(5)
    assert proc.returncode == 3, "".join(lines)
    assert "rollout stopped: interrupted (Ctrl-C)" in out and "before any change" not in "".join(lines), out
    assert [running(s) for s in farm.servers] == [[sha(prover_b)], [sha(prover)], [sha(prover)]]


def test_max_fail_1_with_two_bad_hosts_stops_after_the_second(farm, fleet, prover, prover_b):
    for s in farm.servers[:2]:
        (s.data / "cuzk.toml").unlink()  # its config is gone: the deploy there is refused
    r = swapctl("deploy", "@farm", "--binary", str(prover_b), "--max-fail", "1", "--yes", "-p", str(fleet))
    assert r.returncode == 2
    assert "2 hosts failed, more than --max-fail 1" in r.stdout
    assert running(farm.servers[2]) == [sha(prover)] and journal(farm.servers[2]) == []  # never started
    assert r.stdout.count("skipped") == 1


def test_unreachable_host_is_reported_and_the_others_proceed(farm, fleet, prover_b):
    text = fleet.read_text().replace("[groups]", f'[hosts.gone]\naddress = "127.0.0.1"\nport = {free_port()}\n'
                                                 f'user = "root"\n\n[groups]')
    fleet.write_text(text.replace('farm = ["gpu-0"', 'farm = ["gone", "gpu-0"'))
    r = swapctl("deploy", "@farm", "--binary", str(prover_b), "--yes", "-p", str(fleet))
    assert r.returncode == 3
    assert "swapctl: gone: cannot connect to root@127.0.0.1" in r.stderr and "failed (3)" in r.stdout
    for s in farm.servers:
        assert running(s) == [sha(prover_b)]


def test_a_ctrl_c_between_hosts_reports_the_host_done_and_starts_no_other(farm, fleet, prover, prover_b):
    """A Ctrl-C after the first host's swap and before the second's: it said "interrupted before any change"
    (exit 3) and printed nothing of the host it had swapped. The Ctrl-C lands as the first host's result
    is recorded (its moment chosen, the signal real)."""
    r = swapctl_ctrl_c_at("swapctl.fleet:Rollout._record", 1, "deploy", "@farm", "--binary", str(prover_b),
                          "--yes", "-p", str(fleet))
    assert r.returncode == 3, r.stderr
    assert "before any change" not in r.stderr and "rollout stopped: interrupted (Ctrl-C)" in r.stdout
    assert re.search(r"gpu-0\s.*deployed", r.stdout) and re.search(r"gpu-1\s.*skipped", r.stdout), r.stdout
    assert [running(s) for s in farm.servers] == [[sha(prover_b)], [sha(prover)], [sha(prover)]]


def test_limit_deploys_only_the_matching_hosts_of_the_group(farm, fleet, prover, prover_b):
    r = swapctl("deploy", "@farm", "--limit", "gpu-2", "--binary", str(prover_b), "--yes", "-p", str(fleet))
    assert r.returncode == 0, r.stderr
    assert running(farm.servers[2]) == [sha(prover_b)]
    for s in farm.servers[:2]:
        assert running(s) == [sha(prover)] and journal(s) == []


def deployed_everywhere(farm, fleet, binary) -> None:
    r = swapctl("deploy", "@farm", "--binary", str(binary), "--parallel", str(HOSTS), "--yes", "-p", str(fleet))
    assert r.returncode == 0, r.stderr
    for s in farm.servers:
        assert running(s) == [sha(binary)]


def test_rollback_of_a_farm_in_parallel_with_a_canary_restores_every_host(farm, fleet, prover, prover_b):
    deployed_everywhere(farm, fleet, prover_b)
    r = swapctl("rollback", "@farm", "--canary", "1", "--canary-wait", "0.5", "--parallel", "2", "--yes",
                "-p", str(fleet))
    assert r.returncode == 0, r.stderr
    assert "canary gpu-0: up" in r.stderr and r.stdout.count("rolled-back") == HOSTS
    for s in farm.servers:
        assert running(s) == [sha(prover)] and journal(s)[-1]["action"] == "rollback"


def test_rollback_canary_that_fails_leaves_the_other_hosts_on_the_new_build(farm, fleet, prover_b):
    deployed_everywhere(farm, fleet, prover_b)
    (farm.servers[0].data / "cuzk.toml").unlink()  # the canary's rollback is refused: its config is gone
    r = swapctl("rollback", "@farm", "--canary", "1", "--yes", "-p", str(fleet))
    assert r.returncode == 2
    assert "the canary failed: no other host was touched" in r.stderr and r.stdout.count("skipped") == HOSTS - 1
    for s in farm.servers:
        assert running(s) == [sha(prover_b)] and journal(s)[-1]["action"] == "deploy"


def test_rollback_max_fail_0_stops_starting_hosts_after_the_first_failure(farm, fleet, prover_b):
    deployed_everywhere(farm, fleet, prover_b)
    (farm.servers[0].data / "cuzk.toml").unlink()
    r = swapctl("rollback", "@farm", "--max-fail", "0", "--yes", "-p", str(fleet))
    assert r.returncode == 2
    assert "1 hosts failed, more than --max-fail 0" in r.stdout and r.stdout.count("skipped") == HOSTS - 1
    for s in farm.servers[1:]:
        assert running(s) == [sha(prover_b)] and journal(s)[-1]["action"] == "deploy"


def at_terminal(fleet: Path, prover: Path, term: str) -> str:
    """A parallel deploy run under a real pseudo-terminal, as a person would: what the screen was sent."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "swapctl", "deploy", "@farm", "--binary", str(prover),
                             "--parallel", str(HOSTS), "--yes", "-p", str(fleet)],
                            stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "TERM": term})
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=60) == 0, seen.decode(errors="replace")
    os.close(master)
    return seen.decode(errors="replace")


def test_a_terminal_gets_one_live_view_of_every_host(farm, fleet, prover_b):
    """The view's rows replace per-host lines."""
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", at_terminal(fleet, prover_b, "xterm"))
    assert re.search(r"host\s+step", screen)  # the live table's header, drawn while hosts swap
    assert "gpu-0 upload:" not in screen  # and no per-host lines beside it
    for i in range(HOSTS):
        assert re.search(rf"gpu-{i}\s+(upload|backup|stop|memory|start|ready|deployed)", screen)
    assert "rollout" in screen  # the summary table at the end
    for s in farm.servers:
        assert running(s) == [sha(prover_b)]


def test_a_terminal_that_cannot_move_its_cursor_gets_each_hosts_lines(farm, fleet, prover_b):
    """TERM=dumb (an editor's shell, a CI log): rich draws no live table there, so every host's steps are
    printed as lines instead of a view that would stay blank until the end."""
    screen = at_terminal(fleet, prover_b, "dumb")
    assert "\x1b[" not in screen  # no cursor movement, no colour
    assert not re.search(r"host\s+step", screen)
    for i in range(HOSTS):
        assert f"gpu-{i} upload:" in screen and re.search(rf"gpu-{i} ready", screen)
    assert "rollout" in screen
    for s in farm.servers:
        assert running(s) == [sha(prover_b)]
