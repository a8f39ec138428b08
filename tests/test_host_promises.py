"""The swap's promises kept on the host when the controller dies, the link drops or the disk is full
(issue 27): the host rolls a failed start back itself, journals every swap itself, and marks bad only
what failed by itself. Real sshd, real prover builds, real SIGKILL and SIGINT, a real full tmpfs."""

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from swapctl.facts.journal_entry import parse
from swapctl.host import scripts
from swapctl.remote.host import LocalHost

from lab import session_of, swapctl, swapctl_in_background, wait_until
from test_deploy import deploy, journal, only_runs, sha


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def state(box) -> Path:
    return box.data / ".swapctl" / "cuzk"


def in_background(box, binary):
    """swapctl deploy as a child whose stderr lines are collected as they come."""
    return swapctl_in_background("deploy", "lab", "--binary", str(binary), "--yes", "-p", str(box.playbook_path))


def said(lines: list[str], text: str) -> bool:
    return any(text in line for line in list(lines))


def host_line(box, action: str = "auto-rollback") -> dict:
    """The journal's last line once the host has written the one for `action`."""
    path = state(box) / "journal.jsonl"
    wait_until(lambda: path.exists() and journal(box)[-1]["action"] == action, timeout=60,
               what=f"the host's {action} journal line")
    return journal(box)[-1]


def is_bad(box, binary) -> bool:
    """Whether swapctl takes the release of `binary` for bad (history reads the host as a rollback does)."""
    h = json.loads(swapctl("history", "lab", "--json", "-p", str(box.playbook_path)).stdout)
    [status] = [r["status"] for r in h["releases"] if r["sha256"] == sha(binary)]
    return status == "bad"


def test_controller_killed_at_the_rolling_back_line_the_host_still_rolls_back_and_journals_it(
        box, prover, prover_crash):
    box.start_by_hand(prover)
    proc, lines, reader = in_background(box, prover_crash)
    wait_until(lambda: said(lines, "rolling back"), what="the rolling-back line")
    proc.kill()  # SIGKILL: the controller dies in the gap where it used to own the rollback
    proc.wait(10)
    wait_until(lambda: only_runs(box, prover), timeout=40, what="the old daemon, started again by the host")
    entry = host_line(box)
    pid = box.one_daemon()
    assert entry["outcome"] == "rolled-back" and entry["pid"] == pid
    assert entry["from"] == sha(prover_crash) and entry["to"] == sha(prover) and entry["current"] == sha(prover)[:12]
    assert "itself" in entry["by"] and entry["reason"] == "it exited before it was ready"
    assert is_bad(box, prover_crash) and not is_bad(box, prover)
    # status says so: nobody saw that swap end (issue 27: "shown by status and history as such")
    shown = swapctl("status", "lab", "-p", str(box.playbook_path), env={"COLUMNS": "200"})
    assert f"last swap: auto-rollback rolled-back at {entry['time']}, finished by {entry['by']}" in shown.stdout
    doc = json.loads(swapctl("status", "lab", "--json", "-p", str(box.playbook_path)).stdout)["hosts"]["lab"]
    assert doc["finished_alone"]["outcome"] == "rolled-back" and doc["finished_alone"]["by"] == entry["by"]


def test_connection_lost_during_the_rollback_is_exit_5_and_the_host_finishes_it(box, prover, prover_crash):
    box.start_by_hand(prover)
    proc, lines, reader = in_background(box, prover_crash)
    wait_until(lambda: said(lines, "rolling back"), what="the rolling-back line")
    os.kill(session_of("swapctl-swap", str(box.data)), signal.SIGKILL)  # the link drops in the rollback
    assert proc.wait(60) == 5  # the host changed twice: never "nothing changed" (3)
    reader.join(5)
    assert said(lines, "the host finishes the swap by itself")
    wait_until(lambda: only_runs(box, prover), timeout=40, what="the old daemon, started again by the host")
    entry = host_line(box)
    assert entry["outcome"] == "rolled-back" and entry["pid"] == box.daemons()[0]


