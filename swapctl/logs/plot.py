"""A timeline picture of a cuzk log: per worker, each partition's synthesis, copy and GPU phase.

Built from the TIMELINE lines (`TIMELINE,offset_ms,EVENT,job,detail`): SYNTH_START..SYNTH_END is
synthesis, GPU_PICKUP..GPU_START the host's preparation and host-to-device copy, GPU_START..GPU_END
the GPU phase. The white between the GPU bars is the GPU waiting: what a starved GPU looks like.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from os import PathLike
from typing import IO, TYPE_CHECKING, Any

from .timings import RESTART_MS, START, Readable, lines

if TYPE_CHECKING:
    from ..gpu.samples import Sample

LINE = re.compile(rb"TIMELINE,(\d+(?:\.\d+)?),(\w+),([^,\s]+)((?:,[\w.]+=[^,\s]*)*)")
PHASES = {"SYNTH_START": ("synthesis", "start"), "SYNTH_END": ("synthesis", "end"),
          "GPU_PICKUP": ("copy", "start"), "GPU_START": ("gpu", "start"),
          "GPU_END": ("gpu", "end")}
COLOURS = {"synthesis": "#4c72b0", "copy": "#dd8452", "gpu": "#55a868"}
# A run's axis spans at most this many of its median bars: on the 14-inch figure one is then about 10 px wide.
# A longer run shows its last stretch (a 3-minute sandbox window, bars of 0.05-0.4 s, drew each under 3 px).
READABLE_BARS = 120
VISIBLE = 0.001  # a part of where_bars() under 0.1% of the time is under a pixel wide: not drawn, no entry
BESIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0, "fontsize": "small"}


Lanes = dict[str, list[tuple[str, float, float]]]
Dest = str | PathLike[str] | IO[bytes]  # where a PNG goes: a path or a binary file


def label(text: str) -> str:
    """`text` as a label that can be drawn: a control, a line break or a bidi mark as `?`, 80 characters at
    most (a longer one ends in `…`)."""
    plain = "".join(ch if ch.isprintable() else "?" for ch in text)
    return plain if len(plain) <= 80 else plain[:79] + "…"


@contextmanager
def _pyplot() -> Iterator[Any]:
    """matplotlib's pyplot, drawing with no display, every text as plain text (a `$...$` from a log is no
    mathtext)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"text.parse_math": False}):
        yield plt


def intervals(streams: Iterable[Readable]) -> Lanes:
    """lane -> [(phase, start_ms, end_ms)] over every run; lanes are `synthesis` and `GPU worker N`."""
    lanes: Lanes = {}
    for run in runs(streams):
        for lane, bars in run.items():
            lanes.setdefault(lane, []).extend(bars)
    return lanes


def runs(streams: Iterable[Readable]) -> list[Lanes]:
    """The lanes of each daemon run, split as the text table splits them (swapctl.logs.cuzk.log): a new run at
    each start line, or where TIMELINE offsets go back; a run with no TIMELINE line (no proof) keeps its place
    with no lanes, so run N here is run N there."""
    out: list[Lanes] = [{}]
    seen = False  # a line of the run being read (a start line opens a new run only after one)
    opened: dict[tuple[str, bytes, bytes | None, str], float] = {}
    last = None
    for line in lines(streams):
        if START in line and seen:
            out.append({})
            opened, last = {}, None
        seen = True
        if not line.startswith(b"TIMELINE,"):
            continue
        m = LINE.match(line)
        if not m or m[2].decode() not in PHASES:
            continue
        at, event, job = float(m[1]), m[2].decode(), m[3]
        if last is not None and at < last - RESTART_MS:
            out.append({})
            opened = {}
        last = at if last is None else max(last, at)
        lanes = out[-1]
        fields = dict(kv.split(b"=", 1) for kv in m[4].split(b",") if b"=" in kv)
        phase, edge = PHASES[event]
        worker = label(fields.get(b"worker", b"0").decode("utf-8", "replace"))
        key = (job, fields.get(b"partition"), worker if phase != "synthesis" else "")
        if event == "GPU_START":  # the copy ends where the GPU phase starts
            if (begin := opened.pop(("copy", *key), None)) is not None:
                lanes.setdefault(f"GPU worker {worker}", []).append(("copy", begin, at))
        if edge == "start":
            opened[(phase, *key)] = at
        elif (begin := opened.pop((phase, *key), None)) is not None:
            lane = "synthesis" if phase == "synthesis" else f"GPU worker {worker}"
            lanes.setdefault(lane, []).append((phase, begin, at))
    return out if seen else []


