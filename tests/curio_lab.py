"""The Curio farm lab: a real PostgreSQL server holding Curio's harmony tables (images/curio/sql/), the
Curio node stand-in (images/curio/curio_node.py) and the `curio` CLI stand-in (images/curio/curio_cli.py).

Real Curio and YugabyteDB cannot be built or fetched here; YugabyteDB's YSQL is PostgreSQL's SQL, so the
database is Debian's PostgreSQL, `initdb`ed into a temporary directory and started on 127.0.0.1 at a free
port, with Curio's own migrations applied in the schema `curio`. docs/curio.md says what each stand-in
does, with the Curio source line it follows.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from swapctl.sandbox import free_port, prover_config
from swapctl.sandbox_curio import DATABASE, PASSWORD, SCHEMA, USER, install_cli, pg_bin

HERE = Path(__file__).resolve().parent
CURIO = HERE.parent / "images" / "curio"  # the stand-ins and Curio's tables (`sandbox up --curio` runs them too)
DDL = CURIO / "sql"
NODE = CURIO / "curio_node.py"
CLI = CURIO / "curio_cli.py"
# What every Curio type in the lab is named (tasks/tasknames/names.go:12,19,24,27,78)
CUZK_TASKS = ("PoRep", "UpdateProve", "PSProve", "WdPost", "WinPost")


@dataclass
class Postgres:
    """One PostgreSQL server of its own: initdb into a temporary directory, started on 127.0.0.1 at a free
    port with a private socket directory, run as an unprivileged user (postgres refuses root)."""

    user: str = "postgres"  # the OS user the server runs as, where this process is root
    port: int = 0
    listen: str = "127.0.0.1"  # listen_addresses: "*" for hosts in network namespaces of their own
    hba: tuple[str, ...] = ()  # pg_hba.conf lines added to initdb's (which lets in 127.0.0.1 and ::1 only)
    dir: Path = field(default_factory=Path)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        """How a client reaches Curio's tables: Curio's role and database, the schema on the search_path."""
        return (f"host=127.0.0.1 port={self.port} user={USER} password={PASSWORD} dbname={DATABASE} "
                f"options='-c search_path={SCHEMA}'")

    def env(self) -> dict[str, str]:
        """The environment by which the real curio (and its stand-ins) find this database
        (cmd/curio/main.go:122-158: CURIO_DB_HOST, _PORT, _NAME, _USER, _PASSWORD)."""
        return {"CURIO_DB_HOST": "127.0.0.1", "CURIO_DB_PORT": str(self.port), "CURIO_DB_NAME": DATABASE,
                "CURIO_DB_USER": USER, "CURIO_DB_PASSWORD": PASSWORD}

    def start(self, timeout: float = 60) -> Postgres:
        self.dir = Path(tempfile.mkdtemp(prefix="swapctl-curio-pg-"))
        self.port = free_port()
        (self.dir / "sock").mkdir()
        (self.dir / "pw").write_text(PASSWORD + "\n")
        ids = pwd.getpwnam(self.user) if os.geteuid() == 0 else None
        if ids:
            for p in (self.dir, self.dir / "sock", self.dir / "pw"):
                os.chown(p, ids.pw_uid, ids.pw_gid)
        as_user = {"user": ids.pw_uid, "group": ids.pw_gid, "extra_groups": []} if ids else {}
        data, log = self.dir / "data", self.dir / "postgres.log"
        subprocess.run([pg_bin("initdb"), "-D", str(data), "-U", USER, f"--pwfile={self.dir / 'pw'}",
                        "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, **as_user)
        with open(data / "pg_hba.conf", "a") as hba:
            hba.writelines(line + "\n" for line in self.hba)
        self.proc = subprocess.Popen(
            [pg_bin("postgres"), "-D", str(data), "-p", str(self.port), "-c", f"listen_addresses={self.listen}",
             "-c", f"unix_socket_directories={self.dir / 'sock'}", "-c", "fsync=off", "-c", "TimeZone=UTC",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            **as_user)
        try:
            self._wait_ready(log, timeout)
            self._create_tables()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, log: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        dsn = self.dsn.replace(f"dbname={DATABASE}", "dbname=postgres")
        while True:
            try:
                psycopg.connect(dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                assert self.proc is not None
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace")[-600:]
                    raise RuntimeError(f"postgres on 127.0.0.1:{self.port} not up ({tail.strip()})") from None
                time.sleep(0.05)

    def _create_tables(self) -> None:
        """Curio's database and schema, then its migrations in file-name order, as Curio applies them."""
        with psycopg.connect(self.dsn.replace(f"dbname={DATABASE}", "dbname=postgres"), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            for sql in sorted(DDL.glob("*.sql")):
                c.execute(sql.read_text().encode())

    def stop(self, timeout: float = 20) -> None:
        """Fast shutdown (SIGINT: running sessions end), then the process group killed if it lingers; the
        directory goes with it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.dir != Path() and self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True)

    def query(self, sql: str, *params: object) -> list[tuple]:
        with self.connect() as c:
            cur = c.execute(sql.encode(), params or None)
            return cur.fetchall() if cur.description else []


def set_layer(db: Postgres, title: str, config: str) -> None:
    """A config layer, as `curio config set` stores it (harmony_config: title, config TOML)."""
    db.query("INSERT INTO harmony_config (title, config) VALUES (%s, %s) "
             "ON CONFLICT (title) DO UPDATE SET config = EXCLUDED.config", title, config)


def add_tasks(db: Postgres, name: str, n: int = 1) -> list[int]:
    """n new tasks, inserted as AddTaskByName does (harmonytask.go:808-809); their ids."""
    with db.connect() as c:
        return [c.execute("INSERT INTO harmony_task (name, added_by, posted_time) VALUES (%s, %s, CURRENT_TIMESTAMP) "
                          "RETURNING id", (name, 0)).fetchone()[0] for _ in range(n)]


install_curio = install_cli  # the sandbox's own


@dataclass
class NodeProc:
    """One running node stand-in: its process, its --listen address, its log and its record's path."""

    proc: subprocess.Popen[bytes]
    listen: str
    log: Path
    record_path: Path

    def events(self, what: str = "") -> list[tuple[float, str, dict[str, str]]]:
        """Its log lines `TIME EVENT key=value...` (those of event `what`, where given), in order."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            t, event, *rest = line.split(" ", 2) + [""]
            fields = dict(kv.split("=", 1) for kv in rest[0].split(" ") if "=" in kv) if rest else {}
            if not what or event == what:
                out.append((float(t), event, fields))
        return out

    def polls(self) -> list[tuple[float, bool]]:
        return [(t, f["schedulable"] == "true") for t, _, f in self.events("poll")]

    def wait_poll(self, after: float, schedulable: bool | None = None, timeout: float = 20) -> float:
        """The time of the first poll after `after` (that read `schedulable`, where given)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, s in self.polls():
                if t > after and (schedulable is None or s == schedulable):
                    return t
            time.sleep(0.02)
        raise AssertionError(f"no poll (schedulable={schedulable}) after {after} within {timeout} s: {self.polls()}")

    def wait_event(self, what: str, task_id: int, timeout: float = 20) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, _, f in self.events(what):
                if f.get("id") == str(task_id):
                    return t
            if self.proc.poll() is not None:
                raise AssertionError(f"the node exited {self.proc.returncode}: {self.log.read_text()[-800:]}")
            time.sleep(0.02)
        raise AssertionError(f"no {what} of task {task_id} within {timeout} s: {self.log.read_text()[-800:]}")

    def stop(self, timeout: float = 10) -> dict:
        """SIGTERM, then its record (a node killed past `timeout` has none)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return json.loads(self.record_path.read_text()) if self.record_path.exists() else {}


class Farm:
    """One test's farm: Curio's database emptied, the stand-in prover and node processes it starts, and
    the `curio` CLI stand-in on a PATH of its own; stop() ends every process it started."""

    def __init__(self, db: Postgres, workdir: Path, prover: Path):
        self.db, self.dir, self.prover_bin = db, workdir, prover
        self.cuzk_port = free_port()
        self.nodes: list[NodeProc] = []
        self.provers: list[subprocess.Popen[bytes]] = []
        self.bin = install_curio(workdir / "bin").parent
        db.query("TRUNCATE harmony_task, harmony_task_history, harmony_machine_details, harmony_machines, "
                 "harmony_config RESTART IDENTITY CASCADE")
        set_layer(db, "cuzk", f'[Cuzk]\nAddress = "127.0.0.1:{self.cuzk_port}"\n')

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.db.env(), "PATH": f"{self.bin}:{os.environ['PATH']}"}

    def start_prover(self, synth_ms: int = 20, partitions: int = 2) -> subprocess.Popen[bytes]:
        """The stand-in prover on the layer's [Cuzk] Address, once it logged its ready line."""
        config, log = self.dir / f"cuzk-{len(self.provers)}.toml", self.dir / f"cuzk-{len(self.provers)}.log"
        config.write_text(prover_config(memory_mib=8, jobs=0, partitions=partitions, partition_mib=1,
                                        synth_ms=synth_ms, gpu_ms=max(1, synth_ms // 2),
                                        listen=f"127.0.0.1:{self.cuzk_port}") + "srs_load_ms = 10\n")
        proc = subprocess.Popen([str(self.prover_bin), "--config", str(config)], stdout=open(log, "ab"),
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.dir,
                                start_new_session=True)
        self.provers.append(proc)
        deadline = time.monotonic() + 30
        while "cuzk-daemon ready" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the prover did not become ready: {log.read_text()[-800:]}")
            time.sleep(0.02)
        return proc

    def start_node(self, poll_s: float = 1.0, prep_s: float = 0.0, retry_scale: float = 0.1,
                   max_pending: int = 10, tasks: str = ",".join(CUZK_TASKS), layers: str = "base,cuzk") -> NodeProc:
        """`curio run` (the node stand-in) on a free --listen port, once it has registered and polled."""
        listen = f"127.0.0.1:{free_port()}"
        n = len(self.nodes)
        log, record = self.dir / f"node-{n}.log", self.dir / f"node-{n}.json"
        proc = subprocess.Popen(
            ["curio", "run", "--listen", listen, "--layers", layers, "--poll-s", str(poll_s),
             "--prep-s", str(prep_s), "--retry-scale", str(retry_scale), "--max-pending", str(max_pending),
             "--tasks", tasks, "--record", str(record)],
            stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env())
        node = NodeProc(proc, listen, log, record)
        self.nodes.append(node)
        node.wait_poll(0)
        return node

    def feed(self, mix: str = "PoRep=1", count: int = 0, gap_s: float = 0.0, backlog: int = 0) -> NodeProc:
        """The feeder (curio_node.py feed): tasks of `mix`, paced by gap_s or kept `backlog` deep."""
        n = len(self.nodes)
        log, record = self.dir / f"feed-{n}.log", self.dir / f"feed-{n}.json"
        proc = subprocess.Popen(
            [sys.executable, str(NODE), "feed", "--mix", mix, "--count", str(count), "--gap-s", str(gap_s),
             "--backlog", str(backlog), "--record", str(record)],
            stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env())
        feeder = NodeProc(proc, "", log, record)
        self.nodes.append(feeder)
        return feeder

    def curio(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """The `curio` executable, as a script on the host would run it (the database from CURIO_DB_*)."""
        return subprocess.run(["curio", *args], env=env or self.env(), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)

    def owned(self, node: NodeProc) -> int:
        """What Curio asks before it restarts a node (harmonytask.go:668): its tasks, claimed and running."""
        [(mid,)] = self.db.query("SELECT id FROM harmony_machines WHERE host_and_port = %s", node.listen)
        return int(self.db.query("SELECT COUNT(*) FROM harmony_task WHERE owner_id = %s", mid)[0][0])

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        for proc in self.provers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def curio_db():
    """A real PostgreSQL with Curio's tables, started once a session; stopped even when tests fail."""
    db = Postgres().start()
    try:
        yield db
    finally:
        db.stop()


@pytest.fixture
def curio_farm(curio_db, prover, tmp_path):
    """A farm of one test on the session's database, with the session's prover build; every process it
    started is ended after the test, passed or not."""
    farm = Farm(curio_db, tmp_path, prover)
    try:
        yield farm
    finally:
        farm.stop()
