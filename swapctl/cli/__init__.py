"""The command line: parsing and presentation only; the work is in the library.

Verbs are registered by name and imported when one runs: importing all of them (fabric, paramiko, rich,
the deploy core) cost every command, `--help` included, about 0.4 s before it did anything (issue 23).
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import os
import sys
import threading
from collections.abc import Iterator, MutableMapping
from typing import Annotated, Any, cast

import typer
import typer.core
import typer.main

from .. import __version__

# name: (module under swapctl.cli, its command function or Typer app, the one-line help `swapctl --help`
# shows). The line is the command's own first paragraph; tests/test_cli.py checks they agree.
VERBS: dict[str, tuple[str, str, str]] = {
    "init": ("init", "init", "Write a commented playbook to start from."),
    "status": ("status", "status", "Show the daemon, memory, GPUs, other sessions, disk and releases of each host."),
    "build": ("build", "build", "Build the daemon's image from the playbook's [build] table and take the binary out."),
    "deploy": ("deploy", "deploy", "Upload a new daemon binary and swap it in, rolling back by itself if it fails."),
    "rollback": ("rollback", "rollback",
                 "Go back to the previous known-good release (or --to one), started exactly as it ran."),
    "uncordon": ("uncordon", "uncordon",
                 "Lift a Curio cordon that swapctl left on each host (never one it did not make, nor during a swap)."),
    "history": ("history", "history", "Show a host's releases (numbered for `rollback --to`) and its deploy journal."),
    "timings": ("timings", "timings",
                "Phase times (count, p50, p95, max), GPU phase share per GPU and starvation signs from cuzk logs."),
    "fetch-logs": ("fetch_logs", "fetch_logs",
                   "Download the files that logs.paths names: incremental, resumable, compressed on the wire."),
    "experiment": ("experiment", "experiment",
                   "Swap B in, let it work, and say what changed against the build before it; keep it or roll back."),
    "export-ansible": ("export_ansible", "export_ansible",
                       "Write the playbook's hosts and daemon as an Ansible inventory with group_vars (swapctl.cuzk)."),
    "sandbox": ("sandbox", "app", "A local sandbox host: a real sshd on loopback running the stand-in prover."),
    "gpu-sampler": ("gpu_sampler", "app",
                    "The GPU sampler on the host: nvidia-smi dmon (and query-gpu) while the daemon runs."),
}


def load_verb(name: str) -> typer.core.TyperCommand | typer.core.TyperGroup:
    """The click command of one verb, built as `app.command()` / `app.add_typer()` would build it."""
    module, attr, _ = VERBS[name]
    target = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    if isinstance(target, typer.Typer):
        options: dict[str, Any] = {"pretty_exceptions_short": app.pretty_exceptions_short,
                                   "rich_markup_mode": app.rich_markup_mode}
        if "suggest_commands" in inspect.signature(typer.main.get_group_from_info).parameters:  # typer >= 0.16
            options["suggest_commands"] = app.suggest_commands
        return typer.main.get_group_from_info(typer.models.TyperInfo(target, name=name), **options)
    return cast(typer.core.TyperCommand, typer.main.get_command_from_info(
        typer.models.CommandInfo(name=name, callback=target),
        pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode))


# click's types below are typer's vendored copy (typer._click, private): Any stands for them
class _Verbs(MutableMapping[str, Any]):
    """The group's commands: every verb's name is there, its module is imported on first lookup."""

    def __init__(self, eager: MutableMapping[str, Any]) -> None:
        self._loaded = dict(eager)

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            if name not in VERBS:
                raise KeyError(name)
            self._loaded[name] = load_verb(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in VERBS or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        yield from VERBS
        yield from (name for name in self._loaded if name not in VERBS)

    def __len__(self) -> int:
        return len(set(VERBS) | set(self._loaded))


class _LazyGroup(typer.core.TyperGroup):
    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Verbs(self.commands)

    def list_commands(self, ctx: Any) -> list[str]:
        """The verbs' names, none imported (typer's own walks `.items()`); in typer's order: newer typer keeps
        the order they were added, older sorts them as click does."""
        keeps_order = "list_commands" in vars(typer.core.TyperGroup)
        return list(self.commands) if keeps_order else sorted(self.commands)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The list `--help` shows, from VERBS: listing a verb must not import it."""
        names = [name for name in self.list_commands(ctx) if name in VERBS]
        if not names:
            return
        with formatter.section("Commands"):  # whole: click wraps a long line under itself, never cuts it
            formatter.write_dl([(name, VERBS[name][2]) for name in names])


