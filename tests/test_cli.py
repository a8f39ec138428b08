"""The habits people bring from other tools: --version, completion, help as written, 80 columns,
ssh_config aliases."""

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import typer
import typer.main

from swapctl import __version__
from swapctl import playbook as pb
from swapctl.cli import app

from conftest import own_box
from lab import make_server, swapctl

SWAPCTL = Path(sys.executable).parent / "swapctl"  # the console script: completion keys on its name


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local state and ~ (ssh_config) stay inside the test."""


def test_history_reads_at_80_columns_in_a_pipe_and_json_keeps_every_field(box, prover, prover_b):
    box.start_by_hand(prover)
    who = {"USER": "release-engineer-on-call", "LOGNAME": "release-engineer-on-call"}  # longer than its column
    r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path), env=who)
    assert r.returncode == 0, r.stderr
    r = swapctl("history", "lab", "-p", str(box.playbook_path), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    h = json.loads(swapctl("history", "lab", "--json", "-p", str(box.playbook_path)).stdout)
    [entry] = h["journal"]
    assert entry["by"].startswith("release-engineer-on-call@")  # whole in --json
    # in the table: on one line, cut with an ellipsis, never one letter a line
    assert sum(bool(re.search(r"│ release-engineer-o\w*… +│", line)) for line in lines) == 3, r.stdout
    assert entry["time"][:19].replace("T", " ") in r.stdout
    for release in h["releases"]:
        assert release["sha256"][:12] in r.stdout  # ids are copied into `rollback --to`: whole
    assert entry["from"][:12] in r.stdout and entry["to"][:12] in r.stdout
    assert "deployed" in r.stdout and "adopted, ok" in r.stdout
    r = swapctl("status", "lab", "-p", str(box.playbook_path), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    table = r.stdout[r.stdout.index("releases"):].splitlines()
    assert max(map(len, table)) <= 80
    for release in h["releases"]:  # id and time whole, the long who cut on one line
        assert release["sha256"][:12] in r.stdout and release["created"][:19].replace("T", " ") in r.stdout
    assert sum(bool(re.search(r"│ release-engineer-o\w*… +│", line)) for line in table) == 2, r.stdout


def test_version_is_the_packages():
    r = swapctl("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"swapctl {__version__}\n"
    assert version("swapctl") == __version__  # pyproject.toml takes it from the package: one source


def test_install_completion_makes_bash_complete_verbs_and_subcommands(swapctl_env):
    home = swapctl_env / "home"
    env = {**os.environ, "PATH": f"{SWAPCTL.parent}:{os.environ['PATH']}"}
    r = subprocess.run([str(SWAPCTL), "--install-completion", "bash"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "source" in (home / ".bashrc").read_text()  # a new shell picks it up
    script = home / ".bash_completions" / "swapctl.sh"

    def complete(*words: str) -> list[str]:
        line = f"source {script}; COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; " \
               f"_swapctl_completion swapctl; printf '%s\\n' \"${{COMPREPLY[@]}}\""
        done = subprocess.run(["bash", "--norc", "-c", line], env=env, capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert complete("swapctl", "dep") == ["deploy"]
    assert complete("swapctl", "sandbox", "''") == ["up", "down"]
    assert "--build-arg" in complete("swapctl", "deploy", "--bu")


def help_texts(command, path: tuple[str, ...] = ()):
    """(argv to its --help, help text) for every command and option under `command`."""
    yield path, command.help or ""
    for param in command.params:
        yield path, getattr(param, "help", None) or ""
    for name, sub in getattr(command, "commands", {}).items():
        yield from help_texts(sub, (*path, name))


def test_the_verb_list_in_help_is_each_verbs_own_first_line():
    """`swapctl --help` lists verbs from swapctl.cli.VERBS without importing them: the lines must agree."""
    from swapctl.cli import VERBS, load_verb
    for name, (_, _, line) in VERBS.items():
        assert load_verb(name).get_short_help_str(limit=1000) == line, name


def test_help_shows_every_verbs_summary_whole_at_80_columns_and_h_and_v_are_short_options():
    from swapctl import __version__
    from swapctl.cli import VERBS

    r = swapctl("-h", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    commands = r.stdout[r.stdout.index("Commands:"):]
    assert max(map(len, r.stdout.splitlines())) <= 80 and "..." not in commands, r.stdout
    listed = " ".join(commands.split())  # a long summary wraps under itself
    for name, (_, _, line) in VERBS.items():
        assert f"{name} {line}" in listed, name
    r = swapctl("-V")
    assert (r.returncode, r.stdout) == (0, f"swapctl {__version__}\n"), r
    for verb in ("deploy", "sandbox"):
        r = swapctl(verb, "-h")
        assert r.returncode == 0 and re.match(rf"Usage: .*swapctl {verb} ", r.stdout), r


def test_every_verbs_help_writes_its_values_one_way_as_man_pages_do():
    """Issue 30: `{HOST}`, `{hosts}...`, `{host}`, `--binary <str>`. One style: `HOST...`, `[LOG]...`,
    `--binary FILE`; upper case, no braces and no angle brackets."""
    from click.testing import CliRunner

    from swapctl.cli import VERBS, app

    for verb in VERBS:
        r = CliRunner().invoke(typer.main.get_command(app), [verb, "--help"], env={"COLUMNS": "120"})
        assert r.exit_code == 0, (verb, r.output)
        usage = r.output.splitlines()[0]
        assert not re.search(r"<[a-z ]+>|\{\w+(\.\.\.)?\}", r.output), (verb, r.output)
        args = r"( [A-Z\[][A-Z_.\]]*)*( COMMAND \[ARGS\]\.\.\.)?"
        assert re.fullmatch(rf"Usage: .* {verb} \[OPTIONS\]{args}", usage), usage
        for line in r.output.splitlines():
            if m := re.match(r"\s+(?:-\w, )?--[\w-]+ ([^ ]+)  ", line):  # an option that takes a value
                assert re.fullmatch(r"[A-Z][A-Z_|%=.]*|[a-z|]+\|[a-z|]+", m.group(1)), (verb, line)
    r = CliRunner().invoke(typer.main.get_command(app), ["deploy", "--help"], env={"COLUMNS": "120"})
    assert "Usage: swapctl deploy [OPTIONS] HOST..." in r.output and "--binary FILE" in r.output


def test_help_and_version_import_no_verb_ssh_or_rich():
    """Start-up (issue 23): listing the verbs costs typer, not paramiko, fabric, rich or the deploy core."""
    probe = ("import sys\nfrom swapctl.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('paramiko', 'fabric', 'invoke', 'rich')"
             " or m.startswith(('swapctl.cli.', 'swapctl.swap', 'swapctl.remote', 'swapctl.playbook'))))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "[]"


def test_the_library_imports_paramiko_only_to_connect_and_fabric_only_for_a_gateway():
    """Local verbs (timings, init --example) and playbook checks pay no SSH import; SshHost still resolves,
    with paramiko alone: fabric and invoke (60-90 ms) come only for a ProxyJump host or `Match exec`."""
    probe = ("import sys\nimport swapctl.remote, swapctl.playbook, swapctl.facts.status\n"
             "print(sorted(m for m in ('paramiko', 'fabric', 'invoke') if m in sys.modules))\n"
             "swapctl.remote.SshHost\nprint(sorted(m for m in ('paramiko', 'fabric', 'invoke') if m in sys.modules))\n"
             "import paramiko\nprint(paramiko.SSHConfig.from_text('Match exec true\\n  Port 2222\\n').lookup('h'))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[]", "['paramiko']", "{'port': '2222', 'hostname': 'h'}"]


def test_a_host_behind_a_proxyjump_is_reached_through_it(sshd, lab_dir, swapctl_env):
    """ssh_config's ProxyJump (fabric's gateway chain), both hops' keys verified; with the jump host down
    the same host is unreachable, so the connection did go through it."""
    jump = make_server(lab_dir / "jump", address="127.0.0.2", client_key=sshd.client_key,
                       known_hosts=sshd.known_hosts)  # another address: fabric skips a hop that is the host
    jump.start()
    jump.trust()
    try:
        config = swapctl_env / "home" / ".ssh" / "config"
        config.parent.mkdir(exist_ok=True)
        common = f"    User root\n    IdentityFile {sshd.client_key}\n    UserKnownHostsFile {sshd.known_hosts}\n"
        target = f"    HostName {sshd.address}\n    Port {sshd.port}\n{common}"
        config.write_text(f"Host behind\n{target}    ProxyJump root@{jump.address}:{jump.port}\n\n"
                          f"Host {jump.address}\n{common}\nHost direct\n{target}")
        book = lab_dir / "empty.toml"
        book.write_text("")
        r = swapctl("status", "behind", "--json", "-p", str(book))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["hosts"]["behind"]["hostname"]
        jump.stop()
        r = swapctl("status", "behind", "-p", str(book))
        assert r.returncode == 3 and "cannot connect" in r.stderr, r.stderr
        direct = swapctl("status", "direct", "-p", str(book))
        assert direct.returncode == 0, direct.stderr  # the host itself was up all along
    finally:
        jump.stop()


def test_help_texts_render_as_written():
    """Square brackets are playbook tables here ("[build] table"), never markup to be eaten."""
    cases = [(path, token) for path, help in help_texts(typer.main.get_command(app))
             for token in re.findall(r"\[[^\]\s]+\]", help)]
    assert any(token == "[build]" for _, token in cases)  # the case that was eaten
    for path, token in cases:
        r = swapctl(*path, "--help", env={"COLUMNS": "200"})
        assert r.returncode == 0, r.stderr
        assert token in r.stdout, f"swapctl {' '.join(path)} --help lost {token}"


def test_a_bare_ssh_config_alias_is_a_host_as_for_ssh(box, prover, swapctl_env):
    pid = box.start_by_hand(prover)
    server = box.server
    config = swapctl_env / "home" / ".ssh" / "config"
    config.parent.mkdir()
    config.write_text(f"Host gpu1\n    HostName {server.address}\n    Port {server.port}\n    User root\n"
                      f"    IdentityFile {server.client_key}\n    UserKnownHostsFile {server.known_hosts}\n\n"
                      "Host gpu-*\n    User nobody\n")
    ssh = subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", "gpu1", "echo", "reached"],
                         capture_output=True, text=True, timeout=30)
    assert ssh.stdout == "reached\n", ssh.stderr  # what `ssh gpu1` does with this config
    r = swapctl("status", "gpu1", "--json", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    [daemon] = json.loads(r.stdout)["hosts"]["gpu1"]["daemons"]
    assert daemon["pid"] == pid
    r = swapctl("status", "gpu-7", "-p", str(box.playbook_path))  # only a pattern names it: not a host
    assert r.returncode == 2
    assert "unknown host 'gpu-7'" in r.stderr and "`Host gpu-7` in ~/.ssh/config" in r.stderr


@pytest.mark.parametrize("text,aliases", [
    ("Host gpu1\n  HostName 10.0.0.1\n", {"gpu1"}),
    ("Host gpu1 gpu2\n  Port 40612\nHost *\n  User root\n", {"gpu1", "gpu2"}),
    ("Host gpu-* !gpu-bad\n  User root\n", set()),
    ("", set()),
])
def test_ssh_config_aliases_are_the_literal_host_names(tmp_path, text, aliases):
    (tmp_path / "config").write_text(text)
    assert pb.ssh_config_aliases((str(tmp_path / "config"), str(tmp_path / "absent"))) == aliases


def test_an_ssh_config_alias_takes_everything_from_ssh_config():
    book = pb.Playbook(path="x")
    assert pb.resolve_host(book, "gpu1", ssh_aliases={"gpu1"}) == pb.HostSpec(name="gpu1", address="gpu1",
                                                                             become="none")
    with pytest.raises(pb.PlaybookError, match="unknown host 'gpu2'"):
        pb.resolve_host(book, "gpu2", ssh_aliases={"gpu1"})


def test_init_from_a_host_writes_the_playbook_of_what_runs_there_and_it_deploys(box, prover, prover_b,
                                                                                  swapctl_env, tmp_path):
    pid = box.start_by_hand(prover)
    s = box.server
    ssh = swapctl_env / "home" / ".ssh"
    ssh.mkdir()
    (ssh / "config").write_text(f"Host gpu1\n    HostName {s.address}\n    Port {s.port}\n    User root\n"
                                f"    IdentityFile {s.client_key}\n    UserKnownHostsFile {s.known_hosts}\n")
    out = tmp_path / "from-gpu1.toml"
    r = swapctl("init", str(out), "--from", "gpu1", "--match", re.escape(str(box.data)) + "/cuzk")
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert f"(pid {pid})" in text and "proposed from its log" in text
    book = pb.load(out)
    d = book.daemon
    assert (d.binary, d.args, d.cwd, d.log) == (str(box.binary), ("--config", str(box.config)), str(box.data),
                                                 str(box.log))
    assert d.ready_log == "cuzk-daemon ready" and book.log_paths == (str(box.log),)
    assert d.match_regex.search(f"{box.binary} --config {box.config}")
    assert not d.match_regex.search(f"{box.binary}.old --config x")
    r = swapctl("deploy", "gpu1", "--binary", str(prover_b), "--yes", "--json", "-p", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hosts"]["gpu1"]["outcome"] == "deployed"


def test_init_from_a_host_says_when_the_match_finds_no_daemon(box, swapctl_env, tmp_path):
    s = box.server
    target = f"root@{s.address}:{s.port}"
    (swapctl_env / "home" / ".ssh").mkdir()
    (swapctl_env / "home" / ".ssh" / "config").write_text(
        f"Host {s.address}\n    IdentityFile {s.client_key}\n    UserKnownHostsFile {s.known_hosts}\n")
    # the host is this machine: [o] keeps the regex from matching this swapctl's own command line
    r = swapctl("init", str(tmp_path / "x.toml"), "--from", target, "--match", "no-such-daem[o]n")
    assert r.returncode == 2 and not (tmp_path / "x.toml").exists()
    assert "--match 'no-such-daem[o]n': no process matches it" in r.stderr


def test_status_gpu_table_reads_at_80_columns(tmp_path, prover):
    """Two H200s as nvidia-smi reported them (recorded), on a host whose nvidia-smi prints that."""
    data = Path(__file__).parent / "data" / "nvidia-smi" / "h200-2gpu"
    nvidia_smi = (f'#!/bin/sh\ncase "$1" in\n  --query-gpu=*) cat {data / "query-gpu.csv"} ;;\n'
                  f'  --query-compute-apps=*) cat {data / "compute-apps.csv"} ;;\nesac\n')
    with own_box(tmp_path, tools={"nvidia-smi": nvidia_smi}) as box:
        box.start_by_hand(prover)
        r = swapctl("status", "lab", "-p", str(box.playbook_path), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80, r.stdout
    gpu_table = "\n".join(lines[next(i for i, line in enumerate(lines) if line.startswith("GPUs")):])
    for whole in ("NVIDIA H200", "2579/143771 MiB", "121/700 W", "1980/1980", "gen5 x16"):
        assert whole in gpu_table, f"{whole!r} broken or missing in:\n{r.stdout}"


def test_sandbox_up_on_a_taken_port_names_who_holds_it_and_fails(tmp_path):
    import os
    import socket

    from lab import swapctl

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = swapctl("sandbox", "up", "--dir", str(tmp_path / "sb"), "--port", str(port))
    assert r.returncode == 3, r.stderr
    assert f"port {port} is taken by pid {os.getpid()} (" in r.stderr and "sandbox up" not in r.stdout
