"""`swapctl deploy` against the real sshd, swapping real stand-in prover processes."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from swapctl.facts.journal_entry import parse
from swapctl.playbook import load
from swapctl.remote import connect
from swapctl.swap.deploy import Swap

from conftest import own_box
from lab import prover_config, session_of, swapctl, swapctl_ctrl_c_at, swapctl_in_background, wait_until


def sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def exe_sha(pid: int) -> str:
    return sha(Path(f"/proc/{pid}/exe"))


def only_runs(box, binary) -> bool:
    """Whether exactly one daemon runs in the box, from `binary`; False while processes come and go."""
    try:
        return [exe_sha(p) for p in box.daemons()] == [sha(binary)]
    except OSError:  # a process ended between the listing and the read
        return False


def journal(box) -> list[dict]:
    """The host's journal, each line as JSON. Every line the host (sh/swap.sh) or swapctl wrote parses as a
    JournalEntry and reads back whole: the type holds each member swap.sh writes, on every path a test takes."""
    path = box.data / ".swapctl" / "cuzk" / "journal.jsonl"
    lines = [line for line in path.read_text().split("\n") if line]
    for line in lines:
        entry = parse(line)
        assert entry is not None and entry.to_dict() == json.loads(line), f"not read back as a JournalEntry: {line}"
    return [json.loads(line) for line in lines]


def deploy(box, binary, *extra: str) -> subprocess.CompletedProcess:
    return swapctl("deploy", "lab", "--binary", str(binary), "--yes", "-p", str(box.playbook_path), *extra)


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def test_adopts_hand_started_daemon_and_swaps_it(box, prover, prover_b):
    old = box.start_by_hand(prover)
    old_argv = cmdline(old)
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    assert "adopted release" in r.stderr and "deployed" in r.stdout
    new = box.one_daemon()
    assert new != old and not Path(f"/proc/{old}/cmdline").read_bytes()  # the old one is gone
    assert exe_sha(new) == sha(prover_b)
    assert cmdline(new) == old_argv  # same command line
    assert box.binary.is_symlink()
    releases = box.data / ".swapctl" / "cuzk" / "releases"
    adopted = json.loads((releases / sha(prover)[:12] / "manifest.json").read_text())
    assert adopted["source"] == "adopted" and adopted["argv"] == old_argv and adopted["cwd"] == str(box.data)
    assert sha(releases / sha(prover)[:12] / "cuzk") == sha(prover)  # a byte-identical backup
    assert oct((box.data / ".swapctl" / "cuzk").stat().st_mode & 0o777) == "0o700"
    assert not [p for p in (box.data / ".swapctl").rglob("*") if p.lstat().st_mode & 0o002]  # none world-writable
    [entry] = journal(box)
    assert entry["outcome"] == "deployed" and entry["from"] == sha(prover) and entry["to"] == sha(prover_b)
    assert set(entry["steps"]) >= {"upload", "stop", "memory", "start", "ready"}
    # the new daemon logs after the recorded offset: the ready line is not the old one's
    after = box.log.read_bytes()[entry["log_offset"]:].decode(errors="replace")
    assert "build=b" in re.sub(r"\x1b\[[0-9;]*m", "", after)


def test_same_binary_is_not_restarted_unless_asked(box, prover):
    pid = box.start_by_hand(prover)
    r = deploy(box, prover)
    assert r.returncode == 0 and "already runs" in r.stdout
    assert box.daemons() == [pid]
    r = deploy(box, prover, "--restart")
    assert r.returncode == 0, r.stderr
    new = box.one_daemon()
    assert new != pid and exe_sha(new) == sha(prover)


def test_crash_at_start_rolls_back_to_old_daemon_with_same_args(box, prover, prover_crash):
    old = box.start_by_hand(prover)
    old_argv = cmdline(old)
    r = deploy(box, prover_crash)
    assert r.returncode == 4, r.stderr
    message = r.stderr.strip().splitlines()
    assert any("failed (it exited before it was ready); rolled back" in line for line in message)
    assert f"Failed log: {box.log} from byte" in r.stderr
    assert "panicked" in r.stderr  # the failed daemon's log tail is shown
    now = box.one_daemon()
    assert exe_sha(now) == sha(prover) and cmdline(now) == old_argv
    bad = json.loads((box.data / ".swapctl/cuzk/releases" / sha(prover_crash)[:12] / "manifest.json").read_text())
    assert bad["status"] == "bad"
    assert journal(box)[-1]["action"] == "auto-rollback" and journal(box)[-1]["outcome"] == "rolled-back"


def test_auto_rollback_journal_keeps_the_failed_deploys_own_step_times(box, prover, prover_crash):
    """The failed deploy waited 1.5 s for the old daemon's memory holder; the rollback swap waited for none."""
    box.start_by_hand(prover, prover_config(child_hold_mib=8, child_linger_ms=1500))
    r = deploy(box, prover_crash)
    assert r.returncode == 4, r.stderr
    entry = journal(box)[-1]
    assert entry["action"] == "auto-rollback"
    assert set(entry["steps"]) >= {"lock", "upload", "backup", "stop", "memory", "start"}
    assert entry["steps"]["memory"] >= 1.2 and entry["rollback_steps"]["memory"] < 1.2


