"""The release bookkeeping's pure functions, in tables: deploy order, rollback targets, pruning."""

import pytest

from swapctl.facts.journal_entry import entry_of
from swapctl.facts.releases import (
    Release,
    deploy_order,
    previous_good,
    releases_newest_first,
    rollback_target,
    to_prune,
)


def rel(rid: str, created: str, source: str = "upload", status: str = "ok") -> Release:
    return Release(sha256=rid + "0" * 52, size=1, name="cuzk", created=created, by="t", source=source, status=status)


A = rel("aaaaaaaaaaaa", "2026-01-01", source="adopted")
B = rel("bbbbbbbbbbbb", "2026-01-02")
C = rel("cccccccccccc", "2026-01-03")
D = rel("dddddddddddd", "2026-01-04", status="bad")
E = rel("eeeeeeeeeeee", "2025-12-31")  # an upload the journal does not know
ALL = {r.id: r for r in (A, B, C, D, E)}


@pytest.mark.parametrize("releases, deployed, order", [
    ({}, [], []),
    ({A.id: A}, [], [A.id]),
    ({A.id: A, B.id: B, C.id: C}, [B.id, C.id], [A.id, B.id, C.id]),
    # a rollback to B and a deploy of it again: B lands last
    ({A.id: A, B.id: B, C.id: C}, [B.id, C.id, B.id], [A.id, C.id, B.id]),
    # what no deploy landed (the adopted A, uploads the journal lost or whose deploy never landed) by
    # creation time, then the deploys
    (ALL, [B.id, C.id], [E.id, A.id, D.id, B.id, C.id]),
])
def test_deploy_order(releases, deployed, order):
    assert deploy_order(releases, deployed) == order


@pytest.mark.parametrize("current, deployed, expected", [
    (C.id, [B.id, C.id], B),  # the one before
    (B.id, [B.id, C.id], A),  # before B: the adopted one
    (A.id, [B.id, C.id], E),  # before the adopted one: an upload the journal lost, never the bad D
    (E.id, [B.id, C.id], None),  # nothing before the oldest
    (D.id, [B.id, C.id, D.id], C),  # what runs is bad: the last good before it
    ("ffffffffffff", [B.id, C.id, D.id], C),  # not a known release: the newest good one, never a bad one
    (None, [B.id], B),
])
def test_previous_good(current, deployed, expected):
    assert previous_good(ALL, current, deployed) == expected


def test_an_upload_whose_deploy_never_landed_is_no_way_back_for_the_build_that_runs():
    """Found by the promises' model (issue 44's transitions): A runs by hand (saved from the disk), C is
    uploaded and its deploy killed before the swap; a rollback then went to C, which had never run."""
    later = rel("cccccccccccc", "2026-01-03")
    assert previous_good({A.id: A, later.id: later}, A.id, []) is None


def landed(action: str, frm: Release | None, to: Release, **more: str) -> dict:
    return {"action": action, "from": frm.sha256 if frm else None, "to": to.sha256, "current": to.id,
            "outcome": "deployed" if action == "deploy" else "rolled-back", **more}


def back(frm: Release, to: Release) -> dict:
    """A failed start's way back: `to` ran before `frm` was started."""
    return {**landed("auto-rollback", frm, to), "failed_log": "log", "reason": "exited"}


X = rel("ffffffffffff", "2026-01-05")
GOOD = {r.id: r for r in (A, B, C, E, X)}


@pytest.mark.parametrize("current, journal, expected", [
    # A runs; deploy B; rollback (A runs); deploy X: back to A, which ran before X, never to B
    (X.id, [landed("deploy", A, B), landed("rollback", B, A), landed("deploy", A, X)], A),
    # rollback twice toggles
    (A.id, [landed("deploy", A, B), landed("rollback", B, A)], B),
    (B.id, [landed("deploy", A, B), landed("deploy", B, C), landed("rollback", C, B)], C),
    # a failed start and its way back land nothing: what ran before B stays A
    (B.id, [landed("deploy", A, B), back(D, B)], A),
    (B.id, [landed("deploy", A, B), {**landed("rollback", D, B), "failed_log": "log", "reason": "no ready line"}], A),
    # a --restart of what runs does not make it its own target
    (B.id, [landed("deploy", A, B), landed("deploy", B, B)], A),
    # a bad target is skipped for what ran before it, by the same rule
    (C.id, [landed("deploy", A, B), landed("deploy", B, D), landed("deploy", D, C)], B),
    # a chain that comes back to what runs has no target
    (A.id, [landed("deploy", A, D), landed("rollback", D, A)], None),
    # the journal never saw it land: the deploy order
    (C.id, [], B),
])
def test_rollback_target_is_what_ran_before_the_line_that_made_it_current(current, journal, expected):
    releases = {**GOOD, D.id: D}
    deployed = [e["current"] for e in journal if e["action"] == "deploy"] or [B.id, C.id]
    entries = [entry_of(e) for e in journal]  # each a line swapctl could have written
    assert rollback_target(releases, current, entries, deployed) == expected


