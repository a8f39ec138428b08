"""The Curio node stand-in: a real process that schedules cuzk-backed tasks from Curio's harmony tables as
Curio's harmonytask engine does (filecoin-project/curio at e0294b0f; each behaviour cites its line), and
proves them on the stand-in prover through its line protocol (images/prover/prover.cpp, tests/loadgen.py).

    curio_node.py [--db-*] run --listen 127.0.0.1:P --layers base,cuzk [--poll-s 30] [--prep-s 2] ...
    curio_node.py [--db-*] feed --mix PoRep=4,WdPost=1 (--gap-s 0.5 | --backlog 10) [--count N]

`run`: registers its `harmony_machines` row (host_and_port = --listen, harmony/resources/resources.go:83-99)
and its `harmony_machine_details` (layers, tasks: cmd/curio/tasks/tasks.go:742-746); takes its `[Cuzk]
Address` from its layers in `harmony_config` (a later layer overrides an earlier one, as Curio stacks them);
reads the cordon only at its DB poll, every --poll-s (pollRarely = 30 s, harmony/harmonytask/harmonytask.go:32;
checkNodeFlags :651-663, scheduler.go:115-128), and between polls claims new tasks as Curio's peering
announces them (scheduler.go:250-269) with the flag it last read (harmonytask.go:455, :476-483), so a task
added just after a cordon is still claimed until the next poll. A claim sets owner_id
(task_type_handler.go:165-179); a claimed task prepares --prep-s, then calls the prover; its end is recorded
as recordCompletion does (task_type_handler.go:432-498): on success the row is deleted and history written
(result true); on failure history (result false) and either `owner_id = NULL, retries + 1` or, past
MaxFailures, the row deleted (the task dropped). A retried task waits RetryWait(retries) after its
update_time (harmonytask.go:492-502). All cuzk task types share one in-flight limit, MaxPending
(tasks/seal/task_porep.go:198-205, lib/cuzk/client.go). On SIGTERM it writes its record (JSON) and exits.

Its --listen address serves the node's JSON-RPC for the two methods a swap calls, `Filecoin.Cordon` and
`Filecoin.Uncordon` (curio_rpc.py), checking a token against the layers' `[Apis] StorageRPCSecret`.

`feed`: inserts tasks as AddTaskByName does (harmonytask.go:808-809): paced (one every --gap-s) or saturating
(keeps --backlog unclaimed tasks waiting, Curio's MaxPending of them by default).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from curio_cli import add_db_flags, connect  # noqa: E402
from curio_rpc import serve_rpc  # noqa: E402


@dataclass(frozen=True)
class TaskType:
    name: str  # tasks/tasknames/names.go
    max_failures: int  # 0: retry forever (harmonytask.go:64-66)
    retry_wait: Callable[[int], float] | None  # seconds before retry number `retries`; None: at once (:493)
    time_sensitive: bool  # claimed first (harmonytask.go:573-580)
    kind: str  # the proof kind sent to the prover (cuzk-core/src/types.rs:50-53; the stand-in says porep-c2)


TYPES = {t.name: t for t in (
    # tasks/seal/task_porep.go:209,217-220
    TaskType("PoRep", 10, lambda r: min(1 << r, 120), False, "porep-c2"),
    # tasks/snap/task_prove.go:170,177 (no RetryWait)
    TaskType("UpdateProve", 3, None, False, "snap_update"),
    # tasks/proofshare/task_prove.go:257,264-267
    TaskType("PSProve", 20, lambda r: 10 * r, False, "porep-c2"),
    # tasks/window/compute_task.go:457-459
    TaskType("WdPost", 5, None, True, "window_post"),
    # tasks/winning/winning_task.go:593-600: "We're not allowing retry to be conservative"
    TaskType("WinPost", 1, None, True, "winning_post"),
)}
MAX_PENDING = 10  # [Cuzk] MaxPending's default (deps/config/types.go:135-139, :583-587)
PROVE_TIMEOUT_S = 1800  # [Cuzk] ProveTimeout's default, 30 min (deps/config/types.go:589-592)


_LOG = threading.Lock()


def log(line: str) -> None:
    """One line of the node's log, written whole: print() writes its text and its newline apart, and two
    threads' lines ran together ("... was done1796661887.061 retry id=1 ..."), which the lab then read as
    the second line's event alone (a test waited for a `dropped` that was there)."""
    with _LOG:
        sys.stdout.write(f"{time.time():.3f} {line}\n")
        sys.stdout.flush()


