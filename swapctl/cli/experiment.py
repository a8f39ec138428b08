"""`swapctl experiment HOST --binary B`: try a build on a host and get a verdict, with the evidence.

The baseline is what the running release did since its last start (its log and GPU samples), measured
for --baseline first when that holds too few proofs. Then B is deployed as `deploy` does it, runs for
--for or until --proofs N, and its log and samples are compared with the baseline's. B is kept or
rolled back as --then says; Ctrl-C in the window rolls back, never leaves it half decided.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer

from .. import playbook as pb
from ..errors import BadInput, Refused, SwapctlError
from ..experiment import MIN_PROOFS, Verdict, enough, verdict
from ..gpu.sampler import fetch_patterns, start_sampler
from ..gpu.samples import samples_in
from ..logs.fetch import LogFetcher
from ..logs.timings import Run, _Range, parse
from ..remote import connect
from ..swap import journal
from ..swap.deploy import Swap, samplable
from ..swap.deploy import deploy as run_deploy
from ..swap.deploy import rollback as run_rollback
from .common import JsonOpt, PlaybookOpt, err, guarded, out, print_json, select_hosts, text
from .deploy import _confirm, show_plan

POLL_S = 2.0


def seconds(value: str) -> float:
    """`90`, `90s`, `10m`, `1h` -> seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", value.strip())
    if not m:
        raise BadInput(f"{value!r}: give a duration such as 90s, 10m or 1h")
    return float(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[m[2]]


def experiment(
    host: Annotated[str, typer.Argument(help="One host: a name, user@address:port.")],
    binary: Annotated[str, typer.Option("--binary", "-b", help="The build to try (a local file).")],
    for_: Annotated[str, typer.Option("--for", help="How long B runs before the verdict (90s, 10m, 1h).")] = "10m",
    proofs: Annotated[int | None, typer.Option("--proofs", help="Or until B has made this many proofs.")] = None,
    baseline: Annotated[str, typer.Option(
        "--baseline", help="Measure the running release this long first, if its log since its start is too small.")
    ] = "10m",
    min_proofs: Annotated[int, typer.Option("--min-proofs", help="Proofs each side needs for a verdict.")] = MIN_PROOFS,
    then: Annotated[str, typer.Option("--then", help="keep | rollback | ask (at a terminal; else rollback).")] = "ask",
    report: Annotated[Path | None, typer.Option("--report", help="Also write the verdict as one HTML file.")] = None,
    dest: Annotated[Path, typer.Option("--dest", help="Where the logs and samples are fetched to.")] = Path("logs"),
    playbook: PlaybookOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before the swap.")] = False,
    json: JsonOpt = False,
) -> None:
    """Swap B in, let it work, and say what changed against the build before it; keep it or roll back."""
    def checked() -> int:
        if then not in ("keep", "rollback", "ask"):
            raise BadInput(f"--then {then!r}: keep, rollback or ask")
        return _experiment(host, binary, seconds(for_), proofs, seconds(baseline), min_proofs, then, report, dest,
                           playbook, yes, json)

    guarded(checked)


class Window:
    """The daemon's log and GPU samples as fetched so far, and the runs in a byte range of the log."""

    def __init__(self, host, book: pb.Playbook, dest: Path):
        self.book, self.fetcher = book, LogFetcher(host, dest)
        self.log_remote = book.require_daemon().log
        self.local = dest / host.name / PurePosixPath(self.log_remote).name
        self.samples_dir = dest / host.name
        self.patterns = [self.log_remote] + fetch_patterns(book.daemon.state_dir)

    def fetch(self) -> None:
        self.fetcher.fetch(self.patterns)

    def runs(self, start: int, end: int | None = None) -> list[Run]:
        if not self.local.exists():
            return []
        with open(self.local, "rb") as f:
            size = f.seek(0, 2)
            return parse([_Range(f, start, size if end is None else min(end, size))]).runs

    def samples(self) -> list:
        return samples_in(self.samples_dir)


def _side_runs(runs: list[Run]) -> list[Run]:
    """The runs that proved something: a restart that never got to work is no evidence either way."""
    return [r for r in runs if r.jobs or r.pinned + r.pageable]


def _baseline(sw: Swap, win: Window, wait_s: float, min_proofs: int) -> tuple[int, list[Run]]:
    """Where the running release's log starts, and its last run; measured for wait_s first if it is small."""
    catalog = sw.catalog()
    starts = [int(e["log_offset"]) for e in catalog.journal
              if e.get("log_offset") is not None and e.get("current") == catalog.current]
    start = starts[-1] if starts else 0
    win.fetch()
    runs = win.runs(start)[-1:]
    if not runs or runs[0].jobs < min_proofs:
        err.print(text(f"baseline: {runs[0].jobs if runs else 0} proofs since the running release started; "
                       f"measuring it for {wait_s:g} s first"))
        time.sleep(wait_s)
        win.fetch()
        runs = win.runs(start)[-1:]
    if not runs or runs[0].jobs < min_proofs:
        raise Refused(f"baseline too small: {runs[0].jobs if runs else 0} proofs from the running release "
                      f"(need {min_proofs}); give it work or a longer --baseline. Nothing changed", host=sw.host.name)
    return start, runs


def _watch(win: Window, start: int, for_s: float, proofs: int | None, baseline: list[Run]) -> None:
    """Waits for the window to end, saying how B does against the baseline as it goes."""
    deadline = time.monotonic() + for_s
    base_p50 = baseline[-1].report()["phases"].get("ntt_kernels", {}).get("p50")
    while time.monotonic() < deadline:
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        win.fetch()
        runs = win.runs(start)
        done = sum(r.jobs for r in runs)
        ntt = runs[-1].report()["phases"].get("ntt_kernels", {}).get("p50") if runs else None
        left = max(0.0, deadline - time.monotonic())
        sm = [x.sm_pct for x in win.samples()[-10:] if x.sm_pct is not None]
        busy = f", GPU sm% {sum(sm) / len(sm):.0f} (last {len(sm)} readings)" if sm else ""
        err.print(text(f"window: {done} proofs, ntt_kernels p50 {_ms(ntt)} (baseline {_ms(base_p50)}){busy}, "
                       f"{left:.0f} s left"), style="dim")
        if proofs is not None and done >= proofs:
            return


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


def _decide(then: str, v: Verdict) -> str:
    if then != "ask":
        return then
    if not sys.stdin.isatty():
        return "rollback"
    return "keep" if typer.confirm("keep the new build?", err=True) else "rollback"


def _experiment(target: str, binary: str, for_s: float, proofs: int | None, baseline_s: float, min_proofs: int,
                then: str, report: Path | None, dest: Path, playbook_path: str | None, yes: bool,
                as_json: bool) -> int:
    book = pb.load(playbook_path)
    book.require_daemon()
    specs = select_hosts(book, [target])
    if len(specs) != 1:
        raise BadInput(f"experiment takes one host; {target} names {len(specs)}")
    with connect(specs[0]) as host:
        sw = Swap(host, book)
        win = Window(host, book, dest)
        situation = sw.situation()
        running = situation.daemon
        if running is None:
            raise Refused("no daemon runs: an experiment compares B with the running build", host=host.name)
        if samplable(situation.status):  # no nvidia-smi, or a hung one: the log's figures alone
            start_sampler(host, book.daemon.state_dir, running.pid)
        base_start, base_runs = _baseline(sw, win, baseline_s, min_proofs)
        plan = sw.plan(binary)
        show_plan(plan, False, book.daemon.secret_env)
        if plan.unchanged:
            raise BadInput("B is the build that runs already: nothing to compare", host=host.name)
        _confirm(plan, yes)
        try:
            outcome = run_deploy(sw, plan)
        except SwapctlError as exc:
            err.print(text(f"verdict: B did not come up ({exc}); the deploy's own rollback decided"), style="bold red")
            raise
        new_start = int(outcome.log_offset or 0)
        decision = "rollback"
        try:
            _watch(win, new_start, for_s, proofs, base_runs)
            win.fetch()
            before = _side_runs(win.runs(base_start, new_start))[-1:] or base_runs
            after = _side_runs(win.runs(new_start))
            v = verdict(before, after, win.samples())
            if not enough(v.after, min_proofs):
                err.print(text(f"B made {v.after.proofs} proofs in the window (need {min_proofs}): too few to judge"),
                          style="bold yellow")
            _show(v, as_json)
            decision = _decide(then, v)
        except KeyboardInterrupt:
            err.print(text("interrupted in the window: rolling back to the build before B"), style="bold yellow")
            decision, v = "rollback", None
        finally:
            if decision == "rollback":
                run_rollback(sw, sw.plan_rollback())
                err.print(text(f"{host.name}: rolled back; the build before B runs again"), style="bold")
            else:
                err.print(text(f"{host.name}: keeping B ({(outcome.new_sha or '')[:12]})"), style="bold")
        journal.write(sw.ctx, {"action": "experiment", "release": outcome.new_sha, "decision": decision,
                               "verdict": v.summary if v else "interrupted in the window"})
        if report and v:
            from ..report import write_html

            write_html(report, v, host.name, binary, win, (base_start, new_start))
            err.print(text(f"report: {report}"))
    return 0 if v else 3


def _show(v: Verdict, as_json: bool) -> None:
    if as_json:
        print_json(v.as_dict())
        return
    out.print(text(f"verdict: {v.summary}"), style="bold", soft_wrap=True)
    a, b = v.before, v.after
    out.print(text(f"{'':>14}{'before':>12}{'B':>12}"))
    out.print(text(f"{'proofs':>14}{a.proofs:>12}{b.proofs:>12}"))
    out.print(text(f"{'proofs/h':>14}{_num(a.proofs_per_hour):>12}{_num(b.proofs_per_hour):>12}"))
    out.print(text(f"{'phase share':>14}{_pct(a.phase_share):>12}{_pct(b.phase_share):>12}"))
    for g in sorted(set(a.gpu_busy) | set(b.gpu_busy)):
        out.print(text(f"{f'GPU {g} busy':>14}{_pct1(a.gpu_busy.get(g)):>12}{_pct1(b.gpu_busy.get(g)):>12}"))
    for line in v.lines():
        out.print(text(line), soft_wrap=True)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _pct1(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


