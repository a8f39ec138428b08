"""`become = "sudo"`: a login that is not root, as GPU clouds give (`ubuntu`, `ec2-user`).

Real users (useradd, each with its own ~/.ssh/authorized_keys) log in to a real sshd; one has a real
sudoers rule (/etc/sudoers.d, NOPASSWD, with Debian's `use_pty` and a sudo log file to read), the other
none, so its sudo asks for a password. The daemon runs as root, started by hand, as on such a box.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_playbooks import adapted

from swapctl import playbook as pb
from swapctl.errors import Refused, RemoteTimeout
from swapctl.playbook import examples
from swapctl.remote import Cmd, connect
from swapctl.remote.become import rule

from conftest import Box
from lab import SshServer, make_server, path_without, prover_config, swapctl, swapctl_in_background, wait_until

SECRET = "s3cr3t-value-that-sudo-must-never-log"


def sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Users:
    """Two real logins on this machine: `sudoer` with a NOPASSWD rule, `plain` without one."""

    def __init__(self, base: Path):
        tag = os.getpid() % 100000
        self.sudoer, self.plain = f"swsudo{tag}", f"swplain{tag}"
        self.rules = Path(f"/etc/sudoers.d/swapctl-test-{tag}")  # no dot in the name: sudo skips those
        self.log = base / "sudo.log"

    def create(self, client_key: Path) -> None:
        assert shutil.which("sudo"), "these tests need sudo: apt-get install sudo (scripts/system-deps does)"
        for user in (self.sudoer, self.plain):
            subprocess.run(["userdel", "-r", user], capture_output=True)  # one a killed run left behind
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", user], check=True)
            subprocess.run(["usermod", "-p", "*", user], check=True)  # no password, yet not locked: sshd takes keys
            ssh = Path(f"/home/{user}/.ssh")
            ssh.mkdir(mode=0o700)
            shutil.copy(f"{client_key}.pub", ssh / "authorized_keys")
            subprocess.run(["chown", "-R", f"{user}:{user}", str(ssh)], check=True)
        text = (f"{rule(self.sudoer)}\n"
                f"Defaults:{self.sudoer} use_pty, logfile={self.log}, loglinelen=0\n"
                f"Defaults:{self.plain} logfile={self.log}, loglinelen=0\n")
        tmp = self.rules.with_name(self.rules.name + ".new")  # a dotted name: sudo ignores it until renamed
        tmp.write_text(text)
        tmp.chmod(0o440)
        subprocess.run(["visudo", "-c", "-q", "-f", str(tmp)], check=True)
        tmp.rename(self.rules)

    def remove(self) -> None:
        self.rules.unlink(missing_ok=True)
        for user in (self.sudoer, self.plain):
            subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
            subprocess.run(["userdel", "-r", user], capture_output=True)

    def logged(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture(scope="module")
def sudo_host(tmp_path_factory):
    """A real sshd taking each user's own authorized_keys, and the two users."""
    yield from sudo_server(tmp_path_factory.mktemp("sudo"))


def sudo_server(base: Path, path: str | None = None) -> Iterator[tuple[SshServer, Users]]:
    """A real sshd under `base` taking each user's own authorized_keys (with `path` as its sessions' PATH),
    and the two users, made with useradd; both removed after the yield."""
    server = make_server(base / "host")
    server.home_keys = True
    if path is not None:
        server.path = path
    users = Users(base)
    users.create(server.client_key)
    server.start()
    server.trust()
    try:
        yield server, users
    finally:
        server.stop()
        users.remove()


@pytest.fixture
def sbox(sudo_host, tmp_path, swapctl_env, request):
    """A box on the sudo host whose playbook logs in as the sudoer with become = "sudo"."""
    server, users = sudo_host
    data = server.data / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    data.mkdir()
    box = Box(server, data, tmp_path)
    box.users = users
    box.write_playbook(host={"user": users.sudoer, "become": "sudo"})
    yield box
    box.kill_all()


def deploy(box: Box, binary: Path, *extra: str):
    return swapctl("deploy", "lab", "--binary", str(binary), "--yes", "-p", str(box.playbook_path), *extra)


def runs_only(box: Box, binary: Path) -> bool:
    """Whether exactly one daemon runs in the box, from `binary`; False while processes come and go."""
    try:
        return [sha(Path(f"/proc/{p}/exe")) for p in box.daemons()] == [sha(binary)]
    except OSError:  # one ended between the listing and the read
        return False


