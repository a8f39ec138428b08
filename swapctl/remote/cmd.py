"""Remote commands as argv pieces, quoted once when rendered; secrets print as ***.

A script's named inputs never reach a command line: any user on the host can read every process's
argv (/proc/PID/cmdline), and auditd's execve logging keeps them. They travel on the command's stdin
instead, ahead of anything else it reads there (Cmd.feed), and the script's first lines read them (the loader,
swapctl.host.scripts, puts host/remote/read_inputs.sh there)."""

from __future__ import annotations

import re
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

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a shell variable's name, and so an environment key swapctl sets

@dataclass(frozen=True)
class Cmd:
    """A command line: `Cmd("kill", "-TERM", "4242")` renders as `kill -TERM 4242`."""

    argv: tuple[Piece, ...]
    # A short name for progress and errors, e.g. "stop"; scripts show it instead of their body.
    label: str = field(default="", compare=False)
    # A script's named inputs: sent on stdin (feed), never on the command line
    inputs: tuple[tuple[str, Piece], ...] = ()

    def __init__(self, *argv: Piece, label: str = "", inputs: tuple[tuple[str, Piece], ...] = ()):
        if not argv:
            raise ValueError("empty command")
        for piece in argv:
            if not isinstance(piece, (str, Secret)):
                raise TypeError(f"command piece {piece!r} is not a string")
        object.__setattr__(self, "argv", tuple(argv))
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "inputs", tuple(inputs))

    @classmethod
    def script(cls, body: str, *args: Piece, label: str, shell: str = "sh",
               env: Mapping[str, Piece] | None = None, reader: str = "") -> Cmd:
        """A fixed shell script; values reach it as positional parameters ($1...) or, named, as shell
        variables read from its stdin by `reader` (put before `body`), never pasted in. Anything secret is
        a named input: positional parameters are on the host's command line for every user to read.

        bash gets --norc: started under sshd's session it would read ~/.bashrc a second time (the
        login shell already did), and a .bashrc running `pyenv init` or `conda init` costs 0.1-1 s."""
        for k in env or {}:
            if not NAME.fullmatch(k):
                raise ValueError(f"{k!r} is not a shell variable name")
        if any(isinstance(a, Secret) for a in args):
            raise ValueError("a secret goes as a named input (on stdin), never as an argument (a command line)")
        inputs = tuple((env or {}).items())
        if inputs and not reader:
            raise ValueError("named inputs need the script that reads them (swapctl.host.scripts sends it)")
        shell_argv = ("bash", "--norc") if shell == "bash" else (shell,)
        return cls(*shell_argv, "-c", reader + body if inputs else body, f"swapctl-{label}", *args,
                   label=label, inputs=inputs)

    def render(self) -> str:
        """The exact string sent to the host's shell (the named inputs go on stdin: feed)."""
        return " ".join(
            shlex.quote(p.value if isinstance(p, Secret) else p) for p in self.argv
        )

    def feed(self) -> bytes:
        """What the command reads on stdin before anything else: its named inputs, or nothing."""
        if not self.inputs:
            return b""
        text = "".join(f"{k}={shlex.quote(v.value if isinstance(v, Secret) else v)}\n" for k, v in self.inputs)
        return f"{text.count(chr(10))}\n{text}".encode("utf-8", "surrogateescape")

    def __str__(self) -> str:
        """What a person sees: secrets masked, a script shown by its label and its named inputs."""
        shown = [_masked(p) if isinstance(p, Secret) else shlex.quote(p) for p in self.argv]
        if self.label and "-c" in self.argv and (at := self.argv.index("-c")) + 2 < len(self.argv):
            named = [f"{k}=***" if isinstance(v, Secret) else shlex.quote(f"{k}={v}") for k, v in self.inputs]
            return f"<{self.label} script> {' '.join([*named, *shown[at + 3:]])}".rstrip()
        return " ".join(shown)


def _masked(p: Secret) -> str:
    """A secret as shown: `***`."""
    return "***"
