"""Step 10, the journal: one JSON line per swap on the host (journal.jsonl) and in the local history.

After a swap that went well, its journal line and the pruning go to a shell started on the host before
the swap (`epilogue`): that shell's start-up (the login shell reads ~/.bashrc, where `pyenv init` or
`conda init` costs 0.1-1 s) is paid while the swap runs, and what follows the ready line costs one message
on a channel already open, not a new command (issue 23: 0.26 s after the ready line before).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from typing import Any

from ..errors import RemoteCommandFailed
from ..remote.cmd import Cmd
from ..remote.host import Prepared
from . import scripts
from .context import Context
from .releases import now_iso, record_local, who_am_i

# The host's journal is rotated past CAP_BYTES to its last KEEP entries (a line is about 1 KB), and a deploy
# reads only its last 1000 entries (inspect.sh): it grows by a line every swap, for as long as the host lives.
KEEP, CAP_BYTES = 2000, 4 << 20

# Reads commands from its stdin and runs them as they come, stopping at the first that fails. Nothing it
# runs reads that stdin (each gets /dev/null): the rest of the commands stay for the shell.
EPILOGUE = Cmd("sh", "-s", label="journal")


def journal_cmd(ctx: Context, entry: dict[str, Any]) -> Cmd:
    return scripts.command("append_line.sh", path=f"{ctx.state}/journal.jsonl",
                           text=json.dumps(entry, sort_keys=True), keep=KEEP, cap_bytes=CAP_BYTES, label="journal")


def epilogue(ctx: Context) -> Prepared:
    """A shell on the host waiting for what follows a successful swap; closed unused, it runs nothing."""
    return ctx.host.prepare(EPILOGUE)


def write(ctx: Context, entry: dict[str, Any], upload: dict[str, Any] | None = None,
          shell: Prepared | None = None, then: Iterable[Cmd] = ()) -> dict[str, Any]:
    """Appends `entry` (with when, by whom, the host, how the binary got there) on the host and locally,
    then runs `then` on the host; through `shell` (from `epilogue`) when one is given and still unused."""
    line = {"time": now_iso(), "by": who_am_i(), "host": ctx.name, **entry}
    if upload is not None:
        line["upload"] = upload
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


def _through(ctx: Context, shell: Prepared, cmds: list[Cmd]) -> None:
    text = "set -e\n" + "".join(_line(cmd) for cmd in cmds)
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
