"""The CLI run in-process, in an environment of the caller's: its streams, its variables, its width.

`swapctl` itself runs in the process's own (cli.main). A test runs a verb here as httpie's tests run
`http()`: no fork and no interpreter start-up, through the same consoles and the same exit codes, so what
it reads is what a user at a terminal of that width, or a script reading a pipe, is shown. Only for what
needs no host: a verb that connects somewhere runs as a process (tests/lab.py's `swapctl`)."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field


@dataclass
class Environment:
    """What one run reads and writes. The streams default to fresh buffers the caller reads afterwards."""

    stdout: io.StringIO = field(default_factory=io.StringIO)
    stderr: io.StringIO = field(default_factory=io.StringIO)
    environ: Mapping[str, str] = field(default_factory=dict)  # set over the process's own for the run
    columns: int = 80


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str


def run(argv: list[str], env: Environment | None = None) -> Ran:
    """`swapctl ARGV...` in this process, in `env`; its exit code and what it wrote."""
    from . import app
    from .common import err, out

    env = env or Environment()
    with _variables(env.environ), redirect_stdout(env.stdout), redirect_stderr(env.stderr):
        widths = out._width, err._width  # None: the width the console finds itself, as a process's does
        out.width = err.width = env.columns
        try:
            app(argv, prog_name="swapctl")
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        finally:
            out._width, err._width = widths
    return Ran(code, env.stdout.getvalue(), env.stderr.getvalue())


@contextmanager
def _variables(environ: Mapping[str, str]) -> Iterator[None]:
    """The process's variables with `environ` set over them (the $SWAPCTL_ variables a user would export),
    as they were afterwards. No verb writes one: the root options reach it through its context."""
    saved = dict(os.environ)
    os.environ.update(environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
