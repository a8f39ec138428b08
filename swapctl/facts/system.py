"""Pure parsers of ps, /proc, df and who output, as a Linux host prints them."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    pgid: int
    state: str
    cpu_pct: float
    rss_kib: int
    elapsed_s: int
    user: str
    args: str
    exe: str | None = None  # /proc/PID/exe; None where unreadable
    exe_deleted: bool = False  # the file it runs was replaced or deleted since it started
    cwd: str | None = None
    uid: int | None = None  # effective uid and gid, from /proc/PID/status (not the owner of /proc/PID, which
    gid: int | None = None  # a process that makes itself undumpable turns to root)
    threads: int | None = None  # from /proc/PID/status; None where unread
    age_s: float | None = None  # since it started, to the clock tick: read for one-thread processes only
    forked: bool | None = None  # a fork that never ran exec (PF_FORKNOEXEC): read for one-thread processes only


@dataclass(frozen=True)
class Memory:
    total_kib: int
    available_kib: int

    @property
    def available_gib(self) -> float:
        return self.available_kib / (1 << 20)


@dataclass(frozen=True)
class Disk:
    path: str
    filesystem: str
    size_kib: int
    avail_kib: int
    mount: str


@dataclass(frozen=True)
class Session:
    user: str
    tty: str
    since: str
    source: str
    pid: int | None = None  # for SSH connections seen in ps
    own: bool = False  # this very swapctl connection


PS_FORMAT = "pid=,ppid=,pgid=,stat=,pcpu=,rss=,etimes=,user=,args="


def parse_ps(text: str) -> list[Process]:
    """Parses `ps -ww -eo PS_FORMAT` (lines end at a newline only: an argv may hold U+2028 or \\x1c)."""
    procs = []
    for line in text.split("\n"):
        parts = line.split(None, 8)
        if len(parts) < 8 or not parts[0].isdecimal():
            continue
        procs.append(Process(
            pid=int(parts[0]), ppid=int(parts[1]), pgid=int(parts[2]), state=parts[3],
            cpu_pct=float(parts[4]), rss_kib=int(parts[5]), elapsed_s=int(parts[6]), user=parts[7],
            args=parts[8] if len(parts) > 8 else "",
        ))
    return procs


def parse_links(text: str) -> dict[int, dict[str, str]]:
    """Parses `find /proc/[0-9]*/exe /proc/[0-9]*/cwd -maxdepth 0 -printf '%p\\t%l\\0' | tr '\\n\\0' '\\0\\n'`:
    one entry a line, a newline in a target written as NUL (a plain `\\n` output, as recorded, parses too)."""
    links: dict[int, dict[str, str]] = {}
    for line in text.split("\n"):
        path, _, target = line.partition("\t")
        target = target.replace("\0", "\n")
        m = re.match(r"^/proc/(\d+)/(exe|cwd)$", path)
        if m and target:
            links.setdefault(int(m.group(1)), {})[m.group(2)] = target
    return links


def parse_ids(text: str) -> dict[int, tuple[int, int]]:
    """Parses `grep -s -E '^(Uid|Gid|Threads):' /proc/[0-9]*/status`: pid -> (effective uid, effective gid)."""
    found: dict[int, dict[str, int]] = {}
    for line in text.split("\n"):
        m = re.match(r"^/proc/(\d+)/status:(Uid|Gid):\s+\d+\s+(\d+)", line)
        if m:
            found.setdefault(int(m[1]), {})[m[2]] = int(m[3])
    return {pid: (v["Uid"], v["Gid"]) for pid, v in found.items() if "Uid" in v and "Gid" in v}


def parse_threads(text: str) -> dict[int, int]:
    """The same section's `Threads:` lines: pid -> its thread count (a host that did not send them: none)."""
    return {int(m[1]): int(m[2]) for m in re.finditer(r"^/proc/(\d+)/status:Threads:\s+(\d+)$", text, re.M)}


PF_FORKNOEXEC = 0x40  # in /proc/PID/stat's flags: forked and not yet exec'd (include/linux/sched.h)


