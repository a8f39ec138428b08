"""Checks that a local binary can run on a host before anything is uploaded."""

from __future__ import annotations

import hashlib
import os
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
    return LocalBinary(path=path, sha256=digest.hexdigest(), size=size, arch=MACHINES.get(machine, machine))


def check_arch(binary: LocalBinary, host_arch: str, host: str) -> None:
    if binary.arch != host_arch:
        raise BadInput(f"{binary.path} is an {binary.arch} binary, the host is {host_arch} "
                       f"(rebuild for linux/{'amd64' if host_arch == 'x86_64' else 'arm64'})", host=host)
