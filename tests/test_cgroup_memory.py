"""Memory as a container sees it (issue 44): the daemon's memory cgroup beside MemAvailable, in status, the
preflight's plan and the swap's memory wait; cuzk's "auto" budget under a cgroup limit; a daemon listening
beyond the host. Real cgroups (v2, else v1's memory hierarchy: this lab's kernel mounts v1) made by the
test, real sshd, the real prover; the parsers on hostile text."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from test_systemd import UnitBox

from swapctl.facts import cgroup, exposure
from swapctl.host import scripts

from conftest import own_box
from lab import free_port, prover_config, swapctl

ROOT = Path("/sys/fs/cgroup")
MIB = 1 << 20


class Cg:
    """A memory cgroup made by the test: v2 (memory.max), else v1 (memory.limit_in_bytes)."""

    def __init__(self, limit_bytes: int):
        if (ROOT / "cgroup.controllers").exists() and "memory" in (ROOT / "cgroup.subtree_control").read_text():
            self.base, self.limit_file = ROOT, "memory.max"
        elif (ROOT / "memory" / "memory.usage_in_bytes").exists():
            self.base, self.limit_file = ROOT / "memory", "memory.limit_in_bytes"
        else:
            pytest.skip("this machine has no memory cgroup controller (v2 with memory in subtree_control, or v1's "
                        "memory hierarchy): no limit can be set on the test's daemon here")
        self.dir = self.base / f"swapctl-test-{uuid.uuid4().hex[:8]}"
        try:
            self.dir.mkdir()
        except OSError as exc:
            pytest.skip(f"this user may not make a memory cgroup here (run as root, or with a delegated cgroup): {exc}")
        (self.dir / self.limit_file).write_text(str(limit_bytes))
        self.path = "/" + self.dir.name  # as /proc/PID/cgroup names it

    def put(self, pid: int) -> None:
        (self.dir / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for pid in (self.dir / "cgroup.procs").read_text().split():
            try:
                (self.base / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # gone meanwhile
        self.dir.rmdir()


@pytest.fixture
def cg_factory():
    made: list[Cg] = []

    def make(limit_bytes: int) -> Cg:
        made.append(Cg(limit_bytes))
        return made[-1]

    yield make
    for c in made:
        c.remove()


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def cgroup_of(pid: int) -> str:
    """The memory cgroup path of `pid`, as the kernel names it (v1's memory line, else v2's)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    v1 = [line.split(":", 2)[2] for line in lines if "memory" in line.split(":")[1].split(",")]
    return v1[0] if v1 else next(line.split(":", 2)[2] for line in lines if line.startswith("0::"))


def status_json(box) -> dict:
    r = swapctl("status", "lab", "--json", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["hosts"]["lab"]


def test_status_shows_the_daemons_cgroup_limit_beside_memavailable(box, prover, cg_factory):
    cg = cg_factory(256 * MIB)
    pid = box.start_by_hand(prover, prover_config(memory_mib=16))
    cg.put(pid)
    st = status_json(box)
    mine = st["cgroups"]["by_pid"][str(pid)]
    assert mine["path"] == cg.path and mine["levels"][0]["max_kib"] == 256 * 1024
    assert mine["levels"][0]["current_kib"] is not None
    r = swapctl("status", "lab", "-p", str(box.playbook_path))
    assert f"cgroup: the daemon's {cg.path}" in r.stdout and "limit 256.0 MiB" in r.stdout, r.stdout


def test_memory_wait_waits_for_the_cgroups_room_not_the_hosts_memavailable(tmp_path, prover, prover_b, cg_factory):
    """The new daemon starts in the swap script's cgroup (its sshd's here, as a container's): with 300 MiB
    there and 0.5 GiB asked for, the wait never ends, whatever the host's MemAvailable says; the plan said so."""
    cg = cg_factory(300 * MIB)
    with own_box(tmp_path) as box:
        cg.put(box.server.proc.pid)  # every session forks from it: the status and swap scripts run in it
        box.write_playbook(memory={"min_available_gib": 0.5, "release_timeout_s": 2})
        box.start_by_hand(prover)
        free = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                        if line.startswith("MemAvailable:")))
        assert free > MIB, "the host itself has the memory: only the cgroup lacks it"
        r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path))
        assert r.returncode == 5, r.stderr
        assert "memory not back" in r.stderr and "its cgroup's room 0.3 GiB" in r.stderr, r.stderr
        assert box.daemons() == []  # stopped, and the new build never started into a cgroup it would not fit
        # the plan says so before anything changes
        plan = swapctl("deploy", "lab", "--binary", str(prover_b), "--dry-run", "-p", str(box.playbook_path))
        assert "it never will" in plan.stdout + plan.stderr and f"cgroup {cg.path}" in plan.stdout + plan.stderr


