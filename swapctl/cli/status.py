"""`swapctl status HOST...`: daemon, memory, GPUs, other sessions, disk, releases."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .. import playbook as pb
from ..errors import ExitCode, SwapctlError
from ..facts import cordon, journal_entry
from ..facts.daemon_view import DaemonView
from ..facts.exposure import why_public
from ..facts.journal_entry import JournalEntry
from ..facts.releases import Release
from ..facts.status import HostStatus, gather
from ..facts.systemd import Unit
from ..masking import MASK, looks_secret, masked_env, masked_unit_text
from ..remote import Host
from ..remote.group import on_hosts
from .common import (
    JsonOpt,
    LimitOpt,
    PlaybookOpt,
    RootOptions,
    duration,
    err,
    gib,
    guarded,
    load_playbook,
    out,
    print_json,
    root,
    select_hosts,
    size,
    stacked,
    text,
    where,
    worst,
)


def status(
    ctx: typer.Context,
    hosts: Annotated[list[str], typer.Argument(
        metavar="HOST", help="Host names, user@address:port, ssh_config aliases, or @group.")],
    playbook: PlaybookOpt = None,
    limit: LimitOpt = None,
    json: JsonOpt = False,
) -> None:
    """Show the daemon, memory, GPUs, other sessions, disk and releases of each host."""
    guarded(lambda: _status(hosts, playbook, json, limit, root(ctx)))


def _status(targets: list[str], playbook_path: str | None, as_json: bool, limit: str | None,
            opts: RootOptions) -> int:
    book = load_playbook(playbook_path, opts, required=False)
    specs = select_hosts(book, targets, limit)
    def read(host: Host) -> tuple[HostStatus, cordon.CordonView | None]:  # the cordon: with the host's nodes
        fed = bool(book.curio_of(host.name).nodes)
        return gather(host, book.daemon, book.gpu), cordon.read(host, book) if fed else None

    def run() -> dict[str, Any]:
        return on_hosts(specs, read)

    if err.is_interactive:  # said at once, gone when the hosts have answered; scripts see only the results
        names = where(specs[0]) if len(specs) == 1 else f"{len(specs)} hosts"
        with err.status(text(f"connecting to {names}..."), spinner="dots"):
            results = run()
    else:
        results = run()
    codes = []
    for result in results.values():
        if isinstance(result, SwapctlError):
            codes.append(int(result.exit_code))
        elif isinstance(result, BaseException):
            codes.append(int(ExitCode.FAILED))
    if as_json:
        doc = {}
        for name, result in results.items():
            if isinstance(result, BaseException):
                code = getattr(result, "exit_code", ExitCode.FAILED)
                doc[name] = {"error": str(result), "exit_code": int(code)}
            else:
                st, view = result
                doc[name] = _json_doc(name, st, view, book)
        print_json({"hosts": doc})
    else:
        for name, result in results.items():
            if isinstance(result, BaseException):
                err.print(text(f"swapctl: {result}"), style="bold red")
            else:
                st, view = result
                render(st, book.daemon.secret_env)
                if view is not None:
                    for line in cordon.status_lines(view, book.curio_of(name).nodes, st.host):
                        out.print(text(line), style="bold yellow" if "cordoned" in line else None)
    return worst(codes)


def _json_doc(name: str, st: HostStatus, view: cordon.CordonView | None, book: pb.Playbook) -> dict[str, Any]:
    """One host's status as --json shows it: its secrets masked."""
    doc = {k: v for k, v in st.__dict__.items() if k not in ("processes", "last_journal_line", "landings")}
    alone = finished_alone(st)
    doc["finished_alone"] = alone.to_dict() if alone else None
    doc["releases"] = [_shown(r, book.daemon.secret_env) for r in st.releases]
    doc["rollback_target"] = _rollback_target(st)  # as history --json's
    doc["unit"] = _unit_shown(st.unit, book.daemon.secret_env)
    doc["daemon_view"] = _view_shown(st.daemon_view)
    doc["cordon"] = _cordon_shown(view, book.curio_of(name).nodes, name)
    return doc


def _shown(release: dict[str, Any], secret_env: tuple[str, ...]) -> dict[str, Any]:
    """A release's manifest as --json shows it: its environment's secrets masked (swapctl.masking)."""
    if "env" not in release:
        return release
    return {**release, "env": masked_env(release["env"], secret_env)}


def _cordon_shown(view: cordon.CordonView | None, nodes: tuple[str, ...], host: str) -> dict[str, Any] | None:
    """The cordon as --json shows it: swapctl's own (if one is left), each node's flag, the tasks now."""
    return None if view is None else cordon.shown(view, nodes, host)


def _unit_shown(unit: Unit | None, secret_env: tuple[str, ...]) -> dict[str, Any] | None:
    """The unit as --json shows it: its environment's secrets masked, in its files too."""
    if unit is None:
        return None
    listed = set(secret_env)
    return {**unit.__dict__, "files": masked_unit_text(unit.files, secret_env),
            "environment": [[k, MASK if k in listed or looks_secret(k, v) else v] for k, v in unit.environment]}


