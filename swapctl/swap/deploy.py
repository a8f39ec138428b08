"""The safe swap: preflight, lock, upload, backup, stop, wait for memory, start, readiness, rollback.

The core never prints: it reports `Event`s to a callback and returns an `Outcome`, or raises a
SwapctlError whose exit code says what state the host is in.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath

from ..errors import BadInput, LockHeld, Refused, RemoteTimeout, RolledBack, SwapctlError, UnknownState, Unreachable
from ..facts.status import HostStatus, gather, split_sections
from ..playbook import Playbook
from ..remote import Cmd, Host, Piece, Prepared, Result, Secret
from . import elf, scripts, upload
from .releases import (
    Release,
    now_iso,
    parse_releases,
    previous_good,
    record_local,
    releases_newest_first,
    to_prune,
    who_am_i,
)
from .report import SwapParser, SwapReport, Word, parse_lock, parse_swap

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONFIG_FLAGS = ("-c", "--config")


@dataclass(frozen=True)
class Event:
    step: str  # preflight, lock, upload, backup, stop, memory, start, ready, rollback, done
    message: str = ""
    done: int | None = None  # bytes, for the upload
    total: int | None = None
    wire: int | None = None  # bytes the upload put on the wire so far
    log_line: str | None = None  # a line of the daemon's log, while waiting for it


EventSink = Callable[[Event], None]


class Interrupts:
    """Ctrl-C presses, counted by the CLI's signal handler and read by the swap between steps."""

    def __init__(self) -> None:
        self.count = 0
        self.critical = False  # set once the old daemon is being stopped: from then on, finish the swap

    def press(self) -> None:
        """Before the stop, Ctrl-C aborts at once (nothing changed); after it, it is counted."""
        self.count += 1
        if not self.critical:
            raise KeyboardInterrupt


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


@dataclass(frozen=True)
class Plan:
    host: str
    binary: elf.LocalBinary | None  # the local file to upload; None for a rollback
    status: HostStatus
    daemon: Daemon | None
    releases: dict[str, Release]
    current: str | None  # release id the binary path points at
    new: Release | None  # the release to run
    to_save: tuple[tuple[str, Release], ...]  # (source path, release): backups made before the stop
    warnings: tuple[str, ...]
    unchanged: bool
    history: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    free_kib: int = 0
    host_zstd: bool = False  # the host can unpack zstd streams and patches
    partials: tuple[tuple[str, int], ...] = ()  # (path, bytes) of interrupted uploads on the host

    @property
    def known(self) -> dict[str, Release]:
        """Releases on the host once the backups are made."""
        return {**self.releases, **{r.id: r for _, r in self.to_save}}

    def fallback(self) -> Release | None:
        """What a failed start goes back to: what runs now, else the current release, else the last good one."""
        known = self.known
        rid = self.daemon.sha256[:12] if self.daemon else self.current
        candidate = known.get(rid or "")
        if candidate is None or candidate.id == self.new.id or candidate.status != "ok":
            candidate = previous_good(known, self.new.id, list(self.history))
        return candidate


@dataclass
class Outcome:
    host: str
    action: str
    outcome: str  # deployed | unchanged | rolled-back | failed
    old_sha: str | None
    new_sha: str | None
    steps: dict[str, float] = field(default_factory=dict)  # seconds per step
    upload_mb_s: float | None = None
    upload: dict | None = None  # how the binary got there (upload.Sent.record())
    log_offset: int | None = None  # where the started daemon's output begins in its log
    pid: int | None = None
    message: str = ""


def _manifest(rel: Release) -> Secret:
    """A release's manifest as a script argument: it carries the daemon's environment, secrets included,
    so it reaches the host but never an error message or a terminal."""
    return Secret(rel.to_json())


def deployed_releases(journal: list[dict]) -> list[str]:
    """Release ids that deploys put in place, oldest first."""
    return [e["current"] for e in journal
            if e.get("action") == "deploy" and e.get("outcome") == "deployed" and e.get("current")]


