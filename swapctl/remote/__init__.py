"""Connections to hosts: one interface (run, stream, put, lock), SSH and local behind it.

SshHost (paramiko, fabric) is imported only when a connection needs it: the command and script modules
stay free of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .cmd import Cmd, Piece, Secret
from .host import Host, LocalHost, Prepared, Result

if TYPE_CHECKING:  # not at run time: the playbook and ssh modules may pull in paramiko
    from ..playbook.spec import HostSpec
    from .ssh import SshHost

__all__ = ["Cmd", "Piece", "Secret", "Host", "LocalHost", "Prepared", "Result", "SshHost", "connect"]


def connect(spec: HostSpec) -> Host:
    """A connection for a playbook host; SSH connects lazily on first use."""
    if spec.transport == "local":
        return LocalHost(spec.name)
    from .ssh import SshHost

    return SshHost(spec)


def __getattr__(name: str) -> Any:
    if name == "SshHost":
        from .ssh import SshHost

        return SshHost
    raise AttributeError(name)