def test_never_ready_rolls_back_after_timeout(box, prover, prover_noready):
    box.write_playbook(daemon={"ready_timeout_s": 1})
    box.start_by_hand(prover)
    r = deploy(box, prover_noready)
    assert r.returncode == 4 and "not ready after 1 s" in r.stderr
    now = box.one_daemon()
    assert exe_sha(now) == sha(prover)


def test_daemon_ignoring_sigterm_gets_sigkill(box, prover, prover_b):
    box.write_playbook(daemon={"stop_grace_s": 1})
    old = box.start_by_hand(prover, prover_config(ignore_sigterm=True))
    os.kill(old, signal.SIGTERM)
    time.sleep(0.2)
    assert box.daemons() == [old]  # it really ignores SIGTERM
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    assert "still running after 1 s: SIGKILL" in r.stderr
    assert journal(box)[-1]["steps"]["stop"] >= 1.0
    new = box.one_daemon()
    assert exe_sha(new) == sha(prover_b)


def _memory_holder(box, daemon_pid: int) -> int:
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != daemon_pid:
            try:
                if (p / "cmdline").read_bytes().startswith(str(box.binary).encode()):
                    return int(p.name)
            except OSError:
                pass
    raise AssertionError("no memory-holding child")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_stray_child_holding_memory_delays_the_new_start(box, prover, prover_b):
    old = box.start_by_hand(prover, prover_config(child_hold_mib=64, child_linger_ms=1500))
    child = _memory_holder(box, old)
    gone_at: list[float] = []

    def watch() -> None:
        while not _gone(child):
            time.sleep(0.005)
        gone_at.append(time.time())

    watcher = threading.Thread(target=watch)
    watcher.start()
    r = deploy(box, prover_b)
    watcher.join(30)
    assert r.returncode == 0, r.stderr
    new = box.one_daemon()
    started = os.stat(f"/proc/{new}").st_mtime  # when the process appeared
    assert gone_at and started >= gone_at[0] - 0.02, "the new daemon started before the old child freed its memory"
    assert journal(box)[-1]["steps"]["memory"] >= 1.2


def test_the_fork_a_killed_daemon_leaves_is_not_the_daemon_and_a_deploy_of_its_build_starts_one(box, prover):
    """Issue 44's campaign (tests/data/faults-h100-2026-12-06): a killed daemon's memory holder, a fork with its
    command line and binary, was reported as the daemon, and a deploy of the same build then said "nothing to
    do" while nothing ran once the fork exited. A fork has one thread; a started cuzk never has (tokio).
    The second and fourth campaigns: a daemon killed in its first seconds left a holder status read as the
    daemon (too young for an age to tell); here it is killed as soon as its holder is there. A fork that never
    ran exec is one however young (PF_FORKNOEXEC)."""
    old = box.start_by_hand(prover, prover_config(child_hold_mib=8, child_linger_ms=30000))
    child = _memory_holder(box, old)
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: _gone(old), what="the daemon's end")
    r = swapctl("status", "lab", "--json", "-p", str(box.playbook_path))
    doc = json.loads(r.stdout)["hosts"]["lab"]
    assert doc["daemons"] == [] and [p["pid"] for p in doc["leftovers"]] == [child], r.stdout
    shown = swapctl("status", "lab", "-p", str(box.playbook_path))
    assert f"not the daemon: pid {child} (one thread" in shown.stdout and "daemon: not running" in shown.stdout
    r = deploy(box, prover)
    assert r.returncode == 0, r.stderr
    assert "nothing to do" not in r.stderr and f"pid {child} (one thread" in r.stderr
    started = [p for p in box.daemons() if p != child]
    assert [exe_sha(p) for p in started] == [sha(prover)] and not _gone(child)


def test_memory_that_never_comes_back_leaves_no_daemon_and_says_so(box, prover, prover_b):
    box.write_playbook(memory={"release_timeout_s": 1})
    box.start_by_hand(prover, prover_config(child_hold_mib=16, child_linger_ms=60000))
    r = deploy(box, prover_b)
    assert r.returncode == 5
    assert "memory not back after 1 s" in r.stderr and "old processes still alive" in r.stderr
    assert "no daemon runs now" in r.stderr


@contextmanager
def lock_held(box):
    """The host's deploy lock, held by another deploy (this test) meanwhile."""
    book = load(box.playbook_path)
    with connect(book.hosts["lab"]) as host:
        first = Swap(host, book)
        first.lock()
        try:
            yield
        finally:
            first.unlock()


def test_second_deploy_is_refused_while_the_first_holds_the_lock(box, prover, prover_b):
    box.start_by_hand(prover)
    with lock_held(box):
        r = deploy(box, prover_b)
    assert r.returncode == 3
    assert "another deploy holds the lock: root@" in r.stderr and f"(pid {os.getpid()})" in r.stderr
    assert len(box.daemons()) == 1 and exe_sha(box.daemons()[0]) == sha(prover)


