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
from ..errors import BadInput, Refused, SwapctlError, UnknownState
from ..experiment import LOOKS, MIN_PROOFS, Verdict, enough, moved, need, verdict, without_warmup
from ..gpu.sampler import fetch_patterns, start_sampler
from ..gpu.samples import Sample, samples_in
from ..logs.fetch import LogFetcher
from ..logs.stats import ALPHA
from ..logs.timings import Run, _Range, parse
from ..remote import Host, connect
from ..swap import journal
from ..swap.deploy import Daemon, Swap, samplable
from ..swap.deploy import deploy as run_deploy
from ..swap.deploy import rollback as run_rollback
from ..swap.journal_entry import JournalEntry
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
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Proofs after a daemon's start left out of the "
                                        "verdict (the first loads the SRS).")] = 1,
    resolve: Annotated[str | None, typer.Option(
        "--resolve", metavar="PCT", help="Run B for the proofs it needs to see a change this small (3%); "
                                         "--for bounds it.")
    ] = None,
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
                           playbook, yes, json, warmup, percent(resolve) if resolve else None)

    guarded(checked)


def percent(value: str) -> float:
    """`3%`, `3` -> 0.03."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)%?", value.strip())
    if not m or not 0 < float(m[1]) < 100:
        raise BadInput(f"--resolve {value!r}: give a change such as 3% (between 0 and 100)")
    return float(m[1]) / 100


class Window:
    """The daemon's log and GPU samples as fetched so far, and the runs in a byte range of the log."""

    def __init__(self, host: Host, book: pb.Playbook, dest: Path) -> None:
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

    def samples(self) -> list[Sample]:
        return samples_in(self.samples_dir)


def _side_runs(runs: list[Run]) -> list[Run]:
    """The runs that proved something: a restart that never got to work is no evidence either way."""
    return [r for r in runs if r.jobs or r.pinned + r.pageable]


def _baseline(sw: Swap, win: Window, wait_s: float, min_proofs: int) -> tuple[int, list[Run]]:
    """Where the running release's log starts, and its last run; measured for wait_s first if it is small."""
    began = sw.catalog().started()
    start = began.offset if began else 0
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


