"""The swap as an Ansible collection (swapctl.cuzk): built and installed as a farm would, run by the real
ansible-core against namespace hosts with their own sshd, each running the stand-in prover."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from loadgen import LoadGen

from lab import NetnsLab, prover_config, swapctl, wait_until
from test_deploy import sha

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # ansible-core from the test extra, beside this Python
HOSTS = 8  # the farm; serial 2 makes four batches
FEW = 4  # the tests that need no batches after a failure run on these
DAEMON = "'^(\\./|/data/)cuzk '"  # started by hand (./cuzk) or by the module (/data/cuzk)
SECRET = "tok-5f0c1d9e-never-shown"
FARM = "ansible_collections/swapctl/cuzk/playbooks/farm.yml"


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> Path:
    """The collection as a farm gets it: scripts/build_collection.py's tarball, `ansible-galaxy collection
    install`ed into a path of its own; returns that path (ANSIBLE_COLLECTIONS_PATH)."""
    base = tmp_path_factory.mktemp("collection")
    r = subprocess.run([sys.executable, "scripts/build_collection.py", "--output", str(base / "dist")], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    tarball = r.stdout.strip().splitlines()[-1]
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", tarball, "-p", str(base / "installed")],
                   capture_output=True, check=True)
    return base / "installed"


def ansible_env(collection: Path, home: Path) -> dict:
    return {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collection), "ANSIBLE_NOCOWS": "1",
            "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_LOCAL_TEMP": str(home / "tmp"), "ANSIBLE_HOME": str(home), "ANSIBLE_PIPELINING": "1"}


def test_the_collection_builds_and_ansible_doc_shows_its_three_modules(collection, tmp_path):
    env = ansible_env(collection, tmp_path)
    listed = subprocess.run([str(BIN / "ansible-doc"), "-l", "swapctl.cuzk"], env=env, capture_output=True,
                            text=True, check=True).stdout
    assert {line.split()[0] for line in listed.splitlines()} == {"swapctl.cuzk.swap", "swapctl.cuzk.rollback",
                                                                   "swapctl.cuzk.status"}
    doc = json.loads(subprocess.run([str(BIN / "ansible-doc"), "--json", "swapctl.cuzk.swap"], env=env,
                                    capture_output=True, text=True, check=True).stdout)["swapctl.cuzk.swap"]
    assert doc["doc"]["options"]["daemon"]["suboptions"]["secret_env"]  # the playbook's names, from the fragment
    assert "rolled_back" in doc["return"] and "swapctl.cuzk.swap" in doc["examples"]
    shipped = collection / "ansible_collections/swapctl/cuzk/plugins/module_utils/swapctl/host/sh_texts.py"
    assert "swap.sh" in shipped.read_text()  # the host scripts travel inside the module's Python


CORDON = ('stop = "cordon"\nstatus_url = "http://127.0.0.1:9821/status"\nready = "proof"\n'
          '[curio]\nnodes = ["10.0.0.5:12300"]\npoll_s = 5\nenv = {CURIO_DB_PASSWORD = "pw"}\n')


@pytest.mark.parametrize("more", ["", CORDON])
def test_the_modules_swap_script_inputs_are_swapctl_deploys(collection, more):
    """Both sides call one swap core (swap/inputs.py), so the module gives swap.sh the inputs `swapctl deploy`
    gives it, valued alike, Curio's cordon included (issue 46: the module had restated them, and drifted)."""
    sys.path.insert(0, str(collection))
    try:
        from ansible_collections.swapctl.cuzk.plugins.module_utils import engine
    finally:
        sys.path.remove(str(collection))
    from dataclasses import replace

    from swapctl import playbook as pb
    from swapctl.facts.releases import Release
    from swapctl.remote.cmd import Secret
    from swapctl.swap import swaprun
    from swapctl.swap.context import Context
    from swapctl.swap.plan import Daemon

    book = pb.parse('[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\nready_port = 9820\nstop_grace_s = 7\n'
                    'ready_stable_s = 2.5\n' + more.split("[curio]")[0] + '[memory]\nmin_available_gib = 1.5\n'
                    'release_timeout_s = 40\n[gpu]\nnvidia_smi_timeout_s = 3\n' + ("[curio]" + more.split("[curio]")[1]
                                                                              if more else ""))
    host = type("H", (), {"name": "gpu-0"})()
    ctx = Context(host, book, book.require_daemon())  # type: ignore[arg-type]
    new = Release(sha256="b" * 64, size=1, name="cuzk", created="2026", by="me", argv=("/data/cuzk", "-c", "x"),
                  cwd="/data", env=(("A", "1"),), uid=1000, gid=1000)
    old = Release(sha256="a" * 64, size=1, name="cuzk", created="2025", by="me", argv=("./cuzk", "-c", "x"),
                  cwd="/data", env=(("B", "2"),))
    running = replace(Daemon.started(4242), sha256="c" * 64)  # a daemon of a known build: a cordon is made
    theirs = dict(swaprun.swap_cmd(ctx, running, new, "0:100", old).inputs)
    cordon = {"stop": "cordon", "status_url": "http://127.0.0.1:9821/status", "ready": "proof"} if more else {}
    s = engine.Settings.of({"daemon": {"binary": "/data/cuzk", "log": "/data/cuzk.log", "ready_port": 9820,
                                       "stop_grace_s": 7, "ready_stable_s": 2.5, **cordon},
                            "memory": {"min_available_gib": 1.5, "release_timeout_s": 40},
                            "gpu": {"nvidia_smi_timeout_s": 3}, "host": "gpu-0",
                            "curio": {"nodes": ["10.0.0.5:12300"], "poll_s": 5, "env": {"CURIO_DB_PASSWORD": "pw"}}
                            if more else {}})
    ours = engine.swap_inputs(s, engine.Daemon(pid=4242, sha256="c" * 64), engine.Release(**new.__dict__), "0:100",
                              engine.Release(**old.__dict__))

    def plain(d: dict) -> dict:
        return {k: v.value if isinstance(v, (Secret, engine.Secret)) else str(v) for k, v in d.items()}

    # the one difference: the journal line's `by` says the module wrote it (swapctl's own: user@host)
    assert plain(ours) == {**plain(theirs), "j_by": f"ansible {theirs['j_by']}"}
    assert (plain(ours)["cordon_nodes"] == "10.0.0.5:12300") == bool(more)
    assert plain(ours)["curio_env"] == ("CURIO_DB_PASSWORD=pw\n" if more else "")


@pytest.mark.parametrize(("daemon", "toml"), [
    ({}, ""),  # no command of its own: the running daemon's, carried
    ({"args": ["--config", "/etc/cuzk.toml"], "cwd": "/srv", "env": {"RUST_LOG": "info", "LD_PRELOAD": "/x.so"}},
     'args = ["--config", "/etc/cuzk.toml"]\ncwd = "/srv"\nenv = { RUST_LOG = "info", LD_PRELOAD = "/x.so" }\n'),
    ({"user": "nobody", "keep_loader_env": ["LD_PRELOAD"]}, 'user = "nobody"\nkeep_loader_env = ["LD_PRELOAD"]\n'),
], ids=["as-it-runs", "args-cwd-env", "user"])
@pytest.mark.parametrize("runs", ["daemon", "release", "nothing"])
def test_the_module_starts_a_new_build_and_a_release_with_no_record_as_deploy_does(collection, daemon, toml, runs):
    """One swap core (swap/command.py): a new build's command line, cwd, environment and user, a release with no
    record of its own, and the swap script's command line are the controller's on the module's side too. The
    module had restated them (plan.new_release, plan.as_configured) and drifted: a release with no record got
    the default environment there and the running daemon's here."""
    sys.path.insert(0, str(collection))
    try:
        from ansible_collections.swapctl.cuzk.plugins.module_utils import engine, plan, situation
    finally:
        sys.path.remove(str(collection))
    import pwd
    from dataclasses import replace
    from types import SimpleNamespace

    from swapctl import playbook as pb
    from swapctl.facts.releases import Release
    from swapctl.swap import preflight, swaprun
    from swapctl.swap.context import Context
    from swapctl.swap.plan import Daemon

    book = pb.parse('[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\n' + toml, "p.toml")
    ctx = Context(type("H", (), {"name": "gpu-0"})(), book, book.require_daemon())  # type: ignore[arg-type]
    env = (("PATH", "/opt/bin"), ("LD_PRELOAD", "/evil.so"), ("CUZK_GPUS", "0,1"))
    ran = dict(argv=("/data/cuzk", "-c", "/data/cuzk.toml"), cwd="/data", env=env, uid=1000, gid=1000)
    old = Release(sha256="a" * 64, size=1, name="cuzk", created="2025", by="me", **ran)
    theirs_daemon = replace(Daemon.started(4242), sha256="c" * 64, **ran) if runs == "daemon" else None
    ours_daemon = engine.Daemon(pid=4242, sha256="c" * 64, **ran) if runs == "daemon" else None
    releases = {old.id: old} if runs == "release" else {}
    nobody = pwd.getpwnam("nobody")
    status = SimpleNamespace(daemon_user=(nobody.pw_uid, nobody.pw_gid) if daemon.get("user") else None, unit=None)
    theirs_sit = SimpleNamespace(daemon=theirs_daemon, releases=releases, current=old.id if releases else None,
                                 status=status, unit=None)
    ours_sit = situation.Situation(daemon=ours_daemon, current=old.id if releases else None, journal=(), to_save=(),
                                releases={k: engine.Release(**v.__dict__) for k, v in releases.items()})
    s = engine.Settings.of({"daemon": {"binary": "/data/cuzk", "log": "/data/cuzk.log", **daemon}, "host": "gpu-0"})

    def fields(r) -> tuple:
        return r.argv, r.cwd, r.env, r.uid, r.gid

    theirs = preflight.playbook_command(ctx, theirs_sit)  # type: ignore[arg-type]
    assert fields(plan.new_release(s, ours_sit, "b" * 64, 1)) == fields(theirs)
    bare = Release(sha256="d" * 64, size=1, name="cuzk", created="2024", by="me")  # saved from the disk
    cwdless = replace(bare, argv=("/data/cuzk",))
    for rel in (bare, cwdless, old):
        mine = plan.as_configured(s, ours_sit, engine.Release(**rel.__dict__))
        started = preflight.as_it_starts(ctx, theirs_sit, rel)  # type: ignore[arg-type]
        assert fields(mine) == fields(started), rel
        assert plan.command_for(s, mine) == swaprun.command_for(ctx, started)


def test_the_module_calls_the_daemon_what_swapctl_status_does(collection):
    """One rule (facts/daemon_rule.py), shipped: the module's and the CLI's (facts.status._the_daemon, with the
    host's facts as the status script reads them) agree on every process of one table: binaries in and beside
    the binary's directory and its releases, each user."""
    sys.path.insert(0, str(collection))
    try:
        from ansible_collections.swapctl.cuzk.plugins.module_utils import engine
    finally:
        sys.path.remove(str(collection))
    from swapctl.facts.status import _the_daemon
    from swapctl.facts.system import Process
    from swapctl.playbook import DaemonSpec

    exes = ["/data/cuzk", "/data/cuzk (deleted)", "/data/cuzk-timing", "/data/pub/cuzk", "/real/data/cuzk",
            "/data/.swapctl/cuzk/releases/abc/cuzk", "/real/data/.swapctl/cuzk/releases/abc/cuzk",
            "/data/.swapctl/other/releases/abc/cuzk", "/data/../tmp/cuzk", "/tmp/cuzk", "/cuzk", None]
    compared = 0
    for binary in ("/data/cuzk", "/cuzk"):
        for user, ids in (("", None), ("cuzk", (1000, 1000)), ("gone", None)):
            for owner, real_dir in (("0", ""), ("1000", "/real/data"), ("", "/data"), ("65534", "")):
                theirs = _the_daemon(DaemonSpec(binary=binary, log="/data/cuzk.log", user=user or None),
                                     {"binary-owner": owner, "binary-dir": real_dir}, ids)
                ours = engine.daemon_rule(binary, real_dir, int(owner) if owner else None, ids, bool(user))
                for exe in exes:
                    for uid in (0, 1000, 65534, None):
                        p = Process(pid=9, ppid=1, pgid=9, state="S", cpu_pct=0, rss_kib=1, elapsed_s=1, user="u",
                                    args=f"{binary} --config x", exe=exe, uid=uid, gid=uid)
                        assert ours(exe, uid) == theirs(p), (binary, user, owner, real_dir, exe, uid)
                        compared += theirs(p)
    assert compared  # the table holds daemons too, not only strangers
    assert engine.daemon_rule.__module__.endswith("module_utils.swapctl.facts.daemon_rule")  # no copy of its own


# -- the farm ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    lab = NetnsLab(tmp_path_factory.mktemp("afarm"), HOSTS, prefix="swa")
    try:
        lab.start()
        yield lab
    finally:
        for s in lab.servers:  # each namespace's init ignores SIGTERM: stop() would wait 10 s for each
            if s.proc:
                s.proc.kill()
        lab.close()


def running(server) -> list[str]:
    """sha256 of each daemon running on a namespace host, seen from inside it."""
    r = server.exec(f"for p in $(pgrep -f {DAEMON}); do sha256sum < /proc/$p/exe; done", check=False)
    return [line.split()[0] for line in r.stdout.splitlines()]


def journal(server) -> list[dict]:
    path = server.data / ".swapctl" / "cuzk" / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def inventory(farm, prover, tmp_path):
    """Every host runs build A, started by hand, with no swapctl state; the farm's inventory and group_vars,
    written by `swapctl export-ansible` from a swapctl playbook; returns the inventory's path."""
    for s in farm.servers:
        s.exec(f"pkill -9 -f {DAEMON}; rm -rf /data/.swapctl /data/cuzk /data/cuzk.new /data/cuzk.log; true",
               check=False)
        shutil.copy(prover, s.data / "cuzk")
        (s.data / "cuzk.toml").write_text(prover_config())
        s.exec("cd /data && setsid ./cuzk --config /data/cuzk.toml >> /data/cuzk.log 2>&1 < /dev/null &")
    for s in farm.servers:
        wait_until(lambda s=s: "ready" in (s.data / "cuzk.log").read_text(errors="replace"), what="ready")
    yield export(farm, tmp_path)
    for s in farm.servers:
        s.exec(f"pkill -9 -f {DAEMON}; true", check=False)


def export(farm, tmp_path, daemon: str = "") -> Path:
    """`swapctl export-ansible` of the farm's swapctl playbook (with `daemon`: more [daemon] lines) into
    tmp_path/ansible, as a farm's operator runs it; returns the inventory's path."""
    book = tmp_path / "farm.toml"
    book.write_text("".join(s.playbook(name=f"gpu-{i}") + "\n" for i, s in enumerate(farm.servers)) +
                    '[daemon]\nbinary = "/data/cuzk"\nargs = ["--config", "/data/cuzk.toml"]\nmatch = "/data/cuzk"\n'
                    'log = "/data/cuzk.log"\nready_timeout_s = 20\nstop_grace_s = 5\nsecret_env = ["CUZK_API_TOKEN"]\n'
                    f'{daemon}[daemon.env]\nCUZK_API_TOKEN = "{SECRET}"\nRUST_LOG = "info"\n\n[memory]\n'
                    "release_timeout_s = 20\n")
    r = swapctl("export-ansible", str(tmp_path / "ansible"), "-p", str(book))
    assert r.returncode == 0, r.stderr
    inv = tmp_path / "ansible" / "inventory.ini"
    inv.write_text(inv.read_text() + f"\n[cuzk:vars]\nansible_python_interpreter={shutil.which('python3')}\n")
    return inv


def play(collection, inventory, tmp_path, *extra: str, builds: dict[int, Path], sha256: dict[int, str],
         timeout: float = 240) -> subprocess.CompletedProcess:
    """ansible-playbook of the collection's farm play: host i gets builds[i] (its sha256: sha256[i])."""
    hostvars = tmp_path / "ansible" / "host_vars"
    hostvars.mkdir(exist_ok=True)
    for i, build in builds.items():
        (hostvars / f"gpu-{i}.yml").write_text(yaml.safe_dump({"swapctl_build": str(build),
                                                               "swapctl_build_sha256": sha256[i]}))
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), "-f", "8", "swapctl.cuzk.farm",
                           "-e", '{"swapctl_serial": 2}', "-v", *extra], env=ansible_env(collection, tmp_path),
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def test_farm_play_rolls_back_the_crashing_host_and_stops_as_max_fail_percentage_says(
        farm, inventory, collection, tmp_path, prover, prover_b, prover_crash):
    crash = 3  # in the second batch of two (gpu-2, gpu-3), after a first batch that went well
    builds = {i: prover_crash if i == crash else prover_b for i in range(HOSTS)}
    r = play(collection, inventory, tmp_path, builds=builds, sha256={i: sha(b) for i, b in builds.items()})
    assert r.returncode != 0, r.stdout[-3000:]
    assert re.search(r'fatal: \[gpu-3\]: FAILED! => \{.*?"rolled_back": true', r.stdout, re.S), r.stdout[-3000:]
    for i in (0, 1, 2):  # the first batch and the failed host's partner swapped
        assert running(farm.servers[i]) == [sha(prover_b)], i
        assert journal(farm.servers[i])[-1]["outcome"] == "deployed"
    assert running(farm.servers[crash]) == [sha(prover)]  # rolled back by the module: one daemon, build A
    line = journal(farm.servers[crash])[-1]
    assert line["action"] == "auto-rollback" and line["outcome"] == "rolled-back" and line["to"] == sha(prover)
    for s in farm.servers[4:]:  # max_fail_percentage 0: the batches after the failed one never start
        assert running(s) == [sha(prover)] and journal(s) == []


def test_check_mode_changes_nothing(farm, inventory, collection, tmp_path, prover, prover_b):
    before = [(s.data / "cuzk.log").stat().st_size for s in farm.servers]
    r = play(collection, inventory, tmp_path, "--check", "--diff", builds={i: prover_b for i in range(HOSTS)},
             sha256={i: sha(prover_b) for i in range(HOSTS)})
    assert r.returncode == 0, r.stdout[-3000:]
    assert r.stdout.count('"outcome": "dry-run"') == HOSTS and "--config /data/cuzk.toml" in r.stdout
    for s, size in zip(farm.servers, before, strict=True):
        assert running(s) == [sha(prover)] and journal(s) == []
        assert not (s.data / ".swapctl" / "cuzk" / "releases").exists() and not (s.data / "cuzk.new").exists()
        assert (s.data / "cuzk.log").stat().st_size == size and (s.data / "cuzk").is_file()


def test_check_mode_on_a_host_swapped_before_says_what_it_would_swap_and_changes_nothing(
        farm, inventory, collection, tmp_path, prover, prover_b):
    """farm.yml ran before, so /data/cuzk.new still holds build B; in check mode the copy of build A did not run:
    the dry run is the swap to A, not a sha256 mismatch, and the host is left as it was."""
    s = farm.servers[0]
    r = play(collection, inventory, tmp_path, "--limit", "gpu-0", builds={0: prover_b}, sha256={0: sha(prover_b)})
    assert r.returncode == 0, r.stdout[-3000:]
    before = journal(s)
    r = play(collection, inventory, tmp_path, "--check", "--limit", "gpu-0", builds={0: prover},
             sha256={0: sha(prover)})
    assert r.returncode == 0, r.stdout[-3000:]
    assert '"outcome": "dry-run"' in r.stdout and "not the build meant" not in r.stdout
    assert re.search(rf'"to": "{sha(prover)[:12]}"', r.stdout), r.stdout[-3000:]
    assert "in check mode the copy before this task did not run" in r.stdout + r.stderr  # said, as a warning
    assert running(s) == [sha(prover_b)] and journal(s) == before and sha(s.data / "cuzk.new") == sha(prover_b)


def test_export_ansibles_drain_settings_run_unchanged_and_the_farm_play_drains_losing_no_proof(
        farm, inventory, collection, tmp_path, prover, prover_b):
    """A farm whose playbook says stop = "drain" (export-ansible writes status_url, stop, drain_timeout_s into
    swapctl_daemon): the module takes them and swap.sh drains before the stop, as `swapctl deploy` does
    (test_drain.py); Curio's proof in flight when the play starts is finished, not lost."""
    s, port, status = farm.servers[0], 9820, 9821  # each namespace host has ports of its own
    s.exec(f"pkill -9 -f {DAEMON}; true", check=False)
    wait_until(lambda: not daemons(s), what="the daemon gone")
    (s.data / "cuzk.toml").write_text(
        prover_config(memory_mib=8, jobs=0, partitions=3, partition_mib=1, synth_ms=300, gpu_ms=150) +
        f'listen = "{s.address}:{port}"\nstatus_listen = "127.0.0.1:{status}"\nsrs_load_ms = 100\n')
    s.exec("cd /data && setsid ./cuzk --config /data/cuzk.toml >> /data/cuzk.log 2>&1 < /dev/null &")
    url = f"http://127.0.0.1:{status}/status"
    wait_until(lambda: s.exec(f"python3 -c 'import urllib.request as u; u.urlopen(\"{url}\", timeout=2)'",
                              check=False).returncode == 0, what="the status endpoint")
    inv = export(farm, tmp_path, f'status_url = "{url}"\nstop = "drain"\ndrain_timeout_s = 30\n')
    gen = LoadGen(f"{s.address}:{port}", 1, gap_s=3).start()  # Curio: a proof, then a pause for the next task
    try:
        wait_until(lambda: any(j.started for j in gen.jobs), what="a proof to start")
        r = play(collection, inv, tmp_path, "--limit", "gpu-0", builds={0: prover_b}, sha256={0: sha(prover_b)})
        assert r.returncode == 0, r.stdout[-3000:]
        gen.wait_done(gen.counts()["done"] + 1)  # the new build proves what comes next
    finally:
        gen.stop()
    counts = gen.counts()
    assert counts["lost"] == 0 and counts["failed"] == 0 and counts["done"] >= 2, counts
    line = journal(s)[-1]
    assert line["outcome"] == "deployed" and line["lost"] == 0 and line["in_flight_at_stop"] == []
    assert line["drain_s"] >= 0 and '"drain_s": ' in r.stdout  # the module's result shows the drain too
    assert "received SIGINT, shutting down" in (s.data / "cuzk.log").read_text(errors="replace")
    assert running(s) == [sha(prover_b)]


def test_a_secret_never_shows_in_ansibles_output_or_the_hosts_command_lines(
        farm, inventory, collection, tmp_path, prover_b):
    seen: set[str] = set()
    done = threading.Event()

    def read_cmdlines() -> None:  # any user of a host can read every process's argv
        while not done.is_set():
            for p in Path("/proc").iterdir():
                try:
                    seen.add((p / "cmdline").read_bytes().decode(errors="replace"))
                except OSError:
                    pass

    reader = threading.Thread(target=read_cmdlines)
    reader.start()
    try:
        r = play(collection, inventory, tmp_path, "--diff", "-vvv", "--limit", ",".join(f"gpu-{i}" for i in range(FEW)),
                 builds={i: prover_b for i in range(FEW)}, sha256={i: sha(prover_b) for i in range(FEW)})
    finally:
        done.set()
        reader.join()
    assert r.returncode == 0, r.stdout[-3000:]
    assert SECRET not in r.stdout + r.stderr and "CUZK_API_TOKEN=***" in r.stdout  # the diff names it, masked
    assert not [c for c in seen if SECRET in c]
    assert any("swapctl-swap" in c for c in seen)  # the reader saw the swap scripts run
    for s in farm.servers[:FEW]:  # and the daemon got it
        pid = s.exec(f"pgrep -f {DAEMON}").stdout.split()[0]
        assert SECRET in s.exec(f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout


def test_the_farm_plays_proof_gate_counts_only_proofs_that_passed_their_self_check(
        farm, inventory, collection, tmp_path, prover_selfcheck):
    """cuzk logs `proof assembled` for every proof (engine.rs:506-512) before its self-check (:515-634): a
    gate counting that line passed a canary whose every proof was rejected. The status module counts
    `self-check PASSED` (engine.rs:529), so the play stops at the gate on that host, its proofs 0."""
    r = play(collection, inventory, tmp_path, "--limit", "gpu-0", "-e", '{"swapctl_proof_wait_s": 8}',
             builds={0: prover_selfcheck}, sha256={0: sha(prover_selfcheck)})
    assert r.returncode != 0, r.stdout[-3000:]
    gate = r.stdout.split("TASK [The new build made proofs", 1)[1].split("TASK [", 1)[0]  # that task's output
    assert "fatal: [gpu-0]: FAILED!" in gate, r.stdout[-3000:]
    log = farm.servers[0].exec("cat /data/cuzk.log").stdout.rsplit("cuzk-daemon starting", 1)[1]  # since its start
    assert "build=selfcheck" in log.replace("\x1b[0m", "").replace("\x1b[2m", "").splitlines()[0]
    assert "proof assembled" in log and "self-check FAILED" in log and "self-check PASSED" not in log
    assert re.search(r'"proofs": 0\b', gate), gate[-3000:]


def test_rollback_module_goes_back_to_what_ran_before_and_status_says_so(
        farm, inventory, collection, tmp_path, prover, prover_b):
    r = play(collection, inventory, tmp_path, "--limit", "gpu-0", builds={0: prover_b}, sha256={0: sha(prover_b)})
    assert r.returncode == 0, r.stdout[-3000:]
    env = ansible_env(collection, tmp_path)
    daemon = json.dumps({"daemon": {"binary": "/data/cuzk", "log": "/data/cuzk.log", "ready_timeout_s": 20,
                                    "stop_grace_s": 5}, "host": "gpu-0"})

    def adhoc(module: str) -> dict:
        out = subprocess.run([str(BIN / "ansible"), "-i", str(inventory), "gpu-0", "-m", module, "-a", daemon,
                              "-o"], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert out.returncode == 0, out.stdout[-2000:]
        return json.loads(out.stdout.split("=> ", 1)[1])

    facts = adhoc("swapctl.cuzk.status")["ansible_facts"]["swapctl_status"]
    assert facts["daemon"]["release"] == sha(prover_b)[:12] and facts["rollback_to"] == sha(prover)[:12]
    assert facts["daemon"]["since_start"]["proofs"] >= 1  # what the farm play waited for
    back = adhoc("swapctl.cuzk.rollback")
    assert back["changed"] and back["release"] == {"from": sha(prover_b)[:12], "to": sha(prover)[:12]}
    assert running(farm.servers[0]) == [sha(prover)]
    assert journal(farm.servers[0])[-1]["action"] == "rollback" and journal(farm.servers[0])[-1]["outcome"] == \
        "rolled-back"


def daemons(server) -> list[dict]:
    """Each process on a namespace host whose command line is the daemon's: pid, uid, cwd, sha256, argv."""
    r = server.exec(f"for p in $(pgrep -f {DAEMON}); do printf '%s\\t%s\\t%s\\t%s\\t' \"$p\" "
                    "\"$(awk '/^Uid:/{print $3}' /proc/$p/status)\" \"$(readlink /proc/$p/cwd)\" "
                    "\"$(sha256sum < /proc/$p/exe | cut -d' ' -f1)\"; tr '\\0' ' ' < /proc/$p/cmdline; echo; done",
                    check=False)
    rows = [line.split("\t") for line in r.stdout.splitlines() if line.count("\t") == 4]
    return [{"pid": int(p), "uid": int(u), "cwd": c, "sha256": h, "argv": a.strip()} for p, u, c, h, a in rows]


def roots(server) -> list[dict]:
    return [d for d in daemons(server) if d["uid"] == 0]


@pytest.fixture
def look_alike(farm, prover):
    """On gpu-0, `nobody` runs its own copy of the prover from its own directory beside the binary, as
    `exec -a /data/cuzk` with a config of its own (issue 45, item 3); yields its pid on the host."""
    s = farm.servers[0]
    pub = s.data / "pub"
    pub.mkdir()
    shutil.copy(prover, pub / "cuzk")
    (pub / "evil.toml").write_text(prover_config())
    for path in (pub, pub / "cuzk", pub / "evil.toml"):
        os.chown(path, 65534, 65534)
    os.chmod(s.data, 0o755)
    s.exec("cd /data/pub && setsid setpriv --reuid=65534 --regid=65534 --clear-groups bash -c "
           "'exec -a /data/cuzk /data/pub/cuzk --config /data/pub/evil.toml' >/dev/null 2>&1 </dev/null &")
    wait_until(lambda: [d for d in daemons(s) if d["uid"] == 65534], what="nobody's look-alike")
    [fake] = [d["pid"] for d in daemons(s) if d["uid"] == 65534]
    yield fake
    s.exec(f"kill -9 {fake}; rm -rf /data/pub", check=False)


def test_another_users_look_alike_neither_blocks_the_swap_nor_is_touched(
        farm, inventory, collection, tmp_path, prover, prover_b, look_alike):
    r = play(collection, inventory, tmp_path, "--limit", "gpu-0", builds={0: prover_b}, sha256={0: sha(prover_b)})
    assert r.returncode == 0, r.stdout[-3000:]
    assert [d["sha256"] for d in roots(farm.servers[0])] == [sha(prover_b)]
    assert [d["pid"] for d in daemons(farm.servers[0]) if d["uid"] == 65534] == [look_alike]


def test_with_the_daemon_down_another_users_look_alike_is_not_adopted(
        farm, inventory, collection, tmp_path, prover, prover_b, look_alike):
    s = farm.servers[0]
    s.exec("pkill -9 -u 0 -f '^\\./cuzk '")  # the daemon started by hand is gone; nobody's runs on
    wait_until(lambda: not roots(s), what="the daemon gone")
    r = play(collection, inventory, tmp_path, "--limit", "gpu-0", builds={0: prover_b}, sha256={0: sha(prover_b)})
    assert r.returncode == 0, r.stdout[-3000:]
    [new] = roots(s)  # started as root with the module's own settings, not nobody's uid, config or cwd
    assert (new["sha256"], new["argv"], new["cwd"]) == (sha(prover_b), "/data/cuzk --config /data/cuzk.toml", "/data")
    assert [d["pid"] for d in daemons(s) if d["uid"] == 65534] == [look_alike]
    assert not [m for m in (s.data / ".swapctl/cuzk/releases").glob("*/manifest.json")
                if json.loads(m.read_text())["source"] == "adopted"]


def test_a_fallback_with_no_recorded_command_line_starts_with_the_modules_args_and_cwd(
        farm, inventory, collection, tmp_path, prover, prover_crash):
    s = farm.servers[0]
    s.exec("pkill -9 -f '^\\./cuzk '")  # no daemon: the build on disk is saved with no command line
    wait_until(lambda: not daemons(s), what="the daemon gone")
    r = play(collection, inventory, tmp_path, "--limit", "gpu-0", builds={0: prover_crash},
             sha256={0: sha(prover_crash)})
    assert r.returncode != 0 and '"rolled_back": true' in r.stdout, r.stdout[-3000:]
    [back] = daemons(s)  # the build on disk again, started as a deploy starts one: never bare, never in /
    assert (back["sha256"], back["argv"], back["cwd"]) == (sha(prover), "/data/cuzk --config /data/cuzk.toml", "/data")
    assert "RUST_LOG=info" in s.exec(f"tr '\\0' '\\n' < /proc/{back['pid']}/environ").stdout
    manifest = json.loads((s.data / ".swapctl/cuzk/releases" / sha(prover)[:12] / "manifest.json").read_text())
    assert (manifest["source"], manifest["argv"], manifest["cwd"]) == (
        "disk", ["/data/cuzk", "--config", "/data/cuzk.toml"], "/data")  # what it was started with, recorded


def test_a_rollback_to_a_release_with_no_recorded_command_line_starts_it_with_the_modules_settings(
        farm, inventory, collection, tmp_path, prover, prover_b):
    s = farm.servers[0]
    r = play(collection, inventory, tmp_path, "--limit", "gpu-0", builds={0: prover_b}, sha256={0: sha(prover_b)})
    assert r.returncode == 0, r.stdout[-3000:]
    path = s.data / ".swapctl/cuzk/releases" / sha(prover)[:12] / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "argv": None, "cwd": None, "env": None}))
    daemon = json.dumps({"daemon": {"binary": "/data/cuzk", "log": "/data/cuzk.log", "ready_timeout_s": 20,
                                    "stop_grace_s": 5, "args": ["--config", "/data/cuzk.toml"],
                                    "env": {"RUST_LOG": "info"}}, "host": "gpu-0"})
    out = subprocess.run([str(BIN / "ansible"), "-i", str(inventory), "gpu-0", "-m", "swapctl.cuzk.rollback", "-a",
                          daemon, "-o"], env=ansible_env(collection, tmp_path), capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:]
    [back] = daemons(s)  # as a deploy starts a build: daemon.args, in the binary's directory
    assert (back["sha256"], back["argv"], back["cwd"]) == (sha(prover), "/data/cuzk --config /data/cuzk.toml", "/data")
    assert "RUST_LOG=info" in s.exec(f"tr '\\0' '\\n' < /proc/{back['pid']}/environ").stdout
    manifest = json.loads(path.read_text())
    assert (manifest["argv"], manifest["cwd"]) == (["/data/cuzk", "--config", "/data/cuzk.toml"], "/data")


def test_export_ansible_writes_the_playbooks_hosts_and_daemon_as_inventory_and_group_vars(tmp_path):
    book = tmp_path / "swapctl.toml"
    book.write_text('[hosts.gpu-a]\naddress = "10.0.0.5"\nport = 2222\nuser = "ops"\nidentity_file = "~/.ssh/k"\n'
                    'become = "sudo"\n[hosts.gpu-b]\naddress = "10.0.0.6"\nhost_key_policy = "accept-new"\n'
                    '[groups]\n"rack-1" = ["gpu-a"]\n[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\n'
                    'args = ["--config", "/data/cuzk.toml"]\nready_timeout_s = 300\nsecret_env = ["KEY"]\n'
                    'user = "cuzk"\n'
                    '[daemon.env]\nKEY = "s3cret"\nRUST_LOG = "debug"\n[memory]\nmin_available_gib = 64\n'
                    '[rollout]\ncanary = 1\nparallel = 4\nmax_fail = "10%"\n')
    r = swapctl("export-ansible", str(tmp_path / "out"), "-p", str(book))
    assert r.returncode == 0, r.stderr
    inv = (tmp_path / "out" / "inventory.ini").read_text()
    assert "StrictHostKeyChecking=accept-new" in inv and "[rack_1]\ngpu-a" in inv
    gv = yaml.safe_load((tmp_path / "out/group_vars/cuzk/swapctl.yml").read_text())
    assert gv["swapctl_daemon"] == {"binary": "/data/cuzk", "args": ["--config", "/data/cuzk.toml"],
                                    "log": "/data/cuzk.log", "ready_timeout_s": 300, "env": {"RUST_LOG": "debug"},
                                    "user": "cuzk"}  # every key the swap module takes (test_ansible_settings.py)
    assert gv["swapctl_memory"]["min_available_gib"] == 64 and gv["swapctl_serial"] == [1, 4]
    assert gv["swapctl_max_fail_percentage"] == 10
    secrets = tmp_path / "out/group_vars/cuzk/secrets.yml"
    assert yaml.safe_load(secrets.read_text()) == {"swapctl_daemon_secret_env": {"KEY": "s3cret"}}
    assert secrets.stat().st_mode & 0o077 == 0 and "s3cret" not in (tmp_path / "out/group_vars/cuzk/swapctl.yml"
                                                                    ).read_text()
    # Ansible itself reads it as one farm
    listed = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(tmp_path / "out/inventory.ini"), "--list"],
                            capture_output=True, text=True, check=True,
                            env={**os.environ, "ANSIBLE_HOME": str(tmp_path)})
    groups = json.loads(listed.stdout)
    assert groups["cuzk"]["hosts"] == ["gpu-a", "gpu-b"] and groups["rack_1"]["hosts"] == ["gpu-a"]
    a = groups["_meta"]["hostvars"]["gpu-a"]
    assert {k: v for k, v in a.items() if k.startswith("ansible_")} == {
        "ansible_host": "10.0.0.5", "ansible_port": 2222, "ansible_user": "ops",
        "ansible_ssh_private_key_file": "~/.ssh/k", "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes",
        "ansible_become": True, "ansible_become_method": "sudo"}


def test_export_ansible_refuses_a_playbook_without_hosts(tmp_path):
    book = tmp_path / "swapctl.toml"
    book.write_text('[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\n')
    r = swapctl("export-ansible", str(tmp_path / "out"), "-p", str(book))
    assert r.returncode == 2 and "no hosts to export" in r.stderr and not (tmp_path / "out").exists()
