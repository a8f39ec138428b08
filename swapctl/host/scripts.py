"""The one loader of host scripts: fixed shell scripts shipped beside this module, a folder per family
(`swap/`, `facts/`, `logs/`, `gpu/`, `remote/`), each file name used once across them.

A script takes its inputs by name, as shell variables it declares at its top (`: "${pid?}"`), read from its
stdin by `read_inputs.sh`, which `command` puts before it (the GPU sampler, which sampler-ctl.sh starts, finds
its own in its environment), and lists (config files, a command line) as arguments; every value reaches it
quoted once by `Cmd`, never pasted into its text. Functions several scripts share live in library files
(`lib.sh`, `daemon.sh`, `release.sh`, `smi.sh`, `status_get.sh`, `cgroup.sh`) that a script includes by name
(`. ./lib.sh`, from any family); the host has no copy of them, so `load` puts each library's text in place of its
include line. A script whose output is parsed prints report
lines (`WORD args...`) in words its parser declares as a `ReportWord` (swap.words.Word, gpu.sampler.CtlWord),
or `==> name` sections (`split_sections`) that its parser lists.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from typing import Self

from ..remote.cmd import Cmd, Piece, Secret

_INCLUDE = re.compile(r"^\. \./([\w-]+\.sh)$", re.M)
_INPUT = re.compile(r'"\$\{(\w+)\?\}"')

# The scripts' texts by file name when they travel inside Python rather than beside it: the Ansible
# collection's build (scripts/build_collection.py) fills this in its copy, as Ansible ships only .py files.
TEXTS: dict[str, str] = {}

READER = "read_inputs.sh"  # put before a script with named inputs: it reads them from stdin (Cmd.feed)

# Runs a program under another argv[0] without adding to its environment (bash's exec -a would).
PERL_ARGV0 = 'my $exe = shift; exec {$exe} @ARGV or die "swapctl: cannot run $exe: $!\\n";'


@dataclass(frozen=True)
class Script:
    """A host script as it is sent: its libraries in place, the shell its #! line names, its inputs."""

    name: str
    body: str
    shell: str  # sh | bash: bash where its first line (#! or `# shellcheck shell=`) names it
    inputs: frozenset[str]  # the names it declares with `: "${name?}"`


class ReportWord(StrEnum):
    """The words one script (or family) starts its report lines with: a subclass lists them."""

    @classmethod
    def of(cls, line: str) -> tuple[Self | None, str]:
        """A report line's word (None for a line that is not a report) and the rest of the line."""
        head, _, rest = line.partition(" ")
        try:
            return cls(head), rest
        except ValueError:
            return None, line


@functools.cache
def _families() -> dict[str, str]:
    """Each shipped script's family folder, by file name; a name in two families is refused."""
    found: dict[str, str] = {}
    for family in sorted(resources.files(__package__).iterdir(), key=lambda p: p.name):
        if not family.is_dir() or family.name.startswith(("_", ".")):
            continue
        for p in family.iterdir():
            if p.name.endswith(".sh"):
                if p.name in found:
                    raise RuntimeError(f"host script {p.name} is in {found[p.name]}/ and {family.name}/: name it once")
                found[p.name] = family.name
    return found


def _text(name: str) -> str:
    if TEXTS:
        return TEXTS[name]
    return resources.files(__package__).joinpath(_families()[name], name).read_text(encoding="utf-8")


def _inline(text: str, seen: set[str]) -> str:
    """`text` with each `. ./lib.sh` line replaced by that library (each library once)."""

    def include(m: re.Match[str]) -> str:
        lib = m.group(1)
        if lib in seen:
            return ""
        seen.add(lib)
        return _inline(_text(lib), seen).rstrip("\n")

    return _INCLUDE.sub(include, text)


@functools.cache
def load(name: str) -> Script:
    """The script `name` (e.g. "swap.sh"), read from the package's data."""
    text = _text(name)
    first, _, _ = text.partition("\n")
    shell = "bash" if first.startswith(("#!", "# shellcheck shell=")) and first.endswith("bash") else "sh"
    declared = frozenset(n for line in text.splitlines() if line.startswith(': "') for n in _INPUT.findall(line))
    return Script(name, _inline(text, set()), shell, declared)


def names() -> list[str]:
    """Every shipped script and library, for the linters and tests."""
    return sorted(TEXTS) if TEXTS else sorted(_families())


def command(name: str, /, *args: Piece, label: str | None = None, bash: bool = False, **inputs: Piece | int) -> Cmd:
    """The command that runs script `name` with its named `inputs` and its arguments `args`.

    `bash` runs an sh script under bash (the swap script, when readiness is a port: /dev/tcp is bash's)."""
    return command_of(name, inputs, *args, label=label, bash=bash)


def command_of(name: str, inputs: Mapping[str, Piece | int], *args: Piece, label: str | None = None,
               bash: bool = False) -> Cmd:
    """As `command`, with the inputs in a mapping."""
    script = load(name)
    if set(inputs) != script.inputs:
        wrong = sorted(set(inputs) ^ script.inputs)
        raise ValueError(f"{name} takes inputs {sorted(script.inputs)}; got {sorted(inputs)} (differs in {wrong})")
    env = {k: v if isinstance(v, (str, Secret)) else str(v) for k, v in inputs.items()}
    return Cmd.script(script.body, *args, label=label or name.removesuffix(".sh").replace("_", "-"),
                      shell="bash" if bash else script.shell, env=env, reader=load(READER).body if env else "")


def script(body: str, *args: Piece, label: str, bash: bool = False) -> Cmd:
    """An ad-hoc script body with positional parameters (tests, probes)."""
    return Cmd.script(body, *args, label=label, shell="bash" if bash else "sh")
