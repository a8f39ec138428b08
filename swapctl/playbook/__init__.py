"""Playbooks: where the hosts are and how the daemon runs. Validated here, trusted everywhere else."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path, PurePosixPath
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError

from ..errors import BadInput, PlaybookError
from .inventory import load_inventory

DEFAULT_PLAYBOOK = "swapctl.toml"
SSH_CONFIGS = ("~/.ssh/config", "/etc/ssh/ssh_config")  # the files `ssh NAME` reads, as fabric does
HOST_KEY_POLICIES = ("strict", "accept-new")
TRANSPORTS = ("ssh", "local")
JOURNAL = "journal"  # daemon.log's value for a daemon whose unit logs to the journal
# How swapctl becomes root on a host whose login is not root (Ansible's word): "sudo" runs every remote
# command through `sudo -n`; "none" runs them as the login user (root, on most GPU boxes).
BECOME = ("sudo", "none")
STOP_MODES = ("term", "drain")
DRAIN_TIMEOUT = ("stop", "refuse")
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


@dataclass(frozen=True)
class DaemonSpec:
    binary: str | None = None
    args: tuple[str, ...] | None = None  # None: the arguments the running daemon has
    match: str | None = None  # regex on the command line; None: the binary's file name
    log: str | None = None
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
        pattern = self.match or (PurePosixPath(self.binary).name if self.binary else None)
        return re.compile(pattern) if pattern else None

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
class RequiredDaemon(DaemonSpec):
    """The daemon section once require_daemon() has checked it: what changing a host needs is there."""

    binary: str = ""
    log: str = ""

    @property
    def match_regex(self) -> re.Pattern[str]:
        return re.compile(self.match or PurePosixPath(self.binary).name)


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


@dataclass(frozen=True)
class Playbook:
    path: str
    hosts: dict[str, HostSpec] = field(default_factory=dict)
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    daemon: DaemonSpec = DaemonSpec()
    memory: MemorySpec = MemorySpec()
    log_paths: tuple[str, ...] = ()
    keep_releases: int = 5
    build: dict[str, Any] = field(default_factory=dict[str, Any])  # the [build] table, read by swapctl.build
    rollout: RolloutSpec = RolloutSpec()
    gpu: GpuSpec = GpuSpec()
    become: str = "none"  # the top-level `become`: for every SSH host that does not say its own
    found: bool = True  # False: no ./swapctl.toml and no $SWAPCTL_PLAYBOOK, so an empty playbook

    def require_daemon(self) -> RequiredDaemon:
        """The daemon section, complete enough to change a host."""
        for key in ("binary", "log"):
            if not getattr(self.daemon, key):
                raise PlaybookError(self.path, f"missing; add `{key} = \"/data/...\"` under [daemon]",
                                    key=f"daemon.{key}")
        return RequiredDaemon(**{f.name: getattr(self.daemon, f.name) for f in fields(DaemonSpec)})


# key -> (kind, required). Kinds: str, int, num (int or float), bool, strlist, strtable.
_SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "host": {
        "address": ("str", True),
        "port": ("int", False),
        "user": ("str", False),
        "identity_file": ("str", False),
        "known_hosts": ("str", False),
        "host_key_policy": ("str", False),
        "transport": ("str", False),
        "become": ("str", False),
    },
    "daemon": {
        "binary": ("str", False),
        "args": ("strlist", False),
        "match": ("str", False),
        "log": ("str", False),
        "ready_log": ("str", False),
        "ready_port": ("int", False),
        "ready_timeout_s": ("num", False),
        "ready_stable_s": ("num", False),
        "stop_grace_s": ("num", False),
        "status_url": ("str", False),
        "stop": ("str", False),
        "drain_timeout_s": ("num", False),
        "drain_timeout": ("str", False),
        "ready": ("str", False),
        "cwd": ("str", False),
        "env": ("strtable", False),
        "secret_env": ("strlist", False),
        "unit": ("str", False),
        "user": ("str", False),
        "keep_loader_env": ("strlist", False),
        "lock_silence_s": ("num", False),
        "gone_before_stop": ("str", False),
    },
    "memory": {
        "min_available_gib": ("num", False),
        "release_timeout_s": ("num", False),
        "gpu_slack_mib": ("num", False),
    },
    "rollout": {
        "parallel": ("int", False),
        "canary": ("int", False),
        "canary_wait_s": ("num", False),
        "max_fail": ("budget", False),
    },
    "gpu": {"nvidia_smi_timeout_s": ("num", False)},
    "logs": {"paths": ("strlist", False)},
    "releases": {"keep": ("int", False)},
    # Read by `swapctl build`; checked there.
    "build": {
        "dockerfile": ("str", False),
        "context": ("str", False),
        "binary_in_image": ("str", False),
        "args": ("strtable", False),
        "platform": ("str", False),
    },
}
GONE_BEFORE_STOP = ("refuse", "deploy")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOP = ("hosts", "groups", "daemon", "memory", "gpu", "rollout", "logs", "releases", "build")
_KIND_NAMES = {
    "str": "a string",
    "int": "an integer",
    "num": "a number",
    "bool": "true or false",
    "strlist": "a list of strings",
    "strtable": "a table of strings",
    "budget": 'a number of hosts or a percentage ("10%")',
}


class _Loader:
    def __init__(self, path: str, text: str):
        self.path, self.lines = path, text.splitlines()

    def line_of(self, table: str, key: str | None = None) -> int | None:
        """The line where `key` is set under [table] (or the table's header), for error messages."""
        header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(
            '"?' + re.escape(p) + '"?' for p in table.split(".")) + r"\s*\]")
        in_table = table == ""
        for number, line in enumerate(self.lines, 1):
            if re.match(r"^\s*\[", line):
                in_table = bool(header.match(line))
                if in_table and key is None:
                    return number
            elif in_table and key and re.match(r"^\s*" + re.escape(key) + r"\s*=", line):
                return number
        return None

    def fail(self, message: str, table: str, key: str | None = None) -> PlaybookError:
        dotted = f"{table}.{key}" if key and table else key or table
        line = self.line_of(table, key) or (self.line_of(table) if table else None)
        return PlaybookError(self.path, message, line=line, key=dotted or None)

    def table(self, doc: dict[str, Any], name: str) -> dict[str, Any]:
        value = doc.get(name, {})
        if not isinstance(value, dict):
            raise self.fail(f"must be a table, like [{name}]", "", name)
        return value

    def section(self, data: dict[str, Any], schema: str, table: str) -> dict[str, Any]:
        """Checks one table against the schema; returns plain Python values."""
        spec = _SCHEMA[schema]
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key not in spec:
                close = difflib.get_close_matches(key, spec, n=1)
                hint = f"did you mean `{close[0]}`?" if close else f"known keys: {', '.join(spec)}"
                raise self.fail(f"unknown key ({hint})", table, key)
            kind, _ = spec[key]
            out[key] = self.check_type(value, kind, table, key)
        for key, (_, required) in spec.items():
            if required and key not in data:
                raise self.fail(f"missing required key `{key}`; add it under [{table}]", table, key)
        return out

    def check_type(self, value: Any, kind: str, table: str, key: str) -> Any:
        value = value.unwrap() if hasattr(value, "unwrap") else value
        ok = {
            "str": isinstance(value, str),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "num": isinstance(value, (int, float)) and not isinstance(value, bool),
            "bool": isinstance(value, bool),
            "strlist": isinstance(value, list) and all(isinstance(v, str) for v in value),
            "strtable": isinstance(value, dict) and all(isinstance(v, str) for v in value.values()),
            "budget": isinstance(value, int) and not isinstance(value, bool) and value >= 0
            or isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?%", value) is not None,
        }[kind]
        if not ok:
            raise self.fail(f"must be {_KIND_NAMES[kind]}, not {value!r}", table, key)
        if kind == "num" and value < 0 or kind == "int" and value < 0:
            raise self.fail(f"must not be negative, not {value!r}", table, key)
        return value