def parse_starts(text: str) -> dict[int, tuple[float, bool]]:
    """Parses status.sh's `starts`: /proc/uptime's line, CLK_TCK, then `PID FLAGS STARTTIME` lines (flags as
    the kernel's PF_ word, the start in ticks after boot): pid -> (seconds since it started, whether it is a
    fork that never ran exec). Anything else, or a start after the uptime, is nothing."""
    lines = text.strip().split("\n")
    try:
        uptime, hz = float(lines[0].split()[0]), int(lines[1])
    except (IndexError, ValueError):
        return {}
    if hz <= 0:
        return {}
    found = {}
    for line in lines[2:]:
        m = re.fullmatch(r"(\d{1,9}) (\d{1,20}) (\d{1,20})", line)
        if m and int(m[3]) / hz <= uptime:
            found[int(m[1])] = (uptime - int(m[3]) / hz, bool(int(m[2]) & PF_FORKNOEXEC))
    return found


def with_links(procs: list[Process], links: dict[int, dict[str, str]],
               ids: dict[int, tuple[int, int]] | None = None, threads: dict[int, int] | None = None,
               starts: dict[int, tuple[float, bool]] | None = None) -> list[Process]:
    out = []
    for p in procs:
        link = links.get(p.pid, {})
        exe = link.get("exe")
        deleted = bool(exe and exe.endswith(" (deleted)"))
        if deleted:
            exe = exe[: -len(" (deleted)")]  # type: ignore[index]
        uid, gid = (ids or {}).get(p.pid, (None, None))
        age, forked = (starts or {}).get(p.pid, (None, None))
        out.append(Process(**{**p.__dict__, "exe": exe, "exe_deleted": deleted, "cwd": link.get("cwd"),
                              "uid": uid, "gid": gid, "threads": (threads or {}).get(p.pid), "age_s": age,
                              "forked": forked}))
    return out


def parse_meminfo(text: str) -> Memory:
    values = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+):\s+(\d+)", line)
        if m:
            values[m.group(1)] = int(m.group(2))
    return Memory(total_kib=values.get("MemTotal", 0), available_kib=values.get("MemAvailable", 0))


def parse_df(text: str) -> list[Disk]:
    """Parses `df -P -k PATH...`; the order of rows follows the paths."""
    disks = []
    for line in text.splitlines()[1:]:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[1].isdecimal():
            disks.append(Disk(path="", filesystem=parts[0], size_kib=int(parts[1]),
                              avail_kib=int(parts[3]), mount=parts[5]))
    return disks


def parse_who(text: str) -> list[Session]:
    """Parses `who`: user, line, login time (ISO or `Nov 30 04:04`, by locale), (from)."""
    sessions = []
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s+(\S+)\s+(.+?)(?:\s+\((.*)\))?\s*$", line)
        if m:
            sessions.append(Session(user=m[1], tty=m[2], since=m[3], source=m[4] or ""))
    return sessions


_SSHD_SESSION = re.compile(r"^sshd(?:-session)?: (\S+?)@(\S+)")


def ssh_sessions(procs: list[Process], own_pid: int) -> list[Session]:
    """SSH connections from sshd's process titles (`sshd: user@pts/1`); those without a tty miss `who`."""
    by_pid = {p.pid: p for p in procs}
    own, pid, seen = None, own_pid, set()
    while pid in by_pid and pid not in seen:  # walk up from the status script to its sshd
        seen.add(pid)
        if _SSHD_SESSION.match(by_pid[pid].args):
            own = pid
            break
        pid = by_pid[pid].ppid
    sessions = []
    for p in procs:
        m = _SSHD_SESSION.match(p.args)
        if m:
            sessions.append(Session(user=m[1], tty=m[2], since=f"{p.elapsed_s}s ago", source="ssh",
                                    pid=p.pid, own=p.pid == own))
    return sessions


def parse_loadavg(text: str) -> tuple[float, float, float]:
    parts = text.split()
    return (float(parts[0]), float(parts[1]), float(parts[2])) if len(parts) >= 3 else (0.0, 0.0, 0.0)


def descendants(procs: list[Process], pid: int) -> list[int]:
    """Every process below `pid` in the process tree."""
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
    out, stack = [], list(children.get(pid, []))
    while stack:
        child = stack.pop()
        out.append(child)
        stack.extend(children.get(child, []))
    return out
