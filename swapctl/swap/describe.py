"""--dry-run: the remote commands a deploy or rollback runs, rendered from the same `Cmd`s it runs
(secrets masked), each with a line saying what it does."""

from __future__ import annotations

from . import lock, store, swaprun
from .context import Context
from .plan import DeployPlan, Plan
from .rollback import rollback_fallback
from .session import Session


def describe(ctx: Context, plan: Plan, session: Session) -> list[str]:
    """The commands, in order, as `Host.shown` shows them, each after a `# what it does` line."""
    new, st, spec = plan.new, ctx.state, ctx.spec
    show = ctx.host.shown  # as the host runs it: through `sudo -n --` where swapctl becomes root
    out = ["# the deploy lock, held for the whole deploy (flock -n on lock)", show(lock.lock_cmd(ctx))]
    if isinstance(plan, DeployPlan) and plan.upload.kind != "present":
        sender, method = session.uploader(plan), plan.upload
        sha = f"takes its sha256 (openssl dgst -sha256, else sha256sum): it must be {new.sha256}; then ldd"
        what = (f"{method.said()} {plan.binary.path} {sender.tmp}, then: {sha}" if method.kind == "sftp" else
                f"receive {method.said()} into {sender.tmp}; {sha}")
        out += [f"# {what}", show(sender.first_cmd(method))]
    for b in plan.to_save:
        out += [f"# backup ({b.release.source}): cp {b.source} {b.release.path(st)}", show(store.backup_cmd(ctx, b))]
    d = plan.daemon
    stop = (f"systemctl stop {plan.unit}" if plan.unit else
            f"kill -TERM {'-' if d.group_leader else ''}{d.pid}; after {spec.stop_grace_s:g} s: kill -KILL" if d
            else "nothing runs: no stop")
    env = f"(its {len(new.env or ())} recorded variables, through a pipe: on no command line)"
    start = (f"systemctl start {plan.unit} (its ExecStart runs {spec.binary})" if plan.unit else
             f"cd {new.cwd} && env -i -- sh {env} && setsid {' '.join(new.argv or ())} >> {spec.log}")
    fallback = plan.fallback() if isinstance(plan, DeployPlan) else rollback_fallback(plan)
    out += [f"# {stop}; wait until its pids are gone and MemAvailable >= {ctx.book.memory.min_available_gib:g} GiB "
            f"(at most {ctx.book.memory.release_timeout_s:g} s); ln -sfn {new.path(st)} {spec.binary}; "
            f"{start}; wait for /{spec.ready_log}/ in {spec.log if not spec.journal else 'its journal'} "
            f"(at most {spec.ready_timeout_s:g} s)",
            show(swaprun.swap_cmd(ctx, d, new, swaprun.gpu_limits(ctx, plan.status, [d.pid] if d else []),
                                  fallback, plan.unit)),
            f"# then one line appended to {st}/journal.jsonl (sh/append_line.sh) and the pruning, sent to a "
            f"shell started before the swap, which runs them only once they have come whole"]
    return out
