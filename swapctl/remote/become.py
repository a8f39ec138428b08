"""Becoming root on a host whose login is not root (`become = "sudo"`): every command through `sudo -n`.

SshHost renders every channel's command line through `as_root` and nothing else, so the swap scripts, the
lock, the uploads, status, fetch-logs and the ending of a command swapctl stopped waiting for all run as
root alike, and what they make (releases, the state directory, the lock) belongs to root. `-n`: sudo never
prompts. Each connection's first command is `sudo -n true`: a sudo that would ask for a password refuses
the host there (exit 3, `refusal`), before anything on it changed.

What travels on a command's stdin passes through sudo byte for byte: without a terminal sudo hands the
command its own stdin (Debian's `Defaults use_pty` takes effect only where sudo runs in a terminal, and
swapctl's channels have none). sudo logs each command line (syslog's auth facility, or its `logfile`):
so a value that must stay secret travels on stdin, never in the argv this wraps.
"""

from __future__ import annotations

import shlex

from ..errors import Refused
from .cmd import Cmd

SUDO = ("sudo", "-n", "--")
PROBE = Cmd("sudo", "-n", "true", label="sudo-check")  # within twice the connect timeout


def as_root(cmd: Cmd) -> str:
    """The line that runs `cmd` as root through sudo, never asking for a password. Only the line changes:
    what the command gets on stdin, and how it is shown and named in errors, stay `cmd`'s own."""
    return f"{shlex.join(SUDO)} {cmd.render()}"


def rule(user: str) -> str:
    """The sudoers line that lets `user` run swapctl's commands: they are shell scripts, so a narrower rule
    would grant no less."""
    return f"{user} ALL=(root) NOPASSWD: ALL"


def refusal(host: str, user: str, code: int, stderr: str) -> Refused | None:
    """Why `sudo -n true` failed for `user`, as one line saying what to do; None when it did not fail."""
    if code == 0:
        return None
    said = stderr.strip().splitlines()[-1:] or [f"exit {code}"]
    fix = f"`{rule(user)}` in /etc/sudoers.d/swapctl (write it with `visudo -f`)"
    if "password is required" in stderr:
        why = f"sudo asks {user} for a password; give {user} a NOPASSWD rule, {fix}, or log in as root"
    elif code == 127 or "not found" in stderr:
        why = ("become = \"sudo\", but the host has no sudo; install it (`apt-get install sudo`) and give "
               f"{user} {fix}, or log in as root")
    elif "terminal is required" in stderr or "tty" in stderr:
        why = (f"sudo wants a terminal for {user} (requiretty); add `Defaults:{user} !requiretty` to "
               f"/etc/sudoers.d/swapctl, or log in as root")
    else:
        why = f"`sudo -n true` failed for {user} ({said[0][:200]}); give {user} {fix}, or log in as root"
    return Refused(why, host=host)
