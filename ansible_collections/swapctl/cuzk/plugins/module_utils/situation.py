# What runs on this host and what it has: the daemon (by the daemon rule), its releases and journal.
from __future__ import annotations

import base64
import os
import pwd
import re
from collections.abc import Callable
from dataclasses import dataclass

from ansible_collections.swapctl.cuzk.plugins.module_utils.hostrun import run, who
from ansible_collections.swapctl.cuzk.plugins.module_utils.settings import HostError, Settings
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts import cordon, forks, journal_entry
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.daemon_rule import daemon_rule
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.journal_entry import (
    JOURNAL,
    JournalEntry,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.releases import (
    RELEASE_ID,
    Release,
    now_iso,
    parse_releases,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.sections import split_sections
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.host import scripts
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import environ

# -- what runs and what the host has ----------------------------------------------------------------------

@dataclass(frozen=True)
class Daemon:
    """The daemon running now, as it must be started again (swap.plan.Daemon's fields this side uses)."""

    pid: int
    sha256: str = ""
    size: int = 0
    argv: tuple[str, ...] = ()
    cwd: str = "/"
    env: tuple[tuple[str, str], ...] = ()
    group_leader: bool = True
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class Situation:
    daemon: Daemon | None
    releases: dict[str, Release]
    current: str | None  # the release the binary path points at
    journal: tuple[JournalEntry, ...]
    to_save: tuple[tuple[str, Release], ...]  # (source, release) to back up before the stop
    free_kib: int = 0
    configs_missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what to tell the user about the journal: the lines it skipped

    @property
    def saved(self) -> list[Release]:
        """The releases the backups make."""
        return [rel for _source, rel in self.to_save]

    @property
    def known(self) -> dict[str, Release]:
        return {**self.releases, **{r.id: r for r in self.saved}}

    @property
    def running(self) -> str | None:
        return self.daemon.sha256[:12] if self.daemon else self.current

    @property
    def history(self) -> list[str]:
        """Release ids deploys put in place, oldest first (facts.catalog.Catalog.deployed)."""
        return list(journal_entry.deployed(self.journal))


def _procs() -> dict[int, tuple[int, str, str, bool]]:
    """pid -> (ppid, state, command line, whether it is a fork a daemon left: forks.is_leftover) of every
    process."""
    out = {}
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime", encoding="ascii") as f:
        uptime = float(f.read().split()[0])
    for name in os.listdir("/proc"):
        if not name.isdecimal():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
            # stat's fields 9 (flags: PF_FORKNOEXEC 0x40), 20 (num_threads) and 22 (starttime, in ticks since
            # boot): proc(5)
            leftover = forks.is_leftover(int(fields[17]), uptime - int(fields[19]) / hz, bool(int(fields[6]) & 0x40))
        except (OSError, IndexError, ValueError):
            continue
        out[int(name)] = (int(fields[1]), fields[0], cmdline, leftover)
    return out


def _host_rule(s: Settings) -> Callable[[str | None, int | None], bool]:
    """daemon_rule with this host's facts: the binary's owner and real directory, daemon.user's ids."""
    try:
        owner: int | None = os.stat(s.binary).st_uid
    except OSError:
        owner = None
    user = user_ids(s.user) if s.user else None
    return daemon_rule(s.binary, os.path.realpath(os.path.dirname(s.binary) or "."), owner, user, bool(s.user))


def user_ids(user: str) -> tuple[int, int] | None:
    """daemon.user's uid and gid on this host (a name, else a uid, as `id -u --` reads it); None: no such user."""
    pw: pwd.struct_passwd | None
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        try:
            pw = pwd.getpwuid(int(user)) if user.isdecimal() else None
        except (KeyError, OverflowError):
            pw = None
    return (pw.pw_uid, pw.pw_gid) if pw else None


def _exe_and_uid(pid: int) -> tuple[str | None, int | None]:
    """/proc/PID/exe and the effective uid (as status.sh's links and ids sections read them)."""
    try:
        exe: str | None = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            uid = next((int(line.split()[2]) for line in f if line.startswith("Uid:")), None)
    except (OSError, ValueError, IndexError):
        uid = None
    return exe, uid


def find_daemon(s: Settings) -> int | None:
    """The daemon's pid: a process matching daemon.match (else the binary's name) that daemon_rule calls the
    daemon, topmost of its kind, not a fork a daemon left, not this module or its callers (as facts.status
    does)."""
    procs = _procs()
    mine, p = set(), os.getpid()
    while p in procs and p not in mine:
        mine.add(p)
        p = procs[p][0]
    regex = re.compile(s.match or s.binary.rsplit("/", 1)[-1])
    is_it = _host_rule(s)
    found = {pid for pid, (_parent, state, cmd, _left) in procs.items()
             if pid not in mine and not state.startswith("Z") and regex.search(cmd) and is_it(*_exe_and_uid(pid))}
    top = sorted(pid for pid in found if procs[pid][0] not in found and not procs[pid][3])
    if len(top) > 1:
        raise HostError(f"several processes match daemon.match {regex.pattern!r} (pids "
                        f"{', '.join(map(str, top))}); make `match` precise enough to find one daemon")
    return top[0] if top else None


def _ids(pid: int) -> tuple[int | None, int | None]:
    """Whom `pid` runs as (None, None: root)."""
    ids: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(("Uid:", "Gid:")):
                ids[line[:3]] = int(line.split()[1])
    return (ids.get("Uid"), ids.get("Gid")) if ids.get("Uid") else (None, None)


def _daemon(s: Settings, pid: int, facts: dict[str, str]) -> Daemon:
    def nul_split(b64: str) -> list[str]:
        raw = base64.b64decode(b64.strip() or b"")
        return [x.decode("utf-8", "surrogateescape") for x in raw.split(b"\0") if x]

    pairs = ((k, v) for k, sep, v in (i.partition("=") for i in nul_split(facts.get("environ", ""))) if sep)
    env = environ.carried(pairs, (*s.keep_loader_env, *dict(s.environment)))[0]
    uid, gid = _ids(pid)
    return Daemon(pid=pid, sha256=facts.get("exe_sha", "").strip(),
                  size=int(facts.get("exe_size", "0").strip() or 0), argv=tuple(nul_split(facts.get("cmdline", ""))),
                  cwd=facts.get("cwd", "").strip() or "/", env=tuple(env),
                  group_leader=facts.get("pgid", "").strip() == str(pid), uid=uid, gid=gid)


def situation(s: Settings, configs: tuple[str, ...] = (), again: bool = False) -> Situation:
    """What runs and what the host has: the daemon found, then inspect.sh (read only). A daemon that exited by
    itself in between is refused, or with daemon.gone_before_stop "deploy" looked for once more (preflight)."""
    pid = find_daemon(s)
    facts = split_sections(run(scripts.command("inspect.sh", *configs, pid=str(pid or ""), bin=s.binary,
                                               state=s.state, user=s.user)))
    if facts.get("gone", "").strip():
        if s.gone_before_stop != "deploy" or again:
            raise HostError(f"the daemon (pid {pid}) exited by itself before the stop; nothing changed: look at its "
                            f"log, or set daemon.gone_before_stop \"deploy\" to deploy anyway")
        return situation(s, configs, again=True)
    if s.user and user_ids(s.user) is None:
        raise HostError(f"daemon.user {s.user!r} is no user on the host (`id {s.user}` fails there); fix "
                        f"daemon.user; nothing changed")
    if bad := facts.get("unsafe", "").strip():
        raise HostError(f"state directory {bad.splitlines()[0]} (dir owner mode) may be written by others: make it "
                        f"root's and not group- or world-writable; nothing changed on the host")
    journal, skipped = journal_entry.read(facts.get("journal", ""))
    kind, target = (facts.get("binary", "missing") + " ").split(" ", 1)
    target = target.strip()
    current = target.rsplit("/", 2)[-2] if kind == "link" and target.count("/") >= 2 else None
    releases = parse_releases(facts.get("releases", ""))
    daemon = _daemon(s, pid, facts) if pid else None
    name = s.binary.rsplit("/", 1)[-1]

    def saved(sha: str) -> bool:
        return sha[:12] in releases and releases[sha[:12]].sha256 == sha

    to_save = []
    if daemon and daemon.sha256 and not saved(daemon.sha256):
        to_save.append((f"/proc/{daemon.pid}/exe", Release(
            sha256=daemon.sha256, size=daemon.size, name=name, created=now_iso(), by=f"ansible {who()}",
            argv=daemon.argv, cwd=daemon.cwd, env=daemon.env, source="adopted", uid=daemon.uid, gid=daemon.gid)))
    if kind == "file" and not saved(target) and (not daemon or target != daemon.sha256):
        to_save.append((s.binary, Release(sha256=target, size=0, name=name, created=now_iso(), by=f"ansible {who()}",
                                          source="disk")))
    free = facts.get("free", "").split()
    return Situation(daemon=daemon, releases=releases,
                     current=current if current and RELEASE_ID.fullmatch(current) else None,
                     journal=journal, to_save=tuple(to_save),
                     free_kib=int(free[3]) if len(free) > 3 and free[3].isdecimal() else 0,
                     configs_missing=tuple(facts.get("missing", "").splitlines()),
                     notes=(journal_entry.skipped_note(f"{s.host}:{s.state}/{JOURNAL}", skipped),) if skipped else ())


def cordon_view(s: Settings, lift: bool) -> cordon.CordonView:
    """Curio's cordon as this host sees it (uncordon.sh, one call, parsed as `swapctl status` parses it); with
    `lift`, a cordon swapctl left lifted first."""
    return cordon.parse(run(cordon.command_of(s.curio, s.state, lift), timeout=90))
