"""Connections to hosts: one interface (run, stream, put, lock), SSH and local behind it."""

from .cmd import Cmd, Piece, Secret
from .host import Host, LocalHost, Prepared, Result, connect

__all__ = ["Cmd", "Piece", "Secret", "Host", "LocalHost", "Prepared", "Result", "SshHost", "connect"]


def __getattr__(name: str):
    """SshHost on first use: its module imports fabric and paramiko, about 0.2 s, which only connecting needs."""
    if name == "SshHost":
        from .ssh import SshHost

        return SshHost
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
