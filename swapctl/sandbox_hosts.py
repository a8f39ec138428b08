"""Sandbox hosts that are hosts of their own: N of them for `sandbox up --hosts N` (a small farm in one
playbook with a group), and the one sandbox host where the machine allows.

Every host is what a GPU box is to swapctl: the same paths, its own processes and sessions. Each runs in
namespaces of its own (mount and PID, and for a farm network: `unshare`, as root): its `ps` shows only its
own daemon and its own ssh sessions, its `who` reads a utmp of its own (other people's logins on this
machine are not its sessions); a farm host's data directory is bound onto the sandbox's one `data/` path
and its daemon's status port is on its own loopback, so the playbook's one [daemon] table fits every host,
as on a real farm. Its sshd cannot listen in the root network, so the host's init (PID 1 of its
namespace) takes connections on a socket bound outside and runs `sshd -i` (OpenSSH's inetd mode) for each,
as Debian's ssh.socket did.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from .errors import BadInput, Refused
from .playbook import examples
from .remote.ssh import wait_for_banner
from .sandbox import SshServer, make_server, sshd_path, start_daemon, status_port, wait_ready

GROUP = "farm"

# PID 1 of a sandbox host: its loopback up, its data directory in place, then an inetd for its sshd. As
# init does, it reaps every orphan (the daemon, started with nohup, ends up here).
HOST_INIT = textwrap.dedent("""
    import fcntl, os, socket, struct, subprocess, sys, threading, time
    fd, net, data, target, utmp, log, *sshd = sys.argv[1:]
    if net == "1":  # `ip link set lo up`, with no iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS | IFF_UP
        with socket.socket() as s:
            flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
            fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
    if data != target:
        subprocess.run(["mount", "--bind", data, target], check=True)
    machine_utmp = os.path.realpath("/var/run/utmp")
    if os.path.isfile(machine_utmp):  # `who` on this host: its own logins, not the machine's
        subprocess.run(["mount", "--bind", utmp, machine_utmp], check=True)
    def reap():
        while True:
            try:
                os.wait()
            except ChildProcessError:
                time.sleep(0.2)
    threading.Thread(target=reap, daemon=True).start()
    listener = socket.socket(fileno=int(fd))
    errors = open(log, "ab")
    while True:
        conn, _ = listener.accept()
        subprocess.Popen([*sshd, "-i"], stdin=conn, stdout=conn, stderr=errors)
        conn.close()
