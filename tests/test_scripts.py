"""The host scripts as shipped: they parse, declare their inputs, include their libraries by name, and
take any value as data."""

import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swapctl.host import scripts
from swapctl.remote import LocalHost, Secret

# each script under bash, and under sh too unless it is a bash one (the GPU sampler's: process substitution,
# read -t; receive.sh), as scripts/lint checks them
PARSED_BY = [(name, shell) for name in scripts.names() for shell in ("sh", "bash")
             if shell == "bash" or scripts.load(name).shell != "bash"]


@pytest.mark.parametrize("name, shell", PARSED_BY)
def test_every_loaded_script_parses(name, shell):
    body = scripts.load(name).body
    r = subprocess.run([shell, "-n", "-c", body], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_libraries_are_inlined_once_and_no_include_line_is_left():
    body = scripts.load("swap.sh").body
    assert not re.search(r"^\. \./", body, re.M)
    assert body.count("stop_daemon() {") == 1 and body.count("alive() {") == 1


def test_a_script_run_with_missing_or_unknown_inputs_is_refused_before_it_runs():
    with pytest.raises(ValueError, match="differs in \\['grace_ms'\\]"):
        scripts.command("stop.sh", pid=1, unit="")
    with pytest.raises(ValueError, match="differs in \\['colour'\\]"):
        scripts.command("tail.sh", path="/x", offset=0, lines=3, unit="", inv="", colour="red")


def test_the_receive_script_runs_under_bash_from_its_first_line():
    assert scripts.load("receive.sh").shell == "bash" and scripts.load("swap.sh").shell == "sh"
    assert scripts.command("swap.sh", bash=True, **{n: "" for n in scripts.load("swap.sh").inputs}).argv[
        :2] == ("bash", "--norc")


def test_named_inputs_show_by_name_and_secrets_stay_masked():
    cmd = scripts.command("write_file.sh", path="/data/m.json", text=Secret("AWS_SECRET=hunter2"))
    assert str(cmd) == "<write-file script> path=/data/m.json text=***"
    # named inputs travel on stdin: the command line, which any user of the host can read, holds neither
    assert "hunter2" not in cmd.render() and "/data/m.json" not in cmd.render()
    assert b"hunter2" in cmd.feed() and b"/data/m.json" in cmd.feed()


@settings(max_examples=40, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=60))
def test_any_value_reaches_a_script_as_data(tmp_path_factory, text):
    """A value passed by name is data, never shell code: spaces, quotes, $(...), ;, newlines, unicode."""
    path = tmp_path_factory.mktemp("w") / "out"
    LocalHost().run(scripts.command("write_file.sh", path=str(path), text=text))
    assert path.read_bytes().decode() == text + "\n"


def test_importing_the_scripts_pulls_in_no_ssh_library():
    """The scripts and their reports are plain data: no paramiko or fabric behind them."""
    code = ("import sys, swapctl.host.scripts, swapctl.swap.words; "
            "print(sorted({'paramiko', 'fabric'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