def _cgroup_unit(text: str) -> str | None:
    """The systemd service a process runs under, from /proc/PID/cgroup (v1 or v2)."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = re.search(r"/([^/]+\.service)$", path)
        if m and not m.group(1).startswith(("user@", "session-")):
            return m.group(1)
    return None


def _config_paths(argv: tuple[str, ...]) -> list[str]:
    paths = []
    for i, arg in enumerate(argv):
        if arg in CONFIG_FLAGS and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif arg.startswith("--config="):
            paths.append(arg.split("=", 1)[1])
    return paths


class Swap:
    """One host's swap. Reuse it for the steps of a deploy, a rollback, or both."""

    def __init__(self, host: Host, book: Playbook, events: EventSink | None = None,
                 interrupts: Interrupts | None = None):
        self.host, self.book = host, book
        self.daemon_spec = book.require_daemon()
        self.state = self.daemon_spec.state_dir
        self.events = events or (lambda e: None)
        self.interrupts = interrupts or Interrupts()
        self.steps: dict[str, float] = {}
        self.sent: upload.Sent | None = None  # how this deploy's binary reached the host
        self._lock = None
        # what the upload sends, started during the preflight: a patch, or the first zstd frames
        self._patch: upload.Patch | None = None
        self._frames: upload.Frames | None = None
        self._ready: Prepared | None = None  # the upload's host side, started before the lock
        self._configs_missing: tuple[tuple[str, ...], list[str]] = ((), [])  # checked by INSPECT, and missing

    # -- small helpers ----------------------------------------------------------------------------

    def emit(self, step: str, message: str = "", **kw) -> None:
        self.events(Event(step, message, **kw))

    def run(self, cmd: Cmd, *, check: bool = True) -> Result:
        return self.host.run(cmd, check=check)

    def timed(self, step: str, started: float) -> None:
        self.steps[step] = round(time.monotonic() - started, 3)

    # -- preflight --------------------------------------------------------------------------------

    def inspect(self) -> tuple[HostStatus, dict[str, str]]:
        status = gather(self.host, self.daemon_spec)
        if status.swapping:  # mid-swap, what runs (or lingers) is not what a plan can be made from
            raise self._swapping()
        if len(status.daemons) > 1:
            pids = ", ".join(str(p.pid) for p in status.daemons)
            raise Refused(f"several processes match daemon.match {self.daemon_spec.match_regex.pattern!r} "
                          f"(pids {pids}); make `match` precise enough to find one daemon", host=self.host.name)
        pid = str(status.daemons[0].pid) if status.daemons else ""
        # with args in the playbook the config files are known now: checked here, not in a command of their own
        configs = _config_paths(self.daemon_spec.args) if self.daemon_spec.args is not None else []
        out = self.run(scripts.command("inspect.sh", *configs, pid=pid, bin=self.daemon_spec.binary,
                                       state=self.state)).stdout
        facts = split_sections(out)
        self._configs_missing = (tuple(configs), facts.get("missing", "").splitlines())
        return status, facts

    def _running(self, status: HostStatus, facts: dict[str, str]) -> Daemon | None:
        if not status.daemons:
            return None
        p = status.daemons[0]

        def nul_split(b64: str) -> list[str]:
            raw = base64.b64decode(b64.strip() or b"")
            return [s.decode("utf-8", "surrogateescape") for s in raw.split(b"\0") if s]

        env = []
        for item in nul_split(facts.get("environ", "")):
            k, sep, v = item.partition("=")
            if sep:
                env.append((k, v))
        return Daemon(
            pid=p.pid, sha256=facts.get("exe_sha", "").strip(), size=int(facts.get("exe_size", "0").strip() or 0),
            argv=tuple(nul_split(facts.get("cmdline", ""))),
            cwd=facts.get("cwd", "").strip() or "/", env=tuple(env), unit=_cgroup_unit(facts.get("cgroup", "")),
            group_leader=facts.get("pgid", "").strip() == str(p.pid), rss_kib=p.rss_kib, elapsed_s=p.elapsed_s,
        )

    def catalog(self, facts: dict[str, str] | None = None) -> tuple[dict[str, Release], str | None, list[dict]]:
        """The host's releases, the one the binary path points at, and its journal: from INSPECT's output
        (run here without a daemon pid when `facts` is not given)."""
        if facts is None:
            facts = split_sections(self.run(scripts.command("inspect.sh", pid="", bin=self.daemon_spec.binary,
                                                            state=self.state)).stdout)
        kind, _, target = facts.get("binary", "missing").partition(" ")
        current = PurePosixPath(target).parent.name if kind == "link" else None
        journal = []
        for line in facts.get("journal", "").splitlines():
            try:
                journal.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a full disk or a killed swapctl
        return parse_releases(facts.get("releases", "")), current, journal

    def env_for(self, base: tuple[tuple[str, str], ...] | None) -> tuple[tuple[str, str], ...]:
        env = dict(base or (("PATH", DEFAULT_PATH), ("HOME", "/root")))
        env.update(self.daemon_spec.env)
        return tuple(env.items())

    def situation(self) -> Plan:
        """What runs on the host and what it has: the part of a plan that needs no new binary."""
        self.emit("preflight", "checking the host")
        status, facts = self.inspect()
        if status.gpu_error and status.gpu_error.startswith("nvidia-smi failed"):
            # e.g. a driver upgraded without a reboot: the running daemon still works, a new process would
            # not, and neither would the old one started again. Stopping it would leave the GPU idle.
            raise Refused(f"{status.gpu_error}; a daemon started now could not use the GPU, so the running "
                          f"one is left alone: fix the driver (often a reboot after a driver upgrade) first",
                          host=self.host.name)
        releases, current, journal = self.catalog(facts)
        kind, _, target = facts.get("binary", "missing").partition(" ")
        daemon = self._running(status, facts)
        name = PurePosixPath(self.daemon_spec.binary).name

        # Backups, made before anything stops: the running daemon, and a plain file at the binary path.
        to_save: list[tuple[str, Release]] = []
        if daemon and daemon.sha256[:12] not in releases:
            to_save.append((f"/proc/{daemon.pid}/exe", Release(
                sha256=daemon.sha256, size=daemon.size, name=name, created=now_iso(), by=who_am_i(),
                argv=daemon.argv, cwd=daemon.cwd, env=daemon.env, source="adopted")))
        if kind == "file" and target[:12] not in releases and (not daemon or target != daemon.sha256):
            to_save.append((self.daemon_spec.binary, Release(sha256=target, size=0, name=name, created=now_iso(),
                                                             by=who_am_i(), source="disk")))
        free_kib = int((facts.get("free", "").split() or ["0"] * 4)[3] or 0)
        partials = tuple((path, int(size)) for size, _, path in
                         (line.partition(" ") for line in facts.get("partial", "").splitlines()) if size.isdigit())
        return Plan(host=self.host.name, binary=None, status=status, daemon=daemon, releases=releases,
                    current=current, new=None, to_save=tuple(to_save), warnings=tuple(self._warnings(status, daemon)),
                    unchanged=False, history=tuple(deployed_releases(journal)), free_kib=free_kib,
                    host_zstd=bool(facts.get("tools", "").strip()), partials=partials)

    def _warnings(self, status: HostStatus, daemon: Daemon | None) -> list[str]:
        warnings = []
        for s in status.other_sessions:
            warnings.append(f"{s.user} is logged in ({s.tty}, {s.source or 'local'}, {s.since})")
        for g in status.gpus:
            if g.ecc_uncorrected:
                warnings.append(f"GPU {g.index} has {g.ecc_uncorrected} uncorrected ECC errors")
            if g.active_throttles:
                warnings.append(f"GPU {g.index} is throttled: {', '.join(g.active_throttles)}")
        daemon_pids = {daemon.pid} if daemon else set()
        for app in status.gpu_processes:
            if app.pid not in daemon_pids:
                warnings.append(f"GPU process {app.pid} ({app.name}) is not the daemon")
        if status.gpu_error:
            warnings.append(status.gpu_error)
        return warnings

    def _check_configs(self, argv: tuple[str, ...]) -> None:
        paths = _config_paths(argv)
        if not paths:
            return
        checked, missing = self._configs_missing
        if tuple(paths) != checked:  # the arguments came from the running daemon: check its files now
            missing = self.run(scripts.command("check_files.sh", *paths, label="configs")).stdout.splitlines()
        if missing:
            raise BadInput(f"config file {missing[0]} named in the daemon's arguments is missing on the host "
                           f"(create it, or fix daemon.args)", host=self.host.name)

    def plan(self, binary_path: str, restart: bool = False, build: dict | None = None) -> Plan:
        """Everything a deploy checks before anything changes; raises BadInput or Refused."""
        binary = elf.inspect(binary_path)
        sit = self.situation()
        elf.check_arch(binary, sit.status.arch, self.host.name)
        spec, releases, daemon = self.daemon_spec, sit.releases, sit.daemon
        if binary.sha256[:12] not in releases and sit.host_zstd and not (daemon and daemon.sha256 == binary.sha256):
            self.start_upload(sit, binary.path, self.upload_path(binary.sha256[:12]))
        base = daemon or releases.get(sit.current or "")
        args = spec.args if spec.args is not None else (tuple(base.argv[1:]) if base and base.argv else ())
        cwd = spec.cwd or (base.cwd if base and base.cwd else str(PurePosixPath(spec.binary).parent))
        new = Release(
            sha256=binary.sha256, size=binary.size, name=PurePosixPath(spec.binary).name, created=now_iso(),
            by=who_am_i(), argv=(spec.binary, *args), cwd=cwd, env=self.env_for(base.env if base else None),
            build=build)
        if new.id in releases:  # deployed before: keep its record, take the new command line
            new = replace(releases[new.id], argv=new.argv, cwd=new.cwd, env=new.env, status="ok",
                          build=build or releases[new.id].build)
        needed = binary.size * (1 if new.id in releases else 2) // 1024 + 1024
        if sit.free_kib < needed:
            raise Refused(f"only {sit.free_kib // 1024} MiB free beside {spec.binary}; the upload and backup need "
                          f"{needed // 1024} MiB (free some space)", host=self.host.name)
        self._check_configs(new.argv)
        unchanged = bool(daemon and daemon.sha256 == binary.sha256 and not restart)
        plan = replace(sit, binary=binary, new=new, unchanged=unchanged)
        return replace(plan, commands=tuple(self.describe(plan)))

    def plan_rollback(self, to: str | None = None) -> Plan:
        """A plan whose new release is an earlier one: `to` (a sha256 prefix or a history index) or the
        last known-good release before the one running now."""
        sit = self.situation()
        running = sit.daemon.sha256[:12] if sit.daemon else sit.current
        known = sit.known
        if to:
            target = self._find_release(known, to)
        else:
            target = previous_good(known, running, list(sit.history))
            if target is None:
                raise Refused("no earlier known-good release to roll back to (see `swapctl history`)",
                              host=self.host.name)
        if target.id == running and sit.daemon:
            raise BadInput(f"release {target.id} is the one running now; pick another with --to", host=self.host.name)
        if target.argv:
            self._check_configs(target.argv)
        plan = replace(sit, new=target)
        return replace(plan, commands=tuple(self.describe(plan)))

    def _find_release(self, known: dict[str, Release], to: str) -> Release:
        ordered = releases_newest_first(known)
        if to.isdigit() and len(to) <= 3 and 1 <= int(to) <= len(ordered):
            return ordered[int(to) - 1]
        found = [r for r in ordered if r.sha256.startswith(to.lower())]
        if len(found) == 1:
            return found[0]
        what = "matches several releases" if found else "matches no release"
        raise BadInput(f"--to {to} {what}; give a longer sha256 prefix or an index from `swapctl history`",
                       host=self.host.name)

    def describe(self, plan: Plan) -> list[str]:
        """The remote commands a deploy would run, for --dry-run."""
        new, st, spec = plan.new, self.state, self.daemon_spec
        cmds = [f"flock -n {st}/lock (held for the whole deploy)"]
        if plan.binary and new.id not in plan.releases:
            tmp, base = self.upload_path(plan.new.id), self.patch_base(plan)
            cmds.append(f"zstd -d --patch-from={base.remote_path} >> {tmp}  # a patch against release {base.id}"
                        if base and plan.host_zstd else f"zstd -d >> {tmp}  # a zstd stream" if plan.host_zstd
                        else f"sftp put {plan.binary.path} {tmp}")
            cmds += [f"sha256sum {tmp}  # must be {new.sha256}", f"mv {tmp} {new.path(st)}", f"ldd {new.path(st)}"]
        for src, rel in plan.to_save:
            cmds.append(f"cp {src} {rel.path(st)}  # backup ({rel.source})")
        if plan.daemon:
            d = plan.daemon
            cmds.append(f"systemctl stop {d.unit}" if d.unit else
                        f"kill -TERM {'-' if d.group_leader else ''}{d.pid}; after {spec.stop_grace_s:g} s: kill -KILL")
        cmds.append(f"wait until pids gone and MemAvailable >= {self.book.memory.min_available_gib:g} GiB "
                    f"(at most {self.book.memory.release_timeout_s:g} s)")
        cmds.append(f"ln -sfn {new.path(st)} {spec.binary}.swapctl-new && "
                    f"mv -Tf {spec.binary}.swapctl-new {spec.binary}")
        env = " ".join(f"{k}=***" if k in spec.secret_env else f"{k}={v}" for k, v in new.env or ())
        cmds.append(f"cd {new.cwd} && setsid env -i {env} {' '.join(new.argv or ())} >> {spec.log} 2>&1 &")
        cmds.append(f"wait for /{spec.ready_log}/ in {spec.log} (at most {spec.ready_timeout_s:g} s)")
        cmds.append(f"append a line to {st}/journal.jsonl")
        return cmds

    # -- the steps --------------------------------------------------------------------------------

    def lock(self) -> None:
        self.emit("lock", "taking the host's deploy lock")
        info = json.dumps({"by": who_am_i(), "since": now_iso(), "pid": os.getpid()})
        held = self.host.hold(scripts.command("lock.sh", dir=self.state, info=info))
        said = parse_lock(held.first_line)
        if said.word is Word.SWAPPING:
            held.close()
            raise self._swapping()
        if said.word in (Word.FAILED, None):
            held.close()
            why = said.detail or "the lock script ended without a word"
            raise Refused(f"cannot take the deploy lock in {self.state}: {why}; check the host's disk "
                          f"(`df -h {self.state}`, is it full or read-only?)", host=self.host.name)
        if said.word is not Word.LOCKED:
            held.close()
            detail = said.detail
            try:
                who = json.loads(detail)
                detail = f"{who['by']} (pid {who['pid']}) since {who['since']}"
            except (ValueError, KeyError, TypeError):
                detail = detail or "another swapctl"
            raise LockHeld(f"another deploy holds the lock: {detail}; wait for it, it ends with its connection",
                           host=self.host.name)
        self._lock = held

    def _swapping(self) -> LockHeld:
        return LockHeld(f"a swap started by an earlier deploy still runs on the host (that deploy lost its "
                        f"connection); wait for it to end, then check `swapctl status {self.host.name}`",
                        host=self.host.name)

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def upload_path(self, release_id: str) -> str:
        """The one temporary name of a release's upload: a later deploy resumes it."""
        return f"{self.state}/releases/.upload-{release_id}"

    def patch_base(self, plan: Plan) -> upload.Base | None:
        """The release to patch against: one the host has and this machine cached, what runs first."""
        cache = upload.Cache()
        order = [plan.daemon.sha256[:12] if plan.daemon else "", plan.current or "", *reversed(plan.history)]
        order += sorted(plan.releases, key=lambda r: plan.releases[r].created, reverse=True)
        for rid in order:
            rel = plan.releases.get(rid)
            if rel and (local := cache.get(rel.sha256)):
                return upload.Base(rel.id, rel.path(self.state), local)
        return None

    def start_upload(self, plan: Plan, binary_path: str, tmp: str) -> None:
        """Starts making what the upload will send now, while the rest of the preflight, the confirmation and
        the lock go on: a patch (indexing the old binary is most of its time, 0.4 s for 75 MB; hosts on
        the same base share it), or else the first zstd frames of a fresh upload."""
        self.discard_upload()
        base = self.patch_base(plan)
        if base and upload.Patch.possible():
            self._patch = upload.Patch.of(base, binary_path)
        elif not base and tmp not in dict(plan.partials):  # a resumed upload starts where the host's bytes end
            self._frames = upload.Frames(binary_path)

    def prepare_upload(self, plan: Plan) -> None:
        """Starts the host side of the upload now, before the lock: its shell start-up (.bashrc) then runs
        beside the lock's instead of after it. It acts only when the upload begins (sh/receive.sh)."""
        if plan.new.id in plan.releases:  # nothing to send
            return
        sender, partial = self._uploader(plan)
        try:
            self._ready = sender.prepare(partial, self.patch_base(plan))
        except Unreachable:
            pass  # the lock and the upload meet it again and say so

    def _uploader(self, plan: Plan) -> tuple[upload.Uploader, int]:
        """The uploader for plan.new, and the bytes of it the host has from an interrupted upload."""
        new, st = plan.new, self.state
        tmp = self.upload_path(new.id)

        def progress(done: int, wire: int) -> None:
            self.emit("upload", done=done, total=new.size, wire=wire)
            if self.interrupts.count:
                raise KeyboardInterrupt

        sender = upload.Uploader(self.host, plan.binary.path, new.size, tmp,
                                 {"dir": new.dir(st), "name": new.name, "sha": new.sha256, "manifest": _manifest(new)},
                                 progress, plan.host_zstd)
        return sender, dict(plan.partials).get(tmp, 0)

    def discard_upload(self) -> None:
        if self._ready is not None:
            self._ready.close()
            self._ready = None
        if self._patch is not None:
            self._patch.release()
            self._patch = None
        if self._frames is not None:
            self._frames.close()
            self._frames = None

    def upload(self, plan: Plan) -> upload.Sent:
        """Puts the new binary in place as a release, by the cheapest method the host allows."""
        new, st = plan.new, self.state
        if new.id in plan.releases:
            self.emit("upload", f"release {new.id} is already on the host: nothing to send")
            if plan.releases[new.id] != new:  # record the command line it will run with now
                self._write_manifest(new)
            return upload.Sent("present", 0, 0.0)
        sender, partial = self._uploader(plan)
        base = self.patch_base(plan)
        made, self._patch = self._patch, None
        if made and (base is None or made.old != base.local_path or made.new != plan.binary.path):
            made.release()
            made = None
        early, self._frames = self._frames, None
        ready, self._ready = self._ready, None
        sent, report = sender.run(partial, base, made, early, ready)
        if report.failure is Word.NOSPACE:
            raise Refused(f"the host's disk filled up during the upload ({report.detail} KiB free in {st}/releases); "
                          f"the partial upload was removed and the daemon runs on: free some space and deploy again",
                          host=self.host.name)
        if report.damaged:
            self.host.run(Cmd("rm", "-f", "--", sender.tmp), check=False)
            raise Refused(f"the upload arrived corrupted ({report.summary()[:120]}; expected sha256 {new.id}); it "
                          f"was removed and nothing changed: deploy again", host=self.host.name)
        if report.missing:
            self.host.run(Cmd("rm", "-rf", "--", new.dir(st)), check=False)
            raise BadInput(f"{plan.binary.path} needs a library the host lacks: {report.missing[0]} (install it on "
                           f"the host, or link it statically)", host=self.host.name)
        if not report.installed:
            raise Refused(f"the upload did not install: {report.summary()[:200]}", host=self.host.name)
        return sent

    def _alive(self) -> bool:
        try:
            return self.host.run(Cmd("true"), timeout=10, check=False).ok
        except SwapctlError:
            return False

    def _write_manifest(self, rel: Release) -> None:
        self.run(scripts.command("write_file.sh", path=f"{rel.dir(self.state)}/manifest.json", text=_manifest(rel),
                                 label="manifest"))

    def backup(self, plan: Plan) -> None:
        for src, rel in plan.to_save:
            self.emit("backup", f"saving {rel.source} release {rel.id} from {src}")
            self.run(scripts.command("backup.sh", src=src, dir=rel.dir(self.state), name=rel.name,
                                     manifest=_manifest(rel)))

    def gpu_limits(self, status: HostStatus, pids: list[int]) -> str:
        """Per GPU, the most memory it may still use once the daemon's own is released."""
        if not status.gpus:
            return ""
        held: dict[str, float] = {}
        for app in status.gpu_processes:
            if app.pid in pids:
                held[app.gpu_uuid] = held.get(app.gpu_uuid, 0) + (app.used_mib or 0)
        slack = self.book.memory.gpu_slack_mib
        return ",".join(f"{g.index}:{int((g.memory_used_mib or 0) - held.get(g.uuid, 0) + slack)}"
                        for g in status.gpus)

    def command_for(self, rel: Release) -> list:
        """`K=V...` then the command line, as `env -i` takes them, for a release as it was recorded."""
        spec = self.daemon_spec
        argv = rel.argv or (spec.binary,)
        # The daemon runs from the binary path (now the release) when that is its recorded argv[0]; a
        # command recorded with another argv[0] (an adopted daemon) runs from its saved copy, with that argv[0].
        if argv[0] == spec.binary and "=" not in argv[0]:
            command = list(argv)
        else:
            command = ["perl", "-e", scripts.PERL_ARGV0, rel.path(self.state), *argv]
        env = [Secret(f"{k}={v}") if k in spec.secret_env else f"{k}={v}" for k, v in rel.env or ()]
        return env + command

    def _fallback_inputs(self, target: Release, fallback: Release | None) -> dict[str, Piece]:
        """What the swap script needs to go back to `fallback` by itself if this deploy loses its connection
        and `target` fails: its path, cwd, command line (rendered once, as the channel would), and what its
        journal line names (the host writes that line whole)."""
        if fallback is None:
            return {"fb_target": "", "fb_cwd": "", "fb_cmd": "", "fb_host": "", "fb_from": "", "fb_to": "",
                    "fb_current": ""}
        command = Cmd("env", "-i", *self.command_for(fallback)).render()
        return {"fb_target": fallback.path(self.state), "fb_cwd": fallback.cwd or "/", "fb_cmd": Secret(command),
                "fb_host": self.host.name, "fb_from": target.sha256, "fb_to": fallback.sha256,
                "fb_current": fallback.id}

    def swap(self, old: Daemon | None, target: Release, gpu_max: str,
             fallback: Release | None = None) -> SwapReport:
        """Stops `old`, waits for its memory, starts `target` and waits for it to be ready: one remote
        script, so nothing waits on a round trip between the old daemon's exit and the new start."""
        spec, mem = self.daemon_spec, self.book.memory
        grace = int(spec.stop_grace_s * 1000)
        cmd = scripts.command(
            "swap.sh", *self.command_for(target), bash=bool(spec.ready_port),  # /dev/tcp is bash's
            pid=str(old.pid) if old else "", grace_ms=grace, group="1" if old and old.group_leader else "0",
            unit=(old.unit or "") if old else "", timeout_ms=int(mem.release_timeout_s * 1000),
            min_kib=int(mem.min_available_gib * (1 << 20)), gpu_max=gpu_max, bin=spec.binary,
            target=target.path(self.state), cwd=target.cwd or "/", log=spec.log, re=spec.ready_log,
            ready_s=int(spec.ready_timeout_s), port=str(spec.ready_port or ""),
            stable_ms=int(spec.ready_stable_s * 1000), **self._fallback_inputs(target, fallback))
        parser = SwapParser(time.monotonic())

        def line(text: str) -> None:
            word, rest = parser.feed(text, time.monotonic())
            if word is not None:
                self._progress(word, rest, parser.report, target, grace)

        if old:
            self.emit("stop", f"systemctl stop {old.unit}" if old.unit else f"SIGTERM to {old.pid}")
        else:
            self.emit("memory", "checking memory")
        self.host.stream(cmd, line, timeout=spec.stop_grace_s + mem.release_timeout_s + spec.ready_timeout_s +
                         spec.ready_stable_s + 120)
        run = parser.finish(time.monotonic())
        if run.failure.startswith("another swap"):  # it waited 30 s for swap.lock and stopped nothing
            raise LockHeld(f"{run.failure}; this one stopped nothing: wait for it to end, then check "
                           f"`swapctl status {self.host.name}`", host=self.host.name)
        return run

    def _progress(self, word: Word, rest: str, so_far: SwapReport, target: Release, grace_ms: int) -> None:
        """The event a line of the swap script is worth, if any."""
        if word is Word.LOG:
            self.emit("ready", log_line=rest)
        elif word is Word.SIGKILL:
            self.emit("stop", f"still running after {grace_ms / 1000:g} s: SIGKILL")
        elif word is Word.STOPPED:
            kids = f"; waiting for its descendants too ({len(so_far.kids)})" if so_far.kids else ""
            self.emit("stop", f"stopped in {int(rest) / 1000:.2f} s{kids}")
        elif word is Word.R and so_far.reading:
            r = so_far.reading
            holding = ",".join(map(str, r.alive)) or "-"
            self.emit("memory", f"MemAvailable {r.avail_kib / (1 << 20):.1f} GiB, holding: {holding}")
        elif word is Word.STARTED:
            self.emit("start", f"started {target.id} as pid {so_far.pid}")
        elif word is Word.READY:
            self.emit("ready", f"{target.id} is ready")
        elif word is Word.WATCH:
            self.emit("ready", f"ready; it must stay up {int(rest) / 1000:g} s (daemon.ready_stable_s)")
        elif word is Word.EXITED and not so_far.ready_seen:
            self.emit("ready", f"{target.id} exited before it was ready")

    def memory_error(self, run: SwapReport) -> UnknownState:
        mem, r = self.book.memory, run.reading
        avail = r.avail_kib / (1 << 20) if r else 0
        holders = ",".join(map(str, r.alive)) if r and r.alive else "none"
        gpu = f", GPU memory used {r.gpu_used}" if r and r.gpu_used else ""
        return UnknownState(
            f"memory not back after {mem.release_timeout_s:g} s: MemAvailable {avail:.1f} GiB "
            f"(need {mem.min_available_gib:g}), old processes still alive: {holders}{gpu}; no daemon runs "
            f"now: find what holds the memory, then `swapctl deploy` again", host=self.host.name)

    def stop_only(self, pid: int) -> SwapReport:
        """Stops a daemon swapctl started and nothing more (a failed start with nothing to go back to)."""
        out = self.run(scripts.command("stop.sh", pid=pid, grace_ms=int(self.daemon_spec.stop_grace_s * 1000)))
        return parse_swap((0.0, line) for line in out.stdout.splitlines())

    def log_tail(self, offset: int, lines: int = 20) -> str:
        return self.run(scripts.command("tail.sh", path=self.daemon_spec.log, offset=offset, lines=lines),
                        check=False).stdout

    def journal(self, entry: dict) -> None:
        entry = {"time": now_iso(), "by": who_am_i(), "host": self.host.name, **entry}
        if self.sent is not None:
            entry["upload"] = self.sent.record()
        try:
            self.run(scripts.command("append_line.sh", path=f"{self.state}/journal.jsonl",
                                     text=json.dumps(entry, sort_keys=True), label="journal"))
        finally:
            record_local(entry)

    def mark(self, rel: Release, status: str) -> Release:
        marked = rel.marked(status)
        self._write_manifest(marked)
        return marked

    def prune(self, releases: dict[str, Release], protect: set[str], stale: tuple[str, ...] = ()) -> list[str]:
        """Removes releases beyond keep_releases (never those in `protect`) and `stale` partial uploads."""
        gone = to_prune(releases, self.book.keep_releases, protect)
        if gone or stale:
            self.run(scripts.command("remove.sh", *[r.dir(self.state) for r in gone], *stale, label="prune"))
        return [r.id for r in gone]


