"""The systemd unit a daemon runs under: `systemctl show` and `systemctl cat`, read by pure parsers.

The status script prints both in its `unit` section (the show lines, then a `--- cat` line, then the unit
file and its drop-ins as `systemctl cat` prints them)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

# What status shows and the swap needs; one `systemctl show -p` call.
PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "Result", "NRestarts", "MainPID", "ExecStart",
              "Environment", "WorkingDirectory", "Restart", "FragmentPath", "DropInPaths", "InvocationID", "MemoryMax")
CAT_MARK = "--- cat"


@dataclass(frozen=True)
class Unit:
    """A systemd service as `systemctl show` describes it, and its files as `systemctl cat` prints them."""

    name: str
    load_state: str = ""  # loaded, not-found, masked...
    active_state: str = ""  # active, activating, failed, inactive...
    sub_state: str = ""  # running, auto-restart, dead...
    result: str = ""
    n_restarts: int = 0
    main_pid: int = 0
    exec_path: str = ""  # what ExecStart runs
    exec_argv: tuple[str, ...] = ()  # its argv, as systemd shows it (words split on spaces)
    environment: tuple[tuple[str, str], ...] = ()  # Environment= (not EnvironmentFile=)
    working_directory: str = ""
    restart: str = ""  # Restart=: no, on-failure, always...
    fragment: str = ""  # the unit file
    drop_ins: tuple[str, ...] = ()
    invocation: str = ""  # InvocationID: the journal's _SYSTEMD_INVOCATION_ID of the running instance
    files: str = ""  # `systemctl cat`: the unit file and its drop-ins
    memory_max_kib: int | None = None  # MemoryMax= (None: infinity, or not shown)

    @property
    def found(self) -> bool:
        return self.load_state not in ("", "not-found")

    @property
    def state(self) -> str:
        return f"{self.active_state}/{self.sub_state}" if self.sub_state else self.active_state


def parse_exec(value: str) -> tuple[str, tuple[str, ...]]:
    """ExecStart's `{ path=/data/cuzk ; argv[]=/data/cuzk --config /data/cuzk.toml ; ... }`: path and argv
    (of the first command, when there are several)."""
    path = re.search(r"\bpath=([^;]*?) ;", value)
    argv = re.search(r"\bargv\[\]=(.*?) ; ", value)
    return (path.group(1).strip() if path else "",
            tuple(argv.group(1).split()) if argv else ())


def parse_environment(value: str) -> tuple[tuple[str, str], ...]:
    """Environment=`A=1 "B=a b"`: systemd quotes an assignment holding a space, as a shell word."""
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    return tuple((k, v) for k, sep, v in (w.partition("=") for w in words) if sep and k)


def parse_unit(text: str) -> Unit | None:
    """The status script's `unit` section: the show lines, then the cat text; None when it is empty."""
    show, _, cat = text.partition(f"\n{CAT_MARK}\n")
    if show.startswith(CAT_MARK):  # nothing shown
        show, cat = "", show[len(CAT_MARK):].lstrip("\n")
    props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    if not props.get("Id"):
        return None
    path, argv = parse_exec(props.get("ExecStart", ""))

    def num(key: str) -> int:
        v = props.get(key, "").strip()
        return int(v) if v.isdecimal() else 0

    return Unit(name=props["Id"], load_state=props.get("LoadState", ""), active_state=props.get("ActiveState", ""),
                sub_state=props.get("SubState", ""), result=props.get("Result", ""), n_restarts=num("NRestarts"),
                main_pid=num("MainPID"), exec_path=path, exec_argv=argv,
                environment=parse_environment(props.get("Environment", "")),
                working_directory=props.get("WorkingDirectory", ""), restart=props.get("Restart", ""),
                fragment=props.get("FragmentPath", ""), drop_ins=tuple(props.get("DropInPaths", "").split()),
                invocation=props.get("InvocationID", ""), files=cat.strip("\n"),
                memory_max_kib=num("MemoryMax") // 1024 if 0 < num("MemoryMax") < 10**18 else None)
