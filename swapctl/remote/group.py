"""Running one function on many hosts: each host's result or its exception, never one for all."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from ..playbook.spec import HostSpec
from . import connect
from .host import Host

T = TypeVar("T")


def on_hosts(specs: list[HostSpec], fn: Callable[[Host], T], parallel: int = 32) -> dict[str, T | BaseException]:
    """Connects to each host and calls `fn` on it, `parallel` at a time; maps host name to outcome. Each
    host runs on a daemon thread and this waits for them interruptibly: Ctrl-C ends the command at once,
    also while a host is still connecting (each call has its own deadline; none is waited for after)."""
    slots = threading.BoundedSemaphore(max(1, min(parallel, len(specs))))
    outcomes: list[T | BaseException | None] = [None] * len(specs)
    left, all_done = [len(specs)], threading.Event()
    counting = threading.Lock()

    def one(i: int, spec: HostSpec) -> None:
        with slots:
            try:
                with connect(spec) as host:
                    outcomes[i] = fn(host)
            except Exception as exc:  # each host's failure is its own
                outcomes[i] = exc
        with counting:
            left[0] -= 1
            if left[0] == 0:
                all_done.set()

    if specs:
        for i, spec in enumerate(specs):
            threading.Thread(target=one, args=(i, spec), name=f"swapctl-{spec.name}", daemon=True).start()
        all_done.wait()  # a lock wait: Ctrl-C interrupts it (raises KeyboardInterrupt here)
    return {spec.name: outcome for spec, outcome in zip(specs, outcomes, strict=True)}  # type: ignore[misc]
