"""The Curio side of a promises host (issue 43): its daemon fed by a Curio node, swapped with `stop = "cordon"`.

The farm lab of tests/curio_lab.py brought to one tests/promises.py host: a PostgreSQL of its own holding
Curio's tables, the node stand-in (images/curio/curio_node.py) in the host's network namespace, so that it reaches
the daemon's 127.0.0.1 there as a co-located Curio does (Curio's co-located layout:
documentation/en/experimental-features/cuzk-proving-daemon.md:181-193), and a feeder keeping a backlog of
tasks waiting (Curio's MaxPending full: no moment is idle). The node and the host's swap script reach the
database through its Unix socket, a path both see, so a fault on the controller's link (cut, half-open,
throttled) cuts the controller off and nothing else, as on a farm whose database is not behind the
controller's SSH connection.

The promises it adds, checked once the host's swap has ended (`check`):
- no node is left cordoned: its `harmony_machines.unschedulable` is false and the host holds no cordon.info;
- no task failed (no proof lost, no Curio retry burned, no PoSt missed): no `harmony_task_history` row with
  `result = false` written during a step, unless the step began with no daemon running or the harness itself
  killed the daemon (the `die` step, the "daemon killed" fault): those lose the proof in flight by design.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from curio_lab import NODE, Postgres, install_curio, set_layer

from lab import wait_until

LISTEN, STATUS = "127.0.0.1:9820", "127.0.0.1:9821"  # the daemon's, in the host's own network namespace
NODE_AT = "127.0.0.1:12300"  # the node's --listen: its harmony_machines.host_and_port
POLL_S = 0.3  # the node's DB poll (Curio's is 30 s; the cordon waits one, so the campaign keeps it short)
PREP_S = 0.1  # a claimed task's preparation before it calls Prove: claimed and not yet in the daemon's view
POST_WAIT_S = 3.0
DRAIN_TIMEOUT_S = 15.0
MIX = "PoRep=8,UpdateProve=4,PSProve=4,WdPost=1,WinPost=1"  # PoSt too: the swap waits for it or refuses
BACKLOG = 3
SQL = shutil.which("psql") or "/usr/bin/psql"


class Curio:
    """One host's Curio: its database (started once), and per reset its node and feeder (started again)."""

    def __init__(self, base: Path, netns: str):
        self.base, self.netns = base, netns
        self.db = Postgres().start()
        self.sock = str(self.db.dir / "sock")
        self.bin = install_curio(base / "curio-bin")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.failed_before = 0

    def env(self) -> dict[str, str]:
        """CURIO_DB_* as a host reaches this database: its socket directory (libpq and psql take a host
        that begins with `/` as one)."""
        return {**self.db.env(), "CURIO_DB_HOST": self.sock, "CURIO_DB_PORT": str(self.db.port)}

    def playbook(self) -> dict[str, object]:
        """The playbook's [curio] table: the node, the CLI and psql, the database's environment."""
        return {"nodes": [NODE_AT], "cli": str(self.bin), "sql": SQL, "env": self.env(), "poll_s": POLL_S,
                "post_wait_s": POST_WAIT_S}

    @staticmethod
    def daemon() -> dict[str, object]:
        """The playbook's [daemon] keys the cordon needs: the daemon's view, and the drain's limit."""
        return {"status_url": f"http://{STATUS}/status", "stop": "cordon", "drain_timeout_s": DRAIN_TIMEOUT_S}

    @staticmethod
    def config() -> str:
        """What the daemon's cuzk.toml adds: its proof port for the node, its status for the drain."""
        return f'listen = "{LISTEN}"\n\n[daemon]\nstatus_listen = "{STATUS}"\n'

    def restart(self) -> None:
        """A farm with no history: the tables emptied, the node and a saturating feeder started again."""
        self.stop()
        self.db.query("TRUNCATE harmony_task, harmony_task_history, harmony_machine_details, harmony_machines, "
                      "harmony_config RESTART IDENTITY CASCADE")
        set_layer(self.db, "cuzk", f'[Cuzk]\nAddress = "{LISTEN}"\n')
        env = {**os.environ, **self.env()}
        node = [sys.executable, str(NODE), "run", "--listen", NODE_AT, "--layers", "base,cuzk", "--poll-s",
                str(POLL_S), "--prep-s", str(PREP_S), "--retry-scale", "0.1", "--max-pending", "4"]
        with open(self.base / "curio.log", "ab") as log:  # the children keep their own copies of it
            self.procs = [
                subprocess.Popen(["ip", "netns", "exec", self.netns, *node], stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, start_new_session=True),
                subprocess.Popen([sys.executable, str(NODE), "feed", "--mix", MIX, "--backlog", str(BACKLOG)],
                                 stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                 start_new_session=True)]
        self.failed_before = 0
        # the node registered and working before the first step: a swap then always meets a node to cordon
        wait_until(lambda: self.running() is None and self.owned() > 0, timeout=30,
                   what="the Curio node to register and claim its first task")

    def owned(self) -> int:
        """The tasks the node owns now (claimed, preparing or proving)."""
        return int(self.db.query("SELECT COUNT(*) FROM harmony_task t JOIN harmony_machines m ON m.id = t.owner_id "
                                 "WHERE m.host_and_port = %s", NODE_AT)[0][0])

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        self.procs = []

    def close(self) -> None:
        self.stop()
        self.db.stop()

    def failed(self) -> list[tuple]:
        """Every task attempt that failed since the farm started: (task id, name, why)."""
        return self.db.query("SELECT task_id, name, err FROM harmony_task_history WHERE NOT result ORDER BY id")

    def cordoned(self) -> bool:
        rows = self.db.query("SELECT unschedulable FROM harmony_machines WHERE host_and_port = %s", NODE_AT)
        return bool(rows and rows[0][0])

    def running(self) -> str | None:
        """Why the node or the feeder is not running (None: both are)."""
        for name, p in zip(("node", "feeder"), self.procs, strict=True):
            if p.poll() is not None:
                return f"the Curio {name} stand-in exited {p.returncode}"
        return None

