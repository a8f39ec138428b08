"""Connections to hosts: one interface (run, stream, put, lock), SSH and local behind it."""

from .cmd import Cmd, Piece, Secret
from .host import Host, LocalHost, Result, connect
from .ssh import SshHost

__all__ = ["Cmd", "Piece", "Secret", "Host", "LocalHost", "Result", "SshHost", "connect"]
