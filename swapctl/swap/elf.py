"""Checks that a local binary can run on a host before anything is uploaded."""

from __future__ import annotations

import hashlib
import os
import platform
import select
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..errors import BadInput

# e_machine -> what `uname -m` prints on such a host
MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_386": "i686", "EM_PPC64": "ppc64le",
            "EM_RISCV": "riscv64", "EM_S390": "s390x"}


@dataclass(frozen=True)
class LocalBinary:
    path: str
    sha256: str
    size: int
    arch: str
    says: str | None = None  # what it says of itself: its `--version` line, where it answers (says_of_itself)


def inspect(path: str) -> LocalBinary:
    """Reads the ELF header and sha256 of a local binary; bad input names the file and the fix. Read once per
    version of the file (its inode, size, mode, mtime and ctime): a fleet's preview pass and each host's
    plan all ask, and hashing a 300 MB binary again for each of 16 hosts is seconds of the controller's CPU."""
    key = _version(path)
    if key is not None and key in _SEEN:
        return replace(_SEEN[key], path=path)
    binary = _read(path)
    if key is not None and _version(path) == key:  # not changed while it was read
        _SEEN[key] = binary
    return binary


_SEEN: dict[tuple[int, ...], LocalBinary] = {}


def _version(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns


def _read(path: str) -> LocalBinary:
    try:
        with open(path, "rb") as f:
            try:
                elf = ELFFile(f)
                machine = elf["e_machine"]
                kind = elf["e_type"]
            except ELFError:
                raise BadInput(f"{path} is not an ELF executable (is it a script, or the wrong file?)") from None
            f.seek(0)
            digest = hashlib.sha256()
            size = 0
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file; pass the binary to deploy with --binary") from None
    except IsADirectoryError:
        raise BadInput(f"{path} is a directory; pass the binary itself with --binary") from None
    if kind not in ("ET_EXEC", "ET_DYN"):
        raise BadInput(f"{path} is an ELF {kind}, not an executable")
    if not os.access(path, os.X_OK):
        raise BadInput(f"{path} is not executable; `chmod +x {path}` if it is the right file")
    arch = MACHINES.get(machine, machine)
    return LocalBinary(path=path, sha256=digest.hexdigest(), size=size, arch=arch, says=says_of_itself(path, arch))


VERSION_TIMEOUT_S = 3.0


def _read_some(fd: int, timeout: float, limit: int = 4096) -> tuple[bytes, float]:
    """Up to `limit` bytes from `fd` until its end or `timeout`; and the seconds it took."""
    began, out = time.monotonic(), b""
    while len(out) < limit and (left := timeout - (time.monotonic() - began)) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        piece = os.read(fd, limit - len(out))
        if not piece:
            break
        out += piece
    return out, time.monotonic() - began


def says_of_itself(path: str, arch: str) -> str | None:
    """The first line `PATH --version` prints, where the build answers (exit 0 within 3 s, a printable line
    of at most 120 characters); None where it does not: cuzk-daemon's clap command has no version
    (cuzk-daemon/src/main.rs:17-18) and refuses the flag. Run here, on the controller, for a binary of this
    machine's kind only, not on the host, where a second process beside a 400 GB daemon is not free (unless
    the controller is the host): in an empty directory, with no input, an environment of PATH alone and 4 KiB
    of its output read, in a process group of its own that is killed at the limit (a build that ignores the
    flag and starts proving is gone in 3 s; one that leaves that group is not)."""
    if arch != platform.machine():
        return None
    with tempfile.TemporaryDirectory(prefix="swapctl-version-") as cwd:
        try:
            proc = subprocess.Popen([os.path.abspath(path), "--version"], cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={"PATH": os.defpath},
                                    start_new_session=True)
        except OSError:
            return None
        assert proc.stdout is not None
        with proc.stdout:
            got = _read_some(proc.stdout.fileno(), VERSION_TIMEOUT_S)  # 4 KiB at most: an endless answer is none
        try:
            proc.wait(max(0.0, VERSION_TIMEOUT_S - got[1]))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None
    out = got[0]
    line = out.decode("utf-8", "replace").split("\n", 1)[0].strip()
    if proc.returncode != 0 or not line or len(line) > 120 or not line.isprintable():
        return None
    return line


def check_arch(binary: LocalBinary, host_arch: str, host: str) -> None:
    if binary.arch != host_arch:
        raise BadInput(f"{binary.path} is an {binary.arch} binary, the host is {host_arch} "
                       f"(rebuild for linux/{'amd64' if host_arch == 'x86_64' else 'arm64'})", host=host)
