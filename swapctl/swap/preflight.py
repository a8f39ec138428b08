"""The preflight: what the host runs and has, and the plan made of it, before anything changes.

Raises BadInput (a binary or playbook that cannot work there) or Refused (not now, or not this way)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any, TypeVar

from ..errors import BadInput, LockHeld, Refused
from ..facts.journal_entry import JOURNAL
from ..facts.releases import Release, matching, now_iso, rollback_target, who_am_i
from ..facts.status import HostStatus, gather, split_sections
from ..facts.system import Process
from ..facts.unsafe import why_unsafe
from ..host import scripts
from . import elf, room, send
from .command import as_it_starts as starts_as
from .command import config_paths, release_command
from .context import Context
from .environ import carried
from .inputs import room_needed_kib
from .plan import DeployPlan, Plan, Situation, read_situation
from .save import gone as store_gone

P = TypeVar("P", bound=Plan)



def swapping(ctx: Context, info: str = "") -> LockHeld:
    """The refusal while a swap script runs on the host (it holds swap.lock); `info` is its swap.info (JSON:
    by, since, pid), which says who started it and when; whether that deploy still listens, the host cannot tell."""
    try:
        who = json.loads(info)
        since = f" since {who['since']}, started by {who['by']} (swap script pid {who['pid']})"
    except (ValueError, KeyError, TypeError):
        since = ""
    return LockHeld(f"a swap is running on the host{since}; it finishes by itself, its rollback included: wait "
                    f"for it to end, then check `swapctl status {ctx.name}`", host=ctx.name)


def unsafe(ctx: Context, line: str) -> Refused:
    """The refusal for a state directory others may write to: `line` is `DIR OWNER MODE`."""
    return Refused(why_unsafe(line, ctx.state), host=ctx.name)


def provers(ctx: Context, status: HostStatus) -> list[Process]:
    """Of the processes that match daemon.match but are not the daemon, those that run a program the match
    names (it matches the file name of their /proc/PID/exe, or a tail of that path up to its end), or a
    release swapctl keeps beside daemon.binary: another prover, which a new build started beside would
    compete with for the GPU. A `tail -f` of the log, an editor of the config, a process that only calls
    itself the daemon (argv[0]), a program in a directory whose name holds the match: left alone, since any
    user of the host can make those and would otherwise block every deploy."""
    regex, state = ctx.spec.matcher(), f"{PurePosixPath(ctx.spec.binary).parent}/.swapctl/"
    return [p for p in status.not_daemons if p.exe and "/.." not in p.exe and
            (names_program(regex, p.exe) or (p.exe.startswith(state) and "/releases/" in p.exe))]


def names_program(regex: re.Pattern[str], exe: str) -> bool:
    """Whether daemon.match names the program `exe`: it matches the file name, or the whole of a tail of the
    path that begins at a `/` (with it or after it). Matched as given: wrapping the pattern (`(?:P)\\Z`)
    made one with inline flags, `(?i)cuzk`, an error in every deploy."""
    if regex.search(PurePosixPath(exe).name):
        return True
    return any(regex.fullmatch(exe, i) or regex.fullmatch(exe, i + 1) for i, c in enumerate(exe) if c == "/")


def second_prover(ctx: Context, p: Process) -> Refused:
    """The refusal for a prover that is not the daemon: who it is, and the playbook key that makes it one."""
    spec, exe = ctx.spec, p.exe or "?"
    binary = PurePosixPath(spec.binary)
    own = (str(PurePosixPath(exe).parent) == str(binary.parent)
           or exe.startswith(f"{binary.parent}/.swapctl/{binary.name}/releases/"))
    if own:  # it runs the binary or one of its releases: as a user the daemon does not run as
        fix = (f"daemon.user ({spec.user!r} in the playbook)" if spec.user else
               "daemon.user (unset: the daemon runs as root or the binary's owner)")
    else:
        fix = f"daemon.binary (it is {spec.binary}; this process runs {exe})"
    return Refused(f"pid {p.pid} (user {p.user}, runs {exe}: {p.args[:500]}) matches daemon.match but is not the "
                   f"daemon, and a deploy would start the new build beside it: if it is the daemon, fix {fix}; if "
                   f"it is not, make daemon.match exclude it; or pass --beside to start the new build anyway",
                   host=ctx.name)


def situation(ctx: Context, again: bool = False) -> Situation:
    """The status facts and the inspect script: what runs, what the host has, what to save first."""
    ctx.emit("preflight", "checking the host")
    status = gather(ctx.host, ctx.spec, ctx.book.gpu)
    if status.swapping:  # mid-swap, what runs (or lingers) is not what a plan can be made from
        raise swapping(ctx, status.swap_info)
    if len(status.daemons) > 1:
        pids = ", ".join(str(p.pid) for p in status.daemons)
        raise Refused(f"several processes match daemon.match {ctx.spec.matcher().pattern!r} (pids {pids}); "
                      f"make `match` precise enough to find one daemon", host=ctx.name)
    if status.gpu_hung and not ctx.ignore_gpu_hang:
        raise Refused(f"{status.gpu_error}; a daemon started now could not use the GPU either, so the running "
                      f"one is left alone: look at the GPU first (dmesg, a GPU reset or a reboot), or pass "
                      f"--ignore-gpu-hang to swap anyway", host=ctx.name)
    if status.gpu_error and status.gpu_error.startswith("nvidia-smi failed") and not status.gpu_hung:
        # e.g. a driver upgraded without a reboot: the running daemon still works, a new process would
        # not, and neither would the old one started again. Stopping it would leave the GPU idle.
        raise Refused(f"{status.gpu_error}; a daemon started now could not use the GPU, so the running "
                      f"one is left alone: fix the driver (often a reboot after a driver upgrade) first",
                      host=ctx.name)
    pid = str(status.daemons[0].pid) if status.daemons else ""
    # with args in the playbook the config files are known now: checked here, not in a command of their own
    configs = config_paths(ctx.spec.args) if ctx.spec.args is not None else ()
    out = ctx.run(scripts.command("inspect.sh", *configs, pid=pid, bin=ctx.spec.binary, state=ctx.state,
                                 user=ctx.spec.user or "")).stdout
    facts = split_sections(out)
    if facts.get("gone", "").strip():  # the daemon exited by itself since the status saw it
        if ctx.spec.gone_before_stop != "deploy" or again:
            raise store_gone(ctx, int(pid))
        return situation(ctx, again=True)
    if bad := facts.get("unsafe", "").strip():
        raise unsafe(ctx, bad.splitlines()[0])
    if ctx.spec.user and status.daemon_user is None:
        raise BadInput(f"daemon.user {ctx.spec.user!r} is no user on the host (`id {ctx.spec.user}` fails there); "
                       f"fix daemon.user in the playbook", host=ctx.name)
    others = provers(ctx, status)
    if others and not ctx.beside:
        raise second_prover(ctx, others[0])
    sit = read_situation(ctx.name, ctx.spec.binary, status, facts, configs, keep_loader(ctx), ctx.spec.unit,
                         journal_at=f"{ctx.state}/{JOURNAL}")
    if others:  # --beside: the plan says what it does
        sit = replace(sit, warnings=(*sit.warnings, *(
            f"--beside: the new build starts beside pid {p.pid} ({p.exe}), which matches daemon.match but is not "
            f"the daemon and is left running" for p in others)))
    return replace(sit, warnings=(*sit.warnings, *room.warnings(status, sit.unit, ctx.book.memory.min_available_gib)))


def keep_loader(ctx: Context) -> tuple[str, ...]:
    """The loader variables (LD_PRELOAD...) an environment read back may pass on: those the playbook names."""
    return (*ctx.spec.keep_loader_env, *(k for k, _ in ctx.spec.env))


def check_unit(ctx: Context, sit: Situation) -> None:
    """Under a unit, its ExecStart must run the binary path (the release symlink): what `systemctl start`
    runs is the unit's, so the playbook's binary, args and env must be the unit's too."""
    if not sit.unit:
        return
    spec, u = ctx.spec, sit.status.unit
    if u is None or u.name != sit.unit or not u.found:
        state = u.load_state if u and u.name == sit.unit else "not found"
        raise BadInput(f"daemon.unit {sit.unit} is not a unit on the host ({state}); fix daemon.unit, or install "
                       f"the unit first", host=ctx.name)
    if u.exec_path != spec.binary:
        raise BadInput(f"the unit {u.name} runs {u.exec_path or '?'} (its ExecStart), the playbook's daemon.binary "
                       f"is {spec.binary}: make them the same path (swapctl swaps the binary the unit runs)",
                       host=ctx.name)
    if spec.args is not None and " ".join(spec.args) != " ".join(u.exec_argv[1:]):
        raise BadInput(f"daemon.args {' '.join(spec.args)!r} are not the unit {u.name}'s ExecStart arguments "
                       f"{' '.join(u.exec_argv[1:])!r}; the unit decides what runs: change it (a drop-in), or "
                       f"drop daemon.args", host=ctx.name)
    missing = [k for k, v in spec.env if (k, v) not in u.environment]
    if missing:
        raise BadInput(f"daemon.env {missing[0]} is not in the unit {u.name}'s Environment; the unit decides what "
                       f"runs: set it there (a drop-in), or drop it from daemon.env", host=ctx.name)


