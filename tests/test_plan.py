"""The plan's pure readers and choices, in tables: no host needed."""

import json

import pytest

from swapctl.errors import BadInput
from swapctl.facts.catalog import of_sections as read_catalog
from swapctl.facts.journal_entry import JournalEntry
from swapctl.facts.releases import Release
from swapctl.fleet import fail_budget
from swapctl.logs.timings import release_segments
from swapctl.swap.command import config_paths
from swapctl.swap.plan import Backup, cgroup_unit


@pytest.mark.parametrize("argv, paths", [
    (("/data/cuzk", "--config", "/data/cuzk.toml"), ["/data/cuzk.toml"]),
    (("/data/cuzk", "-c", "a.toml", "--config=b.toml"), ["a.toml", "b.toml"]),
    (("/data/cuzk", "--config"), []),  # a flag without its value names nothing
    (("/data/cuzk", "--listen", "0.0.0.0:9820"), []),
])
def test_config_paths(argv, paths):
    assert config_paths(argv) == tuple(paths)


@pytest.mark.parametrize("cgroup, unit", [
    ("0::/system.slice/cuzk.service\n", "cuzk.service"),  # cgroup v2
    ("12:pids:/system.slice/cuzk.service\n1:name=systemd:/system.slice/cuzk.service\n", "cuzk.service"),  # v1
    ("0::/user.slice/user-0.slice/session-3.scope\n", None),  # started by hand in a login session
    ("0::/user.slice/user-0.slice/user@0.service\n", None),
    ("", None),
])
def test_cgroup_unit(cgroup, unit):
    assert cgroup_unit(cgroup) == unit


def manifest(rid: str) -> str:
    """A releases line as the inspect script prints it: the directory's name, a tab, its manifest."""
    sha = rid * 4 + "0" * 52
    return f"{sha[:12]}\t" + Release(sha256=sha, size=1, name="cuzk", created="2026-01-01", by="t").to_json()


@pytest.mark.parametrize("facts, current, ids, journal", [
    ({}, None, [], 0),
    ({"binary": "file 3f2a"}, None, [], 0),
    ({"binary": "link /data/.swapctl/cuzk/releases/aaaaaaaaaaaa/cuzk",
      "releases": manifest("aaa") + "\n{\"sha256\": \"half-writ", "journal":
      json.dumps({"action": "deploy", "outcome": "deployed", "current": "aaaaaaaaaaaa"}) + "\n{\"cut\n[1]"},
     "aaaaaaaaaaaa", ["aaaaaaaaaaaa"], 1),  # a half-written manifest and a cut journal line are skipped
])
def test_read_catalog(facts, current, ids, journal):
    cat = read_catalog(facts, "lab:/data/.swapctl/cuzk/journal.jsonl")
    assert (cat.current, sorted(cat.releases), len(cat.journal)) == (current, ids, journal)
    assert cat.notes() == (("journal lab:/data/.swapctl/cuzk/journal.jsonl: 2 lines skipped (not journal entries)",)
                           if journal else ())
    assert cat.deployed == (("aaaaaaaaaaaa",) if journal else ())


@pytest.mark.parametrize("max_fail, hosts, budget", [
    (None, 10, None), ("0", 10, 0), ("2", 10, 2), ("25%", 10, 2), ("50%", 3, 1), ("100%", 4, 4), ("0%", 8, 0),
])
def test_fail_budget(max_fail, hosts, budget):
    assert fail_budget(max_fail, hosts) == budget


@pytest.mark.parametrize("max_fail", ["two", "%", "1.5x"])
def test_a_fail_budget_that_is_no_number_is_bad_input(max_fail):
    with pytest.raises(BadInput, match="neither a number of hosts nor a percentage"):
        fail_budget(max_fail, 4)


A_ID, B_ID = "a" * 12, "b" * 12


def start(offset: int, current: str, frm: str | None = None) -> JournalEntry:
    return JournalEntry(action="deploy", outcome="deployed", log_offset=offset, current=current, from_sha=frm)


@pytest.mark.parametrize("journal, size, segments", [
    ([], 100, []),
    ([start(0, A_ID)], 100, [(A_ID, 0, 100)]),
    # what came before the first start is labelled by the release that start replaced
    ([start(40, B_ID, A_ID + "f" * 52)], 100, [(A_ID, 0, 40), (B_ID, 40, 100)]),
    ([start(10, A_ID), start(60, B_ID), JournalEntry(action="experiment")], 100,
     [("before", 0, 10), (A_ID, 10, 60), (B_ID, 60, 100)]),
    # a log truncated since: offsets past its end are skipped
    ([start(0, A_ID), start(500, B_ID)], 100, []),
])
def test_release_segments(journal, size, segments):
    assert release_segments(journal, size) == segments


