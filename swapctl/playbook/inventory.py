"""Ansible inventories (INI or YAML) as a source of hosts and groups: GPU farms keep their hosts there.

What swapctl takes from one: each host with `ansible_host`, `ansible_port`, `ansible_user`,
`ansible_ssh_private_key_file` and `ansible_become` (with `ansible_become_method`: sudo only), and swapctl's
own `swapctl_curio_nodes` (the host's `curio_nodes`: a YAML list, or host:port words split by commas) (from the
host's line, its groups' vars, children's vars over their parents'), and every group, children resolved
(`all` included). Other variables are ignored.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from ..errors import PlaybookError
from .spec import HostSpec, host_name_problem, node_ok

VARS = {"ansible_host": "address", "ansible_ssh_host": "address", "ansible_port": "port",
        "ansible_ssh_port": "port", "ansible_user": "user", "ansible_ssh_user": "user",
        "ansible_ssh_private_key_file": "identity_file"}
_RANGE = re.compile(r"\[(\d+):(\d+)\]")


class _Inventory:
    """Groups with their hosts, children and vars, as Ansible's INI and YAML forms both describe them."""

    def __init__(self, path: str):
        self.path = path
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.members: dict[str, list[str]] = {"all": [], "ungrouped": []}
        self.children: dict[str, list[str]] = {"all": []}
        self.group_vars: dict[str, dict[str, Any]] = {}
        self.lines: dict[str, int | None] = {}  # where each host is first named

    def group(self, name: str) -> None:
        self.members.setdefault(name, [])
        self.children.setdefault(name, [])

    def add_host(self, name: str, group: str, variables: dict[str, Any], line: int | None = None) -> None:
        problem = host_name_problem(name)
        if problem:
            raise PlaybookError(self.path, f"group {group!r}: host {name!r} {problem}; a host's name is a local "
                                           f"directory's (fetch-logs' DEST/NAME): rename it", line=line)
        self.group(group)
        self.lines.setdefault(name, line)
        self.host_vars.setdefault(name, {}).update(variables)
        if name not in self.members[group]:
            self.members[group].append(name)

    def hosts_of(self, group: str, seen: tuple[str, ...] = ()) -> list[str]:
        """The group's hosts, its children's included, in inventory order."""
        if group in seen:
            raise PlaybookError(self.path, f"group {group!r} contains itself (through {' -> '.join(seen)})")
        found = list(self.members.get(group, []))
        for child in self.children.get(group, []):
            found += [h for h in self.hosts_of(child, (*seen, group)) if h not in found]
        return found

    def depth(self, group: str) -> int:
        """How far below `all` a group sits: a child's vars override its parent's, as in Ansible."""
        if group == "all":
            return 0
        parents = [g for g, kids in self.children.items() if group in kids]
        return 1 + max((self.depth(p) for p in parents if p != group), default=0)

    def resolve(self) -> tuple[dict[str, Any], dict[str, Any]]:
        self.children["all"] = [g for g in self.members if g != "all" and not any(
            g in kids for parent, kids in self.children.items() if parent != "all")]
        for name in self.host_vars:
            if not any(name in m for g, m in self.members.items() if g not in ("all", "ungrouped")):
                if name not in self.members["ungrouped"]:
                    self.members["ungrouped"].append(name)
        groups = {g: tuple(self.hosts_of(g)) for g in self.members}
        hosts = {}
        for name, own in self.host_vars.items():
            merged: dict[str, Any] = dict(self.group_vars.get("all", {}))
            mine = (g for g, m in groups.items() if name in m and g != "all")
            for g in sorted(mine, key=lambda g: (self.depth(g), g)):  # parents first, children override
                merged.update(self.group_vars.get(g, {}))
            merged.update(own)
            values: dict[str, Any] = {"address": name}
            for var, key in VARS.items():
                if var in merged:
                    values[key] = merged[var]
            if not ADDRESS.fullmatch(str(values["address"])):
                raise PlaybookError(self.path, f"host {name!r}: {values['address']!r} is no hostname or IP address "
                                               f"(ansible_host is data, never ssh options); fix it",
                                    line=self.lines.get(name))
            if "ansible_become" in merged:
                values["become"] = become_of(self.path, name, merged)
            if "swapctl_curio_nodes" in merged:
                values["curio_nodes"] = nodes_of(self.path, name, merged["swapctl_curio_nodes"], self.lines.get(name))
            if "port" in values:
                try:
                    values["port"] = int(values["port"])
                except (TypeError, ValueError):
                    raise PlaybookError(self.path, f"host {name!r}: ansible_port must be a port number, "
                                                   f"not {values['port']!r}") from None
            hosts[name] = HostSpec(name=name, **{k: v if k in ("port", "curio_nodes") else str(v)  # type: ignore[arg-type]
                                                 for k, v in values.items()})
        return hosts, {g: members for g, members in groups.items() if members and g != "ungrouped"}


