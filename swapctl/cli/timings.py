"""`swapctl timings PATH...`: what the daemon's timing logs say, and before/after comparisons."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer
from rich.table import Table

from .. import playbook as pb
from ..errors import BadInput
from ..logs.timings import by_release, compare, parse_files
from ..remote import connect
from ..swap.deploy import Swap
from .common import JsonOpt, PlaybookOpt, err, guarded, out, print_json, select_hosts, text

BAR = 30


def timings(
    paths: Annotated[list[Path] | None, typer.Argument(help="Log files (stdout and stderr of the daemon).")] = None,
    compare_: Annotated[tuple[Path, Path] | None, typer.Option(
        "--compare", help="Two logs, BEFORE AFTER: each phase's p50 and the change.")] = None,
    all_phases: Annotated[bool, typer.Option("--all", help="Show phases that never took time too.")] = False,
    by_release: Annotated[bool, typer.Option(
        "--by-release", help="PATH is a HOST: split its fetched daemon log by release, from its journal.")] = False,
    dest: Annotated[Path, typer.Option("--dest", help="Where fetch-logs put the logs (with --by-release).")] = Path(
        "logs"),
    plot: Annotated[Path | None, typer.Option("--plot", help="Also draw the timeline as a PNG here.")] = None,
    playbook: PlaybookOpt = None,
    json: JsonOpt = False,
) -> None:
    """Phase times (count, p50, p95, max), GPU busy fraction and starvation signs from cuzk logs."""
    if by_release:
        guarded(lambda: _by_release([str(p) for p in paths or []], dest, playbook, json))
    guarded(lambda: _timings(paths or [], compare_, all_phases, json, plot))


def _by_release(targets: list[str], dest: Path, playbook_path: str | None, as_json: bool) -> int:
    if len(targets) != 1:
        raise BadInput("--by-release takes one HOST (its log as fetch-logs saved it, and its journal)")
    book = pb.load(playbook_path)
    [spec] = select_hosts(book, targets)
    log = dest / spec.name / PurePosixPath(book.require_daemon().log).name
    if not log.is_file():
        raise BadInput(f"{log}: no fetched log; run `swapctl fetch-logs {spec.name} --dest {dest}` first")
    with connect(spec) as host:
        journal = list(Swap(host, book).catalog().journal)
    parts = by_release(str(log), journal)
    if as_json:
        print_json({"host": spec.name, "log": str(log), "releases": parts})
        return 0
    if not parts:
        raise BadInput(f"{spec.name}'s journal records no start with a log offset; deploy with swapctl first")
    t = Table(title=f"{spec.name}: {log}, p50 per release (ms)", title_justify="left")
    t.add_column("phase")
    for part in parts:
        t.add_column(f"{part['release']}\nbytes {part['from_byte']:,}-{part['to_byte']:,}", justify="right")
    names = sorted({n for part in parts for n, v in part["report"]["phases"].items() if v["p50"]})
    for name in names:
        t.add_row(name, *(_ms(part["report"]["phases"].get(name, {}).get("p50")) for part in parts))
    t.add_row("GPU busy", *(_pct(part["report"]["gpu_busy_fraction"]) for part in parts), style="bold")
    t.add_row("pageable share", *(_pct(part["report"]["pageable_share"]) for part in parts))
    t.add_row("proofs", *(str(part["report"]["jobs"]) for part in parts))
    out.print(t)
    return 0


def _read(paths: list[Path]) -> dict:
    for p in paths:
        if not os.access(p, os.R_OK) or p.is_dir():
            reason = "a directory" if p.is_dir() else "missing" if not p.exists() else "not readable"
            raise BadInput(f"{p}: cannot read ({reason})")
    return parse_files([str(p) for p in paths]).report()


def _plot(paths: list[Path], png: Path) -> None:
    from ..logs import plot as timeline

    streams = [open(p, "rb") for p in paths]
    try:
        lanes = timeline.intervals(streams)
    finally:
        for st in streams:
            st.close()
    if not lanes:
        raise BadInput(f"no TIMELINE lines in {', '.join(map(str, paths))}: nothing to plot (a TIMING=1 build "
                       f"writes them)")
    try:
        timeline.draw(lanes, str(png), " ".join(p.name for p in paths))
    except ImportError:
        raise BadInput("--plot needs matplotlib: pip install 'swapctl[plot]'") from None
    err.print(text(f"timeline: {png}"))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _timings(paths: list[Path], pair: tuple[Path, Path] | None, all_phases: bool, as_json: bool,
             plot: Path | None) -> int:
    if pair:
        before, after = _read([pair[0]]), _read([pair[1]])
        result = compare(before, after)
        if as_json:
            print_json(result)
            return 0
        t = Table(title=f"before {pair[0]}  ->  after {pair[1]}", title_justify="left")
        for col in ("phase", "p50 before (ms)", "p50 after (ms)", "change"):
            t.add_column(col, justify="left" if col == "phase" else "right")
        for name, row in result["phases"].items():
            if not all_phases and not (row["before_p50"] or row["after_p50"]):
                continue
            change = row["change_pct"]
            style = None if change is None or abs(change) < 5 else ("green" if change < 0 else "red")
            t.add_row(name, _ms(row["before_p50"]), _ms(row["after_p50"]),
                      "-" if change is None else f"{change:+.1f}%", style=style)
        out.print(t)
        for key, label in (("gpu_busy_fraction", "GPU busy (kernel time / wall)"),
                           ("timeline_busy_fraction", "GPU busy by TIMELINE (overstates)")):
            out.print(f"{label}: {_pct(result[key]['before'])} -> {_pct(result[key]['after'])}")
        return 0
    if not paths:
        raise BadInput("give log files to read, or --compare BEFORE AFTER")
    report = _read(paths)
    if plot:
        _plot(paths, plot)
    if as_json:
        print_json(report)
        return 0
    phases = {k: v for k, v in report["phases"].items() if all_phases or (v["max"] or 0) > 0}
    top = max((v["p50"] or 0 for v in phases.values()), default=0) or 1
    t = Table(title="phases (ms)", title_justify="left")
    for col in ("phase", "count", "p50", "p95", "max", ""):
        t.add_column(col, justify="left" if col in ("phase", "") else "right")
    for name, v in sorted(phases.items(), key=lambda kv: -(kv[1]["p50"] or 0)):
        t.add_row(name, str(v["count"]), _ms(v["p50"]), _ms(v["p95"]), _ms(v["max"]),
                  "█" * max(1, round((v["p50"] or 0) / top * BAR)) if v["p50"] else "")
    out.print(t)
    s = report["starved"]
    out.print(f"GPU busy (sum(mutex_held - barrier_wait) / wall): {_pct(report['gpu_busy_fraction'])}")
    out.print(f"GPU busy by TIMELINE GPU_START..GPU_END: {_pct(report['timeline_busy_fraction'])} "
              "(overstates: it counts the host's waits inside the GPU phase)")
    if report["pageable_share"] is not None:
        out.print(f"partitions from pageable memory (is_pinned=false): {_pct(report['pageable_share'])} "
                  f"of {report['partitions']}")
    if report["synth_to_gpu_ratio"] is not None:
        out.print(f"synthesis workers to keep one GPU fed (p50 synth / p50 GPU): {report['synth_to_gpu_ratio']:.2f}")
    gaps = s["gap_between_partitions_ms"]
    if s["likely"]:
        out.print(text(f"starved GPU: mutex_wait p50 {_ms(s['mutex_wait_p50_ms'])} ms with gaps of "
                       f"{_ms(gaps['p50'])} ms (p50) between partitions"), style="bold yellow")
    if s["barrier_wait_nonzero"]:
        out.print(text(f"barrier_wait > 0 in {s['barrier_wait_nonzero']} partitions: the GPU waits for CPU prep"),
                  style="yellow")
    out.print(f"{report['lines']} lines, {report['jobs']} proofs, {report['skipped_lines']} lines not understood")
    return 0
