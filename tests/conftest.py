from __future__ import annotations

import inspect
import os
import re
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from systemd_lab import SystemdHost, ensure_image  # noqa: E402

from lab import SshServer, build_prover, keygen, make_server, prover_config, wait_until  # noqa: E402,F401

DATA = Path(__file__).parent / "data"

# The CLI a test starts and then interrupts must get SIGINT as a terminal gives it, however the suite was
# started: a suite run by `nohup ... &` or from a script's background job has SIGINT ignored, every child
# inherits that, and Python installs no Ctrl-C handler where SIGINT is ignored (a `fetch-logs --follow`
# then runs on after its test's Ctrl-C). A handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The fixtures that start or build something real: a test using one (or a fixture on top of one) is a
# host test. `bash scripts/test --quick` runs the others (parsers, models, transcripts): `-m "not host"`.
HOST_FIXTURES = {
    "lab_dir", "sshd", "box", "systemd_host", "prover", "prover_b", "prover_crash", "prover_noready",
    "prover_selfcheck", "sudo_host", "netns_host", "gpu_host", "farm", "installed", "hostile_daemon", "base_image",
    "daemon_user", "shared_dir", "two_hosts", "user_env",
}


# ...and a test that starts one itself, by name
HOST_CALLS = ("NetnsLab(", "own_box(", "make_server(", '"sandbox", "up"', "docker_engine(", "SystemdHost(")


def pytest_collection_modifyitems(config, items):
    for item in items:
        source = inspect.getsource(item.function) if hasattr(item, "function") else ""
        if HOST_FIXTURES & set(getattr(item, "fixturenames", ())) or any(call in source for call in HOST_CALLS):
            item.add_marker(pytest.mark.host)


@pytest.fixture(scope="session")
def lab_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lab")


@pytest.fixture(scope="session")
def prover(lab_dir) -> Path:
    """The stand-in prover, instrumented (TIMING=1), built once per session."""
    return build_prover(lab_dir / "bin" / "prover-a", TIMING="1", TAG="a")


@pytest.fixture(scope="session")
def prover_b(lab_dir) -> Path:
    """A second build of the prover: another binary, another sha256."""
    return build_prover(lab_dir / "bin" / "prover-b", TIMING="1", TAG="b")


@pytest.fixture(scope="session")
def prover_selfcheck(lab_dir) -> Path:
    """A build whose every proof fails cuzk's self-check (the stand-in's FAULT=selfcheck)."""
    return build_prover(lab_dir / "bin" / "prover-selfcheck", FAULT="selfcheck", TAG="selfcheck")


@pytest.fixture(scope="session")
def prover_crash(lab_dir) -> Path:
    """A build that crashes at start (panics before the ready line)."""
    return build_prover(lab_dir / "bin" / "prover-crash", FAULT="crash", TAG="crash")


@pytest.fixture(scope="session")
def prover_noready(lab_dir) -> Path:
    """A build that runs but never prints the ready line."""
    return build_prover(lab_dir / "bin" / "prover-noready", FAULT="noready", TAG="noready")


@pytest.fixture(scope="session")
def sshd(lab_dir) -> SshServer:
    """A real OpenSSH sshd on loopback, on a free non-standard port; its key is in known_hosts."""
    server = make_server(lab_dir / "sshd")
    server.start()
    server.trust()
    yield server
    server.stop()


