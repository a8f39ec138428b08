"""A swap's plan as a typed list of steps (issue 32): `of(plan)` makes it, `deploy` and `rollback`
(swap/deploy.py) run it in order, and --dry-run prints each step's commands (swap/describe.py).

A deploy: Lock, Send, Save, SwapIn, Prune. A rollback: Lock, Save, SwapIn. The list's shape is fixed
for a kind of plan, so that a step that changes the plan (Save, where the daemon exited by itself and
daemon.gone_before_stop says "deploy") has the steps after it made again from the plan it leaves.

The host's journal line is the swap's own, not a step after it: swap.sh writes it however the swap
ends, a failed start's and its rollback's too, so that a controller killed after the stop cannot skip
it (docs/promises.md). It is said with SwapIn.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..facts.releases import Release
from .plan import Backup, DeployPlan, Method, Plan


@dataclass(frozen=True)
class Lock:
    """The host's deploy lock (flock -n), held until the swap has ended."""


@dataclass(frozen=True)
class Send:
    """The new release put on the host by the method the plan chose (send.choose)."""

    method: Method


@dataclass(frozen=True)
class Save:
    """The copies made before anything stops: the running daemon's build, a plain file at the binary path."""

    backups: tuple[Backup, ...]


@dataclass(frozen=True)
class SwapIn:
    """Stop what runs, wait for its memory, start `target` and wait until it is ready; where that fails the
    host goes back to `fallback` by itself. The host journals how it ended."""

    action: str  # "deploy" or "rollback": the journal line's action
    target: Release
    fallback: Release | None


@dataclass(frozen=True)
class Prune:
    """Once the swap went well: the releases beyond releases.keep (never those in `protect`) and the
    interrupted uploads (`stale`) removed."""

    releases: tuple[Release, ...]  # the host's releases once the new one is in place
    protect: frozenset[str]
    stale: tuple[str, ...]


Step = Lock | Send | Save | SwapIn | Prune


def of(plan: Plan) -> tuple[Step, ...]:
    """The steps that carry out `plan`, in the order they run."""
    if isinstance(plan, DeployPlan):
        previous = plan.way_back()
        protect = frozenset({plan.new.id} | ({previous.id} if previous else set()))
        known = {**plan.known, plan.new.id: plan.new}
        return (Lock(), Send(plan.upload), Save(plan.to_save), SwapIn("deploy", plan.new, previous),
                Prune(tuple(known.values()), protect, tuple(p.path for p in plan.partials)))
    return Lock(), Save(plan.to_save), SwapIn("rollback", plan.new, plan.way_back())
