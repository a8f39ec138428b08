"""The sandbox's Curio (`sandbox up --curio`): its daemon fed as a Curio node feeds cuzk, and swapped with
Curio's cordon (`stop = "cordon"`, docs/curio.md). Stand-ins, not Curio (they are the tests' farm lab):

- a PostgreSQL of the sandbox's own (Debian's postgresql, `initdb`ed afresh at each `up`), reached through
  its Unix socket only (no TCP port), holding Curio's tables as Curio's own migrations create them
  (images/curio/sql/);
- the node stand-in (images/curio/curio_node.py `run`), registered at 127.0.0.1:NODE_PORT, proving on the
  daemon's `listen` port, reading the cordon at its DB poll (every POLL_S s here; Curio's is 30 s);
- a feeder keeping BACKLOG tasks waiting (PoRep, UpdateProve, now and then a WindowPoSt): no moment is idle,
  so only the cordon stops new work while the begun work finishes;
- the `curio` CLI stand-in (images/curio/curio_cli.py), which the host's swap script runs to cordon the node.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import BadInput, Refused

SRC = Path(__file__).resolve().parent / "curio"  # images/curio, shipped in the wheel
USER = PASSWORD = DATABASE = "yugabyte"  # Curio's defaults (cmd/curio/main.go:135-158)
SCHEMA = "curio"  # where Curio's tables live (curiostorage/harmonyquery: DefaultSchema)
DB_PORT = 5433  # Curio's default port: here only the name of the socket file
POLL_S = 1.0
MIX, BACKLOG = "PoRep=8,UpdateProve=3,WdPost=1", 2
PG_DIR = "pg-dir"  # in the sandbox's curio/: where its database lives (postgres may not enter the sandbox's path)


def pg_bin(tool: str) -> str:
    """A PostgreSQL server program: on PATH, else Debian's newest under /usr/lib/postgresql/*/bin."""
    found = shutil.which(tool)
    debian = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"), key=lambda p: int(p.split("/")[4]))
    if found or debian:
        return found or debian[-1]
    raise Refused(f"--curio needs PostgreSQL's {tool} (Debian: apt-get install postgresql; it is started by the "
                  f"sandbox, not as a service)")


