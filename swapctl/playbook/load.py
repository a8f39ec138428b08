"""Reading a playbook: the TOML, the inventory it names, and every check, whose error names the file,
line, key and fix."""

from __future__ import annotations

import difflib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError

from ..errors import PlaybookError
from . import spec as sp
from .curio import check_nodes, curio
from .inventory import load_inventory
from .schema import TOP, Loader


def load(path: str | os.PathLike[str] | None = None, *, required: bool = True, inventory: str | None = None,
         connect_timeout_s: float = sp.CONNECT_TIMEOUT_S) -> sp.Playbook:
    """Reads and validates a playbook. Without `required`, a missing default file is an empty playbook.
    `inventory` (`swapctl -i FILE`) names an Ansible inventory whose hosts and groups it adds;
    `connect_timeout_s` (`--connect-timeout`) is how long each of its hosts may take to answer."""
    explicit = path is not None or "SWAPCTL_PLAYBOOK" in os.environ
    path = str(path or os.environ.get("SWAPCTL_PLAYBOOK") or sp.DEFAULT_PLAYBOOK)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        if not explicit and not required:
            book = replace(parse("", path, inventory=inventory), found=False)
            return _with_connect_timeout(book, connect_timeout_s)
        raise PlaybookError(path, "no such playbook; run `swapctl init` to write one, or pass -p FILE") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookError(path, f"cannot read: {exc}") from None
    return _with_connect_timeout(parse(text, path, inventory=inventory), connect_timeout_s)


def _with_connect_timeout(book: sp.Playbook, seconds: float) -> sp.Playbook:
    """`book` with every host's connect timeout `seconds`, and a HOST argument's (resolve_host) the same."""
    hosts = {name: replace(spec, connect_timeout_s=seconds) for name, spec in book.hosts.items()}
    return replace(book, hosts=hosts, connect_timeout_s=seconds)


def _hosts_and_groups(ld: Loader, doc: dict[str, Any], inventory: str | None
                      ) -> tuple[dict[str, sp.HostSpec], dict[str, tuple[str, ...]]]:
    """[hosts] and [groups], over the inventory's hosts and groups when there is one."""
    hosts: dict[str, sp.HostSpec] = {}
    groups: dict[str, tuple[str, ...]] = {}
    if inventory:
        hosts, groups = load_inventory(inventory)
    for name, data in ld.table(doc, "hosts").items():
        table = f"hosts.{name}"
        problem = sp.host_name_problem(name)
        if problem:
            raise ld.fail(f"{problem}; a host's name is a local directory's (fetch-logs' DEST/NAME): rename it",
                          "hosts", repr(name))
        if not isinstance(data, dict):
            raise ld.fail("must be a table, like [hosts.NAME] with address = ...", "hosts", name)
        values = ld.section(data, "host", table)
        policy = values.get("host_key_policy", "strict")
        if policy not in sp.HOST_KEY_POLICIES:
            raise ld.fail(f"must be one of {', '.join(sp.HOST_KEY_POLICIES)}, not {policy!r}", table, "host_key_policy")
        transport = values.get("transport", "ssh")
        if transport not in sp.TRANSPORTS:
            raise ld.fail(f"must be one of {', '.join(sp.TRANSPORTS)}, not {transport!r}", table, "transport")
        port = values.get("port")
        if port is not None and not 0 < port < 65536:
            raise ld.fail(f"must be a TCP port (1-65535), not {port}", table, "port")
        become = values.get("become")
        if become is not None and become not in sp.BECOME:
            raise ld.fail(f"must be one of {', '.join(sp.BECOME)}, not {become!r}", table, "become")
        if become == "sudo" and transport == "local":
            raise ld.fail("sudo needs transport = \"ssh\"; on this machine, run swapctl itself under sudo",
                          table, "become")
        if "curio_nodes" in values:
            if not values["curio_nodes"]:
                raise ld.fail("names no node: name the nodes that feed this host's cuzk, or leave it out for "
                              "[curio] nodes", table, "curio_nodes")
            values["curio_nodes"] = check_nodes(ld, values["curio_nodes"], table, "curio_nodes")
        hosts[name] = sp.HostSpec(name=name, **values)
    for name, members in ld.table(doc, "groups").items():
        members = ld.check_type(members, "strlist", "groups", name)
        for member in members:
            if member not in hosts:
                raise ld.fail(f"names host {member!r}, which is not under [hosts] or in the inventory", "groups", name)
        groups[name] = tuple(members)
    return hosts, groups


