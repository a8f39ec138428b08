"""The GPU sampler on the host: start, stop and ask it, with one fixed script each way.

The sampler (swapctl/host/gpu/sampler.sh) runs detached like the daemon, records `nvidia-smi dmon -s ut
-o DT` with the GPU's activity counters where dmon has them (`--gpm-metrics 2,3,20,21`: SM activity, SM
occupancy, PCIe TX/RX; its notes say once where not) and, asked, `--query-gpu ... -lms 500`, with
TZ=UTC while the daemon's pid lives, and ends when it exits. Its files live in `<state dir>/gpu/` on the host:
- `gpu-samples-<run UTC>-<NNNN>.dmon`, `gpu-query-<run UTC>-<NNNN>.csv`: append-only segments, each
  beginning with its header, the oldest removed beyond `max_bytes` of each kind;
- `gpu-sampler.notes`: one line per event (started, why it ended, no nvidia-smi, nvidia-smi hung);
- `gpu-sampler.pid`, `gpu-sampler.lock` (held while it runs: one sampler per host).
fetch-logs brings the segments and the notes into DEST/<host>/ under the same names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import Refused, SwapctlError
from ..facts.status import HostStatus
from ..facts.unsafe import why_unsafe
from ..host import scripts
from ..host.scripts import ReportWord
from ..playbook.spec import DaemonSpec
from ..remote import Host
from .samples import DMON_GLOB, QUERY_FIELDS, QUERY_GLOB

DEFAULT_MAX_BYTES = 64 << 20  # per kind of samples: dmon for 8 GPUs writes ~60 MB a day
DEFAULT_QUIET_S = 10.0  # nvidia-smi answers within a second or two; silence this long is a hang
NOTES = "gpu-sampler.notes"
_SAMPLER_INPUTS = ("pid", "max", "quiet", "interval", "query", "fields")  # sampler.sh's, through sampler-ctl.sh



class CtlWord(ReportWord):
    """Every word sampler-ctl.sh starts a report line with."""

    UNSAFE = "UNSAFE"  # dir owner mode: a directory others may change; nothing was done
    STARTED = "STARTED"
    RESTARTED = "RESTARTED"  # the running one followed another pid (the daemon before a swap)
    ALREADY = "ALREADY"
    NO_NVIDIA_SMI = "NO_NVIDIA_SMI"
    FAILED = "FAILED"  # why
    STOPPED = "STOPPED"
    NOT_RUNNING = "NOT_RUNNING"
    RUNNING = "RUNNING"  # sampler_pid daemon_pid started_utc
    IDLE = "IDLE"
    FILE = "FILE"  # size name: a sample segment
    NOTE = "NOTE"  # its last note line


# the action's outcome words -> what they mean
OUTCOMES = {
    CtlWord.STARTED: "started",
    CtlWord.RESTARTED: "restarted",
    CtlWord.ALREADY: "already running",
    CtlWord.NO_NVIDIA_SMI: "no nvidia-smi",
    CtlWord.FAILED: "failed",
    CtlWord.STOPPED: "stopped",
    CtlWord.NOT_RUNNING: "not running",
}


@dataclass(frozen=True)
class SampleFile:
    name: str
    size: int


@dataclass(frozen=True)
class SamplerStatus:
    """A host's sampler after an action: whether it runs, what it follows, its files and last note."""

    host: str
    directory: str  # on the host: <state dir>/gpu
    running: bool
    pid: int | None  # the sampler's; it leads its process group
    daemon_pid: int | None  # the daemon it follows
    since: str | None  # when it started, UTC
    files: tuple[SampleFile, ...]  # its sample segments on the host, oldest first
    note: str | None  # its last note line: why it ended, or why it could not start
    outcome: str = ""  # of the action: one of OUTCOMES' values; "" for a plain status
    reason: str = ""  # with "failed": what the host said

    @property
    def ok(self) -> bool:
        """The action did what was asked (a status always does)."""
        return self.outcome not in ("failed", "no nvidia-smi")


def sampler_dir(state_dir: str) -> str:
    """Where a daemon's sampler keeps its files: `gpu/` in swapctl's state directory for it."""
    return str(PurePosixPath(state_dir) / "gpu")


def fetch_patterns(state_dir: str) -> list[str]:
    """The host paths (globs) fetch-logs brings home for the sampler: its samples and its notes."""
    d = sampler_dir(state_dir)
    return [f"{d}/{DMON_GLOB}", f"{d}/{QUERY_GLOB}", f"{d}/{NOTES}"]


def _ctl(host: Host, action: str, state_dir: str, user: str, start: dict[str, str] | None = None) -> SamplerStatus:
    """sampler-ctl.sh's `action`; `start`: the sampler's inputs, its body on stdin after them."""
    d = sampler_dir(state_dir)
    inputs = start or dict.fromkeys(_SAMPLER_INPUTS, "")
    cmd = scripts.command_of("sampler-ctl.sh", {"action": action, "dir": d, "user": user, **inputs},
                             label=f"gpu-sampler-{action}")
    result = host.run(cmd, stdin=scripts.load("sampler.sh").body.encode() if start else None, timeout=60)
    word, rest = CtlWord.of(result.stdout.partition("\n")[0])
    if word is CtlWord.UNSAFE:  # a directory others may change: nothing was done there
        raise Refused(why_unsafe(rest, state_dir), host=host.name)
    return parse_ctl(host.name, d, result.stdout)


