"""Curio's cordon through the Ansible collection (issue 43): the real ansible-core runs the farm play against
the box's real sshd, whose daemon a Curio node stand-in feeds from a real PostgreSQL holding Curio's tables
(tests/curio_lab.py). The module gives the host's swap script the cordon's inputs from the same swap core as
`swapctl deploy` (swapctl/swap/inputs.py), so the host cordons, drains, swaps and uncordons as it does there."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml
from curio_lab import curio_db, curio_farm  # noqa: F401
from test_ansible import BIN, ansible_env, collection  # noqa: F401
from test_cordon import Cordoned, proves_on_and_lost_nothing
from test_cordon_ui import SINCE, left_by_a_dead_swap, swapped_once

from lab import swapctl, wait_until
from test_deploy import journal, sha

pytestmark = pytest.mark.usefixtures("swapctl_env")


def exported(c: Cordoned, tmp_path) -> tuple:
    """`swapctl export-ansible` of the box's playbook (stop = "cordon", [curio] with its database's password),
    as a farm's operator runs it: the inventory's path, and the group_vars and secrets it wrote."""
    r = swapctl("export-ansible", str(tmp_path / "ansible"), "-p", str(c.box.playbook_path))
    assert r.returncode == 0, r.stderr
    inv = tmp_path / "ansible" / "inventory.ini"
    inv.write_text(inv.read_text() + f"\n[cuzk:vars]\nansible_python_interpreter={shutil.which('python3')}\n")
    group = tmp_path / "ansible" / "group_vars" / "cuzk"
    return inv, yaml.safe_load((group / "swapctl.yml").read_text()), yaml.safe_load((group / "secrets.yml").read_text())


def test_the_farm_play_cordons_the_curio_node_under_saturating_load_and_loses_no_proof(
        box, curio_farm, collection, tmp_path, prover, prover_b):  # noqa: F811
    c = Cordoned(box, curio_farm, synth_ms=200, drain_timeout_s=60)
    c.d.start(prover)
    feeder = curio_farm.feed(mix="PoRep=3,UpdateProve=1", backlog=4)  # Curio's MaxPending full, a backlog waiting
    wait_until(lambda: curio_farm.owned(c.node) >= 2, what="the node to own work")
    inv, variables, secrets = exported(c, tmp_path)
    assert variables["swapctl_daemon"]["stop"] == "cordon" and variables["swapctl_curio"]["nodes"] == [c.node.listen]
    assert set(secrets["swapctl_curio_env"]) == {k for k in curio_farm.db.env() if k.startswith("CURIO_DB_")}
    (tmp_path / "ansible" / "host_vars").mkdir()
    (tmp_path / "ansible" / "host_vars" / "lab.yml").write_text(yaml.safe_dump(
        {"swapctl_build": str(prover_b), "swapctl_build_sha256": sha(prover_b)}))
    r = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), "swapctl.cuzk.farm", "-v"],
                       env=ansible_env(collection, tmp_path), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-4000:]
    assert curio_farm.db.env()["CURIO_DB_PASSWORD"] not in r.stdout + r.stderr  # no_log: the database's password
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed" and entry["to"] == sha(prover_b) and entry["lost"] == 0
    assert entry["by"].startswith("ansible ")  # the module's swap, not swapctl's
    cordon = entry["cordon"]
    assert cordon["nodes"] == c.node.listen and cordon["uncordoned"] is True
    assert cordon["drain_s"] >= 1.0 and cordon["cordon_s"] >= cordon["drain_s"]  # at least one poll interval
    assert not c.unschedulable() and not c.cordon_file().exists()
    proves_on_and_lost_nothing(c, feeder)


def test_the_module_refuses_a_cordon_without_nodes_in_one_line_and_the_daemon_runs_on(
        box, curio_farm, collection, tmp_path, prover, prover_b):  # noqa: F811
    c = Cordoned(box, curio_farm, synth_ms=200)
    old = c.d.start(prover)
    inv, _, _ = exported(c, tmp_path)
    group = tmp_path / "ansible" / "group_vars" / "cuzk" / "swapctl.yml"
    variables = yaml.safe_load(group.read_text())
    variables["swapctl_curio"]["nodes"] = ["10.0.0.5"]  # no port: no node's `curio run --listen`
    group.write_text(yaml.safe_dump(variables))
    (tmp_path / "ansible" / "host_vars").mkdir()
    (tmp_path / "ansible" / "host_vars" / "lab.yml").write_text(yaml.safe_dump(
        {"swapctl_build": str(prover_b), "swapctl_build_sha256": sha(prover_b)}))
    r = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), "swapctl.cuzk.farm"],
                       env=ansible_env(collection, tmp_path), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode != 0
    assert "curio.nodes: '10.0.0.5' is not a node's host:port" in r.stdout and "nothing changed" in r.stdout
    assert box.daemons() == [old] and not (box.data / ".swapctl" / "cuzk" / "journal.jsonl").exists()
    assert not c.unschedulable()


def test_the_status_module_shows_a_cordon_a_dead_swap_left_and_the_farm_play_lifts_it_before_it_swaps(
        box, curio_farm, collection, tmp_path, prover, prover_b):  # noqa: F811
    """As `swapctl status` and `swapctl deploy` do (tests/test_cordon_ui.py): the status module's fact names the
    cordon swapctl left, and the swap module lifts it before it plans, then cordons the node as its own."""
    c = swapped_once(box, curio_farm, prover, prover_b, synth_ms=200)  # the state directory is swapctl's
    left_by_a_dead_swap(c)
    inv, variables, secrets = exported(c, tmp_path)
    # CURIO_DB_HOST left to its default (127.0.0.1): Ansible masks a no_log value wherever it appears, and
    # here the database's host is the node's too
    env = {k: v for k, v in secrets["swapctl_curio_env"].items() if k != "CURIO_DB_HOST"}
    settings = json.dumps({"daemon": variables["swapctl_daemon"], "host": "lab",
                           "curio": {**variables["swapctl_curio"], "env": env}})
    out = subprocess.run([str(BIN / "ansible"), "-i", str(inv), "lab", "-m", "swapctl.cuzk.status", "-a", settings,
                          "-o"], env=ansible_env(collection, tmp_path), capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:]
    seen = json.loads(out.stdout.split("=> ", 1)[1])["ansible_facts"]["swapctl_status"]["cordon"]
    assert seen["ours"] == {"nodes": [c.node.listen], "since": SINCE, "by": "alice@laptop", "action": "deploy"}
    assert seen["nodes"] == {c.node.listen: "cordoned by swapctl"} and not seen["swap_running"]
    assert f"cordon: cordoned by swapctl since {SINCE} (deploy by alice@laptop)" in seen["said"][0]
    assert c.unschedulable()  # the status module only reads
    (tmp_path / "ansible" / "host_vars").mkdir()
    (tmp_path / "ansible" / "host_vars" / "lab.yml").write_text(yaml.safe_dump(
        {"swapctl_build": str(prover), "swapctl_build_sha256": sha(prover)}))  # back to A, through the play
    curio_farm.feed(mix="PoRep=1", backlog=1)  # the play's canary gate waits for the new build's proofs
    r = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), "swapctl.cuzk.farm"],
                       env=ansible_env(collection, tmp_path), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-4000:]
    assert f"uncordoned {c.node.listen}: a cordon swapctl left" in " ".join((r.stdout + r.stderr).split())  # a warning
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed" and entry["to"] == sha(prover) and entry["cordon"]["nodes"] == c.node.listen
    assert entry["cordon"]["uncordoned"] is True
    assert not c.unschedulable() and not c.cordon_file().exists()
