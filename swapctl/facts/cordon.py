"""Curio's cordon as the host sees it (host/facts/uncordon.sh): a cordon swapctl left (cordon.info, cordon.by),
each [curio] node's unschedulable flag, and the cuzk tasks the nodes own now; read by a pure parser that
trusts nothing it reads, and said in the lines `status`, the deploy plan and `swapctl uncordon` print."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..host import scripts
from ..host.scripts import ReportWord
from ..playbook.spec import NODE, POST_TASKS, TASK, CurioSpec, Playbook
from ..remote.cmd import Cmd, Secret

if TYPE_CHECKING:  # only a type here: this module ships in the Ansible collection, standard library only
    from ..remote import Host

_TASK = re.compile(rf"([0-9]{{1,18}}):({TASK.pattern}):([0-9]{{1,12}})")
_SINCE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_SHOWN = re.compile(r"[ -~]{1,200}")  # a value from the host shown as it is: printable ASCII, short
NO_DB = "unknown (database did not answer)"


class Word(ReportWord):
    """The words uncordon.sh starts its lines with."""

    STATE = "STATE"
    INFO = "INFO"
    BY = "BY"
    LIFTED = "LIFTED"
    FLAG = "FLAG"
    DB = "DB"
    TASK = "TASK"


@dataclass(frozen=True)
class Task:
    id: int
    name: str
    age_s: int

    def text(self) -> str:
        return f"{self.name} #{self.id} ({self.age_s} s)"


@dataclass(frozen=True)
class CordonView:
    """What uncordon.sh printed, each value checked: anything else is left out or "unknown"."""

    state: str = "unknown"  # none (no state directory), idle, swapping, unsafe, unknown
    ours: tuple[str, ...] = ()  # the nodes a cordon of swapctl's holds (cordon.info), else ()
    left: bool = False  # cordon.info is there (its nodes may all have been unreadable)
    since: str = "unknown"
    by: str = "unknown"
    action: str = "unknown"
    lifted: str = ""  # ok, failed, refused, nocli; "" when nothing was lifted
    flags: tuple[tuple[str, bool], ...] = ()
    db: str = ""  # ok, failed, nosql; "" when not asked (no nodes)
    tasks: tuple[Task, ...] = ()

    def flag(self, node: str) -> bool | None:
        return dict(self.flags).get(node)


def command(book: Playbook, host: str, lift: bool) -> Cmd:
    """uncordon.sh for the playbook's daemon and the host's Curio nodes (book.curio_of): with `lift`, a cordon
    swapctl left is lifted."""
    return command_of(book.curio_of(host), book.require_daemon().state_dir, lift)


def command_of(cur: CurioSpec, state_dir: str, lift: bool) -> Cmd:
    """uncordon.sh for these nodes and this state directory (the Ansible modules call it with theirs)."""
    return scripts.command("uncordon.sh", dir=state_dir, lift="1" if lift else "",
                           cordon_nodes=" ".join(cur.nodes), curio_via=cur.via, curio_cli=cur.cli, curio_sql=cur.sql,
                           curio_env=Secret("".join(f"{k}={shlex.quote(v)}\n" for k, v in cur.env)),
                           cuzk_tasks=",".join(cur.tasks))


def read(host: Host, book: Playbook, lift: bool = False) -> CordonView:
    """The cordon on `host` now (one call); with `lift`, a cordon swapctl left lifted first."""
    return parse(host.run(command(book, host.name, lift), timeout=90).stdout)


def _shown(value: object) -> str:
    return value if isinstance(value, str) and _SHOWN.fullmatch(value) else "unknown"


def parse(out: str) -> CordonView:
    """uncordon.sh's lines; a line it does not know, or a value out of shape, is dropped."""
    got: dict[str, object] = {}
    flags: list[tuple[str, bool]] = []
    tasks: list[Task] = []
    for line in out.splitlines():
        word, rest = Word.of(line)
        words = rest.split()
        if word is Word.STATE and words and words[0] in ("none", "idle", "swapping", "unsafe"):
            got["state"] = words[0]
        elif word is Word.INFO:
            got["left"] = True
            got["ours"] = tuple(n for n in words[2:] if NODE.fullmatch(n))
            got["since"] = words[1] if len(words) > 1 and _SINCE.fullmatch(words[1]) else "unknown"
        elif word is Word.BY:
            got.update(_by(rest))
        elif word is Word.LIFTED and words and words[0] in ("ok", "failed", "refused", "nocli"):
            got["lifted"] = words[0]
        elif word is Word.FLAG and len(words) == 2 and NODE.fullmatch(words[0]) and words[1] in ("true", "false"):
            flags.append((words[0], words[1] == "true"))
        elif word is Word.DB and words and words[0] in ("ok", "failed", "nosql"):
            got["db"] = words[0]
        elif word is Word.TASK and (m := _TASK.fullmatch(rest.strip())):
            tasks.append(Task(int(m[1]), m[2], int(m[3])))
    return CordonView(**got, flags=tuple(flags), tasks=tuple(tasks))  # type: ignore[arg-type]


