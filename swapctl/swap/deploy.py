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

from ..errors import Refused
from ..facts.catalog import Catalog, catalog
from ..facts.journal_entry import Upload
from ..playbook import Playbook
from ..remote.host import Held, Host, Prepared
from . import elf, journal, lock, preflight, save, steps, swap_in, swaprun, upload
from .context import Context
from .describe import describe
from .ending import Ended
from .events import Event, EventSink, Interrupts, Outcome
from .plan import Daemon, DeployPlan, Plan, Situation
from .send import Session

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
        return catalog(self.host, self.ctx.spec)

    def situation(self) -> Situation:
        return preflight.situation(self.ctx)

    def plan(self, binary_path: str, restart: bool = False, build: dict[str, Any] | None = None) -> DeployPlan:
        """The preflight of a deploy: everything checked before anything changes; raises BadInput or Refused."""
        binary = elf.inspect(binary_path)
        plan = preflight.plan_deploy(self.ctx, self.situation(), binary, restart, build)
        self.session.start(plan)
        return replace(plan, commands=tuple(describe(self.ctx, plan, self.session)))

    def plan_rollback(self, to: str | None = None) -> Plan:
        """The preflight of a rollback: `to` (a sha256 prefix or a history index), or the last good release."""
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
        return self.session.send(plan, lambda rel: save.write_manifest(self.ctx, rel))

    def discard_upload(self) -> None:
        self.session.discard()

    def log_tail(self, offset: int, lines: int = 20) -> str:
        return swaprun.log_tail(self.ctx, offset, lines)


class _Run:
    """One deploy's or rollback's steps (steps.of), run in order, and what each leaves for the next."""

    def __init__(self, sw: Swap, plan: Plan):
        self.sw, self.plan = sw, plan
        self.times: dict[str, float] = {}  # each step's seconds, journaled with the swap
        self.t = time.monotonic()
        self.sent: Upload | None = None
        self.epilogue: Prepared | None = None  # a shell for what follows a swap that went well
        self.cached: threading.Thread | None = None
        self.outcome: Outcome | None = None

    def go(self) -> Outcome:
        todo = steps.of(self.plan)
        for i in range(len(todo)):
            before = self.plan
            self.do(todo[i])
            if self.plan is not before:  # the daemon exited by itself: the steps after this one from the plan left
                todo = steps.of(self.plan)
        if self.outcome is None:
            raise AssertionError(f"the plan's steps have no swap: {todo}")
        return self.outcome

    def do(self, step: steps.Step) -> None:
        ctx, plan = self.sw.ctx, self.plan
        match step:
            case steps.Lock():
                self.sw.lock()
                self._timed("lock")
            case steps.Send() if isinstance(plan, DeployPlan):
                self.sent = self.sw.upload(plan)
                self._timed("upload")
                cached = threading.Thread(target=upload.Cache().add, args=(plan.binary.path, plan.new.sha256))
                cached.start()  # the old side of the next deploy's patch; off the upload's path
                self.cached = cached  # only once started: a Ctrl-C before it leaves nothing to join
            case steps.Save():
                self.epilogue = journal.epilogue(ctx)  # its shell starts beside the backup and the swap
                self.plan = save.backup(ctx, plan)  # the daemon may have exited by itself since the preflight
                self.times["backup"] = round(time.monotonic() - self.t, 3)
            case steps.SwapIn():
                for rel in (step.target, step.fallback):  # what it starts with is its record from now on
                    if rel and rel.id in plan.filled_ids:
                        save.write_manifest(ctx, rel)
                sent = (self.sent.sent_from(os.path.abspath(plan.binary.path))  # `history` shows it to its uploader
                        if self.sent and isinstance(plan, DeployPlan) else None)
                outcome = swap_in.swap_in(ctx, plan, step.target, step.action, step.fallback, self.times, sent)
                if self.sent and self.sent.wire_bytes:
                    outcome = replace(outcome, upload_mb_s=plan.new.size / 1e6 / max(self.sent.seconds, 1e-6))
                self.outcome = outcome
            case steps.Prune():
                _, prune = save.prune_cmd(ctx, {r.id: r for r in step.releases}, set(step.protect), step.stale)
                journal.then(ctx, self.epilogue, (prune,) if prune else ())
            case _:
                raise AssertionError(f"a step this plan cannot run: {step}")

    def _timed(self, step: str) -> None:
        now = time.monotonic()
        self.times[step] = round(now - self.t, 3)
        self.t = now

    def close(self) -> None:
        if self.epilogue is not None:
            self.epilogue.close()
        self.sw.unlock()
        self.sw.discard_upload()
        if self.cached:
            self.cached.join()


def deploy(sw: Swap, plan: DeployPlan) -> Outcome:
    """The swap after a confirmed plan: its steps (steps.of: lock, upload, backup, the swap with its way back,
    pruning), the upload's host side started before the lock. The caller starts the GPU sampler for the
    daemon it leaves running (gpu.sampler.start_after_swap): the swap stands whatever the sampler does."""
    if plan.unchanged:
        return Outcome(host=plan.host, action="deploy", outcome=Ended.UNCHANGED, old_sha=plan.new.sha256,
                       new_sha=plan.new.sha256, pid=plan.daemon.pid if plan.daemon else None,
                       message=f"the daemon already runs {plan.new.id}; --restart restarts it anyway")
    run = _Run(sw, plan)
    sw.prepare_upload(plan)
    try:  # inside: a refused lock still ends the receive started for it
        return run.go()
    except KeyboardInterrupt:
        raise Refused("interrupted before the old daemon was stopped: nothing changed on the host",
                      host=sw.host.name) from None
    finally:
        run.close()


def rollback(sw: Swap, plan: Plan) -> Outcome:
    """Back to `plan.new`, an earlier release, started exactly as recorded: its steps (steps.of: lock,
    backup, the swap)."""
    run = _Run(sw, plan)
    try:
        return run.go()
    except KeyboardInterrupt:
        raise Refused("interrupted before the daemon was stopped: nothing changed on the host",
                      host=sw.host.name) from None
    finally:
        run.close()
