"""A playbook's [hosts], [groups] and the daemon's tables as an Ansible inventory and group_vars, for the
swapctl.cuzk collection (`swapctl export-ansible`): one description of the farm for both tools.

The group_vars carry the tables under the names the collection's modules take (`swapctl_daemon` is
[daemon], by the same keys; `swapctl_curio` [curio], a host's own curio_nodes its `swapctl_curio_nodes`); the
daemon's secret_env values and Curio's database variables go apart (`swapctl_daemon_secret_env`,
`swapctl_curio_env`: name -> value tables the modules never log), in a file of their own for
`ansible-vault encrypt`."""

from __future__ import annotations

import re
import shlex
from dataclasses import fields
from typing import Any

from . import DaemonSpec, HostSpec, Playbook

# a name Ansible takes as a group (INI: letters, digits, _; not first a digit)
GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def group_name(name: str) -> str:
    """`name` as an Ansible group name: what is not a letter, digit or _ becomes _."""
    out = re.sub(r"\W", "_", name)
    return out if GROUP.fullmatch(out) else f"g_{out}"


def host_line(spec: HostSpec) -> str:
    """A host's INI line: its name and the connection variables Ansible's ssh connection takes."""
    if spec.transport == "local":
        return f"{spec.name} ansible_connection=local"
    pairs: list[tuple[str, str]] = [("ansible_host", spec.address)]
    if spec.port:
        pairs.append(("ansible_port", str(spec.port)))
    if spec.user:
        pairs.append(("ansible_user", spec.user))
    if spec.identity_file:
        pairs.append(("ansible_ssh_private_key_file", spec.identity_file))
    opts = []
    if spec.known_hosts:
        opts.append(f"-o UserKnownHostsFile={spec.known_hosts}")
    opts.append("-o StrictHostKeyChecking=" + ("accept-new" if spec.host_key_policy == "accept-new" else "yes"))
    pairs.append(("ansible_ssh_common_args", " ".join(opts)))
    if spec.become == "sudo":
        pairs += [("ansible_become", "True"), ("ansible_become_method", "sudo")]  # INI: True is a bool
    if spec.curio_nodes:  # its own Curio nodes, as swapctl reads them from an inventory too
        pairs.append(("swapctl_curio_nodes", ",".join(spec.curio_nodes)))
    return " ".join([spec.name, *(f"{k}={shlex.quote(v)}" for k, v in pairs)])


def inventory(book: Playbook, group: str) -> str:
    """The INI inventory: every host in `group`, and each of the playbook's [groups] as a group of its own."""
    lines = [f"# written by swapctl export-ansible from {book.path}", f"[{group}]"]
    lines += [host_line(spec) for spec in book.hosts.values()]
    for name, members in book.groups.items():
        lines += ["", f"[{group_name(name)}]", *members]
    return "\n".join(lines) + "\n"


def _daemon(d: DaemonSpec) -> dict[str, Any]:
    """[daemon] by its keys, as swapctl.cuzk's `daemon` option takes them; secret values left out."""
    out: dict[str, Any] = {}
    for f in fields(DaemonSpec):
        value = getattr(d, f.name)
        if f.name == "secret_env" or value is None or value == f.default:
            continue
        if f.name == "env":
            value = {k: v for k, v in value if k not in d.secret_env}
        elif isinstance(value, tuple):
            value = list(value)
        if value or value == 0:
            out[f.name] = value
    return out


def group_vars(book: Playbook) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """(the group's variables, the secret ones: the daemon's secret environment values and Curio's database
    variables, each by name)."""
    out: dict[str, Any] = {"swapctl_daemon": _daemon(book.daemon),
                           "swapctl_memory": {f.name: getattr(book.memory, f.name) for f in fields(book.memory)},
                           "swapctl_gpu": {"nvidia_smi_timeout_s": book.gpu.nvidia_smi_timeout_s},
                           "swapctl_releases": {"keep": book.keep_releases}}
    r = book.rollout
    if r.canary or r.parallel > 1:
        out["swapctl_serial"] = [r.canary, r.parallel] if r.canary else [r.parallel]
    if r.max_fail and r.max_fail.endswith("%"):
        out["swapctl_max_fail_percentage"] = float(r.max_fail[:-1])
    c = book.curio
    if c.nodes or book.daemon.stop == "cordon" or any(h.curio_nodes for h in book.hosts.values()):
        out["swapctl_curio"] = {"nodes": list(c.nodes), "cli": c.cli, "sql": c.sql, "poll_s": c.poll_s,
                                "post_wait_s": c.post_wait_s, "max_cordon_s": c.max_cordon_s, "tasks": list(c.tasks)}
    secrets = {"swapctl_daemon_secret_env": {k: v for k, v in book.daemon.env if k in book.daemon.secret_env},
               "swapctl_curio_env": dict(c.env)}
    return out, {k: v for k, v in secrets.items() if v}
