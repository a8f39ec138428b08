"""What every step of a swap works with: the host, the playbook, its daemon, and where to report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..playbook import DaemonSpec, Playbook
from ..remote.cmd import Cmd
from ..remote.host import Host, Result
from .events import Event, EventSink, Interrupts


def _ignore(event: Event) -> None:
    pass


@dataclass
class Context:
    host: Host
    book: Playbook
    spec: DaemonSpec  # book.daemon, as book.require_daemon() checked it
    events: EventSink = _ignore
    interrupts: Interrupts = field(default_factory=Interrupts)
    ignore_gpu_hang: bool = False  # swap even though nvidia-smi does not answer (a wedged GPU), when told to
    beside: bool = False  # start the new build beside a process that matches daemon.match but is not the daemon
    lock_info: str = ""  # what the deploy lock's holder wrote in lock.info once taken: a swap begins only under it

    @property
    def state(self) -> str:
        """The host's state directory: releases, journal, locks."""
        return self.spec.state_dir

    @property
    def name(self) -> str:
        return self.host.name

    def emit(self, step: str, message: str = "", **kw: Any) -> None:
        self.events(Event(step, message, **kw))

    def run(self, cmd: Cmd, *, check: bool = True) -> Result:
        return self.host.run(cmd, check=check)
