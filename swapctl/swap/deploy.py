"""The safe swap, as docs/deploy.md's ten steps: preflight, lock, upload, backup, stop, wait for memory, start,
readiness, rollback, journal. Each step lives in its own module; `Swap` holds one host's steps together.

The core never prints: it reports `Event`s to a callback and returns an `Outcome`, or raises a
SwapctlError whose exit code says what state the host is in.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from typing import Any

from ..errors import Refused, SwapctlError
from ..facts.status import HostStatus
from ..gpu.sampler import start_sampler
from ..playbook import Playbook
from ..remote.host import Held, Host
from . import elf, journal, lock, preflight, store, swaprun, upload
from . import rollback as back
from .context import Context
from .describe import describe
from .events import Event, EventSink, Interrupts, Outcome
from .journal_entry import Upload
from .plan import Catalog, Daemon, DeployPlan, Plan, Situation
from .session import Session

__all__ = ["Catalog", "Daemon", "DeployPlan", "Event", "EventSink", "Interrupts", "Outcome", "Plan", "Situation",
           "Swap", "deploy", "rollback"]


class Swap:
    """One host's swap. Reuse it for the steps of a deploy, a rollback, or both."""

    def __init__(self, host: Host, book: Playbook, events: EventSink | None = None,
                 interrupts: Interrupts | None = None, ignore_gpu_hang: bool = False, beside: bool = False):
        self.ctx = Context(host, book, book.require_daemon(), interrupts=interrupts or Interrupts(),
                           ignore_gpu_hang=ignore_gpu_hang, beside=beside)
        if events is not None:
            self.ctx.events = events
        self.host, self.book, self.interrupts = host, book, self.ctx.interrupts
        self.session = Session(self.ctx)  # the upload, started during the preflight
        self._lock: Held | None = None

    def __enter__(self) -> Swap:
        return self

    def __exit__(self, *exc: object) -> None:
        """The upload session plan() started ends with the swap: its zstd worker, its frames made ahead, a
        patch's base held, whether the upload happened or not."""
        self.discard_upload()

    def catalog(self) -> Catalog:
        return preflight.catalog(self.ctx)

    def situation(self) -> Situation:
        return preflight.situation(self.ctx)

    def plan(self, binary_path: str, restart: bool = False, build: dict[str, Any] | None = None) -> DeployPlan:
        """Step 1 for a deploy: everything checked before anything changes; raises BadInput or Refused."""
        binary = elf.inspect(binary_path)
        plan = preflight.plan_deploy(self.ctx, self.situation(), binary, restart, build)
        self.session.start(plan)
        return replace(plan, commands=tuple(describe(self.ctx, plan, self.session)))

    def plan_rollback(self, to: str | None = None) -> Plan:
        """Step 1 for a rollback: `to` (a sha256 prefix or a history index), or the last good release."""
        plan = preflight.plan_rollback(self.ctx, self.situation(), to)
        return replace(plan, commands=tuple(describe(self.ctx, plan, self.session)))

    def lock(self) -> None:
        self._lock = lock.take(self.ctx)

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def prepare_upload(self, plan: DeployPlan) -> None:
        self.session.prepare(plan)

    def upload(self, plan: DeployPlan) -> Upload:
        return self.session.send(plan, lambda rel: store.write_manifest(self.ctx, rel))

    def discard_upload(self) -> None:
        self.session.discard()

    def log_tail(self, offset: int, lines: int = 20) -> str:
        return swaprun.log_tail(self.ctx, offset, lines)


def _timed(steps: dict[str, float], step: str, started: float) -> float:
    now = time.monotonic()
    steps[step] = round(now - started, 3)
    return now


