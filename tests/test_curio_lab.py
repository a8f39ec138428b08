"""The Curio farm lab does what Curio's source says (docs/curio.md, "The farm lab"): a real PostgreSQL with
Curio's tables, the node stand-in and the `curio` CLI stand-in as real processes, the stand-in prover as
the cuzk they feed. Each test names the Curio behaviour it checks; the node polls every 0.5-1.5 s here
instead of Curio's 30."""

import os
import time

import pytest

# fixtures (curio_db, curio_farm): a test naming one redefines it (F811)
from curio_lab import CUZK_TASKS, Postgres, add_tasks, curio_db, curio_farm  # noqa: F401

pytestmark = pytest.mark.host


def unschedulable(farm, node) -> bool:
    return farm.db.query("SELECT unschedulable FROM harmony_machines WHERE host_and_port = %s", node.listen)[0][0]


def owner(farm, task_id: int):
    rows = farm.db.query("SELECT owner_id FROM harmony_task WHERE id = %s", task_id)
    return rows[0][0] if rows else "gone"


def cordon(farm, node, verb: str = "cordon") -> float:
    r = farm.curio("cli", "--machine", node.listen, verb)
    assert r.returncode == 0, r.stderr
    return time.time()


def test_the_schema_is_curios_own_migrations_in_schema_curio(curio_db):  # noqa: F811
    tables = {t for (t,) in curio_db.query("SELECT table_name FROM information_schema.tables "
                                           "WHERE table_schema = 'curio'")}
    assert {"harmony_machines", "harmony_task", "harmony_task_history", "harmony_machine_details",
            "harmony_config"} <= tables
    columns = {c for (c,) in curio_db.query("SELECT column_name FROM information_schema.columns "
                                            "WHERE table_schema = 'curio' AND table_name = 'harmony_machines'")}
    assert {"unschedulable", "restart_request", "host_and_port"} <= columns
    assert not curio_db.query("SELECT 1 FROM information_schema.tables WHERE table_schema = 'public'")


def test_the_database_stops_with_no_process_left_and_its_directory_gone():
    db = Postgres().start()
    pgid, data = db.proc.pid, db.dir
    assert db.query("SELECT COUNT(*) FROM harmony_task") == [(0,)]
    db.stop()
    assert not data.exists()
    left = [p for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == pgid]
    assert not left, left


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1


def test_a_task_added_just_after_a_cordon_is_claimed_until_the_nodes_next_poll_and_none_after_it(curio_farm):  # noqa: F811
    """checkNodeFlags runs only at the DB poll (harmonytask.go:651-663, scheduler.go:123-128): until then the
    node claims what its peers announce with the flag it last read."""
    curio_farm.start_prover()
    node = curio_farm.start_node(poll_s=1.5)
    for _ in range(3):  # the cordon and the task must both land before the next poll: on a busy machine the
        last_poll = node.wait_poll(time.time())  # CLI may take longer than a poll; then uncordon, try again
        asked = time.time()
        cordoned = cordon(curio_farm, node)
        [early] = add_tasks(curio_farm.db, "PoRep")
        added = time.time()
        if not [t for t, _ in node.polls() if asked < t <= added]:
            break
        node.wait_poll(cordon(curio_farm, node, "uncordon"), schedulable=True)
        node.wait_event("done", early)
    else:
        pytest.fail(f"a poll came between the cordon and the task three times: {node.polls()}")
    claimed = node.wait_event("claim", early)
    next_poll = node.wait_poll(last_poll, schedulable=False)
    assert cordoned < claimed < next_poll, (cordoned, claimed, next_poll, node.polls())
    node.wait_event("done", early)

    [late] = add_tasks(curio_farm.db, "WinPost")
    node.wait_poll(node.wait_poll(time.time()))  # two more polls, each still reading the cordon
    assert owner(curio_farm, late) is None
    assert not [f for _, _, f in node.events("claim") if f["id"] == str(late)]
    assert unschedulable(curio_farm, node) is True


def test_a_running_task_finishes_under_the_cordon_and_then_the_node_owns_nothing(curio_farm):  # noqa: F811
    """Running tasks go on under a cordon; `SELECT COUNT(*) FROM harmony_task WHERE owner_id=$1` is how Curio
    itself sees nothing pending (harmonytask.go:666-673)."""
    curio_farm.start_prover(synth_ms=200)
    node = curio_farm.start_node(poll_s=0.5, prep_s=1.5)
    [task] = add_tasks(curio_farm.db, "PoRep")
    node.wait_event("claim", task)
    cordoned = cordon(curio_farm, node)
    node.wait_poll(cordoned, schedulable=False)
    assert curio_farm.owned(node) == 1  # still preparing: cordoned, not stopped
    done = node.wait_event("done", task)
    assert curio_farm.owned(node) == 0
    assert owner(curio_farm, task) == "gone"
    [(result, by)] = curio_farm.db.query("SELECT result, completed_by_host_and_port FROM harmony_task_history "
                                         "WHERE task_id = %s", task)
    assert (result, by) == (True, node.listen)
    assert done > cordoned
    record = node.stop()
    assert record["totals"] == {"claimed": 1, "done": 1, "failed": 0, "retries": 0}


