"""`swapctl experiment HOST --binary B`: try a build on a host and get a verdict, with the evidence.

The baseline is what the running release did since its last start (its log and GPU samples), measured
until it has the proofs B's window counts (at most --baseline). Then B is deployed as `deploy` does it,
runs until it has made --proofs N (12 by default), for --for alone, or for what --resolve plans, at most
--for, and its log and samples are compared with the baseline's. B is kept or
rolled back as --then says; Ctrl-C in the window rolls back, never leaves it half decided.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import BadInput, ExitCode
from ..experiment import MIN_PROOFS, Verdict
from ..experiment.judge import Decision
from ..experiment.run import DEFAULT_PROOFS, Hooks, Settings, run
from ..remote import connect
from ..swap.interrupts import Interrupts
from .common import (
    JsonOpt,
    PlaybookOpt,
    RootOptions,
    ctrl_c,
    err,
    guarded,
    load_playbook,
    out,
    print_json,
    root,
    select_hosts,
    text,
)
from .deploy import _confirm, show_plan


def seconds(value: str) -> float:
    """`90`, `90s`, `10m`, `1h` -> seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", value.strip())
    if not m:
        raise BadInput(f"{value!r}: give a duration such as 90s, 10m or 1h")
    return float(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[m[2]]


def experiment(
    ctx: typer.Context,
    host: Annotated[str, typer.Argument(help="One host: a name, user@address:port.")],
    binary: Annotated[str, typer.Option("--binary", "-b", help="The build to try (a local file).")],
    for_: Annotated[str | None, typer.Option(
        "--for", help="How long B runs at most (90s, 10m, 1h; default 10m); given alone, B runs all of it.")
    ] = None,
    proofs: Annotated[int | None, typer.Option(
        "--proofs", min=1, help="End once B has made this many proofs after its --warmup ones (and measure the "
                                f"baseline until it has as many). Default: {DEFAULT_PROOFS}, unless --for or "
                                "--resolve is given.")] = None,
    baseline: Annotated[str, typer.Option(
        "--baseline", help="Measure the running release at most this long, while its log since its start "
                           "holds fewer proofs than B's window counts.")
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
        if then not in (*Decision, "ask"):
            raise BadInput(f"--then {then!r}: keep, rollback or ask")
        counted = proofs if proofs or for_ or resolve else DEFAULT_PROOFS  # by default the window counts proofs
        s = Settings(binary, seconds(for_ or "10m"), counted, seconds(baseline), min_proofs, warmup,
                     percent(resolve) if resolve else None, report, dest)
        return _experiment(host, s, then, playbook, yes, json, root(ctx))

    guarded(checked)


def percent(value: str) -> float:
    """`3%`, `3` -> 0.03."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)%?", value.strip())
    if not m or not 0 < float(m[1]) < 100:
        raise BadInput(f"--resolve {value!r}: give a change such as 3% (between 0 and 100)")
    return float(m[1]) / 100


def _decide(then: str, v: Verdict) -> Decision:
    """--then's answer: keep or rollback as given; ask at a terminal, else roll back."""
    if then != "ask":
        return Decision(then)
    if not sys.stdin.isatty():
        return Decision.ROLLBACK
    return Decision.KEEP if typer.confirm("keep the new build?", err=True) else Decision.ROLLBACK


def _experiment(target: str, s: Settings, then: str, playbook_path: str | None, yes: bool, as_json: bool,
                opts: RootOptions) -> int:
    book = load_playbook(playbook_path, opts)
    book.require_daemon()
    specs = select_hosts(book, [target])
    if len(specs) != 1:
        raise BadInput(f"experiment takes one host; {target} names {len(specs)}")
    hooks = Hooks(
        say=lambda line, style: err.print(text(line), style=style),
        show_plan=lambda plan: show_plan(plan, False, book.daemon.secret_env, book.daemon.stop),
        confirm=lambda plan: _confirm(plan, yes),
        verdict=lambda v: _show(v, as_json),
        decide=lambda v: _decide(then, v),
    )
    with connect(specs[0]) as host, ctrl_c().attached(Interrupts(trial=True)) as interrupts:
        result = run(host, book, s, hooks, interrupts)
    if result.verdict is None:  # interrupted in the window: rolled back
        return 3
    return ExitCode.NO_VERDICT if result.verdict.withheld else 0


def _show(v: Verdict, as_json: bool) -> None:
    if as_json:
        print_json(v.as_dict())
        return
    if v.withheld:  # no `verdict:` line, and no phase marked (lines() has none)
        out.print(text(v.summary), style="bold yellow", soft_wrap=True)
    else:
        out.print(text(f"verdict: {v.summary}"), style="bold", soft_wrap=True)
    a, b = v.before, v.after
    out.print(text(f"{'':>14}{'before':>12}{'B':>12}"))
    out.print(text(f"{'proofs':>14}{a.proofs:>12}{b.proofs:>12}  (after the warm-up)"))
    out.print(text(f"{'wall time':>14}{_secs(a.wall_s):>12}{_secs(b.wall_s):>12}"
                   "  (warm-up's end to the window's end)"))
    out.print(text(f"{'proofs/h':>14}{_num(a.proofs_per_hour):>12}{_num(b.proofs_per_hour):>12}"
                   "  (over that wall time, idle included)"))
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


def _secs(x: float) -> str:
    return f"{x:,.0f} s" if x else "-"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _pct1(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


