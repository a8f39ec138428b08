"""Opening an SSH connection: paramiko (ssh_config, keys, the agent), fabric when ssh_config gives the host
a ProxyJump or ProxyCommand; the host key checked; as many handshakes at once as sshd takes; `sudo -n true`
first where swapctl becomes root. SshHost (ssh.py) runs its commands over what this opens.

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
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias


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

from ..errors import HostKeyError, Refused, RemoteTimeout, UnknownHostKey, Unreachable  # noqa: E402
from ..playbook.spec import SSH_CONFIGS, HostSpec  # noqa: E402
from . import become  # noqa: E402
from .host import keep_tail  # noqa: E402

if TYPE_CHECKING:
    import fabric

__all__ = ["STALL_S", "WINDOW_SIZE", "Connection", "broken", "close_quietly", "fingerprint", "open_connection",
           "paramiko"]

# paramiko's transport thread logs a failed handshake with its traceback; swapctl says it in one line
logging.getLogger("paramiko").addHandler(logging.NullHandler())
ACTIVE_CHECK_S = 1.0  # how often a connection's transport thread looks up from its socket
WINDOW_SIZE = 64 << 20  # paramiko's 2 MiB default window starves bulk transfers
# sshd's MaxStartups (10:30:100 by default) drops new connections while 10 are unauthenticated: a fleet
# command opens at most this many at once, across all hosts (a bastion sees them all).
MAX_HANDSHAKES = 8
_handshakes = threading.BoundedSemaphore(MAX_HANDSHAKES)
STALL_S = 60  # a transfer that moves no byte for this long has lost its connection


def _tcp(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection with Nagle's algorithm off, as OpenSSH's ssh sets it. paramiko leaves it on: then
    each small request (open a channel, EOF) waits for the host's delayed ACK, 40 ms, so a trivial command
    took 48 ms on a zero-latency link instead of 5 ms, and the handshake 80 ms instead of 37."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """strict: refuse unknown keys; accept-new: record them; a key known_hosts marks @revoked: refuse it
    under either. A changed key is refused by paramiko itself."""

    def __init__(self, spec: HostSpec, known_hosts: Path, revoked: frozenset[str] = frozenset()):
        self.spec, self.known_hosts, self.revoked = spec, known_hosts, revoked

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if key.get_base64() in self.revoked:
            raise HostKeyError(f"host key {key.get_name()} {fingerprint(key)} for {hostname} is marked @revoked in "
                               f"{self.known_hosts}; refusing to connect", host=self.spec.name)
        if self.spec.host_key_policy == "accept-new":
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.known_hosts, "a", encoding="ascii") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            client.get_host_keys().add(hostname, key.get_name(), key)
            return
        port = self.spec.port or 22
        raise UnknownHostKey(
            f"unknown host key {key.get_name()} {fingerprint(key)} for {hostname}",
            f"if that is the host's key, set host_key_policy = \"accept-new\" for it once, or run "
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
                 ssh_config: paramiko.SSHConfigDict, timeout: float):
        self.timeout = timeout  # the TCP connect and sshd's banner
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
        self.client.connect(hostname=self.host, port=self.port, username=self.user, timeout=self.timeout,
                            banner_timeout=self.timeout, **self.connect_kwargs)

    def close(self) -> None:
        self.client.close()


def relink(client: paramiko.SSHClient) -> None:
    """A Ctrl-C (KeyboardInterrupt) that lands inside paramiko's open_channel, between registering the channel
    and linking it to the transport, leaves one whose close raises AttributeError: links it, before a close."""
    transport = client.get_transport()
    if transport is not None:
        for chan in list(transport._channels.values()):  # type: ignore[attr-defined]
            if chan.transport is None:
                chan._set_transport(transport)


def _open_with(spec: HostSpec) -> Connection:
    """The connection object for `spec`: paramiko's own, or fabric's when ssh_config names a gateway."""
    keys = [os.path.expanduser(spec.identity_file)] if spec.identity_file else []
    config = _ssh_config().lookup(spec.address)
    if "proxyjump" not in config and "proxycommand" not in config:
        return _Direct(spec.address, spec.user, spec.port, keys, config, spec.connect_timeout_s)
    import fabric  # a gateway: fabric walks the ProxyJump chain (and imports invoke)

    return fabric.Connection(spec.address, user=spec.user, port=spec.port, connect_timeout=spec.connect_timeout_s,
                             connect_kwargs={"key_filename": keys} if keys else {})


Connection: TypeAlias = "_Direct | fabric.Connection"


def _known_hosts(spec: HostSpec, conn: Connection) -> Path:
    if spec.known_hosts:
        return Path(spec.known_hosts).expanduser()
    configured = conn.ssh_config.get("userknownhostsfile")
    if configured:
        return Path(configured.split()[0]).expanduser()
    return Path("~/.ssh/known_hosts").expanduser()


class _KnownHosts(paramiko.HostKeys):
    """A known_hosts file as paramiko checks it, and the keys it marks @revoked. paramiko's own reader stops
    at the first marker line (`@cert-authority`, `@revoked`: their third field is no key), so one such line
    made every connection a traceback. Host certificates are not checked: their lines are passed over."""

    def __init__(self, path: Path):
        super().__init__()
        self.revoked: frozenset[str] = frozenset()
        self.read(path)

    def read(self, path: Path) -> None:
        """The file's keys, in its order, and its revoked ones; as HostKeys.load, but for the marker lines."""
        revoked = set()
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                fields = line.split()
                if not fields or fields[0].startswith("#"):
                    continue
                if fields[0].startswith("@"):  # `@revoked PATTERNS TYPE KEY`: refused for every host
                    if fields[0] == "@revoked" and len(fields) >= 4:
                        revoked.add(fields[3])
                    continue
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(line.strip(), lineno)
                except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey):
                    continue  # as ssh does: a line it cannot read is no key
                if entry is not None:
                    self._entries.append(entry)  # type: ignore[attr-defined]  # load's own list; not in the stubs
        self.revoked = frozenset(revoked)