def deploy(sw: Swap, plan: DeployPlan) -> Outcome:
    """Steps 2 to 10 after a confirmed plan: lock, upload, backup, then the swap with its way back."""
    if plan.unchanged:
        return Outcome(host=plan.host, action="deploy", outcome="unchanged", old_sha=plan.new.sha256,
                       new_sha=plan.new.sha256, pid=plan.daemon.pid if plan.daemon else None,
                       message=f"the daemon already runs {plan.new.id}; --restart restarts it anyway")
    steps: dict[str, float] = {}
    t = time.monotonic()
    cached = epilogue = None
    sw.prepare_upload(plan)
    try:
        sw.lock()  # inside: a refused lock still ends the receive started for it
        t = _timed(steps, "lock", t)
        sent = sw.upload(plan)
        t = _timed(steps, "upload", t)
        cached = threading.Thread(target=upload.Cache().add, args=(plan.binary.path, plan.new.sha256))
        cached.start()  # the old side of the next deploy's patch; off the upload's path
        epilogue = journal.epilogue(sw.ctx)  # its shell starts beside the backup and the swap
        plan = store.backup(sw.ctx, plan)  # the daemon may have exited by itself since the preflight
        _timed(steps, "backup", t)
        previous = plan.fallback()
        protect = {plan.new.id} | ({previous.id} if previous else set())
        _, prune = store.prune_cmd(sw.ctx, {**plan.known, plan.new.id: plan.new}, protect,
                                   tuple(p.path for p in plan.partials))  # run only once the swap went well
        sent_from = sent.sent_from(os.path.abspath(plan.binary.path))  # `history` shows it to its uploader
        outcome = back.swap_in(sw.ctx, plan, plan.new, "deploy", previous, steps, sent_from,
                               back.After(epilogue, (prune,) if prune else ()))
        if sent.wire_bytes:
            outcome = replace(outcome, upload_mb_s=plan.new.size / 1e6 / max(sent.seconds, 1e-6))
        return sample(sw, plan, outcome)
    except KeyboardInterrupt:
        raise Refused("interrupted before the old daemon was stopped: nothing changed on the host",
                      host=sw.host.name) from None
    finally:
        if epilogue is not None:
            epilogue.close()
        sw.unlock()
        sw.discard_upload()
        if cached:
            cached.join()


def samplable(status: HostStatus) -> bool:
    """Whether the host's GPU can be sampled: it has nvidia-smi, and nvidia-smi answered in time."""
    return not status.gpu_hung and not (status.gpu_error or "").startswith("no GPU tools")


def sample(sw: Swap, plan: Plan, outcome: Outcome) -> Outcome:
    """Starts the host's GPU sampler for the daemon now running (what `timings` reads as GPU busy). A
    host the preflight found without nvidia-smi gets none (no round trip, no note file); a sampler that
    cannot start is a note in the outcome; the swap stands either way."""
    if not outcome.pid or not samplable(plan.status):
        return outcome
    try:
        status = start_sampler(sw.host, sw.ctx.state, outcome.pid, user=sw.ctx.spec.user or "")
    except SwapctlError as exc:
        return replace(outcome, message=f"{outcome.message} GPU sampler not started: {exc}".strip())
    if status.ok:
        return outcome
    return replace(outcome, message=f"{outcome.message} GPU sampler: {status.note or status.outcome}".strip())


def rollback(sw: Swap, plan: Plan) -> Outcome:
    """Back to `plan.new`, an earlier release, started exactly as recorded: lock, backup, the swap."""
    steps: dict[str, float] = {}
    t = time.monotonic()
    sw.lock()
    epilogue = None
    try:
        _timed(steps, "lock", t)
        epilogue = journal.epilogue(sw.ctx)
        plan = store.backup(sw.ctx, plan)
        return sample(sw, plan, back.swap_in(sw.ctx, plan, plan.new, "rollback", back.rollback_fallback(plan), steps,
                                             after=back.After(epilogue)))
    except KeyboardInterrupt:
        raise Refused("interrupted before the daemon was stopped: nothing changed on the host",
                      host=sw.host.name) from None
    finally:
        if epilogue is not None:
            epilogue.close()
        sw.unlock()
