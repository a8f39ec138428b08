"""Renders `swapctl experiment --report` from a saved H200 experiment (tests/data/h200-gpm/run1/default: its
log has the copy time a where-the-time-goes needs, its samples the GPM counters), with no
host: the report's own code (swapctl.experiment.html.write_html) on the log and GPU samples the run fetched.
`python tests/saved_report.py OUT.html`; scripts/plain-install runs it on an install with no extras."""

import sys
from pathlib import Path

from swapctl.experiment import verdict
from swapctl.experiment.html import write_html
from swapctl.gpu.samples import read_samples
from swapctl.logs.timings import ByteRange, parse

EXP = Path(__file__).resolve().parent / "data" / "h200-gpm" / "run1" / "default"


class SavedWindow:
    """What the experiment's Window gives the report, read from the saved files."""

    local = EXP / "cuzk.log"

    def runs(self, start: int, end: int | None = None):
        with open(self.local, "rb") as f:
            size = f.seek(0, 2)
            return parse([ByteRange(f, start, size if end is None else min(end, size))]).runs

    def samples(self) -> list:
        return read_samples([EXP / "gpu-samples.dmon"])


def render(out: Path) -> None:
    win = SavedWindow()
    data = win.local.read_bytes()
    second = data.index(b"cuzk-daemon starting", data.index(b"cuzk-daemon starting") + 1)
    b_start = data.rindex(b"\n", 0, second) + 1  # the pinned build's first line
    v = verdict(win.runs(0, b_start), win.runs(b_start), win.samples())
    write_html(out, v, "h200", "build/prover-pinned", win, (0, b_start))


if __name__ == "__main__":
    render(Path(sys.argv[1]))