def test_the_old_daemon_killed_in_its_stability_window_is_started_again_and_not_marked_bad(
        box, prover, prover_crash):
    box.write_playbook(daemon={"ready_stable_s": 2})
    box.start_by_hand(prover)
    proc, lines, reader = in_background(box, prover_crash)
    # the crash build never gets there: the first watch is the fallback's, in the rollback
    wait_until(lambda: said(lines, "it must stay up 2 s"), timeout=40, what="the fallback's stability window")
    first = box.one_daemon()
    os.kill(first, signal.SIGKILL)  # someone kills the good old daemon while it is watched
    assert proc.wait(60) == 4, "".join(lines)[-2000:]
    reader.join(5)
    assert only_runs(box, prover) and box.daemons() != [first]
    entry = host_line(box)
    assert entry["outcome"] == "rolled-back" and entry["pid"] == box.daemons()[0]
    assert not is_bad(box, prover)  # killed by someone: it did not fail by itself
    assert is_bad(box, prover_crash)


def test_a_disk_full_to_its_last_byte_during_a_never_ready_deploy_still_rolls_back(
        small_disk, prover, prover_noready, tmp_path):
    box = small_disk
    log = tmp_path / "cuzk.log"  # the daemon logs elsewhere; the state directory's disk is the one that fills
    box.log = log
    box.write_playbook(daemon={"ready_timeout_s": 3, "log": str(log)})
    box.start_by_hand(prover)
    proc, lines, reader = in_background(box, prover_noready)
    wait_until(lambda: said(lines, " start: started "), what="the never-ready build's start")
    filler = box.data / "other-job.out"  # another job writes until the disk is full, as logs do at 3 a.m.
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True)
    subprocess.run(["dd", "if=/dev/zero", f"of={box.data / 'last-bytes'}", "bs=1"], capture_output=True)
    code = proc.wait(60)
    reader.join(5)
    assert code in (4, 5), "".join(lines)[-2000:]
    assert only_runs(box, prover), "".join(lines)[-3000:]  # the fallback runs; the never-ready build does not
    path = state(box) / "journal.jsonl"
    text = path.read_bytes() if path.exists() else b""
    assert all(parse(line) for line in text.decode().split("\n") if line)  # no torn line: whole or nothing
    # and journaled: this host's first swap kept its line's room before the stop (the second campaign's run
    # 107, a first swap on a disk that filled as it ran, journaled nothing: the room was made by a line only)
    assert journal(box)[-1]["action"] == "auto-rollback", text[-2000:]
    filler.unlink()
    assert is_bad(box, prover_noready) and not is_bad(box, prover)


def test_a_hosts_first_swap_on_a_disk_that_fills_as_it_runs_is_journaled(small_disk, prover, prover_b, tmp_path):
    """The second campaign's run 107: a host's first deploy, the disk full to its last byte as the new build
    starts, B running and exit 0, and no journal line: the room a full disk gives back (journal.jsonl.reserve)
    was made by a journal line only, and this host had none yet. The swap keeps it before the stop now."""
    box = small_disk
    box.log = tmp_path / "cuzk.log"  # the daemon logs elsewhere; the state directory's disk is the one that fills
    box.write_playbook(daemon={"log": str(box.log)})
    box.start_by_hand(prover)
    proc, lines, reader = in_background(box, prover_b)
    wait_until(lambda: said(lines, " start: started "), what="B's start")
    # the room is there before the disk fills (whether this disk gives a page back meanwhile, as removing a
    # link with a long target does here, is luck: under /data in the campaign it gave none)
    assert (state(box) / "journal.jsonl.reserve").stat().st_size == 65536
    subprocess.run(["dd", "if=/dev/zero", f"of={box.data / 'other-job.out'}", "bs=1M"], capture_output=True)
    subprocess.run(["dd", "if=/dev/zero", f"of={box.data / 'last-bytes'}", "bs=1"], capture_output=True)
    code = proc.wait(60)
    reader.join(5)
    assert code == 0 and only_runs(box, prover_b), "".join(lines)[-3000:]
    path = state(box) / "journal.jsonl"
    entries = journal(box) if path.exists() else []
    assert [(e["action"], e["outcome"]) for e in entries] == [("deploy", "deployed")], "".join(lines)[-3000:]