def release(rid: str, created: str, status: str = "ok", source: str = "upload") -> Release:
    return Release(sha256=rid * 4, size=1, name="cuzk", created=created, by="t", status=status, source=source)


@pytest.mark.parametrize("facts, running, saved", [
    # the first deploy adopts the daemon it finds, and keeps a plain file at the binary path too
    ({"binary": "file " + "f" * 64}, "a" * 64, ["/proc/42/exe", "/data/cuzk"]),
    ({"binary": "file " + "a" * 64}, "a" * 64, ["/proc/42/exe"]),  # the file is what runs: once
    ({"binary": "link /data/.swapctl/cuzk/releases/aaaaaaaaaaaa/cuzk"}, "a" * 64, []),  # known already
    ({"binary": "missing"}, None, []),
    # a release whose first 12 hex digits are the daemon's is not it: the whole sha256 is compared
    ({"binary": "link /data/.swapctl/cuzk/releases/aaaaaaaaaaaa/cuzk"}, "a" * 12 + "b" * 52, ["/proc/42/exe"]),
])
def test_what_is_saved_before_the_stop(facts, running, saved):
    from swapctl.swap.plan import Daemon, backups

    daemon = Daemon(pid=42, sha256=running, size=1, argv=("/data/cuzk",), cwd="/data", env=(), unit=None,
                    group_leader=True, rss_kib=1, elapsed_s=1) if running else None
    known = {"aaaaaaaaaaaa": release("a" * 16, "2026-01-01")} if "link" in facts["binary"] else {}
    assert [b.source for b in backups("/data/cuzk", facts, daemon, known)] == saved


OLD, MID, NEW = release("aaa", "2026-01-01"), release("bbb", "2026-01-02"), release("ccc", "2026-01-03")


@pytest.mark.parametrize("running, releases, history, fallback", [
    (MID.id, [OLD, MID], (OLD.id, MID.id), MID),  # what runs now
    (None, [OLD, MID], (OLD.id, MID.id), MID),  # nothing runs: the last one deployed
    (NEW.id, [OLD, MID, NEW], (OLD.id, MID.id, NEW.id), MID),  # it runs already (--restart): the one before
    (MID.id, [OLD, release("bbb", "2026-01-02", status="bad")], (OLD.id, MID.id), OLD),  # never a bad one
    (None, [], (), None),  # a first deploy: nothing to go back to
])
def test_what_a_failed_start_goes_back_to(running, releases, history, fallback):
    plan = _deploy_plan(daemon=None, releases={r.id: r for r in releases}, current=running, to_save=(),
                        history=history)
    assert plan.way_back() == fallback


@pytest.mark.parametrize("pattern, exe, names", [
    ("cuzk", "/data/cuzk", True),                      # its file name
    ("cuzk", "/data/cuzk/sleep", False),               # a directory so named is not the program
    ("data/cuzk", "/data/cuzk", True),                 # a tail of the path, after a `/`
    ("/data/cuzk", "/data/cuzk", True),                # with it
    ("^/data/cuzk$", "/data/cuzk", True),              # anchored
    ("ata/cuzk", "/data/cuzk", False),                 # a tail must begin at a `/`
    ("(?i)cuzk", "/opt/CUZK", True),                   # inline flags: `(?:(?i)cuzk)\Z` was an error
    ("(?i)data/cuzk", "/DATA/cuzk", True),
    ("cuzk-daemon", "/usr/bin/tail", False),
])
def test_what_daemon_match_names_as_a_program(pattern, exe, names):
    import re

    from swapctl.swap.preflight import names_program
    assert names_program(re.compile(pattern), exe) is names


