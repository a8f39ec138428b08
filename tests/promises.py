"""The swap's promises as checks, and the faults that try to break them (issue 27).

Shared by the stateful test (tests/test_promises.py) and the fault campaign (benchmarks/faults.py): one
lab host (a real sshd in its own network, mount and PID namespace, tests/lab.py NetnsLab) whose /data is a
small tmpfs that can really fill up, swapctl run as a real subprocess, faults injected for real (SIGKILL,
SIGINT, SIGSTOP of the controller, the veth set down, tc tbf, the daemon killed, sshd's sessions killed,
the disk filled to its last byte) when a chosen line of swapctl's output appears, or after a delay.

The promises, checked after every operation once the host has settled (`Host.check`):
- never two daemons; never none unless swapctl said so (exit 5) or the journal says none runs;
- what runs is what the model expects: after exit 0 the new release (a rollback: what ran before the
  current one, so two rollbacks toggle); after exit 4 the one before; after exit 3 the very same process;
  after anything else (a killed controller, exit 5) whatever the host's journal says;
- never a crashing or never-ready build left running;
- every daemon runs exactly as the first was started: its command line, cwd, environment and user (issue 44);
- the binary path is a symlink to an existing release; the journal parses, and its last line names what
  runs; no lock outlives its deploy by more than LOCK_BOUND_S; `swapctl status --json` agrees with /proc.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from promises_curio import DRAIN_TIMEOUT_S, POLL_S, POST_WAIT_S, Curio

from lab import NetnsLab, build_prover, prover_config, wait_until

GOOD = ("a", "b", "c")  # three good builds: three sha256s, so a wrong rollback target is seen
BAD = ("crash", "noready")
READY_TIMEOUT_S = 2  # a never-ready build costs this much
STOP_GRACE_S = 2
RELEASE_TIMEOUT_S = 8
# a deploy lock may outlive its controller this long (its heartbeat's silence bound, issue 27, and a
# margin for the host to notice); past it, a deploy refused by that lock is a stale lock
LOCK_SILENCE_S = 5  # daemon.lock_silence_s: the host-side lock holder ends after this long without a heartbeat
LOCK_BOUND_S = LOCK_SILENCE_S + 10
# a swap the host finishes alone ends within this (stop, memory wait, start, readiness, and its own rollback)
SETTLE_S = 2 * (READY_TIMEOUT_S + STOP_GRACE_S + RELEASE_TIMEOUT_S) + 10
LATE_S = 10  # a session's shell may start its command this long after its controller ended (a slow .bashrc)
OP_TIMEOUT_S = 90  # a controller still running past this has hung: itself a violation
NONE_RUNS = {"no-daemon", "failed", "rollback-failed", "unknown"}
RUNS = {"deployed", "rolled-back"}
RESERVED_PORTS = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
# How the engineer started the first daemon: this command line, in /data, as root, with only this
# environment (CUZK_LAB is the playbook's daemon.env, so a release with no record of its own starts with
# the same). Every daemon after it must run exactly so (issue 44: a rollback once started one bare, in /).
ARGV = ["/data/cuzk", "--config", "/data/cuzk.toml"]
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "CUZK_LAB": "1"}


def sha(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def builds(where: Path) -> dict[str, Path]:
    """The stand-in prover's builds the model deploys: three good ones, one crashing, one never ready."""
    out = {t: build_prover(where / f"prover-{t}", TIMING="1", TAG=t) for t in GOOD}
    out["crash"] = build_prover(where / "prover-crash", FAULT="crash", TAG="crash")
    out["noready"] = build_prover(where / "prover-noready", FAULT="noready", TAG="noready")
    return out


@dataclass(frozen=True)
class Proc:
    pid: int  # as this machine sees it
    inner: int  # as the host sees it (its PID namespace)
    ppid: int
    state: str
    cmdline: list[str]


@dataclass
class Ran:
    """One swapctl run under a fault: its exit code (negative: the signal that ended it), its output, and
    whether the fault fired while it still ran."""

    op: str
    fault: str
    code: int | None
    stderr: str
    stdout: str = ""
    fired: bool = False
    landed: bool = False
    seconds: float = 0.0


# -- the host ---------------------------------------------------------------------------------------


