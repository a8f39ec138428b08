"""The tests' systemd host: the sandbox's (swapctl/sandbox_systemd.py), a booted `systemd-nspawn -b` container
with systemd 252 as PID 1 and sshd inside, named and numbered per test process so runs side by side never
meet. The image is cached in SWAPCTL_TEST_CACHE, else /var/cache/swapctl-test.

What was found on this kind of machine (no host systemd, no system bus, cgroup v1 hybrid) and why the flags
are as they are: docs/contributing.md, "The systemd host"."""

from __future__ import annotations

import os
from pathlib import Path

from swapctl import sandbox_systemd
from swapctl.sandbox_systemd import CGROUP_ROOTS, RECIPE  # noqa: F401  (what the tests read of the image)


def cache_dir() -> Path:
    return Path(os.environ.get("SWAPCTL_TEST_CACHE", "/var/cache/swapctl-test"))


def ensure_image() -> Path:
    return sandbox_systemd.ensure_image(cache_dir())


_COUNT = iter(range(1000))


class SystemdHost(sandbox_systemd.SystemdHost):
    """One test process's container: swl<pid>x<n> on 10.<32 + pid % 200>.<200 + n % 50>.0/30."""

    def __init__(self, base: Path, client_key: Path, known_hosts: Path):
        n = next(_COUNT)
        super().__init__(base, client_key, known_hosts, name=f"swl{os.getpid() % 10000}x{n}",
                         net=f"10.{32 + os.getpid() % 200}.{200 + n % 50}")

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.sh(f"systemctl show -p {','.join(props)} -- {unit}").stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def main_pid(self, unit: str) -> int:
        return int(self.show(unit, "MainPID")["MainPID"])
