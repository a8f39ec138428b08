"""The Send step, the upload session: the cheapest method the host allows, chosen once for the plan (choose);
what it sends made during the preflight, its host side started before the lock, and the binary put in
place as a release by it (see upload.py)."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import BadInput, Refused, Unreachable
from ..facts.journal_entry import Upload
from ..facts.releases import Release
from ..remote.cmd import Cmd, Secret
from ..remote.host import Prepared
from . import upload
from .context import Context
from .plan import Base, DeployPlan, Method, Situation
from .words import Word


def manifest(rel: Release) -> Secret:
    """A release's manifest as a script input: it carries the daemon's environment, secrets included,
    so it reaches the host but never an error message or a terminal."""
    return Secret(rel.to_json())


def upload_path(ctx: Context, release_id: str) -> str:
    """The one temporary name of a release's upload: a later deploy resumes it."""
    return f"{ctx.state}/releases/.upload-{release_id}"


def patch_base(ctx: Context, sit: Situation) -> Base | None:
    """The release to patch against: one the host has and this machine cached, what runs first."""
    cache = upload.Cache()
    order = [sit.running or "", sit.current or "", *reversed(sit.history)]
    order += sorted(sit.releases, key=lambda r: sit.releases[r].created, reverse=True)
    for rid in order:
        rel = sit.releases.get(rid)
        if rel and (local := cache.get(rel.sha256)):
            return Base(rel.id, rel.path(ctx.state), local)
    return None


def choose(ctx: Context, sit: Situation, new: Release) -> Method:
    """How `new` reaches the host, best first: nothing where it has the release; a zstd patch against a
    release it has and this machine cached (both sides need zstd); a zstd stream; SFTP where the host has no
    zstd. A stream or SFTP resumes after the bytes an interrupted upload of it left on the host."""
    if new.id in sit.releases:
        return Method("present")
    partial = sit.partial(upload_path(ctx, new.id))
    offset = partial if 0 < partial < new.size else 0
    if not sit.host_zstd:
        return Method("sftp", offset=offset)
    base = patch_base(ctx, sit) if upload.Patch.possible() else None
    return Method("patch", base=base) if base else Method("zstd", offset=offset)


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
        method = plan.upload
        if plan.daemon is not None and plan.daemon.sha256 == plan.new.sha256:  # a --restart: likely unchanged
            return
        if method.kind == "patch" and method.base:
            self.patch = upload.Patch.of(method.base, plan.binary.path)
        elif method.kind == "zstd":
            self.frames = upload.Frames(plan.binary.path, method.offset)

    def uploader(self, plan: DeployPlan) -> upload.Uploader:
        new, ctx = plan.new, self.ctx

        def progress(done: int, wire: int) -> None:
            ctx.emit("upload", done=done, total=new.size, wire=wire)
            ctx.interrupts.checkpoint()

        return upload.Uploader(ctx.host, plan.binary.path, new.size, upload_path(ctx, new.id),
                               {"dir": new.dir(ctx.state), "name": new.name, "sha": new.sha256,
                                "manifest": manifest(new)}, progress)

    def prepare(self, plan: DeployPlan) -> None:
        """Starts the host side of the upload now, before the lock: its shell start-up (.bashrc) then runs
        beside the lock's instead of after it. It acts only when the upload begins (host/swap/receive.sh)."""
        if plan.upload.kind == "present":  # nothing to send
            return
        try:
            self.ready = self.uploader(plan).prepare(plan.upload)
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
        if plan.upload.kind == "present":
            ctx.emit("upload", f"release {new.id} is already on the host: nothing to send")
            if plan.releases[new.id] != new:  # record the command line it will run with now
                write_manifest(new)
            return Upload("present", 0, 0.0)
        sender = self.uploader(plan)
        made, self.patch = self.patch, None
        base = plan.upload.base
        if made and (base is None or made.old != base.local_path or made.new != plan.binary.path):
            made.release()  # made for another plan's binary
            made = None
        early, self.frames = self.frames, None
        ready, self.ready = self.ready, None
        sent, report = sender.run(plan.upload, made, early, ready)
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
