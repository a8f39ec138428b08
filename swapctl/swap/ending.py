"""How a swap ended, read from the swap script's report once, for both sides: the controller
(swap/swap_in.py) and the Ansible modules (module_utils/steps.py) each word and code an ending their own
way, but never decide it twice. Standard library only: scripts/build_collection.py ships it."""

from __future__ import annotations

from enum import StrEnum

from .words import SwapReport


class Ended(StrEnum):
    """An Outcome's `outcome`: a swap that left the daemon it meant to run (the words are the journal's)."""

    DEPLOYED = "deployed"  # a deploy's new release runs
    ROLLED_BACK = "rolled-back"  # a rollback's: the release it went back to runs
    UNCHANGED = "unchanged"  # that release ran already: nothing was stopped
    DRY_RUN = "dry-run"  # only the plan was shown


class Ending(StrEnum):
    """Every way the swap script's report can end, the failures included."""

    DONE = "done"  # Ended: the release asked for runs (which one: done_as)
    NO_OUTCOME = "no outcome"  # the script ended without OUTCOME (killed, cut off): the state is not known
    NO_DAEMON = "no daemon"  # the memory wait ran out after the stop: nothing was started
    WENT_BACK = "went back"  # the new start failed and the release that ran before runs again
    NO_FALLBACK = "no fallback"  # the new start failed and there was nothing to go back to: no daemon
    FALLBACK_UNREADY = "fallback unready"  # it failed, and the release it went back to runs but is not ready
    FALLBACK_FAILED = "fallback failed"  # it failed, and so did the release it went back to: no daemon
    UNKNOWN = "unknown"  # an OUTCOME word no swapctl knows (the host is hostile input)


def ending(report: SwapReport, has_fallback: bool) -> Ending:
    """How the swap that `report` tells of ended (swap.sh's `finish` words); `has_fallback`: there was a
    release to go back to."""
    if not report.outcome:
        return Ending.NO_OUTCOME
    if report.back_why:  # ROLLBACK: the host went back by itself
        if report.outcome == "rolled-back":
            return Ending.WENT_BACK
        if not has_fallback:
            return Ending.NO_FALLBACK
        if report.outcome == "rollback-failed" and report.outcome_pid:
            return Ending.FALLBACK_UNREADY
        return Ending.FALLBACK_FAILED
    if report.outcome == "no-daemon":
        return Ending.NO_DAEMON
    return Ending.DONE if report.outcome in (Ended.DEPLOYED, Ended.ROLLED_BACK) else Ending.UNKNOWN


def done_as(report: SwapReport) -> Ended:
    """The Ended of a report whose ending() is DONE."""
    return Ended(report.outcome)
