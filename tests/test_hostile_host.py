"""A host is not trusted (README, Security): what its users can put in front of swapctl on a real sshd host
(a process's argv, a log line, a file name, a journal line, a long line) does no harm here.
Issue 19, findings 3, 5, 6 and 8."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from swapctl.cli.terminal import log_line, visible

from lab import swapctl, swapctl_measured, wait_until

# What the audit's hostile strings did: retitle the terminal, hide text, clear the screen, and a C1 CSI.
RETITLE, HIDE, CLEAR, C1_CSI = "\x1b]0;pwned\x07", "\x1b[8m", "\x1b[2J\x1b[H", "\u009b2J"
HOSTILE = f"{RETITLE}{HIDE}hidden{CLEAR}{C1_CSI}"
WIDE = {"COLUMNS": "500"}  # rich wraps at 80 columns without a terminal: an escaped string would be cut


def no_control_codes(output: str) -> bool:
    """Nothing a terminal would act on: no ESC, BEL or C1 control in what swapctl printed (to a pipe, rich
    adds no styling codes of its own)."""
    return not any(c in output for c in ("\x1b", "\x07", "\x9b"))


# -- finding 5: control characters are shown, never sent ------------------------------------------

@pytest.mark.parametrize("raw,shown", [
    ("plain text", "plain text"),
    ("tab\tkept", "tab\tkept"),
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
    ("\x1b[2J", "\\x1b[2J"),
    ("line\nbreak\r", "line\\x0abreak\\x0d"),
    ("\x00\x7f\u0085\u009b", "\\x00\\x7f\\x85\\x9b"),
    ("abc\u202edcba", "abc\\u202edcba"),  # a bidi override reorders what a person reads
])
def test_every_control_character_is_shown(raw, shown):
    assert visible(raw) == shown


@pytest.mark.parametrize("raw,plain,colours", [
    ("\x1b[32mINFO\x1b[0m ready", "INFO ready", 1),
    ("\x1b[1;38;5;200mbold\x1b[0m", "bold", 1),
    ("\x1b[8mhidden\x1b[0m", "hidden", 0),  # conceal is dropped: the text shows
    ("\x1b[5;31mblink\x1b[0m", "blink", 1),  # blink dropped, its colour kept
    ("\x1b]0;t\x07x\x1b[2Jy", "\\x1b]0;t\\x07x\\x1b[2Jy", 0),
])
def test_a_log_line_keeps_only_its_colours(raw, plain, colours):
    t = log_line(raw)
    assert t.plain == plain
    assert len([s for s in t.spans if s.style]) == colours
    assert not any(getattr(s.style, "conceal", None) or getattr(s.style, "blink", None) for s in t.spans)


def test_a_hostile_argv_is_shown_not_sent_by_status_and_the_plan(box, prover, prover_b, swapctl_env):
    box.start_by_hand(prover, args=["--config", str(box.config), HOSTILE])
    r = swapctl("status", "lab", "-p", str(box.playbook_path), env=WIDE)
    assert r.returncode == 0, r.stderr
    # ps writes non-printing bytes as '.' or '?' itself: the status line is safe before swapctl's own check
    assert no_control_codes(r.stdout) and "pwned" in r.stdout
    r = swapctl("deploy", "lab", "--binary", str(prover_b), "--dry-run", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    assert "command line:" in r.stderr and "\\x1b]0;pwned\\x07\\x1b[8mhidden\\x1b[2J\\x1b[H\\x9b2J" in r.stderr
    assert no_control_codes(r.stderr)  # the plan reads the argv from /proc/PID/cmdline, as it is


def test_an_error_carrying_host_output_shows_its_escapes(tmp_path, prover, prover_b, swapctl_env):
    """A failing nvidia-smi's first line goes into status and into the deploy's refusal message."""
    from conftest import own_box

    smi = ("#!/bin/sh\nprintf '\\033]0;pwned\\007\\033[8mFailed to initialize NVML: Driver/library mismatch\\n'\n"
           "exit 9\n")
    with own_box(tmp_path, tools={"nvidia-smi": smi}) as box:
        box.start_by_hand(prover)
        r = swapctl("status", "lab", "-p", str(box.playbook_path), env=WIDE)
        assert r.returncode == 0, r.stderr
        assert "\\x1b]0;pwned\\x07\\x1b[8mFailed to initialize NVML" in r.stdout and no_control_codes(r.stdout)
        r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path))
        assert r.returncode == 3 and "Driver/library mismatch" in r.stderr, r.stderr  # refused, as before
        assert "\\x1b]0;pwned\\x07" in r.stderr and no_control_codes(r.stderr)


HOSTILE_DAEMON = r"""
#include <stdio.h>
int main(void) {
    printf("starting\n\x1b]0;pwned\x07\x1b[8mhidden\x1b[0m \x1b[2J\x1b[Hcleared\n\x1b[31mpanic: boom\x1b[0m\n");
    return 1;
}
"""


@pytest.fixture(scope="module")
def hostile_daemon(tmp_path_factory) -> Path:
    """An ELF that logs the audit's escapes and exits before it is ready: its log tail is shown."""
    d = tmp_path_factory.mktemp("hostile")
    (d / "d.c").write_text(HOSTILE_DAEMON)
    subprocess.run(["cc", "-O0", "-o", str(d / "cuzk-hostile"), str(d / "d.c")], check=True)
    return d / "cuzk-hostile"