def test_a_read_only_state_directory_is_named_and_the_daemon_keeps_running(box, prover, prover_b):
    # After a disk error the kernel remounts the filesystem read-only. The lock used to fail without a
    # word, which read as "another deploy holds the lock: another swapctl".
    pid = box.start_by_hand(prover)
    state = box.data / ".swapctl" / "cuzk"
    state.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(state), str(state)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(state)], check=True)
        r = deploy(box, prover_b)
    finally:
        subprocess.run(["umount", str(state)], check=True)
    assert r.returncode == 3, r.stderr
    assert f"cannot take the deploy lock in {state}:" in r.stderr and "Read-only file system" in r.stderr
    assert "another deploy" not in r.stderr
    assert box.daemons() == [pid] and exe_sha(pid) == sha(prover)


def test_lock_is_free_after_the_first_deploy_is_killed(box, prover, prover_b):
    box.start_by_hand(prover, prover_config(child_hold_mib=8, child_linger_ms=3000))
    first = subprocess.Popen([sys.executable, "-m", "swapctl", "deploy", "lab", "--binary", str(prover_b), "--yes",
                              "-p", str(box.playbook_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True)
    info = box.data / ".swapctl" / "cuzk" / "lock.info"
    wait_until(lambda: info.exists() and str(first.pid) in info.read_text(), what="the first deploy's lock")
    first.kill()  # SIGKILL: no cleanup of its own
    first.wait()
    r = deploy(box, prover_b)
    assert "another deploy holds the lock" not in r.stderr
    assert r.returncode == 0, r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_b)]


def _tree(path: Path) -> dict:
    return {str(p): (p.is_symlink() and os.readlink(p)) or (p.is_file() and sha(p)) for p in sorted(path.rglob("*"))}


def test_dry_run_changes_nothing(box, prover, prover_b):
    pid = box.start_by_hand(prover)
    before = _tree(box.data)
    r = deploy(box, prover_b, "--dry-run", "--verbose")
    assert r.returncode == 0, r.stderr
    assert "remote commands it would run" in r.stderr
    assert f"kill -TERM -{pid}" in r.stderr and "sha256sum" in r.stderr
    assert "env -i -- sh" in r.stderr and "setsid" in r.stderr
    assert "dry run, nothing changed" in r.stdout
    after = _tree(box.data)
    assert {k: v for k, v in after.items() if not k.endswith("cuzk.log")} == \
           {k: v for k, v in before.items() if not k.endswith("cuzk.log")}
    assert box.daemons() == [pid]


def test_a_dry_run_says_what_each_step_does_and_shows_the_swap_scripts_inputs_only_when_asked(box, prover, prover_b):
    """issue 47: the dry run printed the swap script's inputs raw (`<swap script> pid=... grace_ms=... bin=...`,
    fifty key=value words on one line) under the plan. It now says what each step does, numbered; --verbose adds
    each step's remote command as it would run, inputs and all."""
    box.start_by_hand(prover)
    plain = deploy(box, prover_b, "--dry-run")
    assert plain.returncode == 0, plain.stderr
    steps = plain.stderr.split("what it would do (--verbose: each remote command as it would run):\n", 1)[1]
    numbered = [line for line in steps.splitlines() if line.startswith("  ")]
    assert [line.split(" ", 4)[2:4] for line in numbered] == [["1.", "the"], ["2.", "receive"], ["3.", "backup"],
                                                              ["4.", "kill"], ["5.", "then,"]], numbered
    assert "<swap script>" not in plain.stderr and "grace_ms=" not in plain.stderr
    loud = deploy(box, prover_b, "--dry-run", "-v")
    assert loud.returncode == 0, loud.stderr
    assert "<swap script>" in loud.stderr and "grace_ms=" in loud.stderr, loud.stderr
    assert loud.stderr.count("\n  # ") == len(numbered)  # the same steps, each above its command


def test_the_dry_run_prints_the_plans_steps_in_the_order_the_deploy_runs_them(box, prover, prover_b):
    """issue 32: the plan is a list of steps (swap/steps.py); deploy runs it and --dry-run prints it, the same
    steps in the same order. A rollback's has no upload and no pruning."""
    from swapctl.swap import steps

    pid = box.start_by_hand(prover)
    book = load(box.playbook_path)
    with connect(book.hosts["lab"]) as host, Swap(host, book) as sw:
        plan = sw.plan(str(prover_b))
        kinds = [type(s) for s in steps.of(plan)]
        said = [what for what, _ in plan.commands]
    assert kinds == [steps.Lock, steps.Send, steps.Save, steps.SwapIn, steps.Prune]
    assert [c.split(" ", 1)[0] for c in said] == ["the", "receive", "backup", "kill", "then,"], said
    assert said[2] == (f"backup (adopted): cp /proc/{pid}/exe {box.data}/.swapctl/cuzk/releases/{sha(prover)[:12]}"
                       f"/cuzk")
    assert said[3].endswith(f"if it fails, back to release {sha(prover)[:12]}; however it ends, one line appended "
                            f"to {box.data}/.swapctl/cuzk/journal.jsonl")
    assert said[4].startswith("then, once the swap went well, no release to remove")
    assert box.daemons() == [pid]
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    assert list(journal(box)[-1]["steps"])[:3] == ["lock", "upload", "backup"]  # run in the plan's order
    with connect(book.hosts["lab"]) as host, Swap(host, book) as sw:
        back = sw.plan_rollback()
        assert [type(s) for s in steps.of(back)] == [steps.Lock, steps.Save, steps.SwapIn]
        assert [what.split(" ", 1)[0] for what, _ in back.commands] == ["the", "kill"]


