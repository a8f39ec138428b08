"""The daemon's own view: cuzk's `GET /status` JSON (StatusSnapshot, cuzk-core/src/status.rs:21-128), as the
host reads it (daemon.status_url), parsed into what status and the deploy plan show. Pure: tested on
recorded snapshots (tests/data/status/)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

# The host reads it with host/facts/status_get.sh (status.sh, drain.sh).
BEGUN = ("synthesizing", "synth_done", "gpu", "done")  # a partition in these states has had work done on it


@dataclass(frozen=True)
class Proof:
    """A proof in flight: what a stop now would lose work on. The daemon's status shows it (a Pipeline),
    drain.sh reads it from there (INFLIGHT), and the journal line keeps it (in_flight_at_stop)."""

    job_id: str
    done: int  # partitions done
    total: int
    age_s: int  # since the daemon took it

    def text(self) -> str:
        return f"job {self.job_id}: {self.done}/{self.total} partitions, {self.age_s} s in"

    def record(self) -> dict[str, Any]:
        """As the journal line holds it (drain.sh's stop_json)."""
        return {"job_id": self.job_id, "partitions_done": self.done, "total_partitions": self.total,
                "age_s": self.age_s}


def summary(proofs: tuple[Proof, ...], waiting: int) -> str:
    """"2 proofs in flight (job a1b2: 7/10 partitions, 41 s in; ...)", and how many wait."""
    n = len(proofs)
    head = f"{n} proof{'s' if n != 1 else ''} in flight"
    if proofs:
        head += f" ({'; '.join(p.text() for p in proofs)})"
    return head + (f", {waiting} waiting to start" if waiting else "")


@dataclass(frozen=True)
class Pipeline:
    """One proof the daemon holds (PipelineSnapshot)."""

    job_id: str
    proof_kind: str
    age_s: float  # started_secs_ago
    done: int  # partitions_done
    total: int  # total_partitions
    states: tuple[str, ...]  # each partition's state

    @property
    def failed(self) -> bool:
        return "failed" in self.states

    @property
    def finished(self) -> bool:
        """Done (a finished proof stays in the snapshot 30 s: status.rs:399-403) or failed."""
        return self.done >= self.total or self.failed

    @property
    def begun(self) -> bool:
        """Work has been done on it: stopped now, that work is lost."""
        return any(s in BEGUN for s in self.states)

    @property
    def proof(self) -> Proof:
        return Proof(self.job_id, self.done, self.total, round(self.age_s))

    def text(self) -> str:
        return self.proof.text()


@dataclass(frozen=True)
class Worker:
    """One GPU worker (GpuWorkerSnapshot)."""

    worker_id: int
    gpu: int
    state: str  # idle | proving
    job_id: str | None
    partition: int | None


@dataclass(frozen=True)
class DaemonView:
    uptime_s: float
    pipelines: tuple[Pipeline, ...]
    workers: tuple[Worker, ...]
    completed: int  # counters.total_completed since the daemon started
    failed: int
    queue_depth: int
    memory_used_bytes: int
    memory_total_bytes: int
    srs_bytes: int
    pce_bytes: int

    @property
    def in_flight(self) -> tuple[Pipeline, ...]:
        """The proofs a stop now would lose work on: begun, not finished."""
        return tuple(p for p in self.pipelines if p.begun and not p.finished)

    @property
    def waiting(self) -> int:
        """Proofs taken but not begun (and the scheduler's queue): stopped, they lose no work."""
        return self.queue_depth + sum(1 for p in self.pipelines if not p.begun and not p.finished)

    def summary(self) -> str:
        """"2 proofs in flight (job a1b2: 7/10 partitions, 41 s in; ...)", and how many wait."""
        return summary(tuple(p.proof for p in self.in_flight), self.waiting)


BIGGEST = 2**63 - 1  # what a daemon's u64/i64 counter can hold; past it, or not finite, a number reads as 0
# C0, DEL, C1, the line breaks U+2028/9, the bidi overrides U+202E, lone surrogates
NOT_TEXT = re.compile(r"[^\x20-\x7e\xa0-\u2027\u202a-\u202d\u202f-\ud7ff\ue000-\U0010ffff]")


def _num(v: object) -> float:
    """A finite number of the answer, else 0: NaN, 1e400, 10**400 and -1 are no count, age or size."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= BIGGEST:
        return 0.0
    return float(v) if math.isfinite(v) else 0.0


def _int(v: object) -> int:
    return int(_num(v))


def _str(v: object, default: str = "") -> str:
    """Plain text of the answer: controls shown as '?', at most 200 characters."""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        return default
    return NOT_TEXT.sub("?", str(v)[:200] if isinstance(v, str) else str(_int(v)))


def _list(v: object) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _dict(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def parse_view(text: str) -> DaemonView | None:
    """A StatusSnapshot's JSON as a DaemonView; None for anything that is not one (no answer, an error page).
    Read from the host: any field may be missing or of another type."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: arrays 100,000 deep
        return None
    if not isinstance(doc, dict) or "pipelines" not in doc:
        return None
    pipelines = tuple(
        Pipeline(_str(p.get("job_id"), "?"), _str(p.get("proof_kind")), _num(p.get("started_secs_ago")),
                 _int(p.get("partitions_done")), _int(p.get("total_partitions")),
                 tuple(_str(x.get("state")) for x in _list(p.get("partitions"))))
        for p in _list(doc.get("pipelines")))
    workers = tuple(
        Worker(_int(w.get("worker_id")), _int(w.get("gpu_ordinal")), _str(w.get("state")),
               None if w.get("current_job") is None else _str(w.get("current_job"), "?"),
               None if w.get("current_partition") is None else _int(w.get("current_partition")))
        for w in _list(doc.get("gpu_workers")))
    counters, memory, alloc = _dict(doc.get("counters")), _dict(doc.get("memory")), _dict(doc.get("allocations"))
    return DaemonView(
        uptime_s=_num(doc.get("uptime_secs")), pipelines=pipelines, workers=workers,
        completed=_int(counters.get("total_completed")), failed=_int(counters.get("total_failed")),
        queue_depth=_int(counters.get("queue_depth")), memory_used_bytes=_int(memory.get("used_bytes")),
        memory_total_bytes=_int(memory.get("total_bytes")),
        srs_bytes=sum(_int(e.get("bytes")) for e in _list(alloc.get("srs"))),
        pce_bytes=sum(_int(e.get("bytes")) for e in _list(alloc.get("pce"))))


DEFAULT_CONFIG = "/data/zk/cuzk.toml"  # cuzk-daemon's -c default (cuzk-daemon/src/main.rs:21)


def config_path(argv: tuple[str, ...] | list[str]) -> str:
    """The config file a cuzk command line names (`-c FILE`, `--config FILE`, `--config=FILE`), else the default."""
    return _flag(argv, "-c", "--config") or DEFAULT_CONFIG


def _flag(argv: tuple[str, ...] | list[str], short: str, long: str) -> str | None:
    """The value of a clap option (`short V`, `long V`, `long=V`), the first given."""
    for i, a in enumerate(argv):
        if a in (short, long) and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(long + "="):
            return a.split("=", 1)[1]
    return None


def _daemon_value(config_text: str, key: str) -> str | None:
    """`key`'s value under a cuzk config's [daemon], its quotes and any comment dropped."""
    section = ""
    for raw in config_text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            section = line.strip("[] ")
        elif section == "daemon" and re.match(rf"{key}\s*=", line):
            return line.split("=", 1)[1].strip().strip("\"'")
    return None


DEFAULT_LISTEN = "unix:///run/curio/cuzk.sock"  # cuzk-core/src/config.rs:43-45


def listen_of(argv: tuple[str, ...] | list[str], config_text: str) -> str:
    """Where a cuzk command line listens: `-l`/`--listen` (cuzk-daemon/src/main.rs:24-26, over the config),
    else the config's `[daemon] listen`, else cuzk's default."""
    return _flag(argv, "-l", "--listen") or _daemon_value(config_text, "listen") or DEFAULT_LISTEN


def status_url_of(config_text: str) -> str | None:
    """daemon.status_url from a cuzk config's `[daemon] status_listen = "HOST:PORT"` (cuzk.example.toml:13-16):
    read on the host itself, so an address that listens everywhere (0.0.0.0) is asked on 127.0.0.1."""
    host, _, port = (_daemon_value(config_text, "status_listen") or "").rpartition(":")
    if not port.isdecimal():
        return None
    host = "127.0.0.1" if host in ("", "0.0.0.0", "[::]", "::") else host
    return f"http://{host}:{port}/status"
