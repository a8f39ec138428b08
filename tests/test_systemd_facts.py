"""The unit facts' parsers, on `systemctl show` and `systemctl cat` output recorded from systemd 252
(tests/data/systemd/, taken in the systemd lab: tests/systemd_lab.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from swapctl.facts.systemd import parse_environment, parse_exec, parse_unit
from swapctl.masking import masked_unit_text

DATA = Path(__file__).parent / "data" / "systemd"


def test_a_running_unit_with_a_drop_in():
    u = parse_unit((DATA / "running.txt").read_text())
    assert (u.name, u.state, u.main_pid, u.n_restarts, u.restart) == ("cuzk.service", "active/running", 69, 0,
                                                                      "on-failure")
    assert u.exec_path == "/data/cuzk" and u.exec_argv == ("/data/cuzk", "--config", "/data/cuzk.toml")
    assert u.environment == (("RUST_LOG", "info"), ("FIL_PROOFS_NOTE", "a b"), ("API_TOKEN", "hunter2"),
                             ("CUDA_VISIBLE_DEVICES", "0"))  # the drop-in's too, in order
    assert u.working_directory == "/data" and u.drop_ins == ("/etc/systemd/system/cuzk.service.d/10-gpu.conf",)
    assert u.files.startswith("# /etc/systemd/system/cuzk.service\n") and "# /etc/systemd/system/cuzk.service.d/" \
        in u.files
    assert u.found


def test_a_crashed_unit_waiting_to_restart_has_no_main_pid():
    u = parse_unit((DATA / "auto-restart.txt").read_text())
    assert (u.state, u.main_pid, u.result) == ("activating/auto-restart", 0, "exit-code")
    assert u.environment == () and u.working_directory == "" and u.drop_ins == ()


def test_a_unit_the_host_does_not_have():
    u = parse_unit((DATA / "not-found.txt").read_text())
    assert u.name == "nothing.service" and not u.found and u.files == ""


@pytest.mark.parametrize("text", ["", "--- cat\n", "\n--- cat\n"])
def test_no_unit_section_is_no_unit(text):
    assert parse_unit(text) is None


@pytest.mark.parametrize(("value", "path", "argv"), [
    ("{ path=/a ; argv[]=/a -c x ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; "
     "status=0/0 }", "/a", ("/a", "-c", "x")),
    ("{ path=/a ; argv[]=/a ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; "
     "status=0/0 } ; { path=/b ; argv[]=/b ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; "
     "code=(null) ; status=0/0 }", "/a", ("/a",)),  # several commands: the first
    ("", "", ()),
])
def test_exec_start(value, path, argv):
    assert parse_exec(value) == (path, argv)


def test_environment_quoting_and_a_value_it_cannot_split():
    assert parse_environment('A=1 "B=x y" C=') == (("A", "1"), ("B", "x y"), ("C", ""))
    assert parse_environment('A=1 "B=open') == (("A", "1"), ('"B', "open"))  # unbalanced: split on spaces


def test_secrets_in_the_unit_files_are_masked():
    text = masked_unit_text(parse_unit((DATA / "running.txt").read_text()).files, ["RUST_LOG"])
    assert "Environment=RUST_LOG=*** \"FIL_PROOFS_NOTE=a b\" API_TOKEN=***" in text and "hunter2" not in text
    assert "Environment=CUDA_VISIBLE_DEVICES=0" in text and "ExecStart=/data/cuzk --config /data/cuzk.toml" in text