def test_without_a_terminal_deploy_needs_yes(box, prover, prover_b):
    pid = box.start_by_hand(prover)
    r = swapctl("deploy", "lab", "--binary", str(prover_b), "-p", str(box.playbook_path))
    assert r.returncode == 2 and "pass --yes" in r.stderr
    assert box.daemons() == [pid]


def test_not_an_elf_is_refused_before_any_change(box, prover, tmp_path):
    pid = box.start_by_hand(prover)
    script = tmp_path / "cuzk.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    r = deploy(box, script)
    assert r.returncode == 2 and "is not an ELF executable" in r.stderr
    assert box.daemons() == [pid]


def test_binary_needing_a_missing_library_is_refused_before_the_stop(box, prover, tmp_path):
    pid = box.start_by_hand(prover)
    (tmp_path / "lib.c").write_text("int swapctl_test_fn(void) { return 1; }\n")
    (tmp_path / "main.c").write_text("int swapctl_test_fn(void);\nint main(void) { return swapctl_test_fn(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libswapctlmissing.so"), str(tmp_path / "lib.c")],
                   check=True)
    subprocess.run(["gcc", "-o", str(tmp_path / "needs-lib"), str(tmp_path / "main.c"), f"-L{tmp_path}",
                    "-lswapctlmissing"], check=True)
    r = deploy(box, tmp_path / "needs-lib")
    assert r.returncode == 2 and "needs a library the host lacks: libswapctlmissing.so" in r.stderr
    assert box.daemons() == [pid] and not box.binary.is_symlink()
    assert not list((box.data / ".swapctl" / "cuzk" / "releases").glob("*/cuzk")) or all(
        sha(p) != sha(tmp_path / "needs-lib") for p in (box.data / ".swapctl/cuzk/releases").glob("*/cuzk"))


def test_missing_config_file_is_refused(box, prover, prover_b):
    pid = box.start_by_hand(prover)
    box.write_playbook(daemon={"args": ["--config", str(box.data / "nope.toml")]})
    r = deploy(box, prover_b)
    assert r.returncode == 2 and f"config file {box.data / 'nope.toml'}" in r.stderr
    assert box.daemons() == [pid]


def test_missing_config_file_of_the_running_daemon_is_refused(box, prover, prover_b):
    """No args in the playbook: the command line comes from the running daemon, and so does its config."""
    pid = box.start_by_hand(prover)
    text = box.write_playbook().read_text()
    box.playbook_path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("args")) + "\n")
    box.config.unlink()  # the daemon read it at start; a new one could not
    r = deploy(box, prover_b)
    assert r.returncode == 2 and f"config file {box.config}" in r.stderr
    assert box.daemons() == [pid]


def test_deploy_with_no_daemon_running_starts_it(box, prover):
    box.config.write_text(prover_config())
    r = deploy(box, prover)
    assert r.returncode == 0, r.stderr
    pid = box.one_daemon()
    assert cmdline(pid) == [str(box.binary), "--config", str(box.config)]


def test_first_deploy_that_never_gets_ready_is_stopped_and_says_no_daemon_runs(box, prover_noready):
    """Nothing ran before and no release is there: the failed daemon is stopped, not left running."""
    box.write_playbook(daemon={"ready_timeout_s": 1})
    box.config.write_text(prover_config())
    r = deploy(box, prover_noready)
    assert r.returncode == 5, r.stderr
    assert "there is no earlier release to go back to: no daemon runs now" in r.stderr
    assert f"its log: {box.log} from byte" in r.stderr
    assert box.daemons() == []
    entry = journal(box)[-1]
    assert entry["action"] == "auto-rollback" and entry["outcome"] == "no-daemon"
    assert entry["from"] == sha(prover_noready) and entry["to"] is None
    assert entry["failed_log"].startswith(f"{box.log} from byte")


def test_ready_line_is_seen_when_the_daemon_goes_quiet_after_it(box, prover, prover_b):
    """mawk, Debian's and Ubuntu's awk, fills its input buffer before it reads a line from a pipe: a
    daemon that prints its ready line and then nothing for a while must still be seen as ready."""
    box.write_playbook(daemon={"ready_timeout_s": 10})
    box.start_by_hand(prover, prover_config(jobs=0))
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    entry = journal(box)[-1]
    assert entry["outcome"] == "deployed"
    # seen as ready, not rescued by the deadline: awk reads what is left when the wait times out
    assert entry["steps"]["ready"] < 10


