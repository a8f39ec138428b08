"""The memory cgroups status.sh reads (host/facts/cgroup.sh's cg_report): the daemon's, and the one a daemon
started now runs in. A pure parser: every line is the host's text, and what does not parse is no limit."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Level:
    """One cgroup of a chain: its path in its hierarchy, its limit and what is in use there (KiB, None: none
    or not known)."""

    path: str
    max_kib: int | None
    current_kib: int | None

    def holds(self, path: str) -> bool:
        """Whether the cgroup at `path` is this one or below it (its memory is counted here too)."""
        return self.path == "/" or path == self.path or path.startswith(self.path + "/")


@dataclass(frozen=True)
class Cgroup:
    """A process's memory cgroup, with every cgroup above it (nearest first): what limits what it may hold."""

    version: str  # v1 | v2
    path: str
    levels: tuple[Level, ...] = ()
    oom: int | None = None  # memory.events' oom (v2 only), None where not known
    oom_kill: int | None = None  # processes the kernel's OOM killer killed in it

    @property
    def limit_kib(self) -> int | None:
        """The least limit of this cgroup and those above it; None: none limits it."""
        limits = [lv.max_kib for lv in self.levels if lv.max_kib is not None]
        return min(limits) if limits else None

    @property
    def current_kib(self) -> int | None:
        return self.levels[0].current_kib if self.levels else None

    def room_kib(self, freed_kib: int = 0, freed_from: str | None = None) -> int | None:
        """What a process started in it may still take before a limit stops it: at each limited level, its
        limit less what is in use there, less nothing of `freed_kib` where that level holds `freed_from` (a
        daemon about to stop, in that cgroup). None: no limit."""
        rooms = []
        for lv in self.levels:
            if lv.max_kib is None:
                continue
            used = lv.current_kib or 0
            if freed_from is not None and lv.holds(freed_from):
                used = max(0, used - freed_kib)
            rooms.append(max(0, lv.max_kib - used))
        return min(rooms) if rooms else None


@dataclass(frozen=True)
class Cgroups:
    """The status script's own cgroup (a daemon started by hand over this connection lands there) and the
    cgroup of each process that runs a file in the binary's directory."""

    own: Cgroup | None = None
    by_pid: dict[int, Cgroup] = field(default_factory=dict)


def _kib(word: str) -> int | None:
    return int(word) if word.isascii() and word.isdecimal() and len(word) <= 18 else None


def _path(word: str) -> str | None:
    return word if word.startswith("/") and "/../" not in word + "/" else None


def parse_cgroups(text: str) -> Cgroups:
    """cg_report's lines: `self PID VERSION PATH` and `proc PID VERSION PATH` (or `... PID -`), each cgroup's
    `mem PATH MAX CURRENT` lines (itself, then each above it) and its `events PATH OOM OOM_KILL` line."""
    named: list[tuple[str, int, str, str]] = []
    levels: dict[tuple[str, str], list[Level]] = {}
    events: dict[str, tuple[int | None, int | None]] = {}
    chain: list[Level] | None = None
    for line in text.split("\n"):
        parts = line.split()
        if len(parts) == 4 and parts[0] in ("self", "proc") and parts[2] in ("v1", "v2"):
            # "²".isdigit() is true and int() refuses it: the pid is read as the sizes are (_kib)
            if (path := _path(parts[3])) is not None and (pid := _kib(parts[1])) is not None:
                named.append((parts[0], pid, parts[2], path))
                chain = None if (parts[2], path) in levels else levels.setdefault((parts[2], path), [])
        elif len(parts) == 4 and parts[0] == "mem" and chain is not None and (path := _path(parts[1])):
            chain.append(Level(path, _kib(parts[2]), _kib(parts[3])))
        elif len(parts) == 4 and parts[0] == "events" and (path := _path(parts[1])) and path not in events:
            events[path] = (_kib(parts[2]), _kib(parts[3]))
    found = {
        (label, pid): Cgroup(version, path, tuple(levels.get((version, path), ())), *events.get(path, (None, None)))
        for label, pid, version, path in named
    }
    own = next((cg for (label, _), cg in found.items() if label == "self"), None)
    return Cgroups(own=own, by_pid={pid: cg for (label, pid), cg in found.items() if label == "proc"})
