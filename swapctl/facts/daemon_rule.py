"""Who counts as the daemon: a process that matches daemon.match is the daemon only if it runs (its
/proc/PID/exe) the binary, one of its releases or another file in the binary's directory (a build an engineer
started by hand beside it), as daemon.user, else as root or the binary's owner. Any user can start a program
whose command line matches, with an environment (LD_PRELOAD) of their own that a deploy would adopt and run as
root. Standard library only: `swapctl status` (facts/status.py) and the Ansible modules ask this one rule."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath


def daemon_rule(binary: str, binary_dir: str, owner: int | None, user: tuple[int, int] | None,
                has_user: bool) -> Callable[[str | None, int | None], bool]:
    """Whether a process running `exe` as effective `uid` is the daemon. `binary_dir`: the binary's directory
    with its links resolved ("": unknown); `owner`: the binary's uid; `has_user`: daemon.user is set, and
    `user` its ids on the host (None: the host has no such user, and nothing is the daemon)."""
    name, parent = PurePosixPath(binary).name, str(PurePosixPath(binary).parent)
    dirs = {binary_dir or parent, parent}
    releases = tuple(f"{d}/.swapctl/{name}/releases/" for d in dirs)
    uids = ({user[0]} if user else set()) if has_user else {0} | ({owner} if owner is not None else set())

    def is_it(exe: str | None, uid: int | None) -> bool:
        if exe is None or "/.." in exe:
            return False
        return (str(PurePosixPath(exe).parent) in dirs or exe.startswith(releases)) and uid in uids

    return is_it