def owner(path: Path) -> tuple[int, int]:
    st = path.lstat()
    return st.st_uid, st.st_gid


def test_deploy_through_sudo_leaves_releases_state_and_lock_to_root(sbox, prover, prover_b):
    old = sbox.start_by_hand(prover)
    user_home = Path(f"/home/{sbox.users.sudoer}")
    home_before = sorted(user_home.rglob("*"))
    r = deploy(sbox, prover_b)
    assert r.returncode == 0, r.stderr
    [new] = sbox.daemons()
    assert new != old and sha(Path(f"/proc/{new}/exe")) == sha(prover_b)
    assert os.stat(f"/proc/{new}").st_uid == 0  # the daemon runs as root, as the old one did
    state = sbox.data / ".swapctl" / "cuzk"
    made = [state, state / "releases", state / "lock", state / "lock.info", state / "journal.jsonl",
            *(state / "releases").rglob("*")]
    assert len(made) > 7  # both releases, each a binary and a manifest
    assert {p.name: owner(p) for p in made} == {p.name: (0, 0) for p in made}
    assert oct(state.stat().st_mode & 0o777) == "0o700"
    assert sorted(user_home.rglob("*")) == home_before  # nothing written to the login's home
    # every command went through sudo, as that user
    assert f"{sbox.users.sudoer} : PWD=" in sbox.users.logged() and "COMMAND=/usr/bin/true" in sbox.users.logged()


def test_a_dry_run_through_sudo_shows_each_command_as_it_would_run_through_sudo(sbox, prover, prover_b):
    pid = sbox.start_by_hand(prover)
    r = deploy(sbox, prover_b, "--dry-run", "-v")
    assert r.returncode == 0, r.stderr
    shown = r.stderr.split("remote commands it would run:", 1)[1].splitlines()
    commands = [line.strip() for line in shown if line.strip() and not line.strip().startswith("#")]
    assert len(commands) >= 3 and all(c.startswith("sudo -n -- ") for c in commands), commands
    assert sbox.daemons() == [pid]  # a dry run changes nothing


def test_a_sudo_that_asks_for_a_password_refuses_before_any_change(sbox, prover, prover_b):
    old = sbox.start_by_hand(prover)
    user = sbox.users.plain
    sbox.write_playbook(host={"user": user, "become": "sudo"})
    r = deploy(sbox, prover_b)
    assert r.returncode == 3, r.stderr
    [line] = [x for x in r.stderr.splitlines() if x.startswith("swapctl:")]  # one error line
    assert line == (f"swapctl: lab: sudo asks {user} for a password; give {user} a NOPASSWD rule, "
                    f"`{user} ALL=(root) NOPASSWD: ALL` in /etc/sudoers.d/swapctl (write it with `visudo -f`), "
                    f"or log in as root")
    assert sbox.daemons() == [old]  # the running daemon keeps running
    assert not (sbox.data / ".swapctl").exists()  # no release, no state directory, no lock
    for verb in (["status", "lab"], ["rollback", "lab", "--yes"], ["history", "lab"], ["fetch-logs", "lab"]):
        r = swapctl(*verb, "-p", str(sbox.playbook_path))
        assert r.returncode == 3 and f"sudo asks {user} for a password" in r.stderr, (verb, r.stderr)
    assert sbox.daemons() == [old] and not (sbox.data / ".swapctl").exists()


def test_status_rollback_history_and_fetch_logs_work_through_sudo(sbox, prover, prover_b, tmp_path):
    old = sbox.start_by_hand(prover)
    sbox.log.chmod(0o600)  # a root-only log, as daemons' logs often are
    assert deploy(sbox, prover_b).returncode == 0
    status = swapctl("status", "lab", "--json", "-p", str(sbox.playbook_path))
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)["hosts"]["lab"]
    [daemon] = st["daemons"]  # its /proc entries are root's: read through sudo
    assert daemon["pid"] in sbox.daemons() and daemon["cwd"] == str(sbox.data)
    assert daemon["exe"] == os.path.realpath(sbox.binary) and len(st["releases"]) == 2
    history = swapctl("history", "lab", "--json", "-p", str(sbox.playbook_path))
    assert history.returncode == 0, history.stderr
    assert [e["outcome"] for e in json.loads(history.stdout)["journal"]] == ["deployed"]
    back = swapctl("rollback", "lab", "--yes", "-p", str(sbox.playbook_path))
    assert back.returncode == 0, back.stderr
    [again] = sbox.daemons()
    assert again != old and sha(Path(f"/proc/{again}/exe")) == sha(prover)
    sbox.write_playbook(host={"user": sbox.users.sudoer, "become": "sudo"}, logs={"paths": [str(sbox.log)]})
    dest = tmp_path / "logs"
    fetched = swapctl("fetch-logs", "lab", "--dest", str(dest), "-p", str(sbox.playbook_path))
    assert fetched.returncode == 0, fetched.stderr
    got = (dest / "lab" / "cuzk.log").read_bytes()
    assert b"cuzk-daemon ready" in got and sbox.log.read_bytes().startswith(got)


