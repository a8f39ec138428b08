"""Step 10, the journal: one JSON line per swap on the host (journal.jsonl) and in the local history."""

from __future__ import annotations

import json
from typing import Any

from ..remote.cmd import Cmd
from . import scripts
from .context import Context
from .releases import now_iso, record_local, who_am_i


def journal_cmd(ctx: Context, entry: dict[str, Any]) -> Cmd:
    return scripts.command("append_line.sh", path=f"{ctx.state}/journal.jsonl",
                           text=json.dumps(entry, sort_keys=True), label="journal")


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