def test_a_failed_deploys_log_tail_cannot_retitle_or_hide(box, prover, hostile_daemon, swapctl_env):
    box.start_by_hand(prover)
    r = swapctl("deploy", "lab", "--binary", str(hostile_daemon), "--yes", "-p", str(box.playbook_path))
    assert r.returncode == 4, r.stderr  # rolled back to the old daemon
    assert "\\x1b]0;pwned\\x07" in r.stderr and "hidden" in r.stderr and "\\x1b[2J\\x1b[Hcleared" in r.stderr
    assert "panic: boom" in r.stderr  # a colour is a style: to a pipe, just the text
    assert no_control_codes(r.stderr)


def test_a_crafted_journal_line_is_shown_by_history(box, prover, prover_b, swapctl_env):
    box.start_by_hand(prover)
    assert swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path)).returncode == 0
    journal = box.data / ".swapctl/cuzk/journal.jsonl"
    with open(journal, "a") as f:  # free text (who) is shown escaped; a word or a name with a control code is no entry
        f.write(json.dumps({"time": "2026-12-01T00:00:00Z", "action": "deploy", "by": HOSTILE,
                            "outcome": "deployed"}) + "\n")
        f.write(json.dumps({"time": "2026-12-01T00:00:00Z", "action": f"deploy{CLEAR}", "by": HOSTILE,
                            "outcome": RETITLE}) + "\n")
    r = swapctl("history", "lab", "-p", str(box.playbook_path), env=WIDE)
    assert r.returncode == 0, r.stderr
    assert no_control_codes(r.stdout) and "\\x1b]0;pwned" in r.stdout
    assert no_control_codes(r.stderr) and "1 line skipped (not journal entries)" in r.stderr


