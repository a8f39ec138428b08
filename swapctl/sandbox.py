"""A local sandbox host: a real OpenSSH sshd on loopback with the stand-in prover running behind it.

The quick start deploys to it, and the test suite builds its hosts from the same parts.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BadInput, Refused
from .playbook import examples
from .remote.ssh import wait_for_banner

PROVER_SRC = Path(__file__).resolve().parent / "prover"  # images/prover, shipped in the wheel
SSHD_SEARCH = "/usr/sbin:/usr/bin:/usr/local/sbin"


def sshd_path() -> str:
    found = shutil.which("sshd", path=SSHD_SEARCH + ":" + os.environ.get("PATH", ""))
    if not found:
        raise BadInput("no sshd found; install it: `apt-get install openssh-server`")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "swapctl-sandbox", "-f", str(path)],
                   check=True)


@dataclass
class SshServer:
    """One sshd with its own host key, accepting one client key as root."""

    dir: Path
    address: str
    port: int
    client_key: Path
    known_hosts: Path
    data: Path  # what the host uses as its data directory
    proc: subprocess.Popen[bytes] | None = None
    netns: str | None = None
    wrap: list[str] = field(default_factory=list)  # a command that runs sshd inside namespaces
    path: str | None = None  # the PATH its sessions get; this process's PATH by default
    home_keys: bool = False  # also each user's own ~/.ssh/authorized_keys (logins that are not root)
    more_keys: str = ""  # one more AuthorizedKeysFile, for a login that cannot enter `dir` (sandbox_sudo)

    @property
    def host_pub(self) -> str:
        return (self.dir / "host_key.pub").read_text().split()[1]

    def config(self) -> Path:
        cfg = self.dir / "sshd_config"
        keys = " ".join([".ssh/authorized_keys"] * self.home_keys + [self.more_keys] * bool(self.more_keys))
        cfg.write_text(textwrap.dedent(f"""\
            Port {self.port}
            ListenAddress {self.address}
            HostKey {self.dir}/host_key
            PidFile none
            AuthorizedKeysFile {self.dir}/authorized_keys {keys}
            PermitRootLogin prohibit-password
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            UsePAM no
            StrictModes no
            MaxStartups 200:30:400
            MaxSessions 100
            Subsystem sftp internal-sftp
            LogLevel ERROR
            """) + f'SetEnv "PATH={self.path or os.environ.get("PATH", "/usr/bin:/bin")}"\n')  # nvidia-smi as we see it
        return cfg

    def start(self, detach: bool = False) -> None:
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
        argv = [*self.wrap, sshd_path(), "-D", "-e", "-f", str(self.config())]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(self.dir / "sshd.log", "ab"), start_new_session=detach)
        (self.dir / "sshd.pid").write_text(str(self.proc.pid))
        wait_for_banner(self.address, self.port, timeout=15)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def trust(self) -> None:
        """Records this server's key in known_hosts, as an ssh user who checked it would have."""
        name = self.address if self.port == 22 else f"[{self.address}]:{self.port}"  # OpenSSH's form
        with open(self.known_hosts, "a") as f:
            f.write(f"{name} ssh-ed25519 {self.host_pub}\n")

    def exec(self, script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs a shell script on the host with the system `ssh` client (an engineer's own hands)."""
        cmd = ["ssh", "-q", "-p", str(self.port), "-i", str(self.client_key), "-o", "BatchMode=yes",
               "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
               f"root@{self.address}", "sh", "-c", shlex.quote(script), "host",
               *map(shlex.quote, args)]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=60)

    def playbook(self, name: str = "lab", host: dict[str, Any] | None = None, **sections: dict[str, Any]) -> str:
        """Playbook text naming this host (`host`: its keys to add or change, e.g. user); `sections` add tables."""
        import json

        def toml(v: object) -> str:
            if isinstance(v, dict):
                return "{" + ", ".join(f"{json.dumps(k)} = {toml(x)}" for k, x in v.items()) + "}"
            return ("true" if v else "false") if isinstance(v, bool) else json.dumps(v)

        keys = {"address": self.address, "port": self.port, "user": "root", "identity_file": str(self.client_key),
                "known_hosts": str(self.known_hosts), **(host or {})}
        lines = [f"[hosts.{name}]", *(f"{k} = {toml(v)}" for k, v in keys.items()), ""]
        for table, values in sections.items():
            lines.append(f"[{table}]")
            lines += [f"{k} = {toml(v)}" for k, v in values.items()]
            lines.append("")
        return "\n".join(lines)


def make_server(base: Path, address: str = "127.0.0.1", port: int | None = None, data: Path | None = None,
                client_key: Path | None = None, known_hosts: Path | None = None, more_keys: str = "") -> SshServer:
    base.mkdir(parents=True, exist_ok=True)
    keygen(base / "host_key")
    if client_key is None:
        client_key = base / "client_key"
        keygen(client_key)
    (base / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    data = data or base / "data"
    data.mkdir(exist_ok=True)
    server = SshServer(dir=base, address=address, port=port or free_port(), client_key=client_key,
                       known_hosts=known_hosts or base / "known_hosts", data=data, more_keys=more_keys)
    server.known_hosts.touch()
    return server


def build_prover(out: Path, cuda: bool = False, **make_vars: str) -> Path:
    """Compiles the stand-in prover (images/prover) into `out`, unless it is there already."""
    if not out.exists():
        args = ["make", "-s", "-C", str(PROVER_SRC), f"CUDA={int(cuda)}", f"OUT={out}"]
        args += [f"{k}={v}" for k, v in make_vars.items()]
        subprocess.run(args, check=True)
    return out


PROVER_CONFIG = """\
# the stand-in prover's config (images/prover/prover.cpp reads it)
[prover]
memory_mib = {memory_mib}
partitions = {partitions}
partition_mib = {partition_mib}
synth_ms = {synth_ms}
gpu_ms = {gpu_ms}
jobs = {jobs}
start_delay_ms = {start_delay_ms}
ignore_sigterm = {ignore_sigterm}
child_hold_mib = {child_hold_mib}
child_linger_ms = {child_linger_ms}
"""


def prover_config(memory_mib: int = 32, jobs: int = 1, start_delay_ms: int = 0, ignore_sigterm: bool = False,
                  child_hold_mib: int = 0, child_linger_ms: int = 0, partitions: int = 2, partition_mib: int = 4,
                  synth_ms: int = 5, gpu_ms: int = 5, job_interval_ms: int = 0, status_listen: str = "",
                  listen: str = "") -> str:
    """The stand-in's config; `jobs = -1` with a `job_interval_ms` is its steady mode (a job, its proof, a
    pause, the next), `status_listen` serves cuzk's GET /status, `listen` takes proofs (as Curio sends them).
    Those lines only when given."""
    text = PROVER_CONFIG.format(
        memory_mib=memory_mib, jobs=jobs, start_delay_ms=start_delay_ms,
        ignore_sigterm=str(ignore_sigterm).lower(), child_hold_mib=child_hold_mib,
        child_linger_ms=child_linger_ms, partitions=partitions, partition_mib=partition_mib,
        synth_ms=synth_ms, gpu_ms=gpu_ms)
    text += f"job_interval_ms = {job_interval_ms}\n" if job_interval_ms else ""
    # under [daemon], where cuzk reads it (cuzk-core/src/config.rs:29-40), so what reads a cuzk config for it
    # (init --from, status's exposure) finds it; the stand-in reads its keys from any table
    daemon = "".join(f'{key} = "{value}"\n' for key, value in (("listen", listen), ("status_listen", status_listen))
                     if value)
    return text + (f"\n[daemon]\n{daemon}" if daemon else "")


# The sandbox's daemon proves steadily, fed by itself as a Curio with a pause between its tasks would feed it:
# a proof of about 1.7 s (4 partitions: 50 ms of synthesis, a busy CPU; 400 ms "on the GPU", a sleep), then
# 1 s with none in flight. A proof is in flight most of the time (a deploy's plan names it, a drain waits for
# it) and the drain finds its pause; the daemon costs about a tenth of one core.
def sandbox_config(status_port: int, listen: int = 0) -> str:
    """The sandbox daemon's cuzk.toml: steady proofs, its status on 127.0.0.1:`status_port`; with `listen`,
    no proofs of its own: it proves what a Curio node sends to 127.0.0.1:`listen` (sandbox_curio)."""
    return prover_config(memory_mib=256, jobs=0 if listen else -1, job_interval_ms=0 if listen else 1000,
                         partitions=4, partition_mib=32, synth_ms=50, gpu_ms=400,
                         status_listen=f"127.0.0.1:{status_port}", listen=f"127.0.0.1:{listen}" if listen else "")


def start_daemon(binary: Path, config: Path, log: Path, cwd: Path) -> int:
    """Starts the prover the way an engineer does by hand (`nohup ... &`); returns its pid once ready."""
    proc = subprocess.Popen([str(binary), "--config", str(config)], stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
    wait_ready(log, proc.poll)
    return proc.pid


def wait_ready(log: Path, exited: Callable[[], int | None], timeout: float = 30,
               lines: tuple[str, ...] = ("cuzk-daemon ready",)) -> None:
    """Until the daemon logs one of `lines` in `log`; BadInput when it exits first or never does."""
    deadline = time.monotonic() + timeout
    while not any(line in log.read_text(errors="replace") for line in lines):
        code = exited()
        if code is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-400:].strip().splitlines()[-1:]
            state = f"exited {code}" if code is not None else f"logged no {lines[0]!r} in {timeout:.0f} s"
            raise BadInput(f"the sandbox prover {state} ({' '.join(tail)}); see {log}")
        time.sleep(0.02)


def has_history(base: Path) -> bool:
    """The sandbox at `base` has been deployed to: its host holds releases and a journal."""
    return (base / "data" / ".swapctl").is_dir()


@dataclass(frozen=True)
class Up:
    """The sandbox's playbook, and what became of one the user had edited ("": none was)."""

    playbook: Path
    note: str = ""
    shared: str = ""  # why the host shares this machine's processes and sessions ("": it has its own)


MAX_HOSTS = 8
# cuzk's lines after a proof's self-check (engine.rs:529, 572-598): a kept host may run a build whose fail
FIRST_PROOF = ("PoRep proof self-check PASSED", "PoRep proof self-check FAILED")


def status_port(port: int, hosts: int = 1) -> int:
    """Where the sandbox daemons serve cuzk's GET /status: the port after the last sshd's (each host of
    several on its own loopback, in a network namespace of its own: sandbox_hosts)."""
    return port + hosts


def up(base: Path, port: int = 40612, fresh: bool = False, hosts: int = 1, curio: bool = False,
       sudo: bool = False, systemd: bool = False) -> Up:
    """Starts the sandbox (sshd + a hand-started prover that proves steadily, or `hosts` of them, a farm)
    and writes its playbook. A sandbox deployed to before keeps its hosts' data (releases, journal, the
    current build) unless `fresh`; a playbook the user has edited is never lost (write_playbook)."""
    from . import sandbox_curio, sandbox_hosts, sandbox_sudo, sandbox_systemd  # they build on this module's parts

    if not 1 <= hosts <= MAX_HOSTS:
        raise BadInput(f"--hosts must be 1 to {MAX_HOSTS}, not {hosts}")
    if curio and hosts != 1:
        raise BadInput("--curio takes one sandbox host (a farm of Curio nodes is the tests': docs/curio.md)")
    if systemd and (hosts != 1 or curio or sudo):
        raise BadInput("--systemd takes one sandbox host, without --curio or --sudo")
    down(base)
    base = base.resolve()
    taken = [] if systemd else [port + i for i in range(hosts)] + ([status_port(port)] if hosts == 1 else [])
    taken += [port + 2, port + 3] if curio else []  # the daemon's listen for the node, the node's own
    for p in taken:  # before anything of the old sandbox is removed
        if holder := sandbox_hosts.port_holder(p):
            raise Refused(f"port {p} is taken by {holder}: stop it, or pick another with --port "
                          f"(the sandbox uses {port} to {taken[-1]})")
    if (why := sandbox_hosts.isolation_fails()) and hosts > 1:
        raise Refused(f"--hosts {hosts} needs namespaces for each host (root, unshare): {why}")
    datas = [base / ("data-systemd" if systemd else "data"), *(base / f"data-{i}" for i in range(2, hosts + 1))]
    keep = [not fresh and (d / ".swapctl").is_dir() for d in datas]
    for child in base.iterdir() if base.exists() else ():
        if child in datas and keep[datas.index(child)] or child.name == "builds" and any(keep) \
                or child.name.startswith(PLAYBOOK_FILES) or _kept_host(child, fresh):
            continue
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    build_prover(base / "builds" / "prover-a", TIMING="1", TAG="a")
    build_prover(base / "builds" / "prover-b", TIMING="1", TAG="b", PINNED="1")
    for data, kept in zip(datas, keep, strict=True):
        data.mkdir(parents=True, exist_ok=True)
        if not kept:  # the first daemon: build A; a kept host starts what its binary path runs now
            shutil.copy(base / "builds" / "prover-a", data / "cuzk")
        # written each time: its status port follows --port (docs/guide.md says how to change its load)
        (data / "cuzk.toml").write_text(sandbox_config(status_port(port, hosts), port + 2 if curio else 0))
    keys = sandbox_sudo.make(base) if sudo else ""  # where that login's key goes: a file it can read
    if systemd:
        text = sandbox_systemd.start(base, datas[0], status_port(port))
    elif why:
        sandbox_hosts.up_one(base, port, keys)
    else:
        sandbox_hosts.start(base, port, datas, net=hosts > 1, more_keys=keys)
    if sudo:
        sandbox_sudo.authorize(base)
    if curio:  # the daemon is up: the node's first Prove finds it
        sandbox_curio.start(base, port + 2, port + 3)
    for data in datas:  # its first proof made (the SRS loaded): the first `status` shows a working daemon
        wait_ready(data / "cuzk.log", lambda: None, lines=FIRST_PROOF)
    if not systemd:  # one host: playbooks/sandbox.toml, the example people read, is the one it runs with
        text = examples.render("sandbox", SANDBOX=str(base), PORT=str(port), STATUS_PORT=str(status_port(port))) \
            if hosts == 1 else sandbox_hosts.playbook(base, port, hosts)
    text = sandbox_sudo.playbook(text) if sudo else text
    done = write_playbook(base, sandbox_curio.playbook(text, base, port + 3) if curio else text, fresh)
    why = "" if systemd else why  # the container is a host of its own
    return Up(done.playbook, done.note, shared=why and f"the sandbox host is not a host of its own ({why}): "
                                                   "other sessions and processes on this machine show as its own")


def _kept_host(child: Path, fresh: bool) -> bool:
    """A farm host's data with history, which a smaller sandbox leaves for a later `--hosts` to find."""
    return not fresh and re.fullmatch(r"data-(\d+|systemd)|data", child.name) is not None \
        and (child / ".swapctl").is_dir()


PLAYBOOK_FILES = ("swapctl.toml", ".swapctl.toml")  # the playbook, its record, the copies beside it


def write_playbook(base: Path, text: str, fresh: bool) -> Up:
    """The sandbox's playbook at base/swapctl.toml, unless the user has edited the one there (it is not what
    the sandbox last wrote, by the sha256 recorded beside it): then it is kept and the sandbox's own goes
    beside it as swapctl.toml.dist (dpkg's way with an edited conffile); with `fresh` it is first saved
    beside it as swapctl.toml.edited-<UTC time>, then replaced."""
    playbook, record = base / "swapctl.toml", base / ".swapctl.toml.sha256"
    written = record.read_text().strip() if record.is_file() else None
    ours = {hashlib.sha256(text.encode()).hexdigest(), written}
    edited = playbook.is_symlink() or playbook.exists() and _sha256(playbook) not in ours
    note = ""
    if edited and not fresh:
        (base / "swapctl.toml.dist").write_text(text)
        return Up(playbook, f"kept {playbook}: it was edited; the sandbox's own is {playbook}.dist "
                            f"(`sandbox up --fresh` saves yours beside it and writes the sandbox's)")
    if edited:
        saved = base / f"swapctl.toml.edited-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        if saved.exists() or saved.is_symlink():  # two --fresh runs in one second: the first copy is kept
            raise Refused(f"{saved} exists: move it away and run `sandbox up --fresh` again; {playbook} is kept")
        os.rename(playbook, saved)
        note = f"saved your edited playbook as {saved}; {playbook} is the sandbox's again"
    playbook.write_text(text)
    record.write_text(hashlib.sha256(text.encode()).hexdigest() + "\n")
    (base / "swapctl.toml.dist").unlink(missing_ok=True)
    return Up(playbook, note)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def down(base: Path, timeout: float = 10) -> None:
    """Stops the sandbox's sshd (each host's, with all that runs in its namespaces) and every process
    running from its data directory, and returns once they are gone (BadInput past `timeout`)."""
    from .sandbox_curio import stop as stop_curio
    from .sandbox_sudo import remove as remove_sudo
    from .sandbox_systemd import stop_recorded as stop_systemd

    stop_curio(base)
    remove_sudo(base)
    stop_systemd(base / "systemd")
    pids = []
    for pid_file in sorted(base.glob("sshd*/sshd.pid")):
        try:  # only a process of this sandbox: a pid file outlives a reboot, and its pid is reused
            pid = int(pid_file.read_text())
            if str(base.resolve()).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGTERM)
                pids.append(pid)
        except (OSError, ValueError):
            pass
    if (base / "data").exists():
        path = str((base / "data").resolve())
        found = subprocess.run(["pgrep", "-f", path], capture_output=True, text=True, check=False).stdout
        pids += [int(p) for p in found.split() if int(p) != os.getpid()]
        subprocess.run(["pkill", "-KILL", "-f", path], check=False)
    from .sandbox_hosts import wait_gone

    wait_gone(pids, timeout)
