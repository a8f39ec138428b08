"""`sandbox up --curio` (issue 47): the sandbox's daemon fed as a Curio node feeds cuzk, never idle, and a
deploy that swaps it with Curio's cordon, seen working in the first minutes. Real sshd, a real PostgreSQL
holding Curio's tables, the node and CLI stand-ins of the tests' farm lab (images/curio/), real provers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from swapctl import sandbox_curio

from lab import free_port, swapctl

pytestmark = pytest.mark.host


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def _ports() -> int:
    """A port P with P..P+3 free now: sshd, the daemon's status, its listen for the node, the node's."""
    for _ in range(50):
        port = free_port()
        if port < 65530 and all(_free(port + i) for i in range(1, 4)):
            return port
    raise AssertionError("no four free ports in a row")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_the_curio_sandbox_feeds_the_daemon_and_a_deploy_cordons_drains_and_uncordons_losing_nothing(tmp_path):
    """The sandbox had no Curio: `stop = "cordon"` could not be seen at all. With --curio, `status` shows the
    node and the tasks it owns, a deploy cordons the node, waits until it owns no task, swaps and uncordons,
    no task fails, and the node goes on feeding the new build; `sandbox down` ends every part of it."""
    sandbox, port = tmp_path / "sandbox", _ports()
    playbook = sandbox / "swapctl.toml"
    try:
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port), "--curio")
        assert r.returncode == 0, r.stderr
        assert f"a Curio node stand-in (127.0.0.1:{port + 3})" in r.stdout and 'stop = "cordon"' in r.stdout
        pg = Path((sandbox / "curio" / "pg-dir").read_text().strip())  # the database's own directory
        text = playbook.read_text()
        assert 'stop = "cordon"' in text and f'nodes = ["127.0.0.1:{port + 3}"]' in text, text
        st = swapctl("status", "sandbox", "-p", str(playbook))
        assert st.returncode == 0 and f"curio node 127.0.0.1:{port + 3}: schedulable" in st.stdout, st.stdout
        before = _tasks(sandbox)
        assert before[True] >= 1 and before[False] == 0, before  # the node's tasks proved before any swap

        r = swapctl("deploy", "sandbox", "--binary", str(sandbox / "builds" / "prover-b"), "--yes",
                    "-p", str(playbook), timeout=180)
        assert r.returncode == 0, r.stderr
        said = r.stderr
        assert f"cordoned 127.0.0.1:{port + 3}" in said and "the nodes own no cuzk task" in said, said
        assert said.index("cordoned") < said.index("stopped in") < said.index("uncordoned"), said
        [line] = (sandbox / "data" / ".swapctl" / "cuzk" / "journal.jsonl").read_text().splitlines()
        assert json.loads(line)["lost"] == 0, line
        assert sandbox_curio._query(sandbox, "SELECT unschedulable FROM harmony_machines") == [(False,)]
        done = _tasks(sandbox)
        _wait_more(sandbox, done[True])  # the node feeds the new build: tasks go on completing
        assert _tasks(sandbox)[False] == 0, "a task failed: a proof was lost, or a retry burned"
    finally:
        swapctl("sandbox", "down", "--dir", str(sandbox))
    assert _left(sandbox, pg) == [] and not pg.exists() and not (sandbox / "curio").exists(), _left(sandbox, pg)


def _tasks(sandbox: Path) -> dict[bool, int]:
    """Curio's own account of the node's work: its harmony_task_history rows, by result."""
    rows = dict(sandbox_curio._query(sandbox, "SELECT result, COUNT(*) FROM harmony_task_history GROUP BY result"))
    return {True: int(rows.get(True, 0)), False: int(rows.get(False, 0))}  # type: ignore[call-overload]


def _wait_more(sandbox: Path, than: int, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while _tasks(sandbox)[True] <= than:
        assert time.monotonic() < deadline, "no task completed after the swap"
        time.sleep(0.2)


def _left(sandbox: Path, pg: Path) -> list[str]:
    """Every process of the sandbox left running: its daemon, sshd, node, feeder, PostgreSQL."""
    r = subprocess.run(["pgrep", "-af", f"{sandbox.resolve()}|{pg}"], capture_output=True, text=True)
    return [line for line in r.stdout.splitlines() if "pgrep" not in line]