# a hostname (letters, digits, `-`, `_`, dots), an IPv4 or an IPv6 address (in brackets or not): a value an
# ssh_config line or a ProxyCommand's %h could read as more than a host (spaces, `-o`, `$`, `*`) is none
ADDRESS = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252}[A-Za-z0-9_])?|\[?[0-9A-Fa-f:.]+(?:%\w+)?\]?")

_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def become_of(path: str, name: str, merged: dict[str, Any]) -> str:
    """`ansible_become` (true/false, as Ansible's booleans) with `ansible_become_method` as swapctl's `become`."""
    flag = str(merged["ansible_become"]).lower()
    if flag not in _TRUE + _FALSE:
        raise PlaybookError(path, f"host {name!r}: ansible_become must be true or false, "
                                  f"not {merged['ansible_become']!r}")
    method = str(merged.get("ansible_become_method", "sudo"))
    if flag in _TRUE and method != "sudo":
        raise PlaybookError(path, f"host {name!r}: ansible_become_method {method!r} is not one swapctl "
                                  f"knows (only sudo); give the login a NOPASSWD sudo rule, or log in as root")
    return "sudo" if flag in _TRUE else "none"


def nodes_of(path: str, name: str, value: Any, line: int | None) -> tuple[str, ...]:
    """`swapctl_curio_nodes`: the Curio nodes that feed the host's cuzk, each a `curio run --listen` host:port."""
    words = value if isinstance(value, list) else str(value).split(",")
    nodes = tuple(str(w).strip() for w in words if str(w).strip())
    bad = next((n for n in nodes if not node_ok(n)), None)
    if bad is not None or not nodes:
        said = f"{bad!r} is not a node's host:port" if bad is not None else "names no node"
        raise PlaybookError(path, f"host {name!r}: swapctl_curio_nodes: {said} (each node's `curio run --listen`, "
                                  f"e.g. 10.0.0.5:12300, commas between two)", line=line)
    return nodes


def expand(pattern: str) -> list[str]:
    """Ansible's numeric host ranges: gpu-[01:03] -> gpu-01, gpu-02, gpu-03."""
    m = _RANGE.search(pattern)
    if not m:
        return [pattern]
    start, end = m[1], m[2]
    width = len(start) if start.startswith("0") else 0
    return [h for i in range(int(start), int(end) + 1)
            for h in expand(pattern[:m.start()] + str(i).zfill(width) + pattern[m.end():])]


def parse_ini(text: str, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    inv = _Inventory(path)
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        header = re.fullmatch(r"\[([^\]:]+)(?::(\w+))?\]", line)
        if header:
            section, kind = header[1], header[2] or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise PlaybookError(path, f"[{section}:{kind}]: unknown section kind (hosts, :vars or :children)",
                                    line=number)
            inv.group(section)
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise PlaybookError(path, f"cannot read this line ({exc})", line=number) from None
        if kind == "children":
            inv.group(words[0])
            inv.children[section].append(words[0])
            continue
        pairs = {}
        for word in words[1:] if kind == "hosts" else words:
            key, sep, value = word.partition("=")
            if not sep:
                raise PlaybookError(path, f"{word!r} is not key=value", line=number)
            pairs[key] = value
        if kind == "vars":
            inv.group_vars.setdefault(section, {}).update(pairs)
        else:
            for host in expand(words[0]):
                inv.add_host(host, section, pairs, number)
    return inv.resolve()


def parse_yaml(text: str, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    import yaml

    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise PlaybookError(path, f"YAML syntax error: {getattr(exc, 'problem', exc)}",
                            line=mark.line + 1 if mark else None) from None
    if not isinstance(doc, dict):
        raise PlaybookError(path, "an inventory is a mapping of groups (all: hosts: ...)")
    inv = _Inventory(path)

    def group(name: str, body: Any) -> None:
        inv.group(name)
        if body is None:
            return
        if not isinstance(body, dict):
            raise PlaybookError(path, f"group {name!r}: must be a mapping with hosts, vars or children")
        for host_pattern, variables in (body.get("hosts") or {}).items():
            for host in expand(str(host_pattern)):
                inv.add_host(host, name, variables or {})
        inv.group_vars.setdefault(name, {}).update(body.get("vars") or {})
        for child, child_body in (body.get("children") or {}).items():
            if child not in inv.children[name]:
                inv.children[name].append(child)
            group(child, child_body)

    for name, body in doc.items():
        group(name, body)
    return inv.resolve()


def load_inventory(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(hosts by name, groups by name) from an Ansible inventory file, INI or YAML by its name or content."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlaybookError(path, "no such inventory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookError(path, f"cannot read the inventory: {exc}") from None
    first = next((line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")), "")
    if path.endswith((".yml", ".yaml")) or re.match(r"^(---|[\w.-]+:\s*$)", first):
        return parse_yaml(text, path)
    return parse_ini(text, path)