def test_fetch_logs_follow_shows_a_clear_screen_instead_of_clearing(box, tmp_path):
    box.write_playbook(logs={"paths": [str(box.log)]})
    box.log.write_bytes(b"before\n")
    proc = subprocess.Popen([sys.executable, "-m", "swapctl", "fetch-logs", "lab", "--follow", "--dest",
                             str(tmp_path / "logs"), "-p", str(box.playbook_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = bytearray()
    reader = threading.Thread(
        target=lambda: [seen.extend(chunk) for chunk in iter(lambda: proc.stdout.read1(4096), b"")], daemon=True)
    reader.start()
    try:
        wait_until(lambda: b"new bytes" in seen, what="the first fetch")
        with open(box.log, "ab") as f:
            f.write(f"{CLEAR}{RETITLE}\x1b[32mgreen\x1b[0m after\n".encode())
        wait_until(lambda: b"after" in seen, what="the followed line")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        reader.join(timeout=5)
    out = seen.decode()
    assert "\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07green after" in out
    assert no_control_codes(out)


# -- finding 6: fetch-logs fetches only files the patterns name ------------------------------------

def test_a_file_name_holding_a_forged_listing_fetches_nothing_outside_the_pattern(box, tmp_path):
    """The audit's file, `x\\nFILE 1 99 .profile\\n...`, in the log directory once made fetch-logs
    download root's ~/.profile (the session's working directory): a name cannot hold a `/`, but `.profile`
    needs none. A symlink in the log directory to a file outside it is no way out either."""
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(b"root's secret\n")
    box.log.write_bytes(b"the daemon's log\n")
    hostile = box.data / "x\nFILE 1 99 .profile\ny.log"
    hostile.write_bytes(b"a user's file\n")
    (box.data / "link.log").symlink_to(secret)
    box.write_playbook(logs={"paths": [str(box.data / "*.log")]})
    dest = tmp_path / "logs"
    r = swapctl("fetch-logs", "lab", "--dest", str(dest), "--json", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    fetched = {f["remote"]: f for f in json.loads(r.stdout)["hosts"]["lab"]}
    assert set(fetched) == {str(box.log), str(hostile)}  # the hostile file is a log-directory file: itself
    assert Path(fetched[str(hostile)]["local"]).read_bytes() == b"a user's file\n"
    assert "\n" not in Path(fetched[str(hostile)]["local"]).name
    assert not any(Path(f["remote"]).name == ".profile" for f in fetched.values())
    local = b"".join(p.read_bytes() for p in (dest / "lab").iterdir() if p.is_file())
    assert b"root's secret" not in local
    if Path("/root/.profile").exists():
        assert Path("/root/.profile").read_bytes()[:99] not in local
    assert f"not fetched, outside logs.paths: {box.data / 'link.log'} -> {secret}" in r.stderr


@pytest.mark.parametrize("path,ok", [
    ("/data/cuzk.log", True),
    ("/data/sub/cuzk.log", False),  # `*` never crosses a `/`
    ("/data/../root/.profile", False),
    ("/data//cuzk.log", False),
    (".profile", False),
    ("data/cuzk.log", False),
    ("/data/x\nFILE 1 99 .profile\ny.log", True),  # a name may hold newlines: it is still that one file
])
def test_only_absolute_paths_the_patterns_match_are_fetched(path, ok):
    from swapctl.logs.fetch import within

    assert within(path, ["/data/*.log"]) is ok


# -- finding 3: status --json masks the recorded environment's secrets ----------------------------

def test_status_json_masks_the_recorded_environments_secrets(box, prover, prover_b, swapctl_env):
    box.write_playbook(daemon={"env": {"AWS_SECRET_ACCESS_KEY": "listed-s3cr3t", "DB_PASSWORD": "unlisted-pw",
                                       "UPSTREAM": "https://prover:hunter2@db.internal/", "RUST_LOG": "info"},
                               "secret_env": ["AWS_SECRET_ACCESS_KEY"]})
    box.start_by_hand(prover)
    r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    manifests = "".join(p.read_text() for p in (box.data / ".swapctl/cuzk/releases").glob("*/manifest.json"))
    assert "listed-s3cr3t" in manifests  # the host keeps them: the daemon needs them to start
    for verb in ("status", "history"):
        r = swapctl(verb, "lab", "--json", "-p", str(box.playbook_path))
        assert r.returncode == 0, r.stderr
        for secret in ("listed-s3cr3t", "unlisted-pw", "hunter2"):
            assert secret not in r.stdout, (verb, secret)
    r = swapctl("status", "lab", "--json", "-p", str(box.playbook_path))
    releases = json.loads(r.stdout)["hosts"]["lab"]["releases"]
    env = dict(next(r["env"] for r in releases if r["sha256"].startswith(sha256(prover_b)[:12])))
    assert env["AWS_SECRET_ACCESS_KEY"] == env["DB_PASSWORD"] == env["UPSTREAM"] == "***"
    assert env["RUST_LOG"] == "info" and env["PATH"]  # the rest is shown as it is


def sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name,value,secret", [
    ("AWS_SECRET_ACCESS_KEY", "x", True), ("GITHUB_TOKEN", "x", True), ("PGPASSWORD", "x", True),
    ("DB_PASS", "x", True), ("API_KEY", "x", True), ("UPSTREAM", "https://u:pw@host/", True),
    ("X", "-----BEGIN OPENSSH PRIVATE KEY-----", True), ("X", "AKIAIOSFODNN7EXAMPLE", True),
    ("RUST_LOG", "info", False), ("PATH", "/usr/bin", False), ("PWD", "/data", False),
    ("CUDA_VISIBLE_DEVICES", "0", False), ("URL", "https://host/path", False),
])
def test_what_looks_like_a_secret(name, value, secret):
    from swapctl.masking import looks_secret

    assert looks_secret(name, value) is secret


# -- finding 8: what a host sends back is bounded, in size and in time ----------------------------

def test_splitting_a_long_line_is_linear_and_cut():
    from swapctl.remote import host as hostmod

    lines: list[str] = []
    split = hostmod._Lines(lines.append)
    chunk = b"x" * 65536
    t = time.monotonic()
    for _ in range(60_000_000 // len(chunk)):  # the audit's 60 MB single line, as SSH hands it over
        split.feed(chunk)
    split.feed(b"\nnext\n")
    assert time.monotonic() - t < 5  # it was quadratic: 24.6 s
    cut, after = lines
    assert cut.startswith("x" * 1000) and cut.endswith("more bytes of this line not read]")
    assert len(cut) < hostmod.MAX_LINE + 100 and after == "next"
    assert len(split.finish()) == hostmod.MAX_LINE + len("\nnext\n")


@pytest.mark.parametrize("chunks", [
    [b"a\nb", b"c\n", b"\n", b"d"], [b"\n\n\n"], [b""], [b"one line\n"], [b"x" * 70000, b"y\nz"],
])
def test_lines_split_across_chunks_as_one_read_would(chunks):
    from swapctl.remote.host import _Lines

    lines: list[str] = []
    split = _Lines(lines.append)
    for c in chunks:
        split.feed(c)
    whole = b"".join(chunks)
    assert split.finish() == whole.decode()
    expected = whole.decode().split("\n")
    assert lines == (expected[:-1] if expected[-1] == "" else expected)


@pytest.fixture
def ssh_host(sshd):
    from swapctl.playbook import HostSpec
    from swapctl.remote import SshHost

    with SshHost(HostSpec(name="lab", address=sshd.address, port=sshd.port, user="root",
                          identity_file=str(sshd.client_key), known_hosts=str(sshd.known_hosts))) as host:
        yield host


def test_a_60_mb_line_from_the_host_is_cut_within_its_deadline(ssh_host):
    from swapctl.remote import Cmd

    lines: list[str] = []
    t = time.monotonic()
    ssh_host.stream(Cmd.script("head -c 60000000 /dev/zero | tr '\\0' x; echo; echo done", label="long-line"),
                    lines.append, timeout=5)
    assert time.monotonic() - t < 5  # the audit measured 24.6 s with this 5 s limit
    assert len(lines) == 2 and len(lines[0]) < 16 << 20 and lines[1] == "done"  # cut at MAX_LINE, 10 MiB


@pytest.mark.parametrize("producer", ["yes", "yes | tr -d '\\n'"])  # endless lines, or one endless line
def test_a_host_that_never_stops_sending_is_held_to_the_deadline(ssh_host, producer):
    from swapctl.errors import RemoteOutputTooLarge, RemoteTimeout
    from swapctl.remote import Cmd

    t = time.monotonic()
    with pytest.raises((RemoteTimeout, RemoteOutputTooLarge)):
        ssh_host.run(Cmd.script(producer, label="flood"), timeout=3)
    assert time.monotonic() - t < 3 + 2


def test_a_100_mb_manifest_costs_history_and_status_little(box):
    release = box.data / ".swapctl/cuzk/releases" / ("ab" * 6)
    release.mkdir(parents=True)
    # a valid manifest with 100 MB of environment, written in pieces: a 100 MB string here would count in
    # the child's peak RSS too (it is forked from this process before it runs swapctl)
    with open(release / "manifest.json", "w") as f:
        f.write('{"sha256": "' + "ab" * 32 + '", "size": 1, "name": "cuzk", "created": "2026-12-01", "by": "x", '
                '"env": [["A", "')
        for _ in range(100):
            f.write("x" * 1_000_000)
        f.write('"]]}')
    for verb in ("history", "status"):
        r, seconds, peak_kib = swapctl_measured(verb, "lab", "--json", "-p", str(box.playbook_path))
        peak_mib = peak_kib / 1024
        assert r.returncode == 0, (verb, r.stderr[-2000:])
        assert seconds < 20 and peak_mib < 200, (verb, seconds, peak_mib)  # the audit: 67 s and 650 MB


def test_a_manifest_that_is_no_json_object_does_not_break_status(box):
    for i, body in enumerate(['[1, 2]', '"text"', '{"env": "not pairs", "sha256": 7}']):
        release = box.data / ".swapctl/cuzk/releases" / f"{i:012d}"
        release.mkdir(parents=True)
        (release / "manifest.json").write_text(body)
    r = swapctl("status", "lab", "--json", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    [release] = json.loads(r.stdout)["hosts"]["lab"]["releases"]
    assert release["env"] is None  # not [name, value] pairs: not shown
    assert swapctl("status", "lab", "-p", str(box.playbook_path)).returncode == 0


# -- issue 45, item 5: a status answer that parses but is no snapshot ------------------------------

NO_SNAPSHOT = {
    "deep": b'{"pipelines": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "nan": b'{"uptime_secs": 1e400, "pipelines": [{"job_id": "a\\u001b[2Jb", "started_secs_ago": NaN, '
           b'"partitions_done": 1, "total_partitions": 3, "partitions": [{"state": "gpu"}]}], '
           b'"counters": {"total_completed": -Infinity, "queue_depth": 1' + b"0" * 400 + b"}}",
}


@pytest.mark.parametrize("answer", NO_SNAPSHOT.values(), ids=NO_SNAPSHOT.keys())
def test_a_status_answer_that_is_no_snapshot_shows_as_finite_numbers_or_no_status(box, prover, prover_b,
                                                                                  swapctl_env, answer):
    """Whoever answers on the daemon's status_url: status, status --json and the plan go on, without a traceback."""
    from test_daemon_view import Answering

    def strict(name: str) -> None:
        raise AssertionError(f"--json printed {name}")

    box.start_by_hand(prover)
    with Answering(answer) as other:
        box.write_playbook(daemon={"status_url": other.url})
        r = swapctl("status", "lab", "-p", str(box.playbook_path), env=WIDE)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert no_control_codes(r.stdout)
        r = swapctl("status", "lab", "--json", "-p", str(box.playbook_path))
        assert r.returncode == 0, r.stderr
        json.loads(r.stdout, parse_constant=strict)  # strict JSON: no NaN, no Infinity
        r = swapctl("deploy", "lab", "--binary", str(prover_b), "--dry-run", "-p", str(box.playbook_path))
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def test_an_unforeseen_error_on_one_host_is_that_hosts_result_not_the_rollouts_end():
    """A fault no parser foresaw cannot be made on a real host once they are fixed: a stand-in for one host's swap
    raises it. The rollout keeps it as that host's result (its report and the other hosts go on)."""
    from swapctl.cli.fleet import _AtTerminal
    from swapctl.errors import UnknownState
    from swapctl.fleet import Fleet
    from swapctl.playbook import HostSpec

    def one(spec, interrupts, sink):
        raise ValueError("cannot convert float NaN to integer")

    at = _AtTerminal(one, Fleet(), live=False)
    result = at.each(HostSpec(name="gpu1", address="gpu1"))
    assert isinstance(result, UnknownState) and at.done["gpu1"] is result
    assert str(result).startswith("gpu1: swapctl stopped on ValueError: cannot convert float NaN to integer")