def _deploy_in_background(box, binary, *extra):
    """swapctl deploy as a child whose stderr lines are collected as they come."""
    return swapctl_in_background("deploy", "lab", "--binary", str(binary), "--yes", "-p", str(box.playbook_path),
                                 *extra)


def test_ctrl_c_at_the_confirmation_changes_nothing(box, prover, prover_b):
    import pty

    pid = box.start_by_hand(prover)
    before = _tree(box.data)
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "swapctl", "deploy", "lab", "--binary", str(prover_b),
                             "-p", str(box.playbook_path)], stdin=child, stdout=child, stderr=child,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    os.close(child)
    seen = bytearray()

    def pump() -> None:  # the terminal is read all along: a child never blocks on a full one
        while True:
            try:
                data = os.read(main, 4096)
            except OSError:  # EIO: the child's side is closed
                return
            if not data:
                return
            seen.extend(data)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    wait_until(lambda: b"swap the daemon on lab?" in seen, what="the confirmation prompt")
    proc.send_signal(signal.SIGINT)  # what the terminal sends on Ctrl-C
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:  # CI saw this once: the stacks say where it waits
        proc.send_signal(signal.SIGABRT)
        proc.wait()
        reader.join(5)
        terminal = seen.decode(errors="replace")[-8000:]
        pytest.fail(f"swapctl did not end after Ctrl-C at the confirmation; its terminal:\n{terminal}")
    reader.join(5)
    os.close(main)
    assert code == 3, seen.decode(errors="replace")[-1500:]
    assert box.daemons() == [pid]
    after = _tree(box.data)
    assert {k: v for k, v in after.items() if not k.endswith("cuzk.log")} == \
           {k: v for k, v in before.items() if not k.endswith("cuzk.log")}


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_one_ctrl_c_after_the_stop_finishes_the_swap(box, prover, prover_b, extra):
    # with --json too: its exit code once said 3 (the rollout "interrupted") though no host was skipped
    box.start_by_hand(prover, prover_config(child_hold_mib=8, child_linger_ms=1500))
    proc, lines, reader = _deploy_in_background(box, prover_b, *extra)
    wait_until(lambda: any("waiting" in line or "MemAvailable" in line for line in lines), what="the memory wait")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0, "".join(lines)
    reader.join(5)
    assert any("the swap finishes" in line for line in lines)
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_b)]


def test_a_second_ctrl_c_rolls_back_to_the_old_daemon(box, prover, prover_b):
    old = box.start_by_hand(prover, prover_config(child_hold_mib=8, child_linger_ms=1500))
    argv = cmdline(old)
    proc, lines, reader = _deploy_in_background(box, prover_b)
    wait_until(lambda: any("waiting" in line or "MemAvailable" in line for line in lines), what="the memory wait")
    proc.send_signal(signal.SIGINT)
    wait_until(lambda: any("the swap finishes" in line for line in lines), what="the first Ctrl-C's answer")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 4
    reader.join(5)
    assert any("a second Ctrl-C" in line for line in lines)
    now = box.one_daemon()
    assert exe_sha(now) == sha(prover) and cmdline(now) == argv


def test_a_ctrl_c_once_the_swap_has_ended_never_says_nothing_changed(box, prover, prover_b):
    """The review of CI's Ctrl-C failure found it: a Ctrl-C after the host's swap had ended, as the result
    was printed, said "interrupted before any change" with exit 3 while the new build ran. The Ctrl-C
    lands as the report begins (its moment chosen, the signal real)."""
    box.start_by_hand(prover)
    r = swapctl_ctrl_c_at("swapctl.cli.deploy:report", 1, "deploy", "lab", "--binary", str(prover_b), "--yes",
                          "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    assert "before any change" not in r.stderr and "the swap has ended; swapctl finishes its report" in r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_b)]
    assert journal(box)[-1]["outcome"] == "deployed"


def _script_runs(marker: str, box) -> bool:
    """Whether a process whose command line contains `marker` (a swapctl script's label) and the box's data
    directory still runs: the tests of other worktrees on this machine run swap scripts of their own."""
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and marker.encode() in (cmd := (p / "cmdline").read_bytes()) \
                    and str(box.data).encode() in cmd:
                return True
        except OSError:
            continue
    return False


def test_connection_dropped_during_the_memory_wait_still_ends_with_the_new_daemon(box, prover, prover_b):
    box.start_by_hand(prover, prover_config(child_hold_mib=8, child_linger_ms=2000))
    proc, lines, reader = _deploy_in_background(box, prover_b)
    wait_until(lambda: any("waiting" in line or "MemAvailable" in line for line in lines), what="the memory wait")
    os.kill(session_of("swapctl-swap", str(box.data)), signal.SIGKILL)  # the connection drops, as a flaky link does
    assert proc.wait(60) == 5
    reader.join(5)
    [error] = [line for line in lines if "the host finishes the swap by itself" in line]
    assert "connection lost during the swap step (the connection closed)" in error, error  # what cut it off
    wait_until(lambda: only_runs(box, prover_b), timeout=30,
               what="the new daemon, started by the host's swap script alone")
    new = min(box.daemons())  # the daemon; a listing taken while it forks its memory holder may show both
    sigpipe = int(Path(f"/proc/{new}/status").read_text().split("SigIgn:")[1].split()[0], 16) & (1 << 12)
    assert not sigpipe, "the daemon must not inherit the swap script's ignored SIGPIPE"


def test_deploy_is_refused_while_a_swap_cut_off_from_its_deploy_still_runs(box, prover, prover_b):
    box.start_by_hand(prover, prover_config(child_hold_mib=8, child_linger_ms=6000))
    proc, lines, reader = _deploy_in_background(box, prover_b)
    wait_until(lambda: any("waiting" in line or "MemAvailable" in line for line in lines), what="the memory wait")
    # the first deploy loses its connection, and its lock
    os.kill(session_of("swapctl-swap", str(box.data)), signal.SIGKILL)
    assert proc.wait(60) == 5
    second = deploy(box, prover)  # the host's swap script is still waiting for memory
    assert second.returncode == 3
    # what is true: a swap runs on the host, since when and started by whom (not "that deploy lost its connection")
    assert re.search(r"a swap is running on the host since \S+Z, started by \S+@\S+ \(swap script pid \d+\)",
                     second.stderr), second.stderr
    assert "lost its connection" not in second.stderr
    wait_until(lambda: only_runs(box, prover_b), timeout=30, what="the cut-off swap to start the new daemon")
    wait_until(lambda: not _script_runs("swapctl-swap", box), timeout=30, what="the cut-off swap script to end")
    third = deploy(box, prover)  # once it has ended, deploys go ahead
    ps = subprocess.run(["ps", "-eo", "pid,ppid,pgid,stat,args"], capture_output=True, text=True).stdout
    assert third.returncode == 0, third.stderr + "\n".join(line for line in ps.splitlines() if str(box.data) in line)
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover)]


