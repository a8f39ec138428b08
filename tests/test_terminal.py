"""What a person sees at a terminal: swapctl run in a real tmux pane, read back with `tmux capture-pane`.

The host here accepts the TCP connection and never says a word (sshd's banner never comes), as a host
behind a firewall that swallows the handshake, or a wedged sshd: the command must say at once what it is
waiting for, and Ctrl-C must end it then, not when the connection gives up."""

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lab import NetnsLab, prover_config, wait_until

pytestmark = pytest.mark.host  # needs tmux (scripts/system-deps installs it)


@pytest.fixture
def silent_host():
    """A TCP port that accepts connections and sends nothing, ever."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held = []

    def accept() -> None:
        while True:
            try:
                held.append(srv.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()
    for conn in held:
        conn.close()


class Pane:
    """One tmux session of its own (its own server socket), running one command in a 100x30 terminal."""

    def __init__(self, base: Path, command: str, rows: int = 30):
        assert shutil.which("tmux"), "this test needs tmux: apt-get install tmux (scripts/system-deps does)"
        self.tmux = ["tmux", "-S", str(base / "tmux.sock")]
        script = f"{command}; echo \"exited $?\"; sleep 600"
        subprocess.run([*self.tmux, "new-session", "-d", "-x", "100", "-y", str(rows), "-s", "t", "bash", "-c", script],
                       check=True)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", "t"], capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "t", *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


def swapctl_line(tmp_path: Path, *args: str) -> str:
    """The shell line that runs swapctl in the pane, against a playbook of its own, with a connect timeout
    far longer than any wait here: only Ctrl-C can end the connect in time."""
    (tmp_path / "pb.toml").write_text('[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\n')
    env = f"HOME={shlex.quote(str(tmp_path))} XDG_STATE_HOME={shlex.quote(str(tmp_path / 'state'))}"
    return (f"cd {shlex.quote(str(tmp_path))} && env {env} {shlex.quote(sys.executable)} -m swapctl "
            f"--connect-timeout 600 {' '.join(map(shlex.quote, args))} -p pb.toml")


@pytest.mark.parametrize("verb", [["status"], ["deploy", "--binary", "/bin/true", "--yes"]])
def test_a_silent_host_is_named_at_once_and_ctrl_c_ends_the_wait(tmp_path, silent_host, verb):
    target = f"root@127.0.0.1:{silent_host}"
    pane = Pane(tmp_path, swapctl_line(tmp_path, verb[0], target, *verb[1:]))
    try:
        # said while it waits (the connect may wait up to its 600 s), not after
        wait_until(lambda: f"connecting to {target}..." in pane.screen(), timeout=30, what="the connecting line")
        assert "exited" not in pane.screen()
        pane.keys("C-c")
        wait_until(lambda: "exited 3" in pane.screen(), timeout=30, what="Ctrl-C to end the command")
        screen = pane.screen()
        assert "interrupted before any change" in screen, screen
        assert "Traceback" not in screen and "Exception" not in screen, screen  # paramiko's thread said nothing
    finally:
        pane.close()


@pytest.fixture
def slow_host(tmp_path):
    """A namespace host behind a 16 Mbit/s link (tc tbf on its veth), its data directory ready for a daemon."""
    (tmp_path / "netns").mkdir()
    lab = NetnsLab(tmp_path / "netns", 1, prefix="stt")
    try:
        lab.start()
        server = lab.servers[0]
        subprocess.run(["tc", "qdisc", "replace", "dev", f"{lab.prefix}-0h", "root", "tbf", "rate", "16mbit",
                        "burst", "32kb", "latency", "400ms"], check=True)
        (server.data / "cuzk.toml").write_text(prover_config())
        yield server
    finally:
        lab.close()


def test_a_slow_upload_shows_a_live_bar_with_rate_and_eta_and_the_lock_line_only_while_it_is_taken(
        tmp_path, slow_host, prover):
    """Issue 30: a 300 MB upload showed "taking the host's deploy lock" all along and its bar only at 100%.
    Here 8 MB of incompressible bytes cross a 16 Mbit/s link (about 4 s): a screen read mid-upload shows
    the bar part done, with a rate and a time left, and the lock line has become `lock: taken`."""
    binary = tmp_path / "cuzk-big"
    binary.write_bytes(prover.read_bytes() + os.urandom(8 << 20))  # still the prover: an ELF runs with a tail
    binary.chmod(0o755)
    (tmp_path / "pb.toml").write_text(slow_host.playbook(daemon={
        "binary": "/data/cuzk", "args": ["--config", "/data/cuzk.toml"], "log": "/data/cuzk.log",
        "ready_timeout_s": 20}, memory={"min_available_gib": 0.1}))
    env = " ".join(f"{k}={shlex.quote(str(tmp_path / v))}" for k, v in
                   (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache")))
    pane = Pane(tmp_path, f"cd {shlex.quote(str(tmp_path))} && env {env} {shlex.quote(sys.executable)} -m swapctl "
                          f"deploy lab --binary {shlex.quote(str(binary))} --yes -p pb.toml")
    mid = re.compile(r"lab upload .*?(\d+\.\d)/(\d+\.\d) MB .*?\d+\.\d [kM]B/s.*?\d:\d\d:\d\d")
    try:
        seen: list[str] = []
        lines: list[str] = []  # each different upload line the screen showed, and when

        def mid_upload() -> bool:
            screen = pane.screen()
            now = [ln for ln in screen.splitlines() if "lab upload" in ln or "lab lock" in ln]
            if now and (not lines or lines[-1].split("  ", 1)[1] != " | ".join(now)):
                lines.append(f"{time.monotonic():.2f}  " + " | ".join(now))
            m = mid.search(screen)
            if m and 0 < float(m.group(1)) < float(m.group(2)):
                seen.append(screen)
                return True
            return False

        try:
            wait_until(mid_upload, timeout=60, what="a screen with the upload part done")
        except AssertionError as exc:  # once under the full suite's load: what the screen showed instead
            raise AssertionError(f"{exc}; the upload lines seen:\n" + "\n".join(lines) +
                                 f"\nthe last screen:\n{pane.screen()}") from None
        assert "lab lock: taken in " in seen[0] and "taking the host's deploy lock" not in seen[0], seen[0]
        wait_until(lambda: "exited" in pane.screen(), timeout=60, what="the deploy to end")
        screen = pane.screen()
        assert "exited 0" in screen and "Traceback" not in screen, screen
    finally:
        pane.close()


def test_a_fleets_one_question_comes_after_every_hosts_plan_and_names_the_hosts_and_the_binary(tmp_path, prover):
    """Issue 30: `deploy @farm` asked "swap the daemon on 3 hosts?" before any plan, host or binary. Now each
    host's plan is on the screen first; the one question names the hosts, the binary and the warnings, and
    `n` changes nothing on either host."""
    (tmp_path / "netns").mkdir()
    lab = NetnsLab(tmp_path / "netns", 2, prefix="stf")
    try:
        lab.start()
        for server in lab.servers:
            (server.data / "cuzk.toml").write_text(prover_config())
        book = "\n".join(s.playbook(name=f"gpu-{i}") for i, s in enumerate(lab.servers))
        (tmp_path / "pb.toml").write_text(book + '\n[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\n'
                                                 'args = ["--config", "/data/cuzk.toml"]\n')
        env = " ".join(f"{k}={shlex.quote(str(tmp_path / v))}" for k, v in
                       (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache")))
        pane = Pane(tmp_path, f"cd {shlex.quote(str(tmp_path))} && env {env} {shlex.quote(sys.executable)} -m "
                              f"swapctl deploy gpu-0 gpu-1 --binary {shlex.quote(str(prover))} -p pb.toml", rows=80)
        try:
            question = f"swap the daemon on 2 hosts (gpu-0, gpu-1) to {prover}"
            wait_until(lambda: question in pane.screen().replace("\n", ""), timeout=60, what="the fleet's question")
            screen = pane.screen()
            assert screen.count("deploy plan") == 2 and "warning" in screen, screen  # both plans, then the question
            assert "warnings, above" in screen.replace("\n", ""), screen
            pane.keys("n", "Enter")
            wait_until(lambda: "exited" in pane.screen(), timeout=30, what="the answer's end")
            screen = pane.screen()
            assert "not confirmed; nothing changed" in screen and "exited 2" in screen, screen
            assert not any((s.data / ".swapctl").exists() for s in lab.servers)  # nothing made on either host
        finally:
            pane.close()
    finally:
        lab.close()


def test_a_fleets_question_for_a_binary_that_is_not_there_is_one_line_and_asks_no_host(tmp_path):
    """`deploy a b --binary TYPO` at a terminal once ended in a FileNotFoundError traceback: the question's
    size of the binary was read before anything had looked at the file. Both hosts here refuse every
    connection (port 1): the line must come before any host is asked."""
    (tmp_path / "pb.toml").write_text('[hosts.a]\naddress = "127.0.0.1"\nport = 1\n[hosts.b]\naddress = "127.0.0.1"\n'
                                      'port = 1\n[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\n')
    missing = tmp_path / "build" / "cuzk"
    pane = Pane(tmp_path, f"cd {shlex.quote(str(tmp_path))} && HOME={shlex.quote(str(tmp_path))} "
                          f"{shlex.quote(sys.executable)} -m swapctl deploy a b --binary {shlex.quote(str(missing))} "
                          f"-p pb.toml 2>&1 | tee out.txt")
    try:
        wait_until(lambda: "exited" in pane.screen(), timeout=30, what="deploy to end")
        out = (tmp_path / "out.txt").read_text()
        assert out.strip() == f"swapctl: {missing}: no such file; pass the binary to deploy with --binary", out
    finally:
        pane.close()
