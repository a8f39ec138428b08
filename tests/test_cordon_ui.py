"""The cordon's controller surfaces on the farm lab (tests/curio_lab.py: real PostgreSQL with Curio's tables,
the node stand-in, the `curio` CLI stand-in, real sshd): `swapctl uncordon`, the next deploy lifting a cordon a
dead swap left, `status`, the deploy plan, `init --from`; and the parser that reads what the host says."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from curio_lab import curio_db, curio_farm, set_layer  # noqa: F401
from test_cordon import Cordoned

from swapctl.facts import cordon
from swapctl.playbook import parse
from swapctl.playbook.spec import NODE

from lab import swapctl, wait_until
from test_deploy import journal

pytestmark = pytest.mark.usefixtures("swapctl_env")
SINCE = "2026-12-06T03:00:00Z"


def swapped_once(box, farm, prover, prover_b, **kw) -> Cordoned:
    """A cordoned deploy done (the state directory is swapctl's), the new build running."""
    c = Cordoned(box, farm, **kw)
    c.d.start(prover)
    r = c.deploy(prover_b)
    assert r.returncode == 0, r.stderr
    return c


def left_by_a_dead_swap(c: Cordoned) -> None:
    """What a swap leaves when its host dies mid-drain, watchdog and all: the node cordoned, cordon.info and
    cordon.by as curio.sh's cordon_drain writes them (`PID SINCE NODE...`; {"by", "since", "action"})."""
    assert c.farm.curio("cli", "--machine", c.node.listen, "cordon").returncode == 0
    c.cordon_file().write_text(f"4194000 {SINCE} {c.node.listen}\n")
    (c.cordon_file().parent / "cordon.by").write_text(
        json.dumps({"by": "alice@laptop", "since": SINCE, "action": "deploy"}) + "\n")
    assert c.unschedulable()


def lifted_first_then_cordoned_as_its_own(c: Cordoned, r: subprocess.CompletedProcess) -> None:
    """The left cordon lifted before the plan (one line says so), so the swap cordons the node as its own
    (journaled, watched, lifted by itself) instead of passing it by as someone else's."""
    said = " ".join(r.stderr.split())
    assert f"uncordoned {c.node.listen}: a cordon swapctl left" in said
    assert said.index("a cordon swapctl left") < said.index("deploy plan")
    assert journal(c.box)[-1]["cordon"]["nodes"] == c.node.listen
    assert journal(c.box)[-1]["cordon"]["uncordoned"] is True
    assert not c.unschedulable() and not c.cordon_file().exists()


def run(c: Cordoned, *args: str) -> subprocess.CompletedProcess:
    return swapctl(*args, "-p", str(c.box.playbook_path))


def test_uncordon_lifts_the_cordon_a_dead_swap_left_and_never_one_it_did_not_make(
        box, curio_farm, prover, prover_b):  # noqa: F811
    c = swapped_once(box, curio_farm, prover, prover_b)
    left_by_a_dead_swap(c)
    r = run(c, "uncordon", "lab")
    assert r.returncode == 0, r.stderr
    assert "uncordoned" in r.stdout and c.node.listen in r.stdout and "alice@laptop" in r.stdout
    assert not c.unschedulable() and not c.cordon_file().exists()
    again = run(c, "uncordon", "lab")
    assert again.returncode == 0 and "no cordon of swapctl's on lab" in again.stdout
    # someone else's cordon (no cordon.info): not swapctl's to lift
    assert curio_farm.curio("cli", "--machine", c.node.listen, "cordon").returncode == 0
    theirs = run(c, "uncordon", "lab")
    assert theirs.returncode == 0 and "no cordon of swapctl's on lab" in theirs.stdout
    assert c.unschedulable()


def test_uncordon_refuses_while_a_swap_runs(box, curio_farm, prover, prover_b):  # noqa: F811
    """swap.lock held, as swap.sh holds it for its whole run: its own script lifts its cordon, never this."""
    c = swapped_once(box, curio_farm, prover, prover_b)
    left_by_a_dead_swap(c)
    lock = c.cordon_file().parent / "swap.lock"
    holder = subprocess.Popen(["flock", str(lock), "sleep", "60"])
    try:
        wait_until(lambda: subprocess.run(["flock", "-n", str(lock), "true"]).returncode != 0, what="swap.lock held")
        r = run(c, "uncordon", "lab")
        assert r.returncode == 3, r.stderr  # refused
        assert len(r.stderr.strip().splitlines()) == 1 and "a swap runs on the host now" in r.stderr
        assert c.unschedulable() and c.cordon_file().exists()
    finally:
        holder.kill()
        holder.wait()


def test_the_next_deploy_lifts_a_cordon_a_dead_swap_left_before_it_plans(box, curio_farm, prover, prover_b):  # noqa: F811
    """Without it the swap reads the node as cordoned by someone else and leaves it so: never fed again."""
    c = swapped_once(box, curio_farm, prover, prover_b)
    left_by_a_dead_swap(c)
    dry = c.deploy(prover, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    said = " ".join((dry.stdout + dry.stderr).split())
    assert "a cordon swapctl left" in said and "the swap lifts it first" in said
    assert c.unschedulable()  # a dry run changes nothing
    r = c.deploy(prover)
    assert r.returncode == 0, r.stderr
    lifted_first_then_cordoned_as_its_own(c, r)


def test_a_rollback_lifts_a_cordon_a_dead_swap_left_before_it_plans(box, curio_farm, prover, prover_b):  # noqa: F811
    c = swapped_once(box, curio_farm, prover, prover_b)
    left_by_a_dead_swap(c)
    r = run(c, "rollback", "lab", "--yes")
    assert r.returncode == 0, r.stderr
    lifted_first_then_cordoned_as_its_own(c, r)


def test_status_says_whose_cordon_each_node_has_and_their_tasks(box, curio_farm, prover, prover_b):  # noqa: F811
    c = swapped_once(box, curio_farm, prover, prover_b, synth_ms=8000)
    [tid] = curio_farm.db.query("INSERT INTO harmony_task (name, added_by, posted_time) VALUES "
                                "('PoRep', 0, CURRENT_TIMESTAMP) RETURNING id")[0]
    c.node.wait_event("claim", tid)
    left_by_a_dead_swap(c)
    r = run(c, "status", "lab")
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stdout.split())
    assert f"cordoned by swapctl since {SINCE} (deploy by alice@laptop)" in said
    assert f"curio node {c.node.listen}: cordoned by swapctl" in said
    assert "their cuzk tasks now: 1 (PoRep 1)" in said
    j = json.loads(run(c, "status", "lab", "--json").stdout)["hosts"]["lab"]["cordon"]
    assert j["ours"]["nodes"] == [c.node.listen] and [t["id"] for t in j["tasks"]] == [tid]
    # someone else's cordon
    assert run(c, "uncordon", "lab").returncode == 0
    assert curio_farm.curio("cli", "--machine", c.node.listen, "cordon").returncode == 0
    theirs = " ".join(run(c, "status", "lab").stdout.split())
    assert f"curio node {c.node.listen}: cordoned, not by swapctl" in theirs and "cordoned by swapctl" not in theirs


def test_status_says_unknown_where_the_database_does_not_answer_and_host_text_stays_a_value(
        box, curio_farm, prover, prover_b):  # noqa: F811
    c = swapped_once(box, curio_farm, prover, prover_b)
    left_by_a_dead_swap(c)
    (c.cordon_file().parent / "cordon.by").write_text(
        '{"by": "[bold]x\\nFAILED forged", "since": 1, "action": ["deploy"]}\n')
    c.curio["env"] = {**c.curio["env"], "CURIO_DB_PORT": "1"}
    c.write()
    r = run(c, "status", "lab")
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stdout.split())
    assert f"curio node {c.node.listen}: unknown (database did not answer)" in said
    assert "their cuzk tasks now: unknown (database did not answer)" in said
    assert "(unknown by unknown)" in said and "FAILED forged" not in said


