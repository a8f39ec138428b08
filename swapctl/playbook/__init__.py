"""Playbooks: where the hosts are and how the daemon runs. Validated here, trusted everywhere else.

spec.py holds the types the rest of swapctl reads, schema.py the keys the loader accepts, load.py the
loader, targets.py the HOST arguments of the command line."""

from ..errors import PlaybookError
from .load import load, parse
from .spec import (
    BECOME,
    CONNECT_TIMEOUT_S,
    DEFAULT_PLAYBOOK,
    DRAIN_TIMEOUT,
    ENV_NAME,
    GONE_BEFORE_STOP,
    HOST_KEY_POLICIES,
    JOURNAL,
    READY_MODES,
    SSH_CONFIGS,
    STOP_MODES,
    TRANSPORTS,
    DaemonSpec,
    GpuSpec,
    HostSpec,
    MemorySpec,
    Playbook,
    RolloutSpec,
    with_become,
)
from .targets import resolve_host, ssh_config_aliases

__all__ = [
    "BECOME",
    "CONNECT_TIMEOUT_S",
    "DEFAULT_PLAYBOOK",
    "DRAIN_TIMEOUT",
    "DaemonSpec",
    "ENV_NAME",
    "GONE_BEFORE_STOP",
    "GpuSpec",
    "HOST_KEY_POLICIES",
    "HostSpec",
    "JOURNAL",
    "MemorySpec",
    "Playbook",
    "PlaybookError",
    "READY_MODES",
    "RolloutSpec",
    "SSH_CONFIGS",
    "STOP_MODES",
    "TRANSPORTS",
    "load",
    "parse",
    "resolve_host",
    "ssh_config_aliases",
    "with_become",
]
