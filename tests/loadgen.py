"""A load generator standing in for Curio: it submits proofs to the stand-in daemon without pause and
keeps up to `max_pending` of them pending (Curio's `[Cuzk] MaxPending`, default 10: deps/config/types.go),
and records what became of each job.

It speaks the stand-in's line protocol on the daemon's `listen` socket (images/prover/prover.cpp; the
real daemon takes gRPC there): `PROVE <job_id>` on a connection of its own, answered `ACCEPTED <job_id>`
once the daemon has queued it, `STARTED <job_id>` once its synthesis began, and `DONE <job_id> <total_ms>`
once the proof is assembled. A connection that closes after STARTED and before DONE is a proof lost: the
daemon died with work done on it. One that closes after ACCEPTED only is requeued: no work was done on
it, and Curio submits it again. A daemon that is not there, or that closes before ACCEPTED (connection
refused, or a dying daemon's backlog reset: mid-swap), took no job; the slot tries again, as Curio's task
does, and counts it in `refused`. Every job, lost or not, gets a new id when it is submitted again.

    python3 tests/loadgen.py 127.0.0.1:9820 --pending 10 --seconds 30
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import threading
import time
from dataclasses import asdict, dataclass, field

MAX_PENDING = 10  # Curio's default MaxPending (deps/config/types.go:136)


@dataclass
class JobRecord:
    job_id: str
    submitted: float  # time.time()
    ended: float | None = None
    outcome: str = "pending"  # done | lost | requeued | failed | pending (still waiting when the generator stopped)
    started: bool = False  # the daemon began its synthesis
    total_ms: float | None = None
    detail: str = ""


@dataclass
class LoadGen:
    """`max_pending` client slots, each with one proof in the daemon at a time, submitting again at once."""

    address: str  # host:port of the daemon's listen socket
    max_pending: int = MAX_PENDING
    prefix: str = "lg"
    gap_s: float = 0  # each slot's pause after a result: Curio's next task arriving (0: at once, saturating)
    jobs: list[JobRecord] = field(default_factory=list)
    refused: int = 0  # connection attempts that found no daemon (nothing was submitted)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=itertools.count)
    _socks: set = field(default_factory=set)

    def start(self) -> LoadGen:
        for slot in range(self.max_pending):
            t = threading.Thread(target=self._slot, name=f"loadgen-{slot}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float = 10) -> None:
        """Stops submitting; jobs still pending stay `pending` (not lost: the generator left, not the daemon)."""
        self._stop.set()
        with self._lock:
            for s in list(self._socks):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for t in self._threads:
            t.join(timeout)

    def counts(self) -> dict[str, int]:
        with self._lock:
            out = {k: 0 for k in ("done", "lost", "requeued", "failed", "pending")}
            for j in self.jobs:
                out[j.outcome] += 1
            return out

    def ended(self) -> bool:
        """Whether every job a daemon accepted has its outcome: a slot still reading from a daemon that has
        just died has not seen the end yet, and a stop() before it does counts its job as `pending`."""
        with self._lock:
            return all(j.outcome != "pending" for j in self.jobs)

    def wait_done(self, n: int, timeout: float = 30) -> None:
        """Until n jobs are done (a deadline, not a pause: raises TimeoutError past it)."""
        deadline = time.monotonic() + timeout
        while self.counts()["done"] < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{n} proofs not done within {timeout:.0f} s: {self.counts()}")
            time.sleep(0.02)

    def _slot(self) -> None:
        host, port = self.address.rsplit(":", 1)
        while not self._stop.is_set():
            try:
                sock = socket.create_connection((host, int(port)), timeout=2)
            except OSError:
                with self._lock:
                    self.refused += 1
                self._stop.wait(0.02)
                continue
            sock.settimeout(None)
            with self._lock:
                self._socks.add(sock)
            self._one(sock)
            with self._lock:
                self._socks.discard(sock)
            if self.gap_s:
                self._stop.wait(self.gap_s)

    def _one(self, sock: socket.socket) -> None:
        rec = JobRecord(f"{self.prefix}-{next(self._ids):05d}", time.time())
        try:
            sock.sendall(f"PROVE {rec.job_id}\n".encode())
            reader = sock.makefile("r")
            if not reader.readline().startswith("ACCEPTED "):
                with self._lock:
                    self.refused += 1
                sock.close()
                self._stop.wait(0.02)
                return
            with self._lock:
                self.jobs.append(rec)
            line = reader.readline().strip()
            if line.startswith("STARTED "):
                rec.started = True
                line = reader.readline().strip()
        except OSError as exc:
            line = "" if not self._stop.is_set() else None
            rec.detail = str(exc)
        finally:
            sock.close()
        with self._lock:
            rec.ended = time.time()
            if line is None or (self._stop.is_set() and not line):
                rec.outcome, rec.ended = "pending", None
            elif line.startswith("DONE "):
                rec.outcome, rec.total_ms = "done", float(line.split()[2])
            elif line:
                rec.outcome, rec.detail = "failed", line
            else:
                rec.outcome = "lost" if rec.started else "requeued"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("address", help="the daemon's listen address, host:port")
    ap.add_argument("--pending", type=int, default=MAX_PENDING, help="proofs kept pending (Curio's MaxPending)")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--gap", type=float, default=0, help="each slot's pause after a result, in seconds")
    ap.add_argument("--json", action="store_true", help="every job's record, not just the counts")
    a = ap.parse_args()
    gen = LoadGen(a.address, a.pending, gap_s=a.gap).start()
    time.sleep(a.seconds)
    gen.stop()
    print(json.dumps([asdict(j) for j in gen.jobs] if a.json else {**gen.counts(), "refused": gen.refused}))


if __name__ == "__main__":
    main()
