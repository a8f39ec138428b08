"""`stop = "cordon"` on the farm lab (tests/curio_lab.py): a real PostgreSQL with Curio's tables, the Curio
node stand-in feeding the box's daemon, the `curio` CLI stand-in on the host, real sshd. The swap cordons
the node, waits one poll and until the node owns no cuzk task, swaps, and uncordons on every path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
from curio_lab import Farm, curio_db, curio_farm, set_layer  # noqa: F401
from test_drain import Daemon, snapshot

from lab import swapctl_in_background, wait_until
from test_deploy import journal

pytestmark = pytest.mark.usefixtures("swapctl_env")


def sql_client() -> str:
    found = shutil.which("psql") or "/usr/bin/psql"
    assert os.path.exists(found), "the cordon tests need psql: bash scripts/system-deps (postgresql)"
    return found


class Cordoned:
    """The box's daemon fed by a Curio node stand-in, with the playbook's [curio] naming that node."""

    def __init__(self, box, farm: Farm, synth_ms: int = 300, poll_s: float = 1.0, prep_s: float = 0.0,
                 curio: dict | None = None, **daemon: object):
        self.box, self.farm = box, farm
        self.d = Daemon(box, synth_ms=synth_ms, partitions=2, **daemon)
        set_layer(farm.db, "cuzk", f'[Cuzk]\nAddress = "127.0.0.1:{self.d.port}"\n')
        self.node = farm.start_node(poll_s=poll_s, prep_s=prep_s)
        self.curio = {"nodes": [self.node.listen], "cli": str(farm.bin / "curio"), "sql": sql_client(),
                      "env": {k: v for k, v in farm.db.env().items() if k.startswith("CURIO_DB_")},
                      "poll_s": poll_s, **(curio or {})}
        self.write(**daemon)

    def write(self, **daemon: object) -> None:
        self.box.write_playbook(daemon={"status_url": self.d.url, "stop": "cordon", **daemon}, curio=self.curio)

    def deploy(self, binary, *extra: str) -> subprocess.CompletedProcess:
        return self.d.deploy(binary, *extra)

    def unschedulable(self) -> bool:
        [(flag,)] = self.farm.db.query("SELECT unschedulable FROM harmony_machines WHERE host_and_port = %s",
                                       self.node.listen)
        return bool(flag)

    def cordon_file(self):
        return self.box.data / ".swapctl" / "cuzk" / "cordon.info"


def proves_on_and_lost_nothing(c: Cordoned, feeder) -> None:
    """After a cordoned swap: the node proves on the new build, and once fed no more, its record holds no
    failed task and no retry burned."""
    wait_until(lambda: c.node.events("done") and c.node.events("done")[-1][0] > time.time() - 5,
               what="the node to prove on the new build")
    feeder.stop()
    rec = c.node.stop()
    assert rec["totals"]["failed"] == 0 and rec["totals"]["retries"] == 0, rec["totals"]


def test_a_cordoned_swap_under_saturating_load_loses_no_proof_and_burns_no_retry(box, curio_farm, prover, prover_b):  # noqa: F811
    """Curio's MaxPending full and a backlog waiting: a drain cannot win, the cordon does."""
    c = Cordoned(box, curio_farm, synth_ms=200, drain_timeout_s=60)
    c.d.start(prover)
    feeder = curio_farm.feed(mix="PoRep=3,UpdateProve=1", backlog=4)
    wait_until(lambda: curio_farm.owned(c.node) >= 2, what="the node to own work")
    r = c.deploy(prover_b)
    assert r.returncode == 0, r.stderr
    assert not c.unschedulable() and not c.cordon_file().exists()
    proves_on_and_lost_nothing(c, feeder)
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed" and entry["lost"] == 0
    cordon = entry["cordon"]
    assert cordon["uncordoned"] is True and cordon["nodes"] == c.node.listen
    assert cordon["drain_s"] >= 1.0  # at least one poll interval
    assert cordon["cordon_s"] >= cordon["drain_s"]
    assert "cordoning" in r.stderr


