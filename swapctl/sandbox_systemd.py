"""The sandbox host with systemd (`sandbox up --systemd`): its daemon a unit, as on most production boxes.

A real systemd as PID 1 in a `systemd-nspawn -b` container: Debian bookworm, debootstrapped once into a cache
directory (SWAPCTL_IMAGE_CACHE, else /var/cache/swapctl; about 45 s) and reused while its recipe is unchanged;
booted with `--volatile=overlay`, so its writes go to a tmpfs and the image stays as built. It has its own
network namespace (a veth link; sshd inside on <net>.2:22), its own cgroups, its own ssh host key and the
sandbox's data directory bind-mounted at /data, where the stand-in prover runs as cuzk.service. The tests'
systemd host (tests/systemd_lab.py) is this one. Needs root, systemd-nspawn (Debian: systemd-container) and
debootstrap. What was found on machines with no host systemd and cgroup v1 hybrid, and why the flags are as
they are: docs/contributing.md, "The systemd host"."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .errors import Refused
from .remote.ssh import wait_for_banner
from .sandbox import SshServer, keygen

DEBIAN_MIRROR = os.environ.get("SWAPCTL_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ("systemd", "systemd-sysv", "openssh-server", "dbus", "iproute2", "procps", "zstd")
# Changing the recipe (packages, the steps in _finish) changes this, and the cached image is built anew.
RECIPE = f"bookworm minbase {','.join(PACKAGES)} v1"
TIMERS = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer")
CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))


def cache_dir() -> Path:
    return Path(os.environ.get("SWAPCTL_IMAGE_CACHE", "/var/cache/swapctl"))


def needs() -> str:
    """What this machine lacks for a systemd host ("": nothing)."""
    if os.geteuid() != 0:
        return "root (systemd-nspawn, network namespaces)"
    for tool, package in (("systemd-nspawn", "systemd-container"), ("debootstrap", "debootstrap"), ("ip", "iproute2")):
        if not shutil.which(tool):
            return f"{tool} (Debian: apt-get install {package})"
    return ""


def ensure_image(base: Path | None = None) -> Path:
    """The booted image's root directory, debootstrapped the first time (about 45 s), reused after.
    A lock file makes runs side by side build it once."""
    base = base or cache_dir()
    base.mkdir(parents=True, exist_ok=True)
    root, stamp = base / "systemd-bookworm", base / "systemd-bookworm.recipe"
    with open(base / "systemd-bookworm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if root.is_dir() and stamp.exists() and stamp.read_text() == RECIPE:
            return root
        for old in (root, base / "systemd-bookworm.new"):
            shutil.rmtree(old, ignore_errors=True)
        stamp.unlink(missing_ok=True)
        new = base / "systemd-bookworm.new"
        done = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", "bookworm",
                               str(new), DEBIAN_MIRROR], capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            raise Refused(f"debootstrap of the systemd host's image into {new} failed ({done.returncode}): {last}")
        _finish(new)
        new.rename(root)
        stamp.write_text(RECIPE)
        return root


def _finish(root: Path) -> None:
    """What the image needs beyond debootstrap: a machine id per boot, no timers that run apt, sshd with
    the one host key each instance binds in, and no host keys of its own."""
    (root / "etc/machine-id").write_text("")
    dbus_id = root / "var/lib/dbus/machine-id"
    dbus_id.parent.mkdir(parents=True, exist_ok=True)
    dbus_id.unlink(missing_ok=True)
    dbus_id.symlink_to("/etc/machine-id")
    for timer in TIMERS:
        link = root / "etc/systemd/system" / timer
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/ssh/sshd_config.d/swapctl-lab.conf").write_text(
        "HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "MaxStartups 200:30:400\nMaxSessions 100\n")
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    # the serial console getty: nothing logs in there, and --console=passive leaves it nothing to talk to
    getty = root / "etc/systemd/system/console-getty.service"
    getty.unlink(missing_ok=True)
    getty.symlink_to("/dev/null")


class SystemdHost:
    """One booted container: systemd as PID 1, sshd on <net>.2:22 in its own network namespace `name`.

    `data` (on this machine) is the container's /data. `server` is an SshServer for swapctl's playbooks and
    an engineer's `ssh` (`server.exec`). Its name and network are recorded in `base`/host.json, so that a
    later process (`sandbox down`) can end it."""

    def __init__(self, base: Path, client_key: Path, known_hosts: Path, name: str, net: str,
                 data: Path | None = None):
        self.name, self.net, self.base = name, net, base
        base.mkdir(parents=True, exist_ok=True)
        self.data = data or base / "data"
        self.data.mkdir(exist_ok=True)
        if not (base / "host_key").exists():
            keygen(base / "host_key")
        self.server = SshServer(dir=base, address=f"{net}.2", port=22, client_key=client_key,
                                known_hosts=known_hosts, data=self.data)
        self.proc: subprocess.Popen[bytes] | None = None
        self.cgroup = f"swapctl-lab/{name}"
        self.made = False  # its network and cgroups are this instance's, for close() to remove

    def boot(self, image: Path, timeout: float = 60) -> None:
        """Boots the container and waits for sshd's banner, then trusts its key."""
        if Path(f"/run/netns/{self.name}").exists():
            raise Refused(f"a systemd host named {self.name} runs already (network namespace /run/netns/"
                          f"{self.name}): `swapctl sandbox down` in the sandbox that started it")
        self.made = True  # from here on what exists of its network is this instance's
        self._netns()
        cgroups = self._cgroups()

        def own_cgroup() -> None:  # in the child, before exec: nspawn's /payload is then its own
            for d in cgroups:
                (d / "cgroup.procs").write_text("0")

        key = self.base / "host_key"
        argv = ["systemd-nspawn", "-b", "-q", "--register=no", "--keep-unit", "--console=passive",
                "--volatile=overlay", f"--machine={self.name}", f"--directory={image}",
                f"--network-namespace-path=/run/netns/{self.name}",
                f"--bind-ro={self.server.client_key}.pub:/root/.ssh/authorized_keys",
                f"--bind-ro={key}:/etc/ssh/ssh_host_ed25519_key",
                f"--bind-ro={key}.pub:/etc/ssh/ssh_host_ed25519_key.pub",
                f"--bind={self.data}:/data"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=open(self.base / "nspawn.log", "ab"),
                                     stderr=subprocess.STDOUT, preexec_fn=own_cgroup, start_new_session=True)
        (self.base / "host.json").write_text(json.dumps({"name": self.name, "net": self.net, "pid": self.proc.pid}))
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise Refused(f"systemd-nspawn exited {self.proc.returncode}: {self.nspawn_log()[-300:]}")
            try:
                wait_for_banner(self.server.address, 22, timeout=1)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise Refused(f"no sshd in the systemd host after {timeout:g} s (see "
                                  f"{self.base}/nspawn.log)") from None
        self.server.trust()
        # booted far enough for ssh is not booted: wait for systemd to finish the start-up jobs
        self.server.exec("systemctl is-system-running --wait >/dev/null || true")

    def nspawn_log(self) -> str:
        return (self.base / "nspawn.log").read_text(errors="replace")[-2000:]

    def leader(self) -> int | None:
        """The container's PID 1, as this machine numbers it: nspawn's child."""
        return _leader(self.proc.pid) if self.proc is not None else None

    def close(self) -> None:
        """A clean poweroff (SIGTERM to nspawn, about 2 s); SIGKILL leaves the container running, so its
        PID 1 is killed when that does not end it. Then its cgroups and network go."""
        if self.proc is not None and self.proc.poll() is None:
            leader = self.leader()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                if leader:
                    os.kill(leader, signal.SIGKILL)
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        if self.made:  # never another instance's of the same name, which a refused boot() found running
            _remove(self.name, self.cgroup)
            self.made = False

    def _netns(self) -> None:
        ns, outer, inner, net = self.name, f"{self.name}h", "host0", self.net
        for cmd in (["ip", "netns", "add", ns], ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner],
                    ["ip", "link", "set", inner, "netns", ns], ["ip", "addr", "add", f"{net}.1/30", "dev", outer],
                    ["ip", "link", "set", outer, "up"],
                    ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{net}.2/30", "dev", inner],
                    ["ip", "netns", "exec", ns, "ip", "link", "set", inner, "up"],
                    ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]):
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise Refused(f"`{' '.join(cmd)}` failed: {done.stderr.strip() or done.returncode}")

    def _cgroups(self) -> list[Path]:
        """Its own cgroup in both hierarchies: nspawns started from one cgroup would share /payload."""
        dirs = []
        for root in CGROUP_ROOTS:
            if root.is_dir():
                d = root / self.cgroup
                d.mkdir(parents=True, exist_ok=True)
                dirs.append(d)
        return dirs

    def sh(self, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A shell script run inside over ssh, as an engineer would."""
        return self.server.exec(script, check=check)


def _leader(nspawn: int) -> int | None:
    try:
        kids = Path(f"/proc/{nspawn}/task/{nspawn}/children").read_text().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def stop_recorded(base: Path, timeout: float = 20) -> None:
    """Ends the systemd host `base`/host.json records (a `sandbox up --systemd` of an earlier process): nspawn
    told to power off, its PID 1 killed if that does not end it, its cgroups and network removed."""
    try:
        rec = json.loads((base / "host.json").read_text())
        name, pid = str(rec["name"]), int(rec["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    try:  # only that nspawn: a pid outlives a reboot, and is reused
        alive = f"--machine={name}".encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        alive = False
    if not alive and _running(name):
        (base / "host.json").unlink(missing_ok=True)  # a stale record: that name is another sandbox's now
        return
    if alive:
        leader = _leader(pid)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        for p in (leader, pid):
            if p and Path(f"/proc/{p}").exists():
                os.kill(p, signal.SIGKILL)
    _remove(name, f"swapctl-lab/{name}")
    (base / "host.json").unlink(missing_ok=True)


def _running(name: str) -> bool:
    """Whether some systemd-nspawn runs the machine `name`."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if words and words[0].endswith(b"systemd-nspawn") and f"--machine={name}".encode() in words:
            return True
    return False


def _remove(name: str, cgroup: str) -> None:
    for root in CGROUP_ROOTS:
        _rmtree_cgroup(root / cgroup)
    subprocess.run(["ip", "link", "del", f"{name}h"], stderr=subprocess.DEVNULL, check=False)
    subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL, check=False)


