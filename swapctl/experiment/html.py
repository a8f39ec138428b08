"""An experiment's verdict as one self-contained HTML file: tables, and the pictures as inline PNGs, so
it opens in a browser with no server and travels as one attachment."""

from __future__ import annotations

import base64
import html
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..gpu.samples import Sample
from ..logs import plot
from ..logs.gpu import PARTS
from ..logs.timings import ByteRange, Run
from .judge import Decision, Side, Verdict

STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}.sig{font-weight:bold}.noise{color:#888}
.verdict{font-size:1.2em;background:#f4f4f4;padding:.6em;border-left:4px solid #55a868}img{max-width:100%}
.verdict.none{border-left-color:#c44e52}"""


@dataclass(frozen=True)
class Facts:
    """What the experiment did, beside what it measured: the two builds, B's window, the decision."""

    before_sha: str
    after_sha: str
    began: float  # B's window, UTC seconds since the epoch
    seconds: float
    decision: Decision
    warmup: int
    before_says: str | None = None  # what each build said of itself when it was uploaded (`--version`)
    after_says: str | None = None


class Fetched(Protocol):
    """The window's files as fetched: the daemon log's local copy and the GPU samples."""
    local: Path

    def samples(self) -> list[Sample]: ...

    def runs(self, start: int, end: int | None = None) -> list[Run]: ...


def _png(buf: io.BytesIO) -> str:
    """A PNG drawn into `buf`, as a data: URL for an <img>."""
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _pct(x: float | None, scale: float = 100) -> str:
    return "-" if x is None else f"{x * scale:.1f}%"


def _sides(a: Side, b: Side) -> str:
    rows = [("proofs (after the warm-up)", a.proofs, b.proofs), ("partitions", a.partitions, b.partitions),
            ("wall time (s), from the warm-up's end to the window's end", f"{a.wall_s:.1f}", f"{b.wall_s:.1f}"),
            ("proofs per hour over that wall time (idle time included)", _rate(a.proofs_per_hour),
             _rate(b.proofs_per_hour)),
            ("GPU phase share", _pct(a.phase_share), _pct(b.phase_share))]
    for g in sorted(set(a.gpu_busy) | set(b.gpu_busy) | set(a.kernel_share) | set(b.kernel_share)):
        rows.append((f"GPU {g} busy (SM activity, GPM)", _pct(a.gpu_busy.get(g), 1), _pct(b.gpu_busy.get(g), 1)))
        rows.append((f"GPU {g} duty cycle (dmon sm%: any kernel ran)", _pct(a.duty_cycle.get(g), 1),
                     _pct(b.duty_cycle.get(g), 1)))
        rows.append((f"GPU {g} kernel share (from the log)", _pct(a.kernel_share.get(g)), _pct(b.kernel_share.get(g))))
    body = "".join(f"<tr><td>{html.escape(str(n))}</td><td>{x}</td><td>{y}</td></tr>" for n, x, y in rows)
    return f"<table><tr><th></th><th>before</th><th>B</th></tr>{body}</table>"


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _utc(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _what_ran(v: Verdict, f: Facts, before: list[Run], after: list[Run]) -> str:
    """The builds by sha256 and by what each says of itself and which GPU workers its start logged, when
    and how long each was read, its proofs, what became of B, whether the verdict stands."""
    first = next((r.first_ts for r in before if r.first_ts), None)
    last = next((r.last_ts for r in reversed(before) if r.last_ts), None)
    span = f"{(last - first).total_seconds():.0f} s of its log" if first and last else "-"
    rows = [("before", f.before_sha, f.before_says, workers(before), _utc(first.timestamp() if first else None), span,
             v.before.proofs),
            ("B", f.after_sha, f.after_says, workers(after), _utc(f.began), f"{f.seconds:.0f} s window",
             v.after.proofs)]
    body = "".join(f"<tr><td>{n}</td><td><code>{html.escape(sha)}</code></td><td>{html.escape(says or '-')}</td>"
                   f"<td>{html.escape(gpu)}</td><td>{when}</td><td>{long}</td><td>{proofs}</td></tr>"
                   for n, sha, says, gpu, when, long, proofs in rows)
    kept = ("B was kept: it runs now" if f.decision == Decision.KEEP
            else "B was rolled back: the build before it runs again")
    stands = f"no verdict: {html.escape(v.withheld)}" if v.withheld else "the verdict stands"
    head = "".join(f"<th>{h}</th>" for h in ("build", "sha256", "says of itself (--version)",
                                             "GPU workers (as its start logged)", "from", "for",
                                             f"proofs (after --warmup {f.warmup})"))
    return f"<table><tr>{head}</tr>{body}</table><p class=outcome>{kept}; {stands}.</p>"


def workers(runs: list[Run]) -> str:
    """`pipeline ×4`, `monolithic ×1`: the GPU workers the runs' starts logged (cuzk's engine shape); `-` where
    no start was read (a run whose start is before the log read)."""
    counts: dict[str, int] = {}
    for r in runs:
        for kind, n in r.gpu_workers.items():
            counts[kind] = counts.get(kind, 0) + n
    return ", ".join(f"{kind} ×{n}" for kind, n in sorted(counts.items())) or "-"


def _phases(v: Verdict) -> str:
    if v.withheld:  # the medians as read, and no change, interval, p or mark: there is no verdict
        head = "".join(f"<th>{h}</th>" for h in ("phase (ms)", "before p50", "B p50", "n"))
        body = "".join(f"<tr><td>{html.escape(n)}</td><td>{c.median_before:,.1f}</td><td>{c.median_after:,.1f}</td>"
                       f"<td>{c.n_before}+{c.n_after}</td></tr>" for n, c in v.phases.items())
        return f"<p>too few proofs to judge a change: the medians only.</p><table><tr>{head}</tr>{body}</table>"
    rows = []
    for name, c in v.phases.items():
        cls = "sig" if c.significant else "noise"
        change = f"{c.delta * 100:+.1f}%" if c.significant and c.delta is not None else "~"
        if c.delta is None and c.p is not None:  # a median of 0 before: its mean says what moved
            change = f"median 0 before: mean {c.mean_before or 0:,.2f} -> {c.mean_after or 0:,.2f}"
        ci = f"[{c.low * 100:+.1f}%, {c.high * 100:+.1f}%]" if c.low is not None and c.high is not None else "-"
        p = "-" if c.p is None else f"{c.p:.3f}"
        rows.append(f"<tr class={cls}><td>{html.escape(name)}</td><td>{c.median_before:,.1f} ± "
                    f"{c.spread_before * 100:.0f}%</td><td>{c.median_after:,.1f} ± {c.spread_after * 100:.0f}%</td>"
                    f"<td>{change}</td><td>{ci}</td><td>{p}</td><td>{c.n_before}+{c.n_after}</td></tr>")
    head = "<tr>" + "".join(f"<th>{h}</th>" for h in ("phase (ms)", "before p50", "B p50", "change", "95% CI", "p",
                                                      "n")) + "</tr>"
    return f"<table>{head}{''.join(rows)}</table>"


_PHASES_NOTE = """<p>medians with the 95% interval of the change (bootstrap of the median difference) and the
Mann-Whitney U p; <code>~</code>: not significant.</p>"""


def write_html(path: Path, v: Verdict, host: str, binary: str, win: Fetched, offsets: tuple[int, int],
               facts: Facts | None = None) -> None:
    """The report: the verdict line (or why there is none), what ran (`facts`), both builds' figures, every
    phase, where the time went, and each build's timeline with the GPU's counters under it."""
    samples = win.samples()
    pictures = []
    with open(win.local, "rb") as f:
        size = f.seek(0, 2)
        for label, (lo, hi) in (("before", (offsets[0], offsets[1])), ("B", (offsets[1], size))):
            lanes = [r for r in plot.runs([ByteRange(f, lo, hi)])[-1:] if r]
            views = None
            side_runs = win.runs(lo, hi)[-1:]
            if samples and side_runs and side_runs[0].epoch:
                views = [plot.Counters(side_runs[0].epoch, samples)]
            if lanes:
                buf = io.BytesIO()
                plot.draw(lanes, buf, f"{host}: {label}", views)
                pictures.append((label, _png(buf)))
    where_rows = [(f"{label} GPU {g}", parts) for label, s in (("before", v.before), ("B", v.after))
                  for g, parts in s.where.items()]
    where = None
    if where_rows:
        buf = io.BytesIO()
        plot.where_bars(where_rows, buf)
        where = _png(buf)
    drawn = {k for _, parts in where_rows for k, f in parts.items() if f >= plot.VISIBLE}  # no entry for the undrawn
    legend = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(t)}</li>" for k, t in PARTS.items() if k in drawn)
    imgs = "".join(f"<h3>timeline: {html.escape(label)}</h3><img alt='timeline {html.escape(label)}' src='{src}'>"
                   for label, src in pictures)
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>swapctl experiment: {html.escape(host)}</title>
<style>{STYLE}</style></head><body>
<h1>swapctl experiment on {html.escape(host)}</h1>
<p>B = <code>{html.escape(binary)}</code></p>
<p class="{"verdict none" if v.withheld else "verdict"}">{html.escape(v.summary)}</p>
{f"<h2>what ran</h2>{_what_ran(v, facts, win.runs(*offsets)[-1:], win.runs(offsets[1])[-1:])}" if facts else ""}
<h2>the two builds</h2>{_sides(v.before, v.after)}
<h2>phases</h2>{"" if v.withheld else _PHASES_NOTE}{_phases(v)}
<h2>where the time goes</h2>{f"<img alt='where the time goes' src='{where}'>" if where else "<p>no GPU phases</p>"}
<ul>{legend}</ul>
{imgs}
</body></html>"""
    path.write_text(doc)
