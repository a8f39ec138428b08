"""The host's deploy lock: held by a command whose stdin is the deploy's SSH channel (host/swap/lock.sh),
for as long as the deploy's heartbeat comes on it. It ends with the connection, and also when no heartbeat
came for `daemon.lock_silence_s`: a controller SIGSTOPped, or a link gone silent, leaves a half-open
connection that the host's TCP keepalive notices only hours later."""

from __future__ import annotations

import json
import os
import threading

from ..errors import LockHeld, Refused
from ..facts.releases import now_iso, who_am_i
from ..host import scripts
from ..remote.cmd import Cmd
from ..remote.host import Held
from .context import Context
from .preflight import swapping, unsafe
from .words import Word, parse_lock

BEAT_S = 2.0  # at most: a fifth of the silence the host waits


def lock_cmd(ctx: Context, info: str | None = None) -> Cmd:
    info = info or json.dumps({"by": who_am_i(), "since": now_iso(), "pid": os.getpid()})
    return scripts.command("lock.sh", dir=ctx.state, info=info, silence=int(ctx.spec.lock_silence_s),
                           user=ctx.spec.user or "")


class Heartbeat:
    """A byte on the lock's channel every `every` seconds, from a thread of its own: the main thread may be
    busy (an upload, a swap) for longer than the silence the host waits."""

    def __init__(self, held: Held, every: float):
        self.held, self.every, self.done = held, every, threading.Event()
        self.thread = threading.Thread(target=self._run, name="swapctl-lock-heartbeat", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(self.every):
            try:
                self.held.write(b".")
            except Exception:  # noqa: BLE001 (whatever the transport raises: the channel and the lock are gone)
                return

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        self.held.close()


def take(ctx: Context) -> Held:
    """The lock, held (and its heartbeat sent) until the returned handle is closed; raises LockHeld or Refused."""
    ctx.emit("lock", "taking the host's deploy lock")
    info = json.dumps({"by": who_am_i(), "since": now_iso(), "pid": os.getpid()})
    held = ctx.host.hold(lock_cmd(ctx, info))
    said = parse_lock(held.first_line)
    if said.word is Word.LOCKED:
        ctx.lock_info = info  # the swap script checks it is still this deploy's lock before it begins
        beat = Heartbeat(held, min(BEAT_S, ctx.spec.lock_silence_s / 5))
        return Held(held.first_line, beat.close, held.writer)
    held.close()
    if said.word is Word.SWAPPING:
        raise swapping(ctx, said.detail)
    if said.word is Word.UNSAFE:
        raise unsafe(ctx, said.detail)
    if said.word is not Word.HELD:
        why = said.detail or "the lock script ended without a word"
        raise Refused(f"cannot take the deploy lock in {ctx.state}: {why}; check the host's disk "
                      f"(`df -h {ctx.state}`, is it full or read-only?)", host=ctx.name)
    raise LockHeld(held_by(said.detail, ctx.spec.lock_silence_s), host=ctx.name)


def held_by(detail: str, silence: float) -> str:
    """The refusal for a lock held: who holds it, and how long its holder has been silent (`SECONDS INFO`)."""
    silent, _, info = detail.partition(" ")
    try:
        who = json.loads(info)
        holder = f"{who['by']} (pid {who['pid']}) since {who['since']}"
    except (ValueError, KeyError, TypeError):
        holder = info or "another swapctl"
    if not silent.isdecimal():
        return f"another deploy holds the lock: {holder}; wait for it, it ends with its connection"
    return (f"another deploy holds the lock: {holder}, its heartbeat last came {silent} s ago; the lock ends "
            f"with its connection, or once it has been silent {silence:g} s")
