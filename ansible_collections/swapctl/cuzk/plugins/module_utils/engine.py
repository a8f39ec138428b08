# The swap on the host itself, for the collection's modules: the steps `swapctl deploy` runs, in its order
# (lock, inspect, release, adopt, swap, prune), through swapctl's own host scripts and parsers, which
# scripts/build_collection.py ships beside this file (module_utils/swapctl/). The host's swap.sh rolls a
# failed start back and writes the journal line itself; this side reads its OUTCOME and JOURNAL. The swap
# script's inputs come from the swap core both sides call (swapctl/swap/inputs.py, with the playbook's own
# types, playbook/spec.py). What swapctl's controller side does in Python that cannot travel yet (it imports
# the playbook loader, paramiko) is still restated here (issue 46): the new release in new_release, the daemon
# rule, the fallback; docs/ansible.md lists which a test holds to the controller's.
from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import re
import select
import shlex
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts import forks
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.sections import split_sections
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.host import scripts, sh_texts
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.masking import MASK, looks_secret
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.playbook.spec import (
    DB_ENV,
    PROGRAM,
    TASK,
    CurioSpec,
    DaemonSpec,
    GpuSpec,
    MemorySpec,
    node_ok,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.remote.cmd import NAME, Cmd, Secret
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import (
    environ,
    journal_entry,
    report,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import inputs as core
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap.journal_entry import (
    JOURNAL,
    JournalEntry,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap.releases import (
    RELEASE_ID,
    Release,
    matching,
    now_iso,
    parse_releases,
    previous_good,
    releases_newest_first,
    rollback_target,
    to_prune,
)

scripts.TEXTS.update(sh_texts.TEXTS)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # as swap.preflight
PROOF_LOG = core.PROOF_PASSED  # cuzk's line for a proof it verified (engine.rs:529): status's proof_log


class HostError(Exception):
    """A step that did not go: the message says what state the host is in; `result` the module's fields."""

    def __init__(self, message: str, **result: Any):
        super().__init__(message)
        self.message, self.result = message, result


@dataclass(frozen=True)
class Settings:
    """The playbook's [daemon], [memory], [gpu] and [releases] as the modules take them (same names)."""

    binary: str
    log: str
    args: tuple[str, ...] | None = None
    match: str | None = None
    ready_log: str = "cuzk-daemon ready"
    ready_port: int | None = None
    ready_timeout_s: float = 600
    ready_stable_s: float = 0
    stop_grace_s: float = 30
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[tuple[str, str], ...] = ()  # name -> value, never logged (the module's no_log option)
    unit: str = ""
    keep_loader_env: tuple[str, ...] = ()
    min_available_gib: float = 0
    release_timeout_s: float = 900
    gpu_slack_mib: float = 1024
    nvidia_smi_timeout_s: float = 10
    keep_releases: int = 5
    status_url: str = ""  # the daemon's GET /status ("": none)
    stop: str = "term"
    drain_timeout_s: float = 300
    drain_timeout: str = "stop"
    ready: str = "log"
    lock_silence_s: float = 30
    gone_before_stop: str = "refuse"
    user: str = ""
    host: str = ""  # the name the journal gives the host (the inventory's)
    curio: CurioSpec = CurioSpec()  # the Curio nodes that feed this cuzk, which stop "cordon" cordons

    @classmethod
    def of(cls, params: dict[str, Any]) -> Settings:
        d = {k: v for k, v in (params.get("daemon") or {}).items() if v is not None}
        c = {k: v for k, v in (params.get("curio") or {}).items() if v is not None}
        for key in ("nodes", "tasks"):
            if key in c:
                c[key] = tuple(str(w) for w in c[key])
        c["env"] = tuple((str(k), str(v)) for k, v in (c.get("env") or {}).items())
        d["curio"] = CurioSpec(**c)
        for table in ("memory", "gpu"):
            d.update({k: v for k, v in (params.get(table) or {}).items() if v is not None})
        keep = (params.get("releases") or {}).get("keep")
        if keep is not None:
            d["keep_releases"] = keep
        for key in ("env", "secret_env"):
            d[key] = tuple((str(k), str(v)) for k, v in (d.get(key) or {}).items())
        for key in ("args", "keep_loader_env"):
            if key in d:
                d[key] = tuple(str(a) for a in d[key])
        if d.get("unit") and not d["unit"].endswith(".service"):
            d["unit"] += ".service"
        return cls(host=params.get("host") or socket.gethostname(), **d).checked()

    def checked(self) -> Settings:
        """Itself, once the keys that need each other agree (as the playbook loader holds them): a drain or a
        status probe reads the daemon's status_url, which must be an http:// URL."""
        if self.status_url and not re.fullmatch(r"http://[A-Za-z0-9.\-\[\]:]+(:\d+)?/\S*", self.status_url):
            raise HostError(f"daemon.status_url {self.status_url!r} is not an http:// URL (e.g. "
                            f"\"http://127.0.0.1:9821/status\", the daemon's status_listen); nothing changed")
        for key, needs in (("stop", "drain"), ("ready", "status")):
            if getattr(self, key) == needs and not self.status_url:
                raise HostError(f"daemon.{key} \"{needs}\" reads the daemon's own status: set daemon.status_url "
                                f"(cuzk's status_listen, e.g. \"http://127.0.0.1:9821/status\"); nothing changed")
        if not 5 <= self.lock_silence_s <= 3600 or self.drain_timeout_s <= 0:
            key = "lock_silence_s" if self.drain_timeout_s > 0 else "drain_timeout_s"
            raise HostError(f"daemon.{key} {getattr(self, key):g} is out of range (lock_silence_s: 5 to 3600 s; "
                            f"drain_timeout_s: more than 0 s); nothing changed")
        if problem := curio_problem(self.curio, self.stop):
            raise HostError(f"{problem}; nothing changed")
        return self

    def knobs(self) -> core.Knobs:
        """These settings as the swap core reads them (swapctl/swap/inputs.py): the playbook's own types."""
        daemon = DaemonSpec(
            binary=self.binary, args=self.args, match=self.match, log=self.log, ready_log=self.ready_log,
            ready_port=self.ready_port, ready_timeout_s=self.ready_timeout_s, ready_stable_s=self.ready_stable_s,
            stop_grace_s=self.stop_grace_s, status_url=self.status_url or None, stop=self.stop,
            drain_timeout_s=self.drain_timeout_s, drain_timeout=self.drain_timeout, ready=self.ready, cwd=self.cwd,
            env=self.env, secret_env=tuple(k for k, _ in self.secret_env), unit=self.unit or None,
            user=self.user or None, keep_loader_env=self.keep_loader_env, lock_silence_s=self.lock_silence_s,
            gone_before_stop=self.gone_before_stop)
        return core.Knobs(daemon, MemorySpec(self.min_available_gib, self.release_timeout_s, self.gpu_slack_mib),
                          GpuSpec(self.nvidia_smi_timeout_s), self.curio)

    @property
    def state(self) -> str:
        """Where releases, the journal and the lock live, as DaemonSpec.state_dir."""
        head, name = self.binary.rsplit("/", 1) if "/" in self.binary else ("", self.binary)
        return f"{head}/.swapctl/{name}"

    @property
    def environment(self) -> tuple[tuple[str, str], ...]:
        """daemon.env, then the secret ones."""
        return tuple({**dict(self.env), **dict(self.secret_env)}.items())

    def secret(self, name: str, value: str) -> bool:
        return name in dict(self.secret_env) or looks_secret(name, value)


def curio_problem(c: CurioSpec, stop: str) -> str:
    """What is wrong with the curio option, as the playbook loader says it of [curio] ("": nothing)."""
    if stop == "cordon" and not c.nodes:
        return ('daemon.stop "cordon" cordons the Curio nodes that feed the daemon: name them in curio.nodes '
                '(each node\'s `curio run --listen` host:port)')
    bad = [f"curio.nodes: {n!r} is not a node's host:port" for n in c.nodes if not node_ok(n)]
    bad += [f"curio.tasks: {t!r} is not a Curio task name" for t in c.tasks if not TASK.fullmatch(t)]
    bad += [f"curio.{k}: {getattr(c, k)!r} is not a program's name or absolute path" for k in ("cli", "sql")
            if not PROGRAM.fullmatch(getattr(c, k))]
    bad += [f"curio.env: {k!r} is not one of Curio's database variables" for k, _ in c.env if k not in DB_ENV]
    bad += [f"curio.{k}: must be more than 0 s" for k in ("poll_s", "max_cordon_s") if getattr(c, k) <= 0]
    bad += ["curio.post_wait_s: must be 0 s or more"] if c.post_wait_s < 0 else []
    bad += [f"curio.max_cordon_s: must be at least poll_s ({c.poll_s:g} s): a cordon shorter than one poll stops "
            f"nothing"] if c.nodes and 0 < c.max_cordon_s < c.poll_s else []
    return bad[0] if bad else ""


# -- running the host scripts ---------------------------------------------------------------------------

def argv(cmd: Cmd) -> list[str]:
    """`cmd` as the host's shell would exec it after parsing cmd.render(): the same argv, unquoted."""
    return [p.value if isinstance(p, Secret) else p for p in cmd.argv]


def run(cmd: Cmd, timeout: float = 300, check: bool = True) -> str:
    """Runs `cmd` with its named inputs on stdin; its stdout."""
    r = subprocess.run(argv(cmd), input=cmd.feed(), capture_output=True, timeout=timeout, check=False)
    if check and r.returncode != 0:
        raise HostError(f"{cmd} exited {r.returncode}: {r.stderr.decode(errors='replace').strip()[-600:]}")
    return r.stdout.decode("utf-8", "replace")


def stream(cmd: Cmd, line: Callable[[str], None], timeout: float) -> None:
    """Runs `cmd`, handing each line of its stdout to `line` as it comes, until it ends or `timeout` passes."""
    proc = subprocess.Popen(argv(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if proc.stdin is None or proc.stdout is None:
        raise HostError(f"{cmd.label}: no pipes to it")
    proc.stdin.write(cmd.feed())
    proc.stdin.close()
    deadline, buf, fd = time.monotonic() + timeout, b"", proc.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            raise HostError(f"{cmd.label} did not end within {timeout:g} s; the host may be mid-swap: look at its "
                            f"journal and the daemon before running again")
        ready = select.select([fd], [], [], left)[0]
        chunk = os.read(fd, 65536) if ready else b""
        if ready and not chunk:
            break
        buf += chunk
        *done, buf = buf.split(b"\n")
        for raw in done:
            line(raw.decode("utf-8", "replace"))
    if buf:
        line(buf.decode("utf-8", "replace"))
    proc.wait(timeout=max(1.0, deadline - time.monotonic()))


class Lock:
    """The host's deploy lock (lock.sh), held while this process keeps the script's stdin open."""

    def __init__(self, s: Settings):
        info = json.dumps({"by": f"ansible {who()}", "pid": os.getpid(), "since": now_iso()})
        cmd = scripts.command("lock.sh", dir=s.state, info=info, silence=int(s.lock_silence_s), user=s.user)
        self.proc = subprocess.Popen(argv(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        if self.proc.stdin is None or self.proc.stdout is None:
            raise HostError("lock.sh: no pipes to it")
        self.proc.stdin.write(cmd.feed())
        self.proc.stdin.flush()
        got = report.parse_lock(self.proc.stdout.readline().decode("utf-8", "replace").rstrip("\n"))
        if got.word is not report.Word.LOCKED:
            self.close()
            why = {report.Word.HELD: f"another deploy holds the host's lock ({got.detail})",
                   report.Word.SWAPPING: "a swap started by an earlier deploy still runs on the host",
                   report.Word.UNSAFE: f"state directory {got.detail} may be written by others: make it root's, "
                                       f"mode 700"}.get(got.word, f"the lock could not be taken ({got.detail})")
            raise HostError(f"{why}; nothing changed on the host")
        # lock.sh drops the lock after `silence` seconds without a byte (lock.Heartbeat): one every few
        self.done = threading.Event()
        self.beat = threading.Thread(target=self._beat, args=(min(2.0, s.lock_silence_s / 5),), daemon=True)
        self.beat.start()

    def _beat(self, every: float) -> None:
        while not self.done.wait(every):
            try:
                if self.proc.stdin is None:
                    return
                self.proc.stdin.write(b".")
                self.proc.stdin.flush()
            except (OSError, ValueError):  # the lock script ended, or close() closed its stdin
                return

    def close(self) -> None:
        done = getattr(self, "done", None)
        if done is not None:
            done.set()
            self.beat.join()
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def who() -> str:
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


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
        """Release ids deploys put in place, oldest first (swap.plan.Catalog.deployed)."""
        return list(journal_entry.deployed(self.journal))


def _procs() -> dict[int, tuple[int, str, str, bool]]:
    """pid -> (ppid, state, command line, whether it is a fork a daemon left: forks.is_leftover) of every
    process."""
    out = {}
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime", encoding="ascii") as f:
        uptime = float(f.read().split()[0])
    for name in os.listdir("/proc"):
        if not name.isdigit():
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


def daemon_rule(binary: str, binary_dir: str, owner: int | None, user: tuple[int, int] | None,
                has_user: bool) -> Callable[[str | None, int | None], bool]:
    """Whether a process that matches daemon.match, running `exe` as effective `uid`, is the daemon: the rule
    of facts.status._the_daemon, restated (that module imports the CLI's playbook types, which cannot travel;
    tests/test_ansible.py runs both over one table). It runs the binary's directory's file or a release of it,
    as daemon.user (`has_user`; `user` its ids on the host, None: nothing is the daemon), else as root or the
    binary's `owner`. `binary_dir`: the binary's directory with its links resolved."""
    name, parent = PurePosixPath(binary).name, str(PurePosixPath(binary).parent)
    dirs = {binary_dir or parent, parent}
    releases = tuple(f"{d}/.swapctl/{name}/releases/" for d in dirs)
    uids = ({user[0]} if user else set()) if has_user else {0} | ({owner} if owner is not None else set())

    def is_it(exe: str | None, uid: int | None) -> bool:
        if exe is None or "/.." in exe:
            return False
        return (str(PurePosixPath(exe).parent) in dirs or exe.startswith(releases)) and uid in uids

    return is_it


def _host_rule(s: Settings) -> Callable[[str | None, int | None], bool]:
    """daemon_rule with this host's facts: the binary's owner and real directory, daemon.user's ids."""
    try:
        owner: int | None = os.stat(s.binary).st_uid
    except OSError:
        owner = None
    user = _user_ids(s.user) if s.user else None
    return daemon_rule(s.binary, os.path.realpath(os.path.dirname(s.binary) or "."), owner, user, bool(s.user))


def _user_ids(user: str) -> tuple[int, int] | None:
    """daemon.user's uid and gid on this host (a name, else a uid, as `id -u --` reads it); None: no such user."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        try:
            pw = pwd.getpwuid(int(user)) if user.isdigit() else None
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
    if s.user and _user_ids(s.user) is None:
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
                     free_kib=int(free[3]) if len(free) > 3 and free[3].isdigit() else 0,
                     configs_missing=tuple(facts.get("missing", "").splitlines()),
                     notes=(journal_entry.skipped_note(f"{s.host}:{s.state}/{JOURNAL}", skipped),) if skipped else ())


def config_paths(args: tuple[str, ...]) -> tuple[str, ...]:
    """The config files a command line names (swap.plan.config_paths)."""
    out = []
    for i, a in enumerate(args):
        if a in ("-c", "--config") and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith("--config="):
            out.append(a.split("=", 1)[1])
    return tuple(out)


# -- the plan -----------------------------------------------------------------------------------------------

def new_release(s: Settings, sit: Situation, sha: str, size: int) -> Release:
    """The release a swap of the file with `sha` runs (preflight.new_release and env_for): the playbook's
    command line, else the running daemon's; its environment, carried over, then daemon.env."""
    base: Daemon | Release | None = sit.daemon or sit.releases.get(sit.current or "")
    args = s.args if s.args is not None else (tuple(base.argv[1:]) if base and base.argv else ())
    cwd = s.cwd or (base.cwd if base and base.cwd else os.path.dirname(s.binary))
    keep = (*s.keep_loader_env, *dict(s.environment))
    default = (("PATH", DEFAULT_PATH), ("HOME", "/root"))
    env = dict(environ.carried(base.env, keep)[0] if base and base.env else default)
    env.update(s.environment)
    uid, gid = run_as(s, base)
    new = Release(sha256=sha, size=size, name=s.binary.rsplit("/", 1)[-1], created=now_iso(), by=f"ansible {who()}",
                  argv=(s.binary, *args), cwd=cwd, env=tuple(env.items()), uid=uid, gid=gid)
    old = sit.releases.get(new.id)
    if old and old.sha256 == sha:  # deployed before: keep its record
        new = replace(old, argv=new.argv, cwd=new.cwd, env=new.env, status="ok", uid=uid, gid=gid)
    return new


def run_as(s: Settings, base: Daemon | Release | None) -> tuple[int | None, int | None]:
    """Who a new release runs as: daemon.user, else whom what it replaces ran as; (None, None): root
    (preflight.run_as)."""
    ids = _user_ids(s.user) if s.user else None
    uid, gid = ids if ids else ((base.uid, base.gid) if base else (None, None))
    return (uid, gid) if uid else (None, None)


def as_configured(s: Settings, rel: Release) -> Release:
    """`rel` as it starts: with its recorded command line; one with none on record (saved from the disk) as a
    deploy with these settings starts a build: daemon.args, daemon.cwd (else the binary's directory), the
    default environment then daemon.env. Never the bare binary in /."""
    if rel.argv is not None:
        return rel
    env = {"PATH": DEFAULT_PATH, "HOME": "/root", **dict(s.environment)}
    return replace(rel, argv=(s.binary, *(s.args or ())), cwd=s.cwd or os.path.dirname(s.binary) or "/",
                   env=tuple(env.items()))


def fallback(s: Settings, sit: Situation, new: Release) -> Release | None:
    """What a failed start goes back to (swap.plan.Plan.fallback), as it starts."""
    known = sit.known
    candidate = known.get(sit.running or "")
    if candidate is None or candidate.id == new.id or candidate.status != "ok":
        candidate = previous_good(known, new.id, sit.history)
    return as_configured(s, candidate) if candidate else None


def command_for(s: Settings, rel: Release) -> list[str]:
    """The command line a release runs with (swaprun.command_for)."""
    cmd = list(rel.argv or (s.binary, *(s.args or ())))
    if not (cmd[0] == s.binary and "=" not in cmd[0]):
        cmd = ["perl", "-e", scripts.PERL_ARGV0, rel.path(s.state), *cmd]
    if rel.uid:
        cmd = ["setpriv", f"--reuid={rel.uid}", f"--regid={rel.gid or 0}", "--init-groups", *cmd]
    return cmd


def env_block(rel: Release) -> Secret:
    """A release's environment as `K='v'` lines (swaprun.env_block): on stdin only."""
    for k in dict(rel.env or ()):
        if not NAME.fullmatch(k):
            raise HostError(f"{k!r} is not an environment variable name")
    return Secret("".join(f"{k}={shlex.quote(v)}\n" for k, v in rel.env or ()))


def swap_inputs(s: Settings, old: Daemon | None, target: Release, gpu_max: str, fb: Release | None,
                action: str = "deploy", steps: dict[str, float] | None = None) -> dict[str, Any]:
    """swap.sh's named inputs, from swapctl's own swap core (swap/inputs.py), as `swapctl deploy` gives them
    (swaprun.swap_cmd); what this side says in its own way: its journal line's `by` is "ansible user@host",
    it holds no swapctl deploy lock (Ansible's serial orders the hosts), a release with no recorded cwd runs
    in the binary's directory (as_configured). The host rolls back to `fb` itself and writes the journal."""
    k, home, sha = s.knobs(), os.path.dirname(s.binary) or "/", old.sha256 if old and old.sha256 else None
    fb_cmd = Cmd(*command_for(s, fb)).render() if fb is not None else ""
    return {**core.daemon_inputs(k, old.pid if old else None, bool(old and old.group_leader), target, gpu_max, home),
            "unit": s.unit, "reset": "", "lock_info": "",
            **core.fallback_inputs(k, fb, fb_cmd, home), **core.status_inputs(k.daemon, sha),
            **core.cordon_inputs(k, sha),
            **core.journal_inputs(action, f"ansible {who()}", s.host, sha, steps or {})}


def gpu_limits(s: Settings, pids: list[int]) -> str:
    """Per GPU, the most memory it may still use once the daemon's own is released (swaprun.gpu_limits)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""

    def query(what: str, fields: str) -> list[list[str]]:
        try:
            r = subprocess.run([smi, f"--query-{what}={fields}", "--format=csv,noheader,nounits"],
                               capture_output=True,
                               text=True, check=False, timeout=s.nvidia_smi_timeout_s)
        except subprocess.TimeoutExpired:
            return []
        return [[x.strip() for x in line.split(",")] for line in r.stdout.splitlines() if line.strip()]

    held: dict[str, float] = {}
    for pid, uuid, used in query("compute-apps", "pid,gpu_uuid,used_memory"):
        if pid.isdigit() and int(pid) in pids and used.replace(".", "").isdigit():
            held[uuid] = held.get(uuid, 0) + float(used)
    return ",".join(f"{i}:{int(float(used) - held.get(uuid, 0) + s.gpu_slack_mib)}"
                    for i, uuid, used in query("gpu", "index,uuid,memory.used") if used.replace(".", "").isdigit())


def shown_command(s: Settings, rel: Release | Daemon | None) -> str:
    """A command line and environment as --diff shows them: secrets as ***."""
    if rel is None:
        return "(no daemon)\n"
    env = "".join(f"  {k}={MASK if s.secret(k, v) else v}\n" for k, v in rel.env or ())
    return f"command: {' '.join(rel.argv or ())}\ncwd: {rel.cwd}\nenvironment:\n{env}"


# -- the steps ------------------------------------------------------------------------------------------------

def manifest(rel: Release) -> Secret:
    """A release's manifest as a script input: it carries the environment, secrets included (session.manifest)."""
    return Secret(rel.to_json())


def write_manifest(s: Settings, rel: Release) -> None:
    run(scripts.command("write_file.sh", path=f"{rel.dir(s.state)}/manifest.json", text=manifest(rel),
                        label="manifest"))


def sha256_of(path: str) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def install(s: Settings, src: str, rel: Release) -> None:
    """The file at `src` becomes release `rel` (install.sh: its sha256 checked again, renamed into place)."""
    tmp = f"{s.state}/releases/.ansible-{rel.id}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
        shutil.copyfileobj(f, out, 1 << 20)
    inputs = {"tmp": tmp, "dir": rel.dir(s.state), "name": rel.name, "sha": rel.sha256, "manifest": manifest(rel)}
    got = report.parse_install(run(scripts.command_of("install.sh", inputs)).splitlines())
    if not got.installed:
        raise HostError(f"{src} could not become release {rel.id} ({got.summary()}); nothing was stopped")
    if got.missing:
        raise HostError(f"release {rel.id} needs shared libraries the host lacks ({', '.join(got.missing)}); "
                        f"nothing was stopped: install them, or build against the host's")


def swap_once(s: Settings, old: Daemon | None, target: Release, gpu_max: str, fb: Release | None,
              action: str, old_sha: str | None, steps: dict[str, float]) -> report.SwapReport:
    """swap.sh: stop `old`, wait for memory, start `target`, wait for it to be ready, and when that fails go
    back to `fb`; the host journals how it ended. What it reported."""
    parser = report.SwapParser(time.monotonic())
    inputs = swap_inputs(s, old, target, gpu_max, fb, action, steps)
    inputs["j_from"] = old_sha or ""
    cmd = scripts.command_of("swap.sh", inputs, *command_for(s, target), bash=bool(s.ready_port))
    # the swap, then the host's own rollback: a stop, a memory wait and up to three starts (swaprun.swap)
    deadline = core.deadline_s(s.knobs())

    def line(text: str) -> None:
        parser.feed(text, time.monotonic())

    stream(cmd, line, deadline)
    got = parser.finish(time.monotonic())
    if got.failure.startswith("no tool: "):
        raise HostError(f"{got.failure.removeprefix('no tool: ')}; install it, then run again: nothing was stopped")
    if got.failure.startswith("another swap"):
        raise HostError(f"{got.failure}; this one stopped nothing")
    if got.release_changed:
        raise HostError(f"{got.failure.removeprefix('release changed: ')}; it is not the binary it was, so nothing "
                        f"was stopped and the daemon runs on")
    if got.drain_refused:
        raise HostError(f"{got.in_flight.summary() if got.in_flight else 'proofs in flight'} after the drain's "
                        f"{s.drain_timeout_s:g} s, and drain_timeout is \"refuse\": nothing was stopped")
    return got


def memory_error(s: Settings, got: report.SwapReport, **result: Any) -> HostError:
    r = got.reading
    avail = r.avail_kib / (1 << 20) if r else 0
    holders = ",".join(map(str, r.alive)) if r and r.alive else "none"
    return HostError(f"memory not back after {s.release_timeout_s:g} s: MemAvailable {avail:.1f} GiB (need "
                     f"{s.min_available_gib:g}), old processes still alive: {holders}; no daemon runs now", **result)


def swap_in(s: Settings, sit: Situation, target: Release, action: str, fb: Release | None,
            steps: dict[str, float]) -> dict[str, Any]:
    """Stops what runs, waits for memory, starts `target`; the host goes back to `fb` by itself when that
    fails and writes the journal line (rollback.swap_in): this side reads how it ended."""
    old_sha = sit.daemon.sha256 if sit.daemon else (fb.sha256 if fb else None)
    got = swap_once(s, sit.daemon, target, gpu_limits(s, [sit.daemon.pid] if sit.daemon else []), fb, action,
                    old_sha, steps)
    steps = {**steps, **got.steps}
    line = journal_entry.parse(got.journal) if got.journal else None  # the host's own line (JOURNAL)
    if not got.outcome:
        raise HostError(f"the swap script on the host ended without saying how the swap ended "
                        f"({got.failure or 'no outcome'}); look at the host's journal and the daemon before running "
                        f"again", steps=steps)
    if got.back_why:
        raise failed(s, target, fb, got, action, line, steps)
    if got.outcome == "no-daemon":  # before any start: the memory wait timed out
        raise memory_error(s, got, journal=shown(line), steps=steps)
    result = {"outcome": got.outcome, "pid": got.outcome_pid, "journal": shown(line), "steps": steps,
              "release": {"from": old_sha[:12] if old_sha else None, "to": target.id}}
    return {**result, "warnings": [unjournaled(s)]} if not got.journal_ok else result


def shown(line: JournalEntry | None) -> dict[str, Any] | None:
    """A journal line as the module's result holds it."""
    return line.to_dict() if line else None


def noted(sit: Situation, result: dict[str, Any]) -> dict[str, Any]:
    """`result` with what to tell the user about the host's journal among its warnings."""
    warnings = [*result.get("warnings", []), *sit.notes]
    return {**result, "warnings": warnings} if warnings else result


def unjournaled(s: Settings) -> str:
    return (f"the host could not write its journal line ({s.state}/journal.jsonl: is the disk full?); swapctl "
            f"history will not show this swap")


def failed(s: Settings, target: Release, fb: Release | None, got: report.SwapReport, action: str,
           line: JournalEntry | None, steps: dict[str, float]) -> HostError:
    """A start that failed, once the host has gone back by itself (rollback.failed): rolled_back when the
    fallback runs again after a deploy; otherwise the state the host is in."""
    why, pid = got.back_why, got.outcome_pid
    log = f"journalctl -u {s.unit}" if s.log == "journal" else f"{s.log} from byte {got.offset}"
    tail = run(scripts.command("tail.sh", path=s.log, offset=got.offset, lines=20, unit=s.unit, inv=got.invocation),
               check=False) if got.pid or s.unit else ""
    reason = (line.reason if line else None) or why
    note = "" if got.journal_ok else f" {unjournaled(s)}."
    back = fb.id if fb else "-"
    tries = f" (after {got.retries + 1} starts)" if got.retries else ""
    common = {"journal": shown(line), "steps": steps, "log_tail": tail, "pid": pid,
              "release": {"from": target.id, "to": fb.id if fb else None}}
    if got.outcome == "rolled-back":
        if action == "rollback":  # the host runs what it ran, but not what was asked for
            return HostError(f"the rollback to {target.id} failed ({why}); {back}, which ran before, runs again as "
                             f"pid {pid}{tries}. Failed log: {log}{note}", rolled_back=False, **common)
        return HostError(f"{target.id} failed ({why}); rolled back: {back} runs again as pid {pid}{tries}. Failed "
                         f"log: {log}{note}", rolled_back=True, **common)
    if fb is None:
        return HostError(f"{target.id} failed ({why}) and there is no earlier release to go back to: no daemon runs "
                         f"now; its log: {log}{note}", rolled_back=False, **common)
    if got.outcome == "rollback-failed" and pid:
        return HostError(f"{target.id} failed ({why}), and the rollback to {back} is not ready ({reason}); it runs "
                         f"as pid {pid}; logs: {log}{note}", rolled_back=False, **common)
    return HostError(f"{target.id} failed ({why}), and the rollback to {back} failed too ({reason}); no daemon runs "
                     f"now; logs: {log}{note}", rolled_back=False, **common)


def _timed(steps: dict[str, float], step: str, since: float) -> float:
    now = time.monotonic()
    steps[step] = round(now - since, 3)
    return now


def changing(s: Settings, sit: Situation, new: Release, action: str, fb: Release | None,
             src: str | None = None) -> dict[str, Any]:
    """Under the host's lock: the release (from `src`), the adoption of what runs, the swap, the journal."""
    steps: dict[str, float] = {}
    t = time.monotonic()
    lock = Lock(s)
    try:
        t = _timed(steps, "lock", t)
        if src and new.id not in sit.releases:
            install(s, src, new)
        elif action == "deploy":
            write_manifest(s, new)  # deployed before: its command line and environment as this deploy runs it
        t = _timed(steps, "release", t)
        for source, rel in sit.to_save:
            run(scripts.command_of("backup.sh", {"src": source, "dir": rel.dir(s.state), "name": rel.name,
                                                 "manifest": manifest(rel)}))
        recorded = {r.id for r in sit.known.values() if r.argv is not None}
        for rel in {r.id: r for r in (new, fb) if r and r.id in sit.known and r.id not in recorded}.values():
            write_manifest(s, rel)  # no command line on record: the one as_configured starts it with
        _timed(steps, "adopt", t)
        result = swap_in(s, sit, new, action, fb, steps)
        protect = {new.id} | ({fb.id} if fb else set())
        gone = to_prune({**sit.known, new.id: new}, s.keep_releases, protect)
        if gone:
            run(scripts.command("remove.sh", *[r.dir(s.state) for r in gone], state=s.state, label="prune"))
        return {**result, "pruned": [r.id for r in gone]}
    finally:
        lock.close()


def check_configs(sit: Situation, argv: tuple[str, ...], checked: tuple[str, ...]) -> None:
    paths = config_paths(argv[1:])
    missing = list(sit.configs_missing) if paths == checked else \
        run(scripts.command("check_files.sh", *paths, label="configs")).splitlines() if paths else []
    if missing:
        raise HostError(f"config file {missing[0]} named in the daemon's arguments is missing on the host (create "
                        f"it, or fix daemon.args); nothing changed")


def find_release(known: dict[str, Release], to: str) -> Release:
    """`to`: a sha256 prefix, or an index of `swapctl history` (1 = newest): releases.matching, swapctl's own."""
    found = matching(known, to)
    if len(found) != 1:
        raise HostError(f"release {to} {'matches several releases' if found else 'matches no release'} on the "
                        f"host; give a longer sha256 prefix")
    return found[0]


def deploy(s: Settings, src: str | None, sha256: str | None, release: str | None, restart: bool,
           check: bool) -> dict[str, Any]:
    """The swap module: the file at `src` (or release `release`) swapped in; in check mode, what it would do."""
    checked = config_paths(s.args) if s.args is not None else ()
    sit = situation(s, checked)
    warnings = []
    if src:
        sha, size = sha256_of(src) if os.path.exists(src) or not (check and sha256) else ("", 0)
        if sha256 and sha256.lower() != sha and check:
            # the copy before this task did not run either (check mode): src is missing, or still holds the build
            # an earlier run copied there; a real run checks the file it copies against sha256 before anything
            if sha:
                warnings.append(f"{src} holds sha256 {sha[:12]} now, not {sha256.lower()[:12]}: in check mode the "
                                f"copy before this task did not run; shown is the swap to {sha256.lower()[:12]}")
            sha, size = sha256.lower(), 0
        elif sha256 and sha256.lower() != sha:
            raise HostError(f"{src} has sha256 {sha}, not {sha256}: not the build meant; nothing changed")
        new = new_release(s, sit, sha, size)
    else:
        rel = find_release(sit.known, release or "")
        new = replace(rel, env=environ.carried(rel.env or (), s.keep_loader_env)[0]) if rel.env is not None else rel
        new = as_configured(s, new)
        size = 0
    check_configs(sit, new.argv or (), checked)
    unchanged = bool(sit.daemon and sit.daemon.sha256 == new.sha256 and not restart)
    result: dict[str, Any] = {"changed": not unchanged, "release": {"from": sit.running, "to": new.id},
                              "diff": {"before": shown_command(s, sit.daemon), "after": shown_command(s, new)},
                              "adopt": [r.id for r in sit.saved], "rolled_back": False}
    if warnings:
        result["warnings"] = warnings
    if unchanged:
        return noted(sit, {**result, "outcome": "unchanged", "msg": f"the daemon already runs {new.id}"})
    if check:
        return noted(sit, {**result, "outcome": "dry-run", "command": command_for(s, new)})
    needed = size * (1 if new.id in sit.releases else 2) // 1024 + 1024
    if src and sit.free_kib < needed:
        raise HostError(f"only {sit.free_kib // 1024} MiB free beside {s.binary}; the release and its backup need "
                        f"{needed // 1024} MiB; nothing changed")
    return noted(sit, {**result, **changing(s, sit, new, "deploy", fallback(s, sit, new), src)})


def rollback(s: Settings, to: str | None, check: bool) -> dict[str, Any]:
    """The rollback module: back to what ran before the current release (or `to`), started as recorded."""
    sit = situation(s)
    target = find_release(sit.known, to) if to else rollback_target(sit.known, sit.running, sit.journal,
                                                                    sit.history)
    if target is None:
        raise HostError("no earlier known-good release to roll back to (see the host's journal); nothing changed")
    if target.id == sit.running and sit.daemon:
        raise HostError(f"release {target.id} is the one running now; nothing changed")
    if target.env is not None:
        target = replace(target, env=environ.carried(target.env, (*s.keep_loader_env, *dict(s.env)))[0])
    target = as_configured(s, target)
    check_configs(sit, target.argv or (), ())
    running = sit.known.get(sit.running or "")
    fb = as_configured(s, running) if running and running.status == "ok" and running.id != target.id else None
    result: dict[str, Any] = {"changed": True, "release": {"from": sit.running, "to": target.id}, "rolled_back": False,
                              "diff": {"before": shown_command(s, sit.daemon), "after": shown_command(s, target)}}
    if check:
        return noted(sit, {**result, "outcome": "dry-run", "command": command_for(s, target)})
    return noted(sit, {**result, **changing(s, sit, target, "rollback", fb)})


# -- status ---------------------------------------------------------------------------------------------------

def _meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo", encoding="utf-8") as f:
        for line in f:
            key, rest = (line + ":").split(":", 1)
            if key in ("MemTotal", "MemAvailable"):
                out[key] = int(rest.split()[0])
    return {"total_kib": out.get("MemTotal", 0), "available_kib": out.get("MemAvailable", 0)}


def _gpus(s: Settings) -> tuple[list[dict[str, Any]], str]:
    """Each GPU nvidia-smi lists (bounded by gpu.nvidia_smi_timeout_s), and what went wrong asking."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return [], "no GPU tools (nvidia-smi) on the host"
    fields = ("index", "name", "uuid", "memory.used", "memory.total", "utilization.gpu", "temperature.gpu")
    try:
        r = subprocess.run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, check=False, timeout=s.nvidia_smi_timeout_s)
    except subprocess.TimeoutExpired:
        return [], f"nvidia-smi did not answer within {s.nvidia_smi_timeout_s:g} s"
    if r.returncode != 0:
        return [], f"nvidia-smi failed ({r.returncode}): {r.stderr.strip()[-200:]}"
    rows = [[x.strip() for x in line.split(",")] for line in r.stdout.splitlines() if line.strip()]
    return [dict(zip((f.replace(".", "_") for f in fields), row, strict=False)) for row in rows], ""


def _unit(name: str) -> dict[str, str]:
    if not name or not shutil.which("systemctl"):
        return {}
    r = subprocess.run(["systemctl", "show", "-p", "Id,LoadState,ActiveState,SubState,MainPID,ExecMainStatus",
                        "--", name], capture_output=True, text=True, check=False, timeout=30)
    return dict(line.partition("=")[::2] for line in r.stdout.splitlines() if "=" in line)


def _since(s: Settings, offset: int, proof_log: str) -> dict[str, Any]:
    """What the daemon's log holds after byte `offset` (its start): proofs made, timing lines written."""
    if s.log == "journal":
        return {}
    try:
        with open(s.log, "rb") as f:
            f.seek(offset)
            text = f.read(64 << 20).decode("utf-8", "replace")
    except OSError:
        return {"log_offset": offset, "proofs": 0, "timing_lines": 0}
    return {"log_offset": offset, "proofs": len(re.findall(re.escape(proof_log), text)),
            "timing_lines": sum(1 for line in text.splitlines() if "_TIMING" in line or "TIMELINE," in line)}


def _running(s: Settings, sit: Situation, proof_log: str) -> dict[str, Any] | None:
    d = sit.daemon
    if d is None:
        return None
    with open(f"/proc/{d.pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime", encoding="utf-8") as f:
        up = float(f.read().split()[0])
    tick = os.sysconf("SC_CLK_TCK")
    began = journal_entry.started(sit.journal, d.sha256[:12])  # this daemon's start: its pid is the one journaled
    return {"pid": d.pid, "release": d.sha256[:12], "sha256": d.sha256, "argv": list(d.argv), "cwd": d.cwd,
            "uid": d.uid or 0, "uptime_s": int(up - int(fields[19]) / tick),
            "rss_kib": int(fields[21]) * os.sysconf("SC_PAGE_SIZE") // 1024,
            "since_start": _since(s, began.offset, proof_log) if began and began.pid == d.pid else {}}


def status(s: Settings, proof_log: str = PROOF_LOG) -> dict[str, Any]:
    """The status module's result: the fact swapctl_status (the daemon and what its log holds since this
    release started, memory, GPUs, releases, unit, the journal's last line), and the journal's warnings."""
    sit = situation(s)
    gpus, gpu_error = _gpus(s)
    return noted(sit, {"changed": False, "ansible_facts": {"swapctl_status": {
        "daemon": _running(s, sit, proof_log), "memory": _meminfo(), "gpus": gpus, "gpu_error": gpu_error,
        "releases": [{"id": r.id, "status": r.status, "source": r.source, "created": r.created,
                      "current": r.id == sit.current, "running": r.id == sit.running}
                     for r in releases_newest_first(sit.releases)],
        "current": sit.current, "unit": _unit(s.unit), "journal": shown(sit.journal[-1] if sit.journal else None),
        "rollback_to": getattr(rollback_target(sit.known, sit.running, sit.journal, sit.history), "id", None),
    }}})