def test_a_cordon_over_its_limit_with_refuse_uncordons_and_changes_nothing(box, curio_farm, prover, prover_b):  # noqa: F811
    """A proof longer than drain_timeout_s: refused, the node uncordoned, the old build works on."""
    c = Cordoned(box, curio_farm, synth_ms=6000, drain_timeout_s=2, drain_timeout="refuse")
    old = c.d.start(prover)
    curio_farm.feed(mix="PoRep=1", backlog=1)
    wait_until(lambda: curio_farm.owned(c.node) >= 1, what="the node to own a task")
    r = c.deploy(prover_b)
    assert r.returncode != 0
    assert "nothing was stopped" in " ".join(r.stderr.split())
    assert old in box.daemons()
    assert not c.unschedulable() and not c.cordon_file().exists()


def test_no_cordon_while_the_node_proves_post(box, curio_farm, prover, prover_b):  # noqa: F811
    """A WinPost owned by the node: the swap waits post_wait_s for it, then refuses; nothing is cordoned."""
    c = Cordoned(box, curio_farm, synth_ms=8000, prep_s=0, curio={"post_wait_s": 1})
    old = c.d.start(prover)
    curio_farm.feed(mix="WinPost=1", count=1)
    wait_until(lambda: curio_farm.owned(c.node) >= 1, what="the node to own the WinPost")
    r = c.deploy(prover_b)
    assert r.returncode != 0
    said = " ".join(r.stderr.split())
    assert "PoSt" in said and "WinPost" in said and "nothing was stopped" in said
    assert old in box.daemons() and not c.unschedulable()
    polls = c.node.polls()
    assert all(s for _, s in polls)  # the node never read a cordon


def test_a_node_someone_else_cordoned_stays_cordoned(box, curio_farm, prover, prover_b):  # noqa: F811
    c = Cordoned(box, curio_farm, synth_ms=100)
    c.d.start(prover)
    assert curio_farm.curio("cli", "--machine", c.node.listen, "cordon").returncode == 0
    r = c.deploy(prover_b)
    assert r.returncode == 0, r.stderr
    assert c.unschedulable()  # not swapctl's to lift
    assert "OTHER" not in r.stderr
    assert "cordon" not in journal(box)[-1]


def test_the_host_uncordons_when_the_swap_script_is_killed(box, curio_farm, prover, prover_b):  # noqa: F811
    """The swap script SIGKILLed mid-drain (nothing can trap that): its watchdog lifts the cordon."""
    c = Cordoned(box, curio_farm, synth_ms=4000, drain_timeout_s=60)
    c.d.start(prover)
    curio_farm.feed(mix="PoRep=1", backlog=1)
    wait_until(lambda: curio_farm.owned(c.node) >= 1, what="the node to own a task")
    deploy, _, _ = swapctl_in_background("deploy", "lab", "--binary", str(prover_b), "--yes", "-p",
                                         str(box.playbook_path))
    try:
        wait_until(c.unschedulable, what="the cordon")
        info = c.cordon_file().read_text().split()
        os.kill(int(info[0]), 9)
        wait_until(lambda: not c.unschedulable() and not c.cordon_file().exists(), timeout=10,
                   what="the watchdog's uncordon, and its record gone")
    finally:
        deploy.kill()
        deploy.wait()


def test_the_journal_line_records_the_tasks_at_the_cordon(box, curio_farm, prover, prover_b):  # noqa: F811
    c = Cordoned(box, curio_farm, synth_ms=1500, drain_timeout_s=60)
    c.d.start(prover)
    [tid] = curio_farm.db.query("INSERT INTO harmony_task (name, added_by, posted_time) VALUES "
                                "('PoRep', 0, CURRENT_TIMESTAMP) RETURNING id")[0:1][0]
    c.node.wait_event("claim", tid)
    r = c.deploy(prover_b)
    assert r.returncode == 0, r.stderr
    cordon = journal(box)[-1]["cordon"]
    assert [t["id"] for t in cordon["tasks_at_cordon"]] == [tid]
    assert cordon["tasks_at_cordon"][0]["name"] == "PoRep"
    assert json.dumps(cordon)  # whole JSON


