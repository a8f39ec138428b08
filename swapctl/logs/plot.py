"""A timeline picture of a cuzk log: per worker, each partition's synthesis, copy and GPU phase.

Built from the TIMELINE lines (`TIMELINE,offset_ms,EVENT,job,detail`): SYNTH_START..SYNTH_END is
synthesis, GPU_PICKUP..GPU_START the host's preparation and host-to-device copy, GPU_START..GPU_END
the GPU phase. The white between the GPU bars is the GPU waiting: what a starved GPU looks like.
"""

from __future__ import annotations

import re
from typing import IO, Iterable

LINE = re.compile(rb"TIMELINE,(\d+(?:\.\d+)?),(\w+),([^,\s]+)((?:,[\w.]+=[^,\s]*)*)")
PHASES = {"SYNTH_START": ("synthesis", "start"), "SYNTH_END": ("synthesis", "end"),
          "GPU_PICKUP": ("copy", "start"), "GPU_START": ("gpu", "start"),
          "GPU_END": ("gpu", "end")}
COLOURS = {"synthesis": "#4c72b0", "copy": "#dd8452", "gpu": "#55a868"}


def intervals(streams: Iterable[IO[bytes]]) -> dict[str, list[tuple[str, float, float]]]:
    """lane -> [(phase, start_ms, end_ms)]; lanes are `synthesis` and `GPU worker N`."""
    lanes: dict[str, list[tuple[str, float, float]]] = {}
    opened: dict[tuple, float] = {}
    for stream in streams:
        for line in stream:
            if b"TIMELINE," not in line:
                continue
            m = LINE.search(line)
            if not m or m[2].decode() not in PHASES:
                continue
            at, event, job = float(m[1]), m[2].decode(), m[3]
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
    return lanes


def draw(lanes: dict[str, list[tuple[str, float, float]]], path: str, title: str) -> None:
    """Writes the timeline as a PNG (matplotlib, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = sorted(lanes, key=lambda n: (n != "synthesis", n))
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.7 * len(names)))
    for row, name in enumerate(names):
        for phase in COLOURS:
            bars = [(s / 1000, (e - s) / 1000) for p, s, e in lanes[name] if p == phase]
            if bars:
                ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=COLOURS[phase])
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("seconds since the daemon started")
    ax.set_title(title)
    ax.legend(handles=[Patch(color=c, label=p) for p, c in COLOURS.items()], loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
