"""A timeline picture of a cuzk log: per worker, each partition's synthesis, copy and GPU phase.

Built from the TIMELINE lines (`TIMELINE,offset_ms,EVENT,job,detail`): SYNTH_START..SYNTH_END is
synthesis, GPU_PICKUP..GPU_START the host's preparation and host-to-device copy, GPU_START..GPU_END
the GPU phase. The white between the GPU bars is the GPU waiting: what a starved GPU looks like.
"""

from __future__ import annotations

import re
from typing import IO, Iterable

from .timings import RESTART_MS, START, lines

LINE = re.compile(rb"TIMELINE,(\d+(?:\.\d+)?),(\w+),([^,\s]+)((?:,[\w.]+=[^,\s]*)*)")
PHASES = {"SYNTH_START": ("synthesis", "start"), "SYNTH_END": ("synthesis", "end"),
          "GPU_PICKUP": ("copy", "start"), "GPU_START": ("gpu", "start"),
          "GPU_END": ("gpu", "end")}
COLOURS = {"synthesis": "#4c72b0", "copy": "#dd8452", "gpu": "#55a868"}


Lanes = dict[str, list[tuple[str, float, float]]]


def intervals(streams: Iterable[IO[bytes]]) -> Lanes:
    """lane -> [(phase, start_ms, end_ms)] over every run; lanes are `synthesis` and `GPU worker N`."""
    lanes: Lanes = {}
    for run in runs(streams):
        for lane, bars in run.items():
            lanes.setdefault(lane, []).extend(bars)
    return lanes


def runs(streams: Iterable[IO[bytes]]) -> list[Lanes]:
    """The lanes of each daemon run: a new run at each start line, or where TIMELINE offsets go back."""
    out: list[Lanes] = [{}]
    opened: dict[tuple, float] = {}
    last = None
    for line in lines(streams):
        if START in line and out[-1]:
            out.append({})
            opened, last = {}, None
        if not line.startswith(b"TIMELINE,"):
            continue
        m = LINE.match(line)
        if not m or m[2].decode() not in PHASES:
            continue
        at, event, job = float(m[1]), m[2].decode(), m[3]
        if last is not None and at < last - RESTART_MS and out[-1]:
            out.append({})
            opened = {}
        last = at if last is None else max(last, at)
        lanes = out[-1]
        fields = dict(kv.split(b"=", 1) for kv in m[4].split(b",") if b"=" in kv)
        phase, edge = PHASES[event]
        worker = fields.get(b"worker", b"0").decode()
        key = (job, fields.get(b"partition"), worker if phase != "synthesis" else "")
        if event == "GPU_START":  # the copy ends where the GPU phase starts
            if (begin := opened.pop(("copy", *key), None)) is not None:
                lanes.setdefault(f"GPU worker {worker}", []).append(("copy", begin, at))
        if edge == "start":
            opened[(phase, *key)] = at
        elif (begin := opened.pop((phase, *key), None)) is not None:
            lane = "synthesis" if phase == "synthesis" else f"GPU worker {worker}"
            lanes.setdefault(lane, []).append((phase, begin, at))
    return [r for r in out if r]


def draw(runs: list[Lanes], path: str, title: str) -> None:
    """Writes the timeline as a PNG (matplotlib, no display needed): one axis per daemon run, each on
    its own time axis (offsets start again with each run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    heights = [1.2 + 0.7 * len(lanes) for lanes in runs]
    fig, axes = plt.subplots(len(runs), 1, figsize=(14, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for i, (lanes, [ax]) in enumerate(zip(runs, axes)):
        names = sorted(lanes, key=lambda n: (n != "synthesis", n))
        for row, name in enumerate(names):
            for phase in COLOURS:
                bars = [(s / 1000, (e - s) / 1000) for p, s, e in lanes[name] if p == phase]
                if bars:
                    ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=COLOURS[phase])
        ax.set_yticks(range(len(names)), names)
        ax.set_xlabel("seconds since this run's daemon started")
        ax.set_title(f"{title}: run {i + 1} of {len(runs)}" if len(runs) > 1 else title)
    axes[0][0].legend(handles=[Patch(color=c, label=p) for p, c in COLOURS.items()], loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
