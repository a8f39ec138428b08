"""The SSH layer against a real OpenSSH sshd: host keys, authentication, quoting, held commands."""

import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swapctl.errors import ExitCode, HostKeyError, Refused, Unreachable
from swapctl.host import scripts
from swapctl.playbook import HostSpec
from swapctl.remote import Cmd, Secret, SshHost

from lab import NetnsLab, keygen, make_server, wait_until


def spec(server, **over) -> HostSpec:
    values = dict(name="lab", address=server.address, port=server.port, user="root",
                  identity_file=str(server.client_key), known_hosts=str(server.known_hosts))
    values.update(over)
    return HostSpec(**values)


def ssh_keygen_fingerprint(pub: Path) -> str:
    return subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True).stdout.split()[1]


def test_strict_refuses_unknown_key_and_shows_fingerprint(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.touch()
    with pytest.raises(HostKeyError) as info, SshHost(spec(sshd, known_hosts=str(empty))) as host:
        host.run(Cmd("true"))
    message = str(info.value)
    assert ssh_keygen_fingerprint(sshd.dir / "host_key.pub") in message
    assert "accept-new" in message and "ssh-keyscan" in message
    assert info.value.exit_code == ExitCode.REFUSED
    assert empty.read_text() == ""  # nothing recorded


def test_accept_new_records_key_then_strict_accepts(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    with SshHost(spec(sshd, known_hosts=str(known), host_key_policy="accept-new")) as host:
        assert host.run(Cmd("echo", "hi")).stdout == "hi\n"
    assert sshd.host_pub in known.read_text()
    with SshHost(spec(sshd, known_hosts=str(known))) as host:
        assert host.run(Cmd("true")).ok


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_changed_host_key_is_always_refused(sshd, tmp_path, policy):
    other = tmp_path / "other_key"
    keygen(other)
    known = tmp_path / "known_hosts"
    known.write_text(f"[{sshd.address}]:{sshd.port} ssh-ed25519 {Path(f'{other}.pub').read_text().split()[1]}\n")
    with pytest.raises(HostKeyError, match="CHANGED.*ssh-keygen -R"), \
            SshHost(spec(sshd, known_hosts=str(known), host_key_policy=policy)) as host:
        host.run(Cmd("true"))
    assert sshd.host_pub not in known.read_text()


def test_known_hosts_is_parsed_once_while_it_stays_the_same_hashed_names_included(sshd, tmp_path, monkeypatch):
    # issue 34: each connection of a fleet command parsed the whole file, N lines N times at N hosts
    other = tmp_path / "other_key"
    keygen(other)
    known = tmp_path / "known_hosts"
    wrong = Path(f"{other}.pub").read_text().split()[:2]
    known.write_text("".join(f"[10.9.0.{i}]:22 {' '.join(wrong)}\n" for i in range(1, 100))
                     + f"[{sshd.address}]:{sshd.port} ssh-ed25519 {sshd.host_pub}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)  # as HashKnownHosts
    assert f"[{sshd.address}]" not in known.read_text()
    from swapctl.remote.ssh_connection import _KnownHosts

    loads = []
    real = _KnownHosts.read
    monkeypatch.setattr(_KnownHosts, "read", lambda self, path: (loads.append(str(path)), real(self, path))[1])
    for _ in range(2):
        with SshHost(spec(sshd, known_hosts=str(known))) as host:
            assert host.run(Cmd("true")).ok
    assert loads == [str(known)]
    with known.open("a") as f:  # the file changed: read again, and the host still checked against it
        f.write(f"[10.9.1.1]:22 {' '.join(wrong)}\n")
    with SshHost(spec(sshd, known_hosts=str(known))) as host:
        assert host.run(Cmd("true")).ok
    assert loads == [str(known)] * 2


def test_a_host_key_swapped_for_one_of_the_same_size_and_mtime_is_refused_by_the_same_process(sshd, tmp_path):
    """The parsed known_hosts is kept while the file stays as it was: a key replaced by another of its type
    keeps the file's size, and `cp -p` (or a store whose files share one mtime) keeps its mtime. Keyed on
    size and mtime alone, the same process went on trusting the key that had been taken out."""
    other = tmp_path / "other_key"
    keygen(other)
    known = tmp_path / "known_hosts"
    name = f"[{sshd.address}]:{sshd.port}"
    known.write_text(f"{name} ssh-ed25519 {sshd.host_pub}\n")
    with SshHost(spec(sshd, known_hosts=str(known))) as host:
        assert host.run(Cmd("true")).ok
    before = known.stat()
    known.write_text(f"{name} ssh-ed25519 {Path(f'{other}.pub').read_text().split()[1]}\n")
    os.utime(known, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (known.stat().st_size, known.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with pytest.raises(HostKeyError, match="CHANGED"), SshHost(spec(sshd, known_hosts=str(known))) as host:
        host.run(Cmd("true"))


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_marker_lines_are_read_as_ssh_reads_them_and_a_revoked_key_is_refused(sshd, tmp_path, policy):
    """`@cert-authority` and `@revoked` lines (a company's known_hosts often has the first) stopped paramiko's
    reader with a traceback. A host certificate authority is passed over, the host's own line still
    counts, and a key marked @revoked is refused under either policy, listed as known or not."""
    ca = tmp_path / "ca_key"
    keygen(ca)
    known = tmp_path / "known_hosts"
    name = f"[{sshd.address}]:{sshd.port}"
    authority = f"@cert-authority *.example.org {Path(f'{ca}.pub').read_text().split()[0]} " \
                f"{Path(f'{ca}.pub').read_text().split()[1]}\n"
    known.write_text(authority + f"{name} ssh-ed25519 {sshd.host_pub}\n")
    with SshHost(spec(sshd, known_hosts=str(known), host_key_policy=policy)) as host:
        assert host.run(Cmd("true")).ok
    for listed in (f"{name} ssh-ed25519 {sshd.host_pub}\n", ""):
        known.write_text(authority + listed + f"@revoked * ssh-ed25519 {sshd.host_pub}\n")
        with pytest.raises(HostKeyError, match="@revoked") as info, \
                SshHost(spec(sshd, known_hosts=str(known), host_key_policy=policy)) as host:
            host.run(Cmd("true"))
        assert info.value.exit_code == ExitCode.REFUSED
        assert known.read_text().count(sshd.host_pub) == 1 + bool(listed)  # accept-new recorded nothing


def test_refused_authentication(sshd, tmp_path):
    stranger = tmp_path / "stranger"
    keygen(stranger)
    with pytest.raises(Refused, match="authentication failed as root@127.0.0.1") as info, \
            SshHost(spec(sshd, identity_file=str(stranger))) as host:
        host.run(Cmd("true"))
    assert info.value.exit_code == ExitCode.REFUSED


def test_unreachable_port(sshd):
    from lab import free_port

    port = free_port()
    with pytest.raises(Unreachable, match=f"cannot connect to root@127.0.0.1:{port}"), \
            SshHost(spec(sshd, port=port)) as host:
        host.run(Cmd("true"))


def test_the_connection_sends_small_packets_at_once(sshd):
    # With Nagle's algorithm on (paramiko's default), each command's small requests waited for the
    # host's delayed ACK: 40 ms a command. swapctl makes the socket itself, with TCP_NODELAY.
    with SshHost(spec(sshd)) as host:
        host.run(Cmd("true"))
        assert host._transport().sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_one_connection_serves_every_command(sshd):
    with SshHost(spec(sshd)) as host:
        ports = {host.run(Cmd("sh", "-c", 'echo "$SSH_CLIENT"')).stdout.split()[1] for _ in range(5)}
    assert len(ports) == 1


def _interrupted_open(host_spec: HostSpec, monkeypatch) -> None:
    """The stateful test found it: Ctrl-C as the deploy took the lock ended in `AttributeError: 'NoneType'
    object has no attribute '_unlink_channel'`, exit 1. The interrupt landed in paramiko's open_channel after
    the channel was registered, before it was linked. A signal cannot be aimed at one bytecode, so this
    raises the KeyboardInterrupt at that line (a patched Channel._set_transport, once), on a real sshd. Through
    a gateway, the error was raised in paramiko's transport thread instead, its traceback on stderr."""
    import paramiko

    real = paramiko.Channel._set_transport
    calls = []

    def interrupted(chan, transport):
        calls.append(chan)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(chan, transport)

    died = []  # paramiko's own thread, where fabric's close meets the unlinked channel
    monkeypatch.setattr(threading, "excepthook", died.append)
    host = SshHost(host_spec)
    host.__enter__()
    host.run(Cmd("true"))
    transport = host._transport()
    monkeypatch.setattr(paramiko.Channel, "_set_transport", interrupted)
    with pytest.raises(KeyboardInterrupt):
        host.run(Cmd("true"))
    monkeypatch.setattr(paramiko.Channel, "_set_transport", real)
    host.__exit__(None, None, None)  # raised AttributeError before the fix
    transport.join(5)
    assert calls and not transport.is_active()
    assert not died, [f"{d.thread}: {d.exc_type.__name__}: {d.exc_value}" for d in died]


def test_a_ctrl_c_inside_opening_a_channel_leaves_a_connection_that_closes(sshd, monkeypatch):
    _interrupted_open(spec(sshd), monkeypatch)


def test_a_ctrl_c_inside_opening_a_channel_through_a_gateway_leaves_a_connection_that_closes(
        sshd, lab_dir, swapctl_env, monkeypatch):
    """The same through ssh_config's ProxyJump (fabric's Connection): the review after the fix above found
    that it mended only the direct connection's close."""
    from swapctl.remote.ssh_connection import _ssh_config

    jump = make_server(lab_dir / "jump-ctrl-c", address="127.0.0.2", client_key=sshd.client_key,
                       known_hosts=sshd.known_hosts)
    jump.start()
    jump.trust()
    config = swapctl_env / "home" / ".ssh" / "config"
    config.parent.mkdir(exist_ok=True)
    common = f"    User root\n    IdentityFile {sshd.client_key}\n    UserKnownHostsFile {sshd.known_hosts}\n"
    config.write_text(f"Host behind\n    HostName {sshd.address}\n    Port {sshd.port}\n{common}"
                      f"    ProxyJump root@{jump.address}:{jump.port}\n\nHost {jump.address}\n{common}")
    _ssh_config.cache_clear()  # read once a process: this test's HOME has its own
    try:
        _interrupted_open(HostSpec(name="behind", address="behind"), monkeypatch)
    finally:
        _ssh_config.cache_clear()
        jump.stop()


def test_failed_command_carries_exit_code_and_tail(sshd):
    from swapctl.errors import RemoteCommandFailed

    with SshHost(spec(sshd)) as host, pytest.raises(RemoteCommandFailed) as info:
        host.run(Cmd("sh", "-c", "echo out; echo boom >&2; exit 7"))
    assert info.value.status == 7 and "boom" in str(info.value)


def test_secret_reaches_host_but_prints_masked(sshd):
    cmd = Cmd("printf", "%s", Secret("hunter2"))
    assert "hunter2" not in str(cmd) and "***" in str(cmd)
    with SshHost(spec(sshd)) as host:
        assert host.run(cmd).stdout == "hunter2"


@pytest.mark.parametrize("transport", ["ssh", "local"])
def test_a_command_that_closes_its_output_is_still_held_to_its_deadline(sshd, tmp_path, transport):
    # EOF on its output is not its end: it may go on running. The wait for its exit has the same deadline.
    from swapctl.errors import RemoteTimeout
    from swapctl.remote import connect

    marker = f": {tmp_path}"  # names this test's shell, to end it afterwards
    with connect(spec(sshd, transport=transport)) as host:
        with pytest.raises(RemoteTimeout, match="did not finish within 1 s"):  # not exit 0, 20 s later
            host.run(Cmd("sh", "-c", f"exec >&- 2>&-; sleep 20; {marker}"), timeout=1)
    subprocess.run(["pkill", "-f", marker], check=False)  # LocalHost ended it already; an SSH host did not


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended: only its parent has not read its status yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("transport", ["ssh", "local"])
def test_a_command_past_its_deadline_is_ended_on_the_host_with_what_it_started(sshd, tmp_path, transport):
    # issue 20: a status script stuck on a hung nvidia-smi stayed on the host after swapctl gave up on it
    from swapctl.errors import RemoteTimeout
    from swapctl.remote import connect

    pids = tmp_path / "pids"
    script = 'echo $$ > "$1"; sleep 300 & echo $! >> "$1"; wait'  # the shell and a child, both waiting forever
    with connect(spec(sshd, transport=transport)) as host:
        with pytest.raises(RemoteTimeout, match="did not finish within 1 s"):
            host.run(Cmd("sh", "-c", script, "stuck", str(pids)), timeout=1)
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) == 2
        wait_until(lambda: not any(map(_alive, started)), timeout=10, what=f"pids {started} to be gone")
        assert host.run(Cmd("echo", "still here")).stdout == "still here\n"  # the connection serves on


def test_the_session_report_is_not_in_a_commands_stderr(sshd):
    with SshHost(spec(sshd)) as host:
        r = host.run(Cmd("sh", "-c", "echo to-err >&2; exit 3"), check=False)
        assert (r.exit_code, r.stderr) == (3, "to-err\n")


def test_a_command_killed_on_the_host_is_told_from_a_lost_link(sshd):
    # The OOM killer takes the receiving script: its session ends without an exit status, while the
    # connection stays up for the next command.
    with SshHost(spec(sshd)) as host:
        with pytest.raises(Unreachable, match=r"during sh -c .* \(the host ended the session without an exit status\)"):
            host.send(Cmd("sh", "-c", "kill -9 $$"), [b"payload"])
        assert host.run(Cmd("echo", "still here")).stdout == "still here\n"


def test_held_command_ends_when_released(sshd, tmp_path):
    marker = tmp_path / "held"
    with SshHost(spec(sshd)) as host:
        held = host.hold(Cmd("sh", "-c", 'echo "$$" > "$1"; echo started; exec cat >/dev/null', "x", str(marker)))
        assert held.first_line == "started"
        pid = int(marker.read_text())
        assert Path(f"/proc/{pid}").exists()
        held.close()
        from lab import wait_until

        def ended() -> bool:
            try:
                return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
            except OSError:  # gone, possibly between two reads
                return True

        wait_until(ended, what="held command to end")


def test_a_held_command_whose_connection_drops_before_its_first_line_says_so(sshd, tmp_path):
    # It used to wait out its whole deadline and report that the command said nothing; the lock's
    # caller then read the empty line as "another deploy holds the lock".
    import os
    import signal
    import threading

    from lab import session_of, wait_until

    marker = f"held-{tmp_path.name}"

    def cut() -> None:
        wait_until(lambda: marker.encode() in subprocess.run(["ps", "-eo", "args"], capture_output=True).stdout,
                   what="the held command")
        os.kill(session_of(marker), signal.SIGKILL)

    cutter = threading.Thread(target=cut)
    cutter.start()
    with SshHost(spec(sshd)) as host, pytest.raises(Unreachable, match=r"connection lost .*\(the connection closed\)"):
        host.hold(Cmd("sh", "-c", f"sleep 60; : {marker}"), timeout=50)
    cutter.join()
    subprocess.run(["pkill", "-f", marker], check=False)  # the host's side outlives its session


safe_text = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)


@pytest.fixture(scope="module")
def shared_host(sshd):
    with SshHost(spec(sshd)) as host:
        yield host


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(safe_text, min_size=1, max_size=4))
def test_arbitrary_arguments_arrive_unchanged(shared_host, args):
    """Spaces, quotes, $(...), ;, newlines and unicode reach the remote program as the same argv."""
    out = shared_host.run(Cmd("printf", "%s\\0", *args)).stdout
    assert out.split("\0")[:-1] == args


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(alphabet=st.characters(blacklist_characters="\x00/", blacklist_categories=("Cs",)),
                    min_size=1, max_size=30).filter(lambda s: s not in (".", "..")))
def test_arbitrary_file_names_survive_scripts(shared_host, tmp_path_factory, name):
    """A value passed to a script as $1 is a path, never shell code."""
    base = tmp_path_factory.mktemp("names")
    target = base / name
    shared_host.run(Cmd.script('printf x > "$1"; cat -- "$1"', str(target), label="touch"))
    assert target.read_text() == "x"


def test_a_bash_script_runs_the_hosts_bashrc_once(tmp_path):
    # sshd runs every command through the login shell, which reads ~/.bashrc; the bash a script asks
    # for would read it a second time (0.1-1 s with `pyenv init` or `conda init` in it).
    rc = tmp_path / "bashrc"
    rc.write_text("echo sourced >> /data/bashrc-count\n")
    (tmp_path / "lab").mkdir()
    lab = NetnsLab(tmp_path / "lab", 1, prefix="swr", bashrc=rc)
    try:
        lab.start()
        server = lab.servers[0]
        with SshHost(spec(server)) as host:
            out = host.run(scripts.script('echo "bash $BASH_VERSION"', label="probe", bash=True)).stdout
        assert out.startswith("bash 5")  # the script did run under bash
        assert (server.data / "bashrc-count").read_text().splitlines() == ["sourced"]
    finally:
        lab.close()