def _victim(pid: int) -> Daemon:
    """A daemon swapctl started itself (setsid: it leads its process group)."""
    return Daemon(pid=pid, sha256="", size=0, argv=(), cwd="/", env=(), unit=None, group_leader=True,
                  rss_kib=0, elapsed_s=0)


def swap_in(sw: Swap, plan: Plan, target: Release, action: str, fallback: Release | None) -> Outcome:
    """Stops what runs, waits for memory, starts `target`; rolls back to `fallback` if it fails.

    Used by deploy and rollback alike. Raises RolledBack (4) or UnknownState (5) on failure."""
    old_sha = plan.daemon.sha256 if plan.daemon else (fallback.sha256 if fallback else None)
    outcome = Outcome(host=sw.host.name, action=action, outcome="failed", old_sha=old_sha, new_sha=target.sha256)
    if sw.interrupts.count:
        raise KeyboardInterrupt
    sw.interrupts.critical = True
    pids = [plan.daemon.pid] if plan.daemon else []
    try:
        run = sw.swap(plan.daemon, target, sw.gpu_limits(plan.status, pids), fallback)
    except (Unreachable, RemoteTimeout) as exc:
        raise UnknownState(f"{exc.message} while swapping: the host finishes the swap by itself (stop, memory "
                           f"wait, start); check with `swapctl status {sw.host.name}` before deploying again",
                           host=sw.host.name) from None
    steps = {**sw.steps, **run.steps}  # this attempt's own: a rollback swap after it times itself apart
    if not run.memory_ok:
        sw.journal({"action": action, "from": old_sha, "to": target.sha256, "outcome": "no-daemon",
                    "steps": steps, "reason": "memory not back"})
        raise sw.memory_error(run)
    try:
        if sw.interrupts.count >= 2 and fallback:
            raise _GoBack("a second Ctrl-C", run, steps)
        if not run.ready:
            raise _GoBack(run.why_not(sw.daemon_spec.ready_timeout_s), run, steps)
    except _GoBack as back:
        return _roll_back(sw, plan, target, fallback, back, outcome)
    outcome.outcome, outcome.pid, outcome.steps = "deployed" if action == "deploy" else "rolled-back", run.pid, steps
    outcome.log_offset = run.offset
    sw.journal({"action": action, "from": old_sha, "to": target.sha256, "current": target.id,
                "outcome": outcome.outcome, "pid": run.pid, "log_offset": run.offset, "steps": steps})
    return outcome


