"""What the cordon's lines (host/swap/curio.sh) say to the engineer, and its refusals: the Curio nodes that
feed the daemon stop taking work, the swap waits until they own no cuzk task, and they are uncordoned."""

from __future__ import annotations

from collections import Counter

from ..errors import Refused
from .context import Context
from .words import SwapReport, Word


def tasks_said(words: list[str]) -> str:
    """`id:name:age_s` words as "3 tasks (PoRep 2, WinPost 1)"."""
    names = Counter(w.split(":")[1] if w.count(":") == 2 else "?" for w in words)
    kinds = ", ".join(f"{n} {c}" for n, c in sorted(names.items()))
    return f"{len(words)} task{'s' if len(words) != 1 else ''}" + (f" ({kinds})" if words else "")


def event(ctx: Context, word: Word, rest: str) -> str | None:
    """The line a cordon word is worth (None: not a cordon word)."""
    cur, spec = ctx.book.curio_of(ctx.name), ctx.spec
    words = rest.split()
    if word is Word.CORDON:
        if words[2:3] == ["again"]:
            return "the new build failed: the nodes cordoned again before it is stopped"
        return (f"cordoned {', '.join(cur.nodes)}; they owned {tasks_said(words[2:])}: waiting one poll "
                f"({cur.poll_s:g} s) and until they own none (at most {spec.drain_timeout_s:g} s)")
    if word is Word.POSTWAIT:
        return (f"the node owns PoSt work, {tasks_said(words[2:])}: no cordon until it is done (at most "
                f"{cur.post_wait_s:g} s, curio.post_wait_s)")
    if word is Word.TASKS:
        return f"the nodes still own {tasks_said(words[2:])}"
    if word is Word.OTHERCORDON:
        return f"{rest.strip()} was cordoned already, not by swapctl: it stays cordoned"
    if word is Word.UNCORDON:
        state, _, why = rest.strip().partition(" ")
        if state == "ok":
            return "uncordoned: the new build gets work" if why == "started" else "uncordoned"
        return f"warning: {why}; run `swapctl uncordon {ctx.name}`"
    if word is Word.DRAINED:
        return f"drained in {int(words[0]) / 1000:.2f} s: the nodes own no cuzk task, the daemon has nothing in flight"
    if word is Word.UNDRAINED:
        then = "refusing: uncordoned" if spec.drain_timeout == "refuse" else "stopping anyway"
        return f"{words[1]} tasks still owned after {spec.drain_timeout_s:g} s (daemon.drain_timeout): {then}"
    return None


def refused(ctx: Context, run: SwapReport) -> Refused:
    """A cordon that refused before anything stopped (a PoSt task, a node unknown, no curio or psql, the
    drain's limit with "refuse"): the host's reason, and what to do."""
    why = run.failure.removeprefix("curio: ").removeprefix("drain: ")
    if run.uncordon.startswith("failed"):  # the host could not lift its cordon: it stays until someone does
        return Refused(f"{why}; the daemon works on, but the nodes are still cordoned: run `swapctl uncordon "
                       f"{ctx.name}`", host=ctx.name)
    return Refused(f"{why}; the nodes are uncordoned and the daemon works on", host=ctx.name)
