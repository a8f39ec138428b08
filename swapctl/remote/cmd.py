"""Remote commands as argv pieces, quoted once when rendered; secrets print as ***."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Secret:
    """A value that reaches the host but never a terminal, a log or a journal."""

    value: str

    def __str__(self) -> str:
        return "***"

    def __repr__(self) -> str:
        return "Secret('***')"


Piece = str | Secret


@dataclass(frozen=True)
class Cmd:
    """A command line: `Cmd("kill", "-TERM", "4242")` renders as `kill -TERM 4242`."""

    argv: tuple[Piece, ...]
    # A short name for progress and errors, e.g. "stop"; scripts show it instead of their body.
    label: str = field(default="", compare=False)

    def __init__(self, *argv: Piece, label: str = ""):
        if not argv:
            raise ValueError("empty command")
        for piece in argv:
            if not isinstance(piece, (str, Secret)):
                raise TypeError(f"command piece {piece!r} is not a string")
        object.__setattr__(self, "argv", tuple(argv))
        object.__setattr__(self, "label", label)

    @classmethod
    def script(cls, body: str, *args: Piece, label: str, shell: str = "sh",
               env: Mapping[str, Piece] | None = None) -> Cmd:
        """A fixed shell script; values reach it as positional parameters ($1...) or, named, as environment
        variables (`env name=value ... sh -c BODY`), never pasted in.

        bash gets --norc: started under sshd's session it would read ~/.bashrc a second time (the
        login shell already did), and a .bashrc running `pyenv init` or `conda init` costs 0.1-1 s."""
        assigned: list[Piece] = []
        for k, v in (env or {}).items():
            if not k.isidentifier():
                raise ValueError(f"{k!r} is not a shell variable name")
            assigned.append(Secret(f"{k}={v.value}") if isinstance(v, Secret) else f"{k}={v}")
        prefix = ("env", *assigned) if assigned else ()
        shell_argv = ("bash", "--norc") if shell == "bash" else (shell,)
        return cls(*prefix, *shell_argv, "-c", body, f"swapctl-{label}", *args, label=label)

    def render(self) -> str:
        """The exact string sent to the host's shell."""
        return " ".join(
            shlex.quote(p.value if isinstance(p, Secret) else p) for p in self.argv
        )

    def __str__(self) -> str:
        """What a person sees: secrets masked, a script shown by its label and its named inputs."""
        shown = [_masked(p) if isinstance(p, Secret) else shlex.quote(p) for p in self.argv]
        if self.label and "-c" in self.argv and (at := self.argv.index("-c")) + 2 < len(self.argv):
            shell_at = at - 2 if self.argv[at - 1] == "--norc" else at - 1
            named = shown[1:shell_at] if self.argv[0] == "env" else []
            return f"<{self.label} script> {' '.join([*named, *shown[at + 3:]])}".rstrip()
        return " ".join(shown)


def _masked(p: Secret) -> str:
    """A secret as shown: `***`, or `name=***` for a named script input."""
    name, sep, _ = p.value.partition("=")
    return f"{name}=***" if sep and name.isidentifier() else "***"
