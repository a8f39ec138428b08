"""How a running daemon was started: its exact argv, where its output goes, its cwd, and the lines of
its log that say it is ready. For `swapctl init --from HOST`; a command plus a pure parser."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..host import scripts
from ..remote import Cmd
from .status import split_sections

SECTIONS = ("argv", "stdout", "cwd", "ready")  # what launch.sh prints, in its order
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_WORD_READY = re.compile(r"\b(ready|listening|serving)\b", re.I)


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    stdout: str | None  # the regular file its stdout goes to; None for a pipe, socket, tty or /dev/null
    cwd: str | None
    ready_lines: tuple[str, ...]  # log lines that look like its ready line, oldest first


def launch_cmd(pid: int) -> Cmd:
    """launch.sh for process `pid`."""
    return scripts.command("launch.sh", pid=pid)


def parse_launch(text: str) -> Launch:
    """launch.sh's output as a Launch."""
    s = split_sections(text)
    stdout = _item(s.get("stdout", ""))
    return Launch(
        argv=tuple(_item(line) for line in s.get("argv", "").split("\n") if line != "") if s.get("argv") else (),
        stdout=stdout if stdout.startswith("/") and not stdout.startswith(("/dev/", "/proc/")) else None,
        cwd=_item(s.get("cwd", "")) or None,
        ready_lines=tuple(_ANSI.sub("", line) for line in s.get("ready", "").splitlines() if line.strip()),
    )


def _item(line: str) -> str:
    """One NUL-terminated item as the script printed it: a NUL in it was a newline."""
    return line.strip("\n").replace("\0", "\n")


def propose_ready(lines: tuple[str, ...]) -> str | None:
    """An extended regex for the ready line: its message up to the ready word, without the timestamp,
    level and target before it or the address after it ("cuzk-daemon ready")."""
    found = ready_proposal(lines)
    return found[0] if found else None


# cuzk logs its status server's "status HTTP server listening" (main.rs:133) before the engine is up and
# "cuzk-daemon ready, serving on" once it is: a line saying ready wins over one only serving or listening
_RANK = ("ready", "serving", "listening")


def ready_proposal(lines: tuple[str, ...]) -> tuple[str, str] | None:
    """(the regex propose_ready gives, the log line it is read from): the first line with `ready`, else
    with `serving`, else with `listening`."""
    for word in _RANK:
        for line in lines:
            m = _WORD_READY.search(line)
            while m and m.group().lower() != word:
                m = _WORD_READY.search(line, m.end())
            if not m:
                continue
            head = line[:m.start()]
            start = max(head.rfind(": ") + 2 if ": " in head else 0, 0)
            phrase = (head[start:] + m.group()).strip()
            if phrase:
                return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", phrase), line
    return None