_parsed: dict[Path, tuple[tuple[int, ...], _KnownHosts]] = {}
_parsed_lock = threading.Lock()


def _keys_in(known: Path) -> _KnownHosts | None:
    """The known_hosts file parsed, once a process while it stays as it was. Each connection of a fleet
    command loaded the whole file: N lines N times, 14 ms of CPU a connection for a 128-line file here,
    which is how much more CPU per host `status @all` took at 128 hosts than at 32 (issue 34). A
    connection then takes its own host's keys from it. None without the file. "As it was" is the same
    inode, size, mtime and ctime: a key swapped for another of its type keeps the size, and a copy made
    with `cp -p` (or a store whose files all have one mtime) keeps the mtime, but no writer can set ctime."""
    try:
        st = known.stat()
    except FileNotFoundError:
        return None
    version = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _parsed_lock:
        if known not in _parsed or _parsed[known][0] != version:
            _parsed[known] = (version, _KnownHosts(known))
        return _parsed[known][1]


def _secure(spec: HostSpec, conn: Connection) -> None:
    known = _known_hosts(spec, conn)
    keys = _keys_in(known)
    if keys is not None:  # the connection's own host's keys, under the name paramiko checks them by
        name = conn.host if conn.port == 22 else f"[{conn.host}]:{conn.port}"
        for keytype, key in (keys.lookup(name) or {}).items():
            if key.get_base64() not in keys.revoked:  # known and revoked: not trusted, so the policy refuses it
                conn.client.get_host_keys().add(name, keytype, key)
    revoked = keys.revoked if keys is not None else frozenset()  # not `if keys`: a file of no keys is falsy
    conn.client.set_missing_host_key_policy(_HostKeyPolicy(spec, known, revoked))
    if conn.gateway is not None and not isinstance(conn.gateway, str):  # a ProxyJump hop, not a command
        _secure(spec, conn.gateway)