def test_without_nvidia_smi_the_deploy_warns_and_goes_on(box, prover, prover_b):
    assert shutil.which("nvidia-smi") is None, "this test needs a host without nvidia-smi"
    box.start_by_hand(prover)
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    assert "no GPU tools (nvidia-smi not found)" in r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_b)]


def test_nvml_failure_refuses_the_deploy_and_leaves_the_daemon_running(tmp_path, prover, prover_b):
    # No GPU here, so the driver fault is a stand-in: an nvidia-smi printing what a driver/library version
    # mismatch prints (tests/test_facts.py parses the same text) and exiting 18, as the real one does.
    nvidia_smi = "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n"
    with own_box(tmp_path, tools={"nvidia-smi": nvidia_smi}) as box:
        pid = box.start_by_hand(prover)
        r = deploy(box, prover_b)
        assert r.returncode == 3
        assert "nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch" in r.stderr
        assert "the running one is left alone" in r.stderr
        assert box.daemons() == [pid] and exe_sha(pid) == sha(prover) and not box.binary.is_symlink()


def test_connection_dropped_during_readiness_still_ends_with_a_daemon(box, prover, prover_noready):
    box.start_by_hand(prover)
    box.write_playbook(daemon={"ready_timeout_s": 4})
    proc, lines, reader = _deploy_in_background(box, prover_noready)
    wait_until(lambda: any(" start: started " in line for line in lines), what="the new daemon's start")
    os.kill(session_of("swapctl-swap", str(box.data)), signal.SIGKILL)  # nobody is left to roll back but the host
    assert proc.wait(60) == 5
    wait_until(lambda: only_runs(box, prover), timeout=40, what="the host to go back to the old daemon by itself")
    written = box.data / ".swapctl" / "cuzk" / "journal.jsonl"  # once the old one is ready again
    wait_until(lambda: written.exists() and journal(box)[-1]["action"] == "auto-rollback", timeout=40,
               what="the host's journal line")
    entry = journal(box)[-1]
    assert entry["action"] == "auto-rollback" and "itself" in entry["by"]
    assert entry["from"] == sha(prover_noready) and entry["to"] == sha(prover) and entry["outcome"] == "rolled-back"
    pid = box.one_daemon()
    assert entry["pid"] == pid and cmdline(pid) == [str(box.binary), "--config", str(box.config)]


def test_a_fallback_changed_on_the_host_is_not_started_by_the_host_and_the_journal_says_so(
        box, prover, prover_noready):
    box.start_by_hand(prover)
    box.write_playbook(daemon={"ready_timeout_s": 4})
    proc, lines, reader = _deploy_in_background(box, prover_noready)
    wait_until(lambda: any(" start: started " in line for line in lines), what="the new daemon's start")
    [fallback] = [p for p in (box.data / ".swapctl" / "cuzk" / "releases" / sha(prover)[:12]).iterdir()
                  if p.is_file() and os.access(p, os.X_OK)]
    with open(fallback, "ab") as f:  # someone changed the backed-up build on the host after it was checked
        f.write(b"\0changed")
    os.kill(session_of("swapctl-swap", str(box.data)), signal.SIGKILL)  # nobody is left to roll back but the host
    assert proc.wait(60) == 5
    written = box.data / ".swapctl" / "cuzk" / "journal.jsonl"  # its first line: the deploy lost its own
    wait_until(lambda: written.exists() and journal(box)[-1]["action"] == "auto-rollback", timeout=40,
               what="the host's journal line")
    entry = journal(box)[-1]
    assert entry["outcome"] == "no-daemon" and "changed" in entry["reason"] and entry["pid"] is None
    assert entry["from"] == sha(prover_noready) and entry["to"] == sha(prover)
    assert box.daemons() == []  # the changed binary was never run, as root or otherwise


