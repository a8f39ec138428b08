"""A HOST argument on the command line: a playbook name, user@address:port, or an ssh_config alias."""

from __future__ import annotations

import difflib
import os
import re

from ..errors import BadInput, PlaybookError
from .spec import DEFAULT_PLAYBOOK, SSH_CONFIGS, HostSpec, Playbook, host_name_problem

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
    problem = host_name_problem(target)
    if problem:
        raise PlaybookError(playbook.path, f"host {target!r} {problem}; a host's name is a local directory's "
                                           f"(fetch-logs' DEST/NAME): give a plain name", key="HOST")
    if "@" in target or ":" in target:
        m = _ADHOC.match(target)
        if m and (m["port"] is None or 0 < int(m["port"]) < 65536):
            return HostSpec(
                name=target,
                address=m["address"].strip("[]"),
                port=int(m["port"]) if m["port"] else None,
                user=m["user"],
                become=playbook.become,
                connect_timeout_s=playbook.connect_timeout_s,
            )
        raise PlaybookError(playbook.path, f"host {target!r} is not user@address:port", key="HOST")
    if target in (ssh_config_aliases() if ssh_aliases is None else ssh_aliases):
        return HostSpec(name=target, address=target, become=playbook.become,
                        connect_timeout_s=playbook.connect_timeout_s)
    if not playbook.found and not playbook.hosts:
        raise BadInput(f"no ./{DEFAULT_PLAYBOOK} (or $SWAPCTL_PLAYBOOK); see `swapctl init` (and {target!r} is "
                       f"not user@address:port or a `Host` in ~/.ssh/config)")
    known = ", ".join(playbook.hosts) or "none"
    close = difflib.get_close_matches(target, playbook.hosts, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"hosts in the playbook: {known}"
    raise PlaybookError(playbook.path, f"unknown host {target!r} ({hint}); add [hosts.{target}], a `Host {target}` "
                        f"in ~/.ssh/config, or use user@address:port", key="hosts")
