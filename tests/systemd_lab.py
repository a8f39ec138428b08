"""A real systemd host for the tests: systemd 252 as PID 1 in a `systemd-nspawn -b` container, sshd inside.

The image is debootstrapped once into a cache directory (SWAPCTL_TEST_CACHE, else /var/cache/swapctl-test)
and reused while its recipe is unchanged; each instance boots it with `--volatile=overlay`, so its writes go
to a tmpfs and the image stays as built. Each instance gets its own network namespace (a veth link, as
NetnsLab's hosts), its own cgroups, its own ssh host key and a bind-mounted data directory.

What was found on this kind of machine (no host systemd, no system bus, cgroup v1 hybrid) and why the flags
are as they are: ../shared/systemd-lab.md.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from swapctl.remote.ssh import wait_for_banner
from swapctl.sandbox import SshServer, keygen

DEBIAN_MIRROR = os.environ.get("SWAPCTL_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ("systemd", "systemd-sysv", "openssh-server", "dbus", "iproute2", "procps", "zstd")
# Changing the recipe (packages, the steps in _finish) changes this, and the cached image is built anew.
RECIPE = f"bookworm minbase {','.join(PACKAGES)} v1"
TIMERS = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer")
CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))


def cache_dir() -> Path:
    return Path(os.environ.get("SWAPCTL_TEST_CACHE", "/var/cache/swapctl-test"))


def ensure_image() -> Path:
    """The booted image's root directory, debootstrapped the first time (about 45 s), reused after.
    A lock file makes test runs side by side build it once."""
    base = cache_dir()
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
        assert done.returncode == 0, f"debootstrap failed ({done.returncode}): {done.stderr[-2000:]}"
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


_COUNT = iter(range(1000))


class SystemdHost:
    """One booted container: systemd as PID 1, sshd on <net>.2:22 in its own network namespace.

    `data` (on this machine) is the container's /data. `server` is an SshServer for swapctl's playbooks and
    an engineer's `ssh` (`server.exec`); `systemctl(...)` runs systemctl inside over ssh."""

    def __init__(self, base: Path, client_key: Path, known_hosts: Path):
        n = next(_COUNT)
        self.name = f"swl{os.getpid() % 10000}x{n}"
        self.net = f"10.{32 + os.getpid() % 200}.{200 + n % 50}"
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.data = base / "data"
        self.data.mkdir(exist_ok=True)
        keygen(base / "host_key")
        self.server = SshServer(dir=base, address=f"{self.net}.2", port=22, client_key=client_key,
                                known_hosts=known_hosts, data=self.data)
        self.proc: subprocess.Popen | None = None
        self.cgroup = f"swapctl-lab/{self.name}"

    # -- life ----------------------------------------------------------------------------------------------

    def boot(self, image: Path, timeout: float = 60) -> None:
        """Boots the container and waits for sshd's banner, then trusts its key."""
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
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"systemd-nspawn exited {self.proc.returncode}: {self.nspawn_log()}"
            try:
                wait_for_banner(self.server.address, 22, timeout=1)
                break
            except Exception:
                assert time.monotonic() < deadline, f"no sshd in the container after {timeout} s: {self.nspawn_log()}"
        self.server.trust()
        # booted far enough for ssh is not booted: wait for systemd to finish the start-up jobs
        self.server.exec("systemctl is-system-running --wait >/dev/null || true")

    def nspawn_log(self) -> str:
        return (self.base / "nspawn.log").read_text(errors="replace")[-2000:]

    def leader(self) -> int | None:
        """The container's PID 1, as this machine numbers it: nspawn's child."""
        if self.proc is None:
            return None
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return None
        return int(kids[0]) if kids else None

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
        for root in CGROUP_ROOTS:
            _rmtree_cgroup(root / self.cgroup)
        subprocess.run(["ip", "link", "del", f"{self.name}h"], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", self.name], stderr=subprocess.DEVNULL)

    def _netns(self) -> None:
        ns, outer, inner, net = self.name, f"{self.name}h", "host0", self.net
        for cmd in (["ip", "netns", "add", ns], ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner],
                    ["ip", "link", "set", inner, "netns", ns], ["ip", "addr", "add", f"{net}.1/30", "dev", outer],
                    ["ip", "link", "set", outer, "up"],
                    ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{net}.2/30", "dev", inner],
                    ["ip", "netns", "exec", ns, "ip", "link", "set", inner, "up"],
                    ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]):
            subprocess.run(cmd, check=True)

    def _cgroups(self) -> list[Path]:
        """Its own cgroup in both hierarchies: nspawns started from one cgroup would share /payload."""
        dirs = []
        for root in CGROUP_ROOTS:
            if root.is_dir():
                d = root / self.cgroup
                d.mkdir(parents=True, exist_ok=True)
                dirs.append(d)
        return dirs

    # -- inside ------------------------------------------------------------------------------------------------

    def sh(self, script: str, check: bool = True) -> subprocess.CompletedProcess:
        """A shell script run inside over ssh, as an engineer would."""
        return self.server.exec(script, check=check)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.sh(f"systemctl show -p {','.join(props)} -- {unit}").stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def main_pid(self, unit: str) -> int:
        return int(self.show(unit, "MainPID")["MainPID"])


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
