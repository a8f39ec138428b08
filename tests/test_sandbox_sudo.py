"""`sandbox up --sudo` (issue 47): the sandbox's host reached as a user who is not root, every command through
`sudo -n`, as on a cloud GPU box whose login is `ubuntu`. Real sshd, a real user and a real sudoers rule
(made by `sandbox up`, removed by `sandbox down`), real provers."""

from __future__ import annotations

import json
import pwd
from pathlib import Path

import pytest

from swapctl.sandbox_sudo import RULES, SUDO_USER

from lab import free_port, swapctl

pytestmark = pytest.mark.host


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def _user() -> bool:
    try:
        pwd.getpwnam(SUDO_USER)
        return True
    except KeyError:
        return False


def test_the_sudo_sandbox_deploys_through_sudo_and_down_removes_its_user_and_rule(tmp_path):
    """The sandbox logged in only as root: `become = "sudo"`, the way most cloud boxes are reached, could not
    be seen. With --sudo the playbook logs in as its own user through sudo; a deploy and a rollback work; with
    the rule gone, swapctl says sudo asks for a password (so every command did go through sudo); `sandbox
    down` leaves no user and no rule."""
    sandbox, port = tmp_path / "sandbox", free_port()
    playbook = sandbox / "swapctl.toml"
    try:
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port), "--sudo")
        assert r.returncode == 0, r.stderr
        assert f"its hosts log in as {SUDO_USER}, through sudo" in r.stdout, r.stdout
        assert f'user = "{SUDO_USER}"' in playbook.read_text() and 'become = "sudo"' in playbook.read_text()
        assert _user() and RULES.read_text() == f"{SUDO_USER} ALL=(root) NOPASSWD: ALL\n"
        r = swapctl("deploy", "sandbox", "--binary", str(sandbox / "builds" / "prover-b"), "--yes", "--json",
                    "-p", str(playbook))
        assert r.returncode == 0 and json.loads(r.stdout)["hosts"]["sandbox"]["outcome"] == "deployed", r.stdout
        data = sandbox / "data" / ".swapctl"
        assert data.stat().st_uid == 0  # the state directory is root's: written through sudo, not as the login
        r = swapctl("rollback", "sandbox", "--yes", "-p", str(playbook))
        assert r.returncode == 0, r.stderr
        RULES.rename(tmp_path / "rule")  # no rule: sudo asks for a password, which swapctl never gives
        r = swapctl("status", "sandbox", "-p", str(playbook))
        assert r.returncode == 3 and f"sudo asks {SUDO_USER} for a password" in r.stderr, r.stderr
        (tmp_path / "rule").rename(RULES)
    finally:
        swapctl("sandbox", "down", "--dir", str(sandbox))
    assert not _user() and not RULES.exists()
    assert not (sandbox / "sudo-user").exists() and not Path(f"{RULES}.new").exists()