class Node:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.types = [TYPES[n] for n in args.tasks.split(",")]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.running: set[int] = set()
        self.schedulable = True  # yieldBackground's opposite, as the last poll read it
        self.stats = {t.name: {"claimed": 0, "done": 0, "failed": 0, "retries": 0} for t in self.types}
        self.polls: list[tuple[float, bool]] = []
        self.claims: list[tuple[float, int, str]] = []
        self.ended: list[tuple[float, int, str, str]] = []  # (when, id, name, done | retry | dropped)
        self.owner_id = 0
        self.cuzk = ""
        self.rpc_secret = b""  # [Apis] StorageRPCSecret, decoded
        self.rpc: list[tuple[float, str, str]] = []  # (when, method, ok | an error) for each JSON-RPC call

    def db(self):
        return connect(self.args)

    def say(self, line: str) -> None:
        """A line of the node's log (log()), for its JSON-RPC (curio_rpc.py) too."""
        log(line)

    def register(self) -> None:
        """The machine row (resources.go:83-99), the cuzk address from the layers, the machine details."""
        with self.db() as c:
            self.owner_id = c.execute("""
                WITH upsert AS (
                    UPDATE harmony_machines SET cpu = %(cpu)s, ram = %(ram)s, gpu = %(gpu)s,
                        last_contact = CURRENT_TIMESTAMP WHERE host_and_port = %(hp)s RETURNING id),
                inserted AS (
                    INSERT INTO harmony_machines (host_and_port, cpu, ram, gpu, last_contact)
                    SELECT %(hp)s, %(cpu)s, %(ram)s, %(gpu)s, CURRENT_TIMESTAMP
                    WHERE NOT EXISTS (SELECT id FROM upsert) RETURNING id)
                SELECT id FROM upsert UNION ALL SELECT id FROM inserted""",
                {"hp": self.args.listen, "cpu": os.cpu_count() or 1, "ram": 1 << 30, "gpu": 0.0}).fetchone()[0]
            layers = [n for n in self.args.layers.split(",") if n]
            configs = dict(c.execute("SELECT title, config FROM harmony_config WHERE title = ANY(%s)",
                                     (layers,)).fetchall())
            for name in layers:
                layer = tomllib.loads(configs.get(name, ""))
                self.cuzk = layer.get("Cuzk", {}).get("Address", self.cuzk)
                secret = layer.get("Apis", {}).get("StorageRPCSecret")
                self.rpc_secret = base64.b64decode(secret) if secret else self.rpc_secret
            c.execute("""INSERT INTO harmony_machine_details
                (tasks, layers, startup_time, miners, machine_id, machine_name, version)
                VALUES (%s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (machine_id) DO UPDATE SET tasks = EXCLUDED.tasks, layers = EXCLUDED.layers,
                    startup_time = EXCLUDED.startup_time, machine_name = EXCLUDED.machine_name""",
                      (",".join(t.name for t in self.types), ",".join(layers),
                       time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "", self.owner_id, socket.gethostname(),
                       "curio-node-standin"))
        if not self.cuzk:
            raise SystemExit(f"curio_node: no [Cuzk] Address in layers {self.args.layers} (harmony_config)")
        log(f"registered id={self.owner_id} listen={self.args.listen} cuzk={self.cuzk} layers={self.args.layers}")

    def serve(self) -> None:
        """The scheduler's loop: the DB poll every poll_s, and claims on events in between."""
        next_poll = time.monotonic()
        with self.db() as c:
            while not self.stop.is_set():
                if time.monotonic() >= next_poll:
                    self.poll(c)
                    next_poll += self.args.poll_s
                self.try_work(c)  # a peer's newTask or a local completion (scheduler.go:250-292)
                self.stop.wait(min(self.args.event_s, max(0.0, next_poll - time.monotonic())))

    def poll(self, c) -> None:
        """checkNodeFlags (harmonytask.go:651-663) as the background poller runs it (scheduler.go:123-128)."""
        row = c.execute("SELECT unschedulable, restart_request FROM harmony_machines WHERE host_and_port = %s",
                        (self.args.listen,)).fetchone()
        c.execute("UPDATE harmony_machines SET last_contact = CURRENT_TIMESTAMP WHERE id = %s", (self.owner_id,))
        if row is not None:
            self.schedulable = not row[0]
        self.polls.append((time.time(), self.schedulable))
        log(f"poll schedulable={str(self.schedulable).lower()}")

    def try_work(self, c) -> None:
        """pollerTryAllWork (harmonytask.go:454-517): nothing new while cordoned; time-sensitive types first,
        oldest first; a retried task only once RetryWait has passed since its update_time; then the claim."""
        if not self.schedulable:
            return
        with self.lock:
            room = self.args.max_pending - len(self.running)
        if room <= 0:
            return
        rows = c.execute(
            "SELECT id, name, retries, EXTRACT(EPOCH FROM LOCALTIMESTAMP - update_time)::float FROM harmony_task "
            "WHERE owner_id IS NULL AND name = ANY(%s) ORDER BY posted_time, id",
            ([t.name for t in self.types],)).fetchall()
        ready = [r for r in rows if self._may_retry(TYPES[r[1]], r[2], r[3])]
        ready.sort(key=lambda r: not TYPES[r[1]].time_sensitive)
        for tid, name, retries, _ in ready[:room]:
            if self.stop.is_set() or not self._claim(c, tid):
                continue
            with self.lock:
                self.running.add(tid)
                self.stats[name]["claimed"] += 1
                self.claims.append((time.time(), tid, name))
            log(f"claim id={tid} name={name} retries={retries}")
            threading.Thread(target=self.do, args=(tid, TYPES[name]), daemon=True).start()

    def _may_retry(self, t: TaskType, retries: int, age_s: float) -> bool:
        return t.retry_wait is None or retries == 0 or age_s > t.retry_wait(retries) * self.args.retry_scale

    def _claim(self, c, tid: int) -> bool:
        """task_type_handler.go:165-179: owner_id set on a still-unowned row, skipping one locked by a peer."""
        return c.execute("""
            WITH candidates AS (SELECT t.id FROM harmony_task t WHERE t.id = %s AND t.owner_id IS NULL
                                FOR UPDATE SKIP LOCKED)
            UPDATE harmony_task t SET owner_id = %s FROM candidates c WHERE t.id = c.id RETURNING t.id""",
                         (tid, self.owner_id)).fetchone() is not None

    def do(self, tid: int, t: TaskType) -> None:
        start = time.time()
        error = ""
        if self.stop.wait(self.args.prep_s):  # reading the sector's C1 output, before Prove
            return
        try:
            error = self.prove(f"{t.name}-{tid}-{int(start * 1000) % 100000}", t.kind)
        except OSError as exc:
            error = f"cuzk {self.cuzk}: {exc}"
        if not self.stop.is_set():
            self.record(tid, t, start, error)
        with self.lock:
            self.running.discard(tid)

    def prove(self, job: str, kind: str) -> str:
        """The prover's answer: "" for DONE, else why not (a refusal, FAILED, or a connection that closed)."""
        host, port = self.cuzk.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.settimeout(self.args.prove_timeout_s)
            s.sendall(f"PROVE {job} {kind}\n".encode())
            lines = s.makefile("r")
            for line in lines:
                if line.startswith("DONE "):
                    return ""
                if not line.startswith(("ACCEPTED ", "STARTED ")):
                    return line.strip() or "no answer"
        return "cuzk closed the connection before the proof was done"

    def record(self, tid: int, t: TaskType, start: float, error: str) -> None:
        """recordCompletion (task_type_handler.go:432-498), in one transaction."""
        with self.db() as c, c.transaction():
            posted, retries = c.execute("SELECT posted_time, retries FROM harmony_task WHERE id = %s",
                                        (tid,)).fetchone()
            if not error:
                c.execute("DELETE FROM harmony_task WHERE id = %s", (tid,))
                outcome = "done"
            elif t.max_failures > 0 and retries >= t.max_failures - 1:
                c.execute("DELETE FROM harmony_task WHERE id = %s", (tid,))
                outcome = "dropped"
            else:
                c.execute("UPDATE harmony_task SET owner_id = NULL, retries = %s, update_time = CURRENT_TIMESTAMP "
                          "WHERE id = %s", (retries + 1, tid))
                outcome = "retry"
            c.execute("""INSERT INTO harmony_task_history
                (task_id, name, posted, work_start, work_end, result, completed_by_host_and_port, err)
                VALUES (%s, %s, %s, to_timestamp(%s) AT TIME ZONE 'UTC', LOCALTIMESTAMP, %s, %s, %s)""",
                      (tid, t.name, posted, start, not error, self.args.listen, "error: " + error if error else ""))
        with self.lock:
            key = {"done": "done", "dropped": "failed", "retry": "retries"}[outcome]
            self.stats[t.name][key] += 1
            self.ended.append((time.time(), tid, t.name, outcome))
        log(f"{outcome} id={tid} name={t.name} retries={retries}" + (f" error={error}" if error else ""))

    def report(self) -> dict:
        with self.lock:
            totals = {k: sum(s[k] for s in self.stats.values()) for k in ("claimed", "done", "failed", "retries")}
            return {"machine_id": self.owner_id, "host_and_port": self.args.listen, "cuzk": self.cuzk,
                    "per_type": self.stats, "totals": totals, "running": sorted(self.running),
                    "polls": self.polls, "claims": self.claims, "ended": self.ended, "rpc": self.rpc}