def test_uncordon_resumes_claims_at_the_next_poll(curio_farm):  # noqa: F811
    curio_farm.start_prover()
    node = curio_farm.start_node(poll_s=0.5)
    cordoned = cordon(curio_farm, node)
    node.wait_poll(cordoned, schedulable=False)
    [task] = add_tasks(curio_farm.db, "WdPost")
    node.wait_poll(node.wait_poll(time.time()))
    assert owner(curio_farm, task) is None
    uncordoned = cordon(curio_farm, node, "uncordon")
    assert unschedulable(curio_farm, node) is False
    resumed = node.wait_poll(uncordoned, schedulable=True)
    assert node.wait_event("claim", task) >= resumed
    node.wait_event("done", task)
    assert curio_farm.owned(node) == 0


def test_a_failed_porep_waits_its_retry_wait_an_updateprove_fails_three_times_a_winpost_once(curio_farm):  # noqa: F811
    """With cuzk down every Prove fails: PoRep waits min(1s<<retries, 2m) between tries (task_porep.go:217-220,
    scaled by 0.5 here), UpdateProve retries at once up to MaxFailures 3 (task_prove.go:177), WinPost is
    dropped at its first failure (winning_task.go:597-600); a dropped task leaves its row, and history says so."""
    node = curio_farm.start_node(poll_s=0.5, retry_scale=0.5)
    [porep] = add_tasks(curio_farm.db, "PoRep")
    [update] = add_tasks(curio_farm.db, "UpdateProve")
    [winpost] = add_tasks(curio_farm.db, "WinPost")
    node.wait_event("dropped", winpost)
    node.wait_event("dropped", update)
    node.wait_event("retry", porep)
    curio_farm.start_prover()
    node.wait_event("done", porep)

    history = curio_farm.db.query("SELECT task_id, result FROM harmony_task_history ORDER BY id")
    assert [r for t, r in history if t == winpost] == [False]
    assert [r for t, r in history if t == update] == [False] * 3
    assert [r for t, r in history if t == porep][-1] is True
    assert owner(curio_farm, winpost) == owner(curio_farm, update) == "gone"
    # every retry of the PoRep came no sooner than its RetryWait after the failure before it
    ends = [(t, int(f["retries"])) for t, _, f in node.events("retry") if f["id"] == str(porep)]
    claims = [t for t, _, f in node.events("claim") if f["id"] == str(porep)]
    assert len(claims) == len(ends) + 1
    for (failed, retries), again in zip(ends, claims[1:], strict=True):
        assert again - failed >= min(1 << (retries + 1), 120) * 0.5 - 0.05, (failed, retries, again)
    record = node.stop()
    assert record["per_type"]["WinPost"] == {"claimed": 1, "done": 0, "failed": 1, "retries": 0}
    assert record["per_type"]["UpdateProve"] == {"claimed": 3, "done": 0, "failed": 1, "retries": 2}
    assert record["per_type"]["PoRep"]["done"] == 1 and record["per_type"]["PoRep"]["retries"] == len(ends) >= 1


def test_the_cli_refuses_without_machine_and_cordons_only_the_machine_named(curio_farm):  # noqa: F811
    a, b = curio_farm.start_node(poll_s=5), curio_farm.start_node(poll_s=5)
    r = curio_farm.curio("cli", "cordon")
    assert r.returncode == 1 and "--machine" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert unschedulable(curio_farm, a) is False and unschedulable(curio_farm, b) is False

    r = curio_farm.curio("cli", "--machine", "127.0.0.1:1", "cordon")
    assert r.returncode == 1 and "no machine 127.0.0.1:1" in r.stderr

    # the database from the --db-* flags as well as from CURIO_DB_* (cmd/curio/main.go:122-158)
    env = {k: v for k, v in curio_farm.env().items() if k != "CURIO_DB_PORT"}
    r = curio_farm.curio("--db-port", str(curio_farm.db.port), "cli", "--machine", a.listen, "cordon", env=env)
    assert r.returncode == 0, r.stderr
    assert unschedulable(curio_farm, a) is True and unschedulable(curio_farm, b) is False
    r = curio_farm.curio("cli", "--machine", a.listen, "cordon", env=env)  # Curio's default port: nothing there
    assert r.returncode == 1 and "cannot reach Curio's database" in r.stderr