def _daemon(ld: Loader, doc: dict[str, Any]) -> sp.DaemonSpec:
    """[daemon], checked, with its paths absolute, its unit a service name and its lists tuples."""
    d = ld.section(ld.table(doc, "daemon"), "daemon", "daemon")
    if d.get("log") == sp.JOURNAL and "unit" not in d:
        raise ld.fail('"journal" needs the unit whose journal it is: add `unit = "cuzk.service"` under [daemon]',
                      "daemon", "log")
    if "unit" in d:
        d["unit"], ok = sp.service_name(d["unit"])
        if not ok:
            raise ld.fail(f"{d['unit']!r} is not a systemd service name (e.g. \"cuzk.service\")", "daemon", "unit")
    d["args"] = tuple(d["args"]) if "args" in d else None
    for key in ("env", "secret_env", "keep_loader_env"):  # names the daemon's environment gets: checked here
        for name in d.get(key, ()):
            if not sp.ENV_NAME.fullmatch(name):
                raise ld.fail(f"{name!r} is not an environment variable name (letters, digits and _, not first a "
                              f"digit)", "daemon", key)
    d["env"] = tuple(d.get("env", {}).items())
    d["secret_env"] = tuple(d.get("secret_env", ()))
    d["keep_loader_env"] = tuple(d.get("keep_loader_env", ()))
    daemon = sp.DaemonSpec(**d)
    if problem := sp.daemon_problem(daemon):  # the keys that need each other or a range: as the modules say
        raise ld.fail(problem[1], "daemon", problem[0])
    return daemon


def parse(text: str, path: str = sp.DEFAULT_PLAYBOOK, inventory: str | None = None) -> sp.Playbook:
    """Validates playbook text; every error names the file, line, key and fix. `inventory` (else the
    playbook's own `inventory` key, relative to its file) adds an Ansible inventory's hosts and groups;
    the playbook's [hosts] and [groups] win over the inventory's of the same name."""
    try:
        doc = tomlkit.parse(text).unwrap()
    except ParseError as exc:
        reason = str(exc).split(" at line ")[0]
        raise PlaybookError(path, f"TOML syntax error: {reason} (fix the TOML at that line)", line=exc.line) from None
    ld = Loader(path, text)
    if "inventory" in doc:
        where = ld.check_type(doc.pop("inventory"), "str", "", "inventory")
        inventory = inventory or str(Path(path).parent / os.path.expanduser(where))
    become = ld.check_type(doc.pop("become", "none"), "str", "", "become")
    if become not in sp.BECOME:
        raise ld.fail(f"must be one of {', '.join(sp.BECOME)}, not {become!r}", "", "become")
    for key in doc:
        if key not in TOP:
            close = difflib.get_close_matches(key, TOP, n=1)
            hint = f"did you mean [{close[0]}]?" if close else f"known tables: {', '.join(TOP)}"
            raise ld.fail(f"unknown table ({hint})", "", key)

    hosts, groups = _hosts_and_groups(ld, doc, inventory)
    daemon = _daemon(ld, doc)

    memory = sp.MemorySpec(**ld.section(ld.table(doc, "memory"), "memory", "memory"))
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
    book = sp.Playbook(
        path=path,
        hosts={name: sp.with_become(spec, become) for name, spec in hosts.items()},
        groups=groups,
        daemon=daemon,
        memory=memory,
        log_paths=tuple(logs.get("paths", ())),
        keep_releases=keep,
        build=build,
        rollout=sp.RolloutSpec(**rollout),
        gpu=sp.GpuSpec(**gpu),
        curio=curio(ld, doc, daemon, hosts),
        become=become,
    )
    return book