def open_connection(spec: HostSpec) -> tuple[Connection, bool]:
    """A connection to `spec`'s host, its key checked, and whether every command goes through `sudo -n` (then
    `sudo -n true` has answered). Raises HostKeyError, Refused or Unreachable, saying what to check."""
    conn = _open_with(spec)
    _secure(spec, conn)
    where = f"{conn.user}@{conn.host}:{conn.port}"
    try:
        with _handshakes:
            if conn.gateway is None:  # direct: the socket is made here, to turn Nagle off first
                conn.connect_kwargs["sock"] = _tcp(conn.host, conn.port, spec.connect_timeout_s)
            conn.open()
    except HostKeyError:
        raise
    except paramiko.BadHostKeyException as exc:
        raise HostKeyError(
            f"host key for {where} CHANGED (now {fingerprint(exc.key)}); refusing to connect. If the host "
            f"was reinstalled, remove the old key: `ssh-keygen -R '[{conn.host}]:{conn.port}' -f "
            f"{_known_hosts(spec, conn)}`",
            host=spec.name,
        ) from None
    except paramiko.AuthenticationException as exc:
        raise Refused(
            f"authentication failed as {where} ({exc}); check identity_file, ssh-agent and the "
            f"host's authorized_keys",
            host=spec.name,
        ) from None
    except (OSError, paramiko.SSHException, EOFError) as exc:
        reason = str(exc) or type(exc).__name__
        raise Unreachable(
            f"cannot connect to {where}: {reason}; check address, port and that sshd runs",
            host=spec.name,
        ) from None
    transport = conn.client.get_transport()
    assert transport is not None
    transport.set_keepalive(15)
    transport.default_window_size = WINDOW_SIZE
    # paramiko's transport thread wakes every 0.1 s to see whether it should stop: 0.48 ms of CPU a
    # connection-second here (32 idle connections), which a fleet pays per host for the whole rollout.
    # Once a second costs 0.07 ms; close() is no slower, since it closes the socket under the thread
    transport.sock.settimeout(ACTIVE_CHECK_S)
    sudo = spec.become == "sudo" and conn.user != "root"
    if sudo:
        _check_sudo(spec, conn, transport)
    return conn, sudo


def _check_sudo(spec: HostSpec, conn: Connection, transport: paramiko.Transport) -> None:
    """`sudo -n true` before any other command: a sudo that would ask for a password refuses the host
    here, exit 3, before anything on it changed. One deadline for the whole call (twice the connect
    timeout): a limit per read let a sudo that kept talking hold the connection for ever."""
    what = f"the {become.PROBE.label} step"
    host, limit = spec.name, 2 * spec.connect_timeout_s
    late = RemoteTimeout(f"`{become.PROBE}` did not finish within {limit:g} s (twice --connect-timeout); run it "
                         f"there as {conn.user} to see what it waits for", host=host)
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
        close_quietly(chan)
    except TimeoutError:
        conn.close()
        raise late from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        conn.close()
        raise broken(host, what, exc) from None
    if not ended:
        conn.close()
        raise late
    refused = become.refusal(host, conn.user, code, err.decode("utf-8", "replace"))
    if refused:
        conn.close()
        raise refused


def close_quietly(chan: paramiko.Channel) -> None:
    """Closes `chan`; one whose connection is gone is closed already."""
    try:
        chan.close()
    except (OSError, EOFError, paramiko.SSHException):
        pass  # the connection is gone already: so is the channel


def broken(host: str, what: str, exc: BaseException) -> Unreachable:
    """The error for a command whose channel raised `exc`."""
    why = f"no byte moved for {STALL_S} s" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
    return Unreachable(f"connection lost during {what} ({why})", host=host)
