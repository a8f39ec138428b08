"""`sandbox up --systemd` (issue 47): the sandbox's daemon a systemd unit, as on most production boxes. A real
systemd as PID 1 in a systemd-nspawn container (swapctl/sandbox_systemd.py, the tests' systemd host too),
sshd inside, the stand-in prover as cuzk.service; `sandbox down` powers it off."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from systemd_lab import cache_dir

from swapctl.sandbox_systemd import NAME

from lab import free_port, swapctl

pytestmark = pytest.mark.host


@pytest.fixture(autouse=True)
def _state(swapctl_env, monkeypatch):
    """Local history in the test's own state directory; the image the tests' systemd host uses (built once)."""
    monkeypatch.setenv("SWAPCTL_IMAGE_CACHE", str(cache_dir()))


def _running(playbook: Path) -> tuple[int, str, dict]:
    """The one daemon's pid and executable, and the unit, as `status --json` shows them."""
    r = swapctl("status", "sandbox", "--json", "-p", str(playbook))
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)["hosts"]["sandbox"]
    [daemon] = st["daemons"]
    return daemon["pid"], daemon["exe"], st["unit"]


def test_the_systemd_sandbox_deploys_and_rolls_back_through_its_unit_and_down_powers_it_off(tmp_path):
    """Every stop and start goes through cuzk.service: after the deploy the unit's MainPID runs build B, after
    the rollback build A, each time one daemon; `sandbox down` leaves no container, namespace or process."""
    assert shutil.which("systemd-nspawn"), "needs systemd-nspawn: apt-get install systemd-container"
    sandbox = tmp_path / "sandbox"
    playbook = sandbox / "swapctl.toml"
    try:
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(free_port()), "--systemd", timeout=300)
        assert r.returncode == 0, r.stderr
        assert "a systemd container whose daemon is cuzk.service" in r.stdout, r.stdout
        assert 'unit = "cuzk.service"' in playbook.read_text()
        other = swapctl("sandbox", "up", "--dir", str(tmp_path / "other"), "--port", str(free_port()), "--systemd",
                        timeout=300)  # a second, while the first runs: refused, and the first untouched
        assert other.returncode != 0 and "runs already" in other.stderr, other.stderr
        pid, exe, unit = _running(playbook)
        assert unit["name"] == "cuzk.service" and unit["active_state"] == "active" and unit["main_pid"] == pid, unit
        assert exe == "/data/cuzk"  # started by the unit, before any release
        r = swapctl("deploy", "sandbox", "--binary", str(sandbox / "builds" / "prover-b"), "--yes", "--json",
                    "-p", str(playbook))
        assert r.returncode == 0 and json.loads(r.stdout)["hosts"]["sandbox"]["outcome"] == "deployed", r.stdout
        b_pid, exe, unit = _running(playbook)
        assert unit["main_pid"] == b_pid != pid and _sha(sandbox / "builds" / "prover-b")[:12] in exe, (exe, unit)
        r = swapctl("rollback", "sandbox", "--yes", "-p", str(playbook))
        assert r.returncode == 0, r.stderr
        a_pid, exe, unit = _running(playbook)
        assert unit["main_pid"] == a_pid not in (pid, b_pid) and _sha(sandbox / "builds" / "prover-a")[:12] in exe
    finally:
        down = swapctl("sandbox", "down", "--dir", str(sandbox))
    assert down.returncode == 0, down.stderr
    assert not Path(f"/run/netns/{NAME}").exists() and not (sandbox / "systemd" / "host.json").exists()
    assert NAME.encode() not in b"".join(p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline")
                                         if _readable(p))


def _readable(p: Path) -> bool:
    try:
        p.read_bytes()
        return True
    except OSError:
        return False


def _sha(path: Path) -> str:
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest()
