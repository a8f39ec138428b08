"""What a playbook says, once loaded and checked: the hosts, the daemon's settings and the rollout's.
These types are what the rest of swapctl reads; `load` (playbook/load.py) makes them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from ..errors import PlaybookError

DEFAULT_PLAYBOOK = "swapctl.toml"
CONNECT_TIMEOUT_S = 15.0  # the TCP connect and sshd's banner; `swapctl --connect-timeout S` sets another
KEEP_RELEASES = 5  # [releases] keep: the current release, the rollback target and three more
SSH_CONFIGS = ("~/.ssh/config", "/etc/ssh/ssh_config")  # the files `ssh NAME` reads, as fabric does
HOST_KEY_POLICIES = ("strict", "accept-new")
TRANSPORTS = ("ssh", "local")
JOURNAL = "journal"  # daemon.log's value for a daemon whose unit logs to the journal
# How swapctl becomes root on a host whose login is not root (Ansible's word): "sudo" runs every remote
# command through `sudo -n`; "none" runs them as the login user (root, on most GPU boxes).
BECOME = ("sudo", "none")
STOP_MODES = ("term", "drain", "cordon")
DRAIN_TIMEOUT = ("stop", "refuse")
GONE_BEFORE_STOP = ("refuse", "deploy")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
READY_MODES = ("log", "status", "proof")


@dataclass(frozen=True)
class HostSpec:
    name: str
    address: str
    port: int | None = None  # None: ~/.ssh/config or 22
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    host_key_policy: str = "strict"
    transport: str = "ssh"
    become: str | None = None  # sudo | none; None: the playbook's top-level `become` (else none)
    curio_nodes: tuple[str, ...] = ()  # the Curio nodes that feed this host's cuzk; (): [curio] nodes
    connect_timeout_s: float = CONNECT_TIMEOUT_S  # TCP and sshd's banner; twice this for `sudo -n true`


@dataclass(frozen=True)
class DaemonSpec:
    """[daemon]: the one type of the daemon's settings, from the playbook to the host scripts. "" for
    `binary` and `log`: not set (require_daemon() says so, for the verbs that change a host)."""

    binary: str = ""
    args: tuple[str, ...] | None = None  # None: the arguments the running daemon has
    match: str | None = None  # regex on the command line; None: the binary's file name
    log: str = ""
    ready_log: str = "cuzk-daemon ready"
    ready_port: int | None = None
    ready_timeout_s: float = 600
    ready_stable_s: float = 0  # once ready, it must stay up this long, or the deploy rolls back
    stop_grace_s: float = 30
    # The daemon's own view: cuzk's `GET /status` (status_listen), read on the host; None: none
    status_url: str | None = None
    stop: str = "term"  # term: SIGTERM now; drain: wait until no proof is in flight first (docs/daemon.md)
    drain_timeout_s: float = 300
    drain_timeout: str = "stop"  # what a drain does when proofs are still in flight then: stop | refuse
    ready: str = "log"  # log: ready_log (or ready_port); status: /status answers; proof: a proof completed
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[str, ...] = ()
    unit: str | None = None  # the systemd service it runs under; None: the one its process is found in
    user: str | None = None  # who the daemon runs as (a name or uid); None: root, or the binary's owner
    keep_loader_env: tuple[str, ...] = ()  # loader variables (LD_PRELOAD...) a running daemon's env may pass on
    lock_silence_s: float = 30  # the host's deploy lock ends when its deploy's heartbeat is silent this long
    gone_before_stop: str = "refuse"  # a daemon that exits by itself before the stop: refuse | deploy

    @property
    def match_regex(self) -> re.Pattern[str] | None:
        """daemon.match, else the binary's file name; None where neither is set."""
        pattern = self.match or PurePosixPath(self.binary).name
        return re.compile(pattern) if pattern else None

    def matcher(self) -> re.Pattern[str]:
        """match_regex of a section require_daemon() has checked: its binary is set, so there is one."""
        if (regex := self.match_regex) is None:
            raise ValueError("daemon.binary is not set: call Playbook.require_daemon() first")
        return regex

    @property
    def journal(self) -> bool:
        """The daemon logs to its unit's journal (`log = "journal"`), not to a file."""
        return self.log == JOURNAL

    @property
    def state_dir(self) -> str:
        """Where releases, the journal and the lock live: beside the binary, so renames stay atomic."""
        path = PurePosixPath(self.binary or "/")
        return str(path.parent / ".swapctl" / path.name)


@dataclass(frozen=True)
class MemorySpec:
    min_available_gib: float = 0
    release_timeout_s: float = 900
    gpu_slack_mib: float = 1024  # GPU memory used may stay this far above the daemon-less level


@dataclass(frozen=True)
class GpuSpec:
    """How swapctl asks the host's GPUs."""

    # Each nvidia-smi call's time limit on the host: one answers in a second or two, one whose GPU has
    # fallen off the bus (Xid 79) or whose driver hangs never does, and must not take the rest with it.
    nvidia_smi_timeout_s: float = 10


