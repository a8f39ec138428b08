"""The Save step, and the release store's upkeep at the end of a deploy. Backups made before the stop, manifests,
releases marked bad, and pruning beyond `releases.keep`."""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from ..errors import Refused, RemoteCommandFailed
from ..facts.releases import Release, to_prune
from ..host import scripts
from ..remote.cmd import Cmd
from .context import Context
from .plan import Backup, Situation
from .send import manifest
from .words import Word

S = TypeVar("S", bound=Situation)


def backup_cmd(ctx: Context, b: Backup) -> Cmd:
    return scripts.command("backup.sh", src=b.source, dir=b.release.dir(ctx.state), name=b.release.name,
                           manifest=manifest(b.release))


def backup(ctx: Context, sit: S) -> S:
    """Saves what the plan lists before anything stops: the running daemon, a plain file at the binary path.
    Returns the plan to go on with: `sit`, or, when the daemon exited by itself meanwhile and
    daemon.gone_before_stop says "deploy", `sit` without it; else raises Refused (gone)."""
    for b in sit.to_save:
        ctx.emit("backup", f"saving {b.release.source} release {b.release.id} from {b.source}")
        try:
            saved = ctx.run(backup_cmd(ctx, b)).stdout.strip()
        except RemoteCommandFailed as exc:  # nothing has stopped yet: a refusal, not an error of swapctl's
            raise not_written(ctx, f"a backup of {b.source} in {b.release.dir(ctx.state)}", exc) from None
        if saved == Word.GONE and sit.daemon:
            return backup(ctx, without_daemon(ctx, sit))
    return sit


def not_written(ctx: Context, what: str, exc: RemoteCommandFailed) -> Refused:
    """A write before the stop that the host refused (a full disk, found by the fault campaign at the backup):
    exit 3, since nothing was stopped or changed, with the host's last line and what to do."""
    tail = (exc.output_tail.strip().splitlines() or ["no output"])[-1]
    return Refused(f"could not write {what} ({tail}): is the disk full? Nothing was stopped or changed; free "
                   f"space on the host (`df {ctx.state}`) and deploy again", host=ctx.name)


def without_daemon(ctx: Context, sit: S) -> S:
    """`sit` once its daemon exited by itself before the stop: refused (nothing was changed), or, with
    daemon.gone_before_stop = "deploy", the same plan with no old daemon to stop or save."""
    assert sit.daemon
    if ctx.spec.gone_before_stop != "deploy":
        raise gone(ctx, sit.daemon.pid)
    ctx.emit("backup", f"the daemon (pid {sit.daemon.pid}) exited on its own before the stop: going on with none "
                       f"(daemon.gone_before_stop = \"deploy\")")
    # its build is kept all the same where the binary path holds it, or a rollback could never go back to it
    return replace(sit, daemon=None, to_save=tuple(k for b in sit.to_save if (k := b.once_gone())))


def gone(ctx: Context, pid: int) -> Refused:
    log = f"journalctl -u {ctx.spec.unit}" if ctx.spec.journal else ctx.spec.log
    return Refused(f"the daemon (pid {pid}) exited on its own during the preflight; nothing was changed: look at "
                   f"its log ({log}), then deploy again (no daemon runs now), or set daemon.gone_before_stop = "
                   f"\"deploy\" to go on without one", host=ctx.name)


def write_manifest(ctx: Context, rel: Release) -> None:
    """The release's manifest, written before anything stops: a host that cannot take it (a full disk) refuses
    the deploy with nothing changed (exit 3), not an error of swapctl's."""
    path = f"{rel.dir(ctx.state)}/manifest.json"
    try:
        ctx.run(scripts.command("write_file.sh", path=path, text=manifest(rel), label="manifest"))
    except RemoteCommandFailed as exc:
        raise not_written(ctx, path, exc) from None


def mark(ctx: Context, rel: Release, status: str) -> Release:
    """Records `rel` as ok or bad (a bad release is never a rollback target)."""
    marked = rel.marked(status)
    write_manifest(ctx, marked)
    return marked


def prune_cmd(ctx: Context, releases: dict[str, Release], protect: set[str],
              stale: tuple[str, ...] = ()) -> tuple[list[str], Cmd | None]:
    """The releases beyond keep_releases (never those in `protect`), and the command that removes them and
    the `stale` partial uploads (None: nothing to remove)."""
    gone = to_prune(releases, ctx.book.keep_releases, protect)
    if not gone and not stale:
        return [], None
    return [r.id for r in gone], scripts.command("remove.sh", *[r.dir(ctx.state) for r in gone], *stale,
                                                 state=ctx.state, label="prune")