def test_secrets_never_reach_sudos_command_log(sbox, prover, prover_b):
    """sudo logs every command line it runs (syslog, here its logfile): a secret in an argv would be there."""
    sbox.write_playbook(host={"user": sbox.users.sudoer, "become": "sudo"},
                        daemon={"env": {"AWS_SECRET_ACCESS_KEY": SECRET}, "secret_env": ["AWS_SECRET_ACCESS_KEY"]})
    sbox.start_by_hand(prover)
    start = len(sbox.users.logged())
    r = deploy(sbox, prover_b)
    assert r.returncode == 0, r.stderr
    [new] = sbox.daemons()
    assert f"AWS_SECRET_ACCESS_KEY={SECRET}".encode() in Path(f"/proc/{new}/environ").read_bytes()  # it got there
    logged = sbox.users.logged()[start:]
    assert "COMMAND=" in logged and SECRET not in logged


def test_an_upload_written_without_sftp_is_roots_and_resumes(sudo_host, tmp_path):
    """Through sudo, put() streams into a root command's stdin (SFTP would write as the login user): the
    bytes arrive whole, root's, and a resume appends only to the bytes already there."""
    server, users = sudo_host
    spec = pb.HostSpec(name="lab", address=server.address, port=server.port, user=users.sudoer,
                       identity_file=str(server.client_key), known_hosts=str(server.known_hosts), become="sudo")
    payload = bytes(range(256)) * 40000 + b"\r\n\x03\x04\x1a\x00"  # a terminal's line discipline would change these
    target = server.data / "put-target"
    done: list[int] = []
    with connect(spec) as host:
        host.put(io.BytesIO(payload), str(target), len(payload), done.append)
        assert target.read_bytes() == payload and owner(target) == (0, 0)
        assert oct(target.stat().st_mode & 0o777) == "0o600"
        assert done[-1] == len(payload)
        target.write_bytes(payload[:1000])
        rest = io.BytesIO(payload)
        rest.seek(1000)
        host.put(rest, str(target), len(payload), offset=1000)
        assert target.read_bytes() == payload
        with pytest.raises(Refused, match=f"cannot write {target}: {target} holds {len(payload)} bytes, not 7$"):
            host.put(io.BytesIO(b"x"), str(target), 8, offset=7)  # a resume whose bytes are not what it expects
    assert target.stat().st_size == len(payload)


def test_sudo_passes_a_commands_stdin_through_unchanged(sudo_host):
    """What a command reads on stdin (an upload's zstd frames, and what issue 19 moves off the command line)
    reaches it byte for byte through `sudo -n`, with Debian's `use_pty` set for the login."""
    server, users = sudo_host
    spec = pb.HostSpec(name="lab", address=server.address, port=server.port, user=users.sudoer,
                       identity_file=str(server.client_key), known_hosts=str(server.known_hosts), become="sudo")
    payload = os.urandom(3 << 20) + b"\x04\x03\r\n"
    with connect(spec) as host:
        r = host.run(Cmd("sh", "-c", 'id -u; echo "$SUDO_USER"; sha256sum | cut -d" " -f1'), stdin=payload)
    assert r.stdout.split() == ["0", users.sudoer, hashlib.sha256(payload).hexdigest()]


def test_become_is_set_on_the_host_or_the_playbook_and_the_host_wins(tmp_path):
    text = """
become = "sudo"
[hosts.a]
address = "10.0.0.1"
user = "ubuntu"
[hosts.b]
address = "10.0.0.2"
user = "root"
become = "none"
[hosts.c]
address = "10.0.0.3"
transport = "local"
"""
    book = pb.parse(text, "x.toml")
    assert {n: h.become for n, h in book.hosts.items()} == {"a": "sudo", "b": "none", "c": "none"}
    assert pb.resolve_host(book, "ec2-user@10.0.0.9").become == "sudo"  # a host named on the command line too
    assert pb.parse('[hosts.a]\naddress = "x"\nbecome = "sudo"\n').hosts["a"].become == "sudo"
    assert pb.parse('[hosts.a]\naddress = "x"\n').hosts["a"].become == "none"


