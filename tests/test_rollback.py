"""`swapctl rollback` and `swapctl history` against the real sshd and real prover processes."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from swapctl.facts.journal_entry import read

from lab import prover_config, swapctl
from test_deploy import cmdline, deploy, exe_sha, journal, sha


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def rollback(box, *extra: str):
    return swapctl("rollback", "lab", "--yes", "-p", str(box.playbook_path), *extra)


def releases(box) -> set[str]:
    return {p.name for p in (box.data / ".swapctl" / "cuzk" / "releases").iterdir() if not p.name.startswith(".")}


def test_rollback_restarts_old_daemon_with_same_args_and_bytes(box, prover, prover_b):
    old = box.start_by_hand(prover)
    argv = cmdline(old)
    assert deploy(box, prover_b).returncode == 0
    r = rollback(box)
    assert r.returncode == 0, r.stderr
    assert f"rolled back to {sha(prover)[:12]}" in r.stdout
    pid = box.one_daemon()
    assert cmdline(pid) == argv and exe_sha(pid) == sha(prover)
    assert sha(box.binary.resolve()) == sha(prover)  # the binary on disk is byte-identical to A
    assert journal(box)[-1]["action"] == "rollback" and journal(box)[-1]["outcome"] == "rolled-back"


def test_rollback_after_adoption_restores_the_hand_started_command_line(box, prover, prover_b, tmp_path):
    # an engineer ran another file with another config, by hand
    hand = box.data / "cuzk-priodisp"
    shutil.copy(prover, hand)
    config = tmp_path / "cuzk-memtest-config.toml"
    config.write_text(prover_config(memory_mib=24))
    box.config.write_text(prover_config())
    import subprocess

    proc = subprocess.Popen([str(hand), "--config", str(config)], stdout=open(box.log, "ab"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=tmp_path, start_new_session=True,
                            env={"PATH": "/usr/bin:/bin", "RUST_LOG": "debug", "HOME": "/root"})
    from lab import wait_until

    wait_until(lambda: "ready" in box.log.read_text(errors="replace"), what="ready")
    box.write_playbook(daemon={"match": re.escape(str(box.data)) + "/cuzk"})  # cuzk and cuzk-priodisp
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    b = box.one_daemon()
    assert cmdline(b) == [str(box.binary), "--config", str(box.config)]
    r = rollback(box)
    assert r.returncode == 0, r.stderr
    a = box.one_daemon()
    assert cmdline(a) == [str(hand), "--config", str(config)]
    assert os.readlink(f"/proc/{a}/cwd") == str(tmp_path)
    env = dict(kv.split("=", 1) for kv in Path(f"/proc/{a}/environ").read_text().split("\0") if "=" in kv)
    assert env == {"PATH": "/usr/bin:/bin", "RUST_LOG": "debug", "HOME": "/root"}
    assert exe_sha(a) == sha(prover)
    proc.wait(0)  # the hand-started original was stopped by the deploy


def _three_releases(box, prover, prover_b, lab_dir):
    from lab import build_prover

    prover_c = build_prover(lab_dir / "bin" / "prover-c", TIMING="1", TAG="c")
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    assert deploy(box, prover_c).returncode == 0
    return prover_c


def test_rollback_to_an_older_release_by_prefix_and_by_index(box, prover, prover_b, lab_dir):
    prover_c = _three_releases(box, prover, prover_b, lab_dir)
    r = rollback(box, "--to", sha(prover)[:8])
    assert r.returncode == 0, r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover)]
    h = json.loads(swapctl("history", "lab", "--json", "-p", str(box.playbook_path)).stdout)
    index = {r["sha256"]: r["index"] for r in h["releases"]}
    assert index[sha(prover_c)] == 1  # newest first
    r = rollback(box, "--to", str(index[sha(prover_c)]))
    assert r.returncode == 0, r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_c)]


def test_two_rollbacks_in_a_row_toggle_between_the_last_two(box, prover, prover_b, lab_dir):
    prover_c = _three_releases(box, prover, prover_b, lab_dir)
    assert rollback(box).returncode == 0
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_b)]
    r = rollback(box)  # back to what ran before B: C, which it was rolled back from
    assert r.returncode == 0, r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_c)]


def test_rollback_deploy_rollback_returns_to_the_baseline(box, prover, prover_b, lab_dir):
    from lab import build_prover

    prover_x = build_prover(lab_dir / "bin" / "prover-x", TIMING="1", TAG="x")
    box.start_by_hand(prover)  # A
    assert deploy(box, prover_b).returncode == 0
    assert rollback(box).returncode == 0  # A runs again
    assert deploy(box, prover_x).returncode == 0
    assert journal(box)[-1]["from"] == sha(prover)
    h = json.loads(swapctl("history", "lab", "--json", "-p", str(box.playbook_path)).stdout)
    assert h["current"] == sha(prover_x)[:12] and h["rollback_target"] == sha(prover)[:12]
    table = swapctl("history", "lab", "-p", str(box.playbook_path)).stdout
    assert "< `swapctl rollback` goes back to it" in table
    r = rollback(box)
    assert r.returncode == 0, r.stderr
    assert f"rolled back to {sha(prover)[:12]}" in r.stdout  # A, which ran before X; never B
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover)]


def test_rollback_skips_a_release_marked_bad(box, prover, prover_b, prover_crash):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    assert deploy(box, prover_crash).returncode == 4  # auto rollback to B; the crash build is marked bad
    r = rollback(box)
    assert r.returncode == 0, r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover)]


def test_pruning_keeps_the_current_and_the_rollback_target(box, prover, prover_b, prover_crash, lab_dir):
    from lab import build_prover

    prover_c = build_prover(lab_dir / "bin" / "prover-c", TIMING="1", TAG="c")
    box.write_playbook(releases={"keep": 2})
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    assert deploy(box, prover_crash).returncode == 4
    assert deploy(box, prover_c).returncode == 0
    assert releases(box) == {sha(prover_b)[:12], sha(prover_c)[:12]}
    assert rollback(box).returncode == 0
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_b)]


def test_rollback_whose_target_fails_exits_unknown_state_and_says_what_runs(box, prover, prover_b):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    # A cannot start: its recorded cwd is gone. (A damaged copy of A is refused before anything stops now,
    # as its sha256 is checked again: tests/test_security.py.)
    manifest = box.data / ".swapctl/cuzk/releases" / sha(prover)[:12] / "manifest.json"
    recorded = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**recorded, "cwd": str(box.data / "gone")}))
    r = rollback(box)
    assert r.returncode == 5, r.stderr
    assert f"the rollback to {sha(prover)[:12]} failed" in r.stderr
    pid = box.one_daemon()
    assert exe_sha(pid) == sha(prover_b)
    assert f"{sha(prover_b)[:12]}, which ran before, runs again as pid {pid}" in r.stderr


def test_history_table_marks_current_release(box, prover, prover_b):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    r = swapctl("history", "lab", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    assert sha(prover_b)[:12] in r.stdout and "adopted" in r.stdout and "deploy" in r.stdout
    h = json.loads(swapctl("history", "lab", "--json", "-p", str(box.playbook_path)).stdout)
    assert h["current"] == sha(prover_b)[:12]
    assert [r["source"] for r in h["releases"]] == ["upload", "adopted"]
    assert "env" not in h["releases"][0]  # environment values stay on the host
    # the deploy from here says which local file it sent; history shows it beside that release
    assert h["journal"][-1]["upload"]["from"] == str(prover_b.resolve())
    r = swapctl("history", "lab", "-p", str(box.playbook_path), env={"COLUMNS": "400"})
    [row] = [line for line in r.stdout.splitlines() if sha(prover_b)[:12] in line and "│ 1 " in line]
    assert f"from {prover_b.resolve()}" in row, r.stdout


# Lines in the host's journal that no swapctl wrote: a hand edit, a shape no entry has, a write cut short
NOT_ENTRIES = ("[1]", json.dumps({"action": "deploy", "outcome": "deployed", "current": "a\nb", "log_offset": 0}),
               '{"action": "deploy", "by": "root@x", "fro')


def plant(box, *lines: str) -> None:
    """Appends `lines` to the host's journal as something other than swapctl would."""
    with open(box.data / ".swapctl" / "cuzk" / "journal.jsonl", "a") as f:
        f.write("".join(line + "\n" for line in lines))