def test_the_feeder_and_the_node_records_account_for_every_task(curio_farm, tmp_path):  # noqa: F811
    """A paced feed of every cuzk type; at SIGTERM the node's record counts each claim and its end."""
    curio_farm.start_prover()
    node = curio_farm.start_node(poll_s=0.5, max_pending=3)
    feed = curio_farm.feed(mix=",".join(f"{n}=1" for n in CUZK_TASKS), count=10, gap_s=0.05)
    deadline = time.monotonic() + 30
    while len(node.events("done")) < 10:
        assert time.monotonic() < deadline, node.log.read_text()[-800:]
        running = len(node.events("claim")) - len(node.events("done"))
        assert running <= 3  # MaxPending, shared by every cuzk type
        time.sleep(0.05)
    added = feed.stop()["added"]
    record = node.stop()
    assert sum(added.values()) == 10
    assert {n: s["done"] for n, s in record["per_type"].items()} == {n: added.get(n, 0) for n in CUZK_TASKS}
    assert curio_farm.db.query("SELECT COUNT(*) FROM harmony_task")[0][0] == 0


def test_a_prover_killed_mid_proof_costs_the_porep_a_retry_and_the_winpost_its_only_try(curio_farm):  # noqa: F811
    """What a swap without a cordon costs Curio: the Prove call fails, PoRep burns one of its 10 tries and
    comes back after its RetryWait; WinPost, MaxFailures 1, is gone (winning_task.go:597-600)."""
    prover = curio_farm.start_prover(synth_ms=1500)
    node = curio_farm.start_node(poll_s=0.5, retry_scale=0.2)
    [porep] = add_tasks(curio_farm.db, "PoRep")
    [winpost] = add_tasks(curio_farm.db, "WinPost")
    log = curio_farm.dir / "cuzk-0.log"
    for task in (porep, winpost):
        node.wait_event("claim", task)
    wait_until_text(log, f"-{winpost}-")  # the prover has taken the WinPost's job (queued or begun)
    prover.kill()
    node.wait_event("dropped", winpost)
    node.wait_event("retry", porep)
    curio_farm.start_prover()
    node.wait_event("done", porep)
    record = node.stop()
    assert record["per_type"]["WinPost"] == {"claimed": 1, "done": 0, "failed": 1, "retries": 0}
    assert record["per_type"]["PoRep"] == {"claimed": 2, "done": 1, "failed": 0, "retries": 1}


def test_a_saturating_feed_keeps_its_backlog_waiting_and_the_node_at_max_pending(curio_farm):  # noqa: F811
    curio_farm.start_prover(synth_ms=100)
    node = curio_farm.start_node(poll_s=0.5, max_pending=2)
    feed = curio_farm.feed(mix="PoRep=3,WdPost=1", backlog=5)
    time.sleep(1.5)  # the load runs a while: what is checked is its shape, not an event
    waiting = curio_farm.db.query("SELECT COUNT(*) FROM harmony_task WHERE owner_id IS NULL")[0][0]
    assert 4 <= waiting <= 5 and curio_farm.owned(node) <= 2
    added = sum(feed.stop()["added"].values())
    record = node.stop()
    left = curio_farm.db.query("SELECT COUNT(*) FROM harmony_task")[0][0]
    assert record["totals"]["done"] >= 2 and record["totals"]["failed"] == 0
    assert added == record["totals"]["done"] + left


def wait_until_text(path, text: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"{text!r} not in {path} within {timeout} s"
        time.sleep(0.02)


def test_the_node_writes_each_log_line_whole_while_its_threads_log_at_once():
    """The node's threads (each task's Prove call, the poller, the JSON-RPC) log at once. print() wrote a
    line's text and its newline apart, and two lines ran together ("... was done1796661887.061 retry id=1"):
    the lab then read the `dropped` of task 2 as task 1's retry, and a full suite failed waiting for it.
    8 threads of 300 lines each, every line whole (print() broke about 1 in 10 here)."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    node = Path(__file__).resolve().parent.parent / "images" / "curio"
    code = ("import sys, threading; sys.path.insert(0, sys.argv[1]); from curio_node import log\n"
            "ts = [threading.Thread(target=lambda i=i: [log(f'line {i} {j}') for j in range(300)]) for i in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n")
    out = subprocess.run([sys.executable, "-c", code, str(node)], capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == 2400, out.stderr
    assert all(re.fullmatch(r"\d+\.\d{3} line \d \d+", line) for line in lines), \
        [x for x in lines if not re.fullmatch(r"\d+\.\d{3} line \d \d+", x)][:3]
