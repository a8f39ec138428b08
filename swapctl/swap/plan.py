"""What a swap is planned from: the host's situation (read by the preflight) and the plan made of it.

Everything here is data and pure functions over the inspect script's output: tested without a host.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from ..facts.catalog import of_sections
from ..facts.journal_entry import JOURNAL, JournalEntry
from ..facts.releases import Release, now_iso, way_back, who_am_i
from ..facts.status import HostStatus
from . import elf
from .environ import carried


@dataclass(frozen=True)
class Daemon:
    """The daemon running now, as it must be restarted: exact argv, cwd, environment."""

    pid: int
    sha256: str
    size: int
    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...]
    unit: str | None  # its systemd unit, when it runs under one
    group_leader: bool
    rss_kib: int
    elapsed_s: int
    uid: int | None = None  # the user and group it runs as, started again as them
    gid: int | None = None
    dropped: tuple[tuple[str, str], ...] = ()  # (name, why) of its environment not carried over (environ.carried)

    @classmethod
    def started(cls, pid: int, unit: str | None = None) -> Daemon:
        """A daemon swapctl started itself (setsid, or its unit's ExecStart: it leads its process group)."""
        return cls(pid=pid, sha256="", size=0, argv=(), cwd="/", env=(), unit=unit or None, group_leader=True,
                   rss_kib=0, elapsed_s=0)


@dataclass(frozen=True)
class Backup:
    """A copy made before the stop: `source` (/proc/PID/exe, or the file at the binary path) as `release`.
    `or_file`: the binary path, where it holds the daemon's own build, to copy from once the daemon has
    exited by itself (its /proc/PID/exe gone) and the deploy goes on without it."""

    source: str
    release: Release
    or_file: str = ""

    def once_gone(self) -> Backup | None:
        """This copy once the daemon has exited by itself: from the binary path where it holds the daemon's
        build, none where only /proc/PID/exe did, the same for a plain file."""
        if not self.source.startswith("/proc/"):
            return self
        return replace(self, source=self.or_file, or_file="") if self.or_file else None


@dataclass(frozen=True)
class Partial:
    """An interrupted upload on the host: a later one resumes after its bytes."""

    path: str
    size: int


@dataclass(frozen=True, kw_only=True)
class Situation:
    """What runs on the host and what it has: the part of a plan that needs no new binary."""

    host: str
    status: HostStatus
    daemon: Daemon | None
    releases: dict[str, Release]
    current: str | None  # release id the binary path points at
    to_save: tuple[Backup, ...]  # backups made before the stop
    warnings: tuple[str, ...]
    history: tuple[str, ...] = ()  # release ids deploys put in place, oldest first
    journal: tuple[JournalEntry, ...] = ()  # the host's journal (its last entries), oldest first
    free_kib: int = 0
    host_zstd: bool = False  # the host can unpack zstd streams and patches
    partials: tuple[Partial, ...] = ()
    configs_checked: tuple[str, ...] = ()  # config files the inspect script looked for
    configs_missing: tuple[str, ...] = ()  # of those, the ones it did not find
    unit: str = ""  # the systemd unit the daemon is stopped, started and rolled back through ("": none)
    env_dropped: tuple[tuple[str, str], ...] = ()  # (name, why): of the environment to run, what is not carried

    @property
    def known(self) -> dict[str, Release]:
        """Releases on the host once the backups are made."""
        return {**self.releases, **{b.release.id: b.release for b in self.to_save}}

    @property
    def running(self) -> str | None:
        """The release id that runs now: the daemon's, else what the binary path points at."""
        return self.daemon.sha256[:12] if self.daemon else self.current

    def partial(self, path: str) -> int:
        return next((p.size for p in self.partials if p.path == path), 0)


@dataclass(frozen=True, kw_only=True)
class Plan(Situation):
    """A situation and the release to run: a rollback's plan (an earlier release)."""

    new: Release
    unchanged: bool = False
    commands: tuple[tuple[str, str], ...] = ()  # for --dry-run: what each step does, and its remote command
    # releases whose manifests hold no command line, as they start: the playbook's (preflight.with_commands)
    filled: tuple[Release, ...] = ()

    @classmethod
    def of(cls, sit: Situation, **more: Any) -> Any:
        return cls(**{f.name: getattr(sit, f.name) for f in fields(Situation)}, **more)

    @property
    def known(self) -> dict[str, Release]:
        """Releases on the host once the backups are made, each as it starts."""
        return {**super().known, **{r.id: r for r in self.filled}}

    @property
    def filled_ids(self) -> frozenset[str]:
        return frozenset(r.id for r in self.filled)

    def way_back(self) -> Release | None:
        """What a failed rollback goes back to: what ran before it, when that is a good release."""
        running = self.known.get(self.running or "")
        return running if running and running.status == "ok" and running.id != self.new.id else None

    def starts(self) -> tuple[Release, Release | None]:
        """The release the swap starts, and the one it goes back to if that start fails."""
        return self.new, self.way_back()


@dataclass(frozen=True)
class Base:
    """A release the host has and this machine has cached: the old side of a patch."""

    id: str
    remote_path: str
    local_path: Path


@dataclass(frozen=True)
class Method:
    """How the new release reaches the host, chosen once, in the plan (send.choose): nothing to send
    (present); a zstd patch against `base`, a release the host has (patch); a zstd stream (zstd), or SFTP
    where the host has no zstd (sftp), each resuming after the `offset` bytes an interrupted upload left."""

    kind: Literal["present", "patch", "zstd", "sftp"]
    base: Base | None = None
    offset: int = 0

    def said(self) -> str:
        """The method in a few words, for --dry-run."""
        if self.kind == "patch" and self.base:
            return f"a zstd patch against release {self.base.id} (zstd -d --patch-from={self.base.remote_path})"
        return {"present": "nothing: the host has the release", "zstd": "a zstd stream (zstd -d)",
                "sftp": "sftp put"}[self.kind]

    def resumed(self) -> str:
        """What --dry-run says after the upload's paths of one that goes on from an interrupted one."""
        return f" (resumed after {self.offset} bytes)" if self.offset else ""


@dataclass(frozen=True, kw_only=True)
class DeployPlan(Plan):
    """A deploy's plan: the local binary to upload as the new release, and how."""

    binary: elf.LocalBinary
    upload: Method  # chosen by send.choose in preflight.plan_deploy: no default that would skip the upload

    def way_back(self) -> Release | None:
        """What a failed start goes back to: what runs now, else the current release, else the last good one."""
        return way_back(self.known, self.running, self.new.id, list(self.history))


def cgroup_unit(text: str) -> str | None:
    """The systemd service a process runs under, from /proc/PID/cgroup (v1 or v2)."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = re.search(r"/([^/]+\.service)$", path)
        if m and not m.group(1).startswith(("user@", "session-")):
            return m.group(1)
    return None


def read_daemon(status: HostStatus, facts: dict[str, str], keep: tuple[str, ...] = ()) -> Daemon | None:
    """The running daemon as the status facts and the inspect script saw it; of its environment, what
    environ.carried keeps (`keep`: the loader variables the playbook lets through)."""
    if not status.daemons:
        return None
    p = status.daemons[0]

    def nul_split(b64: str) -> list[str]:
        raw = base64.b64decode(b64.strip() or b"")
        return [s.decode("utf-8", "surrogateescape") for s in raw.split(b"\0") if s]

    env, dropped = carried(((k, v) for k, sep, v in (item.partition("=") for item in
                                                    nul_split(facts.get("environ", ""))) if sep), keep)
    return Daemon(
        pid=p.pid, sha256=facts.get("exe_sha", "").strip(), size=int(facts.get("exe_size", "0").strip() or 0),
        argv=tuple(nul_split(facts.get("cmdline", ""))),
        cwd=facts.get("cwd", "").strip("\n").replace("\0", "\n") or "/", env=tuple(env),
        unit=cgroup_unit(facts.get("cgroup", "")),
        group_leader=facts.get("pgid", "").strip() == str(p.pid), rss_kib=p.rss_kib, elapsed_s=p.elapsed_s,
        uid=p.uid, gid=p.gid, dropped=dropped,
    )


def backups(binary_path: str, facts: dict[str, str], daemon: Daemon | None,
            releases: dict[str, Release]) -> tuple[Backup, ...]:
    """What to save before anything stops: the running daemon, and a plain file at the binary path."""
    name = PurePosixPath(binary_path).name
    kind, _, target = facts.get("binary", "missing").partition(" ")
    out = []
    def saved(sha: str) -> bool:  # the whole sha256: 12 hex digits only name the directory
        return sha[:12] in releases and releases[sha[:12]].sha256 == sha

    if daemon and not saved(daemon.sha256):
        out.append(Backup(f"/proc/{daemon.pid}/exe", Release(
            sha256=daemon.sha256, size=daemon.size, name=name, created=now_iso(), by=who_am_i(),
            argv=daemon.argv, cwd=daemon.cwd, env=daemon.env, source="adopted", uid=daemon.uid or None,
            gid=daemon.gid if daemon.uid else None), or_file=binary_path if kind == "file" and
            target == daemon.sha256 else ""))
    if kind == "file" and not saved(target) and (not daemon or target != daemon.sha256):
        out.append(Backup(binary_path, Release(sha256=target, size=0, name=name, created=now_iso(), by=who_am_i(),
                                               source="disk")))
    return tuple(out)


def warnings(status: HostStatus, daemon: Daemon | None) -> tuple[str, ...]:
    """What the person deploying should know: other people logged in, GPUs in trouble, other GPU users."""
    out = [f"{s.user} is logged in ({s.tty}, {s.source or 'local'}, {s.since})" for s in status.other_sessions]
    for g in status.gpus:
        if g.ecc_uncorrected:
            out.append(f"GPU {g.index} has {g.ecc_uncorrected} uncorrected ECC errors")
        if g.active_throttles:
            out.append(f"GPU {g.index} is throttled: {', '.join(g.active_throttles)}")
    daemon_pids = {daemon.pid} if daemon else set()
    out += [f"GPU process {app.pid} ({app.name}) is not the daemon" for app in status.gpu_processes
            if app.pid not in daemon_pids]
    if status.gpu_error:
        out.append(status.gpu_error)
    out += [f"pid {p.pid} (one thread, up {p.elapsed_s} s, rss {p.rss_kib // 1024} MiB) runs the binary but is a fork "
            f"a daemon left, not the daemon: its memory counts as in use until it exits" for p in status.leftovers]
    out += [f"pid {p.pid} (uid {p.uid}, runs {p.exe or 'an unknown program'}) matches daemon.match but is not the "
            f"daemon (not its binary or a release of it, or not its user): left alone" for p in status.not_daemons]
    return tuple(out)


def unit_for(status: HostStatus, daemon: Daemon | None, named: str | None, binary: str) -> str:
    """The unit the swap goes through: the playbook's `daemon.unit`; else the unit whose main process the
    daemon is (a daemon started by hand from an ssh session sits in ssh.service's cgroup on a host
    without pam_systemd, and is not that unit's); else, with no daemon running, the unit whose ExecStart
    runs the binary (crashed and waiting to restart, or stopped: a daemon started beside it would run next
    to the one its Restart= starts)."""
    if named:
        return named
    u = status.unit
    if not u or not u.found:
        return ""
    if daemon:
        return u.name if u.main_pid == daemon.pid else ""
    return u.name if u.exec_path == binary else ""


def read_situation(host: str, binary_path: str, status: HostStatus, facts: dict[str, str],
                   configs: tuple[str, ...], keep: tuple[str, ...] = (), named_unit: str | None = None,
                   journal_at: str = JOURNAL) -> Situation:
    """The situation from the status facts and the inspect script's sections (`configs`: the files it checked;
    `keep`: the loader variables the playbook lets through; `journal_at`: the journal's path, named in the
    warning about the lines it skipped). A daemon under a unit is recorded with the unit's Environment and
    WorkingDirectory (systemctl show): what the unit gives it, not what systemd adds (INVOCATION_ID...)."""
    catalog = of_sections(facts, f"{host}:{journal_at}")
    daemon = read_daemon(status, facts, keep)
    unit = unit_for(status, daemon, named_unit, binary_path)
    if daemon:
        daemon = replace(daemon, unit=unit or None)
        if unit and status.unit and status.unit.name == unit:
            daemon = replace(daemon, env=status.unit.environment, cwd=status.unit.working_directory or "/")
    free = (facts.get("free", "").split() or ["0"] * 4)
    partials = tuple(Partial(path, int(size)) for size, _, path in
                     (line.partition(" ") for line in facts.get("partial", "").splitlines()) if size.isdecimal())
    return Situation(host=host, status=status, daemon=daemon, releases=catalog.releases, current=catalog.current,
                     to_save=backups(binary_path, facts, daemon, catalog.releases),
                     warnings=(*warnings(status, daemon), *catalog.notes()),
                     history=catalog.deployed, journal=catalog.journal,
                     free_kib=int(free[3] if len(free) > 3 and free[3].isdecimal() else 0),
                     host_zstd=bool(facts.get("tools", "").strip()), partials=partials, configs_checked=configs,
                     configs_missing=tuple(facts.get("missing", "").splitlines()),
                     env_dropped=daemon.dropped if daemon else (), unit=unit)
