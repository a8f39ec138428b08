"""The test lab: real OpenSSH sshd servers (loopback, or one per network namespace) and the real prover.

Nothing here imitates SSH or a daemon: each host is a real sshd, each daemon a real process. The
loopback parts are swapctl's own sandbox (swapctl/sandbox.py); the namespace hosts are test-only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from swapctl.sandbox import SshServer, build_prover, free_port, keygen, make_server, prover_config

__all__ = ["SshServer", "build_prover", "free_port", "keygen", "make_server", "prover_config", "NetnsLab",
           "swapctl", "swapctl_measured", "wait_until"]


class Ran(subprocess.CompletedProcess):
    """A CLI run whose repr, as a failed assertion prints it, names the exit code and the error line."""

    def __repr__(self) -> str:
        last = (self.stderr.strip().splitlines() or [""])[-1]
        return f"<swapctl exited {self.returncode}: {last[:180]!r}>"


def swapctl(*args: str, env: dict | None = None, timeout: float = 120) -> Ran:
    """Runs the CLI; one that hangs fails the test with every thread's stack (faulthandler on SIGABRT)."""
    return _ended([sys.executable, "-m", "swapctl", *args], args, env, timeout)


def swapctl_in_background(*args: str) -> tuple[subprocess.Popen, list[str], threading.Thread]:
    """`swapctl ARGS...` as a child whose stderr lines are collected as they come, for a test that acts at
    one of them (a signal, a kill); the caller waits for its end. Returns it, its lines, and their reader."""
    proc = subprocess.Popen([sys.executable, "-m", "swapctl", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    return proc, lines, reader


def _ended(argv: list[str], args: tuple[str, ...], env: dict | None, timeout: float) -> Ran:
    """`argv` run to its end, with faulthandler on: one past `timeout` gets SIGABRT (its stacks) and fails."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate()
        pytest.fail(f"swapctl {' '.join(args)} did not end within {timeout:.0f} s; its stderr:\n{err[-8000:]}")
    return Ran(proc.args, proc.returncode, out, err)

# Runs argv[2:] as its child and writes the child's peak RSS (KiB) to argv[1]; a SIGABRT is passed on to the
# child (its stacks, when it hangs). The measured process must be forked from a small one: a child's
# ru_maxrss counts the pages it had before exec, and a child forked (or vforked) from pytest late in the
# suite starts out as big as pytest is (250 MB was seen in CI, and 307 MB in a zstd bomb's fetch).
MEASURE = """
import os, signal, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
signal.signal(signal.SIGABRT, lambda *_: os.kill(pid, signal.SIGABRT))
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


# `swapctl ARGS...` with one Ctrl-C (a real SIGINT to itself) at a chosen moment: as `target` (module:attr,
# a function or a method) is called for the `nth` time. A signal cannot be aimed at one line from outside.
CTRL_C_AT = """
import os, signal, sys
from functools import reduce
from importlib import import_module
where, nth = sys.argv[1], int(sys.argv[2])
module, _, attr = where.partition(":")
*path, name = attr.split(".")
owner = reduce(getattr, path, import_module(module))
real, calls = getattr(owner, name), []
def at(*args, **kw):
    calls.append(1)
    if len(calls) == nth:
        os.kill(os.getpid(), signal.SIGINT)
    return real(*args, **kw)
setattr(owner, name, at)
sys.argv = ["swapctl", *sys.argv[3:]]
from swapctl.cli import main
main()
"""


def swapctl_ctrl_c_at(target: str, nth: int, *args: str, timeout: float = 120) -> Ran:
    """`swapctl(*args)`, interrupted once as `target` is called for the `nth` time (CTRL_C_AT)."""
    return _ended([sys.executable, "-c", CTRL_C_AT, target, str(nth), *args], args, None, timeout)


def swapctl_measured(*args: str, timeout: float = 120) -> tuple[Ran, float, int]:
    """`swapctl(*args)` with its seconds and its own peak RSS in KiB (MEASURE)."""
    with tempfile.NamedTemporaryFile("r") as rss:
        t = time.monotonic()
        ran = _ended([sys.executable, "-c", MEASURE, rss.name, sys.executable, "-m", "swapctl", *args], args, None,
                     timeout)
        return ran, time.monotonic() - t, int(rss.read() or 0)

# PID 1 of a namespace host: binds the host's own /data, starts sshd, and reaps every orphan (daemons
# started with setsid end up here), as init does on a real machine.
REAPER = textwrap.dedent("""
    import os, subprocess, sys
    subprocess.run(["mount", "--bind", sys.argv[1], "/data"], check=True)
    if sys.argv[2]:  # the host's own shell start-up file instead of this machine's
        subprocess.run(["mount", "--bind", sys.argv[2], os.path.expanduser("~/.bashrc")], check=True)
    child = subprocess.Popen(sys.argv[3:])
    while True:
        pid, _ = os.wait()
        if pid == child.pid:
            break
""")


_NETS = iter(range(256))  # each lab host gets its own /30, never reused within a process


class NetnsLab:
    """Several hosts, each in its own network, mount and PID namespace, reached over veth links. Its
    addresses are 10.<from the pid>.<n>.0/30, so test runs side by side (worktrees) do not collide."""

    def __init__(self, base: Path, count: int, prefix: str = "swt", bashrc: Path | None = None):
        """`bashrc`: a file each host's root sees as ~/.bashrc (default: this machine's own)."""
        self.base, self.prefix = base, f"{prefix}{os.getpid() % 10000}"
        self.servers: list[SshServer] = []
        client_key = base / "client_key"
        keygen(client_key)
        known = base / "known_hosts"
        known.touch()
        Path("/data").mkdir(exist_ok=True)  # mount point; each host binds its own directory here
        self.nets: list[str] = []
        for i in range(count):
            ns = f"{self.prefix}-{i}"
            net = f"10.{32 + os.getpid() % 200}.{next(_NETS)}"
            self.nets.append(net)
            self._link(ns, net)
            server = make_server(base / f"host{i}", address=f"{net}.2", port=22,
                                 client_key=client_key, known_hosts=known)
            server.netns = ns
            server.wrap = ["ip", "netns", "exec", ns, "unshare", "--mount", "--pid", "--fork", "--kill-child",
                           "--mount-proc", sys.executable, "-c", REAPER, str(server.data), str(bashrc or "")]
            self.servers.append(server)

    def _link(self, ns: str, net: str) -> None:
        outer, inner = f"{ns}h", f"{ns}n"
        for cmd in (
            f"ip netns add {ns}",
            f"ip link add {outer} type veth peer name {inner}",
            f"ip link set {inner} netns {ns}",
            f"ip addr add {net}.1/30 dev {outer}",
            f"ip link set {outer} up",
            f"ip netns exec {ns} ip addr add {net}.2/30 dev {inner}",
            f"ip netns exec {ns} ip link set {inner} up",
            f"ip netns exec {ns} ip link set lo up",
        ):
            subprocess.run(cmd.split(), check=True)

    def start(self) -> None:
        for s in self.servers:
            s.start()
            s.trust()

    def close(self) -> None:
        for i, s in enumerate(self.servers):
            s.stop()
            subprocess.run(["ip", "link", "del", f"{self.prefix}-{i}h"], stderr=subprocess.DEVNULL)
            subprocess.run(["ip", "netns", "del", f"{self.prefix}-{i}"], stderr=subprocess.DEVNULL)


def wait_until(predicate, timeout: float = 20, what: str = "condition") -> None:
    """Polls `predicate` until true: tests wait for a real event (a log line, a process), not a time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# -- Docker: a real engine, and a base image made without any registry ------------------------------

BASE_IMAGE = "swapctl-test/gxx:bookworm"  # minimal Debian with g++ and make, from Debian's packages
DEBIAN_MIRROR = os.environ.get("SWAPCTL_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def docker_engine(logdir: Path):
    """A client for the engine DOCKER_HOST names; when none answers, starts `dockerd` (as CI does) and
    returns its process too, for the caller to stop."""
    import docker
    import docker.errors

    try:
        client = docker.from_env()
        client.ping()
        return client, None
    except docker.errors.DockerException:
        pass
    dockerd = shutil.which("dockerd")
    assert dockerd, "the build tests need a Docker engine: apt-get install docker.io (scripts/quickstart does)"
    proc = subprocess.Popen([dockerd], stdout=open(logdir / "dockerd.log", "ab"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)

    def answers() -> bool:
        try:
            docker.from_env().ping()
            return True
        except docker.errors.DockerException:
            assert proc.poll() is None, f"dockerd exited {proc.returncode}; see {logdir / 'dockerd.log'}"
            return False

    wait_until(answers, timeout=60, what="dockerd to answer")
    return docker.from_env(), proc


def ensure_base_image(client, workdir: Path) -> str:
    """BASE_IMAGE, made once per engine: debootstrap a minimal Debian with g++, then import it."""
    import docker.errors

    try:
        client.images.get(BASE_IMAGE)
        return BASE_IMAGE
    except docker.errors.ImageNotFound:
        pass
    assert shutil.which("debootstrap"), "making the base image needs debootstrap: apt-get install debootstrap"
    rootfs, tar = workdir / "rootfs", workdir / "rootfs.tar"
    subprocess.run(["debootstrap", "--variant=minbase", "--include=g++,make", "bookworm", str(rootfs), DEBIAN_MIRROR],
                   check=True, capture_output=True)
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tar), "."], check=True)
    repo, tag = BASE_IMAGE.split(":")
    client.api.import_image(src=str(tar), repository=repo, tag=tag)
    shutil.rmtree(rootfs)
    tar.unlink()
    return BASE_IMAGE


def session_of(marker: str, within: str = "", pidns: str | None = None) -> int:
    """The `sshd: root@notty` process serving the connection that runs a command containing `marker` (and
    `within`, a box's data directory: other worktrees' tests on this machine run swap scripts too); with
    `pidns` (a /proc/PID/ns/pid link), only the processes of that PID namespace (a container's)."""
    procs = {}
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (pidns is None or os.readlink(p / "ns/pid") == pidns):
                stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
                procs[int(p.name)] = (int(stat[1]), (p / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError):
            pass
    for _pid, (ppid, cmd) in procs.items():
        if marker in cmd and within in cmd and "sh" in cmd.split()[0]:
            while ppid in procs:
                if procs[ppid][1].startswith("sshd: root@"):
                    return ppid
                ppid = procs[ppid][0]
    raise AssertionError(f"no sshd session runs {marker}")


def path_without(bin_dir: Path, tool: str) -> Path:
    """`bin_dir`, made: links to every program of the usual PATH directories but `tool` (a host without it)."""
    bin_dir.mkdir()
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        for found in Path(d).iterdir() if Path(d).is_dir() else ():
            if found.name != tool and not (bin_dir / found.name).exists():
                (bin_dir / found.name).symlink_to(found)
    return bin_dir
