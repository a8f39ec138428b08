"""SSH hosts: paramiko opens the connection (ssh_config, keys, the agent), fabric when ssh_config gives the
host a ProxyJump or ProxyCommand; paramiko channels do the work.

fabric's Connection installs paramiko's AutoAddPolicy, which trusts any host key silently; swapctl
replaces it with its own policy (strict or accept-new) on the connection and on every gateway hop.
"""

from __future__ import annotations

import base64
import functools
import getpass
import hashlib
import importlib.util
import logging
import os
import re
import select
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO


class _InvokeWhenUsed:
    """paramiko imports invoke (fabric's base) as it is imported, for ssh_config's `Match exec` alone: with
    what invoke pulls in (unittest.mock, asyncio, yaml) 60-90 ms of every SSH verb (issue 23). paramiko is
    imported with invoke held back, and this stands in for it in paramiko.config: `Match exec` imports
    invoke when it runs, as does a ProxyJump host's fabric."""

    def __getattr__(self, name: str) -> Any:
        import invoke

        paramiko.config.invoke = invoke  # type: ignore[attr-defined]
        return getattr(invoke, name)


def _paramiko_without_invoke() -> None:
    if "paramiko" in sys.modules or "invoke" in sys.modules:
        return
    sys.modules["invoke"] = None  # type: ignore[assignment] # paramiko's `import invoke` fails, and goes on
    try:
        import paramiko.config
    finally:
        del sys.modules["invoke"]
    if importlib.util.find_spec("invoke") is not None:
        paramiko.config.invoke = _InvokeWhenUsed()  # type: ignore[attr-defined]


_paramiko_without_invoke()

import paramiko  # noqa: E402 (after its invoke is held back)

from ..errors import BadInput, HostKeyError, Refused, RemoteTimeout, Unreachable  # noqa: E402
from ..playbook import SSH_CONFIGS, HostSpec  # noqa: E402
from . import become  # noqa: E402
from .cmd import Cmd  # noqa: E402
from .host import MAX_LINE, MAX_OUTPUT, Held, Host, Prepared, Progress, Result, keep_tail  # noqa: E402

if TYPE_CHECKING:
    import fabric

CONNECT_TIMEOUT_S = 15  # the TCP connect and sshd's banner; `swapctl --connect-timeout S` sets another
# paramiko's transport thread logs a failed handshake with its traceback; swapctl says it in one line
logging.getLogger("paramiko").addHandler(logging.NullHandler())
WINDOW_SIZE = 64 << 20  # paramiko's 2 MiB default window starves bulk transfers
# sshd's MaxStartups (10:30:100 by default) drops new connections while 10 are unauthenticated: a fleet
# command opens at most this many at once, across all hosts (a bastion sees them all).
MAX_HANDSHAKES = 8
_handshakes = threading.BoundedSemaphore(MAX_HANDSHAKES)
STALL_S = 60  # a transfer that moves no byte for this long has lost its connection
# The command's first stderr line: the session it runs in (its pid, sshd made it a session leader).
_REPORT_SESSION = 'echo "swapctl-session $$" >&2; exec "$@"'
_SESSION_LINE = re.compile(rb"swapctl-session (\d+)\n")
# Ends a session swapctl stopped waiting for: every process in it (what the command started in other
# process groups too), not those that left it with setsid (a daemon, the GPU sampler).
_END_SESSION = 'pkill -KILL -s "$1" 2>/dev/null; kill -KILL -- "-$1" 2>/dev/null; exit 0'
END_SESSION_TIMEOUT_S = 10
# put() on a host where swapctl writes as root (sudo): the bytes go through a root command's stdin, as
# SFTP would write them as the login user. $1 the file, $2 the bytes it must already hold (a resume).
_WRITE = ('umask 077; have=$(stat -c %s -- "$1" 2>/dev/null || echo 0); if [ "$2" = 0 ]; then exec cat > "$1"; fi; '
          '[ "$have" = "$2" ] || { echo "$1 holds $have bytes, not $2" >&2; exit 1; }; exec cat >> "$1"')


