#!/usr/bin/env python3
"""become = "sudo": what running every command through `sudo -n` costs, against the same login without it.

The same user logs in to the same sshd both ways, so its shell start-up (a .bashrc) falls on both alike;
a root login would compare .bashrc files, not sudo. Two ratios, each the median of --pairs interleaved
pairs (one of each back to back, so load on a shared machine falls on both alike):
- one trivial command (`true`) on an open connection, with become = "sudo" against without: sudo's own
  start (its policy, PAM session, log line) per command;
- a whole `swapctl status HOST` process (connect, with sudo also the `sudo -n true` check, the status
  script), with against without (without, it reads less: other users' /proc entries are closed to it).
It makes a real user with a NOPASSWD rule for the run and removes both at the end. Needs root, sshd, sudo.
Usage: python3 benchmarks/sudo.py [--pairs N] [--commands N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from swapctl.playbook import HostSpec  # noqa: E402
from swapctl.remote import Cmd, connect  # noqa: E402
from swapctl.remote.become import rule  # noqa: E402
from swapctl.sandbox import make_server  # noqa: E402


def add_user(name: str, key: Path, rules: Path) -> None:
    subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True)
    subprocess.run(["usermod", "-p", "*", name], check=True)
    ssh = Path(f"/home/{name}/.ssh")
    ssh.mkdir(mode=0o700)
    shutil.copy(f"{key}.pub", ssh / "authorized_keys")
    subprocess.run(["chown", "-R", f"{name}:{name}", str(ssh)], check=True)
    rules.write_text(rule(name) + "\n")
    rules.chmod(0o440)


def per_command(spec: HostSpec, n: int) -> float:
    """Seconds per `true` over one open connection (the connection and its checks not counted)."""
    with connect(spec) as host:
        host.run(Cmd("true"))
        t = time.perf_counter()
        for _ in range(n):
            host.run(Cmd("true"))
        return (time.perf_counter() - t) / n


def status_run(book: Path) -> float:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "swapctl", "status", "lab", "-p", str(book)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"swapctl status failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - t


def row(name: str, t: list[float], ref: list[float]) -> str:
    ratio = statistics.median(x / y for x, y in zip(t, ref, strict=True))
    return (f"{name:<28} sudo {statistics.median(t) * 1000:7.1f} ms   without {statistics.median(ref) * 1000:7.1f} ms"
            f"   {ratio:5.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--commands", type=int, default=50, help="commands per per-command sample")
    args = ap.parse_args()
    user = f"swbench{os.getpid() % 100000}"
    rules = Path(f"/etc/sudoers.d/swapctl-bench-{os.getpid()}")
    with tempfile.TemporaryDirectory() as tmp:
        server = make_server(Path(tmp) / "host")
        server.home_keys = True
        add_user(user, server.client_key, rules)
        try:
            server.start()
            server.trust()
            base = dict(name="lab", address=server.address, port=server.port, identity_file=str(server.client_key),
                        known_hosts=str(server.known_hosts))
            plain, as_sudo = HostSpec(**base, user=user), HostSpec(**base, user=user, become="sudo")
            books = {}
            for who, host in (("plain", {"user": user}), ("sudo", {"user": user, "become": "sudo"})):
                books[who] = Path(tmp) / f"{who}.toml"
                books[who].write_text(server.playbook(host=host, daemon={"binary": "/data/none/cuzk"}))
            cmd_s, cmd_r, st_s, st_r = [], [], [], []
            status_run(books["sudo"]), status_run(books["plain"])  # warm sshd and the page cache; not counted
            for _ in range(args.pairs):
                cmd_s.append(per_command(as_sudo, args.commands))
                cmd_r.append(per_command(plain, args.commands))
                st_s.append(status_run(books["sudo"]))
                st_r.append(status_run(books["plain"]))
            print(f"loopback sshd, {args.pairs} pairs, {args.commands} commands a sample")
            print(row("one command (true)", cmd_s, cmd_r))
            print(row("swapctl status (process)", st_s, st_r))
        finally:
            server.stop()
            rules.unlink(missing_ok=True)
            subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
            subprocess.run(["userdel", "-r", user], capture_output=True)


if __name__ == "__main__":
    main()