def test_new_daemon_exiting_soon_after_its_ready_line_is_rolled_back(box, prover, prover_b):
    pid = box.start_by_hand(prover)
    argv = cmdline(pid)
    soon = box.data / "exits-soon.toml"  # the new build's config makes it exit 1 s after ready
    soon.write_text(prover_config() + "exit_after_ms = 1000\n")
    box.write_playbook(daemon={"args": ["--config", str(soon)], "ready_stable_s": 4})
    r = deploy(box, prover_b)
    assert r.returncode == 4, r.stderr
    assert "it must stay up 4 s" in r.stderr and "it printed its ready line, then exited" in r.stderr
    wait_until(lambda: only_runs(box, prover), timeout=30, what="the old daemon back")
    now = box.one_daemon()
    assert cmdline(now) == argv and journal(box)[-1]["action"] == "auto-rollback"


def test_a_stable_new_daemon_is_watched_then_kept(box, prover, prover_b):
    box.start_by_hand(prover)
    box.write_playbook(daemon={"ready_stable_s": 1})
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    assert "it must stay up 1 s" in r.stderr and only_runs(box, prover_b)


def test_binary_for_another_architecture_or_not_executable_is_refused(box, prover, tmp_path):
    pid = box.start_by_hand(prover)
    arm = bytearray(prover.read_bytes())
    arm[18:20] = (183).to_bytes(2, "little")  # e_machine = EM_AARCH64: the same file, built "for arm64"
    (tmp_path / "cuzk-arm64").write_bytes(bytes(arm))
    (tmp_path / "cuzk-arm64").chmod(0o755)
    r = deploy(box, tmp_path / "cuzk-arm64")
    assert r.returncode == 2 and "is an aarch64 binary, the host is x86_64 (rebuild for linux/amd64)" in r.stderr
    (tmp_path / "cuzk-noexec").write_bytes(prover.read_bytes())
    (tmp_path / "cuzk-noexec").chmod(0o644)
    r = deploy(box, tmp_path / "cuzk-noexec")
    assert r.returncode == 2 and "is not executable; `chmod +x" in r.stderr
    assert box.daemons() == [pid] and not box.binary.is_symlink()


def test_an_engineer_tailing_the_log_is_not_taken_for_a_daemon(box, prover, prover_b):
    box.start_by_hand(prover)
    tail = subprocess.Popen(["tail", "-F", str(box.log)], stdout=subprocess.DEVNULL)  # its args name .../cuzk.log
    try:
        r = deploy(box, prover_b)
        assert r.returncode == 0, r.stderr
        assert only_runs(box, prover_b) and tail.poll() is None  # the tail is left alone
    finally:
        tail.kill()
        tail.wait()


def test_a_daemon_the_playbook_does_not_recognise_refuses_the_deploy_and_beside_starts_it_anyway(
        box, prover, prover_b):
    """The issue's repro: after a deploy, a typo in daemon.binary. The daemon runs from a release of the
    real name, so it is not the daemon to the playbook; a deploy would start a second prover beside it."""
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    pid = box.one_daemon()
    typo = box.data / "cuzkk"
    box.write_playbook(daemon={"binary": str(typo)})  # daemon.match stays the real path
    r = deploy(box, prover)
    assert r.returncode == 3, r.stderr
    [line] = [x for x in r.stderr.splitlines() if x.startswith("swapctl:")]
    exe = os.readlink(f"/proc/{pid}/exe")
    assert f"pid {pid} (user root, runs {exe}: {box.binary} --config {box.config})" in line, line
    assert f"fix daemon.binary (it is {typo}; this process runs {exe})" in line and "--beside" in line
    assert box.daemons() == [pid] and not typo.exists()  # nothing changed
    r = deploy(box, prover, "--beside")
    assert r.returncode == 0, r.stderr
    assert f"--beside: the new build starts beside pid {pid}" in r.stderr
    assert pid in box.daemons() and len(box.daemons()) == 2  # as asked