@dataclass(frozen=True)
class RolloutSpec:
    """How `deploy @group` and `rollback @group` go when the command line does not say."""

    parallel: int = 1
    canary: int = 0
    canary_wait_s: float | None = None
    max_fail: str | None = None  # "2" hosts or "10%" of them, as --max-fail takes it


# Curio's task types that go through cuzk (tasks/tasknames/names.go) and the PoSt ones among them
CUZK_TASKS = ("PoRep", "UpdateProve", "PSProve", "WdPost", "WinPost")
POST_TASKS = ("WdPost", "WinPost")
# [curio]'s words, as the loader and the Ansible modules check them: a node's `curio run --listen` host:port,
# a task name (harmony_task.name is varchar(16)), what Curio reads its database from (cmd/curio/main.go:122-158),
# a program's name or absolute path
NODE = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")
TASK = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,15}")
DB_ENV = tuple(f"CURIO_{p}_{k}" for p in ("DB", "HARMONYDB") for k in ("HOST", "HOSTS", "PORT", "NAME", "USER",
                                                                          "USERNAME", "PASSWORD"))
API_TOKEN = "CURIO_API_TOKEN"  # via = "api": the nodes' admin token, with the database's variables in [curio] env
CURIO_ENV = (*DB_ENV, API_TOKEN)
VIA = ("cli", "api")  # how the host cordons a node: `curio cli --machine NODE cordon`, or the node's JSON-RPC
PROGRAM = re.compile(r"/?[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*")


def node_ok(node: str) -> bool:
    return NODE.fullmatch(node) is not None and 0 < int(node.rsplit(":", 1)[1]) < 65536


@dataclass(frozen=True)
class CurioSpec:
    """[curio]: the Curio nodes that feed this cuzk, and how the host cordons them and reads their tasks
    (docs/curio.md). No nodes: no Curio around the daemon."""

    nodes: tuple[str, ...] = ()  # each node's `curio run --listen` host:port (harmony_machines.host_and_port)
    via: str = "cli"  # cli: `curio cli --machine NODE cordon|uncordon` on the host; api: the node's JSON-RPC
    cli: str = "curio"  # the curio executable on the host: `curio cli --machine NODE cordon|uncordon`
    sql: str = "psql"  # a psql client on the host (psql, or YugabyteDB's ysqlsh) to read harmony_task
    env: tuple[tuple[str, str], ...] = ()  # CURIO_DB_HOST/PORT/NAME/USER/PASSWORD, CURIO_API_TOKEN: secrets
    poll_s: float = 30  # Curio's pollRarely: a node may claim work this long after the cordon
    post_wait_s: float = 120  # how long a swap waits for the node's PoSt task before it refuses
    max_cordon_s: float = 1800  # the host uncordons after this long, whatever the swap does
    tasks: tuple[str, ...] = CUZK_TASKS  # the task types the node sends to this cuzk


SERVICE = re.compile(r"[A-Za-z0-9:_.@\\-]+\.service")


def service_name(unit: str) -> tuple[str, bool]:
    """daemon.unit as systemctl names it (".service" added to a bare name, as systemctl adds it), and whether
    that is a service name: the playbook loader and the Ansible modules both take it so."""
    name = unit if unit.endswith(".service") else f"{unit}.service"
    return name, SERVICE.fullmatch(name) is not None


STATUS_URL = re.compile(r"http://[A-Za-z0-9.\-\[\]:]+(:\d+)?/\S*")


def daemon_problem(d: DaemonSpec) -> tuple[str, str] | None:
    """The first thing wrong among [daemon]'s keys that need each other or a range (its key, and what is
    wrong and what to do), else None: the playbook loader and the Ansible modules both say it."""
    for key in ("binary", "log", "cwd"):  # "" for binary and log: not set (require_daemon says so)
        value = getattr(d, key) or ""
        if value and not value.startswith("/") and not (key == "log" and value == JOURNAL):
            return key, f"must be an absolute path on the host, not {value!r}"
    if d.match is not None:
        try:
            re.compile(d.match)
        except re.error as exc:
            return "match", f"not a valid regular expression ({exc})"
    for key, words in (("stop", STOP_MODES), ("drain_timeout", DRAIN_TIMEOUT), ("ready", READY_MODES),
                       ("gone_before_stop", GONE_BEFORE_STOP)):
        if getattr(d, key) not in words:
            return key, f"must be one of {', '.join(words)}, not {getattr(d, key)!r}"
    if not 5 <= d.lock_silence_s <= 3600:
        return "lock_silence_s", f"must be between 5 and 3600 seconds, not {d.lock_silence_s!r}"
    if d.status_url is not None and not STATUS_URL.fullmatch(d.status_url):
        return "status_url", (f'{d.status_url!r} is not an http:// URL (e.g. "http://127.0.0.1:9821/status", the '
                              f"daemon's status_listen)")
    if d.drain_timeout_s <= 0:
        return "drain_timeout_s", "must be more than 0 s (the longest proof the daemon runs, e.g. 300)"
    # "proof" without it: the Phase 7 line; "cordon" without it: the node's tasks alone
    for key, needs in (("stop", "drain"), ("ready", "status")):
        if getattr(d, key) == needs and not d.status_url:
            return key, (f'"{needs}" reads the daemon\'s own status: set daemon.status_url (cuzk\'s '
                         f'status_listen, e.g. "http://127.0.0.1:9821/status")')
    return None