def load(path: str | os.PathLike[str] | None = None, *, required: bool = True) -> Playbook:
    """Reads and validates a playbook. Without `required`, a missing default file is an empty playbook.
    $SWAPCTL_INVENTORY (`swapctl -i FILE`) names an Ansible inventory whose hosts and groups it adds."""
    explicit = path is not None or "SWAPCTL_PLAYBOOK" in os.environ
    path = str(path or os.environ.get("SWAPCTL_PLAYBOOK") or DEFAULT_PLAYBOOK)
    inventory = os.environ.get("SWAPCTL_INVENTORY") or None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        if not explicit and not required:
            return replace(parse("", path, inventory=inventory), found=False)
        raise PlaybookError(path, "no such playbook; run `swapctl init` to write one, or pass -p FILE") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookError(path, f"cannot read: {exc}") from None
    return parse(text, path, inventory=inventory)


def _hosts_and_groups(ld: _Loader, doc: dict[str, Any], inventory: str | None
                      ) -> tuple[dict[str, HostSpec], dict[str, tuple[str, ...]]]:
    """[hosts] and [groups], over the inventory's hosts and groups when there is one."""
    hosts: dict[str, HostSpec] = {}
    groups: dict[str, tuple[str, ...]] = {}
    if inventory:
        hosts, groups = load_inventory(inventory)
    for name, data in ld.table(doc, "hosts").items():
        table = f"hosts.{name}"
        if not isinstance(data, dict):
            raise ld.fail("must be a table, like [hosts.NAME] with address = ...", "hosts", name)
        values = ld.section(data, "host", table)
        policy = values.get("host_key_policy", "strict")
        if policy not in HOST_KEY_POLICIES:
            raise ld.fail(f"must be one of {', '.join(HOST_KEY_POLICIES)}, not {policy!r}", table, "host_key_policy")
        transport = values.get("transport", "ssh")
        if transport not in TRANSPORTS:
            raise ld.fail(f"must be one of {', '.join(TRANSPORTS)}, not {transport!r}", table, "transport")
        port = values.get("port")
        if port is not None and not 0 < port < 65536:
            raise ld.fail(f"must be a TCP port (1-65535), not {port}", table, "port")
        become = values.get("become")
        if become is not None and become not in BECOME:
            raise ld.fail(f"must be one of {', '.join(BECOME)}, not {become!r}", table, "become")
        if become == "sudo" and transport == "local":
            raise ld.fail("sudo needs transport = \"ssh\"; on this machine, run swapctl itself under sudo",
                          table, "become")
        hosts[name] = HostSpec(name=name, **values)
    for name, members in ld.table(doc, "groups").items():
        members = ld.check_type(members, "strlist", "groups", name)
        for member in members:
            if member not in hosts:
                raise ld.fail(f"names host {member!r}, which is not under [hosts] or in the inventory", "groups", name)
        groups[name] = tuple(members)
    return hosts, groups