def _watch(win: Window, start: int, for_s: float, proofs: int | None, baseline: list[Run],
           looks: list[int] | None = None, warmup: int = 1) -> None:
    """Waits for the window to end, saying how B does against the baseline as it goes; with `looks` (proof
    counts), it ends at the first look where a headline phase moved (experiment.moved), judged as the
    verdict is: without B's first `warmup` proofs."""
    looks = list(looks or [])
    base = without_warmup(baseline, warmup)[0]
    deadline = time.monotonic() + for_s
    base_p50 = baseline[-1].report()["phases"].get("ntt_kernels", {}).get("p50")
    while time.monotonic() < deadline:
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        win.fetch()
        runs = win.runs(start)
        done = sum(r.jobs for r in runs)
        ntt = runs[-1].report()["phases"].get("ntt_kernels", {}).get("p50") if runs else None
        left = max(0.0, deadline - time.monotonic())
        last = win.samples()[-10:]
        act = [x.sm_act_pct for x in last if x.sm_act_pct is not None]
        sm = [x.sm_pct for x in last if x.sm_pct is not None]
        busy = (f", SM activity {sum(act) / len(act):.0f}% (last {len(act)} readings)" if act
                else f", duty cycle {sum(sm) / len(sm):.0f}% (last {len(sm)} readings)" if sm else "")
        err.print(text(f"window: {done} proofs, ntt_kernels p50 {_ms(ntt)} (baseline {_ms(base_p50)}){busy}, "
                       f"{left:.0f} s left"), style="dim")
        if proofs is not None and done >= proofs:
            return
        if looks and done >= looks[0]:
            while looks and done >= looks[0]:  # one judgement however many looks this poll passed
                looks.pop(0)
            phase = moved(base, without_warmup(_side_runs(runs), warmup)[0])
            if phase:
                err.print(text(f"window: {phase} moved at {done} proofs (a look of {LOOKS}): ending early"))
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
                as_json: bool, warmup: int = 1, resolve: float | None = None) -> int:
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
            start_sampler(host, book.daemon.state_dir, running.pid, user=book.daemon.user or "")
        base_start, base_runs = _baseline(sw, win, baseline_s, min_proofs)
        needed = need(without_warmup(base_runs, warmup)[0], resolve or 0.03, LOOKS if resolve else 1)
        looks: list[int] = []
        if needed:
            err.print(text(needed.line()))
            if resolve and needed.proofs:
                proofs = max(needed.proofs, min_proofs)
                looks = [max(min_proofs, proofs * k // LOOKS) for k in range(1, LOOKS)]
                err.print(text(f"it ends early at the first of {LOOKS} looks (at {', '.join(map(str, looks))} and "
                               f"{proofs} proofs) where a phase moved at alpha {needed.alpha:g}"), style="dim")
        plan = sw.plan(binary)
        show_plan(plan, False, book.daemon.secret_env, book.daemon.stop)
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
            _watch(win, new_start, for_s, proofs, base_runs, looks, warmup)
            win.fetch()
            before, left_a = without_warmup(_side_runs(win.runs(base_start, new_start))[-1:] or base_runs, warmup)
            after, left_b = without_warmup(_side_runs(win.runs(new_start)), warmup)
            err.print(text(f"warm-up: {left_b} proof(s) of B and {left_a} of the build before left out of the verdict "
                           f"(--warmup {warmup}: the SRS loads at a daemon's first proof)"))
            v = verdict(before, after, win.samples(), ALPHA / LOOKS if looks else ALPHA)
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
                err.print(text(f"{host.name}: rolled back; {_restore(sw, running)}"), style="bold")
            else:
                err.print(text(f"{host.name}: keeping B ({(outcome.new_sha or '')[:12]})"), style="bold")
        journal.write(sw.ctx, JournalEntry(action="experiment", release=outcome.new_sha, decision=decision,
                                           verdict=v.summary if v else "interrupted in the window"))
        if report and v:
            from ..report import write_html

            write_html(report, v, host.name, binary, win, (base_start, new_start))
            err.print(text(f"report: {report}"))
    return 0 if v else 3


def _restore(sw: Swap, baseline: Daemon) -> str:
    """Back to the baseline itself, named by its whole sha256 (not by what `rollback` would pick), then
    checked on the host: the daemon that runs there now must be the baseline's bytes."""
    run_rollback(sw, sw.plan_rollback(baseline.sha256))
    now = sw.situation().daemon
    if now is None or now.sha256 != baseline.sha256:
        what = f"{now.sha256[:12]} (pid {now.pid})" if now else "no daemon"
        raise UnknownState(f"the rollback to the baseline {baseline.sha256[:12]} ended, but {what} runs now: check "
                           f"`swapctl status {sw.host.name}`", host=sw.host.name)
    return f"the baseline {baseline.sha256[:12]} runs again as pid {now.pid} (its sha256 checked on the host)"


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
    for g in sorted(set(a.gpu_busy) | set(b.gpu_busy) | set(a.kernel_share) | set(b.kernel_share)):
        out.print(text(f"{f'GPU {g} busy':>14}{_pct1(a.gpu_busy.get(g)):>12}{_pct1(b.gpu_busy.get(g)):>12}"
                       "  (SM activity, GPM)"))
        out.print(text(f"{'duty cycle':>14}{_pct1(a.duty_cycle.get(g)):>12}{_pct1(b.duty_cycle.get(g)):>12}"
                       "  (dmon sm%: any kernel ran)"))
        out.print(text(f"{'kernel share':>14}{_pct(a.kernel_share.get(g)):>12}{_pct(b.kernel_share.get(g)):>12}"
                       "  (from the log)"))
    for line in v.lines():
        out.print(text(line), soft_wrap=True)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _pct1(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


