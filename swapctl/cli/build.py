"""`swapctl build`: the instrumented daemon built in Docker, its binary taken out with a manifest."""

from __future__ import annotations

from typing import Annotated

import typer

from .. import build as builder
from .. import playbook as pb
from ..errors import BadInput
from .common import PlaybookOpt, err, guarded, load_playbook, out, root, text

BuildArgOpt = Annotated[list[str] | None, typer.Option(
    "--build-arg", metavar="K=V",
    help="K=V passed to the Dockerfile (e.g. TIMING=1); repeat it. Overrides [build] args.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show the whole build log as it comes.")]


def build(
    ctx: typer.Context,
    playbook: PlaybookOpt = None,
    build_arg: BuildArgOpt = None,
    output: Annotated[str, typer.Option("--output", "-o", help="Where the binary goes.")] = "build/cuzk",
    verbose: VerboseOpt = False,
) -> None:
    """Build the daemon's image from the playbook's [build] table and take the binary out."""
    def go() -> None:
        run(load_playbook(playbook, root(ctx)), build_arg or [], output, verbose)

    guarded(go)


def parse_args(pairs: list[str]) -> dict[str, str]:
    args = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"--build-arg {pair!r} is not K=V (e.g. --build-arg TIMING=1)")
        args[key] = value
    return args


def run(book: pb.Playbook, pairs: list[str], output: str, verbose: bool) -> builder.Built:
    """Builds with a live status line (the whole log with `verbose`); prints where the binary went."""
    spec = builder.spec_from(book, parse_args(pairs))
    shown = " ".join(f"{k}={v}" for k, v in spec.args)
    with err.status(text(f"building {spec.dockerfile} {shown}")) as status:
        def line(s: str) -> None:
            if verbose:
                err.print(text(s), style="dim")
            elif s.startswith("Step "):
                status.update(text(f"building: {s[:120]}"))

        built = builder.build(spec, output, line)
    out.print(text(f"built {built.path}: sha256 {built.sha256[:12]}, image {built.image_id[7:19]}, "
                   f"{built.seconds:.1f} s ({shown or 'no build args'}); manifest {built.path}.build.json"))
    return built