def test_history_rollback_and_deploy_skip_and_count_journal_lines_that_are_no_entries(box, prover, prover_b):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    plant(box, *NOT_ENTRIES)
    note = f"journal lab:{box.data}/.swapctl/cuzk/journal.jsonl: 3 lines skipped (not journal entries)"
    h = swapctl("history", "lab", "--json", "-p", str(box.playbook_path))
    assert h.returncode == 0, h.stderr
    assert note in h.stderr and [e["action"] for e in json.loads(h.stdout)["journal"]] == ["deploy"]
    table = swapctl("history", "lab", "-p", str(box.playbook_path))
    assert table.returncode == 0 and note in table.stderr, table.stderr
    r = rollback(box)
    assert r.returncode == 0 and note in r.stderr, r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover)]
    r = deploy(box, prover_b)
    assert r.returncode == 0 and note in r.stderr, r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_b)]
    entries, skipped = read((box.data / ".swapctl" / "cuzk" / "journal.jsonl").read_text())
    assert [e.action for e in entries] == ["deploy", "rollback", "deploy"] and skipped == 3


# Issue 44: a release saved from the disk (no daemon ran, so no command line was read) started as a bare
# binary in `/` after a rollback, its --config gone. Each start below must be the playbook's command line.

def _killed_by_hand(box, prover) -> None:
    """The issue's steps 1-2: a daemon started by hand with its config, that then died on its own (SIGKILL):
    the binary path holds its build as a plain file and nothing runs."""
    pid = box.start_by_hand(prover)
    os.kill(pid, 9)
    from lab import wait_until

    wait_until(lambda: not box.daemons(), what="the daemon to be gone")