def _check_daemon(ld: _Loader, d: dict[str, Any]) -> None:
    """[daemon]'s match, gone_before_stop and lock_silence_s."""
    if "match" in d:
        try:
            re.compile(d["match"])
        except re.error as exc:
            raise ld.fail(f"not a valid regular expression ({exc})", "daemon", "match") from None
    if d.get("gone_before_stop", "refuse") not in GONE_BEFORE_STOP:
        raise ld.fail(f"must be one of {', '.join(GONE_BEFORE_STOP)}, not {d['gone_before_stop']!r}", "daemon",
                      "gone_before_stop")
    if not 5 <= d.get("lock_silence_s", 30) <= 3600:
        raise ld.fail(f"must be between 5 and 3600 seconds, not {d['lock_silence_s']!r}", "daemon", "lock_silence_s")
def _check_stop_and_ready(ld: _Loader, d: dict[str, Any]) -> None:
    """stop, drain_timeout and ready take one of their words; drain and ready beyond the log need status_url."""
    for key, words in (("stop", STOP_MODES), ("drain_timeout", DRAIN_TIMEOUT), ("ready", READY_MODES)):
        if key in d and d[key] not in words:
            raise ld.fail(f"must be one of {', '.join(words)}, not {d[key]!r}", "daemon", key)
    url = d.get("status_url")
    if url is not None and not re.fullmatch(r"http://[A-Za-z0-9.\-\[\]:]+(:\d+)?/\S*", url):
        raise ld.fail(f'{url!r} is not an http:// URL (e.g. "http://127.0.0.1:9821/status", the daemon\'s '
                      f'status_listen)', "daemon", "status_url")
    if d.get("drain_timeout_s", 1) <= 0:
        raise ld.fail("must be more than 0 s (the longest proof the daemon runs, e.g. 300)", "daemon",
                      "drain_timeout_s")
    for key, needs in (("stop", "drain"), ("ready", "status")):  # "proof" without it: the Phase 7 line
        if d.get(key) == needs and not url:
            raise ld.fail(f'"{needs}" reads the daemon\'s own status: add `status_url = '
                          f'"http://127.0.0.1:9821/status"` under [daemon] (cuzk\'s status_listen)', "daemon", key)


