"""Playbook loading: the contract keys, and one clear error line for each kind of bad playbook."""

import os
import subprocess
import sys

import pytest

from swapctl import playbook as pb
from swapctl.errors import ExitCode, PlaybookError

GOOD = """\
# a user's comment, kept
[hosts.gpu-box]
address = "141.0.85.211"
port = 40612
user = "root"
identity_file = "~/.ssh/id_ed25519"
known_hosts = "~/.ssh/known_hosts"
host_key_policy = "strict"

[groups]
farm = ["gpu-box"]

[daemon]
binary = "/data/cuzk"
args = ["--config", "/data/cuzk.toml"]
match = "cuzk"
log = "/data/cuzk.log"
ready_log = "cuzk-daemon ready"
ready_timeout_s = 600
stop_grace_s = 30

[memory]
min_available_gib = 22.5
release_timeout_s = 900

[logs]
paths = ["/data/*.log"]
"""


def test_contract_keys_load():
    book = pb.parse(GOOD, "lab.toml")
    host = book.hosts["gpu-box"]
    assert (host.address, host.port, host.user, host.host_key_policy) == ("141.0.85.211", 40612, "root", "strict")
    assert book.daemon.args == ("--config", "/data/cuzk.toml")
    assert book.daemon.state_dir == "/data/.swapctl/cuzk"
    assert book.memory.min_available_gib == 22.5  # fractions allowed
    assert book.log_paths == ("/data/*.log",) and book.groups == {"farm": ("gpu-box",)}
    assert book.keep_releases == 5


def test_nvidia_smi_time_limit_is_10_s_unless_the_playbook_says():
    assert pb.parse(GOOD, "lab.toml").gpu.nvidia_smi_timeout_s == 10
    assert pb.parse(GOOD + "\n[gpu]\nnvidia_smi_timeout_s = 2.5\n", "lab.toml").gpu.nvidia_smi_timeout_s == 2.5


def test_match_defaults_to_binary_name():
    book = pb.parse('[daemon]\nbinary = "/data/cuzk-priodisp"\n')
    assert book.daemon.match_regex.search("/data/cuzk-priodisp --config x")


def test_the_daemon_settings_are_one_type_from_the_playbook_to_the_swap():
    # issue 32: the verbs that change a host get the playbook's own [daemon], checked, not a copy of another
    # type; with neither binary nor match set, nothing is matched (not every process, as "" would)
    book = pb.parse('[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\n')
    assert book.require_daemon() is book.daemon
    empty = pb.parse("")
    assert empty.daemon.match_regex is None
    with pytest.raises(ValueError, match="require_daemon"):
        empty.daemon.matcher()
    with pytest.raises(pb.PlaybookError, match="daemon.binary"):
        empty.require_daemon()


@pytest.mark.parametrize("text,line,fragment", [
    ('[daemon]\nbinary = "/data/cuzk\n', 2, "TOML syntax error"),
    ("[hosts.a]\nport = 22\n", 1, "hosts.a.address: missing required key `address`"),
    ('[hosts.a]\naddress = "x"\nport = "22"\n', 3, "hosts.a.port: must be an integer, not '22'"),
    ('[memory]\nmin_available_gib = "400"\n', 2, "memory.min_available_gib: must be a number"),
    ('[daemon]\nready_timout_s = 5\n', 2, "did you mean `ready_timeout_s`?"),
    ('[deamon]\nbinary = "/x"\n', None, "did you mean [daemon]?"),
    ('[hosts.a]\naddress = "x"\nhost_key_policy = "yes"\n', 3, "must be one of strict, accept-new"),
    ('[daemon]\nbinary = "data/cuzk"\n', 2, "must be an absolute path"),
    ('[daemon]\nmatch = "cuzk("\n', 2, "not a valid regular expression"),
    ('[daemon]\nargs = ["--config", 3]\n', 2, "must be a list of strings"),
    ('[hosts.a]\naddress = "x"\nport = 70000\n', 3, "must be a TCP port"),
    ('[releases]\nkeep = 1\n', 2, "at least 2"),
    ('[gpu]\nnvidia_smi_timeout_s = 0\n', 2, "gpu.nvidia_smi_timeout_s: must be more than 0 s"),
    ('[gpu]\n\nnvidia_smi_timeout_s = "10s"\n', 3, "gpu.nvidia_smi_timeout_s: must be a number, not '10s'"),
    ('[gpu]\nnvidia_smi_timeout = 5\n', 2, "did you mean `nvidia_smi_timeout_s`?"),
    ('[daemon]\nlog = "journal"\n', 2, 'daemon.log: "journal" needs the unit whose journal it is'),
    ('[daemon]\nunit = "cuzk service"\n', 2, "'cuzk service.service' is not a systemd service name"),
    ('[daemon]\nstop = "kill"\n', 2, "daemon.stop: must be one of term, drain, cordon, not 'kill'"),
    ('[daemon]\nstop = "drain"\n', 2, 'daemon.stop: "drain" reads the daemon\'s own status: set daemon.status_url'),
    ('[daemon]\nready = "status"\n', 2, 'daemon.ready: "status" reads the daemon\'s own status'),
    ('[daemon]\nready = "soon"\n', 2, "daemon.ready: must be one of log, status, proof"),
    ('[daemon]\ndrain_timeout = "wait"\n', 2, "daemon.drain_timeout: must be one of stop, refuse"),
    ('[daemon]\n\ndrain_timeout_s = 0\n', 3, "daemon.drain_timeout_s: must be more than 0 s"),
    ('[daemon]\nstatus_url = "127.0.0.1:9821"\n', 2, "daemon.status_url: '127.0.0.1:9821' is not an http:// URL"),
])
def test_bad_playbook_names_file_line_and_key(text, line, fragment):
    with pytest.raises(PlaybookError) as info:
        pb.parse(text, "lab.toml")
    message = str(info.value)
    assert fragment in message
    assert message.startswith(f"lab.toml:{line}:" if line else "lab.toml:")
    assert "\n" not in message and info.value.exit_code == ExitCode.BAD_INPUT


