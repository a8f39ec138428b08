"""SSH hosts: commands over paramiko channels, on a connection ssh_connection opens (once, on first use)."""

from __future__ import annotations

import re
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import BinaryIO

from ..errors import Refused, RemoteTimeout, Unreachable
from ..host import scripts
from ..playbook.spec import CONNECT_TIMEOUT_S, HostSpec
from . import become
from .cmd import Cmd
from .host import MAX_LINE, MAX_OUTPUT, Held, Host, Prepared, Progress, Result, keep_tail
from .ssh_connection import (
    STALL_S,
    WINDOW_SIZE,
    Connection,
    broken,
    close_quietly,
    open_connection,
    paramiko,
    relink,
)

# The command's first stderr line (host/remote/report_session.sh): the session it runs in (its pid, sshd
# made it a session leader).
_SESSION_LINE = re.compile(rb"swapctl-session (\d+)\n")
END_SESSION_TIMEOUT_S = 10


class SshHost(Host):
    """One SSH connection per host, opened on first use and reused for every step."""

    def __init__(self, spec: HostSpec):
        self.spec, self.name = spec, spec.name
        self._conn: Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.Lock()
        self._sudo = False  # every command through `sudo -n`: become = "sudo" and a login that is not root

    # -- connecting ------------------------------------------------------------------------------

    def _connection(self) -> Connection:
        with self._lock:
            if self._conn is None or not self._conn.is_connected:
                self._conn, self._sudo = open_connection(self.spec)
            return self._conn

    def shown(self, cmd: Cmd) -> str:
        """As the host runs it: through `sudo -n --` where swapctl becomes root (known once connected)."""
        return f"{' '.join(become.SUDO)} {cmd}" if self._sudo else str(cmd)

    def _transport(self) -> paramiko.Transport:
        transport = self._connection().client.get_transport()
        assert transport is not None
        return transport

    @staticmethod
    def _what(cmd: Cmd) -> str:
        """A command as an error names it: a script by its step, not its arguments."""
        return f"the {cmd.label} step" if cmd.label else str(cmd)

    def _lost(self, what: str, transport: paramiko.Transport) -> Unreachable:
        """The error for a command cut off: it says whether the link went or the host ended the session."""
        if transport.is_active():
            why = "the host ended the session without an exit status"
        else:
            exc = transport.get_exception()  # what stopped paramiko's reader, if it was an error
            why = str(exc) if exc and str(exc) else "the connection closed"
        return Unreachable(f"connection lost during {what} ({why})", host=self.name)

    def _open_channel(self, cmd: Cmd, report_session: bool = False) -> paramiko.Channel:
        """A channel running `cmd`. With `report_session` its first stderr line is `swapctl-session ID`: sshd
        starts each session's shell with setsid, so its pid, kept by `exec`, is the session that
        _end_session kills. `exec sh -c` first: a login shell that is fish or csh knows no `$$` or `>&2`."""
        try:
            transport = self._transport()  # connects first: then whether it runs through sudo is known
            line = become.as_root(cmd) if self._sudo else cmd.render()
            if report_session:
                line = f"exec sh -c {shlex.quote(scripts.load('report_session.sh').body)} swapctl {line}"
            chan = transport.open_session(window_size=WINDOW_SIZE, timeout=CONNECT_TIMEOUT_S)
            chan.exec_command(line)
            if feed := cmd.feed():  # its named inputs, ahead of anything else on its stdin
                chan.sendall(feed)
        except (paramiko.SSHException, OSError, EOFError) as exc:  # "Channel closed.": sshd could not start it
            raise broken(self.name, self._what(cmd), exc) from None
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
            raise broken(self.name, self._what(cmd), exc) from None
        finally:
            close_quietly(chan)

    def _end_session(self, session: int) -> None:
        """Kills what is left of a command's session on the host, best effort: a connection lost meanwhile
        must not hide the deadline it was cut off by."""
        try:
            chan = self._open_channel(scripts.command("end_session.sh", session=session))
            chan.shutdown_write()
            chan.status_event.wait(END_SESSION_TIMEOUT_S)
            close_quietly(chan)
        except (Unreachable, OSError, EOFError, paramiko.SSHException):
            pass

    def _bounded(self, out: bytearray, data: bytes, cmd: Cmd) -> None:
        """Keeps a sending command's output, up to MAX_OUTPUT."""
        out += data
        if len(out) > MAX_OUTPUT:
            raise self._too_large(cmd)(MAX_OUTPUT)

    def prepare(self, cmd: Cmd) -> Prepared:
        chan = self._open_channel(cmd)
        return Prepared(cmd, lambda chunks, timeout: self._send(chan, cmd, chunks, timeout),
                        lambda: close_quietly(chan))

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
            raise broken(self.name, self._what(cmd), exc) from None
        finally:
            close_quietly(chan)

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
                raise broken(self.name, f"upload to {remote_path}", exc) from None
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

        result = self.send(scripts.command("write_root.sh", path=remote_path, offset=offset, label="write"), chunks(),
                           timeout=STALL_S)
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
                close_quietly(chan)
                raise self._lost(self._what(cmd), transport)
            if time.monotonic() > deadline:
                close_quietly(chan)
                raise RemoteTimeout(f"`{cmd}` said nothing within {timeout:.0f} s", host=self.name)
            select.select([chan], [], [], 0.5)
        return Held(bytes(buf[:MAX_LINE]).split(b"\n", 1)[0].decode("utf-8", "replace"), lambda: close_quietly(chan),
                    chan.sendall)

    def close(self) -> None:
        with self._lock:
            if self._sftp is not None:
                self._sftp.close()
                self._sftp = None
            if self._conn is not None:
                relink(self._conn.client)  # a gateway's fabric.Connection as well as a direct one
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