def check_configs(ctx: Context, sit: Situation, argv: tuple[str, ...]) -> None:
    """The config files `argv` names must exist on the host."""
    paths = config_paths(argv)
    if not paths:
        return
    missing = list(sit.configs_missing)
    if paths != sit.configs_checked:  # the arguments came from the running daemon: check its files now
        missing = ctx.run(scripts.command("check_files.sh", *paths, label="configs")).stdout.splitlines()
    if missing:
        raise BadInput(f"config file {missing[0]} named in the daemon's arguments is missing on the host "
                       f"(create it, or fix daemon.args)", host=ctx.name)


def playbook_command(ctx: Context, sit: Situation) -> Release:
    """What a release with no record of its own runs with, as a deploy's new build does (the swap core's
    release_command, from what runs now: the daemon, else the current release); under a unit whose
    ExecStart runs the binary path, what `systemctl start` will run. Only the command's fields are set."""
    base = sit.daemon or sit.releases.get(sit.current or "")
    cmd = release_command(ctx.spec, ctx.spec.env, base, sit.status.daemon_user)
    unit = sit.status.unit
    if sit.unit and unit and unit.name == sit.unit:  # what `systemctl start` will run (check_unit checked it)
        cmd = replace(cmd, argv=(ctx.spec.binary, *unit.exec_argv[1:]), cwd=unit.working_directory or "/",
                      env=unit.environment)
    return cmd