@pytest.mark.parametrize("text, error", [
    ('[hosts.a]\naddress = "x"\nbecome = "su"\n', 'x.toml:3: hosts.a.become: must be one of sudo, none, not \'su\''),
    ('become = true\n[hosts.a]\naddress = "x"\n', "x.toml:1: become: must be a string, not True"),
    ('[hosts.a]\naddress = "x"\ntransport = "local"\nbecome = "sudo"\n',
     'x.toml:4: hosts.a.become: sudo needs transport = "ssh"; on this machine, run swapctl itself under sudo'),
])
def test_a_bad_become_is_one_line_naming_the_key(text, error):
    with pytest.raises(pb.PlaybookError) as exc:
        pb.parse(text, "x.toml")
    assert str(exc.value) == error


def test_an_inventorys_ansible_become_sets_it_and_the_playbooks_own_host_wins(tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpus]\ngpu-a ansible_user=ubuntu ansible_become=true\ngpu-b ansible_become=no\n"
                   "gpu-c ansible_user=ubuntu\n[gpus:vars]\nansible_become_method=sudo\n")
    book = pb.parse('become = "none"\n', "x.toml", inventory=str(inv))
    assert {n: h.become for n, h in book.hosts.items()} == {"gpu-a": "sudo", "gpu-b": "none", "gpu-c": "none"}
    book = pb.parse('become = "sudo"\n', "x.toml", inventory=str(inv))
    assert book.hosts["gpu-c"].become == "sudo" and book.hosts["gpu-b"].become == "none"
    inv.write_text("gpu-a ansible_become=true ansible_become_method=su\n")
    with pytest.raises(pb.PlaybookError, match="ansible_become_method 'su' is not one swapctl knows"):
        pb.parse("", "x.toml", inventory=str(inv))


