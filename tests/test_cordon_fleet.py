"""A rolling `deploy @farm` with `stop = "cordon"` over two cuzk hosts, each fed by a Curio node of its own
(issue 43, item 7): the farm lab of tests/curio_lab.py (a real PostgreSQL with Curio's tables, the node and
`curio` CLI stand-ins) with two namespace hosts (tests/lab.py's NetnsLab: their own network, mounts and
sshd), each running its daemon at /data/cuzk as one playbook's [daemon] says.

Curio's co-located layout (documentation/en/experimental-features/cuzk-proving-daemon.md:181-193): each GPU
box's node feeds its own cuzk; here node i's layer `cuzk-i` names host i's daemon as its `[Cuzk] Address`
(deps/config/types.go:577-593). Both nodes register in one harmony database, each under its own
host_and_port (a node registers its routable address: deps/deps.go:291-305, resources.go:83-99)."""

from __future__ import annotations

import re
import subprocess
import threading
import time

import pytest
from curio_lab import Farm, NodeProc, Postgres, set_layer
from test_cordon import sql_client
from test_fleet import DAEMON, journal, running

from lab import NetnsLab, prover_config, swapctl, swapctl_in_background, wait_until
from test_deploy import sha

HOSTS = 2
LISTEN, STATUS = 9820, 9821  # each host's daemon, in its own network namespace: the same ports on every host


@pytest.fixture(scope="module")
def cordon_lab(tmp_path_factory):
    """Two namespace hosts that reach one harmony database: each gets a default route to this machine, where
    PostgreSQL listens on every address and lets the hosts' networks in."""
    lab = NetnsLab(tmp_path_factory.mktemp("cordon-farm"), HOSTS, prefix="swk")
    db = Postgres(listen="*", hba=("host all all 10.0.0.0/8 scram-sha-256",))
    try:
        lab.start()
        for ns, net in zip((f"{lab.prefix}-{i}" for i in range(HOSTS)), lab.nets, strict=True):
            subprocess.run(["ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", f"{net}.1"], check=True)
        db.start()
        yield lab, db
    finally:
        db.stop()
        lab.close()