def as_it_starts(ctx: Context, sit: Situation, rel: Release) -> Release:
    """`rel` as a swap starts it (the swap core's as_it_starts, with this playbook's command)."""
    return rel if rel.argv and rel.cwd else starts_as(rel, playbook_command(ctx, sit))


def with_commands(ctx: Context, sit: Situation, plan: P) -> P:
    """`plan` with every release it could start (the new one, the way back, and whatever the way back becomes
    when the daemon exits by itself before the stop) as it starts (as_it_starts). Those with no record of
    their own are `filled`: the swap writes their manifests before it starts them, and the plan says so."""
    new = as_it_starts(ctx, sit, plan.new)
    filled = tuple(as_it_starts(ctx, sit, r) for r in plan.known.values()
                   if r.id != new.id and not (r.argv and r.cwd))
    plan = replace(plan, new=new, filled=(*filled, new) if new is not plan.new else filled)
    said = [r for r in plan.starts() if r and r.id in plan.filled_ids]
    return replace(plan, warnings=(*plan.warnings, *(
        f"release {r.id} has no recorded command line: it starts with the playbook's ({' '.join(r.argv or ())}, "
        f"cwd {r.cwd}), recorded in its manifest when it starts" for r in said)))


def new_release(ctx: Context, sit: Situation, binary: elf.LocalBinary, build: dict[str, Any] | None) -> Release:
    """The release a deploy of `binary` runs: the playbook's command line, else the running daemon's."""
    cmd = playbook_command(ctx, sit)
    new = replace(cmd, sha256=binary.sha256, size=binary.size, name=PurePosixPath(ctx.spec.binary).name,
                  created=now_iso(), by=who_am_i(), build=build, says=binary.says)
    if new.id in sit.releases and sit.releases[new.id].sha256 == new.sha256:  # deployed before: keep its record
        old = sit.releases[new.id]
        new = replace(old, argv=new.argv, cwd=new.cwd, env=new.env, status="ok", build=build or old.build,
                      uid=cmd.uid, gid=cmd.gid, says=binary.says or old.says)
    return new