def curio_problem(c: CurioSpec, nodes: bool) -> tuple[str, str] | None:
    """The first thing wrong in [curio] (its key, and what is wrong and what to do), else None: the playbook
    loader and the Ansible modules both say it. `nodes`: some host has nodes to cordon."""
    for node in c.nodes:
        if not node_ok(node):
            return "nodes", f"{node!r} is not a node's host:port (its `curio run --listen`, e.g. \"10.0.0.5:12300\")"
    for name in c.tasks:
        if not TASK.fullmatch(name):
            return "tasks", f"{name!r} is not a Curio task name (e.g. PoRep, WdPost)"
    for key in ("cli", "sql"):
        if not PROGRAM.fullmatch(getattr(c, key)):
            return key, f"{getattr(c, key)!r} is not a program's name or absolute path"
    for name, _ in c.env:
        if name not in CURIO_ENV:
            return "env", (f"{name!r} is not one of Curio's database variables ({', '.join(DB_ENV[:5])}, ...) "
                           f"or {API_TOKEN}")
    if c.via not in VIA:
        return "via", (f'{c.via!r}: "cli" cordons with `curio cli --machine NODE cordon` on the host, "api" '
                       "through each node's JSON-RPC")
    if c.via == "api" and API_TOKEN not in dict(c.env):
        return "via", ("\"api\" calls each node's Filecoin.Cordon, which needs an admin token: put it in [curio] "
                       f"env as {API_TOKEN} (docs/curio.md)")
    for key in ("poll_s", "max_cordon_s"):
        if getattr(c, key) <= 0:
            return key, "must be more than 0 s"
    if c.post_wait_s < 0:
        return "post_wait_s", "must be 0 s or more"
    if nodes and c.max_cordon_s < c.poll_s:
        return "max_cordon_s", f"must be at least poll_s ({c.poll_s:g} s): a cordon shorter than one poll stops nothing"
    return None


@dataclass(frozen=True)
class Playbook:
    path: str
    hosts: dict[str, HostSpec] = field(default_factory=dict)
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    daemon: DaemonSpec = DaemonSpec()
    memory: MemorySpec = MemorySpec()
    log_paths: tuple[str, ...] = ()
    keep_releases: int = KEEP_RELEASES
    build: dict[str, Any] = field(default_factory=dict[str, Any])  # the [build] table, read by swapctl.build
    rollout: RolloutSpec = RolloutSpec()
    gpu: GpuSpec = GpuSpec()
    curio: CurioSpec = CurioSpec()
    become: str = "none"  # the top-level `become`: for every SSH host that does not say its own
    connect_timeout_s: float = CONNECT_TIMEOUT_S  # `--connect-timeout`: every host's, a HOST argument's too
    found: bool = True  # False: no ./swapctl.toml and no $SWAPCTL_PLAYBOOK, so an empty playbook

    def require_daemon(self) -> DaemonSpec:
        """The daemon section, checked complete enough to change a host: itself, or a PlaybookError."""
        for key in ("binary", "log"):
            if not getattr(self.daemon, key):
                raise PlaybookError(self.path, f"missing; add `{key} = \"/data/...\"` under [daemon]",
                                    key=f"daemon.{key}")
        return self.daemon

    def curio_of(self, host: str) -> CurioSpec:
        """The [curio] a host's swap, plan, status and uncordon use: the nodes its [hosts.NAME] curio_nodes
        names, else [curio] nodes (a host not under [hosts] included)."""
        spec = self.hosts.get(host)
        if spec is None or not spec.curio_nodes:
            return self.curio
        return replace(self.curio, nodes=spec.curio_nodes)


def host_name_problem(name: str) -> str | None:
    """Why `name` cannot name a host, else None. A host's name is a directory of its own under fetch-logs'
    and the experiment's DEST, so it is one plain path component: no `/`, not `.` or `..`, no control."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"is `{name}`"
    if "/" in name:
        return "holds a `/`"
    if not name.isprintable():
        return "holds a control character (or a line or bidi mark)"
    return None


def with_become(spec: HostSpec, default: str) -> HostSpec:
    """`spec` with its own `become`, else the playbook's: a host's word wins over the playbook's. A local
    host never takes the playbook's sudo (swapctl runs there as whoever started it)."""
    if spec.become is not None:
        return spec
    return replace(spec, become="none" if spec.transport == "local" else default)