def _rmtree_cgroup(d: Path) -> None:
    """A cgroup directory and those below it, leaves first (rmdir is the only way to remove one)."""
    if not d.is_dir():
        return
    for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            sub.rmdir()
        except OSError:
            pass
    try:
        d.rmdir()
    except OSError:
        pass


# `sandbox up --systemd`: one host, its name and network fixed (a second sandbox with systemd is refused at
# boot, naming the first), its daemon the stand-in prover as cuzk.service, its output appended to /data
NAME, NET = "swapctl-sbx", "10.254.254"  # NAME + "h", the veth here, within 15 characters
UNIT = """[Unit]
Description=the sandbox's stand-in cuzk (swapctl sandbox up --systemd)
[Service]
ExecStart=/data/cuzk --config /data/cuzk.toml
WorkingDirectory=/data
Restart=on-failure
RestartSec=1
StandardOutput=append:/data/cuzk.log
StandardError=append:/data/cuzk.log
"""
PLAYBOOK = """# The local sandbox with systemd (`swapctl sandbox up --systemd`): a systemd-nspawn container booted with
# systemd as PID 1 (docs/contributing.md, "The systemd host"), sshd inside on {net}.2:22, the sandbox's data
# directory at /data and the stand-in prover run by cuzk.service, as a production box runs cuzk (the
# `systemd` example: `swapctl init --example systemd`). Every stop and start goes through the unit.
#   swapctl status sandbox              the unit too: its state, MainPID, restarts, file
#   swapctl deploy sandbox --binary {base}/builds/prover-b --yes
#   swapctl rollback sandbox --yes
#   swapctl sandbox down                powers the container off

[hosts.sandbox]
address = "{net}.2"
user = "root"
identity_file = "{base}/sshd/client_key"   # made by `sandbox up`; the container accepts only this key
known_hosts = "{base}/sshd/known_hosts"    # the container's host key, recorded at boot

[daemon]
unit = "cuzk.service"              # ExecStart=/data/cuzk --config /data/cuzk.toml
binary = "/data/cuzk"              # what ExecStart runs: a deploy makes it a symlink to the new release
match = "^/data/cuzk( |$)"
log = "/data/cuzk.log"             # the unit's StandardOutput=append:
ready_timeout_s = 60
stop_grace_s = 10
status_url = "http://127.0.0.1:{status}/status"   # its status_listen, read inside the container
stop = "drain"                     # wait for the proof in flight, then SIGINT, then `systemctl stop`
drain_timeout_s = 30

[memory]
min_available_gib = 1              # the stand-in holds 256 MiB
release_timeout_s = 60

[logs]
paths = ["/data/*.log"]
"""


def start(base: Path, data: Path, status_port: int) -> str:
    """Boots the sandbox's systemd host with `data` at /data (its cuzk and cuzk.toml in place), starts
    cuzk.service there, and returns the playbook for it."""
    if why := needs():
        raise Refused(f"--systemd boots a systemd container: this machine lacks {why}")
    keys = base / "sshd"
    keys.mkdir(parents=True, exist_ok=True)
    if not (keys / "client_key").exists():
        keygen(keys / "client_key")
    (keys / "known_hosts").write_text("")  # the container's key is recorded anew at each boot
    host = SystemdHost(base / "systemd", keys / "client_key", keys / "known_hosts", NAME, NET, data=data)
    try:
        host.boot(ensure_image())
        (data / "cuzk.service").write_text(UNIT)
        host.sh("cp /data/cuzk.service /etc/systemd/system/cuzk.service && systemctl daemon-reload && "
                "systemctl start cuzk.service")
    except BaseException:
        host.close()
        raise
    return PLAYBOOK.format(net=NET, base=base, status=status_port)