def connect_timeout() -> float:
    """How long a connection may take to reach sshd's banner: $SWAPCTL_CONNECT_TIMEOUT (`--connect-timeout`)."""
    value = os.environ.get("SWAPCTL_CONNECT_TIMEOUT")
    try:
        seconds = float(value) if value else CONNECT_TIMEOUT_S
    except ValueError:
        seconds = 0
    if not seconds > 0:
        raise BadInput(f"--connect-timeout (SWAPCTL_CONNECT_TIMEOUT) {value!r}: give seconds, more than 0")
    return seconds


def _tcp(host: str, port: int) -> socket.socket:
    """A TCP connection with Nagle's algorithm off, as OpenSSH's ssh sets it. paramiko leaves it on: then
    each small request (open a channel, EOF) waits for the host's delayed ACK, 40 ms, so a trivial command
    took 48 ms on a zero-latency link instead of 5 ms, and the handshake 80 ms instead of 37."""
    sock = socket.create_connection((host, port), timeout=connect_timeout())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """strict: refuse unknown keys; accept-new: record them. A changed key is refused by paramiko itself."""

    def __init__(self, spec: HostSpec, known_hosts: Path):
        self.spec, self.known_hosts = spec, known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if self.spec.host_key_policy == "accept-new":
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.known_hosts, "a", encoding="ascii") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            client.get_host_keys().add(hostname, key.get_name(), key)
            return
        port = self.spec.port or 22
        raise HostKeyError(
            f"unknown host key {key.get_name()} {fingerprint(key)} for {hostname}; if that is the host's key, "
            f"set host_key_policy = \"accept-new\" for it once, or run "
            f"`ssh-keyscan -p {port} {self.spec.address} >> {self.known_hosts}`",
            host=self.spec.name,
        )


@functools.cache
def _ssh_config() -> paramiko.SSHConfig:
    """~/.ssh/config, then /etc/ssh/ssh_config, into one SSHConfig, as fabric reads them; once a process."""
    config = paramiko.SSHConfig()
    for path in SSH_CONFIGS:
        path = os.path.expanduser(path)
        if os.path.isfile(path):
            with open(path) as f:
                config.parse(f)
    return config


class _Direct:
    """What fabric's Connection does for a host without a gateway, with paramiko alone: the host's ssh_config
    (HostName, Port, User, IdentityFile after the playbook's identity_file), then SSHClient.connect, which
    tries the agent and ~/.ssh's keys as it does under fabric. fabric itself costs invoke's import."""

    gateway = None

    def __init__(self, address: str, user: str | None, port: int | None, key_filename: list[str],
                 ssh_config: paramiko.SSHConfigDict):
        self.ssh_config = ssh_config
        self.host = ssh_config.get("hostname", address)
        self.user = user or ssh_config.get("user") or getpass.getuser()
        self.port = port or int(ssh_config.get("port", 22))
        keys = [*key_filename, *ssh_config.get("identityfile", [])]
        self.connect_kwargs: dict[str, Any] = {"key_filename": keys} if keys else {}
        self.client = paramiko.SSHClient()

    @property
    def is_connected(self) -> bool:
        transport = self.client.get_transport()
        return bool(transport and transport.is_active())

    def open(self) -> None:
        limit = connect_timeout()
        self.client.connect(hostname=self.host, port=self.port, username=self.user, timeout=limit,
                            banner_timeout=limit, **self.connect_kwargs)

    def close(self) -> None:
        transport = self.client.get_transport()
        if transport is not None:
            # a Ctrl-C (KeyboardInterrupt) that lands inside paramiko's open_channel, between registering the
            # channel and linking it to the transport, leaves one whose close raises AttributeError: link it
            for chan in list(transport._channels.values()):  # type: ignore[attr-defined]
                if chan.transport is None:
                    chan._set_transport(transport)
        self.client.close()


