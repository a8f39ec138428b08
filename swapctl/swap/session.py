"""Step 3, the upload session: what the upload sends is made during the preflight, its host side started
before the lock, and the binary put in place as a release by the cheapest method (see upload.py)."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import BadInput, Refused, Unreachable
from ..remote.cmd import Cmd, Secret
from ..remote.host import Prepared
from . import upload
from .context import Context
from .journal_entry import Upload
from .plan import DeployPlan, Situation
from .releases import Release
from .report import Word


def manifest(rel: Release) -> Secret:
    """A release's manifest as a script input: it carries the daemon's environment, secrets included,
    so it reaches the host but never an error message or a terminal."""
    return Secret(rel.to_json())


def upload_path(ctx: Context, release_id: str) -> str:
    """The one temporary name of a release's upload: a later deploy resumes it."""
    return f"{ctx.state}/releases/.upload-{release_id}"


def patch_base(ctx: Context, sit: Situation) -> upload.Base | None:
    """The release to patch against: one the host has and this machine cached, what runs first."""
    cache = upload.Cache()
    order = [sit.running or "", sit.current or "", *reversed(sit.history)]
    order += sorted(sit.releases, key=lambda r: sit.releases[r].created, reverse=True)
    for rid in order:
        rel = sit.releases.get(rid)
        if rel and (local := cache.get(rel.sha256)):
            return upload.Base(rel.id, rel.path(ctx.state), local)
    return None


class Session:
    """One deploy's upload: started early, sent once, discarded whatever happens."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.patch: upload.Patch | None = None  # a patch against a release the host has, being made
        self.frames: upload.Frames | None = None  # or the first zstd frames of a fresh upload
        self.ready: Prepared | None = None  # the receive's host side, started before the lock

    def start(self, plan: DeployPlan) -> None:
        """Starts making what the upload will send now, while the rest of the preflight, the confirmation and
        the lock go on: a patch (indexing the old binary is most of its time, 0.4 s for 75 MB; hosts on
        the same base share it), or else the first zstd frames of a fresh upload."""
        self.discard()
        runs_it = plan.daemon is not None and plan.daemon.sha256 == plan.new.sha256
        if plan.new.id in plan.releases or not plan.host_zstd or runs_it:
            return
        base = patch_base(self.ctx, plan)
        tmp = upload_path(self.ctx, plan.new.id)
        if base and upload.Patch.possible():
            self.patch = upload.Patch.of(base, plan.binary.path)
        elif not base and not any(p.path == tmp for p in plan.partials):  # a resume starts at the host's bytes
            self.frames = upload.Frames(plan.binary.path)

    def uploader(self, plan: DeployPlan) -> upload.Uploader:
        new, ctx = plan.new, self.ctx

        def progress(done: int, wire: int) -> None:
            ctx.emit("upload", done=done, total=new.size, wire=wire)
            if ctx.interrupts.count:
                raise KeyboardInterrupt

        return upload.Uploader(ctx.host, plan.binary.path, new.size, upload_path(ctx, new.id),
                               {"dir": new.dir(ctx.state), "name": new.name, "sha": new.sha256,
                                "manifest": manifest(new)}, progress, plan.host_zstd)

    def prepare(self, plan: DeployPlan) -> None:
        """Starts the host side of the upload now, before the lock: its shell start-up (.bashrc) then runs
        beside the lock's instead of after it. It acts only when the upload begins (sh/receive.sh)."""
        if plan.new.id in plan.releases:  # nothing to send
            return
        sender = self.uploader(plan)
        try:
            self.ready = sender.prepare(plan.partial(sender.tmp), patch_base(self.ctx, plan))
        except Unreachable:
            pass  # the lock and the upload meet it again and say so

    def discard(self) -> None:
        if self.ready is not None:
            self.ready.close()
            self.ready = None
        if self.patch is not None:
            self.patch.release()
            self.patch = None
        if self.frames is not None:
            self.frames.close()
            self.frames = None

    def send(self, plan: DeployPlan, write_manifest: Callable[[Release], None]) -> Upload:
        """Puts the new binary in place as a release, by the cheapest method the host allows."""
        new, ctx = plan.new, self.ctx
        if new.id in plan.releases:
            ctx.emit("upload", f"release {new.id} is already on the host: nothing to send")
            if plan.releases[new.id] != new:  # record the command line it will run with now
                write_manifest(new)
            return Upload("present", 0, 0.0)
        sender = self.uploader(plan)
        base = patch_base(ctx, plan)
        made, self.patch = self.patch, None
        if made and (base is None or made.old != base.local_path or made.new != plan.binary.path):
            made.release()
            made = None
        early, self.frames = self.frames, None
        ready, self.ready = self.ready, None
        sent, report = sender.run(plan.partial(sender.tmp), base, made, early, ready)
        if report.failure is Word.NOSPACE:
            raise Refused(f"the host's disk filled up during the upload ({report.detail} KiB free in "
                          f"{ctx.state}/releases); the partial upload was removed and the daemon runs on: free "
                          f"some space and deploy again", host=ctx.name)
        if report.damaged:
            ctx.host.run(Cmd("rm", "-f", "--", sender.tmp), check=False)
            raise Refused(f"the upload arrived corrupted ({report.summary()[:120]}; expected sha256 {new.id}); it "
                          f"was removed and nothing changed: deploy again", host=ctx.name)
        if report.missing:
            ctx.host.run(Cmd("rm", "-rf", "--", new.dir(ctx.state)), check=False)
            raise BadInput(f"{plan.binary.path} needs a library the host lacks: {report.missing[0]} (install it on "
                           f"the host, or link it statically)", host=ctx.name)
        if not report.installed:
            raise Refused(f"the upload did not install: {report.summary()[:200]}", host=ctx.name)
        return sent