@pytest.mark.parametrize("keep, protect, pruned", [
    (5, set(), []),
    (3, set(), [A.id, E.id]),  # the oldest go
    (2, {A.id}, [C.id, B.id, E.id]),  # a protected one stays, whatever its age, and counts against keep
    (1, {C.id, A.id}, [D.id, B.id, E.id]),  # never fewer than the protected ones
    (0, set(), [D.id, C.id, B.id, A.id, E.id]),
])
def test_to_prune(keep, protect, pruned):
    assert [r.id for r in to_prune(ALL, keep, protect)] == pruned


def test_history_numbers_releases_newest_first():
    assert [r.id for r in releases_newest_first(ALL)] == [D.id, C.id, B.id, A.id, E.id]


# -- what a build says of itself (issue 43, item 4) ------------------------------------------------------------


def _c_binary(tmp_path, name: str, body: str):
    """A real ELF built here from `body` (C), as a build that answers --version, refuses it, or ignores it."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "these tests build small ELF binaries: apt-get install gcc"
    src = tmp_path / f"{name}.c"
    src.write_text("#include <stdio.h>\n#include <unistd.h>\n" + body)
    subprocess.run([cc, "-o", str(tmp_path / name), str(src)], check=True)
    return tmp_path / name


def test_a_build_is_recorded_with_what_it_says_of_itself_and_nothing_where_it_does_not_answer(tmp_path):
    """`--version`'s first line where the build answers; None for cuzk-daemon's answer (clap with no version
    refuses the flag, exit 2), for a build that ignores it and runs on (killed at the limit, with its
    process group), and for an answer that is not one printable line."""
    import os
    import time

    from swapctl.swap import elf

    answers = _c_binary(tmp_path, "answers", 'int main(int c, char** v) { puts("cuzk-daemon 0.4.1 (e0294b0)"); }')
    refuses = _c_binary(tmp_path, "refuses", 'int main() { fputs("error: unexpected argument \'--version\' '
                                             'found\\n", stderr); return 2; }')
    ignores = _c_binary(tmp_path, "ignores", 'int main() { FILE* f = fopen("pid", "w"); fprintf(f, "%d", '
                                             'getpid()); fclose(f); if (fork() == 0) for (;;) pause(); '
                                             'for (;;) pause(); }')
    garbled = _c_binary(tmp_path, "garbled", 'int main() { puts("v1\\x1b[2J"); }')
    chatty = _c_binary(tmp_path, "chatty", 'int main() { for (;;) puts("v1"); }')  # 4 KiB read, never more
    assert elf.inspect(str(answers)).says == "cuzk-daemon 0.4.1 (e0294b0)"
    assert elf.inspect(str(refuses)).says is None
    began = time.monotonic()
    assert elf.inspect(str(ignores)).says is None
    assert time.monotonic() - began < elf.VERSION_TIMEOUT_S + 2
    assert elf.inspect(str(garbled)).says is None
    assert elf.inspect(str(chatty)).says is None  # killed by its broken pipe once swapctl has read enough
    assert not any(p.isdigit() and "ignores" in _cmdline(p) for p in os.listdir("/proc")), "left running"


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def test_a_manifest_read_back_keeps_what_the_build_said_only_as_one_printable_line():
    """`says` comes back from the host, which is not trusted: shown in tables and the report, it is a line
    of text or the release is not one swapctl wrote."""
    from swapctl.facts.releases import trusted_release

    good = {"sha256": "ab" * 32, "size": 1, "name": "cuzk", "created": "2026-01-01", "by": "t", "says": "prover b"}
    assert trusted_release(good, "ab" * 6).says == "prover b"
    assert trusted_release({**good, "says": None}, "ab" * 6).says is None
    for bad in ("v1\n[hosts.x]", "\x1b[31mred", "x" * 121, 3):
        assert trusted_release({**good, "says": bad}, "ab" * 6) is None, bad