def _describe(pid: int) -> str:
    """A process as /proc has it: pid, ppid, state, executable, command line, start time (clock ticks)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError as exc:
        return f"pid {pid}: gone ({exc.strerror})"
    return f"pid {pid} ppid {stat[1]} state {stat[0]} started {stat[19]} exe {exe} argv {argv}"


class Box:
    """One test's slice of the loopback host: its own data directory, playbook and daemon."""

    def __init__(self, server: SshServer, data: Path, workdir: Path):
        self.server, self.data, self.workdir = server, data, workdir
        self.binary = data / "cuzk"
        self.log = data / "cuzk.log"
        self.config = data / "cuzk.toml"
        self.playbook_path = workdir / "swapctl.toml"

    def write_playbook(self, daemon: dict | None = None, memory: dict | None = None, host: dict | None = None,
                       **tables: dict) -> Path:
        d = {
            "binary": str(self.binary), "args": ["--config", str(self.config)], "match": re.escape(str(self.binary)),
            "log": str(self.log), "ready_timeout_s": 20, "stop_grace_s": 5,
        }
        d.update(daemon or {})
        m = {"min_available_gib": 0.5, "release_timeout_s": 20}
        m.update(memory or {})
        self.playbook_path.write_text(self.server.playbook(host=host, daemon=d, memory=m, **tables))
        return self.playbook_path

    def start_by_hand(self, binary: Path, config: str | None = None, args: list[str] | None = None) -> int:
        """Starts the daemon as an engineer would (`nohup ... &`), not through swapctl; returns its pid."""
        self.config.write_text(config or prover_config())
        if binary != self.binary:
            shutil.copy(binary, self.binary)
        argv = [str(self.binary), *(args or ["--config", str(self.config)])]
        proc = subprocess.Popen(argv, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=self.data, start_new_session=True)
        wait_until(lambda: "cuzk-daemon ready" in self.log.read_text(errors="replace"), what="ready line")
        return proc.pid

    def daemons(self) -> list[int]:
        """Pids of live (not zombie) daemons running from this box's data directory (not their forks), from
        one reading of /proc (a second one, for the parents, could miss a parent the first saw)."""
        procs = self._processes()
        return [pid for pid, ppid in procs.items() if ppid not in procs]

    def one_daemon(self) -> int:
        """The one daemon's pid; where there are none or several, a failure that says what each process is
        (issue 27: two were seen once right after a deploy that exited 0, and `[pid] = ...` said no more)."""
        pids = self.daemons()
        if len(pids) == 1:
            return pids[0]
        raise AssertionError(f"{len(pids)} daemons, not one: " + "; ".join(map(_describe, pids)))

    def _processes(self) -> dict[int, int]:
        """pid -> ppid of live processes whose argv[0] lies in this box's data directory."""
        pids = {}
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                cmdline = (p / "cmdline").read_bytes().split(b"\0")
                stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if stat[0] != "Z" and cmdline and cmdline[0].startswith(str(self.data).encode()):
                pids[int(p.name)] = int(stat[1])
        return pids

    def kill_all(self) -> None:
        for pid in self._processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # stray memory holders left their session but keep running from a file in data/
        subprocess.run(["pkill", "-9", "-f", str(self.data)], check=False)
        # SIGKILL is not yet gone: until the kernel has torn a daemon down, its binary is busy (ETXTBSY)
        # for the next test's copy onto it
        wait_until(lambda: not self._processes(), timeout=20, what="the box's processes to be gone")


@contextmanager
def own_box(tmp_path: Path, path: str | None = None, tools: dict[str, str] | None = None):
    """A box on its own sshd whose sessions get `path` as PATH (a host with other tools); `tools`
    (name -> shell script) go first in it. Its daemons and sshd stop on the way out."""
    if tools:
        bin_dir = tmp_path / "host-bin"
        bin_dir.mkdir()
        for name, body in tools.items():
            (bin_dir / name).write_text(body)
            (bin_dir / name).chmod(0o755)
        path = f"{bin_dir}:{path or os.environ['PATH']}"
    server = make_server(tmp_path / "host")
    server.path = path
    server.start()
    server.trust()
    data = server.data / "box"
    data.mkdir()
    box = Box(server, data, tmp_path)
    box.write_playbook()
    try:
        yield box
    finally:
        box.kill_all()
        server.stop()


@pytest.fixture
def box(sshd, tmp_path, request) -> Box:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    data = sshd.data / name
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    b = Box(sshd, data, tmp_path)
    b.write_playbook()
    yield b
    b.kill_all()


@pytest.fixture
def swapctl_env(tmp_path, monkeypatch):
    """Keeps swapctl's local state (history, cache) inside the test."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir(exist_ok=True)
    return tmp_path


@pytest.fixture(scope="session")
def systemd_host(lab_dir):
    """A real systemd host: systemd as PID 1 in a systemd-nspawn container with sshd inside, booted once
    for the session (tests/systemd_lab.py). Each test gives its daemon its own unit and /data directory."""
    assert shutil.which("systemd-nspawn"), "the systemd tests need systemd-nspawn: apt-get install systemd-container"
    assert shutil.which("debootstrap"), "the systemd tests need debootstrap: apt-get install debootstrap"
    image = ensure_image()
    base = lab_dir / "systemd"
    base.mkdir()
    keygen(base / "client_key")
    (base / "known_hosts").touch()
    host = SystemdHost(base / "host", base / "client_key", base / "known_hosts")
    try:
        host.boot(image)
        yield host
    finally:
        host.close()
