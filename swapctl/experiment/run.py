"""An experiment on one host: the baseline, B's deploy, its window, the verdict, keep or roll back, the
journal line and the report. The caller passes what shows progress, the plan and the verdict, and what
decides (as swapctl.fleet's rollout takes them); nothing here prints or asks."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .. import playbook as pb
from ..errors import BadInput, Refused, SwapctlError, UnknownState
from ..facts.journal_entry import JournalEntry
from ..gpu.sampler import samplable, start_after_swap, start_sampler
from ..logs.stats import ALPHA
from ..logs.timings import Run
from ..remote import Cmd, Host
from ..swap import journal
from ..swap.deploy import Daemon, DeployPlan, Outcome, Swap
from ..swap.deploy import deploy as run_deploy
from ..swap.deploy import rollback as run_rollback
from ..swap.interrupts import Interrupts, Phase
from .judge import LOOKS, MIN_PROOFS, Decision, Verdict, moved, need, verdict, withhold, without_warmup
from .window import Window, side_runs

POLL_S = 2.0
# The window's proofs when neither --for, --proofs nor --resolve is given: B's window (and the baseline, at
# most --baseline) ends once it has made this many after its warm-up. The sandbox's stand-in makes ~10 proofs
# a second back to back and ~0.9 with a 1 s pause between jobs (measured, docs/commands.md); 12 a side give
# ntt_kernels 48 values each, and the whole experiment fits in two minutes there; a real cuzk (a PoRep in
# ~90 s) stops at --for's 10 minutes first.
DEFAULT_PROOFS = 12


@dataclass(frozen=True)
class Settings:
    """What the command line asks of the experiment."""

    binary: str
    for_s: float  # B's window, or its upper bound with `proofs` or `resolve`
    proofs: int | None = None  # end once B has made this many (and measure the baseline until it has them)
    baseline_s: float = 600  # measure the running release at most this long, if its log holds too few proofs
    min_proofs: int = MIN_PROOFS
    warmup: int = 1  # proofs after a daemon's start left out of the verdict
    resolve: float | None = None  # run B for the proofs that resolve a change this small (0.03: 3%)
    report: Path | None = None  # where the HTML report goes
    dest: Path = Path("logs")  # where the logs and samples are fetched to


@dataclass(frozen=True)
class Hooks:
    """The caller's side: progress lines (and their style), the plan shown, its confirmation (raising stops
    before anything changes), the verdict, and the decision for B."""

    say: Callable[[str, str | None], None]
    show_plan: Callable[[DeployPlan], None]
    confirm: Callable[[DeployPlan], None]
    verdict: Callable[[Verdict], None]
    decide: Callable[[Verdict], Decision]


@dataclass(frozen=True)
class Result:
    verdict: Verdict | None  # None: interrupted in the window (rolled back); its `withheld`: no verdict
    decision: Decision


@dataclass
class Span:
    """B's window on the controller's clock: when it began (UTC, seconds since the epoch) and how long."""

    began: float = 0.0
    seconds: float = 0.0


@dataclass
class _Baseline:
    start: int  # the running release's log offset
    runs: list[Run]
    proofs: int | None  # B's window in proofs, when --resolve (or --proofs) sets it
    looks: list[int]  # the proof counts at which a --resolve window may end early


def run(host: Host, book: pb.Playbook, s: Settings, hooks: Hooks, interrupts: Interrupts | None = None) -> Result:
    """Swap B in on `host`, let it work, judge it against the build before it, keep it or roll back.
    `interrupts` gets the caller's Ctrl-C presses (a trial's: a press during B's swap rolls B back after)."""
    with Swap(host, book, interrupts=interrupts or Interrupts(trial=True)) as sw:  # the upload session ends with it
        result = _run(sw, Window(host, book, s.dest), s, hooks)
        sw.interrupts.enter(Phase.FINISHED)
        return result