def test_new_daemon_runs_in_the_swap_scripts_cgroup_and_the_wait_passes_with_room(tmp_path, prover, prover_b,
                                                                                   cg_factory):
    cg = cg_factory(2048 * MIB)
    with own_box(tmp_path) as box:
        cg.put(box.server.proc.pid)
        box.write_playbook(memory={"min_available_gib": 0.5, "release_timeout_s": 10})
        box.start_by_hand(prover)
        r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path))
        assert r.returncode == 0, r.stderr
        assert cgroup_of(box.one_daemon()) == cg.path
        assert "MemAvailable (" in r.stderr and "the cgroup's room (2.0 GiB)" in r.stderr, r.stderr  # both numbers


def test_preflight_warns_of_an_auto_budget_inside_a_cgroup_below_memtotal(tmp_path, prover, prover_b, cg_factory):
    """A container's 512 MiB, and a config that leaves cuzk to size its budget from MemTotal (the host's)."""
    cg = cg_factory(512 * MIB)
    with own_box(tmp_path) as box:
        cg.put(box.server.proc.pid)
        box.write_playbook(memory={"min_available_gib": 0.1})
        box.start_by_hand(prover, prover_config() + '\n[memory]\ntotal_budget = "auto"\n')
        plan = swapctl("deploy", "lab", "--binary", str(prover_b), "--dry-run", "-p", str(box.playbook_path))
        said = plan.stdout + plan.stderr
        assert plan.returncode == 0, said
        assert f'{box.config} says total_budget = "auto" under [memory]' in said, said
        assert "cgroup, whose limit is 512 MiB" in said and "memory.rs:83-91" in said, said
        assert "limit 512 MiB" in said and "MemAvailable (" in said  # both numbers
        # a budget set by hand is what the warning asks for: no warning then
        box.config.write_text(prover_config() + '\n[memory]\ntotal_budget = "400MiB"\n')
        plan = swapctl("deploy", "lab", "--binary", str(prover_b), "--dry-run", "-p", str(box.playbook_path))
        assert "total_budget" not in plan.stdout + plan.stderr


def test_status_and_preflight_flag_a_daemon_listening_on_every_address(box, prover, prover_b):
    port = free_port()
    box.start_by_hand(prover, args=["--config", str(box.config), "--listen", f"0.0.0.0:{port}"])
    box.write_playbook(daemon={"args": ["--config", str(box.config), "--listen", f"0.0.0.0:{port}"]})
    r = swapctl("status", "lab", "-p", str(box.playbook_path))
    assert f"the daemon listens on 0.0.0.0:{port} (every address)" in r.stdout and "127.0.0.1" in r.stdout, r.stdout
    plan = swapctl("deploy", "lab", "--binary", str(prover_b), "--dry-run", "-p", str(box.playbook_path))
    assert f"0.0.0.0:{port} (every address)" in plan.stdout + plan.stderr


def test_a_daemon_on_loopback_is_not_flagged(box, prover):
    port = free_port()
    box.start_by_hand(prover, args=["--config", str(box.config), "--listen", f"127.0.0.1:{port}"])
    st = status_json(box)
    assert [s["address"] for s in st["listening"]] == [f"127.0.0.1:{port}"]
    r = swapctl("status", "lab", "-p", str(box.playbook_path))
    assert "listens on" not in r.stdout


# ---- the host functions on a cgroup tree of hostile files, and the parsers on hostile text ---------------


