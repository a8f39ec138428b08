"""Connections to hosts: one interface (run, stream, put, lock), SSH and local behind it."""

from .cmd import Cmd, Piece, Secret
from .host import Host, LocalHost, Prepared, Result, connect
from .ssh import SshHost

__all__ = ["Cmd", "Piece", "Secret", "Host", "LocalHost", "Prepared", "Result", "SshHost", "connect"]