def test_a_root_login_with_become_sudo_runs_its_commands_without_sudo(sudo_host):
    """become = "sudo" for a whole fleet, one box of which logs in as root: sudo adds nothing there."""
    server, _ = sudo_host
    spec = pb.HostSpec(name="lab", address=server.address, port=server.port, user="root",
                       identity_file=str(server.client_key), known_hosts=str(server.known_hosts), become="sudo")
    with connect(spec) as host:
        r = host.run(Cmd("sh", "-c", 'echo "uid=$(id -u) by=${SUDO_USER:-nobody}"'))
    assert r.stdout.strip() == "uid=0 by=nobody"


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line) of every live process on this machine."""
    procs = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
                if stat[0] != "Z":
                    procs[int(p.name)] = (int(stat[1]), (p / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except (OSError, IndexError):
                pass
    return procs


def test_a_command_past_its_deadline_is_ended_on_the_host_though_root_runs_it(sudo_host):
    """The login user could not kill what sudo runs as root: the ending goes through sudo too."""
    server, users = sudo_host
    spec = pb.HostSpec(name="lab", address=server.address, port=server.port, user=users.sudoer,
                       identity_file=str(server.client_key), known_hosts=str(server.known_hosts), become="sudo")
    ran = server.data / "late-command-ran"
    naps = [f"{1000 + os.getpid() % 1000}.{i}" for i in (1, 2)]  # sleeps no other process on this machine has
    with connect(spec) as host, pytest.raises(RemoteTimeout):
        host.run(Cmd("sh", "-c", f'touch "$1"; sleep {naps[0]} & sleep {naps[1]}', "late", str(ran)), timeout=2)
    assert owner(ran) == (0, 0)  # it ran, as root

    def left() -> list[str]:
        return [cmd for _, cmd in _processes().values() if any(f"sleep {n}" in cmd for n in naps)]

    wait_until(lambda: not left(), what="the late command and its background child to be ended")


def test_a_swap_whose_connection_drops_finishes_alone_as_root(sbox, prover, prover_b):
    sbox.start_by_hand(prover, prover_config(child_hold_mib=8, child_linger_ms=2000))
    proc, lines, reader = swapctl_in_background("deploy", "lab", "--binary", str(prover_b), "--yes",
                                                "-p", str(sbox.playbook_path))
    wait_until(lambda: any("waiting" in line or "MemAvailable" in line for line in lines), what="the memory wait")
    procs = _processes()
    found = [pid for pid, (ppid, cmd) in procs.items()  # sudo's child, not the script's own subshells
             if "swapctl-swap" in cmd and procs.get(ppid, (0, ""))[1].startswith("sudo ")]
    assert len(found) == 1, [(pid, *procs[pid]) for pid in procs if "swapctl-swap" in procs[pid][1]]
    [script] = found
    session, seen = procs[script][0], []
    while not procs[session][1].startswith(f"sshd: {sbox.users.sudoer}@"):  # up through sudo to its session
        seen.append(procs[session][1])
        session = procs[session][0]
    assert any(cmd.startswith("sudo -n -- ") for cmd in seen), seen  # the swap runs under sudo
    os.kill(session, signal.SIGKILL)  # the connection drops, as a flaky link does
    assert proc.wait(60) == 5
    reader.join(5)
    assert any("the host finishes the swap by itself" in line for line in lines), lines
    wait_until(lambda: runs_only(sbox, prover_b), timeout=30,
               what="the new daemon, started by the host's swap script alone")
    wait_until(lambda: not any("swapctl-swap" in cmd and str(sbox.data) in cmd for _, cmd in _processes().values()),
               timeout=30, what="the cut-off swap script to end")  # before the teardown kills what it started


def test_the_sudo_example_deploys_and_rolls_back_through_sudo(sbox, prover, prover_b):
    """playbooks/sudo.toml as it stands, pointed at the sudo host with /data/zk moved to the box."""
    server, users = sbox.server, sbox.users
    text = adapted(examples.render("sudo"), {
        'address = "203.0.113.10"': f'address = "{server.address}"\nport = {server.port}\n'
                                    f'identity_file = "{server.client_key}"\nknown_hosts = "{server.known_hosts}"',
        'user = "ubuntu"': f'user = "{users.sudoer}"',
        "/data/zk": str(sbox.data),
        "ready_timeout_s = 600": "ready_timeout_s = 20", "stop_grace_s = 30": "stop_grace_s = 5",
        "min_available_gib = 400": "min_available_gib = 0.5", "release_timeout_s = 900": "release_timeout_s = 20",
    })
    sbox.playbook_path.write_text(text)
    assert pb.load(sbox.playbook_path).hosts["gpu-cloud"].become == "sudo"
    old = sbox.start_by_hand(prover)
    r = swapctl("deploy", "gpu-cloud", "--binary", str(prover_b), "--yes", "-p", str(sbox.playbook_path))
    assert r.returncode == 0, r.stderr
    assert [sha(Path(f"/proc/{p}/exe")) for p in sbox.daemons()] == [sha(prover_b)]
    assert owner(sbox.binary) == (0, 0) and owner(sbox.data / ".swapctl") == (0, 0)
    r = swapctl("rollback", "gpu-cloud", "--yes", "-p", str(sbox.playbook_path))
    assert r.returncode == 0, r.stderr
    [again] = sbox.daemons()
    assert again != old and sha(Path(f"/proc/{again}/exe")) == sha(prover)


def test_a_host_without_zstd_gets_the_plain_upload_as_root(sbox, prover, prover_b, tmp_path):
    """No zstd on sudo's PATH (secure_path): the plain upload (SFTP for a root login) goes through a root
    command's stdin, and install.sh checks its sha256 before the rename, as for any upload."""
    bin_dir = path_without(tmp_path / "no-zstd-bin", "zstd")
    rules = sbox.users.rules
    kept = rules.read_text()
    rules.write_text(kept + f"Defaults:{sbox.users.sudoer} secure_path={bin_dir}\n")
    try:
        sbox.start_by_hand(prover)
        r = deploy(sbox, prover_b)
        assert r.returncode == 0, r.stderr
    finally:
        rules.write_text(kept)
    state = sbox.data / ".swapctl" / "cuzk"
    [entry] = [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines()]
    assert entry["upload"]["method"] == "sftp" and entry["upload"]["wire_bytes"] == prover_b.stat().st_size
    release = state / "releases" / sha(prover_b)[:12] / "cuzk"
    assert release.read_bytes() == prover_b.read_bytes() and owner(release) == (0, 0)
    assert runs_only(sbox, prover_b)