class _GoBack(Exception):
    def __init__(self, why: str, run: SwapReport, steps: dict[str, float]):
        super().__init__(why)
        self.why, self.pid, self.offset, self.steps = why, run.pid, run.offset, steps


def _roll_back(sw: Swap, plan: Plan, failed: Release, fallback: Release | None, back: _GoBack,
               outcome: Outcome) -> Outcome:
    tail = sw.log_tail(back.offset) if back.pid else ""
    sw.emit("rollback", f"{failed.id} failed: {back.why}; rolling back")
    sw.mark(failed, "bad")
    log = f"{sw.daemon_spec.log} from byte {back.offset}"
    entry = {"action": "auto-rollback" if outcome.action == "deploy" else "rollback", "from": failed.sha256,
             "steps": back.steps, "failed_log": log, "reason": back.why}
    victim = _victim(back.pid) if back.pid else None
    if fallback is None:
        stopped = sw.stop_only(victim.pid).stopped if victim else True
        sw.journal({**entry, "to": None, "outcome": "no-daemon" if stopped else "unknown"})
        if not stopped:
            raise UnknownState(f"{failed.id} failed ({back.why}), there is no earlier release to go back to, and "
                               f"stopping it did not finish: check `swapctl status {sw.host.name}`; its log: {log}",
                               host=sw.host.name, detail=tail)
        raise UnknownState(f"{failed.id} failed ({back.why}) and there is no earlier release to go back to: "
                           f"no daemon runs now; its log: {log}", host=sw.host.name, detail=tail)
    run = sw.swap(victim, fallback, "")
    entry["rollback_steps"] = run.steps
    if not run.memory_ok:
        sw.journal({**entry, "to": fallback.sha256, "outcome": "no-daemon"})
        raise sw.memory_error(run)
    if not run.ready:
        why = run.why_not(sw.daemon_spec.ready_timeout_s)
        sw.mark(fallback, "bad")
        sw.journal({**entry, "to": fallback.sha256, "current": fallback.id, "outcome": "rollback-failed"})
        raise UnknownState(f"{failed.id} failed ({back.why}), and the rollback to {fallback.id} failed too ({why}); "
                           f"no daemon runs now; logs: {sw.daemon_spec.log}", host=sw.host.name,
                           detail=sw.log_tail(run.offset))
    pid = run.pid
    sw.journal({**entry, "to": fallback.sha256, "current": fallback.id, "outcome": "rolled-back", "pid": pid,
                "log_offset": run.offset})
    if outcome.action == "rollback":  # the host runs what it ran, but not what was asked for
        raise UnknownState(f"the rollback to {failed.id} failed ({back.why}); {fallback.id}, which ran before, "
                           f"runs again as pid {pid}. Failed log: {log}", host=sw.host.name, detail=tail)
    raise RolledBack(f"{failed.id} failed ({back.why}); rolled back: {fallback.id} runs again as pid {pid}. "
                     f"Failed log: {log}", host=sw.host.name, detail=tail)


