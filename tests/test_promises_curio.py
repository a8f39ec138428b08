"""The cordon's promises on a promises host (tests/promises_curio.py, `benchmarks/faults.py --cordon`): a
daemon fed by a Curio node under a saturating backlog, every swap cordoning the node. The campaign's checks
must pass on a good cordoned swap and must see what they promise against: a node left cordoned, a task
attempt that failed while a daemon ran."""

from __future__ import annotations

import pytest

from lab import wait_until
from promises import Host, Model, Ran, builds, check, run


@pytest.fixture(scope="module")
def farm_host(tmp_path_factory, lab_dir):
    h = Host(tmp_path_factory.mktemp("promises-curio"), builds(lab_dir / "bin" / "promises"), prefix="spc",
             curio=True)
    try:
        yield h
    finally:
        h.close()


def kinds(found) -> set[str]:
    return {v.kind for v in found}


def done(h: Host) -> int:
    assert h.curio is not None
    return int(h.curio.db.query("SELECT COUNT(*) FROM harmony_task_history WHERE result")[0][0])


def test_a_cordoned_deploy_under_a_backlog_keeps_every_promise(farm_host):
    h = farm_host
    h.reset()
    wait_until(lambda: done(h) >= 3, what="the node to prove on build A")
    pid = h.daemons()[0].pid
    ran = run(h, "deploy:b")
    assert ran.code == 0, ran.stderr
    assert " cordoned 127.0.0.1:12300" in ran.stderr and "uncordoned" in ran.stderr
    assert check(h, Model(), ran, pid) == []
    before = done(h)
    wait_until(lambda: done(h) >= before + 3, what="the node to prove on build B")
    assert h.curio and h.curio.failed() == []


def test_the_check_sees_a_node_left_cordoned(farm_host):
    """As a node that a swap killed with its host would leave: flagged unschedulable once the swap ended."""
    h = farm_host
    h.reset()
    assert h.curio is not None
    h.curio.db.query("UPDATE harmony_machines SET unschedulable = true")
    found = check(h, Model(), Ran("deploy:a", "none", 3, ""), h.daemons()[0].pid)
    assert kinds(found) == {"left cordoned"}, found


def test_the_check_sees_a_task_lost_while_a_daemon_ran(farm_host):
    """The daemon killed under the node's work by no step of the harness: its proof in flight is lost."""
    h = farm_host
    h.reset()
    assert h.curio is not None
    wait_until(lambda: done(h) >= 1, what="the node to prove")
    pid = h.daemons()[0].pid
    h.kill_daemon()
    wait_until(lambda: h.curio.failed(), what="the node to see its proof fail")
    h.start_by_hand()
    found = check(h, Model(), Ran("deploy:a", "none", 3, ""), pid)
    assert "task lost" in kinds(found), found
    # the same loss in a step that killed the daemon itself (the campaign's `die`) is the harness's
    h.kill_daemon()
    wait_until(lambda: len(h.curio.failed()) > h.curio.failed_before, what="another failed attempt")
    h.start_by_hand()
    assert "task lost" not in kinds(check(h, Model(), Ran("die", "none", 0, ""), None))