def _runs_as_the_playbook_says(box, binary) -> None:
    pid = box.one_daemon()
    assert exe_sha(pid) == sha(binary)
    assert cmdline(pid) == [str(box.binary), "--config", str(box.config)]
    assert os.readlink(f"/proc/{pid}/cwd") == str(box.data)


def _manifest(box, binary) -> dict:
    return json.loads((box.data / ".swapctl/cuzk/releases" / sha(binary)[:12] / "manifest.json").read_text())


def test_the_issues_steps_a_rollback_after_a_deploy_of_the_disk_build_keeps_the_config(box, prover, prover_noready):
    _killed_by_hand(box, prover)
    box.write_playbook(daemon={"ready_timeout_s": 1})
    r = deploy(box, prover)  # the build the binary path already holds
    assert r.returncode == 0, r.stderr
    assert _manifest(box, prover)["argv"] == [str(box.binary), "--config", str(box.config)]
    r = deploy(box, prover_noready)
    assert r.returncode == 4 and f"{sha(prover)[:12]} runs again" in r.stderr, r.stderr
    _runs_as_the_playbook_says(box, prover)


def test_a_failed_start_goes_back_to_a_build_saved_from_the_disk_with_the_playbooks_command_line(
        box, prover, prover_noready):
    _killed_by_hand(box, prover)
    box.write_playbook(daemon={"ready_timeout_s": 1})
    r = deploy(box, prover_noready)
    assert r.returncode == 4, r.stderr
    assert f"release {sha(prover)[:12]} has no recorded command line: it starts with the playbook's" in r.stderr
    _runs_as_the_playbook_says(box, prover)
    recorded = _manifest(box, prover)  # what it started with is its record from now on
    assert recorded["argv"] == [str(box.binary), "--config", str(box.config)] and recorded["cwd"] == str(box.data)


def test_a_rollback_to_a_build_saved_from_the_disk_starts_it_with_the_playbooks_command_line(
        box, prover, prover_b):
    _killed_by_hand(box, prover)
    assert deploy(box, prover_b).returncode == 0
    # The deploy recorded the playbook's command line for the build it would have gone back to ...
    assert _manifest(box, prover)["argv"] == [str(box.binary), "--config", str(box.config)]
    # ... an older swapctl did not: its record of a build saved from the disk says nothing of how it ran.
    path = box.data / ".swapctl/cuzk/releases" / sha(prover)[:12] / "manifest.json"
    path.write_text(json.dumps({**_manifest(box, prover), "argv": None, "cwd": None, "env": []}))
    r = rollback(box)
    assert r.returncode == 0, r.stderr
    assert f"release {sha(prover)[:12]} has no recorded command line: it starts with the playbook's" in r.stderr
    _runs_as_the_playbook_says(box, prover)
    assert _manifest(box, prover)["argv"] == [str(box.binary), "--config", str(box.config)]
