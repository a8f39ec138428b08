"""The command a release runs with: what a new build (or a release with no record of its own) starts with,
and the command line the swap script runs. Part of the swap core both sides call, the controller
(preflight, swaprun) and the Ansible modules on the host (shipped by scripts/build_collection.py), so the
two start a release alike. Standard library only: it runs inside an Ansible module."""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePosixPath
from typing import Protocol

from ..facts.releases import Release
from ..host.scripts import PERL_ARGV0
from ..playbook.spec import DaemonSpec
from .environ import carried

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_ENV = (("PATH", DEFAULT_PATH), ("HOME", "/root"))  # where nothing ran before to carry one over


class Ran(Protocol):
    """What a new release's command is taken from: the daemon running now, else the current release."""

    @property
    def argv(self) -> tuple[str, ...] | None: ...
    @property
    def cwd(self) -> str | None: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...] | None: ...
    @property
    def uid(self) -> int | None: ...
    @property
    def gid(self) -> int | None: ...


def release_command(d: DaemonSpec, env: tuple[tuple[str, str], ...], base: Ran | None,
                    user_ids: tuple[int, int] | None) -> Release:
    """What a release with no record of its own runs with, as a deploy's new build does: daemon.args, else
    `base`'s arguments; daemon.cwd, else `base`'s, else the binary's directory; `base`'s environment as
    environ.carried keeps it (no loader variable the playbook does not name), then `env` (daemon.env, its
    secret ones too); as daemon.user (`user_ids`: its uid and gid on the host, None where it has none),
    else as `base` ran; root is (None, None). Only the command's fields are set."""
    args = d.args if d.args is not None else (tuple(base.argv[1:]) if base and base.argv else ())
    cwd = d.cwd or (base.cwd if base and base.cwd else str(PurePosixPath(d.binary).parent))
    keep = (*d.keep_loader_env, *(k for k, _ in env))
    merged = dict(carried(base.env, keep)[0] if base and base.env else DEFAULT_ENV)
    merged.update(env)
    ids = user_ids if d.user and user_ids else ((base.uid, base.gid) if base else (None, None))
    uid, gid = ids if ids[0] else (None, None)
    return Release(sha256="", size=0, name="", created="", by="", argv=(d.binary, *args), cwd=cwd,
                   env=tuple(merged.items()), uid=uid, gid=gid)


def as_it_starts(rel: Release, cmd: Release) -> Release:
    """`rel` as a swap starts it: its recorded command line; one without its directory gets `cmd`'s (the
    playbook's, release_command); one with no command line on record (saved from the disk, or read back
    without one) runs as `cmd` says: never a bare binary in /."""
    if rel.argv and rel.cwd:
        return rel
    if rel.argv:
        return replace(rel, cwd=cmd.cwd)
    return replace(rel, argv=cmd.argv, cwd=cmd.cwd, env=cmd.env, uid=cmd.uid, gid=cmd.gid)


class NoCommand(ValueError):
    """A release with no recorded command line or directory: swapctl never starts a bare binary in /."""


def command_for(binary: str, state: str, rel: Release) -> list[str]:
    """The command line a release runs with, as it was recorded, as the uid and gid it ran as. The daemon
    runs from the binary path (now the release) when that is its recorded argv[0]; a command recorded with
    another argv[0] (an adopted daemon) runs from its saved copy, with that argv[0]. NoCommand where none
    is recorded (as_it_starts gives every release a swap starts one)."""
    argv = rel.argv
    if not argv or not rel.cwd:
        raise NoCommand(rel.id)
    command = list(argv) if argv[0] == binary and "=" not in argv[0] else \
        ["perl", "-e", PERL_ARGV0, rel.path(state), *argv]
    if rel.uid:  # not root: setpriv drops to it (its groups from /etc/group) before the daemon starts
        command = ["setpriv", f"--reuid={rel.uid}", f"--regid={rel.gid or 0}", "--init-groups", *command]
    return command


CONFIG_FLAGS = ("-c", "--config")


def config_paths(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The config files a daemon's command line names (`--config FILE`, `-c FILE`, `--config=FILE`): what a
    swap checks is there before the stop, on both sides."""
    paths = []
    for i, arg in enumerate(argv):
        if arg in CONFIG_FLAGS and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif arg.startswith("--config="):
            paths.append(arg.split("=", 1)[1])
    return tuple(paths)