def parse(text: str, path: str = DEFAULT_PLAYBOOK, inventory: str | None = None) -> Playbook:
    """Validates playbook text; every error names the file, line, key and fix. `inventory` (else the
    playbook's own `inventory` key, relative to its file) adds an Ansible inventory's hosts and groups;
    the playbook's [hosts] and [groups] win over the inventory's of the same name."""
    try:
        doc = tomlkit.parse(text).unwrap()
    except ParseError as exc:
        reason = str(exc).split(" at line ")[0]
        raise PlaybookError(path, f"TOML syntax error: {reason} (fix the TOML at that line)", line=exc.line) from None
    ld = _Loader(path, text)
    if "inventory" in doc:
        where = ld.check_type(doc.pop("inventory"), "str", "", "inventory")
        inventory = inventory or str(Path(path).parent / os.path.expanduser(where))
    become = ld.check_type(doc.pop("become", "none"), "str", "", "become")
    if become not in BECOME:
        raise ld.fail(f"must be one of {', '.join(BECOME)}, not {become!r}", "", "become")
    for key in doc:
        if key not in _TOP:
            close = difflib.get_close_matches(key, _TOP, n=1)
            hint = f"did you mean [{close[0]}]?" if close else f"known tables: {', '.join(_TOP)}"
            raise ld.fail(f"unknown table ({hint})", "", key)

    hosts, groups = _hosts_and_groups(ld, doc, inventory)
    d = ld.section(ld.table(doc, "daemon"), "daemon", "daemon")
    _check_daemon(ld, d)
    if d.get("log") == JOURNAL and "unit" not in d:
        raise ld.fail('"journal" needs the unit whose journal it is: add `unit = "cuzk.service"` under [daemon]',
                      "daemon", "log")
    for key in ("binary", "log", "cwd"):
        if key in d and not d[key].startswith("/") and not (key == "log" and d[key] == JOURNAL):
            raise ld.fail(f"must be an absolute path on the host, not {d[key]!r}", "daemon", key)
    if "unit" in d:
        d["unit"] = d["unit"] if d["unit"].endswith(".service") else f"{d['unit']}.service"  # as systemctl does
        if not re.fullmatch(r"[A-Za-z0-9:_.@\\-]+\.service", d["unit"]):
            raise ld.fail(f"{d['unit']!r} is not a systemd service name (e.g. \"cuzk.service\")", "daemon", "unit")
    _check_stop_and_ready(ld, d)
    d["args"] = tuple(d["args"]) if "args" in d else None
    for key in ("env", "secret_env", "keep_loader_env"):  # names the daemon's environment gets: checked here
        for name in d.get(key, ()):
            if not ENV_NAME.fullmatch(name):
                raise ld.fail(f"{name!r} is not an environment variable name (letters, digits and _, not first a "
                              f"digit)", "daemon", key)
    d["env"] = tuple(d.get("env", {}).items())
    d["secret_env"] = tuple(d.get("secret_env", ()))
    d["keep_loader_env"] = tuple(d.get("keep_loader_env", ()))
    daemon = DaemonSpec(**d)

    memory = MemorySpec(**ld.section(ld.table(doc, "memory"), "memory", "memory"))
    logs = ld.section(ld.table(doc, "logs"), "logs", "logs")
    releases = ld.section(ld.table(doc, "releases"), "releases", "releases")
    build = ld.section(ld.table(doc, "build"), "build", "build")
    rollout = ld.section(ld.table(doc, "rollout"), "rollout", "rollout")
    if rollout.get("parallel", 1) < 1:
        raise ld.fail("must be at least 1 (1: one host at a time)", "rollout", "parallel")
    if "max_fail" in rollout:
        rollout["max_fail"] = str(rollout["max_fail"])
    gpu = ld.section(ld.table(doc, "gpu"), "gpu", "gpu")
    if gpu.get("nvidia_smi_timeout_s", 10) <= 0:
        raise ld.fail("must be more than 0 s (nvidia-smi answers within a second or two; the default is 10)",
                      "gpu", "nvidia_smi_timeout_s")
    keep = releases.get("keep", 5)
    if keep < 2:
        raise ld.fail("must be at least 2 (the current release and one to roll back to)", "releases", "keep")
    return Playbook(
        path=path,
        hosts={name: with_become(spec, become) for name, spec in hosts.items()},
        groups=groups,
        daemon=daemon,
        memory=memory,
        log_paths=tuple(logs.get("paths", ())),
        keep_releases=keep,
        build=build,
        rollout=RolloutSpec(**rollout),
        gpu=GpuSpec(**gpu),
        become=become,
    )