def run(args: argparse.Namespace) -> int:
    node = Node(args)
    host, port = args.listen.rsplit(":", 1)
    listener = socket.create_server((host, int(port)))  # the --listen address is the node's own
    signal.signal(signal.SIGTERM, lambda *_: node.stop.set())
    signal.signal(signal.SIGINT, lambda *_: node.stop.set())
    node.register()
    rpc = serve_rpc(node, listener)
    node.serve()
    rpc.shutdown()
    listener.close()
    write_record(args.record, node.report())
    return 0


def feed(args: argparse.Namespace) -> int:
    """Tasks of the --mix types, paced (--gap-s) or saturating (--backlog unclaimed ones kept waiting)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    mix = {n: float(w) for n, w in (p.split("=") for p in args.mix.split(","))}
    rng = random.Random(args.seed)
    added = {n: 0 for n in mix}
    with connect(args) as c:
        log("feeding")
        while not stop.is_set() and (args.count <= 0 or sum(added.values()) < args.count):
            if args.backlog:
                waiting = c.execute("SELECT COUNT(*) FROM harmony_task WHERE owner_id IS NULL AND name = ANY(%s)",
                                    (list(mix),)).fetchone()[0]
                if waiting >= args.backlog:
                    stop.wait(0.02)
                    continue
            name = rng.choices(list(mix), weights=list(mix.values()))[0]
            c.execute("INSERT INTO harmony_task (name, added_by, posted_time) VALUES (%s, %s, CURRENT_TIMESTAMP)",
                      (name, 0))
            added[name] += 1
            if args.gap_s:
                stop.wait(args.gap_s)
        stop.wait()
    write_record(args.record, {"added": added})
    return 0


def write_record(path: str, record: dict) -> None:
    text = json.dumps(record)
    if path:
        Path(path).write_text(text + "\n")
    else:
        print(text, flush=True)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="curio_node", description=__doc__.split("\n\n")[0])
    add_db_flags(ap)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="the node: claim, prepare, prove, record")
    r.add_argument("--listen", required=True, help="host:port: this node's harmony_machines.host_and_port")
    r.add_argument("--layers", default="base", help="config layers (harmony_config titles), comma-separated")
    r.add_argument("--tasks", default=",".join(TYPES), help="task types this node runs, comma-separated")
    r.add_argument("--poll-s", type=float, default=30.0, help="the DB poll (pollRarely, 30 s)")
    r.add_argument("--event-s", type=float, default=0.05, help="how soon a new task is seen between polls")
    r.add_argument("--prep-s", type=float, default=0.0, help="a task's preparation before it calls Prove")
    r.add_argument("--retry-scale", type=float, default=1.0, help="RetryWait multiplied by this (tests: < 1)")
    r.add_argument("--max-pending", type=int, default=MAX_PENDING, help="[Cuzk] MaxPending")
    r.add_argument("--prove-timeout-s", type=float, default=PROVE_TIMEOUT_S, help="[Cuzk] ProveTimeout")
    r.add_argument("--record", default="", help="where the JSON record goes at SIGTERM (default stdout)")
    f = sub.add_parser("feed", help="insert tasks, paced or saturating")
    f.add_argument("--mix", default="PoRep=1", help="NAME=WEIGHT,...")
    f.add_argument("--gap-s", type=float, default=0.0, help="pause after each task (paced)")
    f.add_argument("--backlog", type=int, default=0, help="keep this many unclaimed (saturating)")
    f.add_argument("--count", type=int, default=0, help="stop adding after this many (0: no limit)")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--record", default="")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "run":
        bad = [n for n in args.tasks.split(",") if n not in TYPES]
        if bad:
            print(f"curio_node: --tasks: unknown task type {bad[0]} (known: {', '.join(TYPES)})", file=sys.stderr)
            return 2
        return run(args)
    return feed(args)


if __name__ == "__main__":
    sys.exit(main())
