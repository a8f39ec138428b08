"""The journal, written: one JSON line per swap on the host (journal.jsonl) and in the local history
(record_local). The swap script writes a swap's line itself, on every path (host/swap/swap.sh's finish):
what ends the controller cannot skip it. `write` is for the lines only swapctl knows (an experiment's
decision). A line is a facts.journal_entry.JournalEntry, read back only through facts.journal_entry.read.

After a swap that went well, the pruning (the plan's Prune step) goes to a shell started on the host
before the swap (`epilogue`): that shell's start-up (the login shell reads ~/.bashrc, where `pyenv init` or
`conda init` costs 0.1-1 s) is paid while the swap runs, and what follows the ready line costs one message
on a channel already open, not a new command (issue 23: 0.26 s after the ready line before).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from ..errors import RemoteCommandFailed
from ..facts.journal_entry import CAP_BYTES, JOURNAL, KEEP, JournalEntry
from ..facts.releases import now_iso, who_am_i
from ..host import scripts
from ..remote.cmd import Cmd
from ..remote.host import Prepared
from .context import Context

# The epilogue (host/swap/epilogue.sh) reads commands from its stdin and runs them, stopping at the first that
# fails, once they have all come: its script ends in this line. Nothing it runs reads that stdin (each gets
# /dev/null or its own here-document).
EPILOGUE_END = "#swapctl-epilogue-end"
EPILOGUE = scripts.command("epilogue.sh", end=EPILOGUE_END, label="journal")


def journal_cmd(ctx: Context, entry: JournalEntry) -> Cmd:
    return scripts.command("append_line.sh", path=f"{ctx.state}/{JOURNAL}", text=entry.to_json(), keep=KEEP,
                           cap_bytes=CAP_BYTES, label="journal")


def epilogue(ctx: Context) -> Prepared:
    """A shell on the host waiting for what follows a successful swap; closed unused, it runs nothing."""
    return ctx.host.prepare(EPILOGUE)


def write(ctx: Context, entry: JournalEntry, shell: Prepared | None = None, then: Iterable[Cmd] = ()) -> JournalEntry:
    """Appends `entry` (with when, by whom and the host) on the host and locally, then runs `then` on the
    host; through `shell` (from `epilogue`) when one is given and still unused."""
    line = replace(entry, time=now_iso(), by=who_am_i(), host=ctx.name)
    cmds = [journal_cmd(ctx, line), *then]
    try:
        if shell is None or shell.used:
            for cmd in cmds:
                ctx.run(cmd)
        else:
            _through(ctx, shell, cmds)
    finally:
        record_local(line)
    return line


def then(ctx: Context, shell: Prepared | None, cmds: Iterable[Cmd]) -> None:
    """Runs `cmds` on the host after a swap the host journaled itself; through `shell` (from `epilogue`)
    when one is given and still unused."""
    cmds = list(cmds)
    if not cmds:
        return
    if shell is None or shell.used:
        for cmd in cmds:
            ctx.run(cmd)
    else:
        _through(ctx, shell, cmds)


def _through(ctx: Context, shell: Prepared, cmds: list[Cmd]) -> None:
    text = "set -e\n" + "".join(_line(cmd) for cmd in cmds) + EPILOGUE_END + "\n"
    result = shell.send([text.encode()])
    if not result.ok:
        raise RemoteCommandFailed(ctx.name, "; ".join(map(str, cmds)), result.exit_code,
                                  (result.stderr or result.stdout)[-2000:])


def _line(cmd: Cmd) -> str:
    """`cmd` as a line of the epilogue shell's script: its named inputs on its stdin as a here-document
    (quoted: nothing in it is expanded), else /dev/null, so it never reads the commands after it."""
    feed = cmd.feed().decode("utf-8", "surrogateescape")
    if not feed:
        return f"{cmd.render()} < /dev/null\n"
    end = "SWAPCTL_INPUTS_" + secrets.token_hex(8)
    assert end not in feed  # 64 random bits
    return f"{cmd.render()} <<'{end}'\n{feed}{end}\n"


def state_home() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    path = Path(base) / "swapctl"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def record_local(entry: JournalEntry) -> None:
    """Appends a journal entry to the local history (XDG state), one JSON line."""
    with open(state_home() / "history.jsonl", "a", encoding="utf-8") as f:
        f.write(entry.to_json() + "\n")