def _by(text: str) -> dict[str, str]:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {"by": _shown(doc.get("by")), "action": _shown(doc.get("action"))}


def tasks_said(tasks: tuple[Task, ...]) -> str:
    """"3 (PoRep 2, WinPost 1), the oldest 42 s" or "none"."""
    if not tasks:
        return "none"
    kinds = ", ".join(f"{n} {c}" for n, c in sorted(Counter(t.name for t in tasks).items()))
    return f"{len(tasks)} ({kinds}), the oldest {max(t.age_s for t in tasks)} s"


def ours_said(v: CordonView) -> str:
    """"cordoned by swapctl since T (deploy by U)"."""
    return f"cordoned by swapctl since {v.since} ({v.action} by {v.by})"


def node_said(v: CordonView, node: str) -> str:
    """One node's flag as the database has it, and whose cordon it is."""
    if v.db in ("failed", "nosql") or (v.db == "" and not v.flags):
        return NO_DB if v.db == "failed" else "unknown (no curio.sql client on the host)" if v.db else "unknown"
    flag = v.flag(node)
    if flag is None:
        return "unknown (not in harmony_machines)"
    if not flag:
        return "schedulable"
    return "cordoned by swapctl" if node in v.ours else "cordoned, not by swapctl"


def tasks_line(v: CordonView) -> str:
    if v.db == "ok":
        return tasks_said(v.tasks)
    return "unknown (no curio.sql client on the host)" if v.db == "nosql" else NO_DB


def status_lines(v: CordonView, nodes: tuple[str, ...], host: str) -> list[str]:
    """What `status` says of the cordon, with [curio] nodes set."""
    lines = []
    if v.left:
        then = ("a swap runs now" if v.state == "swapping"
                else f"no swap runs: `swapctl uncordon {host}` lifts it")
        lines.append(f"cordon: {ours_said(v)}: {' '.join(v.ours) or 'unknown nodes'}; {then}")
    lines += [f"curio node {n}: {node_said(v, n)}" for n in nodes]
    lines.append(f"  their cuzk tasks now: {tasks_line(v)}")
    return lines


def shown(view: CordonView, nodes: tuple[str, ...], host: str) -> dict[str, Any]:
    """The cordon as `status --json` and the Ansible status module show it: swapctl's own (if one is left),
    each node's flag, the tasks now, and the lines `status` prints."""
    return {"ours": {"nodes": list(view.ours), "since": view.since, "by": view.by, "action": view.action}
            if view.left else None, "swap_running": view.state == "swapping",
            "nodes": {n: node_said(view, n) for n in nodes}, "database": view.db or "unknown",
            "tasks": [t.__dict__ for t in view.tasks], "said": status_lines(view, nodes, host)}


def left_said(v: CordonView) -> str | None:
    """The plan's line for a cordon swapctl left, which the swap lifts first (None: none, or a swap runs now
    and its own script lifts it)."""
    if not v.left or v.state == "swapping":
        return None
    return f"a cordon swapctl left: {ours_said(v)} on {' '.join(v.ours)}; the swap lifts it first"


def lifted_said(v: CordonView, host: str) -> str | None:
    """What a lift did, in one line (None: there was nothing of swapctl's to lift)."""
    nodes = " ".join(v.ours) or "its nodes"
    if v.lifted == "ok":
        return f"uncordoned {nodes}: a cordon swapctl left ({ours_said(v)})"
    if v.lifted == "failed":
        return f"`curio cli --machine NODE uncordon` failed for {nodes} ({ours_said(v)})"
    if v.lifted == "refused":
        return f"cordon.info on {host} names no node's host:port: nothing was uncordoned"
    if v.lifted == "nocli":
        return f"no curio CLI on {host} (curio.cli): {nodes} left cordoned"
    return None


def plan_lines(v: CordonView, nodes: tuple[str, ...], poll_s: float, post_wait_s: float, drain_s: float,
               max_cordon_s: float) -> list[str]:
    """What a deploy with stop = "cordon" will do: the nodes, their tasks now, any PoSt, the waits and limits."""
    lines = [f"cordon: {', '.join(f'{n} ({node_said(v, n)})' for n in nodes)}",
             f"  their cuzk tasks now: {tasks_line(v)}"]
    lines += [f"    {t.text()}" for t in v.tasks]
    post = [t for t in v.tasks if t.name in POST_TASKS]
    if post:
        lines.append(f"  PoSt in flight: {', '.join(t.text() for t in post)}: no cordon until it is done; the swap "
                     f"waits for it at most {post_wait_s:g} s (curio.post_wait_s), then refuses")
    lines.append(f"  the swap waits one poll ({poll_s:g} s) and until the nodes own no cuzk task and the daemon has "
                 f"nothing in flight, at most {drain_s:g} s (daemon.drain_timeout_s); the nodes stay cordoned at "
                 f"most {max_cordon_s:g} s (curio.max_cordon_s)")
    return lines