@dataclass(frozen=True)
class Counters:
    """The GPU's samples to draw under one run's bars, placed on its time axis through its epoch."""

    epoch: datetime
    samples: list[Sample]


def draw(runs: list[Lanes], path: Dest, title: str, gpu: Sequence[Counters | None] | None = None,
         names: Sequence[str] | None = None) -> None:
    """Writes the timeline as a PNG (matplotlib, no display needed) to a path or a binary file: one axis
    per daemon run, each on its own time axis (offsets start again with each run). `gpu`, one per run (None
    for a run without): its sm% and PCIe RX are drawn under that run's bars. `names`, one per run: what each
    axis is titled after `title` (`run 3 of 21`, as the text table numbers it)."""
    with _pyplot() as plt:
        fig = figure(plt, runs, title, gpu, names)
        fig.savefig(path, dpi=110, format="png", bbox_inches="tight")
        plt.close(fig)


def shown(lanes: Lanes) -> tuple[float, float, float]:
    """(first, last, whole): the seconds of a run its axis shows, and how long the run's bars span. Past
    READABLE_BARS of its median bars, the last that many; the whole run otherwise."""
    bars = [(s, e) for b in lanes.values() for _, s, e in b]
    if not bars:
        return 0.0, 0.0, 0.0
    lo, hi = min(s for s, _ in bars) / 1000, max(e for _, e in bars) / 1000
    widths = sorted(e - s for s, e in bars if e > s)
    span = widths[len(widths) // 2] / 1000 * READABLE_BARS if widths else hi - lo
    return max(lo, hi - span), hi, hi - lo


def figure(plt: Any, runs: list[Lanes], title: str, gpu: Sequence[Counters | None] | None = None,
           names: Sequence[str] | None = None) -> Any:
    """The timeline's matplotlib figure (draw() writes it): legends beside the axes, never on the bars, and
    an entry only for a phase drawn."""
    from matplotlib.patches import Patch

    title = label(title)
    if names is None and len(runs) > 1:
        names = [f"run {i + 1} of {len(runs)}" for i in range(len(runs))]
    rows = []
    for i, lanes in enumerate(runs):
        rows.append(("lanes", i, 1.2 + 0.7 * len(lanes)))
        if gpu and i < len(gpu) and gpu[i]:
            rows.append(("gpu", i, 2.0))
    fig, axes = plt.subplots(len(rows), 1, figsize=(14, sum(h for *_, h in rows)), squeeze=False,
                             gridspec_kw={"height_ratios": [h for *_, h in rows]})
    bars_ax, drawn = {}, set()
    for (kind, i, _), [ax] in zip(rows, axes, strict=False):
        if kind == "lanes":
            drawn |= _lanes(ax, runs[i], f"{title}: {names[i]}" if names else title)
            bars_ax[i] = ax
        elif gpu and (counters := gpu[i]):
            _gpu(ax, counters, bars_ax[i])
    if drawn:
        axes[0][0].legend(handles=[Patch(color=c, label=p) for p, c in COLOURS.items() if p in drawn], **BESIDE)
    fig.tight_layout()
    return fig


def _lanes(ax: Any, lanes: Lanes, title: str) -> set[str]:
    """Draws a run's bars, its last stretch where it is long (shown()); returns the phases drawn."""
    names = sorted(lanes, key=lambda n: (n != "synthesis", n))
    first, last, whole = shown(lanes)
    drawn = set()
    for row, name in enumerate(names):
        for phase in COLOURS:
            bars = [(s / 1000, (e - s) / 1000) for p, s, e in lanes[name] if p == phase and e / 1000 >= first]
            if bars:
                ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=COLOURS[phase])
                drawn |= {phase} if any(w > 0 for _, w in bars) else set()  # bars of 0 s show nothing
    ax.set_yticks(range(len(names)), names)
    if last - first < whole:
        pad = (last - first) * 0.01
        ax.set_xlim(first - pad, last + pad)
        title += f" (its last {last - first:.0f} s of {whole:.0f} s; the tables hold all of it)"
    ax.set_xlabel("seconds since this run's daemon started")
    ax.set_title(title)
    return drawn