# One metavar style in every verb's help, as man pages write it: `HOST...`, `[PATH]...`, `--binary FILE`.
# Typer writes a required argument as `{HOST}` and an option's value by its type (`<str>`, `<int range>`).
METAVARS = {
    "--address": "ADDRESS", "--baseline": "DURATION", "--binary": "FILE", "--canary": "N",
    "--canary-wait": "SECONDS", "--compare": "BEFORE AFTER", "--dest": "DIR", "--example": "NAME", "--for": "DURATION",
    "--from": "HOST", "--group": "NAME", "--limit": "GLOB", "--match": "REGEX", "--max-fail": "N|P%",
    "--min-proofs": "N", "--output": "FILE", "--parallel": "N", "--plot": "FILE", "--port": "PORT", "--proofs": "N",
    "--report": "FILE", "--run": "N", "--samples": "FILE", "--then": "keep|rollback|ask", "--to": "RELEASE",
    "--user": "NAME", "--warmup": "N",
}
_option_metavar = typer.core.TyperOption.make_metavar


def _option(self: Any, *args: Any, **kwargs: Any) -> str:
    named = next((METAVARS[o] for o in self.opts if o in METAVARS), None)
    return self.metavar or named or _option_metavar(self, *args, **kwargs)


def _argument(self: Any, *args: Any, usage: bool = False, **kwargs: Any) -> str:
    var = self.metavar or (self.name or "").upper()
    if self.nargs != 1 and not var.endswith("..."):
        var += "..."
    return f"[{var}]" if usage and not self.required else var


typer.core.TyperOption.make_metavar = _option  # type: ignore[method-assign]
typer.core.TyperArgument.make_metavar = _argument  # type: ignore[method-assign]

app = typer.Typer(
    name="swapctl",
    cls=_LazyGroup,
    help="Ship a new build of a GPU daemon to remote GPU machines and swap it in safely.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    rich_markup_mode=None,  # help is plain text: "[build] table" must not be eaten as markup
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every verb takes -h too
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"swapctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                          help="Print swapctl's version and exit.")] = False,
    inventory: Annotated[str | None, typer.Option(
        "--inventory", "-i", help="An Ansible inventory (INI or YAML) whose hosts and groups (@group) every "
                                  "command can name, as `swapctl -i hosts.ini status @gpus`. Default: "
                                  "$SWAPCTL_INVENTORY, else the playbook's `inventory` key.",
        envvar="SWAPCTL_INVENTORY", show_envvar=False, show_default=False)] = None,
    connect_timeout: Annotated[float | None, typer.Option(
        "--connect-timeout", metavar="SECONDS", min=0.1,
        help="How long a host may take to answer (TCP and sshd's banner; twice this for `sudo -n true` "
             "where become = \"sudo\"); default 15, or $SWAPCTL_CONNECT_TIMEOUT.",
        envvar="SWAPCTL_CONNECT_TIMEOUT", show_envvar=False, show_default=False)] = None,
) -> None:
    from .common import RootOptions  # as the verbs import it: --help and --version need none of rich

    # each verb reads them from its context (common.root), never from os.environ
    ctx.obj = RootOptions(inventory, connect_timeout or RootOptions.connect_timeout_s)


def main() -> None:
    try:
        app()
    except SystemExit as done:
        _exit(done.code)
    _exit(0)


def _exit(code: object) -> None:
    """Exits as sys.exit(code) would, without the interpreter's teardown of every module (rich, pydantic,
    cryptography, paramiko): that took 70-130 ms after a verb's work was done. atexit handlers still run;
    with a thread still running, or under a profiler or tracer (cProfile, coverage write their data after
    the program returns), the ordinary exit is taken, as it always was."""
    if sys.getprofile() is not None or sys.gettrace() is not None or any(
            t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)  # type: ignore[arg-type] # what SystemExit carried, as it was
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # a closed pipe or stream: nothing more can be said
        code = code or 1
    os._exit(code or 0)