class CordonFarm:
    """Both hosts on build A, started by hand; node i feeding host i; the playbook naming each host's node under
    its [hosts.NAME] (curio_nodes), and [curio] no nodes of its own."""

    def __init__(self, lab: NetnsLab, db: Postgres, workdir, prover, synth_ms: tuple[int, ...],
                 node_tasks: tuple[str, ...] = ("PoRep,UpdateProve", "PoRep,UpdateProve"), max_pending: int = 4,
                 rollout: str = "canary = 1\ncanary_wait_s = 1\n", post_wait_s: float = 60):
        self.lab, self.db = lab, db
        self.farm = Farm(db, workdir, prover)
        for i, s in enumerate(lab.servers):
            self._start_daemon(s, prover, synth_ms[i])
        self.nodes: list[NodeProc] = []
        for i, net in enumerate(lab.nets):
            set_layer(db, f"cuzk-{i}", f'[Cuzk]\nAddress = "{net}.2:{LISTEN}"\n')
            self.nodes.append(self.farm.start_node(poll_s=1.0, layers=f"base,cuzk-{i}", tasks=node_tasks[i],
                                                   max_pending=max_pending))
        self.book = workdir / "farm.toml"
        env = {k: v for k, v in db.env().items() if k.startswith("CURIO_DB_")}
        env["CURIO_DB_HOST"] = f"{lab.nets[0]}.1"  # this machine, as both hosts reach it
        curio = {"cli": str(self.farm.bin / "curio"), "sql": sql_client(), "env": env, "poll_s": 1.0,
                 "post_wait_s": post_wait_s}
        daemon = {"binary": "/data/cuzk", "args": ["--config", "/data/cuzk.toml"], "match": "/data/cuzk",
                  "log": "/data/cuzk.log", "ready_timeout_s": 20, "stop_grace_s": 5, "stop": "cordon",
                  "status_url": f"http://127.0.0.1:{STATUS}/status", "drain_timeout_s": 60}
        first, rest = lab.servers[0], lab.servers[1:]
        own = [{"curio_nodes": [n.listen]} for n in self.nodes]
        self.book.write_text(first.playbook(name="gpu-0", host=own[0], daemon=daemon, memory={"release_timeout_s": 20},
                                            curio=curio)
                             + "".join(s.playbook(name=f"gpu-{i}", host=own[i]) + "\n" for i, s in enumerate(rest, 1))
                             + "[groups]\nfarm = [" + ", ".join(f'"gpu-{i}"' for i in range(HOSTS)) + "]\n\n"
                             + "[rollout]\n" + rollout)

    @staticmethod
    def _start_daemon(s, prover, synth_ms: int) -> None:
        s.exec(f"pkill -9 -f {DAEMON}; rm -rf /data/.swapctl /data/cuzk /data/cuzk.log; true", check=False)
        (s.data / "cuzk").write_bytes(prover.read_bytes())
        (s.data / "cuzk").chmod(0o755)
        (s.data / "cuzk.toml").write_text(
            prover_config(memory_mib=8, jobs=0, partitions=2, partition_mib=1, synth_ms=synth_ms,
                          gpu_ms=synth_ms // 2)
            + f'listen = "0.0.0.0:{LISTEN}"\nstatus_listen = "127.0.0.1:{STATUS}"\nsrs_load_ms = 100\n')
        s.exec("cd /data && setsid ./cuzk --config /data/cuzk.toml >> /data/cuzk.log 2>&1 < /dev/null &")
        wait_until(lambda: "cuzk-daemon ready" in (s.data / "cuzk.log").read_text(errors="replace"),
                   what="the host's daemon to be ready")

    def cordoned(self) -> set[str]:
        return {n for n, flag in self.db.query("SELECT host_and_port, unschedulable FROM harmony_machines") if flag}

    def failed_in_history(self) -> int:
        return int(self.db.query("SELECT COUNT(*) FROM harmony_task_history WHERE NOT result")[0][0])

    def stop(self) -> None:
        self.farm.stop()
        for s in self.lab.servers:
            s.exec(f"pkill -9 -f {DAEMON}; true", check=False)


class Sampler(threading.Thread):
    """harmony_machines.unschedulable of every node, read every 20 ms until stopped: (time, cordoned nodes)."""

    def __init__(self, farm: CordonFarm):
        super().__init__(daemon=True)
        self.farm, self.samples, self.done = farm, [], threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append((time.time(), frozenset(self.farm.cordoned())))
            self.done.wait(0.02)

    def spans(self) -> list[tuple[float, float, frozenset[str]]]:
        """Each run of samples with some node cordoned: (first, last, every node cordoned in it)."""
        out: list[tuple[float, float, frozenset[str]]] = []
        was = False
        for t, nodes in self.samples:
            if nodes and was:
                out[-1] = (out[-1][0], t, out[-1][2] | nodes)
            elif nodes:
                out.append((t, t, nodes))
            was = bool(nodes)
        return out

    def together(self) -> list[float]:
        """The times at which every node was cordoned at once."""
        return [t for t, nodes in self.samples if len(nodes) == HOSTS]


@pytest.fixture(scope="module")
def rolled(cordon_lab, prover, prover_b, tmp_path_factory):
    """The saturated farm rolled out once, canary first then one host at a time: what the deploy said,
    the nodes' cordons sampled while it ran, each host's journal and build, and each node's record."""
    lab, db = cordon_lab
    work = tmp_path_factory.mktemp("rolled")
    farm = CordonFarm(lab, db, work, prover, synth_ms=(150, 150))
    sampler = Sampler(farm)
    try:
        feeder = farm.farm.feed(mix="PoRep=3,UpdateProve=1", backlog=4)
        wait_until(lambda: all(farm.farm.owned(n) >= 2 for n in farm.nodes), what="both nodes to own work")
        sampler.start()
        r = swapctl("deploy", "@farm", "--binary", str(prover_b), "--yes", "-p", str(farm.book), timeout=240,
                    env={"XDG_STATE_HOME": str(work / "state"), "XDG_CACHE_HOME": str(work / "cache")})
        sampler.done.set()
        sampler.join()
        ended = time.time()
        for n in farm.nodes:  # each node proves again, on its host's new build
            wait_until(lambda n=n: any(t > ended for t, _, _ in n.events("done")), what="a node to prove again")
        feeder.stop()
        records = [n.stop() for n in farm.nodes]
        yield {"run": r, "spans": sampler.spans(), "together": sampler.together(), "cordoned": farm.cordoned(),
               "failed": farm.failed_in_history(),
               "journals": [journal(s) for s in lab.servers], "running": [running(s) for s in lab.servers],
               "records": records, "nodes": [n.listen for n in farm.nodes]}
    finally:
        sampler.done.set()
        farm.stop()


def test_a_rolling_cordoned_deploy_under_saturating_load_swaps_both_hosts_and_loses_nothing(rolled, prover_b):
    r = rolled["run"]
    assert r.returncode == 0, r.stderr
    assert "canary gpu-0" in r.stderr and r.stdout.count("deployed") >= HOSTS
    assert rolled["running"] == [[sha(prover_b)]] * HOSTS
    assert rolled["failed"] == 0  # harmony_task_history: no task failed, none retried
    for rec in rolled["records"]:
        assert rec["totals"]["failed"] == 0 and rec["totals"]["retries"] == 0, rec["totals"]
    assert rolled["cordoned"] == set()  # no node left cordoned
    for entries in rolled["journals"]:
        [entry] = entries
        assert entry["outcome"] == "deployed" and entry["lost"] == 0 and entry["cordon"]["uncordoned"] is True


def test_the_hosts_cordons_come_one_after_the_other(rolled):
    """Rolling: the second host's cordon begins only after the first host's ended (a sampled gap where no
    node is cordoned between them), and each lasted as long as its journal says, within a second."""
    spans = rolled["spans"]
    assert len(spans) == HOSTS, spans
    (_, end0, _), (begin1, _, _) = spans
    assert begin1 > end0 + 0.5, spans  # the canary's wait and the second host's preflight lie between
    for (first, last, _), entries in zip(spans, rolled["journals"], strict=True):
        assert abs((last - first) - entries[-1]["cordon"]["cordon_s"]) < 1.0, (spans, entries[-1]["cordon"])


def test_a_rolling_deploy_never_has_both_nodes_cordoned_at_once(rolled):
    """The farm's promise: while one host swaps, the other host's node goes on taking work. Each host's swap
    cordons only the node its curio_nodes names; before them (d79d516, a strict xfail then) [curio] nodes was
    one list for every host, each swap cordoned both nodes, and both were cordoned together for most of each
    cordon."""
    together = rolled["together"]
    assert not together, f"both nodes cordoned at once in {len(together)} samples, from {together[:1]}"


def test_a_refused_cordon_on_the_second_host_leaves_the_first_swapped_and_the_second_as_it_was(
        cordon_lab, prover, prover_b, tmp_path, swapctl_env):
    """The second host's node owns a WinPost past post_wait_s: that host's swap refuses and changes nothing
    (no cordon, its old daemon); the canary stays on the new build, uncordoned; the fleet's exit code is the
    refusal's, and its summary says which host did what."""
    lab, db = cordon_lab
    farm = CordonFarm(lab, db, tmp_path, prover, synth_ms=(100, 4000), post_wait_s=1,
                      node_tasks=("PoRep,UpdateProve", "PoRep,UpdateProve,WinPost"),
                      rollout="canary = 1\ncanary_wait_s = 6\nmax_fail = 0\n")
    try:
        old = running(lab.servers[1])
        deploy, lines, reader = swapctl_in_background("deploy", "@farm", "--binary", str(prover_b), "--yes",
                                                      "-p", str(farm.book))
        try:  # the canary is done and uncordoned; node 1 takes a WinPost before the second host's swap
            wait_until(lambda: any("canaries run for" in line for line in lines), timeout=60, what="the canary")
            [tid] = db.query("INSERT INTO harmony_task (name, added_by, posted_time) VALUES "
                             "('WinPost', 0, CURRENT_TIMESTAMP) RETURNING id")[0]
            farm.nodes[1].wait_event("claim", tid, timeout=4)
            out = deploy.stdout.read()  # stderr is the reader's: communicate() would take lines from it
            deploy.wait(120)
        finally:
            if deploy.poll() is None:
                deploy.kill()
            deploy.wait()
        reader.join(10)
        said = " ".join("".join(lines).split())
        assert deploy.returncode == 3, said  # Refused: the worst outcome of the two
        assert "PoSt" in said and "WinPost" in said and "nothing was stopped" in said, said
        assert re.search(r"gpu-0\s.*deployed", out) and re.search(r"gpu-1\s.*failed \(3\)", out), out
        assert running(lab.servers[0]) == [sha(prover_b)] and running(lab.servers[1]) == old == [sha(prover)]
        [canary] = journal(lab.servers[0])
        assert canary["outcome"] == "deployed" and canary["cordon"]["uncordoned"] is True
        assert all("cordon" not in e for e in journal(lab.servers[1]))
        assert farm.cordoned() == set()
        claimed = farm.nodes[1].wait_event("claim", tid)
        assert all(schedulable for t, schedulable in farm.nodes[1].polls() if t > claimed)  # never cordoned since
        farm.nodes[1].wait_event("done", tid, timeout=30)  # the WinPost proved on the old build
        assert farm.failed_in_history() == 0
    finally:
        farm.stop()