def _run(sw: Swap, win: Window, s: Settings, hooks: Hooks) -> Result:
    host, book = sw.host, sw.book
    situation = sw.situation()
    running = situation.daemon
    if running is None:
        raise Refused("no daemon runs: an experiment compares B with the running build", host=host.name)
    if samplable(situation.status):  # no nvidia-smi, or a hung one: the log's figures alone
        start_sampler(host, book.daemon.state_dir, running.pid, user=book.daemon.user or "")
    base = _baseline(sw, win, s, hooks)
    plan = sw.plan(s.binary)
    hooks.show_plan(plan)
    if plan.unchanged:
        raise BadInput("B is the build that runs already: nothing to compare", host=host.name)
    hooks.confirm(plan)
    try:
        outcome = run_deploy(sw, plan)  # a press before the stop aborts it; after it, B's swap finishes
        outcome = outcome.noted(start_after_swap(host, book.daemon, outcome.started, plan.status))
    except SwapctlError as exc:
        hooks.say(f"verdict: B did not come up ({exc}); the deploy's own rollback decided" if sw.interrupts.stopped
                  else f"B was not swapped in ({exc}): nothing to judge", "bold red")
        raise
    new_start = int(outcome.log_offset or 0)
    span = Span()
    v, decision = _judge(sw, win, s, hooks, base, new_start, running, outcome, span)
    with sw.interrupts.finishing("the experiment has ended; its journal line and report are being written"):
        journal.write(sw.ctx, JournalEntry(action="experiment", release=outcome.new_sha, decision=decision,
                                           verdict=v.summary if v else "interrupted in the window"))
        if s.report and v:
            from .html import Facts, write_html

            was = situation.releases.get(running.sha256[:12])
            facts = Facts(running.sha256, outcome.new_sha or "", span.began, span.seconds, decision, s.warmup,
                          before_says=was.says if was else None, after_says=plan.new.says)
            write_html(s.report, v, host.name, s.binary, win, (base.start, new_start), facts)
            hooks.say(f"report: {s.report}", None)
    return Result(v, decision)


def _baseline(sw: Swap, win: Window, s: Settings, hooks: Hooks) -> _Baseline:
    """Where the running release's log starts, and its last run (measured until it has the proofs B's window
    counts, at most baseline_s); with --resolve, the proofs B needs and the looks at which it may end early."""
    began = sw.catalog().started()
    start = began.offset if began else 0
    runs = _measure_baseline(win, start, s, hooks)
    if _counted(runs, s.warmup) < s.min_proofs:  # as the verdict counts them: a baseline it would not judge
        raise Refused(f"baseline too small: {_counted(runs, s.warmup)} proofs from the running release after its "
                      f"--warmup {s.warmup} (need {s.min_proofs}); give it work or a longer --baseline. "
                      f"Nothing changed", host=sw.host.name)
    base = _Baseline(start, runs, s.proofs, [])
    _plan(base, s, hooks)
    return base


def _measure_baseline(win: Window, start: int, s: Settings, hooks: Hooks) -> list[Run]:
    """The running release's last run, once it has as many proofs as B's window will count (--proofs, at
    least --min-proofs) or baseline_s has passed: a busy daemon is watched for as long as its proofs take,
    not for a fixed 10 minutes."""
    want = max(s.min_proofs, s.proofs or 0)
    win.fetch()
    runs = win.runs(start)[-1:]
    if _counted(runs, s.warmup) >= want:
        return runs
    hooks.say(f"baseline: {_counted(runs, s.warmup)} proofs since the running release started (after its "
              f"--warmup {s.warmup}); measuring it until it has {want}, for at most {s.baseline_s:g} s", None)
    deadline = time.monotonic() + s.baseline_s
    while _counted(runs, s.warmup) < want and time.monotonic() < deadline:
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        win.fetch()
        runs = win.runs(start)[-1:]
    return runs


