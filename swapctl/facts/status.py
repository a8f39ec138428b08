"""A host's status in one round trip: one fixed script, its sections parsed by the pure parsers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from ..host import scripts
from ..playbook.spec import DaemonSpec, GpuSpec
from ..remote import Cmd, Host
from . import cgroup, daemon_view, exposure, forks, journal_entry, nvidia, system
from . import systemd as sd
from .daemon_rule import daemon_rule
from .journal_entry import JournalEntry
from .sections import split_sections as split_sections  # re-exported: the callers import it from here
from .system import Process

# The sections status.sh prints, in its order: parse_status reads these and no other.
SECTIONS = ("host", "self", "ps", "links", "ids", "starts", "daemon-user", "binary-owner", "binary-dir", "meminfo",
            "loadavg", "who", "df", "gpu", "gpu-apps", "current", "swapping", "last-swap", "landings", "gpu-sampler",
            "unit", "releases", "cgroup", "listen", "config", "daemon-view")


@dataclass(frozen=True)
class HostStatus:
    host: str
    arch: str
    hostname: str
    daemons: tuple[system.Process, ...]
    memory: system.Memory
    top_processes: tuple[system.Process, ...]  # the largest other processes by RSS
    gpus: tuple[nvidia.Gpu, ...]
    gpu_processes: tuple[nvidia.GpuProcess, ...]
    gpu_error: str | None  # "no GPU tools", or what nvidia-smi said when it failed, or that it hung
    sessions: tuple[system.Session, ...]
    disks: tuple[system.Disk, ...]
    load: tuple[float, float, float]
    current_release: str | None  # the binary path's symlink target, when swapctl manages it
    releases: tuple[dict[str, Any], ...] = field(default=())
    processes: tuple[system.Process, ...] = field(default=(), repr=False)
    swapping: bool = False  # a swap script runs on the host now (it holds swap.lock)
    swap_info: str = ""  # its swap.info: who started it, since when (JSON, as the host wrote it)
    last_journal_line: str = ""  # the journal's last line, as the host has it (read as a JournalEntry above)
    landings: tuple[JournalEntry, ...] = field(default=(), repr=False)  # the journal's recent landings, oldest first
    gpu_sampler: str | None = None  # one line: the GPU sampler runs (and follows which pid) or not, its last note
    gpu_hung: bool = False  # nvidia-smi did not answer within [gpu] nvidia_smi_timeout_s: GPU or driver wedged
    unit: sd.Unit | None = None  # the systemd unit the daemon runs under (or the playbook names)
    daemon_user: tuple[int, int] | None = None  # daemon.user's uid and gid on the host, when it has that user
    not_daemons: tuple[system.Process, ...] = ()  # matched daemon.match, but run another program or as another user
    leftovers: tuple[system.Process, ...] = ()  # run the binary alone, single-threaded: what a daemon forked and left
    daemon_view: daemon_view.DaemonView | None = None  # its GET /status, when daemon.status_url is set and answered
    daemon_view_error: str | None = None  # daemon.status_url is set, and this is what came instead of a snapshot
    cgroups: cgroup.Cgroups = field(default_factory=cgroup.Cgroups)  # the daemon's memory cgroup, and status.sh's
    listening: tuple[exposure.Listening, ...] = ()  # TCP sockets of processes running a file beside the binary
    configs: tuple[exposure.DaemonConfig, ...] = ()  # their config files, and the playbook's (pid None)

    @property
    def other_sessions(self) -> tuple[system.Session, ...]:
        return tuple(s for s in self.sessions if not s.own)

    @property
    def daemon_cgroup(self) -> cgroup.Cgroup | None:
        """The memory cgroup the daemon runs in (None: no daemon, or none could be read)."""
        return self.cgroups.by_pid.get(self.daemons[0].pid) if self.daemons else None

    @property
    def daemon_listening(self) -> tuple[exposure.Listening, ...]:
        """The TCP sockets the daemon listens on."""
        pids = {p.pid for p in self.daemons}
        return tuple(s for s in self.listening if s.pid in pids)

    def config_of(self, pid: int | None) -> exposure.DaemonConfig | None:
        """The config file of process `pid` (None: the playbook's daemon.args name)."""
        return next((c for c in self.configs if c.pid == pid), None)


DEFAULT_GPU = GpuSpec()  # frozen: one default for every call


def df_paths(daemon: DaemonSpec) -> list[str]:
    """The directories whose disks status reports: the binary's and the log's (when it is a file), else /."""
    files = (daemon.binary, None if daemon.journal else daemon.log)
    return list(dict.fromkeys([str(PurePosixPath(p).parent) for p in files if p] or ["/"]))


def status_cmd(daemon: DaemonSpec, gpu: GpuSpec = DEFAULT_GPU) -> Cmd:
    """status.sh for `daemon`, its disks' directories as arguments."""
    return scripts.command(
        "status.sh", *df_paths(daemon), bin=daemon.binary or "", state=daemon.state_dir if daemon.binary else "",
        ps_format=system.PS_FORMAT, gpu_fields=nvidia.QUERY_FIELDS, gpu_apps=nvidia.QUERY_APPS,
        smi_cs=max(1, round(gpu.nvidia_smi_timeout_s * 100)), user=daemon.user or "", unit=daemon.unit or "",
        url=daemon.status_url or "", props=",".join(sd.PROPERTIES),
        cfg=daemon_view.config_path(daemon.args) if daemon.args is not None else "",
        cfg_default=daemon_view.DEFAULT_CONFIG)


def _strip_rc(text: str) -> tuple[str, str]:
    """A `smi` call's output and its status: an exit code, or `timeout S` for one that did not answer."""
    lines = text.splitlines()
    if lines and lines[-1].startswith("rc="):
        return "\n".join(lines[:-1]), lines[-1][3:].strip()
    return text, "0"


def _hung(rc: str) -> str | None:
    """The words for a call that did not answer (`rc=timeout S`), else None. It starts as a failure does:
    the deploy preflight refuses on both, since a daemon started now could not use the GPU either."""
    if not rc.startswith("timeout"):
        return None
    limit = rc.split()[1] if len(rc.split()) > 1 else "its time limit"
    limit = limit.rstrip("0").rstrip(".") if "." in limit else limit
    return f"nvidia-smi failed: did not answer within {limit} s (GPU or driver wedged? look for an Xid in dmesg)"


def _gpu_facts(s: dict[str, str]) -> tuple[list[nvidia.Gpu], list[nvidia.GpuProcess], str | None, str | None]:
    """The GPUs, their processes, what went wrong asking nvidia-smi, and whether a call hung."""
    gpus: list[nvidia.Gpu] = []
    apps: list[nvidia.GpuProcess] = []
    gpu_error = hung = None
    gpu_text = s.get("gpu", "")
    if gpu_text.strip() == "missing":
        gpu_error = "no GPU tools (nvidia-smi not found)"
    else:
        body, rc = _strip_rc(gpu_text)
        apps_body, apps_rc = _strip_rc(s.get("gpu-apps", ""))
        hung = _hung(rc) or _hung(apps_rc)
        try:
            if rc != "0" and not _hung(rc):
                raise nvidia.NvidiaSmiError(body.strip().splitlines()[0] if body.strip() else f"exit {rc}")
            # with a call hung, no GPU is listed: what they held a moment ago is no measure for the deploy's
            # GPU memory wait, whose nvidia-smi would hang too
            if rc == "0" and hung is None:
                gpus = nvidia.parse_query_gpu(body)
                if apps_rc == "0" and "gpu-apps" in s:
                    apps = nvidia.parse_compute_apps(apps_body)
        except nvidia.NvidiaSmiError as exc:
            gpu_error = f"nvidia-smi failed: {exc}"
        gpu_error = hung or gpu_error
    return gpus, apps, gpu_error, hung


def parse_status(host: str, text: str, daemon: DaemonSpec, df_paths: list[str]) -> HostStatus:
    """Builds a HostStatus from the status script's output."""
    s = split_sections(text)
    host_lines = s.get("host", "").splitlines() + ["", ""]
    procs = system.with_links(system.parse_ps(s.get("ps", "")), system.parse_links(s.get("links", "")),
                              system.parse_ids(s.get("ids", "")), system.parse_threads(s.get("ids", "")),
                              system.parse_starts(s.get("starts", "")))
    own = int(s.get("self", "0").strip() or 0)
    mine = {own, *system.descendants(procs, own)} if own > 1 else set()  # the status script itself
    user = _ids(s.get("daemon-user", ""))
    daemons, not_daemons = _daemons(procs, mine, daemon.match_regex, _the_daemon(daemon, s, user))
    leftovers = tuple(p for p in daemons
                      if forks.is_leftover(p.threads, p.elapsed_s if p.age_s is None else p.age_s, p.forked))
    daemons = tuple(p for p in daemons if p not in leftovers)
    others = sorted((p for p in procs if p not in daemons and p.pid not in mine), key=lambda p: -p.rss_kib)[:5]
    gpus, apps, gpu_error, hung = _gpu_facts(s)
    disks = [
        system.Disk(path=path, filesystem=d.filesystem, size_kib=d.size_kib, avail_kib=d.avail_kib, mount=d.mount)
        for path, d in zip(df_paths, system.parse_df(s.get("df", "")), strict=False)
    ]
    return HostStatus(
        host=host,
        arch=host_lines[0].strip(),
        hostname=host_lines[1].strip(),
        daemons=daemons,
        memory=system.parse_meminfo(s.get("meminfo", "")),
        top_processes=tuple(others),
        gpus=tuple(gpus),
        gpu_processes=tuple(apps),
        gpu_error=gpu_error,
        sessions=tuple(system.parse_who(s.get("who", ""))) + tuple(system.ssh_sessions(procs, own)),
        disks=tuple(disks),
        load=system.parse_loadavg(s.get("loadavg", "")),
        current_release=s.get("current", "").strip() or None,
        releases=_releases(s.get("releases", "")),
        processes=tuple(procs),
        swapping=s.get("swapping", "").strip().startswith("yes"),
        swap_info="".join(s.get("swapping", "").strip().splitlines()[1:2]),
        last_journal_line=s.get("last-swap", "").strip(),
        landings=journal_entry.read(s.get("landings", ""))[0],  # a line that is no entry: left out
        gpu_sampler=_sampler_line(s.get("gpu-sampler", "")),
        gpu_hung=hung is not None,
        unit=_own_unit(sd.parse_unit(s.get("unit", "")), daemon, daemons),
        daemon_user=user,
        not_daemons=not_daemons,
        leftovers=leftovers,
        cgroups=cgroup.parse_cgroups(s.get("cgroup", "")),
        listening=exposure.parse_listen(s.get("listen", "")),
        configs=exposure.parse_configs(s.get("config", "")),
        **_view(daemon, s.get("daemon-view", "")),
    )


def _daemons(procs: list[Process], mine: set[int], regex: re.Pattern[str] | None,
             is_it: Callable[[Process], bool]) -> tuple[tuple[Process, ...], tuple[Process, ...]]:
    """The daemons among `procs`, and the processes that match daemon.match but are not the daemon (another
    program, another user). `mine`: the status script and its children, never a match."""
    # a zombie has exited: it holds no memory and serves nothing, whatever its name
    matched = [p for p in procs if regex and p.pid not in mine and not p.state.startswith("Z") and regex.search(p.args)]
    matches = {p.pid: p for p in matched if is_it(p)}
    # a forked worker carries its parent's command line: only the topmost match is a daemon
    parent = {p.pid: p.ppid for p in procs}

    def under_a_match(pid: int) -> bool:
        seen = set()
        while pid in parent and pid not in seen:
            seen.add(pid)
            pid = parent[pid]
            if pid in matches:
                return True
        return False

    daemons = tuple(p for p in matches.values() if not under_a_match(p.pid))
    if regex and len(daemons) > 1:  # `tail -f /data/cuzk.log` matches "cuzk" too: prefer what runs the program itself
        running_it = tuple(p for p in daemons if regex.search(p.args.split(" ", 1)[0]) or
                           (p.exe and regex.search(p.exe)))
        daemons = running_it or daemons
    return daemons, tuple(p for p in matched if p.pid not in matches)


def _releases(text: str) -> tuple[dict[str, Any], ...]:
    """The releases section's manifests (one JSON object a line), oldest first."""
    releases = []
    for line in text.splitlines():
        try:
            manifest = json.loads(line)
        except json.JSONDecodeError:
            continue  # a manifest being rewritten; the next status shows it
        if isinstance(manifest, dict):  # read from the host: what is no JSON object is no manifest
            releases.append(manifest)
    return tuple(sorted(releases, key=lambda r: str(r.get("created", ""))))


def _view(daemon: DaemonSpec, text: str) -> dict[str, Any]:
    """daemon_view and daemon_view_error from the daemon-view section (empty without status_url)."""
    if not daemon.status_url:
        return {}
    view = daemon_view.parse_view(text)
    if view is not None:
        return {"daemon_view": view}
    said = text.strip().splitlines()[-1][:200] if text.strip() else "no answer"
    return {"daemon_view_error": f"{daemon.status_url}: {said}"}


def _own_unit(unit: sd.Unit | None, daemon: DaemonSpec, daemons: tuple[system.Process, ...]) -> sd.Unit | None:
    """The unit, if it is the daemon's: named by the playbook, or the daemon is its main process, or none
    runs and its ExecStart runs the binary. A daemon started by hand from ssh on a host without
    pam_systemd sits in ssh.service's cgroup: that unit is not its own."""
    if unit is None or daemon.unit:
        return unit
    if daemons:
        return unit if unit.main_pid == daemons[0].pid else None
    return unit if daemon.binary and unit.exec_path == daemon.binary else None


def _ids(text: str) -> tuple[int, int] | None:
    parts = text.split()
    return (int(parts[0]), int(parts[1])) if len(parts) == 2 and all(p.isdecimal() for p in parts) else None


def _the_daemon(daemon: DaemonSpec, s: dict[str, str], user: tuple[int, int] | None) -> Callable[[Process], bool]:
    """Whether a process that matches daemon.match is the daemon (facts/daemon_rule.py) on this host: the
    binary's real directory and owner as the status script read them. Without daemon.binary (`init --from`),
    the match alone."""
    if not daemon.binary:
        return lambda p: True
    owner = s.get("binary-owner", "").strip()
    rule = daemon_rule(daemon.binary, s.get("binary-dir", "").strip(), int(owner) if owner.isdecimal() else None,
                       user, bool(daemon.user))
    return lambda p: rule(p.exe, p.uid)


def _sampler_line(text: str) -> str | None:
    """'running SPID DPID DSTART SINCE' or 'idle', then the last note -> one line for people."""
    lines = text.strip().splitlines()
    if not lines:
        return None
    state, note = lines[0].split(), " ".join(lines[1:2])
    if state[:1] == ["running"] and len(state) >= 3:
        head = f"running (pid {state[1]}, following daemon pid {state[2]})"
    else:
        head = "not running"
    return f"{head}; last note: {note}" if note else head


def gather(host: Host, daemon: DaemonSpec, gpu: GpuSpec = DEFAULT_GPU) -> HostStatus:
    """One round trip: the status script, parsed. Its two nvidia-smi calls have `gpu`'s limit each, so
    a wedged GPU is reported with the rest, not taken for a host that does not answer."""
    result = host.run(status_cmd(daemon, gpu), timeout=60 + 2 * gpu.nvidia_smi_timeout_s)
    return parse_status(host.name, result.stdout, daemon, df_paths(daemon))