def run_cg(tree: Path, script: str) -> str:
    lib = scripts.load("cgroup.sh").body
    out = subprocess.run(["sh", "-c", f"{lib}\ncg_root={tree}\n{script}"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    return out.stdout


@pytest.mark.parametrize("value, limit", [
    ("max\n", "-"), ("9223372036854771712\n", "-"), ("garbage\n", "-"), ("", "-"), ("-5\n", "-"),
    ("1" * 40 + "\n", "-"), ("1073741824\n", "1048576"),
])
def test_cg_walk_reads_what_is_no_number_as_no_limit(tmp_path, value, limit):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    (tmp_path / "a" / "b" / "memory.max").write_text(value)
    (tmp_path / "a" / "b" / "memory.current").write_text("garbage")  # and no files at all in a/
    got = run_cg(tmp_path, f'CG_V=v2; CG_BASE={tmp_path}; cg_at /a/b/gone; cg_walk 1; echo "$CG_LIMIT $CG_ROOM"')
    assert got.splitlines()[-1] == f"{limit} {limit}"
    assert got.splitlines()[0] == f"mem /a/b {limit} -"  # the nearest cgroup that exists


def test_cg_at_refuses_a_path_no_cgroup_has(tmp_path):
    got = run_cg(tmp_path, f'CG_BASE={tmp_path}; for p in "/a/../b" "/a b" "rel" "/a\nb"; do '
                           'cg_at "$p" && echo "took $p"; done; echo end')
    assert got == "end\n"


def test_parsers_take_hostile_text_without_a_traceback():
    junk = "\n".join(["self x v2 /a", "proc 1 v3 /a", "proc 2 v2 a", "mem /a nan 5", "events", "proc 3 -",
                      "self 4 v2 /s", "mem /s 100 999", "mem / - -", "events /s 7 x", "\x00\xff", "==> cgroup",
                      "proc \u00b2 v2 /forged"])  # a cgroup name with a newline can forge a line; "²".isdigit()
    got = cgroup.parse_cgroups(junk)
    assert got.own is not None and got.own.limit_kib == 100 and got.own.room_kib() == 0
    assert got.own.oom == 7 and got.own.oom_kill is None and got.by_pid == {}
    assert exposure.parse_listen("1 0100007F:ZZZZ\n2 00000000:2654\nx y\n3 0100007F\n") == (
        exposure.Listening(2, "0.0.0.0:9812"),)
    configs = exposure.parse_configs('file 7 /c.toml\n  #read\n  [daemon]\n  listen = "0.0.0.0:1" # x\n'
                                     '  [memory]\n  total_budget=12\nfile - \nfile x /y\n  listen = "z"\n')
    assert configs[0] == exposure.DaemonConfig(pid=7, path="/c.toml", found=True, listen="0.0.0.0:1",
                                               total_budget="12")
    assert configs[1].pid is None and not configs[1].found and configs[1].budget_auto


@pytest.mark.parametrize("address, public", [
    ("0.0.0.0:9820", True), ("[::]:9820", True), (":9820", True), ("10.0.0.5:9820", True), ("cuzk.lan:1", True),
    ("127.0.0.1:9820", False), ("127.3.4.5:1", False), ("[::1]:9820", False), ("[::ffff:127.0.0.1]:1", False),
    ("localhost:9820", False), ("unix:///run/cuzk.sock", False),
])
def test_which_addresses_are_public(address, public):
    assert exposure.is_public(address) is public


def test_room_counts_what_the_old_daemon_frees_only_where_it_is_held():
    levels = (cgroup.Level("/c/s", None, 10), cgroup.Level("/c", 1000, 900), cgroup.Level("/", None, None))
    cg = cgroup.Cgroup("v2", "/c/s", levels)
    assert cg.room_kib() == 100
    assert cg.room_kib(freed_kib=600, freed_from="/c/daemon") == 700
    assert cg.room_kib(freed_kib=600, freed_from="/elsewhere") == 100


def test_a_recorded_status_reads_the_daemons_v1_cgroup_and_its_config():
    """tests/data/transcripts/host/status.txt, as status.sh printed it on this lab's kernel (cgroup v1)."""
    from test_host_scripts import DAEMON, DATA

    from swapctl.facts import status

    st = status.parse_status("lab", (DATA / "status.txt").read_text(), DAEMON, status.df_paths(DAEMON))
    cg = st.daemon_cgroup
    assert cg is not None and cg.version == "v1" and cg.path == st.cgroups.own.path
    assert cg.limit_kib is None and cg.current_kib and cg.oom_kill == 0 and cg.levels[-1].path == "/"
    assert st.config_of(st.daemons[0].pid) == exposure.DaemonConfig(pid=st.daemons[0].pid, path="/data/zk/cuzk.toml",
                                                                     found=False)
    assert st.daemon_listening == ()


@pytest.fixture
def ubox(systemd_host, tmp_path):
    """A unit of its own on the systemd host (tests/test_systemd.py's UnitBox)."""
    box = UnitBox(systemd_host, "cgmax" + uuid.uuid4().hex[:6], tmp_path)
    yield box
    box.close()


def test_a_stopped_units_memorymax_is_the_new_daemons_limit_in_the_plan(ubox, prover, prover_b):
    """systemd on the lab's systemd host accepts MemoryMax= but has no memory controller to enforce it with
    (../shared/systemd-lab.md): what is read here is systemd's word for the limit, as the plan gives it."""
    ubox.install(prover, drop_in="[Service]\nMemoryMax=256M\n")
    ubox.write_playbook(unit=ubox.unit)
    ubox.host.sh(f"systemctl stop {ubox.unit}")
    doc = json.loads(swapctl("status", "lab", "--json", "-p", str(ubox.playbook_path)).stdout)
    assert doc["hosts"]["lab"]["unit"]["memory_max_kib"] == 256 * 1024
    plan = swapctl("deploy", "lab", "--binary", str(prover_b), "--dry-run", "-p", str(ubox.playbook_path))
    said = " ".join((plan.stdout + plan.stderr).split())
    assert plan.returncode == 0, said
    assert f"cgroup unit {ubox.unit}'s (MemoryMax), limit 256 MiB" in said and "it never will" in said, said


def test_a_real_v2_report_gives_the_least_limit_and_its_room():
    """cg_report as it printed on a pure cgroup v2 host (tests/data/cgroup/README.md): 300 MiB in a 128 GiB parent."""
    got = cgroup.parse_cgroups((Path(__file__).parent / "data" / "cgroup" / "v2-h100.txt").read_text())
    assert got.own is not None and got.own.version == "v2" and got.own.path == "/process_api/swt559"
    # the host printed room=306444 a moment later, when the shell held more
    assert got.own.limit_kib == 307200 and got.own.room_kib() == 307200 - 768
    assert [lv.max_kib for lv in got.own.levels] == [307200, 134217728, None] and got.own.oom_kill == 0