def plan_deploy(ctx: Context, sit: Situation, binary: elf.LocalBinary, restart: bool = False,
                build: dict[str, Any] | None = None) -> DeployPlan:
    """Everything a deploy checks before anything changes."""
    elf.check_arch(binary, sit.status.arch, ctx.name)
    check_unit(ctx, sit)
    new = new_release(ctx, sit, binary, build)
    if new.id in sit.releases and sit.releases[new.id].sha256 != new.sha256:  # the whole sha256, never 12 digits
        raise Refused(f"release directory {new.dir(ctx.state)} holds another binary (sha256 "
                      f"{sit.releases[new.id].sha256}, this one is {new.sha256}); look at it, remove it, then deploy "
                      f"again", host=ctx.name)
    needed = room_needed_kib(binary.size, new.id in sit.releases)
    if sit.free_kib < needed:
        raise Refused(f"only {sit.free_kib // 1024} MiB free beside {ctx.spec.binary}; the upload and backup need "
                      f"{needed // 1024} MiB (free some space)", host=ctx.name)
    check_configs(ctx, sit, new.argv or ())
    unchanged = bool(sit.daemon and sit.daemon.sha256 == binary.sha256 and not restart)
    # the binary path's own build saved as itself would overwrite the upload's record with none
    sit = replace(sit, to_save=tuple(b for b in sit.to_save if b.release.id != new.id))
    plan: DeployPlan = DeployPlan.of(sit, binary=binary, new=new, unchanged=unchanged,
                                     upload=send.choose(ctx, sit, new))
    return with_commands(ctx, sit, plan)


def find_release(ctx: Context, known: dict[str, Release], to: str) -> Release:
    """`to`: a sha256 prefix, or an index from `swapctl history` (1 = newest)."""
    found = matching(known, to)
    if len(found) == 1:
        return found[0]
    what = "matches several releases" if found else "matches no release"
    raise BadInput(f"--to {to} {what}; give a longer sha256 prefix or an index from `swapctl history`",
                   host=ctx.name)


def plan_rollback(ctx: Context, sit: Situation, to: str | None = None) -> Plan:
    """A plan whose new release is an earlier one: `to`, or what ran before what runs now (rollback_target)."""
    if to:
        target = find_release(ctx, sit.known, to)
    else:
        found = rollback_target(sit.known, sit.running, sit.journal, list(sit.history))
        if found is None:
            raise Refused("no earlier known-good release to roll back to (see `swapctl history`)", host=ctx.name)
        target = found
    if target.id == sit.running and sit.daemon:
        raise BadInput(f"release {target.id} is the one running now; pick another with --to", host=ctx.name)
    check_unit(ctx, sit)
    # its recorded environment was read back from the host: what it may not carry is dropped, and said
    env, dropped = carried(target.env or (), keep_loader(ctx))
    plan: Plan = with_commands(ctx, sit, Plan.of(replace(sit, env_dropped=(*sit.env_dropped, *dropped)),
                                                 new=replace(target, env=env) if target.env is not None else target))
    check_configs(ctx, sit, plan.new.argv or ())
    return plan
