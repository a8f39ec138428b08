"""Deploying to many hosts: rolling by default, --parallel N, --canary N, --max-fail N|P%.

Each host's swap is independent (its own connection, lock, rollback); the rollout only decides which
hosts start. Once failures exceed --max-fail no new host starts, and hosts in flight finish their swap
or roll back.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable

from rich.table import Table

from ..errors import BadInput, SwapctlError
from ..playbook import HostSpec
from ..swap.deploy import Outcome
from .common import out, text

Result = Outcome | SwapctlError
SKIPPED = "skipped"


def fail_budget(max_fail: str | None, hosts: int) -> int | None:
    """--max-fail as a number of failed hosts the rollout tolerates; None: no limit."""
    if max_fail is None:
        return None
    try:
        if max_fail.endswith("%"):
            return int(hosts * float(max_fail[:-1]) / 100)
        return int(max_fail)
    except ValueError:
        raise BadInput(f"--max-fail {max_fail!r} is neither a number of hosts nor a percentage (2, or 25%)") from None


@dataclass
class Rollout:
    """Runs `one` over hosts, at most `parallel` at a time, until failures exceed `budget`."""

    one: Callable[[HostSpec], Result]
    parallel: int = 1
    budget: int | None = None

    def __post_init__(self) -> None:
        self.results: dict[str, Result | str] = {}
        self.failures = 0
        self.stopped = ""

    def run(self, specs: list[HostSpec]) -> None:
        queue = list(specs)
        if self.parallel == 1:  # rolling: in this thread, so Ctrl-C reaches the swap as it always did
            while queue and not self.stopped:
                spec = queue.pop(0)
                self._record(spec, self.one(spec))
            for spec in queue:
                self.results[spec.name] = SKIPPED
            return
        with ThreadPoolExecutor(max_workers=max(1, self.parallel)) as pool:
            running: dict[Future, HostSpec] = {}
            while queue or running:
                while queue and len(running) < self.parallel and not self.stopped:
                    spec = queue.pop(0)
                    running[pool.submit(self.one, spec)] = spec
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    self._record(running.pop(fut), fut.result())
            for spec in queue:
                self.results[spec.name] = SKIPPED

    def _record(self, spec: HostSpec, result: Result) -> None:
        self.results[spec.name] = result
        if isinstance(result, SwapctlError):
            self.failures += 1
            if self.budget is not None and self.failures > self.budget and not self.stopped:
                self.stopped = f"{self.failures} hosts failed, more than --max-fail {self.budget}"



def summary(results: dict[str, Result | str], why_skipped: str) -> None:
    """One row a host: outcome, how the binary went, memory wait, time to ready."""
    t = Table(title="rollout", title_justify="left")
    for col in ("host", "outcome", "upload", "memory wait", "to ready", "note"):
        t.add_column(col, overflow="fold")
    for name, r in results.items():
        if isinstance(r, str):
            t.add_row(text(name), "skipped", "", "", "", text(why_skipped), style="dim")
        elif isinstance(r, SwapctlError):
            t.add_row(text(name), f"failed ({int(r.exit_code)})", "", "", "", text(r.message), style="red")
        else:
            up = r.upload or {}
            how = f"{up.get('method', '')}" + (f", {r.upload_mb_s:.0f} MB/s" if r.upload_mb_s else "")
            mem = r.steps.get("memory")
            ready = r.steps.get("ready")
            t.add_row(text(name), r.outcome, how, "" if mem is None else f"{mem:.2f} s",
                      "" if ready is None else f"{ready:.2f} s", text(r.message),
                      style="green" if r.outcome in ("deployed", "rolled-back") else None)
    out.print(t)
