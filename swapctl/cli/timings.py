"""`swapctl timings PATH...`: what the daemon's timing logs say, and before/after comparisons."""

from __future__ import annotations

import os
from dataclasses import asdict
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ..errors import BadInput
from ..facts.catalog import catalog as read_catalog
from ..logs import gpu
from ..logs.cuzk.figures import RunRow, Summary
from ..logs.fetch import host_path
from ..logs.gpu_figures import PARTS, GpuFigures, GpuReport, compare
from ..logs.timings import PHASE_SHARE, ByteRange, ReleasePart, RunReport, by_release, parse, parse_files
from ..remote import connect
from .common import (
    JsonOpt,
    PlaybookOpt,
    RootOptions,
    err,
    guarded,
    load_playbook,
    out,
    print_json,
    root,
    select_hosts,
    text,
    warn,
)

if TYPE_CHECKING:
    from ..gpu.samples import Sample

BAR = 30


def timings(
    ctx: typer.Context,
    paths: Annotated[list[Path] | None, typer.Argument(
        metavar="LOG", help="Log files (stdout and stderr of the daemon).")] = None,
    compare_: Annotated[tuple[Path, Path] | None, typer.Option(
        "--compare", help="Two logs, BEFORE AFTER: each phase's p50 and the change.")] = None,
    all_phases: Annotated[bool, typer.Option("--all", help="Show phases that never took time too.")] = False,
    by_release: Annotated[bool, typer.Option(
        "--by-release", help="PATH is a HOST: split its fetched daemon log by release, from its journal.")] = False,
    dest: Annotated[Path, typer.Option("--dest", help="Where fetch-logs put the logs (with --by-release).")] = Path(
        "logs"),
    plot: Annotated[Path | None, typer.Option("--plot", help="Also draw the timeline as a PNG here.")] = None,
    run: Annotated[str, typer.Option("--run", help="Which daemon runs of the log: N (1 is the first), last, or all.")
                   ] = "all",
    samples: Annotated[list[Path] | None, typer.Option(
        "--samples", help="GPU sample files (nvidia-smi dmon); default: those fetch-logs put beside the log.")] = None,
    playbook: PlaybookOpt = None,
    json: JsonOpt = False,
) -> None:
    """Phase times (count, p50, p95, max), GPU phase share per GPU and starvation signs from cuzk logs."""
    if run not in ("all", "last") and not run.isdecimal():
        guarded(lambda: _bad(f"--run {run!r}: give a run's number (1 is the first), last, or all"))
    if by_release:
        guarded(lambda: _by_release([str(p) for p in paths or []], dest, playbook, json, root(ctx)))
    guarded(lambda: _timings(paths or [], compare_, all_phases, json, plot, run, samples))


def _bad(message: str) -> int:
    raise BadInput(message)


def _by_release(targets: list[str], dest: Path, playbook_path: str | None, as_json: bool, opts: RootOptions) -> int:
    if len(targets) != 1:
        raise BadInput("--by-release takes one HOST (its log as fetch-logs saved it, and its journal)")
    book = load_playbook(playbook_path, opts)
    [spec] = select_hosts(book, targets)
    if book.daemon.journal:
        raise BadInput(f"--by-release splits a log file by the byte offsets in the host's journal; this daemon logs "
                       f"to its unit's journal: run timings on {host_path(dest, spec.name, f'{book.daemon.unit}.log')} "
                       f"(fetch-logs saves it there)")
    log = host_path(dest, spec.name, PurePosixPath(book.require_daemon().log).name)
    if not log.is_file():
        raise BadInput(f"{log}: no fetched log; run `swapctl fetch-logs {spec.name} --dest {dest}` first")
    with connect(spec) as host:
        catalog = read_catalog(host, book.daemon)
    warn(catalog.notes())
    parts = by_release(str(log), catalog.journal)
    if as_json:
        print_json({"host": spec.name, "log": str(log), "releases": [asdict(p) for p in parts]})
        return 0
    if not parts:
        raise BadInput(f"{spec.name}'s journal records no start with a log offset; deploy with swapctl first")
    out.print(_releases_table(f"{spec.name}: {log}", log, parts))
    return 0


