"""Remote commands as argv pieces, quoted once when rendered; secrets print as ***."""

from __future__ import annotations

import shlex
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
    def script(cls, body: str, *args: Piece, label: str, shell: str = "sh") -> "Cmd":
        """A fixed shell script; values reach it as positional parameters ($1...), never pasted in.

        bash gets --norc: started under sshd's session it would read ~/.bashrc a second time (the
        login shell already did), and a .bashrc running `pyenv init` or `conda init` costs 0.1-1 s."""
        shell_argv = ("bash", "--norc") if shell == "bash" else (shell,)
        return cls(*shell_argv, "-c", body, f"swapctl-{label}", *args, label=label)

    def render(self) -> str:
        """The exact string sent to the host's shell."""
        return " ".join(
            shlex.quote(p.value if isinstance(p, Secret) else p) for p in self.argv
        )

    def __str__(self) -> str:
        """What a person sees: secrets masked, a script shown by its label."""
        if self.label and "-c" in self.argv[1:3] and len(self.argv) >= (at := self.argv.index("-c")) + 3:
            rest = " ".join(shlex.quote(str(p)) for p in self.argv[at + 3:])
            return f"<{self.label} script> {rest}".rstrip()
        return " ".join(shlex.quote(str(p)) if not isinstance(p, Secret) else "***" for p in self.argv)
