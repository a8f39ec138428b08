"""The CLI's presentation paths that need no host, run in-process (swapctl.cli.environment, as httpie's
tests run `http()`): the same consoles, widths and exit codes as the console script, without a fork.
The first test holds that to the console script itself, so the others read what a user is shown."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swapctl.cli import VERBS
from swapctl.cli.environment import Environment, run

DATA = Path(__file__).parent / "data" / "cuzk-real"
ONE, TWO = str(DATA / "one-gpu-nocolor.log"), str(DATA / "two-gpu-three-runs.log")
SWAPCTL = Path(sys.executable).parent / "swapctl"


@pytest.mark.parametrize("argv", [["timings", ONE], ["timings", TWO, "--json"], ["timings", "--compare", ONE, TWO],
                                  ["timings", TWO, "--run", "last", "--all"]],
                         ids=["text", "json", "compare", "last-run-all"])
def test_in_process_a_verb_prints_what_the_console_script_prints_in_a_pipe(argv):
    ran = run(argv, Environment(columns=80))
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("FORCE_COLOR", None)
    proc = subprocess.run([str(SWAPCTL), *argv], capture_output=True, text=True, env=env, timeout=60)
    assert (ran.code, ran.stdout, ran.stderr) == (proc.returncode, proc.stdout, proc.stderr)
    assert ran.code == 0 and ran.stdout


def test_timings_tables_fit_80_columns_and_json_carries_every_run():
    text = run(["timings", TWO], Environment(columns=80))
    rows = [line for line in text.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert text.code == 0 and rows and max(map(len, rows)) <= 80, text.stdout
    doc = json.loads(run(["timings", TWO, "--json"]).stdout)
    assert doc["version"] == 1 and len(doc["runs"]) == 3  # the log holds three daemon runs


def _playbook(tmp_path: Path, daemon: str) -> str:
    path = tmp_path / "swapctl.toml"
    # 192.0.2.1 is the documentation range: a verb that tried to reach it would fail on the connection,
    # not on the input, and say so
    path.write_text(f'[hosts.lab]\naddress = "192.0.2.1"\nport = 1\n\n[daemon]\n{daemon}\n')
    return str(path)


GOOD = 'binary = "/data/cuzk"\nlog = "/data/cuzk.log"'


@pytest.mark.parametrize("argv, daemon, says", [
    (["status", "lab"], 'binray = "/data/cuzk"', ":6: daemon.binray: unknown key (did you mean `binary`?)"),
    (["deploy", "lab", "--binary", "/nonexistent/cuzk", "--yes"], GOOD, "/nonexistent/cuzk: no such file"),
    (["deploy", "lab", "--binary", "/etc/hostname", "--yes"], GOOD, "/etc/hostname is not an ELF executable"),
    (["experiment", "lab", "--binary", "/x", "--then", "maybe"], GOOD, "--then 'maybe': keep, rollback or ask"),
    (["rollback", "nohost"], GOOD, "unknown host 'nohost' (hosts in the playbook: lab)"),
    (["timings", "--run", "0x", ONE], GOOD, "--run '0x': give a run's number"),
], ids=["unknown-key", "no-binary", "not-elf", "bad-then", "unknown-host", "bad-run"])
def test_bad_input_is_one_line_naming_what_to_fix_with_exit_2_and_no_host_asked(tmp_path, argv, daemon, says):
    ran = run([*argv, "-p", _playbook(tmp_path, daemon)] if argv[0] != "timings" else argv)
    assert ran.code == 2, ran
    assert ran.stdout == "" and ran.stderr.count("\n") == 1 and ran.stderr.startswith("swapctl: "), ran.stderr
    assert says in ran.stderr and "connect" not in ran.stderr, ran.stderr


def test_help_lists_every_verb_within_80_columns():
    ran = run(["--help"], Environment(columns=80))
    assert ran.code == 0 and max(map(len, ran.stdout.splitlines())) <= 80, ran.stdout
    commands = ran.stdout.split("\nCommands:\n", 1)[1].splitlines()
    listed = {line.split()[0] for line in commands if line[:2] == "  " and line[2:3] != " "}
    assert set(VERBS) <= listed, set(VERBS) - listed


def test_the_environment_is_the_callers_only_for_the_run():
    before = dict(os.environ)
    ran = run(["--version"], Environment(environ={"SWAPCTL_PLAYBOOK": "/nowhere.toml"}))
    assert ran.code == 0 and ran.stdout.startswith("swapctl ")
    assert dict(os.environ) == before


REFACTOR = Path(__file__).parent / "data" / "refactor-2026-12-03" / "gpu-report"
G, H200 = Path(__file__).parent / "data" / "h200-gpm" / "run1" / "default", Path(__file__).parent / "data" / "h200-run"


@pytest.mark.parametrize("saved, argv", [
    ("gpm-run1-default.json", ["timings", str(G / "cuzk.log"), "--samples", str(G / "gpu-samples.dmon"), "--json"]),
    ("gpm-run1-default.txt", ["timings", str(G / "cuzk.log"), "--samples", str(G / "gpu-samples.dmon")]),
    ("gpm-run1-default-last.txt", ["timings", str(G / "cuzk.log"), "--samples", str(G / "gpu-samples.dmon"),
                                   "--run", "last"]),
    ("h200-run-compare.json", ["timings", "--compare", str(H200 / "pageable.log"), str(H200 / "pinned.log"), "--json"]),
    ("two-gpu-three-runs.json", ["timings", TWO, "--json"]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_the_typed_gpu_report_prints_what_the_dict_report_printed(saved, argv):
    # issue 32: the GPU figures became types (swapctl.logs.gpu_figures); these outputs were saved from the
    # dict-built report before (387bff1), with the GPU's counters, intervals and disagreements in them
    ran = run(argv, Environment(columns=100))
    want = (REFACTOR / saved).read_text()
    assert ran.code == 0
    if saved.endswith(".json"):
        got = json.loads(ran.stdout)
        # each run's gpu_workers came after these were saved (issue 43, item 4); those logs have no
        # `GPU worker started` line (the stand-in of then logged none), so each run's is empty
        workers = _pop_runs_key(got, "gpu_workers")  # none in --compare's document, which has no run rows
        assert all(w == {} for w in workers) and (workers or "--compare" in argv), workers
        assert got == json.loads(want)  # the same document; keys in the types' order
    else:
        assert ran.stdout == want


def _pop_runs_key(doc, key: str) -> list:
    """`key` taken out of every run row of a `timings --json` document (those with a `timeline_share`)."""
    found = []
    if isinstance(doc, dict):
        if "timeline_share" in doc and "run" in doc and key in doc:
            found.append(doc.pop(key))
        for v in doc.values():
            found += _pop_runs_key(v, key)
    elif isinstance(doc, list):
        for v in doc:
            found += _pop_runs_key(v, key)
    return found


@pytest.mark.parametrize("how", ["option", "variable"])
def test_the_inventory_reaches_the_verbs_playbook_through_its_context_not_the_process_environment(
        tmp_path, monkeypatch, how):
    """issue 46, item 2: `-i FILE` (or $SWAPCTL_INVENTORY) is the verb's, handed to it by the root command
    (common.root); the root used to write it into os.environ for the loader to read back."""
    from swapctl import playbook as pb

    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpus]\ngpu-a ansible_host=192.0.2.7 ansible_port=2\n")
    book = _playbook(tmp_path, GOOD)
    seen, load = [], pb.load
    monkeypatch.setattr(pb, "load", lambda *a, **kw: seen.append(os.environ.get("SWAPCTL_INVENTORY")) or load(*a, **kw))
    argv, environ = (["-i", str(inventory)], {}) if how == "option" else ([], {"SWAPCTL_INVENTORY": str(inventory)})
    ran = run([*argv, "rollback", "nohost", "-p", book], Environment(environ=environ))
    assert ran.code == 2 and "unknown host 'nohost' (hosts in the playbook: gpu-a, lab)" in ran.stderr, ran.stderr
    assert seen == [environ.get("SWAPCTL_INVENTORY")]  # the process's variables as the caller set them, no more
    ran = run(["rollback", "nohost", "-p", book])  # the next run, without it: the playbook's hosts alone
    assert ran.code == 2 and "(hosts in the playbook: lab)" in ran.stderr, ran.stderr


def test_a_connect_timeout_is_every_hosts_of_the_playbook_and_of_a_host_argument(tmp_path):
    from swapctl import playbook as pb

    book = pb.load(_playbook(tmp_path, GOOD), connect_timeout_s=2.5)
    adhoc = pb.resolve_host(book, "root@192.0.2.9:40612")
    assert (book.hosts["lab"].connect_timeout_s, adhoc.connect_timeout_s) == (2.5, 2.5)
    assert pb.load(_playbook(tmp_path, GOOD)).hosts["lab"].connect_timeout_s == pb.CONNECT_TIMEOUT_S == 15


def test_a_connect_timeout_that_is_no_number_is_refused_before_any_host_is_asked(tmp_path):
    ran = run(["status", "lab", "-p", _playbook(tmp_path, GOOD)],
              Environment(environ={"SWAPCTL_CONNECT_TIMEOUT": "soon"}))
    assert ran.code == 2 and "--connect-timeout" in ran.stderr and "'soon'" in ran.stderr, ran.stderr