def test_a_program_the_match_names_refuses_the_deploy_and_one_in_a_directory_so_named_does_not(box, prover, prover_b):
    """daemon.match names a program by its file name (or a tail of its path): root's `cuzk` in another
    directory is a second prover; a `sleep` in a directory called `cuzk-tools`, whose path and arguments hold
    the match, is not, since any user could make one and block every deploy (tests/test_red_team.py, 1)."""
    pid = box.start_by_hand(prover)
    box.write_playbook(daemon={"match": "cuzk"})
    elsewhere, tools = box.workdir / "by-hand" / "cuzk", box.workdir / "cuzk-tools" / "sleep"
    for path in (elsewhere, tools):
        path.parent.mkdir()
        shutil.copy("/usr/bin/sleep", path)
    other = subprocess.Popen([str(elsewhere), "600"], stdin=subprocess.DEVNULL, start_new_session=True)
    harmless = subprocess.Popen([str(tools), "600"], stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        wait_until(lambda: os.readlink(f"/proc/{harmless.pid}/exe") == str(tools), what="the sleep in cuzk-tools")
        r = deploy(box, prover_b)
        assert r.returncode == 3, r.stderr
        assert f"pid {other.pid} (user root, runs {elsewhere}: " in r.stderr and str(harmless.pid) not in r.stderr
        assert box.daemons() == [pid] and exe_sha(pid) == sha(prover)  # nothing changed
        other.kill()
        other.wait()
        r = deploy(box, prover_b)
        assert r.returncode == 0, r.stderr
        assert harmless.poll() is None and only_runs(box, prover_b)
    finally:
        for p in (other, harmless):
            p.kill()
            p.wait()


# a controller that holds the deploy lock and then does nothing: SIGSTOPped, it sends no heartbeat either
HOLDER = """
import sys, time
from swapctl.facts import forks
from swapctl.playbook import load
from swapctl.remote import connect
from swapctl.swap.deploy import Swap
from swapctl.facts.journal_entry import parse
book = load(sys.argv[1])
with connect(book.hosts["lab"]) as host:
    Swap(host, book).lock()
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_lock_whose_controller_went_silent_ends_after_its_silence(box, prover, prover_b):
    box.start_by_hand(prover)
    box.write_playbook(daemon={"lock_silence_s": 5})
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(box.playbook_path)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        os.kill(holder.pid, signal.SIGSTOP)  # its connection stays open (ESTABLISHED), and silent
        lock = box.data / ".swapctl" / "cuzk" / "lock"

        def free() -> bool:
            return subprocess.run(["flock", "-n", str(lock), "true"]).returncode == 0

        # on the host its connection stays ESTABLISHED for as long as TCP keepalive takes (hours): the holder
        # ends by itself once 5 s passed without a heartbeat
        wait_until(free, timeout=30, what="the silent controller's lock to end on the host")
        r = deploy(box, prover_b)
        assert r.returncode == 0, r.stderr
        assert only_runs(box, prover_b)
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_held_by_a_live_controller_outlasts_its_silence_and_the_refusal_says_how_long(box, prover,
                                                                                               prover_b):
    box.start_by_hand(prover)
    box.write_playbook(daemon={"lock_silence_s": 5})
    with lock_held(box):
        time.sleep(8)  # longer than the silence: the heartbeat keeps it (a wait for a fault that must not come)
        r = deploy(box, prover_b)
    assert r.returncode == 3 and "another deploy holds the lock" in r.stderr, r.stderr
    assert f"(pid {os.getpid()})" in r.stderr  # who holds it
    assert re.search(r"its heartbeat last came [0-4] s ago; the lock ends with its connection, or once it has "
                     r"been silent 5 s", r.stderr), r.stderr


def _at_the_prompt(box, binary):
    """A deploy on a terminal, waiting at its confirmation: (process, terminal fd, what it printed)."""
    import pty

    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "swapctl", "deploy", "lab", "--binary", str(binary),
                             "-p", str(box.playbook_path)], stdin=child, stdout=child, stderr=child,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1", "COLUMNS": "400"})
    os.close(child)
    seen = bytearray()

    def pump() -> None:
        while True:
            try:
                data = os.read(main, 4096)
            except OSError:
                return
            if not data:
                return
            seen.extend(data)

    threading.Thread(target=pump, daemon=True).start()
    wait_until(lambda: b"swap the daemon on lab?" in seen, what="the confirmation prompt")
    return proc, main, seen


@pytest.mark.parametrize("policy", ["refuse", "deploy"])
def test_a_daemon_that_exits_by_itself_before_the_stop_is_said_or_deployed_past(box, prover, prover_b, policy):
    pid = box.start_by_hand(prover)
    box.write_playbook(daemon={"gone_before_stop": policy})
    proc, main, seen = _at_the_prompt(box, prover_b)
    os.kill(pid, signal.SIGKILL)  # it dies by itself, as far as swapctl knows: between the plan and its backup
    wait_until(lambda: pid not in box.daemons(), what="the daemon to be gone")
    os.write(main, b"y\n")
    code = proc.wait(60)
    text = seen.decode(errors="replace")
    os.close(main)
    if policy == "refuse":
        assert code == 3, text[-2000:]
        assert f"the daemon (pid {pid}) exited on its own during the preflight; nothing was changed" in text
        assert "cannot stat" not in text and box.daemons() == [] and not box.binary.is_symlink()
    else:
        assert code == 0, text[-2000:]
        assert f"the daemon (pid {pid}) exited on its own before the stop: going on with none" in text
        assert only_runs(box, prover_b)
        kept = box.data / ".swapctl/cuzk/releases" / sha(prover)[:12] / "cuzk"  # saved from the binary path
        assert kept.is_file() and sha(kept) == sha(prover), "build A is lost: rollback could not go back to it"
