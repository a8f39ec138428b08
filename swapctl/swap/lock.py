"""Step 2, the host's deploy lock: held by a command whose stdin is the deploy's SSH channel, so it dies
with the connection and a killed deploy never leaves a stale lock (sh/lock.sh)."""

from __future__ import annotations

import json
import os

from ..errors import LockHeld, Refused
from ..remote.cmd import Cmd
from ..remote.host import Held
from . import scripts
from .context import Context
from .preflight import swapping, unsafe
from .releases import now_iso, who_am_i
from .report import Word, parse_lock


def lock_cmd(ctx: Context) -> Cmd:
    info = json.dumps({"by": who_am_i(), "since": now_iso(), "pid": os.getpid()})
    return scripts.command("lock.sh", dir=ctx.state, info=info)


def take(ctx: Context) -> Held:
    """The lock, held until the returned handle is closed; raises LockHeld or Refused."""
    ctx.emit("lock", "taking the host's deploy lock")
    held = ctx.host.hold(lock_cmd(ctx))
    said = parse_lock(held.first_line)
    if said.word is Word.LOCKED:
        return held
    held.close()
    if said.word is Word.SWAPPING:
        raise swapping(ctx)
    if said.word is Word.UNSAFE:
        raise unsafe(ctx, said.detail)
    if said.word is not Word.HELD:
        why = said.detail or "the lock script ended without a word"
        raise Refused(f"cannot take the deploy lock in {ctx.state}: {why}; check the host's disk "
                      f"(`df -h {ctx.state}`, is it full or read-only?)", host=ctx.name)
    try:
        who = json.loads(said.detail)
        detail = f"{who['by']} (pid {who['pid']}) since {who['since']}"
    except (ValueError, KeyError, TypeError):
        detail = said.detail or "another swapctl"
    raise LockHeld(f"another deploy holds the lock: {detail}; wait for it, it ends with its connection",
                   host=ctx.name)
