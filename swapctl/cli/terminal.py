"""What remote text may do to a terminal: nothing. Control characters are shown, never sent.

A host is not trusted with the terminal: a log line, a process's argv or a file name can hold ESC
sequences that retitle the window (OSC 0), hide text (SGR 8), clear the screen (CSI 2J) or move the
cursor over earlier output. rich strips only BEL, BS, VT, FF and CR. Every C0 and C1 control (and DEL)
is written out here as `\\xNN`, tab excepted; the bidirectional overrides, which reorder what a person
reads ("Trojan source"), as `\\uNNNN`. In log lines the colour codes (SGR: bold, dim, italic, underline,
colours) are kept as rich styles; every other SGR attribute, conceal and blink among them, is dropped.
"""

from __future__ import annotations

import re

from rich.text import Text

_BIDI = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SHOWN = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}
_SHOWN.update({c: f"\\u{c:04x}" for c in _BIDI})
_SHOWN_KEEP_NEWLINES = {c: v for c, v in _SHOWN.items() if c != 0x0A}

_SGR = re.compile(r"\x1b\[([0-9;]*)m")
# SGR parameters a log's colours use; 8 (conceal), 5/6 (blink), 7 (reverse) and the rest are dropped
_PLAIN_SGR = {0, 1, 2, 3, 4, 22, 23, 24, 39, 49, *range(30, 38), *range(40, 48), *range(90, 98), *range(100, 108)}


def visible(value: str, *, newlines: bool = False) -> str:
    """`value` with every control character written out (`ESC` as `\\x1b`); tab kept, and newlines
    too with `newlines`."""
    return value.translate(_SHOWN_KEEP_NEWLINES if newlines else _SHOWN)


def _colours(params: str) -> str:
    """The colour part of one SGR sequence's parameters ('' when nothing is left)."""
    kept: list[str] = []
    parts = params.split(";") if params else ["0"]
    i = 0
    while i < len(parts):
        p = int(parts[i]) if parts[i].isdecimal() else -1
        if p in (38, 48) and i + 1 < len(parts):  # 256-colour (5;N) or truecolour (2;R;G;B)
            n = {"5": 2, "2": 4}.get(parts[i + 1], 0)
            group = parts[i:i + 1 + n]
            if n and len(group) == n + 1 and all(x.isdecimal() and int(x) < 256 for x in group[2:]):
                kept += group
            i += 1 + n if n else 1
            continue
        if p in _PLAIN_SGR:
            kept.append(str(p))
        i += 1
    return ";".join(kept)


def log_line(value: str) -> Text:
    """One line of a remote log for the terminal: its colours as styles, every other control shown."""
    pieces, at = [], 0
    for m in _SGR.finditer(value):
        pieces.append(visible(value[at:m.start()]))
        if colours := _colours(m.group(1)):
            pieces.append(f"\x1b[{colours}m")
        at = m.end()
    pieces.append(visible(value[at:]))
    return Text.from_ansi("".join(pieces))


def log_lines(value: str) -> Text:
    """Several lines of a remote log (a tail, new bytes), each as `log_line` makes it."""
    return Text("\n").join(log_line(line) for line in value.split("\n"))
