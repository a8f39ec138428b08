#!/usr/bin/env python3
"""Upload time and bytes on the wire: swapctl against OpenSSH scp and rsync over ssh, in one run.

The payload is a real ELF from an installed package (/usr/sbin/dockerd from docker.io by default, 75 MB)
and a "rebuilt" copy of it: a few hundred bytes changed and a 4 KiB insertion. Two links to a real sshd:
loopback, and a network namespace behind a veth shaped to 100 Mbit/s with `tc ... tbf`.
swapctl's times are its upload step as a deploy runs it (on the connection its preflight opened, under
the host's lock; its host side was started beside the lock): sending, the host's sha256 check and the
install. scp's and rsync's include their own connection. "again *" is the whole decision: connection,
preflight and the finding that the host has it; "fresh *" and "rebuilt *" are connection, preflight
(during which the first frames or the patch are being made), lock and upload.
Each figure is the median of --runs runs.
Usage: python3 benchmarks/upload.py [--elf PATH] [--runs N]   (root; needs sshd, scp, rsync, zstd, tc)
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from swapctl.playbook import parse  # noqa: E402
from swapctl.remote import connect  # noqa: E402
from swapctl.sandbox import make_server  # noqa: E402
from swapctl.swap.deploy import Swap  # noqa: E402
from swapctl.swap.upload import Cache  # noqa: E402

from lab import NetnsLab  # noqa: E402

RATE = "100mbit"


def pick_elf() -> Path:
    for candidate in ("/usr/sbin/dockerd", "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1"):
        if Path(candidate).is_file() and Path(candidate).stat().st_size >= 50e6:
            return Path(candidate)
    sys.exit("no ELF of 50 MB or more from a package here: apt-get install docker.io, or pass --elf")


def rebuild(src: Path, dest: Path) -> None:
    data = bytearray(src.read_bytes())
    rng = random.Random(1)
    for _ in range(300):
        data[rng.randrange(len(data))] ^= 0xFF
    at = len(data) // 3
    data[at:at] = rng.randbytes(4096)
    dest.write_bytes(bytes(data))
    dest.chmod(0o755)


def ssh_opts(server) -> list[str]:
    return ["-i", str(server.client_key), "-o", f"UserKnownHostsFile={server.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"]


def timed(argv: list[str]) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def by_scp(server, src: Path, dest: str) -> tuple[float, int]:
    secs, _ = timed(["scp", "-q", "-P", str(server.port), *ssh_opts(server), str(src), f"root@{server.address}:{dest}"])
    return secs, src.stat().st_size


def by_rsync(server, src: Path, dest: str, *flags: str) -> tuple[float, int]:
    ssh = " ".join(["ssh", "-p", str(server.port), *ssh_opts(server)])
    secs, out = timed(["rsync", "--stats", *flags, "-e", ssh, str(src), f"root@{server.address}:{dest}"])
    sent = int(re.search(r"Total bytes sent: ([\d,.]+)", out).group(1).replace(",", "").replace(".", ""))
    return secs, sent


class Swapctl:
    """swapctl's upload step as a deploy runs it: on the connection its preflight opened, under the lock."""

    def __init__(self, server, data: Path, cache: Path):
        self.book = parse(server.playbook(daemon={"binary": str(data / "cuzk"), "args": [], "match": "^$nothing",
                                                   "log": str(data / "cuzk.log")}))
        self.cache = cache

    def __call__(self, src: Path, whole: bool = False) -> tuple[float, int]:
        """Seconds of the upload step (with `whole`: connection, preflight and upload) and bytes sent."""
        os.environ["XDG_CACHE_HOME"] = str(self.cache)
        t = time.perf_counter()
        with connect(self.book.hosts["lab"]) as host:
            sw = Swap(host, self.book)
            plan = sw.plan(str(src))
            sw.prepare_upload(plan)  # as deploy does: the host side's shell starts beside the lock's
            sw.lock()
            try:
                if not whole:
                    t = time.perf_counter()
                sent = sw.upload(plan)
                secs = time.perf_counter() - t
                Cache().add(str(src), plan.new.sha256)  # as deploy does, after the upload
            finally:
                sw.unlock()
        return secs, sent.wire_bytes


