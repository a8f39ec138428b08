"""The playbook's tables as the Ansible modules' options (argument_spec): made from the schema (its keys and
kinds) and the spec (its defaults and choices), so a key added to the playbook is an option of the modules at
once. Standard library only: scripts/build_collection.py ships it, and the collection's args.py reads it."""

from __future__ import annotations

import dataclasses
from typing import Any

from .schema import SCHEMA
from .spec import (
    DRAIN_TIMEOUT,
    GONE_BEFORE_STOP,
    READY_MODES,
    STOP_MODES,
    CurioSpec,
    DaemonSpec,
    GpuSpec,
    MemorySpec,
    Playbook,
)

# the playbook's tables the modules take, each as its spec (the inventory holds [hosts] and [groups],
# Ansible's serial and max_fail_percentage [rollout]; [logs] and [build] are fetch-logs' and build's)
TABLES: dict[str, Any] = {"daemon": DaemonSpec, "memory": MemorySpec, "gpu": GpuSpec, "curio": CurioSpec}
NOT_TAKEN = {"hosts": "the inventory", "groups": "the inventory", "rollout": "serial, max_fail_percentage",
             "logs": "fetch-logs only", "build": "swapctl build only"}
CHOICES = {"stop": STOP_MODES, "drain_timeout": DRAIN_TIMEOUT, "ready": READY_MODES,
           "gone_before_stop": GONE_BEFORE_STOP}
KIND = {"str": "str", "int": "int", "num": "float", "strlist": "list", "strtable": "dict"}
REQUIRED = {"binary", "log"}  # "" in DaemonSpec: require_daemon() insists on them, as the module does
# values the modules take apart and never log: the playbook lists secret_env's names (their values are in
# [daemon.env]), and [curio] env holds the database's password
SECRET = {("daemon", "secret_env"), ("curio", "env")}


def option(table: str, key: str) -> dict[str, Any]:
    """One key of a playbook table as an Ansible option: its type, and its default or `required`, choices."""
    if (table, key) in SECRET:
        return {"type": "dict", "default": {}, "no_log": True}
    kind = SCHEMA[table][key][0]
    out: dict[str, Any] = {"type": KIND[kind], **({"elements": "str"} if kind == "strlist" else {})}
    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(TABLES[table])}
    default = defaults[key]
    if table == "daemon" and key in REQUIRED:
        out["required"] = True
    elif default is not None:
        out["default"] = {"strlist": list, "strtable": dict}.get(kind, type(default))(default)
    if table == "daemon" and key in CHOICES:
        out["choices"] = list(CHOICES[key])
    return out


def options(table: str) -> dict[str, dict[str, Any]]:
    return {key: option(table, key) for key in SCHEMA[table]}


def settings() -> dict[str, dict[str, Any]]:
    """Every module's options: the tables, [releases] keep, and `host` (the name the journal gives the host)."""
    keep = Playbook.__dataclass_fields__["keep_releases"].default
    return {"daemon": {"type": "dict", "required": True, "options": options("daemon")},
            "memory": {"type": "dict", "default": {}, "options": options("memory")},
            "gpu": {"type": "dict", "default": {}, "options": options("gpu")},
            "releases": {"type": "dict", "default": {}, "options": {"keep": {"type": "int", "default": keep}}},
            "curio": {"type": "dict", "default": {}, "options": options("curio")},
            "host": {"type": "str"}}
