"""Step 10, the journal: one JSON line per swap on the host (journal.jsonl) and in the local history."""

from __future__ import annotations

import json
from typing import Any

from ..remote.cmd import Cmd
from . import scripts
from .context import Context
from .releases import now_iso, record_local, who_am_i

# The host's journal is rotated past CAP_BYTES to its last KEEP entries (a line is about 1 KB), and a deploy
# reads only its last 1000 entries (inspect.sh): it grows by a line every swap, for as long as the host lives.
KEEP, CAP_BYTES = 2000, 4 << 20


def journal_cmd(ctx: Context, entry: dict[str, Any]) -> Cmd:
    return scripts.command("append_line.sh", path=f"{ctx.state}/journal.jsonl",
                           text=json.dumps(entry, sort_keys=True), keep=KEEP, cap_bytes=CAP_BYTES, label="journal")


def write(ctx: Context, entry: dict[str, Any], upload: dict[str, Any] | None = None) -> dict[str, Any]:
    """Appends `entry` (with when, by whom, the host, how the binary got there) on the host and locally."""
    line = {"time": now_iso(), "by": who_am_i(), "host": ctx.name, **entry}
    if upload is not None:
        line["upload"] = upload
    try:
        ctx.run(journal_cmd(ctx, line))
    finally:
        record_local(line)
    return line