def median_of(runs: int, fn, reset=None) -> tuple[float, int]:
    results = []
    for _ in range(runs):
        if reset:
            reset()
        results.append(fn())
    return statistics.median(r[0] for r in results), int(statistics.median(r[1] for r in results))


def measure(server, base: Path, elf: Path, new: Path, runs: int) -> dict:
    data = server.data
    remote = str(data / "target")
    cache = base / "cache"

    def clean() -> None:
        for p in (data / ".swapctl", cache, data / "target"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)

    sw = Swapctl(server, data, cache)
    r = {}
    r["scp fresh"] = median_of(runs, lambda: by_scp(server, elf, remote), clean)
    r["rsync -z fresh"] = median_of(runs, lambda: by_rsync(server, elf, remote, "-z"), clean)
    r["swapctl fresh"] = median_of(runs, lambda: sw(elf), clean)
    r["swapctl fresh *"] = median_of(runs, lambda: sw(elf, whole=True), clean)
    r["swapctl again *"] = median_of(runs, lambda: sw(elf, whole=True))
    r["swapctl rebuilt"] = median_of(runs, lambda: sw(new), lambda: (clean(), sw(elf)))
    r["swapctl rebuilt *"] = median_of(runs, lambda: sw(new, whole=True), lambda: (clean(), sw(elf)))

    def rsync_over_old() -> tuple[float, int]:
        return by_rsync(server, new, remote)

    r["rsync rebuilt"] = median_of(runs, rsync_over_old, lambda: (clean(), shutil.copy(elf, remote)))
    clean()
    return r


def report(name: str, r: dict) -> None:
    print(f"\n{name}")
    print(f"  {'method':<18} {'seconds':>8} {'MB on wire':>11}")
    for k, (secs, wire) in r.items():
        print(f"  {k:<18} {secs:>8.2f} {wire / 1e6:>11.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elf", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    elf = args.elf or pick_elf()
    base = Path(tempfile.mkdtemp(prefix="swapctl-upload-"))
    new = base / "rebuilt"
    rebuild(elf, new)
    print(f"payload: {elf} ({elf.stat().st_size / 1e6:.1f} MB); rebuilt: 300 bytes changed, 4 KiB inserted")

    loop = make_server(base / "loopback")
    loop.start()
    loop.trust()
    (base / "netns").mkdir()
    lab = NetnsLab(base / "netns", 1, prefix="swu")
    try:
        local = measure(loop, base / "l", elf, new, args.runs)
        server = lab.servers[0]
        server.wrap = ["ip", "netns", "exec", server.netns]  # a plain host: no own /data needed here
        lab.start()
        subprocess.run(["tc", "qdisc", "add", "dev", f"{server.netns}h", "root", "tbf", "rate", RATE,
                        "burst", "256kb", "latency", "100ms"], check=True)
        far = measure(server, base / "n", elf, new, args.runs)
    finally:
        loop.stop()
        lab.close()
        shutil.rmtree(base, ignore_errors=True)

    report("loopback", local)
    report(f"{RATE}/s link (veth + tbf)", far)
    goals = [
        ("loopback fresh: swapctl <= 1.0x scp", local["swapctl fresh"][0] / local["scp fresh"][0], 1.0),
        (f"{RATE} fresh: swapctl <= 0.4x scp", far["swapctl fresh"][0] / far["scp fresh"][0], 0.4),
        (f"{RATE} rebuilt: wire <= 0.1x rsync", far["swapctl rebuilt"][1] / far["rsync rebuilt"][1], 0.1),
        (f"{RATE} rebuilt: time <= 1.0x rsync", far["swapctl rebuilt"][0] / far["rsync rebuilt"][0], 1.0),
    ]
    print("\ngoals (ratios against the reference tool, same run)")
    for what, ratio, limit in goals:
        print(f"  {what:<40} {ratio:6.3f}x  {'ok' if ratio <= limit else 'MISSED'}")
    again = far["swapctl again *"]
    ok = again[1] == 0 and again[0] < 1.0
    print(f"  {'same binary again: 0 bytes, < 1 s':<40} {again[0]:6.3f} s, {again[1]} B  {'ok' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