def _plan(base: _Baseline, s: Settings, hooks: Hooks) -> None:
    """What B needs to resolve a change: said as a plan where the spread allows one; with --resolve, the
    window's proofs and looks, or, where no window could resolve it, what the window does instead. Without
    --resolve nothing is said of a change nobody asked to resolve."""
    needed = need(without_warmup(base.runs, s.warmup)[0], s.resolve or 0.03, LOOKS if s.resolve else 1)
    if not needed or not (s.resolve or needed.proofs):
        return
    if not needed.proofs:
        until = f"until B has {s.proofs} proofs or " if s.proofs else ""
        hooks.say(f"{needed.line()}: --resolve cannot plan the window, so B runs {until}the whole --for "
                  f"({s.for_s:g} s) and the verdict says what that window could resolve", "yellow")
        return
    hooks.say(needed.line(), None)
    if s.resolve:
        base.proofs = max(needed.proofs, s.min_proofs)
        base.looks = [max(s.min_proofs, base.proofs * k // LOOKS) for k in range(1, LOOKS)]
        hooks.say(f"it ends early at the first of {LOOKS} looks (at {', '.join(map(str, base.looks))} and "
                  f"{base.proofs} proofs) where a phase moved at alpha {needed.alpha:g}", "dim")


def _counted(runs: list[Run], warmup: int) -> int:
    """The proofs of `runs` the verdict reads: without each run's first `warmup` after a daemon's start."""
    return sum(r.jobs for r in without_warmup(runs, warmup)[0])


def _judge(sw: Swap, win: Window, s: Settings, hooks: Hooks, base: _Baseline, new_start: int, running: Daemon,
           outcome: Outcome, span: Span | None = None) -> tuple[Verdict | None, Decision]:
    """B's window, the verdict (withheld where a side made too few proofs) and the decision; whatever ends
    the window (Ctrl-C too), B is kept or the baseline runs again."""
    v: Verdict | None = None
    decision = Decision.ROLLBACK
    span = span if span is not None else Span()
    when = "in the window"
    try:
        sw.interrupts.enter(Phase.WATCHING)  # from now on a press ends the window
        if sw.interrupts.pressed:  # pressed after the stop, counted while B's swap finished: B goes
            when = "during the swap"
            raise KeyboardInterrupt
        win.fetch()  # A's log is whole once B has started: the looks judge against the A the verdict reads
        base.runs = side_runs(win.runs(base.start, new_start))[-1:] or base.runs
        span.began, clock = time.time(), time.monotonic()
        try:
            _watch(win, new_start, s, base, hooks)
        finally:
            span.seconds = time.monotonic() - clock
        win.fetch()
        ends = (next((r.first_ts for r in win.runs(new_start)), None), _host_clock(sw.host))
        before, left_a = without_warmup(base.runs, s.warmup)
        after, left_b = without_warmup(side_runs(win.runs(new_start)), s.warmup)
        hooks.say(f"warm-up: {left_b} proof(s) of B and {left_a} of the build before left out of the verdict "
                  f"(--warmup {s.warmup}: the SRS loads at a daemon's first proof)", None)
        v = withhold(verdict(before, after, win.samples(), ALPHA / LOOKS if base.looks else ALPHA, ends),
                     s.min_proofs)
        hooks.verdict(v)
        decision = hooks.decide(v)
    except KeyboardInterrupt:
        hooks.say(f"interrupted {when}: rolling back to the build before B", "bold yellow")
        decision, v = Decision.ROLLBACK, None
    finally:
        if decision == Decision.ROLLBACK:
            with sw.interrupts.finishing("rolling back to the build before B"):
                hooks.say(f"{sw.host.name}: rolled back; {_restore(sw, running)}", "bold")
        else:
            hooks.say(f"{sw.host.name}: keeping B ({(outcome.new_sha or '')[:12]})", "bold")
    return v, decision


def _ntt_p50(run: Run) -> float | None:
    """The median ntt_kernels of a run (None: it has none)."""
    ntt = run.figures().phases.get("ntt_kernels")
    return ntt.p50 if ntt else None


def _watch(win: Window, start: int, s: Settings, base: _Baseline, hooks: Hooks) -> None:
    """Waits for the window to end, saying how B does against the baseline as it goes; with looks (proof
    counts), it ends at the first look where a headline phase moved (verdict.moved), judged as the
    verdict is: without B's first `warmup` proofs, which the plan's and the looks' counts leave out too
    (counted in, every window planned for a change ran one proof short of the power it stated)."""
    looks = list(base.looks)
    baseline = without_warmup(base.runs, s.warmup)[0]
    deadline = time.monotonic() + s.for_s
    base_p50 = _ntt_p50(base.runs[-1])
    quiet = _Quiet(_quiet_after(base.runs[-1]))
    while time.monotonic() < deadline:
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        win.fetch()
        runs = win.runs(start)
        judged, warm = without_warmup(side_runs(runs), s.warmup)
        done = sum(r.jobs for r in judged)  # as the plan and the verdict count B's proofs: after its warm-up
        ntt = _ntt_p50(runs[-1]) if runs else None
        of = f" ({base.proofs} end it)" if base.proofs is not None else ""
        hooks.say(f"window: {done} proofs (and {warm} warm-up){of}, ntt_kernels p50 {_ms(ntt)} (baseline "
                  f"{_ms(base_p50)}){_busy(win)}, {max(0.0, deadline - time.monotonic()):.0f} s left", "dim")
        if line := quiet.seen(done + warm, time.monotonic()):
            hooks.say(f"window: {line}; it goes on until {'its proofs or ' if base.proofs else ''}--for ends",
                      "yellow")
        if base.proofs is not None and done >= base.proofs:
            return
        if looks and done >= looks[0]:
            while looks and done >= looks[0]:  # one judgement however many looks this poll passed
                looks.pop(0)
            phase = moved(baseline, judged)
            if phase:
                hooks.say(f"window: {phase} moved at {done} proofs (a look of {LOOKS}): ending early", None)
                return


QUIET_S = 60.0  # no proof this long, where the baseline's own gaps are unknown: the window says so


def _quiet_after(run: Run) -> tuple[float, str]:
    """How long without a proof is worth a line: 3x the baseline's median gap between its proofs (at least
    3 polls), else QUIET_S; and why, in words."""
    ends = run.job_ends
    gaps = sorted((b - a).total_seconds() for a, b in zip(ends, ends[1:], strict=False))
    if not gaps:
        return QUIET_S, f"{QUIET_S:.0f} s"
    gap = gaps[len(gaps) // 2]
    return max(3 * POLL_S, 3 * gap), f"3x the baseline's median gap between proofs, {gap:.1f} s"


@dataclass
class _Quiet:
    """Says once that B has made no proof for a while (a daemon with no work, or a stuck one)."""

    after: tuple[float, str]
    count: int = 0
    since: float | None = None
    said: bool = False

    def seen(self, count: int, now: float) -> str | None:
        if self.since is None or count != self.count:
            self.count, self.since = count, now
            return None
        if self.said or now - self.since < self.after[0]:
            return None
        self.said = True
        return (f"no proof from B for {now - self.since:.0f} s (over {self.after[1]}): it has no work, or it "
                f"is stuck")


def _busy(win: Window) -> str:
    """The GPU's last ten readings: SM activity where the GPU has GPM counters, else the duty cycle."""
    last = win.samples()[-10:]
    act = [x.sm_act_pct for x in last if x.sm_act_pct is not None]
    sm = [x.sm_pct for x in last if x.sm_pct is not None]
    if act:
        return f", SM activity {sum(act) / len(act):.0f}% (last {len(act)} readings)"
    return f", duty cycle {sum(sm) / len(sm):.0f}% (last {len(sm)} readings)" if sm else ""


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


def _host_clock(host: Host) -> datetime:
    """When the window ended on the host's clock, which dates B's log lines (`date +%s.%N`; a date without
    %N prints it as is, and whole seconds are read); the controller's clock where the host says no time."""
    try:
        said = host.run(Cmd("date", "+%s.%N"), timeout=20, check=False).stdout.strip()
    except SwapctlError:
        said = ""
    m = re.fullmatch(r"(\d{1,12})(\.\d{1,9})?\S*", said)
    return datetime.fromtimestamp(float(m[1] + (m[2] or "")), UTC) if m else datetime.now(UTC)


def _restore(sw: Swap, baseline: Daemon) -> str:
    """Back to the baseline itself, named by its whole sha256 (not by what `rollback` would pick), then
    checked on the host: the daemon that runs there now must be the baseline's bytes."""
    sw.interrupts.reset()  # a press during B's swap asked for this rollback: it must not refuse it
    plan = sw.plan_rollback(baseline.sha256)
    back = run_rollback(sw, plan)
    start_after_swap(sw.host, sw.book.daemon, back.started, plan.status)  # a sampler that cannot start: no harm
    now = sw.situation().daemon
    if now is None or now.sha256 != baseline.sha256:
        what = f"{now.sha256[:12]} (pid {now.pid})" if now else "no daemon"
        raise UnknownState(f"the rollback to the baseline {baseline.sha256[:12]} ended, but {what} runs now: check "
                           f"`swapctl status {sw.host.name}`", host=sw.host.name)
    return f"the baseline {baseline.sha256[:12]} runs again as pid {now.pid} (its sha256 checked on the host)"
