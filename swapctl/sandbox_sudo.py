"""The sandbox's sudo login (`sandbox up --sudo`): its hosts reached as a user who is not root, whose every
command goes through `sudo -n` (become = "sudo"), as on a cloud GPU box whose login is `ubuntu`.

As root only, on this machine: a user SUDO_USER with no password and no home (`usermod -p '*'`: sshd takes
a key for it, and no other login can be had), which only the sandbox's sshd lets in: the sandbox's client
key (its private half root's alone) is in KEYS, a file that user can read (sshd reads a login's keys as
that user, and the sandbox's directory may be one it cannot enter) and that only the sandbox's sshd
names; and a sudoers rule for it in /etc/sudoers.d/, checked by `visudo -c` before it is put in place.
`sandbox down` removes all three."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path

from .errors import Refused

SUDO_USER = "swapctl-sandbox"
RULES = Path("/etc/sudoers.d/swapctl-sandbox")  # no dot in the name: sudo skips those
MADE = "sudo-user"  # in the sandbox's directory: this sandbox made the user and its rule
KEYS = Path("/var/lib/swapctl-sandbox/authorized_keys")


def make(base: Path) -> str:
    """The user and its sudoers rule (kept where an earlier `up --sudo` made them), this sandbox noted first as
    their maker (so a `down` after a failed `up` removes them); returns KEYS, for the sandbox's sshd."""
    if os.geteuid() != 0:
        raise Refused("--sudo makes a user and a sudoers rule on this machine: run it as root")
    if not shutil.which("sudo") or not shutil.which("visudo"):
        raise Refused("--sudo needs sudo on this machine (Debian: apt-get install sudo)")
    (base / MADE).write_text(SUDO_USER + "\n")
    try:
        pwd.getpwnam(SUDO_USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", SUDO_USER], check=True,
                       capture_output=True)
        subprocess.run(["usermod", "-p", "*", SUDO_USER], check=True, capture_output=True)
    new = RULES.with_name(RULES.name + ".new")  # a dot: sudo never reads it half-written
    new.write_text(f"{SUDO_USER} ALL=(root) NOPASSWD: ALL\n")
    new.chmod(0o440)
    checked = subprocess.run(["visudo", "-c", "-q", "-f", str(new)], capture_output=True, text=True)
    if checked.returncode != 0:
        new.unlink()
        raise Refused(f"visudo rejects the sandbox's sudoers rule: {checked.stderr.strip()}")
    os.replace(new, RULES)
    return str(KEYS)


def authorize(base: Path) -> None:
    """The sandbox's client key in KEYS, for SUDO_USER to log in with."""
    KEYS.parent.mkdir(mode=0o755, exist_ok=True)
    KEYS.write_text((base / "sshd" / "client_key.pub").read_text())
    KEYS.chmod(0o644)


def playbook(text: str) -> str:
    """The sandbox's playbook logging in as SUDO_USER, through sudo."""
    text, n = re.subn(r'^user = "root"\n', f'user = "{SUDO_USER}"            # `sandbox up --sudo`: not root\n'
                      'become = "sudo"                    # every command through `sudo -n` (docs/guide.md)\n',
                      text, flags=re.M)
    assert n, "the sandbox's hosts log in as root"
    return text


def remove(base: Path) -> None:
    """The user and the rule, where this sandbox made them."""
    if not (base / MADE).is_file():
        return
    RULES.unlink(missing_ok=True)
    shutil.rmtree(KEYS.parent, ignore_errors=True)
    subprocess.run(["userdel", SUDO_USER], capture_output=True, check=False)
    (base / MADE).unlink()
