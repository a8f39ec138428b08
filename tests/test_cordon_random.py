"""A random walk of 200 steps on the farm lab around cordoned swaps: the Curio node stand-in fed tasks,
time passing, deploys that run to their end, and deploys whose controller is SIGKILLed, Ctrl-C'd once or
twice, cut off from the host for 1-20 s (every packet to its sshd dropped), or whose host's sshd restarts,
each at a random moment. After every step, once the host's swap has
ended (its swap.lock free), the invariant holds: the node is not left cordoned (by swapctl: no cordon.info,
and its unschedulable flag false), no task failed (no Curio retry burned, no proof lost: no
harmony_task_history row with result false), and a daemon runs. SWAPCTL_CORDON_SEED replays a walk."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import time

import pytest
from curio_lab import curio_db, curio_farm  # noqa: F401
from test_cordon import Cordoned

from lab import swapctl_in_background, wait_until

pytestmark = pytest.mark.usefixtures("swapctl_env")
STEPS = 200
# step -> weight: half of them swaps, a third of those ended at a random moment
WALK = {"feed": 5, "wait": 3, "deploy": 3, "kill": 2, "ctrl-c": 2, "ctrl-c-twice": 1, "sshd-restart": 1, "post": 1,
        "link-cut": 1}


def swap_free(c: Cordoned) -> bool:
    """No swap runs on the host: its swap.lock (held by swap.sh to its end) can be taken."""
    path = c.cordon_file().parent / "swap.lock"
    if not path.exists():
        return True
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def failed_tasks(c: Cordoned) -> list[tuple]:
    return c.farm.db.query("SELECT task_id, name, err FROM harmony_task_history WHERE NOT result")


class Walk:
    def __init__(self, box, farm, builds, rng: random.Random):
        self.box, self.farm, self.builds, self.rng = box, farm, builds, rng
        self.c = Cordoned(box, farm, synth_ms=60, poll_s=0.3, drain_timeout_s=30, lock_silence_s=5,
                          curio={"post_wait_s": 0.5})
        self.c.d.start(builds[0])
        self.n = 0
        self.log: list[str] = []

    def feed(self, names=("PoRep", "PoRep", "UpdateProve", "PSProve")) -> None:
        for _ in range(self.rng.randint(1, 4)):
            self.farm.db.query("INSERT INTO harmony_task (name, added_by, posted_time) VALUES (%s, 0, "
                               "CURRENT_TIMESTAMP) RETURNING id", self.rng.choice(names))

    def deploy(self, end: str) -> None:
        self.n += 1
        build = self.builds[self.n % 2]
        proc, lines, reader = swapctl_in_background("deploy", "lab", "--binary", str(build), "--yes", "-p",
                                                    str(self.box.playbook_path))
        if end != "deploy":
            time.sleep(self.rng.uniform(0, 3.0))
            if end == "kill":
                proc.kill()
            elif end.startswith("ctrl-c"):
                proc.send_signal(signal.SIGINT)
                if end == "ctrl-c-twice":
                    time.sleep(self.rng.uniform(0.05, 0.5))
                    proc.send_signal(signal.SIGINT)
            elif end == "sshd-restart":
                self.box.server.stop()
                self.box.server.start()
            elif end == "link-cut":
                self.cut(self.rng.uniform(1, 20))
        try:
            proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(5)
        self.log.append(f"{end} -> {proc.returncode}: {(lines or [''])[-1].strip()[:160]}")

    def cut(self, seconds: float) -> None:
        """The controller cut off from the host: every packet to the host's sshd (on loopback) dropped for
        `seconds`, then let through again. Longer than the controller's keepalive (15 s) and its SSH session
        is given up; shorter and TCP carries on. The database is on another port: the host still reaches it."""
        rule = ["INPUT", "-i", "lo", "-p", "tcp", "--dport", str(self.box.server.port), "-j", "DROP"]
        subprocess.run(["iptables", "-w", "-I", *rule], check=True)
        try:
            time.sleep(seconds)
        finally:
            subprocess.run(["iptables", "-w", "-D", *rule], check=True)

    def step(self, what: str) -> None:
        if what == "feed":
            self.feed()
        elif what == "post":
            self.feed(("WdPost",))
        elif what == "wait":
            time.sleep(self.rng.uniform(0, 0.6))
        else:
            self.deploy(what)
        self.check(what)

    def check(self, what: str) -> None:
        c = self.c
        wait_until(lambda: swap_free(c), timeout=90, what=f"the host's swap to end after {what}")
        assert not c.cordon_file().exists(), f"cordon.info left after {what}: {self.log[-3:]}"
        assert not c.unschedulable(), f"the node left cordoned after {what}: {self.log[-3:]}"
        assert failed_tasks(c) == [], f"a task failed after {what}: {self.log[-3:]}"
        assert self.box.daemons(), f"no daemon runs after {what}: {self.log[-3:]}"


def test_no_node_is_left_cordoned_and_no_task_lost_over_a_random_walk(box, curio_farm, prover, prover_b):  # noqa: F811
    seed = int(os.environ.get("SWAPCTL_CORDON_SEED") or random.SystemRandom().randrange(1 << 30))
    rng = random.Random(seed)
    walk = Walk(box, curio_farm, (prover, prover_b), rng)
    kinds = rng.choices(list(WALK), weights=list(WALK.values()), k=STEPS)
    done: dict[str, int] = {}
    for i, what in enumerate(kinds):
        try:
            walk.step(what)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed} (SWAPCTL_CORDON_SEED={seed} to replay), step {i} {what}: {exc}") from exc
        done[what] = done.get(what, 0) + 1
    assert sum(done.values()) == STEPS
    assert walk.n >= 40, done  # the swaps are most of the time, not a handful
    # the walk did what it says: tasks were proved through it, by both builds
    proved = curio_farm.db.query("SELECT COUNT(*) FROM harmony_task_history WHERE result")[0][0]
    assert proved > 0 and failed_tasks(walk.c) == []
    print(f"seed {seed}: {done}, {proved} tasks proved; {walk.log[-5:]}")
