# The swap's steps, in `swapctl deploy`'s order (lock, inspect, release, adopt, swap, prune), and the swap
# and rollback modules' entry points.
from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import replace
from typing import Any

from ansible_collections.swapctl.cuzk.plugins.module_utils.hostrun import Lock, run, stream
from ansible_collections.swapctl.cuzk.plugins.module_utils.plan import (
    as_configured,
    command_for,
    fallback,
    gpu_limits,
    new_release,
    shown_command,
    swap_inputs,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.settings import HostError, Settings
from ansible_collections.swapctl.cuzk.plugins.module_utils.situation import (
    Daemon,
    Situation,
    cordon_view,
    situation,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts import cordon, journal_entry
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.journal_entry import (
    JournalEntry,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.releases import (
    Release,
    matching,
    rollback_target,
    to_prune,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.host import scripts
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.remote.cmd import Secret
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import environ, words
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import inputs as core
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap.command import config_paths
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap.ending import Ended, Ending, done_as, ending

# -- the steps ------------------------------------------------------------------------------------------------

def manifest(rel: Release) -> Secret:
    """A release's manifest as a script input: it carries the environment, secrets included (session.manifest)."""
    return Secret(rel.to_json())


def write_manifest(s: Settings, rel: Release) -> None:
    run(scripts.command("write_file.sh", path=f"{rel.dir(s.state)}/manifest.json", text=manifest(rel),
                        label="manifest"))


def sha256_of(path: str) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def install(s: Settings, src: str, rel: Release) -> None:
    """The file at `src` becomes release `rel` (install.sh: its sha256 checked again, renamed into place)."""
    tmp = f"{s.state}/releases/.ansible-{rel.id}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
        shutil.copyfileobj(f, out, 1 << 20)
    inputs: dict[str, str | Secret | int] = {"tmp": tmp, "dir": rel.dir(s.state), "name": rel.name, "sha": rel.sha256,
                                             "manifest": manifest(rel)}
    got = words.parse_install(run(scripts.command_of("install.sh", inputs)).splitlines())
    if not got.installed:
        raise HostError(f"{src} could not become release {rel.id} ({got.summary()}); nothing was stopped")
    if got.missing:
        raise HostError(f"release {rel.id} needs shared libraries the host lacks ({', '.join(got.missing)}); "
                        f"nothing was stopped: install them, or build against the host's")


def swap_once(s: Settings, old: Daemon | None, target: Release, gpu_max: str, fb: Release | None,
              action: str, old_sha: str | None, steps: dict[str, float]) -> words.SwapReport:
    """swap.sh: stop `old`, wait for memory, start `target`, wait for it to be ready, and when that fails go
    back to `fb`; the host journals how it ended. What it reported."""
    parser = words.SwapParser(time.monotonic())
    inputs = swap_inputs(s, old, target, gpu_max, fb, action, steps)
    inputs["j_from"] = old_sha or ""
    cmd = scripts.command_of("swap.sh", inputs, *command_for(s, target), bash=bool(s.ready_port))
    # the swap, then the host's own rollback: a stop, a memory wait and up to three starts (swaprun.swap)
    deadline = core.deadline_s(s.knobs())

    def line(text: str) -> None:
        parser.feed(text, time.monotonic())

    stream(cmd, line, deadline)
    got = parser.finish(time.monotonic())
    if got.failure.startswith("no tool: "):
        raise HostError(f"{got.failure.removeprefix('no tool: ')}; install it, then run again: nothing was stopped")
    if got.failure.startswith("another swap"):
        raise HostError(f"{got.failure}; this one stopped nothing")
    if got.release_changed:
        raise HostError(f"{got.failure.removeprefix('release changed: ')}; it is not the binary it was, so nothing "
                        f"was stopped and the daemon runs on")
    if got.drain_refused:
        raise HostError(f"{got.in_flight.summary() if got.in_flight else 'proofs in flight'} after the drain's "
                        f"{s.drain_timeout_s:g} s, and drain_timeout is \"refuse\": nothing was stopped")
    return got


def memory_error(s: Settings, got: words.SwapReport, **result: Any) -> HostError:
    r = got.reading
    avail = r.avail_kib / (1 << 20) if r else 0
    holders = ",".join(map(str, r.alive)) if r and r.alive else "none"
    return HostError(f"memory not back after {s.release_timeout_s:g} s: MemAvailable {avail:.1f} GiB (need "
                     f"{s.min_available_gib:g}), old processes still alive: {holders}; no daemon runs now", **result)


def swap_in(s: Settings, sit: Situation, target: Release, action: str, fb: Release | None,
            steps: dict[str, float]) -> dict[str, Any]:
    """Stops what runs, waits for memory, starts `target`; the host goes back to `fb` by itself when that
    fails and writes the journal line (swap_in.swap_in): this side reads how it ended (swap/ending.py)."""
    old_sha = sit.daemon.sha256 if sit.daemon else (fb.sha256 if fb else None)
    got = swap_once(s, sit.daemon, target, gpu_limits(s, [sit.daemon.pid] if sit.daemon else []), fb, action,
                    old_sha, steps)
    steps = {**steps, **got.steps}
    line = journal_entry.parse(got.journal) if got.journal else None  # the host's own line (JOURNAL)
    end = ending(got, fb is not None)
    if end in (Ending.NO_OUTCOME, Ending.UNKNOWN):
        how = (f"with an outcome swapctl does not know ({got.outcome!r})" if got.outcome else
               f"without saying how the swap ended ({got.failure or 'no outcome'})")
        raise HostError(f"the swap script on the host ended {how}; look at the host's journal and the daemon "
                        f"before running again", steps=steps)
    if end is Ending.NO_DAEMON:  # before any start: the memory wait timed out
        raise memory_error(s, got, journal=shown(line), steps=steps)
    if end is not Ending.DONE:
        raise failed(s, target, fb, got, end, action, line, steps)
    result = {"outcome": str(done_as(got)), "pid": got.outcome_pid, "journal": shown(line), "steps": steps,
              "release": {"from": old_sha[:12] if old_sha else None, "to": target.id}}
    return {**result, "warnings": [unjournaled(s)]} if not got.journal_ok else result


def shown(line: JournalEntry | None) -> dict[str, Any] | None:
    """A journal line as the module's result holds it."""
    return line.to_dict() if line else None


def noted(sit: Situation, result: dict[str, Any]) -> dict[str, Any]:
    """`result` with what to tell the user about the host's journal among its warnings."""
    warnings = [*result.get("warnings", []), *sit.notes]
    return {**result, "warnings": warnings} if warnings else result


def unjournaled(s: Settings) -> str:
    return (f"the host could not write its journal line ({s.state}/journal.jsonl: is the disk full?); swapctl "
            f"history will not show this swap")


def failed(s: Settings, target: Release, fb: Release | None, got: words.SwapReport, end: Ending, action: str,
           line: JournalEntry | None, steps: dict[str, float]) -> HostError:
    """A start that failed, once the host has gone back by itself (`end`, swap_in.failed): rolled_back when the
    fallback runs again after a deploy; otherwise the state the host is in."""
    why, pid = got.back_why, got.outcome_pid
    log = f"journalctl -u {s.unit}" if s.log == "journal" else f"{s.log} from byte {got.offset}"
    tail = run(scripts.command("tail.sh", path=s.log, offset=got.offset, lines=20, unit=s.unit, inv=got.invocation),
               check=False) if got.pid or s.unit else ""
    reason = (line.reason if line else None) or why
    note = "" if got.journal_ok else f" {unjournaled(s)}."
    back = fb.id if fb else "-"
    tries = f" (after {got.retries + 1} starts)" if got.retries else ""
    common = {"journal": shown(line), "steps": steps, "log_tail": tail, "pid": pid,
              "release": {"from": target.id, "to": fb.id if fb else None}}
    if end is Ending.WENT_BACK:
        if action == "rollback":  # the host runs what it ran, but not what was asked for
            return HostError(f"the rollback to {target.id} failed ({why}); {back}, which ran before, runs again as "
                             f"pid {pid}{tries}. Failed log: {log}{note}", rolled_back=False, **common)
        return HostError(f"{target.id} failed ({why}); rolled back: {back} runs again as pid {pid}{tries}. Failed "
                         f"log: {log}{note}", rolled_back=True, **common)
    if end is Ending.NO_FALLBACK:
        return HostError(f"{target.id} failed ({why}) and there is no earlier release to go back to: no daemon runs "
                         f"now; its log: {log}{note}", rolled_back=False, **common)
    if end is Ending.FALLBACK_UNREADY:
        return HostError(f"{target.id} failed ({why}), and the rollback to {back} is not ready ({reason}); it runs "
                         f"as pid {pid}; logs: {log}{note}", rolled_back=False, **common)
    return HostError(f"{target.id} failed ({why}), and the rollback to {back} failed too ({reason}); no daemon runs "
                     f"now; logs: {log}{note}", rolled_back=False, **common)


def _timed(steps: dict[str, float], step: str, since: float) -> float:
    now = time.monotonic()
    steps[step] = round(now - since, 3)
    return now


def changing(s: Settings, sit: Situation, new: Release, action: str, fb: Release | None,
             src: str | None = None) -> dict[str, Any]:
    """Under the host's lock: the release (from `src`), the adoption of what runs, the swap, the journal."""
    steps: dict[str, float] = {}
    t = time.monotonic()
    lock = Lock(s)
    try:
        t = _timed(steps, "lock", t)
        if src and new.id not in sit.releases:
            install(s, src, new)
        elif action == "deploy":
            write_manifest(s, new)  # deployed before: its command line and environment as this deploy runs it
        t = _timed(steps, "release", t)
        for source, rel in sit.to_save:
            run(scripts.command_of("backup.sh", {"src": source, "dir": rel.dir(s.state), "name": rel.name,
                                                 "manifest": manifest(rel)}))
        recorded = {r.id for r in sit.known.values() if r.argv is not None}
        for rel in {r.id: r for r in (new, fb) if r and r.id in sit.known and r.id not in recorded}.values():
            write_manifest(s, rel)  # no command line on record: the one as_configured starts it with
        _timed(steps, "adopt", t)
        result = swap_in(s, sit, new, action, fb, steps)
        protect = {new.id} | ({fb.id} if fb else set())
        gone = to_prune({**sit.known, new.id: new}, s.keep_releases, protect)
        if gone:
            run(scripts.command("remove.sh", *[r.dir(s.state) for r in gone], state=s.state, label="prune"))
        return {**result, "pruned": [r.id for r in gone]}
    finally:
        lock.close()


def check_configs(sit: Situation, argv: tuple[str, ...], checked: tuple[str, ...]) -> None:
    paths = config_paths(argv[1:])
    missing = list(sit.configs_missing) if paths == checked else \
        run(scripts.command("check_files.sh", *paths, label="configs")).splitlines() if paths else []
    if missing:
        raise HostError(f"config file {missing[0]} named in the daemon's arguments is missing on the host (create "
                        f"it, or fix daemon.args); nothing changed")


def find_release(known: dict[str, Release], to: str) -> Release:
    """`to`: a sha256 prefix, or an index of `swapctl history` (1 = newest): releases.matching, swapctl's own."""
    found = matching(known, to)
    if len(found) != 1:
        raise HostError(f"release {to} {'matches several releases' if found else 'matches no release'} on the "
                        f"host; give a longer sha256 prefix")
    return found[0]


def cordon_first(s: Settings, check: bool) -> list[str]:
    """With Curio nodes: a cordon swapctl left (its swap script died before it could lift it) lifted before the
    swap plans, as `swapctl deploy` does (cli/deploy.cordon_first); in check mode only said. One that cannot be
    lifted fails the task: the swap would take the node for someone else's and leave it cordoned."""
    if not s.curio.nodes:
        return []
    view = cordon_view(s, lift=not check)
    said = cordon.lifted_said(view, s.host)
    if said is not None and view.lifted != "ok":
        raise HostError(f"{said}: nothing was changed; fix it, then run the task again")
    left = cordon.left_said(view)
    return [said] if said is not None else [left] if left else []


def deploy(s: Settings, src: str | None, sha256: str | None, release: str | None, restart: bool,
           check: bool) -> dict[str, Any]:
    """The swap module: the file at `src` (or release `release`) swapped in; in check mode, what it would do."""
    checked = config_paths(s.args) if s.args is not None else ()
    warnings = cordon_first(s, check)
    sit = situation(s, checked)
    if src:
        sha, size = sha256_of(src) if os.path.exists(src) or not (check and sha256) else ("", 0)
        if sha256 and sha256.lower() != sha and check:
            # the copy before this task did not run either (check mode): src is missing, or still holds the build
            # an earlier run copied there; a real run checks the file it copies against sha256 before anything
            if sha:
                warnings.append(f"{src} holds sha256 {sha[:12]} now, not {sha256.lower()[:12]}: in check mode the "
                                f"copy before this task did not run; shown is the swap to {sha256.lower()[:12]}")
            sha, size = sha256.lower(), 0
        elif sha256 and sha256.lower() != sha:
            raise HostError(f"{src} has sha256 {sha}, not {sha256}: not the build meant; nothing changed")
        new = new_release(s, sit, sha, size)
    else:
        rel = find_release(sit.known, release or "")
        new = replace(rel, env=environ.carried(rel.env or (), s.keep_loader_env)[0]) if rel.env is not None else rel
        new = as_configured(s, sit, new)
        size = 0
    check_configs(sit, new.argv or (), checked)
    unchanged = bool(sit.daemon and sit.daemon.sha256 == new.sha256 and not restart)
    result: dict[str, Any] = {"changed": not unchanged, "release": {"from": sit.running, "to": new.id},
                              "diff": {"before": shown_command(s, sit.daemon), "after": shown_command(s, new)},
                              "adopt": [r.id for r in sit.saved], "rolled_back": False}
    if warnings:
        result["warnings"] = warnings
    if unchanged:
        return noted(sit, {**result, "outcome": str(Ended.UNCHANGED), "msg": f"the daemon already runs {new.id}"})
    if check:
        return noted(sit, {**result, "outcome": str(Ended.DRY_RUN), "command": command_for(s, new)})
    needed = core.room_needed_kib(size, new.id in sit.releases)
    if src and sit.free_kib < needed:
        raise HostError(f"only {sit.free_kib // 1024} MiB free beside {s.binary}; the release and its backup need "
                        f"{needed // 1024} MiB; nothing changed")
    return noted(sit, {**result, **changing(s, sit, new, "deploy", fallback(s, sit, new), src)})


def rollback(s: Settings, to: str | None, check: bool) -> dict[str, Any]:
    """The rollback module: back to what ran before the current release (or `to`), started as recorded."""
    warnings = cordon_first(s, check)
    sit = situation(s)
    target = find_release(sit.known, to) if to else rollback_target(sit.known, sit.running, sit.journal,
                                                                    sit.history)
    if target is None:
        raise HostError("no earlier known-good release to roll back to (see the host's journal); nothing changed")
    if target.id == sit.running and sit.daemon:
        raise HostError(f"release {target.id} is the one running now; nothing changed")
    if target.env is not None:
        target = replace(target, env=environ.carried(target.env, (*s.keep_loader_env, *dict(s.env)))[0])
    target = as_configured(s, sit, target)
    check_configs(sit, target.argv or (), ())
    running = sit.known.get(sit.running or "")
    fb = as_configured(s, sit, running) if running and running.status == "ok" and running.id != target.id else None
    result: dict[str, Any] = {"changed": True, "release": {"from": sit.running, "to": target.id}, "rolled_back": False,
                              "diff": {"before": shown_command(s, sit.daemon), "after": shown_command(s, target)}}
    if warnings:
        result["warnings"] = warnings
    if check:
        return noted(sit, {**result, "outcome": str(Ended.DRY_RUN), "command": command_for(s, target)})
    return noted(sit, {**result, **changing(s, sit, target, "rollback", fb)})