def test_a_binary_read_once_is_read_again_when_it_changes_even_with_its_mtime_put_back(tmp_path, lab_dir):
    """elf.inspect keeps what it read per version of the file, for a fleet's many plans; a rebuild in place
    (same size, the mtime set back as `cp -p` or `touch -r` would) is a new version: its ctime moved."""
    import hashlib
    import os
    import shutil

    from swapctl.sandbox import build_prover
    from swapctl.swap import elf

    binary = tmp_path / "cuzk"
    shutil.copy(build_prover(lab_dir / "bin" / "prover-a", TIMING="1", TAG="a"), binary)
    first = elf.inspect(str(binary))
    assert elf.inspect(str(binary)) == first
    st = binary.stat()
    data = bytearray(binary.read_bytes())
    data[-1] ^= 0xFF  # the same size, another build
    binary.write_bytes(bytes(data))
    os.utime(binary, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = elf.inspect(str(binary))
    assert again.sha256 == hashlib.sha256(data).hexdigest() != first.sha256


def test_a_backup_once_the_daemon_is_gone_keeps_the_plain_file_and_takes_the_build_from_the_binary_path():
    """The review found the first version of this blanking every copy's source, a plain file's too (whose
    backup then failed: `cp ''`)."""
    rel = Release(sha256="a" * 64, size=1, name="cuzk", created="2026-01-01T00:00:00Z", by="x")
    disk = Backup("/data/cuzk", rel)
    assert disk.once_gone() == disk
    assert Backup("/proc/7/exe", rel).once_gone() is None
    assert Backup("/proc/7/exe", rel, or_file="/data/cuzk").once_gone() == Backup("/data/cuzk", rel)


def _deploy_plan(**more):
    from swapctl.swap.elf import LocalBinary
    from swapctl.swap.plan import Daemon, DeployPlan, Method, Partial

    daemon = Daemon(pid=42, sha256="d" * 64, size=1, argv=("/data/cuzk",), cwd="/data", env=(), unit=None,
                    group_leader=True, rss_kib=1, elapsed_s=1)
    adopted = Release(sha256="d" * 64, size=1, name="cuzk", created="2026-01-04", by="t", source="adopted")
    fields = dict(host="lab", status=None, daemon=daemon, releases={r.id: r for r in (OLD, MID)}, current=MID.id,
                  to_save=(Backup("/proc/42/exe", adopted),), warnings=(), history=(OLD.id, MID.id), new=NEW,
                  binary=LocalBinary("/tmp/cuzk", NEW.sha256, 1, "x86_64"), upload=Method("zstd", offset=7),
                  partials=(Partial("/data/.swapctl/cuzk/releases/.upload-eeeeeeeeeeee", 3),))
    return DeployPlan(**{**fields, **more})


def test_a_deploy_plan_is_its_steps_in_the_order_they_run():
    """issue 32: lock, upload by the plan's method, backup, the swap with its way back, pruning."""
    from swapctl.swap import steps

    plan = _deploy_plan()
    lock, send, save, swap, prune = steps.of(plan)
    assert (lock, send, save) == (steps.Lock(), steps.Send(plan.upload), steps.Save(plan.to_save))
    adopted = plan.to_save[0].release
    assert swap == steps.SwapIn("deploy", NEW, adopted)  # what runs now, saved before the stop, is the way back
    assert prune.protect == {NEW.id, adopted.id} and prune.stale == (plan.partials[0].path,)
    assert {r.id for r in prune.releases} == {OLD.id, MID.id, NEW.id, adopted.id}


def test_once_the_daemon_exited_by_itself_the_steps_after_the_backup_are_made_from_the_plan_it_leaves():
    """With gone_before_stop = "deploy", a daemon whose /proc/PID/exe is gone is neither saved nor gone back
    to: the swap's way back is then the last good release deployed, and the pruning protects that one."""
    from dataclasses import replace

    from swapctl.swap import steps

    plan = _deploy_plan()
    left = replace(plan, daemon=None, to_save=tuple(k for b in plan.to_save if (k := b.once_gone())))
    _, _, save, swap, prune = steps.of(left)
    assert save == steps.Save(()) and swap == steps.SwapIn("deploy", NEW, MID)
    assert prune.protect == {NEW.id, MID.id}


def test_a_rollback_plan_is_lock_backup_and_the_swap_back_to_what_ran():
    from swapctl.swap import steps
    from swapctl.swap.plan import Plan

    plan = Plan(host="lab", status=None, daemon=None, releases={r.id: r for r in (OLD, MID, NEW)}, current=NEW.id,
                to_save=(), warnings=(), history=(OLD.id, MID.id, NEW.id), new=MID)
    assert steps.of(plan) == (steps.Lock(), steps.Save(()), steps.SwapIn("rollback", MID, NEW))


def test_a_resumed_upload_is_said_after_its_paths_whatever_the_method():
    """--dry-run: `sftp put SRC DST (resumed after N bytes)` and `receive a zstd stream (zstd -d) into DST
    (resumed after N bytes)`; the resume once said inside the method's words, before the paths."""
    from swapctl.swap.plan import Method

    assert (Method("sftp", offset=7).said(), Method("sftp", offset=7).resumed()) == ("sftp put",
                                                                                     " (resumed after 7 bytes)")
    assert (Method("zstd").said(), Method("zstd").resumed()) == ("a zstd stream (zstd -d)", "")