def test_stop_and_ready_default_to_todays_and_proof_needs_no_status_url():
    d = pb.parse("[daemon]\n", "lab.toml").daemon
    assert (d.stop, d.ready, d.status_url, d.drain_timeout) == ("term", "log", None, "stop")
    assert pb.parse('[daemon]\nready = "proof"\n', "lab.toml").daemon.ready == "proof"  # the Phase 7 line then


def test_a_unit_is_a_service_as_systemctl_takes_it_and_journal_is_its_log():
    book = pb.parse('[daemon]\nunit = "cuzk"\nlog = "journal"\nbinary = "/data/cuzk"\n', "lab.toml")
    assert book.daemon.unit == "cuzk.service" and book.daemon.journal
    assert not pb.parse('[daemon]\nlog = "/data/cuzk.log"\n', "lab.toml").daemon.journal


def test_unknown_host_suggests_a_name():
    book = pb.parse(GOOD, "lab.toml")
    with pytest.raises(PlaybookError, match=r"unknown host 'gpu-bx' \(did you mean 'gpu-box'\?\)"):
        pb.resolve_host(book, "gpu-bx")


@pytest.mark.parametrize("target,user,address,port", [
    ("root@141.0.85.211:40612", "root", "141.0.85.211", 40612),
    ("141.0.85.211:40612", None, "141.0.85.211", 40612),
    ("alice@gpu.example", "alice", "gpu.example", None),
    ("root@[::1]:2222", "root", "::1", 2222),
])
def test_adhoc_hosts(target, user, address, port):
    spec = pb.resolve_host(pb.Playbook(path="x"), target)
    assert (spec.user, spec.address, spec.port) == (user, address, port)


def test_cli_bad_playbook_exits_2_with_one_line(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text('[hosts.a]\naddress = "127.0.0.1"\nport = "x"\n')
    r = subprocess.run([sys.executable, "-m", "swapctl", "status", "a", "-p", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == f"swapctl: {path}:3: hosts.a.port: must be an integer, not 'x'"


def test_missing_playbook_says_how_to_make_one(tmp_path):
    r = subprocess.run([sys.executable, "-m", "swapctl", "status", "gpu-box", "-p", str(tmp_path / "none.toml")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "run `swapctl init`" in r.stderr


def test_a_host_with_no_playbook_anywhere_says_there_is_none_not_unknown_host(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SWAPCTL_PLAYBOOK", "SWAPCTL_INVENTORY")}
    r = subprocess.run([sys.executable, "-m", "swapctl", "status", "sandbox"], capture_output=True, text=True,
                       cwd=tmp_path, env={**env, "HOME": str(tmp_path)})
    assert r.returncode == 2, r.stderr
    assert "no ./swapctl.toml (or $SWAPCTL_PLAYBOOK); see `swapctl init`" in r.stderr
    assert "unknown host" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_init_writes_a_playbook_that_loads(tmp_path):
    target = tmp_path / "swapctl.toml"
    r = subprocess.run([sys.executable, "-m", "swapctl", "init", str(target), "--port", "40612"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    book = pb.load(target)
    assert book.hosts["gpu-box"].port == 40612 and book.memory.min_available_gib == 400
    assert book.hosts["gpu-box"].address == "192.0.2.10"  # the documentation range (RFC 5737), nobody's host
    assert "# swapctl playbook" in target.read_text()
    again = subprocess.run([sys.executable, "-m", "swapctl", "init", str(target)], capture_output=True, text=True)
    assert again.returncode == 2 and "--force" in again.stderr


def test_limit_keeps_the_selected_hosts_whose_name_matches(tmp_path):
    from swapctl.cli.common import select_hosts
    from swapctl.errors import BadInput

    book = pb.parse('[hosts.gpu-a1]\naddress = "10.0.0.1"\n[hosts.gpu-a2]\naddress = "10.0.0.2"\n'
                 '[hosts.gpu-b1]\naddress = "10.0.0.3"\n[groups]\nfarm = ["gpu-a1", "gpu-a2", "gpu-b1"]\n')
    assert [s.name for s in select_hosts(book, ["@farm"], "gpu-a*")] == ["gpu-a1", "gpu-a2"]
    assert [s.name for s in select_hosts(book, ["@farm"])] == ["gpu-a1", "gpu-a2", "gpu-b1"]
    with pytest.raises(BadInput, match="--limit 'gpu-c\\*' matches none of the hosts @farm names"):
        select_hosts(book, ["@farm"], "gpu-c*")
