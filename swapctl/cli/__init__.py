"""The command line: parsing and presentation only; the work is in the library."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from .. import __version__
from . import build, deploy, experiment, fetch_logs, gpu_sampler, history, init, rollback, sandbox, status, timings

app = typer.Typer(
    name="swapctl",
    help="Ship a new build of a GPU daemon to remote GPU machines and swap it in safely.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    rich_markup_mode=None,  # help is plain text: "[build] table" must not be eaten as markup
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"swapctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print swapctl's version and exit.")] = False,
    inventory: Annotated[str | None, typer.Option(
        "--inventory", "-i", help="An Ansible inventory (INI or YAML) whose hosts and groups (@group) every "
                                  "command can name, as `swapctl -i hosts.ini status @gpus`. Default: "
                                  "$SWAPCTL_INVENTORY, else the playbook's `inventory` key.",
        show_default=False)] = None,
) -> None:
    if inventory is not None:  # read where the playbook is loaded, as -p's default $SWAPCTL_PLAYBOOK is
        os.environ["SWAPCTL_INVENTORY"] = inventory


app.command()(init.init)
app.command()(status.status)
app.command()(build.build)
app.command()(deploy.deploy)
app.command()(rollback.rollback)
app.command()(history.history)
app.command()(timings.timings)
app.command(name="fetch-logs")(fetch_logs.fetch_logs)
app.command()(experiment.experiment)
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(gpu_sampler.app, name="gpu-sampler")


def main() -> None:
    app()
