"""`swapctl uncordon HOST...`: lift a Curio cordon that swapctl left (its swap script died before it could)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import ExitCode, Refused
from ..facts import cordon
from ..remote.group import on_hosts
from .common import (
    LimitOpt,
    PlaybookOpt,
    RootOptions,
    err,
    guarded,
    load_playbook,
    out,
    root,
    select_hosts,
    text,
    worst,
)


def uncordon(
    ctx: typer.Context,
    hosts: Annotated[list[str], typer.Argument(
        metavar="HOST", help="Host names, user@address:port, ssh_config aliases, or @group.")],
    playbook: PlaybookOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Lift a Curio cordon that swapctl left on each host (never one it did not make, nor during a swap)."""
    guarded(lambda: _uncordon(hosts, playbook, limit, root(ctx)))


def lift(host_name: str, view: cordon.CordonView) -> str:
    """The line for one host's lift; raises Refused where a swap runs or the lift failed."""
    if view.state == "swapping" and view.left:
        raise Refused("a swap runs on the host now: its own script lifts its cordon when it ends; nothing was "
                      "uncordoned", host=host_name)
    if view.state == "unsafe":
        raise Refused("its state directory may be changed by another user: nothing was uncordoned", host=host_name)
    said = cordon.lifted_said(view, host_name)
    if said is None:
        return f"no cordon of swapctl's on {host_name}"
    if view.lifted != "ok":
        raise Refused(f"{said}; run `swapctl uncordon {host_name}` again once it is fixed", host=host_name)
    return f"{host_name}: {said}"


def _uncordon(targets: list[str], playbook_path: str | None, limit: str | None, opts: RootOptions) -> int:
    book = load_playbook(playbook_path, opts)
    book.require_daemon()
    specs = select_hosts(book, targets, limit)
    results = on_hosts(specs, lambda host: cordon.read(host, book, lift=True))
    codes = []
    for name, result in results.items():
        try:
            if isinstance(result, BaseException):
                raise result
            out.print(text(lift(name, result)))
            codes.append(int(ExitCode.OK))
        except Exception as e:  # noqa: BLE001 (each host's failure is its line; the others are still said)
            err.print(text(f"swapctl: {e}"), style="bold red")
            codes.append(int(getattr(e, "exit_code", ExitCode.FAILED)))
    return worst(codes)