def test_ready_proof_uncordons_once_the_new_build_is_up_and_waits_for_its_first_checked_proof(
        box, curio_farm, prover, prover_b):  # noqa: F811
    """Only Curio feeds the daemon: with ready = "proof" the node must feed the new build before it can make
    a proof, so the cordon ends once it is up, and the deploy is ready at its first proof that passed."""
    c = Cordoned(box, curio_farm, synth_ms=100, drain_timeout_s=30, ready="proof", ready_timeout_s=30)
    c.d.start(prover)
    curio_farm.feed(mix="PoRep=1", gap_s=0.3)
    wait_until(lambda: c.node.events("done"), what="a first proof on the old build")
    r = c.deploy(prover_b)
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert said.index("uncordoned: the new build gets work") < said.index("is ready")
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed" and entry["cordon"]["uncordoned"] is True
    assert not c.unschedulable() and not c.cordon_file().exists()
    assert c.farm.db.query("SELECT COUNT(*) FROM harmony_task_history WHERE NOT result")[0][0] == 0


def test_a_build_whose_proofs_fail_their_self_check_is_rolled_back_behind_a_new_cordon(
        box, curio_farm, prover, prover_selfcheck):  # noqa: F811
    c = Cordoned(box, curio_farm, synth_ms=100, drain_timeout_s=30, ready="proof", ready_timeout_s=30)
    old = c.d.start(prover)
    curio_farm.feed(mix="PoRep=1", gap_s=0.3)
    wait_until(lambda: c.node.events("done"), what="a first proof on the old build")
    r = c.deploy(prover_selfcheck)
    assert r.returncode != 0
    said = " ".join(r.stderr.split())
    assert "cordoned again" in said and "rolling back" in said
    entry = journal(box)[-1]
    assert entry["action"] == "auto-rollback" and entry["outcome"] == "rolled-back", entry
    assert entry["cordon"]["uncordoned"] is True
    assert not c.unschedulable() and not c.cordon_file().exists()
    assert old not in box.daemons() and box.daemons()
    n = len(c.node.events("done"))
    wait_until(lambda: len(c.node.events("done")) > n, what="the node to prove on the old build again")


def test_the_watchdog_never_lifts_a_cordon_before_the_swaps_own_longest(box, curio_farm, prover, prover_b):  # noqa: F811
    """max_cordon_s far shorter than the drain: the watchdog's time limit is at least the swap's own longest
    (one poll, the drain's limit, its stop, memory wait and starts), so the cordon holds through the swap and
    the swap itself lifts it (it lifted it mid-drain, and the journal said uncordoned false)."""
    c = Cordoned(box, curio_farm, synth_ms=1200, poll_s=0.5, drain_timeout_s=30, curio={"max_cordon_s": 0.6})
    c.d.start(prover)
    curio_farm.feed(mix="PoRep=1", count=2)
    wait_until(lambda: curio_farm.owned(c.node) >= 1, what="the node to own a task")
    r = c.deploy(prover_b)
    assert r.returncode == 0, r.stderr
    cordon = journal(box)[-1]["cordon"]
    assert cordon["uncordoned"] is True and cordon["cordon_s"] >= cordon["drain_s"] >= 1.5, cordon
    assert not c.unschedulable() and not c.cordon_file().exists()


def test_a_database_that_does_not_answer_is_said_so_and_nothing_is_cordoned(box, curio_farm, prover, prover_b):  # noqa: F811
    c = Cordoned(box, curio_farm, synth_ms=100)
    old = c.d.start(prover)
    c.curio["env"] = {**c.curio["env"], "CURIO_DB_PORT": "9"}  # nothing listens there
    c.write()
    r = c.deploy(prover_b)
    assert r.returncode != 0
    said = " ".join(r.stderr.split())
    assert "the harmony database did not answer" in said and "nothing was stopped" in said, said
    assert "not in harmony_machines" not in said
    assert old in box.daemons() and not c.unschedulable() and not c.cordon_file().exists()