def test_a_torn_last_journal_line_is_skipped_and_the_next_line_stays_whole(box, prover, prover_b):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    path = state(box) / "journal.jsonl"
    with open(path, "ab") as f:  # a crash mid-write left half a line, without its newline
        f.write(b'{"action": "deploy", "by": "root@x", "fro')
    r = swapctl("rollback", "lab", "--yes", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    lines = path.read_text().splitlines()
    assert lines[-2].endswith('"fro')  # kept as it was, a line of its own that readers skip
    last = json.loads(lines[-1])
    assert last["action"] == "rollback" and last["outcome"] == "rolled-back" and last["to"] == sha(prover)
    h = swapctl("history", "lab", "--json", "-p", str(box.playbook_path))
    assert h.returncode == 0 and json.loads(h.stdout)["journal"][-1]["action"] == "rollback"


@pytest.fixture
def small_disk(box):
    """The box's data directory on a 48 MiB tmpfs: a host whose disk can really fill up."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(box.data)], check=True)
    yield box
    box.kill_all()
    subprocess.run(["umount", "-l", str(box.data)], check=True)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 16 KiB tmpfs (4 pages): a disk that fills within one journal line."""
    where = tmp_path / "tiny"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(where)], check=True)
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


@contextmanager
def planned(box, binary: Path) -> Iterator[tuple]:
    """A connection to the box, its Swap, and the plan to deploy `binary` (the preflight only: nothing locked)."""
    from swapctl.playbook import load
    from swapctl.remote import connect
    from swapctl.swap.deploy import Swap

    book = load(str(box.playbook_path))
    with connect(book.hosts["lab"]) as host:
        sw = Swap(host, book)
        yield host, sw, sw.plan(str(binary))


def test_a_swap_shell_that_begins_after_its_deploy_lost_the_lock_changes_nothing(box, prover, prover_b):
    """The stateful model found it: an sshd restart killed a rollback's sessions while the swap's shell was
    still in the host's .bashrc; the deploy lock ended with its session, the controller exited 5, and the
    shell read its command later and swapped anyway. A swap begins only while its deploy holds the lock."""
    from swapctl.playbook import load
    from swapctl.swap import swaprun
    from swapctl.swap.deploy import Swap

    pid = box.start_by_hand(prover)
    with planned(box, prover_b) as (host, sw, plan):
        book = load(str(box.playbook_path))
        sw.lock()
        sw.upload(plan)
        sw.unlock()  # as its session's end does
        late = swaprun.swap_cmd(sw.ctx, plan.daemon, plan.new, "", None)
        assert "FAILED the deploy that started this swap no longer holds" in host.run(late).stdout
        other = Swap(host, book)
        other.lock()  # another deploy took the lock meanwhile
        try:
            assert other.ctx.lock_info != sw.ctx.lock_info
            assert "FAILED the deploy that started this swap" in host.run(late).stdout
        finally:
            other.unlock()
            sw.discard_upload()
    assert box.daemons() == [pid] and only_runs(box, prover)  # nothing stopped
    assert not (state(box) / "journal.jsonl").exists() or all(e["outcome"] != "deployed" for e in journal(box))


def test_the_epilogue_shell_runs_nothing_of_a_script_cut_short(tmp_path):
    """The shell that writes the journal line and prunes after a swap waits on its channel; a controller that
    dies mid-send (or a link silent until TCP gives up) hands it part of a script at EOF. `sh -s` ran each
    line it had, a last one cut short too (an `rm -rf` of a release cut back to its parent). Real sh."""
    from swapctl.swap.journal import EPILOGUE, EPILOGUE_END

    victim = tmp_path / "releases"
    (victim / "abc").mkdir(parents=True)
    script = f"set -e\nrm -rf -- {victim}/abc\n{EPILOGUE_END}\n"
    with LocalHost() as host:
        cut = host.prepare(EPILOGUE).send([script[:script.index("/abc")].encode()])  # EOF after `rm -rf -- DIR`
        assert cut.exit_code == 3 and "cut short" in cut.stderr and (victim / "abc").is_dir()
        whole = host.prepare(EPILOGUE).send([script.encode()])
        assert whole.ok and victim.is_dir() and not (victim / "abc").exists()


def test_a_journal_append_the_disk_cuts_short_leaves_the_journal_as_it_was(tiny_disk):
    journal_path = tiny_disk / "journal.jsonl"
    journal_path.write_text('{"action": "deploy", "outcome": "deployed"}\n')
    subprocess.run(["dd", "if=/dev/zero", f"of={tiny_disk / 'filler'}", "bs=1k", "count=10"], capture_output=True)
    before = journal_path.read_bytes()
    line = json.dumps({"action": "deploy", "reason": "x" * 8000})  # more than the disk has left
    with LocalHost() as host:
        r = host.run(scripts.command("append_line.sh", path=str(journal_path), text=line, keep=10,
                                     cap_bytes=1 << 20), check=False)
    assert r.exit_code != 0 and "could not be written" in r.stderr
    assert journal_path.read_bytes() == before  # whole or not at all: no half line


