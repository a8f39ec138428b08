"""The command line: parsing and presentation only; the work is in the library."""

from __future__ import annotations

import typer

from . import build, deploy, experiment, fetch_logs, gpu_sampler, history, init, rollback, sandbox, status, timings

app = typer.Typer(
    name="swapctl",
    help="Ship a new build of a GPU daemon to remote GPU machines and swap it in safely.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
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