""")

# The engineer's own hands on the host: the daemon started in the background, as on a GPU box.
START_BY_HAND = 'cd "$1" && nohup "$2" --config "$3" >>"$4" 2>&1 </dev/null &'


def isolation_fails() -> str:
    """Why this machine cannot give a sandbox host namespaces of its own ("" when it can): not root, no
    unshare, or a chroot (whose / is no mount point to make private)."""
    try:
        r = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--mount-proc", "true"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare: {exc}"
    return "" if r.returncode == 0 else (r.stderr.strip().splitlines() or [f"unshare exited {r.returncode}"])[-1]


def start(base: Path, port: int, datas: list[Path], net: bool = True, more_keys: str = "") -> None:
    """Starts one host per data directory (sshd on 127.0.0.1:port, port+1, ...), each with its daemon
    started by hand; `net`: each with a network of its own (a farm's hosts share one status port)."""
    servers: list[SshServer] = []
    for i, data in enumerate(datas):
        first = servers[0] if servers else None
        server = make_server(base / ("sshd" if i == 0 else f"sshd-{i + 1}"), port=port + i, data=data,
                             client_key=first.client_key if first else None, more_keys=more_keys,
                             known_hosts=first.known_hosts if first else None)
        _start_host(server, base / "data", net)
        server.trust()
        servers.append(server)
        server.exec(START_BY_HAND, str(base / "data"), str(base / "data" / "cuzk"), str(base / "data" / "cuzk.toml"),
                    str(base / "data" / "cuzk.log"))
        wait_ready(data / "cuzk.log", lambda: None)


def _start_host(server: SshServer, target: Path, net: bool) -> None:
    """The host's namespaces and its init, which serves sshd on the socket bound here, in the root network."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((server.address, server.port))
    except OSError as exc:
        raise Refused(f"the sandbox host's port {server.port} cannot be bound: {exc.strerror}") from None
    listener.listen(64)
    sshd = [sshd_path(), "-e", "-f", str(server.config())]
    (server.dir / "utmp").write_bytes(b"")
    argv = ["unshare", *(["--net"] if net else []), "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
            sys.executable, "-c", HOST_INIT, str(listener.fileno()), str(int(net)), str(server.data), str(target),
            str(server.dir / "utmp"), str(server.dir / "sshd.log"), *sshd]
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    with listener:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=open(server.dir / "init.log", "ab"), pass_fds=(listener.fileno(),),
                                start_new_session=True)
    (server.dir / "sshd.pid").write_text(str(proc.pid))
    try:
        wait_for_banner(server.address, server.port, timeout=15)
    except TimeoutError:
        why = (server.dir / "init.log").read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise Refused(f"sandbox host on port {server.port} did not start: {why[0]} "
                      f"(a farm needs root and unshare; see {server.dir}/init.log)") from None


def playbook(base: Path, port: int, hosts: int) -> str:
    """The sandbox's playbook with `hosts` hosts (sandbox, sandbox-2, ...) in the group `farm`, and a
    rollout that shows a canary, its pause and a failure budget."""
    one = examples.render("sandbox", SANDBOX=str(base), PORT=str(port), STATUS_PORT=str(status_port(port, hosts)))
    table = re.search(r"^\[hosts\.sandbox\]\n(?:[^\[\n].*\n)*", one, re.M)
    assert table, "playbooks/sandbox.toml has a [hosts.sandbox] table"
    names = ["sandbox", *(f"sandbox-{i}" for i in range(2, hosts + 1))]
    tables = [table.group(0).replace("[hosts.sandbox]", f"[hosts.{name}]").replace(f"port = {port}\n",
                                                                                  f"port = {port + i}\n")
              for i, name in enumerate(names)]
    rollout = textwrap.dedent(f"""\

        [groups]
        {GROUP} = [{", ".join(f'"{n}"' for n in names)}]   # `swapctl deploy @{GROUP}`: rolling, the canary first

        [rollout]
        canary = 1                         # sandbox alone first; if it fails, no other host is touched
        canary_wait_s = 10                 # then it proves for 10 s (its readiness and first partitions shown)
        parallel = 1                       # then one host at a time
        max_fail = 1                       # the second failure starts no new host
        """)
    return one.replace(table.group(0), "\n".join(tables) + rollout)



def wait_gone(pids: list[int], timeout: float) -> None:
    """Until none of `pids` runs (`sandbox down`'s end); BadInput past `timeout`."""
    deadline = time.monotonic() + timeout
    while alive := [p for p in pids if _running(p)]:
        if time.monotonic() > deadline:
            raise BadInput(f"the sandbox's processes {alive} still run {timeout:.0f} s after `sandbox down`")
        time.sleep(0.02)


def _running(pid: int) -> bool:
    """Some thread of the process is not yet a zombie: a killed daemon's leader is one while its other
    threads still exit, and they hold its sockets (its status port) until the last is gone."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        except (OSError, IndexError):
            continue
    return False


def up_one(base: Path, port: int, more_keys: str = "") -> None:
    """The one sandbox host where namespaces cannot be had: sshd on 127.0.0.1:`port` and the prover started
    by hand behind it, both among this machine's processes."""
    data = base / "data"
    server = make_server(base / "sshd", port=port, data=data, more_keys=more_keys)
    server.start(detach=True)
    if server.proc is None or server.proc.poll() is not None:  # the banner came from another server
        log = (base / "sshd" / "sshd.log").read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise Refused(f"the sandbox's sshd on port {port} exited: {log[0]} ({port_holder(port) or 'see sshd.log'})")
    server.trust()
    start_daemon(data / "cuzk", data / "cuzk.toml", data / "cuzk.log", data)


def port_holder(port: int) -> str:
    """Who listens on TCP `port` (IPv4 or IPv6): `pid N (COMMAND)`, `an unknown process` (another user's,
    unreadable), or "" when none does; from /proc/net/tcp* and the sockets in /proc/*/fd."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return ""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdecimal():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                return f"pid {proc.name} ({cmd[:200]})"
        except OSError:
            continue
    return "an unknown process"