class Host:
    """One NetnsLab host with a 32 MiB tmpfs /data, a hand-started build A, and its playbook."""

    def __init__(self, base: Path, bins: dict[str, Path], prefix: str = "spm", disk_mib: int = 32,
                 curio: bool = False):
        self.base, self.bins = base, bins
        self.sha_of = {sha(p): t for t, p in bins.items()}
        (base / "netns").mkdir(parents=True, exist_ok=True)
        self.lab = NetnsLab(base / "netns", 1, prefix=prefix)
        self.server = self.lab.servers[0]
        # with `curio`, a Curio node feeds the daemon and every swap cordons it (tests/promises_curio.py)
        self.curio = Curio(base, self.server.netns or "") if curio else None
        self.data = self.server.data
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={disk_mib}m", "tmpfs", str(self.data)], check=True)
        self.outer = f"{self.lab.prefix}-0h"
        self.state = self.data / ".swapctl" / "cuzk"
        self.playbook = base / "swapctl.toml"
        self.playbook.write_text(self.server.playbook(
            name="lab", daemon={"binary": "/data/cuzk", "args": ["--config", "/data/cuzk.toml"], "match": "/data/cuzk",
                                "log": "/data/cuzk.log", "ready_timeout_s": READY_TIMEOUT_S, "env": {"CUZK_LAB": "1"},
                                "stop_grace_s": STOP_GRACE_S, "lock_silence_s": LOCK_SILENCE_S,
                                **(self.curio.daemon() if self.curio else {})},
            memory={"min_available_gib": 0.1, "release_timeout_s": RELEASE_TIMEOUT_S},
            **({"curio": self.curio.playbook()} if self.curio else {})))
        self._reserved_before: str | None = None  # ip_local_reserved_ports before this host reserved any
        self._reserved: set[int] = set()
        self.env = {"XDG_STATE_HOME": str(base / "state"), "XDG_CACHE_HOME": str(base / "cache"),
                    "HOME": str(base / "home")}
        self.lab.start()
        self.pidns = os.readlink(f"/proc/{self._init()}/ns/pid")

    def _init(self) -> int:
        """The host's PID 1 (lab.py's REAPER): the child of the `ip netns exec ... unshare` process."""
        assert self.server.proc
        for p in Path("/proc").iterdir():
            if p.name.isdigit() and _ppid(p) == self.server.proc.pid:
                return int(p.name)
        raise AssertionError("the lab host has no PID 1")

    def close(self) -> None:
        self.unreserve()
        if self.curio:
            self.curio.close()
        self.kill_everything()
        self.lab.close()
        subprocess.run(["umount", "-l", str(self.data)], check=False)

    # -- what runs there --

    def procs(self) -> list[Proc]:
        """The live processes of the host's PID namespace."""
        found = []
        for p in Path("/proc").iterdir():
            try:
                if not p.name.isdigit() or os.readlink(p / "ns/pid") != self.pidns:
                    continue
                status = (p / "status").read_text()
                inner = int(re.search(r"^NSpid:.*\s(\d+)$", status, re.M).group(1))  # type: ignore[union-attr]
                stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
                cmd = (p / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            except (OSError, AttributeError, IndexError):
                continue
            if stat[0] != "Z":
                found.append(Proc(int(p.name), inner, int(stat[1]), stat[0], cmd))
        return found

    def daemons(self) -> list[Proc]:
        """The daemons: processes running /data/cuzk (not their forks, nor a memory holder whose daemon
        died: the stand-in's holder ignores SIGTERM, and the lab's daemons do not)."""
        mine = [p for p in self.procs() if p.cmdline[:1] == ["/data/cuzk"]]
        pids = {p.pid for p in mine}
        return [p for p in mine if p.ppid not in pids and not _ignores_sigterm(p.pid)]

    def busy(self) -> list[Proc]:
        """What still runs on the host besides its PID 1, sshd (its listener, and a session a half-open
        connection keeps until TCP gives up) and the daemons with their forks: a session's shell, which may
        act late (a slow .bashrc) after its controller ended."""
        return [p for p in self.procs() if p.inner != 1 and p.cmdline[:1] != ["/data/cuzk"]
                and not _is_listener(p) and not (p.cmdline[:1] and p.cmdline[0].startswith("sshd:"))]

    def running(self) -> list[str]:
        """The build (GOOD/BAD name, or 'other:SHA') of each daemon, read from /proc/PID/exe."""
        out = []
        for p in self.daemons():
            try:
                s = sha(f"/proc/{p.pid}/exe")
            except OSError:
                continue
            out.append(self.sha_of.get(s, f"other:{s[:12]}"))
        return out

    def launch(self, pid: int) -> tuple[list[str], str, dict[str, str], int] | None:
        """How a daemon was started: its command line, cwd, environment and uid (None: it is gone)."""
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            cwd = os.readlink(f"/proc/{pid}/cwd")
            env = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_bytes().decode(
                errors="replace").split("\0") if "=" in v)
            uid = int(re.search(r"^Uid:\s*(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M).group(1))  # type: ignore[union-attr]
        except (OSError, AttributeError):
            return None
        return argv, cwd, env, uid

    def on_disk(self) -> str | None:
        """The build the binary path holds (GOOD/BAD name, or 'other:SHA'); None: none."""
        path = self.data / "cuzk"
        try:  # a link to a release names it as the host sees it: /data/... inside its mount namespace
            if path.is_symlink():
                path = self.data / os.readlink(path).removeprefix("/data/")
            s = sha(path)
        except OSError:
            return None
        return self.sha_of.get(s, f"other:{s[:12]}")

    def die(self) -> None:
        """The daemon dies on its own (SIGKILL) and stays dead: no unit and no engineer starts it again."""
        self.kill_daemon()
        wait_until(lambda: not self.daemons(), what="the daemon to be gone")

    def journal(self) -> tuple[list[dict], int]:
        """The host's journal lines that parse, and how many do not."""
        path = self.state / "journal.jsonl"
        good, torn = [], 0
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            try:
                good.append(json.loads(line))
            except ValueError:
                torn += 1
        return good, torn

    def journal_says(self, lines: list[dict]) -> str | None:
        """The build the journal's last swap line says runs (None: none), 'a' (hand-started) with none."""
        for entry in reversed(lines):
            # a rollback whose fallback runs but is not ready (its log on a full disk, say) names what runs
            if entry.get("outcome") in RUNS or (entry.get("outcome") == "rollback-failed" and entry.get("pid")):
                return self.sha_of.get(entry.get("to") or "", f"other:{str(entry.get('to'))[:12]}")
            if entry.get("outcome") in NONE_RUNS:
                return None
        return "a"

    def lock_free(self) -> bool:
        """Neither the deploy lock nor a swap's own lock is held (flock(2) on the host's files)."""
        for name in ("lock", "swap.lock"):
            try:
                fd = os.open(self.state / name, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            finally:
                os.close(fd)
        return True

    def swap_running(self) -> bool:
        """A swap script still runs on the host (one cut off from its controller finishes alone)."""
        try:
            fd = os.open(self.state / "swap.lock", os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def status(self) -> dict | None:
        r = subprocess.run([sys.executable, "-m", "swapctl", "status", "lab", "--json", "-p", str(self.playbook)],
                           capture_output=True, text=True, env={**os.environ, **self.env}, timeout=60,
                           stdin=subprocess.DEVNULL)
        try:
            return json.loads(r.stdout)["hosts"]["lab"]
        except (ValueError, KeyError):
            return None

    # -- starting over --

    def reset(self, slow_release: bool = False) -> None:
        """A fresh host: nothing but sshd runs, /data holds only build A, started by hand and ready."""
        self.heal()
        if self.curio:
            self.curio.stop()
        self.kill_everything()
        for p in self.data.iterdir():
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        for d in ("state", "cache", "home"):
            shutil.rmtree(self.base / d, ignore_errors=True)
        (self.base / "home").mkdir()
        shutil.copy(self.bins["a"], self.data / "cuzk")
        self.write_config(slow_release)
        self.start_by_hand()
        if self.curio:
            self.curio.restart()

    def start_by_hand(self) -> None:
        """Starts /data/cuzk as an engineer does (`setsid ... &`) and waits for its ready line."""
        log = self.data / "cuzk.log"
        off = log.stat().st_size if log.exists() else 0
        env = " ".join(f"{k}={v}" for k, v in ENV.items())
        self.server.exec(f"cd /data && env -i {env} setsid {' '.join(ARGV)} >> /data/cuzk.log 2>&1 < /dev/null &")
        wait_until(lambda: "ready" in log.read_bytes()[off:].decode(errors="replace") and self.daemons(),
                   what="the daemon's ready line")

    def write_config(self, slow_release: bool = False) -> None:
        """The daemons' config; with `slow_release`, each leaves a child holding memory 1.5 s after it dies."""
        holder = {"child_hold_mib": 16, "child_linger_ms": 1500} if slow_release else {}
        if self.curio:  # proofs of ~0.45 s on request (the node's), none of its own
            holder.update(jobs=0, synth_ms=20, gpu_ms=200)
        (self.data / "cuzk.toml").write_text(prover_config(memory_mib=16, **holder)
                                             + (self.curio.config() if self.curio else ""))

    def kill_everything(self) -> None:
        """SIGKILL to every process on the host but its PID 1 and sshd's listener."""
        keep = {p.pid for p in self.procs() if p.inner == 1 or _is_listener(p)}
        for p in self.procs():
            if p.pid not in keep:
                _kill(p.pid, signal.SIGKILL)
        wait_until(lambda: {p.pid for p in self.procs()} <= keep, timeout=20, what="the host's processes to end")

    def heal(self) -> None:
        """Undoes every network and disk fault: the link up, no shaping, no flow forgotten, no filler file."""
        subprocess.run(["ip", "link", "set", self.outer, "up"], check=False)
        subprocess.run(["ip", "netns", "exec", self.server.netns or "", "iptables", "-F", "INPUT"], check=False)
        subprocess.run(["tc", "qdisc", "del", "dev", self.outer, "root"], stderr=subprocess.DEVNULL, check=False)
        self.free_disk()
        self.unreserve()

    # -- faults --

    def link(self, up: bool) -> None:
        subprocess.run(["ip", "link", "set", self.outer, "up" if up else "down"], check=True)

    def flows(self, side: str = "controller") -> set[int]:
        """The source ports of the controller's TCP connections to the host's sshd, in any state but
        TIME_WAIT, as the controller's machine (`controller`) or the host (`host`) holds them (/proc/net/tcp)."""
        client, sshd = _hex(f"{self.lab.nets[0]}.1"), _hex(self.server.address, self.server.port)
        table = "/proc/net/tcp" if side == "controller" else f"/proc/{self._init()}/net/tcp"
        ports = set()
        for row in Path(table).read_text().splitlines()[1:]:
            local, remote, state = row.split()[1:4]
            ours, theirs = (local, remote) if side == "controller" else (remote, local)
            if state != "06" and theirs == sshd and ours.startswith(client + ":"):
                ports.add(int(ours.split(":")[1], 16))
        return ports

    def forget(self, ports: set[int]) -> None:
        """As a NAT or firewall that forgot these flows: their FIN and RST never reach the host (dropped by
        its netfilter until the next reset), and no later connection may take their source ports. A rule
        for every FIN and RST instead let a later connection's close leave its session on the host; one
        that drew a forgotten flow's port then met that stale session, its RST was dropped, and its connect
        timed out (CI, 2026-12-03: `status --json` two steps after a half-open)."""
        self.reserve(ports)
        for port in sorted(ports):
            for flag in ("FIN", "RST"):
                subprocess.run(["ip", "netns", "exec", self.server.netns or "", "iptables", "-A", "INPUT", "-p",
                                "tcp", "--sport", str(port), "--tcp-flags", flag, flag, "-j", "DROP"], check=True)

    def reserve(self, ports: set[int]) -> None:
        """No connection of this machine's takes these source ports (net.ipv4.ip_local_reserved_ports)
        until unreserve()."""
        if self._reserved_before is None:
            self._reserved_before = RESERVED_PORTS.read_text().strip()
        self._reserved |= ports
        RESERVED_PORTS.write_text(",".join(filter(None, [self._reserved_before, *map(str, sorted(self._reserved))])))

    def unreserve(self) -> None:
        if self._reserved_before is not None:
            RESERVED_PORTS.write_text(self._reserved_before or "\n")
        self._reserved_before, self._reserved = None, set()

    def slow_link(self, kbit: int = 256) -> None:
        subprocess.run(["tc", "qdisc", "replace", "dev", self.outer, "root", "tbf", "rate", f"{kbit}kbit",
                        "burst", "32kbit", "latency", "400ms"], check=True)

    def kill_daemon(self) -> None:
        for p in self.daemons():
            _kill(p.pid, signal.SIGKILL)

    def restart_sshd(self) -> None:
        """As `systemctl restart ssh` with KillMode=control-group: every session ends, the listener
        starts again (SIGHUP: sshd re-executes itself) and new connections are served."""
        for p in self.procs():
            if p.cmdline[:1] and p.cmdline[0].startswith("sshd:") and not _is_listener(p):
                _kill(p.pid, signal.SIGKILL)
        for p in self.procs():
            if _is_listener(p):
                _kill(p.pid, signal.SIGHUP)

    def free_disk(self) -> None:
        (self.data / "fill").unlink(missing_ok=True)

    def fill_disk(self) -> None:
        """/data full to its last byte: a file that grows until not one more byte fits."""
        with open(self.data / "fill", "ab", buffering=0) as f:
            for chunk in (1 << 20, 1 << 12, 1):
                try:
                    while f.write(b"\0" * chunk):
                        pass
                except OSError:
                    pass


def _ppid(p: Path) -> int:
    try:
        return int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return -1


def _ignores_sigterm(pid: int) -> bool:
    try:
        mask = re.search(r"^SigIgn:\s*([0-9a-f]+)", Path(f"/proc/{pid}/status").read_text(), re.M)
    except OSError:
        return False
    return bool(mask and int(mask.group(1), 16) & (1 << (signal.SIGTERM - 1)))


def _is_listener(p: Proc) -> bool:
    """sshd's listener: its title says so, or (re-executing after a SIGHUP) its command line is sshd -D."""
    cmd = " ".join(p.cmdline)
    return "[listener]" in cmd or (cmd.split(" ", 1)[0].endswith("/sshd") and " -D" in cmd)


def _hex(address: str, port: int | None = None) -> str:
    """An IPv4 address (and port) as /proc/net/tcp writes it on a little-endian machine: the address's bytes
    reversed, in hex; the port in hex."""
    text = bytes(reversed(bytes(int(b) for b in address.split(".")))).hex().upper()
    return text if port is None else f"{text}:{port:04X}"


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# -- faults -----------------------------------------------------------------------------------------

# The moments a fault can land at: a line of swapctl's output (a step as it begins), or "+S" seconds in.
MOMENTS = {
    "lock": r" lock: taking",
    "upload": r" upload",
    "stop": r" stop: SIGTERM",
    "memory": r" memory: ",
    "start": r" start: started",
    "rollback": r"; rolling back$",
}
# the cordon's moments, drawn only on a host whose swaps cordon a Curio node (faults.py --cordon)
CORDON_MOMENTS = {
    "cordon": r" cordoned ",
    "drained": r" drained in ",
}


@dataclass
class Fault:
    """A fault: `fire` runs at the moment; `heal` after the controller has ended (it must leave the host
    able to serve again: a link back up, the disk freed). `hold` seconds: how long it lasts once fired."""

    name: str
    fire: Callable[[Host, subprocess.Popen, float], None]
    heal: Callable[[Host], None] = lambda host: None
    hold: tuple[float, float] = (0.0, 0.0)  # a random duration between these, for cuts and stops


def _sigkill(host: Host, proc: subprocess.Popen, _: float) -> None:
    proc.send_signal(signal.SIGKILL)


def _sigint(times: int) -> Callable[[Host, subprocess.Popen, float], None]:
    def fire(host: Host, proc: subprocess.Popen, _: float) -> None:
        for i in range(times):
            if i:
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
    return fire


def _cut(host: Host, proc: subprocess.Popen, hold: float) -> None:
    host.link(False)
    threading.Timer(hold, host.link, (True,)).start()


def _half_open(host: Host, proc: subprocess.Popen, hold: float) -> None:
    """The controller dies while the link is down, and the FIN and RSTs of the connections it had open never
    reach the host (as behind a NAT or firewall that forgot those flows, Host.forget): the host's sessions
    stay ESTABLISHED to a peer that is gone. Later connections close as on any day. The flows to forget are
    read on both sides once the link is down and the controller dead: a socket with unread input dies at
    once (its RST lost), and one the controller had already closed (TIME_WAIT) can still be held by the
    host, whose last ACK was lost. CI's run of 2026-12-04 read only the controller's side, before the kill,
    and the host kept a port no reservation covered."""
    host.link(False)
    dying = host.flows()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    dying |= host.flows() | host.flows("host")
    host.forget(dying)
    time.sleep(hold)
    host.link(True)


def _stopped(host: Host, proc: subprocess.Popen, hold: float) -> None:
    """SIGSTOP: the controller's connections stay open and silent, then it goes on (SIGCONT)."""
    proc.send_signal(signal.SIGSTOP)
    threading.Timer(hold, proc.send_signal, (signal.SIGCONT,)).start()


def _slow(host: Host, proc: subprocess.Popen, _: float) -> None:
    host.slow_link(256)


FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("none", lambda host, proc, _: None),
    Fault("ctl-kill", _sigkill),
    Fault("sigint", _sigint(1)),
    Fault("sigint-twice", _sigint(2)),
    Fault("link-cut", _cut, lambda host: host.link(True), hold=(1.0, 3.0)),
    Fault("half-open", _half_open, lambda host: host.link(True), hold=(0.5, 1.0)),  # its flows forgotten till reset()
    Fault("ctl-stop", _stopped, hold=(1.0, 4.0)),
    Fault("slow-link", _slow, lambda host: host.heal()),
    # the daemon that runs leaves a child holding memory for 1.5 s after it dies (Host.reset(slow_release))
    Fault("slow-release", lambda host, proc, _: None),
    Fault("daemon-kill", lambda host, proc, _: host.kill_daemon()),
    Fault("sshd-restart", lambda host, proc, _: host.restart_sshd()),
    Fault("disk-full", lambda host, proc, _: host.fill_disk(), lambda host: host.free_disk()),
)}
# What each fault is, in the words of docs/survives.md (scripts/survives makes that page)
SAYS = {
    "ctl-kill": "the controller SIGKILLed as a step begins (the lock, the upload, the stop, the start, the "
                "\"rolling back\" line of a failed start)",
    "sigint": "Ctrl-C once (SIGINT to the controller) as a step begins",
    "sigint-twice": "Ctrl-C twice, 0.2 s apart, as a step begins",
    "ctl-stop": "the controller stopped (SIGSTOP) for 1-4 s, then continued: its connection open and silent",
    "link-cut": "the link cut (the host's veth down) for 1-3 s as a step begins (the campaign: 1-20 s)",
    "half-open": "a silent half-open connection: the controller dies while the link is down, so its FIN and "
                 "RST never reach the host",
    "daemon-kill": "the daemon (whichever runs at that moment) SIGKILLed as a step begins",
    "sshd-restart": "sshd restarted with its sessions killed as a step begins",
    "disk-full": "the host's disk (a tmpfs /data) full to its last byte as a step begins, freed after it",
    "slow-link": "a 256 kbit/s link (tc tbf) for the whole operation",
    "slow-release": "slow memory release: the daemon leaves a child holding memory 1.5 s after it dies",
}
# the faults that change how the whole operation runs, not one moment of it
FROM_THE_START = {"slow-link", "slow-release"}


def operation_argv(host: Host, op: str) -> list[str]:
    """`deploy:BUILD` or `rollback` as swapctl's command line."""
    book = ["-p", str(host.playbook), "--yes"]
    if op == "rollback":
        return ["rollback", "lab", *book]
    build = op.split(":", 1)[1]
    return ["deploy", "lab", "--binary", str(host.bins[build]), *book]


def run(host: Host, op: str, fault: str = "none", moment: str = "start", hold: float | None = None) -> Ran:
    """Runs `op` with swapctl as a subprocess and fires `fault` at `moment` (a MOMENTS key or '+SECONDS'),
    lasting `hold` seconds (default: the least of its range); heals the fault once the controller has
    ended. Never raises for what the controller does. Two operations are not swapctl's: `die` (the daemon
    dies on its own and stays dead) and `deploy:same` (a deploy of the build the binary path holds)."""
    if op == "die":
        host.die()
        return Ran(op, "none", 0, "")
    if op == "deploy:same":
        op = f"deploy:{host.on_disk()}"
    f = FAULTS[fault]
    hold = f.hold[0] if hold is None else hold
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "swapctl", *operation_argv(host, op)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, errors="replace",
                            env={**os.environ, "PYTHONFAULTHANDLER": "1", **host.env})
    fired = threading.Event()
    landed = []
    ended = threading.Event()  # the controller has exited: a fault due now never fires

    def fire() -> None:
        # a timed fault due after the controller's exit would fire on the checks (the link cut while they
        # read the host, the daemon killed after the deploy had landed): a fault of the harness, not of
        # swapctl. The campaign of 2026-12-02 (seeds 9 and 10) reported two such "violations".
        if fired.is_set() or ended.is_set() or (fault not in FROM_THE_START and proc.poll() is not None):
            return
        fired.set()
        landed.append(True)
        f.fire(host, proc, hold)

    lines: list[str] = []
    timer: threading.Timer | None = None
    if fault in FROM_THE_START:
        fire()
    elif fault != "none" and moment.startswith("+"):
        timer = threading.Timer(float(moment[1:]), fire)
        timer.start()
    pattern = re.compile({**MOMENTS, **CORDON_MOMENTS}.get(moment, "$^"))
    out: list[str] = []

    def watch() -> None:  # swapctl's progress, line by line: the moment comes when its line does
        assert proc.stderr
        for line in proc.stderr:
            lines.append(line)
            if fault != "none" and not fired.is_set() and pattern.search(line.rstrip("\n")):
                threading.Thread(target=fire, daemon=True).start()

    readers = [threading.Thread(target=watch, daemon=True),
               threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""), daemon=True)]
    for r in readers:
        r.start()
    try:
        code: int | None = proc.wait(OP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: its threads' stacks go to its stderr
        proc.wait()
        code = None
    ended.set()
    if timer:
        timer.cancel()
    for r in readers:
        r.join(10)
    time.sleep(0.05 if not fired.is_set() else hold + 0.1)  # a cut or a stop may still be on: let it end
    f.heal(host)
    if fault == "ctl-stop" and proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
    return Ran(op, fault, code, "".join(lines), "".join(out), fired.is_set(), bool(landed and landed[0]),
               time.monotonic() - t0)


# -- the promises -----------------------------------------------------------------------------------


@dataclass
class Model:
    """What should run on the host: `current`, and `before`, what ran before it became current (what
    `rollback` goes back to). None before: nothing to go back to."""

    current: str | None = "a"
    before: str | None = None
    dead: bool = False  # the daemon died on its own and nothing started it again: `current` is on the disk only
    history: list[str] = field(default_factory=list)

    def expect(self, ran: Ran) -> tuple[str | None, bool]:
        """The build that should run after `ran`, and whether that is certain (False: the host's journal
        decides, as after a killed controller or exit 5)."""
        code = ran.code
        if ran.op == "die" or (self.dead and code in (2, 3)):  # a refusal starts nothing
            return None, True
        if code == 0:
            if ran.op == "rollback":
                return (self.before, True) if self.before else (self.current, True)
            return ran.op.split(":", 1)[1], True
        if code in (3, 4, 2):
            return self.current, True
        return None, False

    def landed(self, now: str | None, dead: str | None = None) -> None:
        """`now` runs after a step: a release landing makes what ran before it the way back. `dead`: nothing
        runs, and the binary path holds this build."""
        self.dead = dead is not None
        now = dead or now
        if now != self.current:
            self.before, self.current = self.current, now


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str


KINDS = ("two daemons", "no daemon", "bad build left running", "wrong release", "outcome never journaled",
         "invalid journal line", "binary path not a release", "stale lock", "never settled", "wrong exit code",
         "status disagrees", "controller hung", "not as it ran", "left cordoned", "task lost")


def check(host: Host, model: Model, ran: Ran, pid_before: int | None) -> list[Violation]:
    """Every promise after `ran`, once the host has settled; updates `model` to what runs."""
    v: list[Violation] = []

    def bad(kind: str, detail: str) -> None:
        v.append(Violation(kind, f"{ran.op} with {ran.fault}: {detail} (exit {ran.code})"))

    if ran.code is None:
        bad("controller hung", f"still running after {OP_TIMEOUT_S} s")
    settle = SETTLE_S + (POST_WAIT_S + POLL_S + DRAIN_TIMEOUT_S if host.curio else 0)
    try:
        wait_until(lambda: not host.swap_running(), timeout=settle, what="the host's swap to end")
    except AssertionError:
        bad("never settled", f"a swap script still runs on the host {settle:g} s after the controller ended")
    try:
        wait_until(host.lock_free, timeout=LOCK_BOUND_S, what="the deploy lock to be free")
    except AssertionError:
        bad("stale lock", f"the deploy lock is still held {LOCK_BOUND_S:g} s after its controller ended")
    try:  # a shell its killed session left may act late (a slow .bashrc): give it time before judging. One a
        # half-open connection keeps waits for its input until TCP gives up, and runs nothing cut short
        # (swap.sh: only under its deploy's lock; the epilogue: only whole; the receive: only after GO)
        wait_until(lambda: not host.busy(), timeout=LATE_S, what="the host's sessions to end")
    except AssertionError:
        pass
    runs, daemons = _stable(host)
    lines, torn = host.journal()
    if torn:
        bad("invalid journal line", f"{torn} line(s) of journal.jsonl do not parse")
    says = host.journal_says(lines)
    now = runs[0] if len(runs) == 1 else None
    if len(runs) > 1:
        bad("two daemons", f"{len(runs)} daemons run: {runs}")
    if any(r in BAD for r in runs):
        bad("bad build left running", f"{runs} runs")
    killed_daemon = ran.fault == "daemon-kill" and ran.fired
    # nothing runs, rightly: the daemon was killed, or it died before and no swap has landed another build
    # since (the journal's last landing is still the build that died, or says none runs)
    dead = not runs and (killed_daemon or ran.op == "die" or (model.dead and says in (None, model.current)))
    if not runs and not dead and not (says is None and ran.code not in (0, 3, 4)):
        bad("no daemon", f"nothing runs; the journal says {says}")
    if len(runs) <= 1 and now != says and not dead:
        bad("outcome never journaled", f"{now or 'nothing'} runs; the journal's last line says {says or 'nothing'}")
    want, certain = model.expect(ran)
    if certain and len(runs) <= 1 and now != want and not (killed_daemon and now is None):
        bad("wrong release", f"{now or 'nothing'} runs; after exit {ran.code} of {ran.op} the model expects {want}")
    if ran.op == "rollback" and ran.fault == "none" and model.before in GOOD and ran.code != 0:
        bad("wrong release", f"rollback refused ({_last(ran.stderr)}); {model.before} ran before {model.current}")
    if ran.code == 3 and pid_before is not None and daemons and daemons[0].pid != pid_before:
        bad("wrong exit code", "exit 3 (nothing changed), but the daemon's pid changed")
    # a SIGINT inside the interpreter's own start-up (importing its site module, before a line of swapctl's
    # runs) ends Python with "Fatal Python error: init_import_site" and exit 1: not swapctl's to answer
    # (the cordon campaign of 2026-12-07, seed 32, run 123); the other promises are still checked
    python_only = ran.code == 1 and "Fatal Python error: init_import_site" in ran.stderr
    if ran.code not in (0, 2, 3, 4, 5, None, -9, 130) and not (ran.code and ran.code < 0) and not python_only:
        bad("wrong exit code", f"exit {ran.code}: {_last(ran.stderr)}")
    _binary_path(host, bad)
    _status_agrees(host, daemons, bad)
    _as_it_ran(host, daemons, bad)
    if host.curio:
        _farm(host, host.curio, ran, pid_before, bad)
    held = host.on_disk() if dead else None
    model.landed(now if len(runs) <= 1 else model.current, dead=held)
    model.history.append(f"{ran.op}/{ran.fault} -> {now}{f' (dead, {held} on the disk)' if dead else ''} ({ran.code})")
    return v


def _as_it_ran(host: Host, daemons: list[Proc], bad: Callable[[str, str], None]) -> None:
    """Every daemon runs as the first one was started: its command line, cwd, environment and user."""
    for p in daemons:
        seen = host.launch(p.pid)
        if seen is not None and seen != (ARGV, "/data", ENV, 0):
            argv, cwd, env, uid = seen
            differ = {k: env.get(k) for k in {*env, *ENV} if env.get(k) != ENV.get(k)}
            bad("not as it ran", f"pid {p.inner} runs {argv} in {cwd} as uid {uid}, environment differing in "
                                 f"{differ}; the first ran {ARGV} in /data as root")


def _farm(host: Host, curio: Curio, ran: Ran, pid_before: int | None, bad: Callable[[str, str], None]) -> None:
    """The cordon's promises: the node not left cordoned, and no task failed during the step, unless the
    step began with no daemon or the harness killed the daemon itself (those lose the proof in flight)."""
    flagged, info = curio.cordoned(), (host.state / "cordon.info").exists()
    if flagged or info:
        bad("left cordoned", f"the node is {'cordoned' if flagged else 'not cordoned'} and cordon.info is "
                             f"{'there' if info else 'gone'} once the swap ended")
    failed = curio.failed()
    new, curio.failed_before = failed[curio.failed_before:], len(failed)
    killed = ran.op == "die" or (ran.fault == "daemon-kill" and ran.fired) or pid_before is None
    if new and not killed:
        bad("task lost", f"{len(new)} task attempt(s) failed: " + "; ".join(f"{n} {i}: {e}" for i, n, e in new[:3]))
    if (why := curio.running()) is not None:
        bad("task lost", f"{why}: the farm's record is incomplete")


def _stable(host: Host) -> tuple[list[str], list[Proc]]:
    """The daemons once two readings 0.05 s apart agree (a process may be ending as we look)."""
    last: tuple[list[str], list[Proc]] = ([], [])
    for _ in range(25):
        now = (host.running(), host.daemons())
        if now[0] == last[0] and [p.pid for p in now[1]] == [p.pid for p in last[1]]:
            return now
        last = now
        time.sleep(0.05)
    return last


def _binary_path(host: Host, bad: Callable[[str, str], None]) -> None:
    path = host.data / "cuzk"
    if not path.is_symlink():  # the hand-started build's own file, before the first swap
        if not path.exists():
            bad("binary path not a release", "/data/cuzk is gone")
        return
    target = os.readlink(path)
    inside = host.data / target.removeprefix("/data/")
    if not target.startswith("/data/.swapctl/cuzk/releases/") or not inside.is_file():
        bad("binary path not a release", f"/data/cuzk -> {target}, which is not an existing release")


def _status_agrees(host: Host, daemons: list[Proc], bad: Callable[[str, str], None]) -> None:
    doc = host.status()
    if doc is None or "error" in doc:
        bad("status disagrees", f"status --json failed: {doc and doc.get('error')}")
        return
    shown = sorted(d["pid"] for d in doc.get("daemons", []))
    real = sorted(p.inner for p in daemons)
    after = sorted(p.inner for p in host.daemons())
    if shown != real and real == after:  # the daemons did not change meanwhile: status is wrong
        bad("status disagrees", f"status --json shows daemon pids {shown}, /proc has {real}")


def _last(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1][:200]