def test_a_cordon_over_its_limit_with_stop_swaps_anyway_says_what_was_lost_and_uncordons(
        box, curio_farm, prover, prover_b):  # noqa: F811
    """drain_timeout = "stop" (the default): a proof longer than drain_timeout_s is stopped with the daemon,
    the stop says it lost it and the journal counts it, the new build runs and the node is uncordoned."""
    c = Cordoned(box, curio_farm, synth_ms=8000, drain_timeout_s=2, drain_timeout="stop")
    old = c.d.start(prover)
    curio_farm.feed(mix="PoRep=1", count=1)
    wait_until(lambda: curio_farm.owned(c.node) >= 1 and snapshot(c.d.url)["synthesis"]["active"] >= 1,
               what="the node's proof in flight")
    r = c.deploy(prover_b)
    assert r.returncode == 0, r.stderr
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed" and entry["lost"] >= 1, entry
    assert entry["cordon"]["uncordoned"] is True and entry["cordon"]["drain_s"] >= 2.0, entry["cordon"]
    assert "the stop lost" in r.stdout, r.stdout  # the stop's own line, not the plan's "would be lost"
    assert old not in box.daemons() and box.daemons()
    assert not c.unschedulable() and not c.cordon_file().exists()


def _api(farm: Farm, secret: str | None = None) -> dict:
    """[curio] for via = "api": the nodes' StorageRPCSecret in their base layer, and a token signed with
    `secret` (the layer's own unless given): as `curio cli` signs one (images/curio/curio_rpc.py)."""
    import base64

    from swapctl.curio.curio_rpc import sign

    own = base64.b64encode(os.urandom(32)).decode()
    set_layer(farm.db, "base", f'[Apis]\nStorageRPCSecret = "{own}"\n')
    return {"via": "api", "cli": "/nonexistent/curio",  # no curio CLI on the host: the API needs none
            "env": {**{k: v for k, v in farm.db.env().items() if k.startswith("CURIO_DB_")},
                    "CURIO_API_TOKEN": sign(secret or own)}}


def test_a_cordon_through_the_nodes_api_loses_no_proof_and_needs_no_curio_on_the_host(
        box, curio_farm, prover, prover_b):  # noqa: F811
    """[curio] via = "api" (issue 43, item 1): the node's own Filecoin.Cordon and Filecoin.Uncordon, its admin
    token from [curio] env sent in a header curl reads from stdin; the curio CLI named is not there."""
    c = Cordoned(box, curio_farm, synth_ms=200, drain_timeout_s=60, curio=_api(curio_farm))
    c.d.start(prover)
    feeder = curio_farm.feed(mix="PoRep=3,UpdateProve=1", backlog=4)
    wait_until(lambda: curio_farm.owned(c.node) >= 2, what="the node to own work")
    r = c.deploy(prover_b)
    assert r.returncode == 0, r.stderr
    assert [f["method"] for _, _, f in c.node.events("rpc")] == ["Filecoin.Cordon", "Filecoin.Uncordon"]
    assert not c.unschedulable() and not c.cordon_file().exists()
    proves_on_and_lost_nothing(c, feeder)
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed" and entry["lost"] == 0 and entry["cordon"]["uncordoned"] is True
    token = dict(c.curio["env"].items())["CURIO_API_TOKEN"]
    assert token not in r.stdout + r.stderr and token not in json.dumps(entry)


def test_a_token_the_node_refuses_stops_nothing_and_says_which_call(box, curio_farm, prover, prover_b):  # noqa: F811
    """A token signed with another secret: the node answers 401, the swap refuses before any stop and names
    the call that failed; the node was never cordoned, the old build runs on."""
    c = Cordoned(box, curio_farm, synth_ms=100, curio=_api(curio_farm, secret="b3RoZXIgc2VjcmV0"))
    old = c.d.start(prover)
    r = c.deploy(prover_b)
    assert r.returncode != 0
    said = " ".join(r.stderr.split())
    assert "Filecoin.Cordon" in said and "failed" in said and "nothing was stopped" in said, said
    assert old in box.daemons() and not c.unschedulable()
    assert [f["method"] for _, _, f in c.node.events("rpc")] == []  # no call got through
    calls = [(method, said) for _, method, said in c.node.stop()["rpc"]]
    assert calls[0] == ("Filecoin.Cordon", "401") and all(said == "401" for _, said in calls), calls