def _releases_table(title: str, log: Path, parts: list[ReleasePart]) -> Table:
    """p50 per release, one column a release (all its starts' bytes read together), the current one
    rightmost; as many as the terminal's width holds (80 columns: three), with a line for the rest. A column
    a start, headed by its byte range, was all `…` at 80 columns."""
    order = sorted(parts, key=lambda p: p.from_byte)
    latest = list(dict.fromkeys(p.release for p in reversed(order)))[::-1]  # ordered by each one's latest start
    starts = {rel: [p for p in order if p.release == rel] for rel in latest}
    with open(log, "rb") as f:
        reports = {rel: parse([ByteRange(f, q.from_byte, q.to_byte) for q in qs]).figures()
                   for rel, qs in starts.items()}
    names = sorted({n for r in reports.values() for n, v in r.phases.items() if v.p50})
    room = max(1, (out.width - max((len(n) for n in [*names, "pageable share"]), default=0) - 4) // 15)
    shown = list(reports)[-room:]
    left = len(reports) - len(shown)
    t = Table(title=f"{title}, p50 per release (ms)" + (f"; {left} earlier release(s) left out at this width "
              "(--json has every start)" if left else ""), title_justify="left")
    t.add_column("phase")
    for rel in shown:
        n = len(starts[rel])
        t.add_column(f"{rel}\n{n} start{'s' * (n != 1)}", justify="right", no_wrap=True)
    for name in names:
        t.add_row(name, *(_ms(reports[rel].p50(name)) for rel in shown))
    t.add_row("GPU phase share", *(_pct(reports[rel].gpu_phase_share) for rel in shown), style="bold")
    t.add_row("pageable share", *(_pct(reports[rel].pageable_share) for rel in shown))
    t.add_row("proofs", *(str(reports[rel].jobs) for rel in shown))
    return t


def _readable(paths: list[Path]) -> None:
    for p in paths:
        if not os.access(p, os.R_OK) or p.is_dir():
            reason = "a directory" if p.is_dir() else "missing" if not p.exists() else "not readable"
            raise BadInput(f"{p}: cannot read ({reason})")


def _samples(logs: list[Path], given: list[Path] | None) -> list[Sample]:
    """The GPU samples named, or those fetch-logs saved beside the logs (DEST/<host>/)."""
    from ..gpu.samples import read_samples, samples_in

    if given:
        files = [f for p in given for f in (sorted(p.glob("gpu-samples-*.dmon")) if p.is_dir() else [p])]
        _readable(files)
        return read_samples(files)
    return [s for d in sorted({p.parent for p in logs}) for s in samples_in(d)]


def _read(paths: list[Path], run: str = "all", samples: list[Sample] | None = None) -> GpuReport:
    """The runs' figures with the GPU's own (logs.gpu.read)."""
    _readable(paths)
    log = parse_files([str(p) for p in paths])
    try:
        figures = log.figures(run)
    except IndexError:
        raise BadInput(f"--run {run}: {', '.join(map(str, paths))} holds {len(log.runs)} daemon run(s)") from None
    return gpu.read(log, run, samples, figures)


MAX_PANELS = 4  # runs drawn in one picture (~1,500 px high): 21 stacked made a 7,623-px PNG no screen shows


def _plot(paths: list[Path], png: Path, run: str, samples: list[Sample]) -> None:
    """The timeline of the runs --run picks, numbered as the text table numbers them; at most MAX_PANELS
    runs with proofs (the last of them), and a line saying which were left out."""
    from ..logs import plot as timeline

    streams = [open(p, "rb") for p in paths]
    try:
        runs = timeline.runs(streams)
    finally:
        for st in streams:
            st.close()
    views: list[timeline.Counters | None] = [None] * len(runs)
    if samples:  # the GPU's counters under each run's bars, through each run's epoch
        epochs = [r.epoch for r in parse_files([str(p) for p in paths]).runs]
        if len(epochs) == len(runs):
            views = [timeline.Counters(e, samples) if e else None for e in epochs]
    numbered = [(n, lanes, view) for n, (lanes, view) in enumerate(zip(runs, views, strict=True), 1)]
    if run != "all":
        numbered = numbered[-1:] if run == "last" else [x for x in numbered if x[0] == int(run)]
    drawn = [x for x in numbered if x[1]]
    if not drawn:
        raise BadInput(f"no TIMELINE lines in {', '.join(map(str, paths))}: nothing to plot (a TIMING=1 build "
                       f"writes them)")
    if len(drawn) > MAX_PANELS:
        err.print(text(f"timeline: the last {MAX_PANELS} of {len(drawn)} runs with proofs (runs "
                       f"{drawn[-MAX_PANELS][0]}-{drawn[-1][0]}); --run N draws another"), style="yellow")
        drawn = drawn[-MAX_PANELS:]
    names = [f"run {n} of {len(runs)}" for n, *_ in drawn] if len(runs) > 1 else None
    try:
        timeline.draw([x[1] for x in drawn], str(png), " ".join(p.name for p in paths), [x[2] for x in drawn],
                      names)
    except ImportError:
        raise BadInput("--plot draws with matplotlib, which this install lacks: pip install matplotlib") from None
    err.print(text(f"timeline: {png}"))


PART_MARKS = {"kernels": "█", "gpu_phase": "█", "copy": "▓", "barrier": "░", "queued": ":", "synthesis": "·"}
SHORT = {"kernels": "kernels", "gpu_phase": "GPU phase (copy not timed)", "copy": "copy",
         "barrier": "barrier waits", "queued": "queued, not started", "synthesis": "waiting for synthesis"}


def _gpu_said(report: GpuReport) -> None:
    """The three figures, PCIe RX and where each GPU's time went (from the log's phases): one block per
    run where the log holds several (a figure over builds mixed is no figure), else one."""
    rows = report.figures.runs
    if len(rows) > 1 and any(report.runs):
        for r, view in zip(rows, report.runs, strict=False):
            build = "pageable" if r.pageable_share else "pinned" if r.pageable_share == 0 else "?"
            wall = "-" if r.wall_ms is None else f"{r.wall_ms / 1000:.1f} s"
            out.print(text(f"run {r.run} ({build} buffers, {r.partitions} partitions, {wall}):"), style="bold")
            _gpu_block(view, "  ")
        return
    _gpu_block(report.gpus, "")


def _gpu_block(views: dict[str, GpuFigures], pad: str) -> None:
    if not any(v.samples for v in views.values()):
        out.print(text(f"{pad}GPU busy: no GPU samples (the sampler's files, fetched with the log; --samples FILE)"),
                  style="dim", soft_wrap=True)
    for g, v in views.items():
        lines = [_busy(v), f"duty cycle {_pct1(v.duty_cycle)} (dmon sm%: any kernel ran; {v.samples} readings)"
                 if v.duty_cycle is not None else None,
                 f"kernel share from the log {_pct(v.kernel_share)} (copy {_pct(v.copy_share)})"
                 if v.kernel_share is not None else "kernel share from the log: - (the log does not time the copy)"]
        out.print(text(f"{pad}GPU {g}: " + "; ".join(x for x in lines if x)), soft_wrap=True)
        for line in v.disagree:
            out.print(text(f"{pad}  {line}"), style="yellow", soft_wrap=True)
        extra = []
        if c := v.cycle_ms:
            extra.append(f"cycle {c.p50 / 1000:.2f} s ({c.min / 1000:.2f}-{c.max / 1000:.2f})")
        if v.rx_gpm_mibps is not None:
            per = f", {v.rx_per_partition_mib:,.0f} MiB a partition" if v.rx_per_partition_mib else ""
            extra.append(f"PCIe RX (GPM) {v.rx_gpm_mibps:,.0f} MiB/s{per}")
        if v.dropped:
            extra.append(f"{v.dropped} bogus GPM values dropped")
        if extra:
            out.print(text(f"{pad}  " + "; ".join(extra)), style="dim", soft_wrap=True)
        parts = v.time
        bar = "".join(PART_MARKS[k] * round(f * 50) for k, f in parts.items())
        out.print(text(f"{pad}  where the time goes (the log's phases) [{bar:<50}] "
                       + ", ".join(f"{SHORT[k]} {f * 100:.1f}%" for k, f in parts.items() if f >= 0.0005)),
                  soft_wrap=True)
        if cause := v.largest_idle_cause:
            out.print(text(f"{pad}  GPU {g} idles most while: {PARTS[cause]}"), style="yellow", soft_wrap=True)


def _busy(v: GpuFigures) -> str:
    if v.busy_mean is None:
        return "GPU busy (SM activity): - (no GPM counters here)" if v.samples else ""
    iv = v.busy_interval
    ci = f", 95% interval {iv[0]:.1f}-{iv[1]:.1f}" if iv else ""
    return f"GPU busy {_pct1(v.busy_mean)} (SM activity, GPM{ci})"


def _pct1(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _mbps(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} MB/s"


def _per_gpu(figures: RunReport, key: str) -> str:
    """A share (`key`: gpu_phase_share, timeline_share), and each GPU's where there are several."""
    overall: float | None = getattr(figures, key)
    if len(figures.gpus) <= 1:
        return _pct(overall)
    each = ", ".join(f"GPU {g} {_pct(getattr(d, key))}" for g, d in figures.gpus.items())
    return f"{each}; mean {_pct(overall)}"


def _runs_table(runs: list[RunRow]) -> Table:
    """Each run: when it began, how long it lived (to the next run's first line; the last to its own last
    line, `≥`), how long it proved (the span of its TIMELINE lines), its proofs and share. The proving span
    alone, headed "wall", read 0.3 s for runs that lived for minutes."""
    t = Table(title="daemon runs in the log", title_justify="left")
    for col in ("run", "first line (UTC)", "lived", "proving", "proofs", "partitions", "GPU phase share"):
        t.add_column(col, justify="left" if col in ("run", "first line (UTC)") else "right")
    for r, after in zip(runs, [*runs[1:], None], strict=True):
        proving = "-" if r.wall_ms is None else f"{r.wall_ms / 1000:.1f} s"
        t.add_row(str(r.run), (r.first_ts or "-")[:19], _lived(r, after), proving, str(r.jobs), str(r.partitions),
                  _pct(r.gpu_phase_share))
    return t


def _lived(r: RunRow, after: RunRow | None) -> str:
    """From the run's first line to the next run's first line, or (the last run) at least to its own last."""
    end = after.first_ts if after else r.last_ts
    if not r.first_ts or not end:
        return "-"
    seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(r.first_ts)).total_seconds()
    if seconds < 0:
        return "-"
    return ("" if after else "≥ ") + (f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _timings(paths: list[Path], pair: tuple[Path, Path] | None, all_phases: bool, as_json: bool,
             plot: Path | None, run: str, sample_paths: list[Path] | None) -> int:
    if pair:
        return _compare(pair, all_phases, as_json, run, sample_paths)
    if not paths:
        raise BadInput("give log files to read, or --compare BEFORE AFTER")
    found = _samples(paths, sample_paths)
    report = _read(paths, run, found)
    figures = report.figures
    if plot:
        _plot(paths, plot, run, found)
    if as_json:
        print_json(report.as_dict())
        return 0
    _phases_table(figures.phases, all_phases)
    if len(figures.runs) > 1:
        out.print(_runs_table(figures.runs))
    out.print(f"GPU phase share: {_per_gpu(figures, 'gpu_phase_share')}")
    out.print(text(f"  = {PHASE_SHARE}"), style="dim", soft_wrap=True)
    out.print(f"GPU_START..GPU_END share: {_per_gpu(figures, 'timeline_share')} "
              "(overstates: it counts the host's waits inside the GPU phase)", soft_wrap=True)
    _gpu_said(report)
    if figures.pageable_share is not None:
        out.print(f"partitions from pageable memory (is_pinned=false): {_pct(figures.pageable_share)} "
                  f"of {figures.partitions}")
    if figures.synth_to_gpu_ratio is not None:
        out.print(f"synthesis workers to keep one GPU fed (p50 synth / p50 GPU): {figures.synth_to_gpu_ratio:.2f}")
    s = figures.starved
    if s.likely and s.gap_between_partitions_ms:
        out.print(text(f"starved GPU: mutex_wait p50 {_ms(s.mutex_wait_p50_ms)} ms with gaps of "
                       f"{_ms(s.gap_between_partitions_ms.p50)} ms (p50) between partitions"), style="bold yellow")
    if s.barrier_wait_nonzero:
        out.print(text(f"barrier_wait > 0 in {s.barrier_wait_nonzero} partitions: the GPU waits for CPU prep"),
                  style="yellow")
    out.print(f"{figures.lines} lines, {figures.jobs} proofs, {figures.skipped_lines} lines not understood")
    return 0


def _phases_table(summaries: dict[str, Summary], all_phases: bool) -> None:
    """Each phase's count and percentiles, longest p50 first, with a bar of its p50."""
    phases = {k: v for k, v in summaries.items() if all_phases or (v.max or 0) > 0}
    top = max((v.p50 or 0 for v in phases.values()), default=0) or 1
    t = Table(title="phases (ms)", title_justify="left")
    for col in ("phase", "count", "p50", "p95", "max", ""):
        t.add_column(col, justify="left" if col in ("phase", "") else "right")
    for name, v in sorted(phases.items(), key=lambda kv: -(kv[1].p50 or 0)):
        t.add_row(name, str(v.count), _ms(v.p50), _ms(v.p95), _ms(v.max),
                  "█" * max(1, round((v.p50 or 0) / top * BAR)) if v.p50 else "")
    out.print(t)


def _compare(pair: tuple[Path, Path], all_phases: bool, as_json: bool, run: str,
             sample_paths: list[Path] | None) -> int:
    """`--compare BEFORE AFTER`: each phase's p50 before and after, the shares, and GPU busy."""
    result = compare(_read([pair[0]], run, _samples([pair[0]], sample_paths)),
                     _read([pair[1]], run, _samples([pair[1]], sample_paths)))
    if as_json:
        print_json(result.as_dict())
        return 0
    t = Table(title=f"before {pair[0]}  ->  after {pair[1]}", title_justify="left")
    for col in ("phase", "p50 before (ms)", "p50 after (ms)", "change"):
        t.add_column(col, justify="left" if col == "phase" else "right")
    for name, row in result.phases.items():
        if not all_phases and not (row.before_p50 or row.after_p50):
            continue
        change = row.change_pct
        style = None if change is None or abs(change) < 5 else ("green" if change < 0 else "red")
        t.add_row(name, _ms(row.before_p50), _ms(row.after_p50), "-" if change is None else f"{change:+.1f}%",
                  style=style)
    out.print(t)
    for pair_, label in ((result.gpu_phase_share, "GPU phase share (held GPU / wall; not how busy the GPU is)"),
                         (result.timeline_share, "GPU_START..GPU_END share (overstates)")):
        out.print(f"{label}: {_pct(pair_.before)} -> {_pct(pair_.after)}")
    for g, busy in result.gpu_busy.items():
        out.print(f"GPU busy, GPU {g} (SM activity): {_pct1(busy.before)} -> {_pct1(busy.after)}", style="bold")
    return 0
