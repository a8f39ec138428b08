"""The playbook's schema: every table and key the loader accepts, with its kind, and the checker that
holds a table to it. playbook/reference.py writes docs/playbook.md from SCHEMA."""

from __future__ import annotations

import difflib
import re
from typing import Any

from ..errors import PlaybookError

# key -> (kind, required). Kinds: str, int, num (int or float), bool, strlist, strtable.
SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "host": {
        "address": ("str", True),
        "port": ("int", False),
        "user": ("str", False),
        "identity_file": ("str", False),
        "known_hosts": ("str", False),
        "host_key_policy": ("str", False),
        "transport": ("str", False),
        "become": ("str", False),
        "curio_nodes": ("strlist", False),
    },
    "daemon": {
        "binary": ("str", False),
        "args": ("strlist", False),
        "match": ("str", False),
        "log": ("str", False),
        "ready_log": ("str", False),
        "ready_port": ("int", False),
        "ready_timeout_s": ("num", False),
        "ready_stable_s": ("num", False),
        "stop_grace_s": ("num", False),
        "status_url": ("str", False),
        "stop": ("str", False),
        "drain_timeout_s": ("num", False),
        "drain_timeout": ("str", False),
        "ready": ("str", False),
        "cwd": ("str", False),
        "env": ("strtable", False),
        "secret_env": ("strlist", False),
        "unit": ("str", False),
        "user": ("str", False),
        "keep_loader_env": ("strlist", False),
        "lock_silence_s": ("num", False),
        "gone_before_stop": ("str", False),
    },
    "memory": {
        "min_available_gib": ("num", False),
        "release_timeout_s": ("num", False),
        "gpu_slack_mib": ("num", False),
    },
    "rollout": {
        "parallel": ("int", False),
        "canary": ("int", False),
        "canary_wait_s": ("num", False),
        "max_fail": ("budget", False),
    },
    "gpu": {"nvidia_smi_timeout_s": ("num", False)},
    "curio": {
        "nodes": ("strlist", False),
        "via": ("str", False),
        "cli": ("str", False),
        "sql": ("str", False),
        "env": ("strtable", False),
        "poll_s": ("num", False),
        "post_wait_s": ("num", False),
        "max_cordon_s": ("num", False),
        "tasks": ("strlist", False),
    },
    "logs": {"paths": ("strlist", False)},
    "releases": {"keep": ("int", False)},
    # Read by `swapctl build`; checked there.
    "build": {
        "dockerfile": ("str", False),
        "context": ("str", False),
        "binary_in_image": ("str", False),
        "args": ("strtable", False),
        "platform": ("str", False),
    },
}
TOP = ("hosts", "groups", "daemon", "memory", "gpu", "rollout", "logs", "releases", "build", "curio")
KIND_NAMES = {
    "str": "a string",
    "int": "an integer",
    "num": "a number",
    "bool": "true or false",
    "strlist": "a list of strings",
    "strtable": "a table of strings",
    "budget": 'a number of hosts or a percentage ("10%")',
}


class Loader:
    """One playbook file: checks a table against SCHEMA; its errors name the file, line and key."""

    def __init__(self, path: str, text: str):
        self.path, self.lines = path, text.splitlines()

    def line_of(self, table: str, key: str | None = None) -> int | None:
        """The line where `key` is set under [table] (or the table's header), for error messages."""
        header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(
            '"?' + re.escape(p) + '"?' for p in table.split(".")) + r"\s*\]")
        in_table = table == ""
        for number, line in enumerate(self.lines, 1):
            if re.match(r"^\s*\[", line):
                in_table = bool(header.match(line))
                if in_table and key is None:
                    return number
            elif in_table and key and re.match(r"^\s*" + re.escape(key) + r"\s*=", line):
                return number
        return None

    def fail(self, message: str, table: str, key: str | None = None) -> PlaybookError:
        dotted = f"{table}.{key}" if key and table else key or table
        line = self.line_of(table, key) or (self.line_of(table) if table else None)
        return PlaybookError(self.path, message, line=line, key=dotted or None)

    def table(self, doc: dict[str, Any], name: str) -> dict[str, Any]:
        value = doc.get(name, {})
        if not isinstance(value, dict):
            raise self.fail(f"must be a table, like [{name}]", "", name)
        return value

    def section(self, data: dict[str, Any], schema: str, table: str) -> dict[str, Any]:
        """Checks one table against the schema; returns plain Python values."""
        spec = SCHEMA[schema]
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key not in spec:
                close = difflib.get_close_matches(key, spec, n=1)
                hint = f"did you mean `{close[0]}`?" if close else f"known keys: {', '.join(spec)}"
                raise self.fail(f"unknown key ({hint})", table, key)
            kind, _ = spec[key]
            out[key] = self.check_type(value, kind, table, key)
        for key, (_, required) in spec.items():
            if required and key not in data:
                raise self.fail(f"missing required key `{key}`; add it under [{table}]", table, key)
        return out

    def check_type(self, value: Any, kind: str, table: str, key: str) -> Any:
        value = value.unwrap() if hasattr(value, "unwrap") else value
        ok = {
            "str": isinstance(value, str),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "num": isinstance(value, (int, float)) and not isinstance(value, bool),
            "bool": isinstance(value, bool),
            "strlist": isinstance(value, list) and all(isinstance(v, str) for v in value),
            "strtable": isinstance(value, dict) and all(isinstance(v, str) for v in value.values()),
            "budget": isinstance(value, int) and not isinstance(value, bool) and value >= 0
            or isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?%", value) is not None,
        }[kind]
        if not ok:
            raise self.fail(f"must be {KIND_NAMES[kind]}, not {value!r}", table, key)
        if kind == "num" and value < 0 or kind == "int" and value < 0:
            raise self.fail(f"must not be negative, not {value!r}", table, key)
        return value
