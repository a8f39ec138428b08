"""`swapctl status HOST...`: daemon, memory, GPUs, other sessions, disk, releases."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from .. import playbook as pb
from ..errors import ExitCode, SwapctlError
from ..facts.status import HostStatus, gather
from ..remote.group import on_hosts
from .common import (
    JsonOpt,
    LimitOpt,
    PlaybookOpt,
    duration,
    err,
    gib,
    guarded,
    out,
    print_json,
    select_hosts,
    size,
    text,
    worst,
)


def status(
    hosts: Annotated[list[str], typer.Argument(help="Host names, user@address:port, or @group.")],
    playbook: PlaybookOpt = None,
    limit: LimitOpt = None,
    json: JsonOpt = False,
) -> None:
    """Show the daemon, memory, GPUs, other sessions, disk and releases of each host."""
    guarded(lambda: _status(hosts, playbook, json, limit))


def _status(targets: list[str], playbook_path: str | None, as_json: bool, limit: str | None = None) -> int:
    book = pb.load(playbook_path, required=False)
    specs = select_hosts(book, targets, limit)
    results = on_hosts(specs, lambda host: gather(host, book.daemon))
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
                doc[name] = {k: v for k, v in result.__dict__.items() if k != "processes"}
        print_json({"hosts": doc})
    else:
        for result in results.values():
            if isinstance(result, BaseException):
                err.print(text(f"swapctl: {result}"), style="bold red")
            else:
                render(result)
    return worst(codes)


def render(st: HostStatus) -> None:
    mem = st.memory
    out.rule(text(f"{st.host}  ({st.hostname}, {st.arch})"))
    out.print(text(
        f"memory: {gib(mem.available_kib)} available of {gib(mem.total_kib)}   "
        f"load: {st.load[0]:.2f} {st.load[1]:.2f} {st.load[2]:.2f}"))

    if st.swapping:
        out.print(text("a swap is in progress on this host (swapctl's swap script holds its lock)"),
                  style="bold yellow")
    if not st.daemons:
        out.print(text("daemon: not running"), style="yellow")
    for p in st.daemons:
        out.print(text(f"daemon: pid {p.pid}  state {p.state}  cpu {p.cpu_pct:.0f}%  rss {size(p.rss_kib)}  "
                       f"up {duration(p.elapsed_s)}"), style="bold")
        exe = (p.exe or "?") + ("  (REPLACED OR DELETED on disk since it started)" if p.exe_deleted else "")
        out.print(text(f"  exe: {exe}"), style="red" if p.exe_deleted else None)
        out.print(text(f"  cmd: {p.args}"))
        out.print(text(f"  cwd: {p.cwd or '?'}"))

    if st.gpu_error:
        out.print(text(f"GPUs: {st.gpu_error}"), style="yellow")
    else:
        g = Table(title="GPUs", title_justify="left")
        for col in ("#", "name", "memory", "util", "temp", "power", "sm clock", "throttle", "ecc", "pcie"):
            g.add_column(col)
        for gpu in st.gpus:
            ecc = "-" if gpu.ecc_uncorrected is None else str(gpu.ecc_uncorrected)
            g.add_row(
                str(gpu.index), text(gpu.name),
                f"{gpu.memory_used_mib or 0:.0f}/{gpu.memory_total_mib or 0:.0f} MiB",
                f"{gpu.utilization_pct or 0:.0f}%", f"{gpu.temperature_c or 0:.0f}C",
                f"{gpu.power_w or 0:.0f}/{gpu.power_limit_w or 0:.0f} W",
                f"{gpu.sm_clock_mhz or 0:.0f}/{gpu.max_sm_clock_mhz or 0:.0f}",
                text(",".join(gpu.active_throttles) or "-"), ecc,
                f"gen{gpu.pcie_gen} x{gpu.pcie_width}",
                style="red" if gpu.ecc_uncorrected or gpu.active_throttles else None,
            )
        out.print(g)
        for app in st.gpu_processes:
            out.print(text(f"  GPU process {app.pid} {app.name} {app.used_mib or 0:.0f} MiB on {app.gpu_uuid}"))

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
    if st.releases:
        r = Table(title="releases", title_justify="left")
        for col in ("", "sha256", "created", "by", "status", "command line"):
            r.add_column(col, overflow="fold")
        for rel in st.releases:
            current = st.current_release is not None and rel.get("sha256", "")[:12] in st.current_release
            r.add_row("*" if current else "", text(rel.get("sha256", "")[:12]), text(rel.get("created", "")),
                      text(rel.get("by", "")), text(rel.get("status", "")), text(" ".join(rel.get("argv", []))))
        out.print(r)
    else:
        out.print("releases: none (swapctl has not deployed here)")