def test_a_second_ctrl_c_stops_the_new_build_at_once_and_does_not_mark_it_bad(box, prover, prover_noready):
    box.write_playbook(daemon={"ready_timeout_s": 600})  # as init's playbook: today it waits all of that
    old = box.start_by_hand(prover)
    proc, lines, reader = in_background(box, prover_noready)
    wait_until(lambda: said(lines, " start: started "), what="the never-ready build's start")
    proc.send_signal(signal.SIGINT)
    wait_until(lambda: said(lines, "the swap finishes"), what="the first Ctrl-C's answer")
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(60)  # a hang guard: the start it interrupts would wait 600 s
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the second Ctrl-C did not stop the new build's start")
    reader.join(5)
    assert code == 4, "".join(lines)[-2000:]
    assert only_runs(box, prover) and box.daemons() != [old]
    assert lines[-1].startswith("swapctl: ") and "a second Ctrl-C" in lines[-1]  # nothing after the final line
    assert not is_bad(box, prover_noready)  # interrupted: it never failed
    entry = journal(box)[-1]
    assert entry["outcome"] == "rolled-back" and entry["reason"] == "a second Ctrl-C"


def test_a_journal_on_a_disk_full_to_its_last_byte_still_takes_the_swaps_line(tmp_path):
    """The journal keeps room in journal.jsonl.reserve and gives it back for a line the full disk refuses:
    the swap that found the disk full is journaled still (found by the stateful model, tests/promises.py)."""
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=True)
    try:
        journal = where / "journal.jsonl"
        lib = scripts.load("lib.sh").body

        def append(text: str) -> int:
            return subprocess.run(["sh", "-c", f'{lib}\nappend_line "$1" "$2" 10 100000', "sh", str(journal), text],
                                  check=False).returncode

        assert append('{"n": 1}') == 0 and (where / "journal.jsonl.reserve").stat().st_size == 65536
        with open(where / "fill", "wb", buffering=0) as f:  # the disk to its last byte
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        assert append('{"n": 2}') == 0
        assert [json.loads(x) for x in journal.read_text().splitlines()] == [{"n": 1}, {"n": 2}]
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_disk_that_fills_after_the_upload_refuses_the_backup_with_nothing_changed(small_disk, prover, prover_b,
                                                                                     tmp_path):
    """The fault campaign (benchmarks/faults.py, disk full at the upload line) found it: the backup of the
    running daemon failed on the full disk and the deploy ended as an error of swapctl's (exit 1). Nothing
    has stopped at that step: it is a refusal (exit 3), and the release store keeps no half-made release."""
    from swapctl.errors import Refused
    from swapctl.swap import save

    box = small_disk
    box.log = tmp_path / "cuzk.log"  # the daemon logs elsewhere; the state directory's disk is the one that fills
    box.write_playbook(daemon={"log": str(box.log)})
    pid = box.start_by_hand(prover)
    with planned(box, prover_b) as (_, sw, plan):
        sw.lock()
        try:
            sw.upload(plan)
            subprocess.run(["dd", "if=/dev/zero", f"of={box.data / 'other-job.out'}", "bs=1M"], capture_output=True)
            subprocess.run(["dd", "if=/dev/zero", f"of={box.data / 'last-bytes'}", "bs=1"], capture_output=True)
            with pytest.raises(Refused) as refused:
                save.backup(sw.ctx, plan)
        finally:
            sw.unlock()
            sw.discard_upload()
    line = str(refused.value)
    assert refused.value.exit_code == 3 and "a backup of /proc/" in line and "No space left" in line, line
    assert "is the disk full? Nothing was stopped or changed" in line, line
    assert box.daemons() == [pid] and only_runs(box, prover)
    [saving] = plan.to_save
    assert not Path(saving.release.dir(sw.ctx.state)).exists()  # the backup's release: not half made
    left = list((state(box) / "releases").rglob("*"))
    assert left and not [p for p in left if p.name.startswith(".")], left  # B's upload is there; no temporary