def with_become(spec: HostSpec, default: str) -> HostSpec:
    """`spec` with its own `become`, else the playbook's: a host's word wins over the playbook's. A local
    host never takes the playbook's sudo (swapctl runs there as whoever started it)."""
    if spec.become is not None:
        return spec
    return replace(spec, become="none" if spec.transport == "local" else default)


_ADHOC = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<address>\[[0-9a-fA-F:]+\]|[^@:\s]+)(?::(?P<port>\d+))?$")


def ssh_config_aliases(paths: tuple[str, ...] = SSH_CONFIGS) -> set[str]:
    """The names `Host` lines of the ssh_config files give literally (patterns like `gpu*` left out)."""
    import paramiko  # here: importing it costs 0.15 s, and only a HOST outside the playbook needs this

    names: set[str] = set()
    for path in paths:
        try:
            names |= paramiko.SSHConfig.from_path(os.path.expanduser(path)).get_hostnames()
        except (OSError, UnicodeDecodeError, paramiko.ssh_exception.ConfigParseError):
            continue  # missing or unreadable: ssh would go on without it too
    return {name for name in names if not set(name) & set("*?!")}


def resolve_host(playbook: Playbook, target: str, ssh_aliases: set[str] | None = None) -> HostSpec:
    """A HOST argument: a name under [hosts], user@address:port (user and port optional), or a bare
    `Host` alias of ~/.ssh/config, which then decides address, port, user and keys as for `ssh NAME`."""
    if target in playbook.hosts:
        return playbook.hosts[target]
    if "@" in target or ":" in target:
        m = _ADHOC.match(target)
        if m and (m["port"] is None or 0 < int(m["port"]) < 65536):
            return HostSpec(
                name=target,
                address=m["address"].strip("[]"),
                port=int(m["port"]) if m["port"] else None,
                user=m["user"],
                become=playbook.become,
            )
        raise PlaybookError(playbook.path, f"host {target!r} is not user@address:port", key="HOST")
    if target in (ssh_config_aliases() if ssh_aliases is None else ssh_aliases):
        return HostSpec(name=target, address=target, become=playbook.become)
    if not playbook.found and not playbook.hosts:
        raise BadInput(f"no ./{DEFAULT_PLAYBOOK} (or $SWAPCTL_PLAYBOOK); see `swapctl init` (and {target!r} is "
                       f"not user@address:port or a `Host` in ~/.ssh/config)")
    known = ", ".join(playbook.hosts) or "none"
    close = difflib.get_close_matches(target, playbook.hosts, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"hosts in the playbook: {known}"
    raise PlaybookError(playbook.path, f"unknown host {target!r} ({hint}); add [hosts.{target}], a `Host {target}` "
                        f"in ~/.ssh/config, or use user@address:port", key="hosts")
