"""[curio], checked: the nodes that feed the daemon, and what `stop = "cordon"` needs of them."""

from __future__ import annotations

import re
from typing import Any

from . import spec as sp
from .schema import Loader

NODE = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")
TASK = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,15}")  # harmony_task.name is varchar(16)
# what Curio reads its database from (cmd/curio/main.go:122-158)
DB_ENV = tuple(f"CURIO_{p}_{k}" for p in ("DB", "HARMONYDB") for k in ("HOST", "HOSTS", "PORT", "NAME", "USER",
                                                                          "USERNAME", "PASSWORD"))
PROGRAM = re.compile(r"/?[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*")


def curio(ld: Loader, doc: dict[str, Any], daemon: sp.DaemonSpec) -> sp.CurioSpec:
    """[curio], checked against the daemon's stop mode: "cordon" needs its nodes."""
    c = ld.section(ld.table(doc, "curio"), "curio", "curio")
    for node in c.get("nodes", ()):
        if not NODE.fullmatch(node) or not 0 < int(node.rsplit(":", 1)[1]) < 65536:
            raise ld.fail(f"{node!r} is not a node's host:port (its `curio run --listen`, e.g. \"10.0.0.5:12300\")",
                          "curio", "nodes")
    for name in c.get("tasks", ()):
        if not TASK.fullmatch(name):
            raise ld.fail(f"{name!r} is not a Curio task name (e.g. PoRep, WdPost)", "curio", "tasks")
    for key in ("cli", "sql"):
        if key in c and not PROGRAM.fullmatch(c[key]):
            raise ld.fail(f"{c[key]!r} is not a program's name or absolute path", "curio", key)
    for name in c.get("env", {}):
        if name not in DB_ENV:
            raise ld.fail(f"{name!r} is not one of Curio's database variables ({', '.join(DB_ENV[:5])}, ...)",
                          "curio", "env")
    for key in ("poll_s", "post_wait_s", "max_cordon_s"):
        if key in c and not (c[key] >= 0 if key == "post_wait_s" else c[key] > 0):
            raise ld.fail(f"must be {'0 or more' if key == 'post_wait_s' else 'more than 0'} s", "curio", key)
    if daemon.stop == "cordon" and not c.get("nodes"):
        raise ld.fail('"cordon" cordons the Curio nodes that feed the daemon: name them under [curio], '
                      'nodes = ["HOST:PORT"] (each node\'s `curio run --listen`)', "daemon", "stop")
    c["nodes"] = tuple(c.get("nodes", ()))
    c["tasks"] = tuple(c.get("tasks", sp.CUZK_TASKS))
    c["env"] = tuple(c.get("env", {}).items())
    spec = sp.CurioSpec(**c)
    if spec.nodes and spec.max_cordon_s < spec.poll_s:
        raise ld.fail(f"must be at least poll_s ({spec.poll_s:g} s): a cordon shorter than one poll stops nothing",
                      "curio", "max_cordon_s")
    return spec
