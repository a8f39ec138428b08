"""What every verb shares: the playbook option, host selection, output, errors, exit codes and Ctrl-C."""

from __future__ import annotations

import fnmatch
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from types import FrameType
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from .. import playbook as pb
from ..errors import BadInput, ExitCode, PlaybookError, SwapctlError
from ..swap.interrupts import Act, Interrupts
from .terminal import log_lines, visible

PlaybookOpt = Annotated[
    str | None,
    typer.Option("--playbook", "-p", metavar="FILE",
                 help="Playbook file (default ./swapctl.toml, or $SWAPCTL_PLAYBOOK).",
                 show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout, for scripts.")]


@dataclass(frozen=True)
class RootOptions:
    """The options before the verb (`swapctl -i FILE --connect-timeout S VERB`, or their $SWAPCTL_ variables):
    the root command's click context holds them (ctx.obj, which click hands each subcommand's context), so a
    verb run in-process (cli/environment.py) reads its own (common.root), and nothing writes them into os.environ."""

    inventory: str | None = None
    connect_timeout_s: float = pb.CONNECT_TIMEOUT_S


def root(ctx: typer.Context) -> RootOptions:
    """The root command's options, as the verb's context finds them (its parent's ctx.obj)."""
    found = ctx.find_object(RootOptions)
    return found if found is not None else RootOptions()


def load_playbook(path: str | None, opts: RootOptions, *, required: bool = True) -> pb.Playbook:
    """The verb's playbook (-p, else $SWAPCTL_PLAYBOOK, else ./swapctl.toml) with the root options: the
    inventory's hosts and groups, and every host's connect timeout."""
    return pb.load(path, required=required, inventory=opts.inventory, connect_timeout_s=opts.connect_timeout_s)

out = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)  # an error stays one line


def text(value: object, *, newlines: bool = False) -> Text:
    """Remote text as plain text: never read as rich markup, every control character shown as `\\xNN`
    (tab kept; newlines too with `newlines`). The one way anything from a host reaches the terminal."""
    return Text(visible("" if value is None else str(value), newlines=newlines))


def stacked(*fields: object) -> Text:
    """Fields stacked in one table cell, one a line, each shown as text() shows it: a newline inside a
    remote field is written out, so it cannot forge the line below."""
    return Text("\n").join(text(f) for f in fields)


def warn(lines: Iterable[str]) -> None:
    """Each of `lines` as a warning on stderr, as text() shows it."""
    for line in lines:
        err.print(text(f"warning: {line}"), style="bold yellow")


def fail(exc: SwapctlError) -> NoReturn:
    err.print(text(f"swapctl: {exc}"), style="bold red")
    if exc.detail and exc.detail.strip() not in str(exc):
        err.print(log_lines(exc.detail.rstrip()[-4000:]), style="dim")  # a log tail: its colours, no more
    raise typer.Exit(int(exc.exit_code))


HOLD_S = 0.05  # how often a press held back while paramiko runs is delivered again
HOLD_MAX_S = 2.0  # and for how long at most: paramiko this long in one call waits (a handshake, a window)


def inside_paramiko(frame: FrameType | None) -> bool:
    """Whether the main thread, at `frame`, is inside paramiko and not waiting in the threading module. A
    KeyboardInterrupt raised there can land between a lock's acquire and the `try` that gives it back
    (Transport._send_user_message's clear_to_send_lock, paramiko 5.1 transport.py:1826-1834), and every
    later send on that connection waits for the lock forever. One raised in a wait (an Event's, a
    Condition's) unwinds through the `finally` that gives its lock back."""
    if frame is not None and frame.f_globals.get("__name__") == "threading":
        return False
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("paramiko."):
            return True
        frame = frame.f_back
    return False


class CtrlC:
    """A verb's one SIGINT handler: each press goes to the swaps in progress (their Interrupts say what it
    means, by the phase each is in), else to the verb's own; the handler does what the answers say. A press
    that unwinds is held back while paramiko runs, and raised once it has returned (or HOLD_MAX_S later)."""

    def __init__(self) -> None:
        self.verb = Interrupts()  # between swaps: before any change a press aborts; once FINISHED it is said
        self.swaps: list[Interrupts] = []
        self.listeners: list[Callable[[], None]] = []  # told of every press first (a rollout's halt)
        self.quiet = False  # swaps on worker threads: presses are counted, and read there between steps
        self.held = 0.0  # since when a press that unwinds waits for paramiko to return (0: none waits)
        self.again = False  # the SIGINT that comes now is the held press's, sent again (hold), not a press

    def forward(self, _signum: object = None, frame: FrameType | None = None) -> None:
        if self.again:
            self.again = False
            if self.held:
                self._unwind(frame, spent=not any(i.aborting for i in self._targets()))
            return
        for listener in list(self.listeners):
            listener()
        answers = [i.press() for i in self._targets()]
        if self.quiet:  # this thread must not unwind: it waits for the workers
            return
        for answer in answers:
            if answer.words:
                err.print(text(answer.words), style="bold yellow")
        if any(answer.act is Act.ABORT for answer in answers):
            self._unwind(frame)

    def _targets(self) -> list[Interrupts]:
        return list(self.swaps) or [self.verb]

    def _unwind(self, frame: FrameType | None, spent: bool = False) -> None:
        """Raises KeyboardInterrupt here, or later where paramiko runs now; nothing where the held press is
        `spent` (its phase has moved on, or a checkpoint raised it)."""
        if spent:
            self.held = 0.0
        elif inside_paramiko(frame) and time.monotonic() - (self.held or time.monotonic()) < HOLD_MAX_S:
            self.held = self.held or time.monotonic()
            again = threading.Timer(HOLD_S, self._send_again)
            again.daemon = True
            again.start()
        else:
            self.held = 0.0
            for i in self._targets():
                i.raised()
            raise KeyboardInterrupt

    def _send_again(self) -> None:
        self.again = True
        os.kill(os.getpid(), signal.SIGINT)

    @contextmanager
    def attached(self, interrupts: Interrupts) -> Iterator[Interrupts]:
        """`interrupts` gets the presses while its swap runs."""
        self.swaps.append(interrupts)
        try:
            yield interrupts
        finally:
            self.swaps.remove(interrupts)

    @contextmanager
    def listening(self, listener: Callable[[], None], quiet: bool = False) -> Iterator[None]:
        self.listeners.append(listener)
        was, self.quiet = self.quiet, quiet
        try:
            yield
        finally:
            self.listeners.remove(listener)
            self.quiet = was


_ctrl_c: list[CtrlC] = []  # the running verb's (guarded's), innermost last


def ctrl_c() -> CtrlC:
    """The running verb's Ctrl-C adapter; outside a verb, one no handler forwards to."""
    return _ctrl_c[-1] if _ctrl_c else CtrlC()


@contextmanager
def _forwarding(keys: CtrlC) -> Iterator[None]:
    """Installs `keys.forward` as the SIGINT handler for the verb, and puts back the one found."""
    here = threading.current_thread() is threading.main_thread()  # only there can a handler be set
    previous = signal.signal(signal.SIGINT, keys.forward) if here else None
    _ctrl_c.append(keys)
    try:
        yield
    finally:
        _ctrl_c.remove(keys)
        if here:
            signal.signal(signal.SIGINT, previous)


def guarded(fn: Callable[[], int | None]) -> NoReturn:
    """Runs a verb under its one Ctrl-C handler: errors become one line on stderr and their exit code."""
    with _forwarding(CtrlC()):
        try:
            code = fn() or 0
        except SwapctlError as exc:
            fail(exc)
        except KeyboardInterrupt:
            err.print(Text("swapctl: interrupted before any change", style="bold red"))
            raise typer.Exit(int(ExitCode.REFUSED)) from None
    raise typer.Exit(int(code))


LimitOpt = Annotated[str | None, typer.Option(
    "--limit", help="Only the selected hosts whose name matches this glob (e.g. 'gpu-a*').")]


def select_hosts(playbook: pb.Playbook, targets: list[str], limit: str | None = None) -> list[pb.HostSpec]:
    """HOST arguments: names, user@address:port, or @group; with `limit`, those whose name matches it."""
    specs: dict[str, pb.HostSpec] = {}
    for target in targets:
        if target.startswith("@"):
            group = target[1:]
            if group not in playbook.groups:
                raise PlaybookError(playbook.path, f"unknown group {group!r}; add it under [groups]",
                                       key="groups")
            for name in playbook.groups[group]:
                specs[name] = playbook.hosts[name]
        else:
            spec = pb.resolve_host(playbook, target)
            specs[spec.name] = spec
    if limit is not None:
        specs = {name: spec for name, spec in specs.items() if fnmatch.fnmatchcase(name, limit)}
        if not specs:
            raise BadInput(f"--limit {limit!r} matches none of the hosts {', '.join(targets)} names")
    return list(specs.values())


def where(spec: pb.HostSpec) -> str:
    """A host as a person would ssh to it: its name, and user@address:port where the playbook gives them."""
    address = (f"{spec.user}@" if spec.user else "") + spec.address + (f":{spec.port}" if spec.port else "")
    return spec.name if address == spec.name else f"{spec.name} ({address})"


def to_json(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return to_json(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def print_json(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"version": 1, **to_json(document)}, indent=2) + "\n")


def worst(codes: list[int]) -> int:
    """With several hosts, the worst outcome decides: 5 > 4 > 3 > 2 > 1 > 0."""
    order = [int(c) for c in (ExitCode.OK, ExitCode.FAILED, ExitCode.BAD_INPUT, ExitCode.REFUSED,
                              ExitCode.ROLLED_BACK, ExitCode.UNKNOWN_STATE)]
    return max(codes, key=order.index, default=0)


def gib(kib: int | float | None) -> str:
    return "-" if kib is None else f"{kib / (1 << 20):.1f} GiB"


def size(kib: int | float | None) -> str:
    """A memory size in the unit that reads best."""
    if kib is None:
        return "-"
    for unit, scale in (("GiB", 1 << 20), ("MiB", 1 << 10)):
        if kib >= scale:
            return f"{kib / scale:.1f} {unit}"
    return f"{kib:.0f} KiB"


def duration(seconds: float | int | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s < 172800 else f"{s // 86400}d{s % 86400 // 3600}h"


def when(iso: str) -> str:
    """2026-12-01T08:36:51.123+00:00 -> 2026-12-01 08:36:51: to the second, as it was recorded."""
    return iso[:19].replace("T", " ")