def deploy(sw: Swap, plan: Plan) -> Outcome:
    """The whole swap after a confirmed plan: lock, upload, backup, then swap_in with auto rollback."""
    if plan.unchanged:
        return Outcome(host=plan.host, action="deploy", outcome="unchanged", old_sha=plan.new.sha256,
                       new_sha=plan.new.sha256, pid=plan.daemon.pid if plan.daemon else None,
                       message=f"the daemon already runs {plan.new.id}; --restart restarts it anyway")
    t = time.monotonic()
    cached = None
    sw.prepare_upload(plan)
    try:
        sw.lock()  # inside: a refused lock still ends the receive started for it
        sw.timed("lock", t)
        t = time.monotonic()
        sent = sw.sent = sw.upload(plan)
        sw.timed("upload", t)
        cached = threading.Thread(target=upload.Cache().add, args=(plan.binary.path, plan.new.sha256))
        cached.start()  # the old side of the next deploy's patch; off the upload's path
        t = time.monotonic()
        sw.backup(plan)
        sw.timed("backup", t)
        previous = plan.fallback()
        outcome = swap_in(sw, plan, plan.new, "deploy", previous)
        outcome.upload = sent.record()
        if sent.wire_bytes:
            outcome.upload_mb_s = plan.new.size / 1e6 / max(sent.seconds, 1e-6)
        protect = {plan.new.id} | ({previous.id} if previous else set())
        sw.prune({**plan.known, plan.new.id: plan.new}, protect, tuple(path for path, _ in plan.partials))
        return outcome
    except KeyboardInterrupt:
        raise Refused("interrupted before the old daemon was stopped: nothing changed on the host",
                      host=sw.host.name) from None
    finally:
        sw.unlock()
        sw.discard_upload()
        if cached:
            cached.join()


def rollback(sw: Swap, plan: Plan) -> Outcome:
    """Back to `plan.new`, an earlier release, started exactly as recorded; lock, backup and swap_in."""
    assert plan.new is not None
    t = time.monotonic()
    sw.lock()
    try:
        sw.timed("lock", t)
        sw.backup(plan)
        running = plan.known.get(plan.daemon.sha256[:12]) if plan.daemon else plan.known.get(plan.current or "")
        fallback = running if running and running.status == "ok" and running.id != plan.new.id else None
        return swap_in(sw, plan, plan.new, "rollback", fallback)
    except KeyboardInterrupt:
        raise Refused("interrupted before the daemon was stopped: nothing changed on the host",
                      host=sw.host.name) from None
    finally:
        sw.unlock()
