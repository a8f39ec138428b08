"""--dry-run: what each of the plan's steps (swap/steps.py) does, and the remote command it runs, rendered
from the same `Cmd`s (secrets masked); the CLI shows the commands with --verbose."""

from __future__ import annotations

from ..remote.cmd import Cmd
from . import lock, save, steps, swaprun
from .context import Context
from .plan import DeployPlan, Plan
from .send import Session


def describe(ctx: Context, plan: Plan, session: Session) -> list[tuple[str, str]]:
    """What each step does, in order, and its command as `Host.shown` shows it ("": none of its own)."""
    show = ctx.host.shown  # as the host runs it: through `sudo -n --` where swapctl becomes root
    return [(what, show(cmd) if cmd else "") for step in steps.of(plan)
            for what, cmd in said(ctx, plan, session, step)]


def said(ctx: Context, plan: Plan, session: Session, step: steps.Step) -> list[tuple[str, Cmd | None]]:
    """What one step does, and the command it runs for that (None: no command of its own)."""
    new, st = plan.new, ctx.state
    match step:
        case steps.Lock():
            return [("the deploy lock, held for the whole deploy (flock -n on lock)", lock.lock_cmd(ctx))]
        case steps.Send(method=method) if isinstance(plan, DeployPlan) and method.kind != "present":
            sender = session.uploader(plan)
            sha = f"takes its sha256 (openssl dgst -sha256, else sha256sum): it must be {new.sha256}; then ldd"
            what = (f"{method.said()} {plan.binary.path} {sender.tmp}{method.resumed()}, then: {sha}"
                    if method.kind == "sftp" else f"receive {method.said()} into {sender.tmp}{method.resumed()}; {sha}")
            return [(what, sender.first_cmd(method))]
        case steps.Save(backups=backups):
            return [(f"backup ({b.release.source}): cp {b.source} {b.release.path(st)}", save.backup_cmd(ctx, b))
                    for b in backups]
        case steps.SwapIn():
            return [(_swap_said(ctx, plan, step), swaprun.swap_cmd(
                ctx, plan.daemon, step.target, swaprun.gpu_limits(ctx, plan.status, [plan.daemon.pid] if plan.daemon
                                                                  else []), step.fallback, plan.unit))]
        case steps.Prune():
            gone, cmd = save.prune_cmd(ctx, {r.id: r for r in step.releases}, set(step.protect), step.stale)
            what = (f"remove releases {', '.join(gone)} (beyond releases.keep = {ctx.book.keep_releases})"
                    if gone else "no release to remove")
            return [(f"then, once the swap went well, {what}" + (f" and {len(step.stale)} interrupted upload(s)"
                                                                  if step.stale else "")
                     + ": sent to a shell started before the swap, which runs it only once it has come whole", cmd)]
    return []


def _swap_said(ctx: Context, plan: Plan, step: steps.SwapIn) -> str:
    new, st, spec, d = step.target, ctx.state, ctx.spec, plan.daemon
    stop = (f"systemctl stop {plan.unit}" if plan.unit else
            f"kill -TERM {'-' if d.group_leader else ''}{d.pid}; after {spec.stop_grace_s:g} s: kill -KILL" if d
            else "nothing runs: no stop")
    stop = _before_stop(ctx, plan) + stop
    env = f"(its {len(new.env or ())} recorded variables, through a pipe: on no command line)"
    start = (f"systemctl start {plan.unit} (its ExecStart runs {spec.binary})" if plan.unit else
             f"cd {new.cwd} && env -i -- sh {env} && setsid {' '.join(new.argv or ())} >> {spec.log}")
    back = f"release {step.fallback.id}" if step.fallback else "nothing (no earlier good release)"
    return (f"{stop}; wait until its pids are gone and MemAvailable >= {ctx.book.memory.min_available_gib:g} GiB "
            f"(at most {ctx.book.memory.release_timeout_s:g} s); ln -sfn {new.path(st)} {spec.binary}; {start}; "
            f"wait for /{spec.ready_log}/ in {spec.log if not spec.journal else 'its journal'} (at most "
            f"{spec.ready_timeout_s:g} s); if it fails, back to {back}; however it ends, one line appended to "
            f"{st}/journal.jsonl")


def _before_stop(ctx: Context, plan: Plan) -> str:
    """What the swap does before it stops a running daemon, by daemon.stop (swap.sh: cordon_drain with the
    host's Curio nodes, before_stop with a status_url), where the dry run said only the kill."""
    spec, cur = ctx.spec, ctx.book.curio_of(ctx.name)
    if not plan.daemon or spec.stop == "term":
        return ""
    limit = f"at most {spec.drain_timeout_s:g} s, then {'stop anyway' if spec.drain_timeout == 'stop' else 'refuse'}"
    drain = (f"read {spec.status_url} until no proof is in flight ({limit}); SIGINT (cuzk takes no new work); "
             if spec.status_url else "")
    if spec.stop == "cordon" and cur.nodes:
        return (f"cordon {', '.join(cur.nodes)} (Curio; uncordoned once the new daemon is up, however the swap "
                f"ends); wait at least {cur.poll_s:g} s and until they own no cuzk task; " + drain)
    return drain
