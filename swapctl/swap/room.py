"""What the new daemon will find on the host, said in the plan before anything changes: the memory it will
really get (MemAvailable, and its cgroup's room once the old daemon is gone), whether cuzk's "auto" budget
overshoots that cgroup, and whether the daemon listens beyond the host. Warnings only: the memory wait
(host/swap/daemon.sh) is what holds the start back."""

from __future__ import annotations

from dataclasses import dataclass

from ..facts import exposure
from ..facts.cgroup import Cgroup
from ..facts.status import HostStatus

GIB = 1 << 20  # KiB


def size(kib: int) -> str:
    """A size as the plan says it: GiB from 1 GiB up, else MiB."""
    return f"{kib / GIB:.1f} GiB" if kib >= GIB else f"{kib / 1024:.0f} MiB"


@dataclass(frozen=True)
class Room:
    """The cgroup a daemon started now runs in, and what it leaves it (KiB)."""

    where: str  # the cgroup's path, and whose it is
    limit_kib: int
    in_use_kib: int | None  # in the cgroup now (None: not known, or a stopped unit's)
    freed_kib: int  # of that, about what the old daemon frees when it stops (its RSS)
    room_kib: int  # the limit less what stays in use once the old daemon is gone


def new_daemon_room(status: HostStatus, unit: str) -> Room | None:
    """Where a daemon started now runs: under `unit`, that unit's cgroup (the daemon's, while it runs; else its
    MemoryMax); else the cgroup of swapctl's own commands on the host, where a daemon the swap script starts
    stays (the old daemon's memory counts there only where that cgroup holds the old daemon's). None: no limit."""
    old = status.daemons[0] if status.daemons else None
    held = status.daemon_cgroup
    if unit:
        if held is None:
            limit = status.unit.memory_max_kib if status.unit and status.unit.name == unit else None
            return Room(f"unit {unit}'s (MemoryMax)", limit, None, 0, limit) if limit is not None else None
        target: Cgroup | None = held
        whose = f"unit {unit}'s, the daemon's now"
    else:
        target, whose = status.cgroups.own, "swapctl's own commands' on the host, where a daemon it starts stays"
    if target is None or target.limit_kib is None:
        return None
    # the old daemon's memory leaves the new one room only where a limited cgroup holds both
    holds = held is not None and held.version == target.version and any(
        lv.max_kib is not None and lv.holds(held.path) for lv in target.levels)
    freed = old.rss_kib if old and holds else 0
    room = target.room_kib(freed, held.path if held and holds else None)
    return Room(f"{target.path} ({target.version}; {whose})", target.limit_kib, target.current_kib,
                freed, room if room is not None else target.limit_kib)


def warnings(status: HostStatus, unit: str, min_available_gib: float) -> tuple[str, ...]:
    """Every line this module adds to the plan."""
    return (*memory_warnings(status, unit, min_available_gib), *listen_warnings(status))


def memory_warnings(status: HostStatus, unit: str, min_available_gib: float) -> tuple[str, ...]:
    """The plan's lines on memory where a cgroup limit holds the new daemon: both numbers, and whether the
    memory wait can end."""
    room = new_daemon_room(status, unit)
    if room is None:
        return ()
    avail = status.memory.available_kib
    in_use = f", {size(room.in_use_kib)} in use" if room.in_use_kib is not None else ""
    freed = f" once the old daemon's {size(room.freed_kib)} is freed" if room.freed_kib else ""
    said = (f"memory: the new daemon runs in cgroup {room.where}, limit {size(room.limit_kib)}{in_use}: "
            f"it gets the least of MemAvailable ({size(avail)} now) and the cgroup's room "
            f"({size(room.room_kib)}{freed}); the memory wait waits for that to reach "
            f"{min_available_gib:g} GiB (memory.min_available_gib)")
    if room.room_kib < min_available_gib * GIB:
        said += (": it never will, and the swap would stop the daemon, then fail: raise the cgroup's limit "
                 "(the container's, or the unit's MemoryMax=) or lower memory.min_available_gib")
    return (said, *budget_warnings(status, unit, room))


def budget_warnings(status: HostStatus, unit: str, room: Room) -> tuple[str, ...]:
    """cuzk's `total_budget = "auto"` (its default, or none) is MemTotal less a margin (cuzk-core/src/config.rs:87,
    :101-102 and memory.rs:83-91 at curio e0294b0f): under a cgroup limit below MemTotal it plans for memory it
    will never get."""
    config = new_daemon_config(status)
    total = status.memory.total_kib
    if config is None or not config.budget_auto or not total or room.limit_kib >= total:
        return ()
    says = (f'total_budget = "{config.total_budget}"' if config.total_budget is not None else
            "no total_budget" if config.found else "nothing (the file is missing: cuzk's defaults)")
    fit = room.limit_kib * 85 // 100
    return (f"{config.path} says {says} under [memory]: cuzk then budgets from MemTotal "
            f"({size(total)}; cuzk-core/src/memory.rs:83-91) and never reads its cgroup, whose limit is "
            f"{size(room.limit_kib)}: it will be OOM-killed when its proofs fill what it thinks it has; set "
            f'[memory] total_budget below that (e.g. "{fit // 1024}MiB", its 85%)',)


def new_daemon_config(status: HostStatus) -> exposure.DaemonConfig | None:
    """The config the new daemon reads: the playbook's (daemon.args), else the running daemon's."""
    return status.config_of(None) or (status.config_of(status.daemons[0].pid) if status.daemons else None)


def listen_warnings(status: HostStatus) -> tuple[str, ...]:
    """A daemon that listens beyond the host: its sockets, else (none runs) what its config says."""
    if status.daemons:
        addresses = [s.address for s in status.daemon_listening if s.public]
    else:
        config = status.config_of(None)
        addresses = [a for a in (exposure.listen_of((), config), config.status_listen if config else None)
                     if a and config and exposure.is_public(a)]
    return tuple(exposure.why_public(a) for a in dict.fromkeys(addresses))