def _view_shown(view: DaemonView | None) -> dict[str, Any] | None:
    """The daemon's own view as --json shows it: as parsed, with what a stop now would lose."""
    if view is None:
        return None
    return {**view.__dict__, "in_flight": [p.__dict__ for p in view.in_flight], "waiting": view.waiting,
            "summary": view.summary()}


def render_view(v: DaemonView) -> None:
    """What the daemon says it is doing: proofs in flight, workers, counters, memory, SRS and PCE."""
    out.print(text(f"daemon's view: up {duration(int(v.uptime_s))}, {v.completed} completed, {v.failed} failed "
                   f"since start, queue {v.queue_depth}; {v.summary()}"), style="bold")
    for p in v.in_flight:
        out.print(text(f"  in flight: {p.text()} ({p.proof_kind})"))
    busy = [w for w in v.workers if w.state == "proving"]
    out.print(text(f"  GPU workers: {len(busy)} proving, {len(v.workers) - len(busy)} idle" + "".join(
        f"; worker {w.worker_id} on GPU {w.gpu}: job {w.job_id} partition {w.partition}" for w in busy)))
    out.print(text(f"  memory: {size(v.memory_used_bytes // 1024)} of {size(v.memory_total_bytes // 1024)} in its "
                   f"budget; SRS {size(v.srs_bytes // 1024)}, PCE {size(v.pce_bytes // 1024)}"))


def render_unit_and_view(st: HostStatus, secret_env: tuple[str, ...]) -> None:
    """The daemon's unit, then its own view (daemon.status_url), or why there is none."""
    if st.unit:
        render_unit(st.unit, secret_env)
    if st.daemon_view:
        render_view(st.daemon_view)
    elif st.daemon_view_error:
        out.print(text(f"daemon's view: no status ({st.daemon_view_error}); in-flight work unknown"), style="yellow")


def render_unit(u: Unit, secret_env: tuple[str, ...]) -> None:
    """The unit: its state, restarts, main pid, what it runs, and its file with the drop-ins."""
    if not u.found:
        out.print(text(f"unit: {u.name} not found on the host ({u.load_state or 'systemctl show said nothing'})"),
                  style="yellow")
        return
    out.print(text(f"unit: {u.name}  {u.state}  NRestarts {u.n_restarts}  MainPID {u.main_pid or '-'}  "
                   f"Restart={u.restart or '?'}"), style="bold" if u.active_state == "active" else "bold yellow")
    out.print(text(f"  ExecStart: {' '.join(u.exec_argv) or u.exec_path or '?'}"))
    if u.files:
        for line in masked_unit_text(u.files, secret_env).splitlines():
            out.print(text(f"  | {line}"))


def finished_alone(st: HostStatus) -> JournalEntry | None:
    """The journal's last line when the host wrote it alone: a swap whose controller went away (its `by`
    says "HOST itself (...)"), which nobody saw end."""
    entry = journal_entry.parse(st.last_journal_line) if st.last_journal_line else None
    return entry if entry is not None and entry.outcome and " itself (" in entry.by else None


def render_alone(st: HostStatus) -> None:
    if (alone := finished_alone(st)) is not None:
        out.print(text(f"last swap: {alone.action} {alone.outcome} at {alone.time}, finished by {alone.by}; "
                       f"`swapctl history {st.host}` has its line"), style="bold yellow")


def render(st: HostStatus, secret_env: tuple[str, ...] = ()) -> None:
    mem = st.memory
    out.rule(text(f"{st.host}  ({st.hostname}, {st.arch})"))
    out.print(text(
        f"memory: {gib(mem.available_kib)} available of {gib(mem.total_kib)}   "
        f"load: {st.load[0]:.2f} {st.load[1]:.2f} {st.load[2]:.2f}"))

    _render_cgroup(st)
    if st.swapping:
        out.print(text("a swap is in progress on this host (swapctl's swap script holds its lock)"),
                  style="bold yellow")
    render_alone(st)
    _render_daemons(st)
    render_unit_and_view(st, secret_env)

    _render_gpus(st)

    if st.gpu_sampler:
        out.print(text(f"GPU sampler: {st.gpu_sampler}"))
    others = st.other_sessions
    if others:
        out.print(text("other sessions: " + "; ".join(
            f"{s.user} on {s.tty} ({s.source or 'local'}, {s.since})" for s in others)), style="bold yellow")
    else:
        out.print("other sessions: none")
    out.print(text("largest other processes: " + ", ".join(
        f"{p.pid} {p.args.split()[0] if p.args else '?'} {size(p.rss_kib)}" for p in st.top_processes[:3])))
    for d in st.disks:
        out.print(text(f"disk {d.path}: {gib(d.avail_kib)} free of {gib(d.size_kib)} ({d.mount})"))
    _render_releases(st)