def parse_ctl(host: str, directory: str, text: str) -> SamplerStatus:
    """Reads the control script's lines (see sampler-ctl.sh)."""
    outcome = reason = ""
    running, pid, daemon_pid, since, note = False, None, None, None, None
    files = []
    for line in text.splitlines():
        word, rest = CtlWord.of(line)
        if word in OUTCOMES:
            outcome, reason = OUTCOMES[word], rest.strip()
        elif word is CtlWord.RUNNING:
            parts = rest.split()
            running = True
            pid = int(parts[0]) if parts and parts[0].isdecimal() else None
            daemon_pid = int(parts[1]) if len(parts) > 1 and parts[1].isdecimal() else None
            since = parts[2] if len(parts) > 2 else None
        elif word is CtlWord.FILE:
            size, _, name = rest.partition(" ")
            files.append(SampleFile(name=name, size=int(size)))
        elif word is CtlWord.NOTE:
            note = rest.strip() or None
    files.sort(key=lambda f: f.name)  # by kind, then run, then segment
    return SamplerStatus(host=host, directory=directory, running=running, pid=pid, daemon_pid=daemon_pid,
                         since=since, files=tuple(files), note=note, outcome=outcome, reason=reason)


def start_sampler(host: Host, state_dir: str, pid: int, *, max_bytes: int = DEFAULT_MAX_BYTES,
                  query: bool = False, quiet_s: float = DEFAULT_QUIET_S, interval_s: int = 1,
                  user: str = "") -> SamplerStatus:
    """Starts the host's sampler following daemon `pid` (one already following it is kept; one following
    another pid is replaced). A host without nvidia-smi gets a note and outcome "no nvidia-smi". `user`:
    daemon.user, who may own the binary's directory; Refused where anyone else may change it."""
    if pid <= 1 or max_bytes < 2048 or quiet_s <= 0 or interval_s < 1:
        raise ValueError("pid > 1, max_bytes >= 2048, quiet_s > 0 and interval_s >= 1 are needed")
    quiet = f"{quiet_s:g}" if quiet_s == int(quiet_s) else f"{quiet_s:.3f}"
    return _ctl(host, "start", state_dir, user, {"pid": str(pid), "max": str(max_bytes), "quiet": quiet,
                                                 "interval": str(interval_s), "query": "1" if query else "0",
                                                 "fields": QUERY_FIELDS})


def samplable(status: HostStatus) -> bool:
    """Whether the host's GPU can be sampled: it has nvidia-smi, and nvidia-smi answered in time."""
    return not status.gpu_hung and not (status.gpu_error or "").startswith("no GPU tools")


def start_after_swap(host: Host, daemon: DaemonSpec, pid: int | None, status: HostStatus) -> str:
    """Starts the sampler for the daemon a swap left running (what `timings` reads as GPU busy), and says
    what to add to the swap's outcome: "" when it started or there is no `pid` to follow. A host the
    preflight found without nvidia-smi (`status`) gets none (no round trip, no note file); a sampler that
    cannot start is a note, and the swap stands either way."""
    if not pid or not samplable(status):
        return ""
    try:
        got = start_sampler(host, daemon.state_dir, pid, user=daemon.user or "")
    except SwapctlError as exc:
        return f"GPU sampler not started: {exc}"
    return "" if got.ok else f"GPU sampler: {got.note or got.outcome}"


def stop_sampler(host: Host, state_dir: str, user: str = "") -> SamplerStatus:
    """Stops the host's sampler and everything it started; outcome "not running" when none ran."""
    return _ctl(host, "stop", state_dir, user)


def sampler_status(host: Host, state_dir: str, user: str = "") -> SamplerStatus:
    """Whether the host's sampler runs, what it follows, its sample files and its last note."""
    return _ctl(host, "status", state_dir, user)


def daemon_pid(host: Host, daemon: DaemonSpec) -> int:
    """The running daemon's pid, found as `status` finds it; Refused when none or several run."""
    from ..facts.status import gather

    found = gather(host, daemon).daemons
    if not found:
        raise Refused("no daemon is running: the sampler follows one (start it, or pass --pid)", host=host.name)
    if len(found) > 1:
        pids = ", ".join(str(p.pid) for p in found)
        raise Refused(f"several processes match daemon.match ({pids}): pass --pid", host=host.name)
    return found[0].pid


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_QUIET_S", "CtlWord", "SampleFile", "SamplerStatus", "daemon_pid",
           "fetch_patterns", "parse_ctl", "sampler_dir", "sampler_status", "start_sampler", "stop_sampler"]