def install_cli(bin_dir: Path) -> Path:
    """The `curio` CLI stand-in, installed as an executable named `curio` in bin_dir."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "curio"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {SRC / 'curio_cli.py'} \"$@\"\n")
    exe.chmod(0o755)
    return exe


def env(base: Path) -> dict[str, str]:
    """CURIO_DB_* as the node, the CLI and psql find the sandbox's database (a host that begins with `/` is a
    socket directory to libpq)."""
    sock = (base / "curio" / PG_DIR).read_text().strip() + "/sock"
    return {"CURIO_DB_HOST": sock, "CURIO_DB_PORT": str(DB_PORT), "CURIO_DB_NAME": DATABASE,
            "CURIO_DB_USER": USER, "CURIO_DB_PASSWORD": PASSWORD}


def start(base: Path, listen: int, node: int) -> None:
    """Curio for the sandbox at `base`: its database with its tables, the `curio` CLI, the node feeding the
    daemon on 127.0.0.1:`listen` from 127.0.0.1:`node`, and the feeder; returns once the node has claimed
    work."""
    for tool in ("initdb", "postgres", "psql"):
        pg_bin(tool)
    home = base / "curio"
    home.mkdir()
    _postgres(home)
    _tables(base, listen)
    install_cli(home / "bin")
    run = {**os.environ, **env(base)}
    with open(home / "curio.log", "ab") as log:  # the node's and the feeder's lines; each keeps its own copy
        for args in (["run", "--listen", f"127.0.0.1:{node}", "--layers", "base,cuzk", "--poll-s", str(POLL_S),
                      "--prep-s", "0.2", "--max-pending", "4", "--record", str(home / "node.json")],
                     ["feed", "--mix", MIX, "--backlog", str(BACKLOG), "--record", str(home / "feed.json")]):
            subprocess.Popen([sys.executable, str(SRC / "curio_node.py"), *args], stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL, env=run, start_new_session=True)
    _wait(lambda: _query(base, "SELECT COUNT(*) FROM harmony_task t JOIN harmony_machines m ON m.id = t.owner_id "
                               "WHERE m.host_and_port = %s", f"127.0.0.1:{node}")[0][0] != 0,
          f"the Curio node stand-in claimed no task (see {home / 'curio.log'})")


def _postgres(home: Path) -> None:
    """initdb and start, as an unprivileged user where this is root (postgres refuses root), in a directory
    of its own under the system's temporary one (that user may not enter the sandbox's path)."""
    ids = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
    if os.geteuid() == 0 and ids is None:
        raise Refused("--curio as root needs the user `postgres` to run the database as (Debian's postgresql)")
    d = Path(tempfile.mkdtemp(prefix="swapctl-sandbox-pg-"))
    (home / PG_DIR).write_text(f"{d}\n")
    (d / "sock").mkdir()
    (d / "pw").write_text(PASSWORD + "\n")
    as_user: dict[str, Any] = {}
    if ids is not None:
        for p in (d, d / "sock", d / "pw"):
            os.chown(p, ids.pw_uid, ids.pw_gid)
        as_user = {"user": ids.pw_uid, "group": ids.pw_gid, "extra_groups": []}
    subprocess.run([pg_bin("initdb"), "-D", str(d / "data"), "-U", USER, f"--pwfile={d / 'pw'}", "--auth-local=trust",
                    "-E", "UTF8", "--no-sync"], check=True, capture_output=True, **as_user)
    subprocess.Popen([pg_bin("postgres"), "-D", str(d / "data"), "-p", str(DB_PORT), "-c", "listen_addresses=",
                      "-c", f"unix_socket_directories={d / 'sock'}", "-c", "fsync=off", "-c", "TimeZone=UTC"],
                     stdout=open(d / "postgres.log", "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                     start_new_session=True, **as_user)


def _tables(base: Path, listen: int) -> None:
    """Curio's database and schema, its migrations in file-name order as Curio applies them, and the config
    layer `cuzk` that points the node at the daemon ([Cuzk] Address)."""
    import psycopg  # here: 40 ms to import, for --curio only

    sock = env(base)["CURIO_DB_HOST"]
    admin = f"host={sock} port={DB_PORT} user={USER} dbname=postgres"

    def up() -> bool:
        try:
            psycopg.connect(admin, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    _wait(up, f"PostgreSQL did not start (see {Path(sock).parent / 'postgres.log'})")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {DATABASE}")
    with psycopg.connect(admin.replace("dbname=postgres", f"dbname={DATABASE}"), autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {SCHEMA}")
        c.execute(f"SET search_path = {SCHEMA}")
        for sql in sorted((SRC / "sql").glob("*.sql")):
            c.execute(sql.read_bytes())
        c.execute("INSERT INTO harmony_config (title, config) VALUES ('cuzk', %s)",
                  (f'[Cuzk]\nAddress = "127.0.0.1:{listen}"\n',))


def _query(base: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    import psycopg

    e = env(base)
    with psycopg.connect(f"host={e['CURIO_DB_HOST']} port={DB_PORT} user={USER} dbname={DATABASE} "
                         f"options='-c search_path={SCHEMA}'", autocommit=True) as c:
        return list(c.execute(sql.encode(), params).fetchall())


def _wait(done: Callable[[], bool], why: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise BadInput(why)
        time.sleep(0.1)


def playbook(text: str, base: Path, node: int) -> str:
    """The sandbox's playbook swapping with the cordon: its [daemon] `stop = "cordon"`, and a [curio] table
    naming the node, the CLI, psql and the database."""
    text, n = re.subn(r'^stop = "drain".*$', 'stop = "cordon"                    # Curio\'s cordon, then the drain '
                      '(docs/curio.md)', text, count=1, flags=re.M)
    assert n == 1, "the sandbox's example has a stop line"
    db = ", ".join(f'{k} = "{v}"' for k, v in env(base).items())
    return text + (f'\n[curio]                            # `sandbox up --curio`: the stand-ins feeding the daemon\n'
                   f'nodes = ["127.0.0.1:{node}"]\ncli = "{base / "curio" / "bin" / "curio"}"\n'
                   f'sql = "{pg_bin("psql")}"\nenv = {{ {db} }}\n'
                   f'poll_s = {POLL_S}                       # the node\'s DB poll (Curio\'s: 30 s)\n'
                   f'post_wait_s = 30\n')


def stop(base: Path, timeout: float = 10) -> None:
    """The node, the feeder and the database of the sandbox at `base` (nothing when it has none)."""
    home = base / "curio"
    if not (home / PG_DIR).is_file():
        return
    subprocess.run(["pkill", "-KILL", "-f", str(home.resolve())], check=False)  # the node and the feeder
    d = Path((home / PG_DIR).read_text().strip())
    try:  # postmaster.pid's first line: the server's pid; SIGINT: its fast shutdown
        os.kill(int((d / "data" / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
    except (OSError, ValueError, IndexError):
        pass
    deadline = time.monotonic() + timeout
    while (d / "data" / "postmaster.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    subprocess.run(["pkill", "-KILL", "-f", str(d)], check=False)
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