def _gpu(ax: Any, view: Counters, bars: Any) -> None:
    """The GPU's own counters on the run's time axis: sm% per GPU, and PCIe RX on a second scale."""
    epoch, samples = view.epoch, view.samples
    lo, hi = bars.get_xlim()  # this run's seconds: the samples of other runs stay off its axis
    samples = [s for s in samples if s.time and lo <= (s.time - epoch).total_seconds() <= hi]
    ax.sharex(bars)
    rx_ax = ax.twinx()
    for g in sorted({s.gpu for s in samples}):
        mine = [s for s in samples if s.gpu == g and s.time]
        t = [(s.time - epoch).total_seconds() for s in mine if s.time]
        act = [(ti, s.sm_act_pct) for ti, s in zip(t, mine, strict=False) if s.sm_act_pct is not None]
        if act:  # GPU busy: the share of SMs busy over each second (GPM)
            ax.step(*zip(*act, strict=False), where="pre", color="#2a7a3b", label=f"GPU {g} SM activity (GPM)")
        ax.step(t, [s.sm_pct for s in mine], where="pre", color="#55a868", alpha=0.5, linestyle=":",
                label=f"GPU {g} duty cycle (sm%: any kernel)")
        rx = [(ti, s.gpm_rx_mibps if s.gpm_rx_mibps is not None else s.rx_mbps) for ti, s in zip(t, mine, strict=False)
              if s.gpm_rx_mibps is not None or s.rx_mbps is not None]
        if rx:
            rx_ax.step(*zip(*rx, strict=False), where="pre", color="#dd8452", alpha=0.7, label=f"GPU {g} PCIe RX")
    ax.set_ylim(0, 105)  # a GPU at 100% draws its line inside the axes, not on the frame
    ax.set_ylabel("%")
    rx_ax.set_ylabel("RX MiB/s (GPM) or MB/s")
    handles, labels = ax.get_legend_handles_labels()
    rx_handles, rx_labels = rx_ax.get_legend_handles_labels()
    if handles or rx_handles:  # one legend, beside the RX scale: none over the lines
        ax.legend(handles + rx_handles, labels + rx_labels, **{**BESIDE, "bbox_to_anchor": (1.07, 1.0)})
    ax.set_title("the GPU's own counters (nvidia-smi dmon, 1 s readings)", fontsize="small")


WHERE_COLOURS = {"kernels": "#55a868", "gpu_phase": "#55a868", "copy": "#dd8452",
                 "barrier": "#8172b2", "queued": "#64b5cd", "synthesis": "#c44e52"}


def where_bars(rows: list[tuple[str, dict[str, float]]], path: Dest) -> None:
    """One stacked bar per (label, parts): where each build's GPU time went, adding up to 100%."""
    with _pyplot() as plt:
        fig = where_figure(plt, rows)
        fig.savefig(path, dpi=110, format="png", bbox_inches="tight")
        plt.close(fig)


def where_figure(plt: Any, rows: list[tuple[str, dict[str, float]]]) -> Any:
    """where_bars()'s figure: its legend beside the bars, an entry only for a part drawn."""
    from matplotlib.patches import Rectangle

    rows = [(label(name), parts) for name, parts in rows]
    fig, ax = plt.subplots(figsize=(12, 0.8 + 0.6 * len(rows)))
    for y, (_, parts) in enumerate(rows):
        left = 0.0
        for k, f in parts.items():
            ax.barh(y, f * 100, left=left, color=WHERE_COLOURS.get(k, "#999999"), label=label(k) if y == 0 else None)
            if f >= 0.06:
                ax.text(left + f * 50, y, f"{f * 100:.0f}%", ha="center", va="center", fontsize="small")
            left += f * 100
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of wall time")
    handles, labels = [], []
    for _, parts in rows:
        for k, f in parts.items():
            if f >= VISIBLE and label(k) not in labels:  # a part of 0 draws nothing: no entry for it
                labels.append(label(k))
                handles.append(Rectangle((0, 0), 1, 1, color=WHERE_COLOURS.get(k, "#999999")))
    ax.legend(handles, labels, **BESIDE)
    ax.set_title("where the GPU's time went (from the log's phases)")
    fig.tight_layout()
    return fig