def _render_cgroup(st: HostStatus) -> None:
    """The memory cgroup's limit beside MemAvailable, where one holds the daemon (else swapctl's commands on the
    host, where a daemon started by hand over SSH runs): in a container MemAvailable may be the host's."""
    cg, whose = (st.daemon_cgroup, "the daemon's") if st.daemons else (st.cgroups.own, "this connection's")
    if cg is None or cg.limit_kib is None:
        return
    kills = f"; the OOM killer killed {cg.oom_kill} in it" if cg.oom_kill else ""
    out.print(text(f"cgroup: {whose} {cg.path} ({cg.version}): limit {size(cg.limit_kib)}, {size(cg.current_kib)} in "
                   f"use, room {size(cg.room_kib())}{kills}"), style="bold yellow" if kills else None)


def _render_daemons(st: HostStatus) -> None:
    if not st.daemons:
        out.print(text("daemon: not running"), style="yellow")
    for p in st.daemons:
        out.print(text(f"daemon: pid {p.pid}  state {p.state}  cpu {p.cpu_pct:.0f}%  rss {size(p.rss_kib)}  "
                       f"up {duration(p.elapsed_s)}"), style="bold")
        exe = (p.exe or "?") + ("  (REPLACED OR DELETED on disk since it started)" if p.exe_deleted else "")
        out.print(text(f"  exe: {exe}"), style="red" if p.exe_deleted else None)
        out.print(text(f"  cmd: {p.args}"))
        out.print(text(f"  cwd: {p.cwd or '?'}"))
    for sock in st.daemon_listening:
        if sock.public:
            out.print(text(f"warning: {why_public(sock.address)}"), style="bold yellow")
    for p in st.leftovers:  # a fork that outlived its daemon: what a deploy waits out
        out.print(text(f"not the daemon: pid {p.pid} (one thread, up {duration(p.elapsed_s)}, rss {size(p.rss_kib)}) "
                       f"runs the binary: a fork a daemon left, not the daemon"), style="yellow")
    for p in st.not_daemons:  # another user's, or another program: what a deploy leaves alone
        out.print(text(f"not the daemon: pid {p.pid} (uid {p.uid}, runs {p.exe or '?'}) matches daemon.match"),
                  style="yellow")


def _render_gpus(st: HostStatus) -> None:
    if st.gpu_error:
        out.print(text(f"GPUs: {st.gpu_error}"), style="bold red" if st.gpu_hung else "yellow")
    else:
        # at 80 columns: two readings to a cell, whole; the throttle reasons (a list) fold in what is left
        from rich.table import Table  # here: 25 ms to import, and a host without GPUs or releases needs none

        g = Table(title="GPUs", title_justify="left")
        for col in ("#", "name\npcie", "memory\nutil", "power\ntemp", "sm clock", "ecc"):
            g.add_column(col, no_wrap=True)
        g.add_column("throttle", overflow="fold", ratio=1)
        for gpu in st.gpus:
            ecc = "-" if gpu.ecc_uncorrected is None else str(gpu.ecc_uncorrected)
            g.add_row(
                str(gpu.index), stacked(gpu.name, f"gen{gpu.pcie_gen} x{gpu.pcie_width}"),
                f"{gpu.memory_used_mib or 0:.0f}/{gpu.memory_total_mib or 0:.0f} MiB\n{gpu.utilization_pct or 0:.0f}%",
                f"{gpu.power_w or 0:.0f}/{gpu.power_limit_w or 0:.0f} W\n{gpu.temperature_c or 0:.0f}C",
                f"{gpu.sm_clock_mhz or 0:.0f}/{gpu.max_sm_clock_mhz or 0:.0f}", ecc,
                text(", ".join(gpu.active_throttles) or "-"),
                style="red" if gpu.ecc_uncorrected or gpu.active_throttles else None,
            )
        out.print(g)
        for app in st.gpu_processes:
            out.print(text(f"  GPU process {app.pid} {app.name} {app.used_mib or 0:.0f} MiB on {app.gpu_uuid}"))


def _rollback_target(st: HostStatus) -> str | None:
    if not st.releases:
        return None
    from .history_table import back_to, from_manifests  # rich.table: 25 ms, for hosts with releases

    releases, _ = from_manifests(st.releases)
    return back_to(releases, _current(releases, st), st.landings) or None


def _current(releases: dict[str, Release], st: HostStatus) -> str | None:
    """The release the binary path points at, of those read."""
    path = st.current_release or ""
    return next((i for i in releases if f"/releases/{i}/" in path), None)


def _render_releases(st: HostStatus) -> None:
    if st.releases:  # history's table: its numbers (`rollback --to N`) and headers, the same releases
        from .history_table import back_to, from_manifests, legend, releases_table, uploaded_from_here  # rich.table

        releases, skipped = from_manifests(st.releases)
        current = _current(releases, st)
        back = back_to(releases, current, st.landings)
        out.print(releases_table("releases", releases, current, back, uploaded_from_here(st.landings)))
        out.print(text(legend(back) + (f"   ({skipped} manifest{'s' * (skipped != 1)} left out: not one swapctl "
                                       "writes)" if skipped else "")))
    else:
        out.print("releases: none (swapctl has not deployed here)")
