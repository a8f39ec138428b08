"""Running one function on many hosts: each host's result or its exception, never one for all."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..playbook import HostSpec
from . import connect
from .host import Host

T = TypeVar("T")


def on_hosts(specs: list[HostSpec], fn: Callable[[Host], T], parallel: int = 32) -> dict[str, T | BaseException]:
    """Connects to each host and calls `fn` on it, `parallel` at a time; maps host name to outcome."""

    def one(spec: HostSpec) -> T | BaseException:
        try:
            with connect(spec) as host:
                return fn(host)
        except Exception as exc:  # each host's failure is its own
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(specs)))) as pool:
        outcomes = list(pool.map(one, specs))
    return {spec.name: outcome for spec, outcome in zip(specs, outcomes, strict=True)}
