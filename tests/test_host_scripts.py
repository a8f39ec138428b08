"""The one home of host code (swapctl/host/): every script there, sent by the one loader, its words or
sections declared beside its parser, and each parser on a transcript of a real run
(tests/data/transcripts/host/, recorded by tests/record_host_transcripts.py)."""

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

from swapctl.facts import launch, status
from swapctl.gpu.sampler import CtlWord, parse_ctl
from swapctl.host import scripts
from swapctl.logs.fetch import parse_listing
from swapctl.remote.cmd import Cmd
from swapctl.remote.ssh import _Stderr
from swapctl.swap.words import Word

from record_host_transcripts import DAEMON, READY, ROOT

PACKAGE = Path(__file__).parent.parent / "swapctl"
HOST = PACKAGE / "host"
DATA = Path(__file__).parent / "data" / "transcripts" / "host"
# a line that starts a report: the word a script echoes or printfs (or sets as its outcome, or stat prints)
PRINTED = re.compile(r"""(?:echo "?|printf '|-c '|outcome=)([A-Z][A-Z_]+)\b""")


def test_every_host_script_is_in_a_family_folder_of_the_one_home_under_a_name_of_its_own():
    found = sorted(PACKAGE.rglob("*.sh"))
    assert found and all(p.parent.parent == HOST for p in found), [str(p) for p in found if p.parent.parent != HOST]
    assert len({p.name for p in found}) == len(found)
    assert scripts.names() == sorted(p.name for p in found)


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def test_no_module_but_the_loader_sends_shell_of_its_own():
    """No shell in Python strings: a script is a file under swapctl/host/, sent by swapctl.host.scripts."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for call in _calls(ast.parse(path.read_text())):
            f = call.func
            is_script = isinstance(f, ast.Attribute) and f.attr == "script" and getattr(f.value, "id", "") == "Cmd"
            shell_c = (isinstance(f, ast.Name) and f.id == "Cmd" and len(call.args) > 1
                       and getattr(call.args[0], "value", None) in ("sh", "bash")
                       and any(getattr(a, "value", None) == "-c" for a in call.args))
            if (is_script and path != HOST / "scripts.py") or shell_c:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{call.lineno}")
    assert found == []


def test_named_inputs_without_the_script_that_reads_them_are_refused():
    with pytest.raises(ValueError, match="reads them"):
        Cmd.script('echo "$x"', label="x", env={"x": "1"})


@pytest.mark.parametrize("family,vocabulary", [("swap", Word), ("gpu", CtlWord)])
def test_every_word_a_family_prints_is_declared_and_every_declared_word_is_printed(family, vocabulary):
    printed = {w for p in (HOST / family).glob("*.sh") for w in PRINTED.findall(p.read_text())}
    assert printed - set(vocabulary) == set()
    if vocabulary is CtlWord:  # the swap's Word also holds the words of swap.sh's variables (OUTCOME ...)
        assert set(vocabulary) - printed == set()


def test_the_status_script_prints_the_sections_parse_status_reads_in_their_order():
    printed = re.findall(r"^\s*(?:.*; )?sec ([\w-]+)", (HOST / "facts" / "status.sh").read_text(), re.M)
    printed += ["gpu-apps"] if "gpu-apps" not in printed else []
    assert sorted(printed) == sorted(status.SECTIONS)
    read = set(re.findall(r"""s\.get\("([\w-]+)"|"([\w-]+)" in s\b""", (PACKAGE / "facts" / "status.py").read_text()))
    assert {a or b for a, b in read} <= set(status.SECTIONS)
    recorded = [line[4:] for line in (DATA / "status.txt").read_text().split("\n") if line.startswith("==> ")]
    assert recorded == list(status.SECTIONS)


def test_a_recorded_status_finds_the_daemon_its_release_journal_gpus_and_sampler():
    st = status.parse_status("lab", (DATA / "status.txt").read_text(), DAEMON, status.df_paths(DAEMON))
    assert [p.args for p in st.daemons] == [f"{ROOT}/data/cuzk 600"] and st.not_daemons == ()
    assert st.arch == "x86_64" and st.memory.total_kib > 0 and st.load
    assert st.current_release == f"{DAEMON.state_dir}/releases/0123456789ab/cuzk"
    assert [r["id"] for r in st.releases] == ["0123456789ab"]
    assert json.loads(st.last_journal_line)["current"] == "0123456789ab" and not st.swapping
    assert [(e.action, e.current) for e in st.landings] == [("deploy", "0123456789ab")]  # where rollback goes
    assert [g.name for g in st.gpus] == ["NVIDIA H200"] and st.gpu_error is None and not st.gpu_hung
    assert [p.pid for p in st.gpu_processes] == [462]
    assert st.gpu_sampler == "not running; last note: 2026-12-02T19:29:40Z stopped: by request"
    assert [d.path for d in st.disks] == [f"{ROOT}/data"] and st.disks[0].size_kib > 0
    # the status script (`==> self`) and what it started are no other process of note
    assert not any(p.args.startswith(("ps -ww", "find /proc")) for p in st.top_processes)


def test_the_launch_script_prints_its_sections_and_a_recorded_launch_parses():
    printed = re.findall(r"printf '\\?n?==> (\w+)", (HOST / "facts" / "launch.sh").read_text())
    assert printed == list(launch.SECTIONS)
    got = launch.parse_launch((DATA / "launch.txt").read_text())
    assert got.argv == (f"{ROOT}/data/cuzk", "600")
    assert (got.stdout, got.cwd, got.ready_lines) == (f"{ROOT}/data/cuzk.log", f"{ROOT}/data", (READY,))
    assert launch.propose_ready(got.ready_lines) == "cuzk-daemon ready"


def test_a_recorded_sampler_status_reads_as_idle_with_its_file_and_last_note():
    got = parse_ctl("lab", "/x/gpu", (DATA / "sampler-ctl.status.txt").read_text())
    assert (got.running, got.pid, got.outcome, got.ok) == (False, None, "", True)
    assert [(f.name, f.size) for f in got.files] == [("gpu-samples-20261202T192900Z-0001.dmon", 18)]
    assert got.note == "2026-12-02T19:29:40Z stopped: by request"


def test_a_recorded_log_listing_names_the_tools_and_each_file_once():
    gpu = f"{DAEMON.state_dir}/gpu"
    tools, files, refused = parse_listing((DATA / "list_logs.txt").read_bytes(),
                                          [DAEMON.log, f"{gpu}/gpu-samples-*.dmon"])
    assert tools == ["zstd", "gzip"] and refused == []
    assert [(size, path) for _, size, path, _ in files] == [
        (len(READY) + 1, DAEMON.log), (18, f"{gpu}/gpu-samples-20261202T192900Z-0001.dmon")]
    # outside the patterns it was asked for, the same listing is refused, never fetched
    assert parse_listing((DATA / "list_logs.txt").read_bytes(), [DAEMON.log])[2] == [
        f"{gpu}/gpu-samples-20261202T192900Z-0001.dmon"]


def test_the_session_report_names_the_session_and_leaves_the_commands_stderr_whole():
    body = scripts.load("report_session.sh").body
    r = subprocess.run(["setsid", "sh", "-c", body, "swapctl", "sh", "-c", "echo out; echo err >&2; ps -o sid= $$"],
                       capture_output=True, timeout=30)
    err = _Stderr(report=True)
    err.feed(r.stderr)
    assert r.stdout.split(b"\n")[0] == b"out" and err.value() == b"err\n"
    assert err.session == int(r.stdout.split()[1])