def _open_with(spec: HostSpec) -> _Direct | fabric.Connection:
    """The connection object for `spec`: paramiko's own, or fabric's when ssh_config names a gateway."""
    keys = [os.path.expanduser(spec.identity_file)] if spec.identity_file else []
    config = _ssh_config().lookup(spec.address)
    if "proxyjump" not in config and "proxycommand" not in config:
        return _Direct(spec.address, spec.user, spec.port, keys, config)
    import fabric  # a gateway: fabric walks the ProxyJump chain (and imports invoke)

    return fabric.Connection(spec.address, user=spec.user, port=spec.port, connect_timeout=connect_timeout(),
                             connect_kwargs={"key_filename": keys} if keys else {})


class SshHost(Host):
    """One SSH connection per host, opened on first use and reused for every step."""

    def __init__(self, spec: HostSpec):
        self.spec, self.name = spec, spec.name
        self._conn: _Direct | fabric.Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.Lock()
        self._sudo = False  # every command through `sudo -n`: become = "sudo" and a login that is not root

    # -- connecting ------------------------------------------------------------------------------

    def _known_hosts(self, conn: _Direct | fabric.Connection) -> Path:
        if self.spec.known_hosts:
            return Path(self.spec.known_hosts).expanduser()
        configured = conn.ssh_config.get("userknownhostsfile")
        if configured:
            return Path(configured.split()[0]).expanduser()
        return Path("~/.ssh/known_hosts").expanduser()

    def _secure(self, conn: _Direct | fabric.Connection) -> None:
        known = self._known_hosts(conn)
        if known.exists():
            conn.client.load_host_keys(str(known))
        conn.client.set_missing_host_key_policy(_HostKeyPolicy(self.spec, known))
        if conn.gateway is not None and not isinstance(conn.gateway, str):  # a ProxyJump hop, not a command
            self._secure(conn.gateway)

    def _connection(self) -> _Direct | fabric.Connection:
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            conn = _open_with(self.spec)
            self._secure(conn)
            where = f"{conn.user}@{conn.host}:{conn.port}"
            try:
                with _handshakes:
                    if conn.gateway is None:  # direct: the socket is made here, to turn Nagle off first
                        conn.connect_kwargs["sock"] = _tcp(conn.host, conn.port)
                    conn.open()
            except HostKeyError:
                raise
            except paramiko.BadHostKeyException as exc:
                raise HostKeyError(
                    f"host key for {where} CHANGED (now {fingerprint(exc.key)}); refusing to connect. If the host "
                    f"was reinstalled, remove the old key: `ssh-keygen -R '[{conn.host}]:{conn.port}' -f "
                    f"{self._known_hosts(conn)}`",
                    host=self.name,
                ) from None
            except paramiko.AuthenticationException as exc:
                raise Refused(
                    f"authentication failed as {where} ({exc}); check identity_file, ssh-agent and the "
                    f"host's authorized_keys",
                    host=self.name,
                ) from None
            except (OSError, paramiko.SSHException, EOFError) as exc:
                reason = str(exc) or type(exc).__name__
                raise Unreachable(
                    f"cannot connect to {where}: {reason}; check address, port and that sshd runs",
                    host=self.name,
                ) from None
            transport = conn.client.get_transport()
            assert transport is not None
            transport.set_keepalive(15)
            transport.default_window_size = WINDOW_SIZE
            self._sudo = self.spec.become == "sudo" and conn.user != "root"
            if self._sudo:
                self._check_sudo(conn, transport)
            self._conn = conn
            return conn

    def shown(self, cmd: Cmd) -> str:
        """As the host runs it: through `sudo -n --` where swapctl becomes root (known once connected)."""
        return f"{' '.join(become.SUDO)} {cmd}" if self._sudo else str(cmd)

    def _check_sudo(self, conn: _Direct | fabric.Connection, transport: paramiko.Transport) -> None:
        """`sudo -n true` before any other command: a sudo that would ask for a password refuses the host
        here, exit 3, before anything on it changed. One deadline for the whole call (twice the connect
        timeout): a limit per read let a sudo that kept talking hold the connection for ever."""
        what = f"the {become.PROBE.label} step"
        limit = 2 * connect_timeout()
        late = RemoteTimeout(f"`{become.PROBE}` did not finish within {limit:g} s (twice --connect-timeout); run it "
                             f"there as {conn.user} to see what it waits for", host=self.name)
        deadline = time.monotonic() + limit

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            return left

        err = bytearray()
        try:
            chan = transport.open_session(timeout=remaining())
            chan.exec_command(become.PROBE.render())
            chan.shutdown_write()
            # to the channel's EOF, not its exit status: sshd may send that before the last of stderr
            while True:
                chan.settimeout(remaining())
                if not (data := chan.recv_stderr(1 << 16)):
                    break
                keep_tail(err, data)
            ended = chan.status_event.wait(remaining())
            code = chan.recv_exit_status() if ended else -1
            self._close(chan)
        except TimeoutError:
            conn.close()
            raise late from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            conn.close()
            raise self._broken(what, exc) from None
        if not ended:
            conn.close()
            raise late
        refused = become.refusal(self.name, conn.user, code, err.decode("utf-8", "replace"))
        if refused:
            conn.close()
            raise refused

    def _transport(self) -> paramiko.Transport:
        transport = self._connection().client.get_transport()
        assert transport is not None
        return transport

    @staticmethod
    def _what(cmd: Cmd) -> str:
        """A command as an error names it: a script by its step, not its arguments."""
        return f"the {cmd.label} step" if cmd.label else str(cmd)

    @staticmethod
    def _close(chan: paramiko.Channel) -> None:
        try:
            chan.close()
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the connection is gone already: so is the channel

    def _lost(self, what: str, transport: paramiko.Transport) -> Unreachable:
        """The error for a command cut off: it says whether the link went or the host ended the session."""
        if transport.is_active():
            why = "the host ended the session without an exit status"
        else:
            exc = transport.get_exception()  # what stopped paramiko's reader, if it was an error
            why = str(exc) if exc and str(exc) else "the connection closed"
        return Unreachable(f"connection lost during {what} ({why})", host=self.name)

    def _broken(self, what: str, exc: BaseException) -> Unreachable:
        """The error for a command whose channel raised `exc`."""
        why = f"no byte moved for {STALL_S} s" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
        return Unreachable(f"connection lost during {what} ({why})", host=self.name)

    def _open_channel(self, cmd: Cmd, report_session: bool = False) -> paramiko.Channel:
        """A channel running `cmd`. With `report_session` its first stderr line is `swapctl-session ID`: sshd
        starts each session's shell with setsid, so its pid, kept by `exec`, is the session that
        _end_session kills. `exec sh -c` first: a login shell that is fish or csh knows no `$$` or `>&2`."""
        try:
            transport = self._transport()  # connects first: then whether it runs through sudo is known
            line = become.as_root(cmd) if self._sudo else cmd.render()
            if report_session:
                line = f"exec sh -c {shlex.quote(_REPORT_SESSION)} swapctl {line}"
            chan = transport.open_session(window_size=WINDOW_SIZE, timeout=CONNECT_TIMEOUT_S)
            chan.exec_command(line)
            if feed := cmd.feed():  # its named inputs, ahead of anything else on its stdin
                chan.sendall(feed)
        except (paramiko.SSHException, OSError, EOFError) as exc:  # "Channel closed.": sshd could not start it
            raise self._broken(self._what(cmd), exc) from None
        return chan

    # -- commands --------------------------------------------------------------------------------

    def stream_bytes(self, cmd: Cmd, on_data: Callable[[bytes], None], *, stdin: bytes | None = None,
                     timeout: float = 120, end_late: bool = True) -> tuple[int, bytes]:
        chan = self._open_channel(cmd, report_session=end_late)
        transport = chan.get_transport()
        err = _Stderr(end_late)
        try:
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            deadline = time.monotonic() + timeout
            while True:
                # Whether it had ended is read before the output is drained: the transport thread may take
                # the host's EOF and close between two reads here, and then all the output is in already.
                ended = chan.closed or not transport.is_active()
                # the deadline is checked after every read: a host that keeps data waiting is held to it too
                while chan.recv_ready():
                    on_data(chan.recv(1 << 16))
                    if time.monotonic() > deadline:
                        raise self._late(cmd, timeout)
                while chan.recv_stderr_ready():
                    err.feed(chan.recv_stderr(1 << 16))
                    if time.monotonic() > deadline:
                        raise self._late(cmd, timeout)
                if chan.eof_received and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if ended:  # closed or cut off before it sent EOF: its output is incomplete
                    raise self._lost(self._what(cmd), transport)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._late(cmd, timeout)
                select.select([chan], [], [], min(remaining, 1.0))
            # EOF is not the end: a command may close its output and go on running
            if not chan.status_event.wait(max(deadline - time.monotonic(), 0)):
                raise self._late(cmd, timeout)
            return chan.recv_exit_status(), err.value()
        except RemoteTimeout:
            # through this connection only: a lost one would have raised Unreachable, not come here
            if end_late and not chan.exit_status_ready() and transport.is_active():
                while err.head is not None and chan.recv_stderr_ready():  # the report, if not read yet
                    err.feed(chan.recv_stderr(1 << 16))
                if err.session:
                    self._end_session(err.session)
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._broken(self._what(cmd), exc) from None
        finally:
            self._close(chan)

    def _end_session(self, session: int) -> None:
        """Kills what is left of a command's session on the host, best effort: a connection lost meanwhile
        must not hide the deadline it was cut off by."""
        try:
            chan = self._open_channel(Cmd.script(_END_SESSION, str(session), label="end-session"))
            chan.shutdown_write()
            chan.status_event.wait(END_SESSION_TIMEOUT_S)
            self._close(chan)
        except (Unreachable, OSError, EOFError, paramiko.SSHException):
            pass

    def _bounded(self, out: bytearray, data: bytes, cmd: Cmd) -> None:
        """Keeps a sending command's output, up to MAX_OUTPUT."""
        out += data
        if len(out) > MAX_OUTPUT:
            raise self._too_large(cmd)(MAX_OUTPUT)

    def prepare(self, cmd: Cmd) -> Prepared:
        chan = self._open_channel(cmd)
        return Prepared(cmd, lambda chunks, timeout: self._send(chan, cmd, chunks, timeout), lambda: self._close(chan))

    def _send(self, chan: paramiko.Channel, cmd: Cmd, chunks: Iterable[bytes], timeout: float) -> Result:
        chan.settimeout(STALL_S)
        transport = chan.get_transport()  # never self._transport() here: that would connect again
        out, err = bytearray(), bytearray()
        try:
            try:
                for chunk in chunks:
                    chan.sendall(chunk)
                    while chan.recv_ready():
                        self._bounded(out, chan.recv(1 << 16), cmd)
            except OSError:
                if not chan.exit_status_ready() or not transport.is_active():
                    raise  # it did not stop reading by itself: the link went
            chan.shutdown_write()
            deadline = time.monotonic() + timeout
            while True:
                active = transport.is_active()  # read first: an exit status that came before the end counts
                if chan.exit_status_ready():
                    break
                if not active:
                    raise self._lost(self._what(cmd), transport)
                if time.monotonic() > deadline:
                    raise self._late(cmd, timeout)
                select.select([chan], [], [], 0.5)
                while chan.recv_ready():
                    self._bounded(out, chan.recv(1 << 16), cmd)
                    if time.monotonic() > deadline:
                        raise self._late(cmd, timeout)
                while chan.recv_stderr_ready():
                    keep_tail(err, chan.recv_stderr(1 << 16))
            while chan.recv_ready():
                self._bounded(out, chan.recv(1 << 16), cmd)
            while chan.recv_stderr_ready():
                keep_tail(err, chan.recv_stderr(1 << 16))
            code = chan.recv_exit_status()
            if code == -1:  # paramiko's "closed without an exit status": the session was killed
                raise self._lost(self._what(cmd), transport)
            return Result(cmd, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._broken(self._what(cmd), exc) from None
        finally:
            self._close(chan)

    def put(self, local: BinaryIO, remote_path: str, size: int, progress: Progress | None = None,
            offset: int = 0) -> None:
        self._connection()
        if self._sudo:
            return self._put_as_root(local, remote_path, progress, offset)
        try:
            if self._sftp is None:
                self._sftp = paramiko.SFTPClient.from_transport(
                    self._transport(), window_size=WINDOW_SIZE, max_packet_size=1 << 15)
            assert self._sftp is not None
            channel = self._sftp.get_channel()
            if channel is not None:
                channel.settimeout(STALL_S)
            done = offset
            with self._sftp.open(remote_path, "ab" if offset else "wb") as remote:
                remote.set_pipelined(True)  # no round trip per 32 KiB write (paramiko#1660)
                while chunk := local.read(1 << 20):
                    remote.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            transport = self._conn.client.get_transport() if self._conn else None  # as it is: no new connection
            if isinstance(exc, TimeoutError) or transport is None:
                raise self._broken(f"upload to {remote_path}", exc) from None
            if isinstance(exc, OSError) and transport.is_active():  # SFTP's own errors: the host said no
                raise Refused(f"cannot write {remote_path}: {exc}", host=self.name) from None
            raise self._lost(f"upload to {remote_path}", transport) from None

    def _put_as_root(self, local: BinaryIO, remote_path: str, progress: Progress | None, offset: int) -> None:
        """put() through the stdin of a command run as root: the file is root's from its first byte."""
        done = offset

        def chunks() -> Iterable[bytes]:
            nonlocal done
            while chunk := local.read(1 << 20):
                yield chunk
                done += len(chunk)
                if progress:
                    progress(done)

        result = self.send(Cmd.script(_WRITE, remote_path, str(offset), label="write"), chunks(), timeout=STALL_S)
        if not result.ok:  # a full disk, or a resume whose bytes changed: upload.py tells them apart
            why = result.stderr.strip().splitlines()[-1:] or [f"exit {result.exit_code}"]
            raise Refused(f"cannot write {remote_path}: {why[0][:200]}", host=self.name)

    def hold(self, cmd: Cmd, timeout: float = 30) -> Held:
        chan = self._open_channel(cmd)
        transport = chan.get_transport()
        buf = bytearray()
        deadline = time.monotonic() + timeout
        while True:
            ended = chan.closed or not transport.is_active()  # read before the drain, as in stream_bytes
            while chan.recv_ready() and b"\n" not in buf and len(buf) < MAX_LINE:  # its first line is all we want
                buf += chan.recv(4096)
            if b"\n" in buf or chan.eof_received or len(buf) >= MAX_LINE:
                break
            if ended:
                self._close(chan)
                raise self._lost(self._what(cmd), transport)
            if time.monotonic() > deadline:
                self._close(chan)
                raise RemoteTimeout(f"`{cmd}` said nothing within {timeout:.0f} s", host=self.name)
            select.select([chan], [], [], 0.5)
        return Held(bytes(buf[:MAX_LINE]).split(b"\n", 1)[0].decode("utf-8", "replace"), lambda: self._close(chan),
                    chan.sendall)

    def close(self) -> None:
        with self._lock:
            if self._sftp is not None:
                self._sftp.close()
                self._sftp = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class _Stderr:
    """A command's stderr, its tail kept; with `report` its first line, the session report, is taken off."""

    def __init__(self, report: bool):
        self.tail, self.head, self.session = bytearray(), bytearray() if report else None, 0

    def feed(self, data: bytes) -> None:
        if self.head is not None:
            self.head += data
            if b"\n" not in self.head and len(self.head) < 64:
                return  # the report is short: it has not all come yet
            m = _SESSION_LINE.match(self.head)
            if m and int(m[1]) > 1:
                self.session = int(m[1])
            data, self.head = bytes(self.head[m.end():] if m else self.head), None
        keep_tail(self.tail, data)

    def value(self) -> bytes:
        return bytes(self.head or b"") + bytes(self.tail)


def wait_for_banner(address: str, port: int, timeout: float) -> None:
    """Returns once an SSH server answers with its banner; used by tests and the sandbox."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.02)
    raise TimeoutError(f"no SSH banner from {address}:{port} within {timeout} s ({last})")