def test_the_plan_names_the_nodes_tasks_any_post_and_what_the_swap_waits_for(box, curio_farm, prover, prover_b):  # noqa: F811
    c = swapped_once(box, curio_farm, prover, prover_b, synth_ms=8000, drain_timeout_s=60,
                     curio={"post_wait_s": 5, "max_cordon_s": 900})
    ids = [curio_farm.db.query("INSERT INTO harmony_task (name, added_by, posted_time) VALUES "
                               f"('{name}', 0, CURRENT_TIMESTAMP) RETURNING id")[0][0] for name in ("PoRep", "WinPost")]
    for tid in ids:
        c.node.wait_event("claim", tid)
    r = c.deploy(prover, "--dry-run")
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert f"cordon: {c.node.listen} (schedulable)" in said
    assert f"PoRep #{ids[0]}" in said and f"WinPost #{ids[1]}" in said
    assert re.search(rf"PoSt in flight: WinPost #{ids[1]} \(\d+ s\): .* at most 5 s \(curio.post_wait_s\), then "
                     "refuses", said)
    assert "one poll (1 s)" in said and "at most 60 s (daemon.drain_timeout_s)" in said and "at most 900 s" in said
    assert "the stop (SIGTERM) loses them" not in said


def test_init_from_fills_curio_nodes_from_a_running_curio_run(box, curio_farm, prover, tmp_path):  # noqa: F811
    """Each `curio run` on the host, kept as a node where its layers' [Cuzk] Address (read from harmony_config
    with that process's own database settings, on the host) is the daemon's listen address; a node whose
    layers name another cuzk is named in a comment and left out."""
    c = Cordoned(box, curio_farm)
    c.d.start(prover)
    set_layer(curio_farm.db, "other", '[Cuzk]\nAddress = "10.9.9.9:9820"\n')
    other = curio_farm.start_node(layers="base,other")
    out = tmp_path / "from-lab.toml"
    r = swapctl("init", str(out), "--from", "lab", "--match", re.escape(str(box.binary)),
                env={"SWAPCTL_PLAYBOOK": str(box.playbook_path)})
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert parse(text, str(out)).curio.nodes == (c.node.listen,)
    assert f"# {c.node.listen}: layers base,cuzk give [Cuzk] Address 127.0.0.1:{c.d.port}: this daemon" in text
    assert (f"# {other.listen}: layers base,other give [Cuzk] Address 10.9.9.9:9820: not this daemon "
            f"(127.0.0.1:{c.d.port}), left out") in text, text
    assert curio_farm.db.env()["CURIO_DB_PASSWORD"] not in text  # never a credential
    assert not any(line.startswith("env") for line in text.splitlines())


@pytest.mark.parametrize("forged", [
    "INFO 1 2026-01-01T00:00:00Z -x;rm 127.0.0.1:1\nBY nope",
    "STATE idle\nFLAG 127.0.0.1:1 maybe\nTASK 1:Po'Rep:3\nTASK x:PoRep:1\nDB ok",
])
def test_what_the_host_prints_ends_as_a_checked_value_or_nothing(forged):
    v = cordon.parse(forged)
    assert all(NODE.fullmatch(n) for n in v.ours)
    assert v.tasks == () and v.flags == ()
    assert v.by == "unknown"
