"""Step 4 and the end of a deploy: the host's release store. Backups made before the stop, manifests,
releases marked bad, and pruning beyond `releases.keep`."""

from __future__ import annotations

from ..remote.cmd import Cmd
from . import scripts
from .context import Context
from .plan import Backup, Situation
from .releases import Release, to_prune
from .session import manifest


def backup_cmd(ctx: Context, b: Backup) -> Cmd:
    return scripts.command("backup.sh", src=b.source, dir=b.release.dir(ctx.state), name=b.release.name,
                           manifest=manifest(b.release))


def backup(ctx: Context, sit: Situation) -> None:
    """Saves what the plan lists before anything stops: the running daemon, a plain file at the binary path."""
    for b in sit.to_save:
        ctx.emit("backup", f"saving {b.release.source} release {b.release.id} from {b.source}")
        ctx.run(backup_cmd(ctx, b))


def write_manifest(ctx: Context, rel: Release) -> None:
    ctx.run(scripts.command("write_file.sh", path=f"{rel.dir(ctx.state)}/manifest.json", text=manifest(rel),
                            label="manifest"))


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

