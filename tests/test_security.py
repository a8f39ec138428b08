"""A shared GPU box (README, Security; issue 19, findings 1, 2, 4, 7 and 8's journal): another user of the
host, a real unprivileged one (`nobody`, or one made here with useradd), runs processes, reads every
process's command line and plants files; swapctl, acting as root, gives them nothing.

The real sshd host of the lab; a box whose data directory others can reach (`open_box`) where another
user must run something from it."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from swapctl.playbook import parse

from conftest import Box
from lab import build_prover, prover_config, swapctl, wait_until
from test_deploy import deploy, exe_sha, sha

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]

# A library that, once loaded, writes who it runs as into the file $EVIL_LOG names (open to all)
EVIL = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {
    const char* log = getenv("EVIL_LOG");
    FILE* f = fopen(log ? log : "/var/tmp/swapctl-evil.log", "a");
    if (f) { fprintf(f, "uid=%d pid=%d\n", (int)getuid(), (int)getpid()); fclose(f); }
}
"""


@pytest.fixture(scope="module")
def shared_dir():
    """A directory every user of the machine can read (the lab's own is root's only): the hostile user's
    files, and boxes whose programs another user runs."""
    d = Path(tempfile.mkdtemp(prefix="swapctl-shared-", dir="/var/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def evil(shared_dir) -> tuple[Path, Path]:
    """(the library, the world-writable file it reports into)."""
    (shared_dir / "evil.c").write_text(EVIL)
    lib = shared_dir / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(shared_dir / "evil.c")], check=True)
    lib.chmod(0o755)
    return lib, shared_dir / "evil.log"


@pytest.fixture
def evil_log(evil) -> Path:
    log = evil[1]
    log.unlink(missing_ok=True)
    log.touch()
    log.chmod(0o666)
    return log


@pytest.fixture(scope="module")
def prover_c(lab_dir) -> Path:
    return build_prover(lab_dir / "bin" / "prover-c", TIMING="1", TAG="c")


@pytest.fixture
def open_box(sshd, shared_dir, tmp_path, request):
    """A box whose data directory is in `shared_dir`: other users can run its programs."""
    data = shared_dir / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    data.mkdir()
    data.chmod(0o755)
    b = Box(sshd, data, tmp_path)
    b.write_playbook()
    yield b
    b.kill_all()
    shutil.rmtree(data, ignore_errors=True)


def hostile(argv: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    """A process of `nobody`'s, in a session of its own."""
    return subprocess.Popen([*NOBODY, "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv],
                            stdin=subprocess.DEVNULL, start_new_session=True, **kw)


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def uid_of(pid: int) -> int:
    return next(int(line.split()[2]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("Uid:"))


def end(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 9)
    proc.wait()


# -- finding 1: only the real daemon is adopted --------------------------------------------------

def test_another_users_process_that_matches_is_neither_adopted_nor_blocks_the_deploy(box, prover, prover_b, evil,
                                                                                       evil_log, swapctl_env):
    """The audit's repro: `nobody` runs a program of its own with argv[0] the daemon's path and LD_PRELOAD."""
    pid = box.start_by_hand(prover)
    lib, _ = evil
    fake = hostile(["bash", "-c", f"exec -a {box.binary} sleep 600"],
                   {"LD_PRELOAD": str(lib), "EVIL_LOG": str(evil_log), "PATH": "/usr/bin:/bin"})
    wait_until(lambda: Path(f"/proc/{fake.pid}/cmdline").read_bytes().startswith(str(box.binary).encode()),
               what="the hostile process")
    try:
        r = swapctl("status", "lab", "-p", str(box.playbook_path), env={"COLUMNS": "500"})
        assert f"daemon: pid {pid}" in r.stdout and f"not the daemon: pid {fake.pid} (uid 65534" in r.stdout
        r = deploy(box, prover_b)
        assert r.returncode == 0, r.stderr  # not "several processes match"
        assert f"pid {fake.pid} (uid 65534, runs /usr/bin/sleep) matches daemon.match but is not the daemon" \
            in r.stderr
        assert f"old daemon: pid {pid}" in r.stderr
        [new] = [p for p in box.daemons() if p != fake.pid]
        assert exe_sha(new) == sha(prover_b) and "LD_PRELOAD" not in environ(new)
        assert "uid=0" not in evil_log.read_text()  # its library never ran as root
        assert fake.poll() is None  # and its process was left alone
    finally:
        end(fake)


def test_with_the_daemon_down_another_user_running_the_binary_itself_is_not_adopted(open_box, prover, prover_b,
                                                                                    evil, evil_log, swapctl_env):
    """`nobody` runs the daemon's own binary (its /proc/PID/exe is the binary path) with LD_PRELOAD: a
    second prover, which the deploy refuses to start beside (it names daemon.user) unless told --beside."""
    box = open_box
    shutil.copy(prover, box.binary)
    box.binary.chmod(0o755)
    box.config.write_text(prover_config(memory_mib=8))
    box.config.chmod(0o644)
    own_log = box.data / "nobody.log"
    lib, _ = evil
    with open(own_log, "wb") as out:
        fake = hostile([str(box.binary), "--config", str(box.config)],
                       {"LD_PRELOAD": str(lib), "EVIL_LOG": str(evil_log), "PATH": "/usr/bin:/bin"},
                       stdout=out, stderr=subprocess.STDOUT, cwd="/")
    try:
        wait_until(lambda: "ready" in own_log.read_text(errors="replace"), what="nobody's copy to be ready")
        assert "uid=65534" in evil_log.read_text()  # the library works: it ran, as nobody
        r = deploy(box, prover_b)
        assert r.returncode == 3, r.stderr
        assert f"pid {fake.pid} (user nobody, runs {box.binary}: {box.binary} --config" in r.stderr
        assert "fix daemon.user" in r.stderr and "--beside" in r.stderr and box.daemons() == [fake.pid]
        r = deploy(box, prover_b, "--beside")
        assert r.returncode == 0, r.stderr
        assert "old daemon: none running" in r.stderr and f"--beside: the new build starts beside pid {fake.pid}" \
            in r.stderr
        new = [p for p in box.daemons() if p != fake.pid]
        assert len(new) == 1 and uid_of(new[0]) == 0 and "LD_PRELOAD" not in environ(new[0])
        assert "uid=0" not in evil_log.read_text()
    finally:
        end(fake)


def test_an_adopted_daemons_loader_variables_are_dropped_and_the_plan_shows_the_environment(box, prover, prover_b,
                                                                                          swapctl_env):
    box.config.write_text(prover_config())
    shutil.copy(prover, box.binary)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LD_LIBRARY_PATH": "/opt/evil/lib", "KEPT": "1",
           "BASH_FUNC_f%%": "() { :; }"}
    subprocess.Popen([str(box.binary), "--config", str(box.config)], stdout=open(box.log, "ab"),
                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=box.data, start_new_session=True, env=env)
    wait_until(lambda: "cuzk-daemon ready" in box.log.read_text(errors="replace"), what="ready line")
    box.write_playbook(daemon={"env": {"ADDED": "yes", "CUZK_API_TOKEN": "tok-9f8e7d"}})
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    assert "LD_LIBRARY_PATH is not carried over (a loader variable: name it in daemon.keep_loader_env" in r.stderr
    assert "BASH_FUNC_f%% is not carried over (not a variable name)" in r.stderr
    assert "environment: +ADDED=yes, +CUZK_API_TOKEN=***" in r.stderr and "tok-9f8e7d" not in r.stderr
    new = box.one_daemon()
    got = environ(new)
    assert got["KEPT"] == "1" and got["CUZK_API_TOKEN"] == "tok-9f8e7d"
    assert "LD_LIBRARY_PATH" not in got and "BASH_FUNC_f%%" not in got
    # the adopted release keeps what it may carry only: a rollback to it cannot bring LD_LIBRARY_PATH back
    assert swapctl("rollback", "lab", "--yes", "-p", str(box.playbook_path)).returncode == 0
    back = box.one_daemon()
    assert exe_sha(back) == sha(prover) and "LD_LIBRARY_PATH" not in environ(back) and environ(back)["KEPT"] == "1"


def test_a_loader_variable_the_playbook_names_is_carried(box, prover, prover_b, swapctl_env):
    shutil.copy(prover, box.binary)
    box.config.write_text(prover_config())
    subprocess.Popen([str(box.binary), "--config", str(box.config)], stdout=open(box.log, "ab"),
                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=box.data, start_new_session=True,
                     env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"})
    wait_until(lambda: "cuzk-daemon ready" in box.log.read_text(errors="replace"), what="ready line")
    box.write_playbook(daemon={"keep_loader_env": ["LD_LIBRARY_PATH"]})
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    assert "not carried over" not in r.stderr
    new = box.one_daemon()
    assert environ(new)["LD_LIBRARY_PATH"] == "/usr/local/cuda/lib64"


def _remove_user(name: str) -> None:
    """Its processes killed and gone, then the user: userdel refuses a user a process still runs as, and a
    user left behind made the next test's useradd fail (exit 9: two full suites here lost a test to it)."""
    subprocess.run(["pkill", "-9", "-u", name], check=False)
    wait_until(lambda: subprocess.run(["pgrep", "-u", name], capture_output=True).returncode == 1,
               what=f"{name}'s processes to end")
    r = subprocess.run(["userdel", name], capture_output=True, text=True)
    assert r.returncode == 0, f"userdel {name}: {r.stderr.strip()}"


@pytest.fixture
def daemon_user():
    """A real second user, made for the test: the daemon runs as it."""
    name = f"swd{os.getpid() % 100000}"
    try:
        pwd.getpwnam(name)
        _remove_user(name)  # left by a run killed before its teardown, whose pid this one has again
    except KeyError:
        pass
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    yield pwd.getpwnam(name)
    _remove_user(name)


def start_as(box, prover: Path, user: pwd.struct_passwd, path: str = "/usr/bin:/bin") -> None:
    """Root's copy of `prover` at daemon.binary, started by hand as `user` (setpriv, by its path: Popen looks
    its program up on the PATH it is given) with `path` as its PATH, its log `user`'s; until it is ready."""
    shutil.copy(prover, box.binary)
    box.binary.chmod(0o755)
    box.config.write_text(prover_config(memory_mib=8))
    box.config.chmod(0o644)
    box.log.touch()
    os.chown(box.log, user.pw_uid, user.pw_gid)
    subprocess.Popen(["/usr/bin/setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
                      str(box.binary), "--config", str(box.config)], stdout=open(box.log, "ab"),
                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/", start_new_session=True,
                     env={"PATH": path})
    wait_until(lambda: "cuzk-daemon ready" in box.log.read_text(errors="replace"), what="ready line")


def test_a_daemon_that_runs_as_another_user_is_adopted_and_started_again_as_it(open_box, prover, prover_b,
                                                                               daemon_user, swapctl_env):
    box, user = open_box, daemon_user
    start_as(box, prover, user)
    # without daemon.user, a daemon not run by root or the binary's owner is nobody swapctl adopts
    r = deploy(box, prover_b, "--dry-run")
    assert r.returncode == 3 and "matches daemon.match but is not the daemon" in r.stderr
    assert "fix daemon.user (unset" in r.stderr
    box.write_playbook(daemon={"user": user.pw_name})
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    assert f"uid {user.pw_uid} gid {user.pw_gid}" in r.stderr  # the plan says whom it runs as
    new = box.one_daemon()
    assert exe_sha(new) == sha(prover_b) and uid_of(new) == user.pw_uid
    state = box.data / ".swapctl/cuzk"
    assert oct(state.stat().st_mode & 0o777) == "0o710" and state.stat().st_gid == user.pw_gid
    box.write_playbook(daemon={"user": "no-such-user-here"})
    r = deploy(box, prover, "--dry-run")
    assert r.returncode == 2 and "daemon.user 'no-such-user-here' is no user on the host" in r.stderr


# -- finding 2: no secret on any command line ----------------------------------------------------

# `nobody`'s loop: every process's command line, every 2 ms, until the stop file appears
WATCHER = r"""
import json, os, sys, time
stop, needles = sys.argv[1], [n.encode() for n in sys.argv[2:]]
hits, samples, saw_swap = set(), 0, False
while not os.path.exists(stop):
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():  # its own argv holds what it looks for
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            saw_swap = saw_swap or b"swapctl-swap" in cmdline
            hits.update(cmdline.replace(b"\0", b" ")[:300].decode("utf-8", "replace") for n in needles if n in cmdline)
    samples += 1
    time.sleep(0.002)
print(json.dumps({"samples": samples, "saw_swap": saw_swap, "hits": sorted(hits)}))
"""


def test_no_secret_reaches_a_command_line_during_a_deploy_and_its_rollback(box, prover, prover_b, prover_crash,
                                                                          shared_dir, swapctl_env):
    """`nobody` reads every process's /proc/PID/cmdline every 2 ms through two deploys (one rolled back):
    neither a secret_env value nor an unlisted one is ever there, and what it reads is the swap itself."""
    listed, unlisted = "listed-s3cret-5d41402a", "unlisted-s3cret-7b52009b"
    box.start_by_hand(prover)
    box.write_playbook(daemon={"env": {"CUZK_API_TOKEN": listed, "PLAIN_VALUE": unlisted},
                               "secret_env": ["CUZK_API_TOKEN"]})
    stop = shared_dir / f"watch-stop-{os.getpid()}"
    stop.unlink(missing_ok=True)
    watcher = subprocess.Popen([*NOBODY, sys.executable, "-c", WATCHER, str(stop), listed, unlisted],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert deploy(box, prover_b).returncode == 0
        assert deploy(box, prover_crash).returncode == 4  # and back: the fallback's environment goes too
    finally:
        stop.touch()
        out, _ = watcher.communicate(timeout=30)
        stop.unlink(missing_ok=True)
    report = json.loads(out)
    assert report["saw_swap"] and report["samples"] > 50, report  # it watched while the swap scripts ran
    assert report["hits"] == [], report["hits"]
    new = box.one_daemon()
    assert environ(new)["CUZK_API_TOKEN"] == listed and environ(new)["PLAIN_VALUE"] == unlisted  # they got there


# -- finding 4: nothing read back is trusted -----------------------------------------------------

def plant(box: Box, dir_name: str, manifest: dict) -> Path:
    d = box.data / ".swapctl/cuzk/releases" / dir_name
    d.mkdir(mode=0o700)
    (d / "manifest.json").write_text(json.dumps(manifest))
    (d / "cuzk").write_bytes(b"\x7fELF")
    return d


def test_a_manifest_naming_a_path_outside_the_state_dir_removes_nothing_there(box, prover, prover_b, prover_c,
                                                                              swapctl_env):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    victims = [box.data / "vic", box.data / ".swapctl/victim"]
    for v in victims:
        v.mkdir()
        (v / "precious").write_text("keep me")
    old = {"size": 4, "name": "cuzk", "created": "2000-01-01T00:00:00Z", "by": "x", "status": "ok", "source": "upload"}
    plant(box, "ffffffffffff", {**old, "sha256": "../../../vic"})  # its id would be "../../../vic"
    plant(box, "eeeeeeeeeeee", {**old, "sha256": "../../victim"})
    plant(box, "dddddddddddd", {**old, "sha256": "d" * 64, "name": "../../../vic"})
    assert deploy(box, prover_c).returncode == 0  # keep = 5: make pruning remove the oldest ones
    box.write_playbook(releases={"keep": 2})
    assert deploy(box, prover_b).returncode == 0
    for v in victims:
        assert (v / "precious").read_text() == "keep me"
    releases = {p.name for p in (box.data / ".swapctl/cuzk/releases").iterdir()}
    assert sha(prover)[:12] not in releases  # pruning still prunes: the adopted release went
    assert {sha(prover_b)[:12], sha(prover_c)[:12]} <= releases
    r = swapctl("history", "lab", "-p", str(box.playbook_path))
    assert r.returncode == 0 and "../" not in r.stdout


def test_rollback_to_an_edited_manifest_shows_its_environment_and_drops_its_loader_variables(box, prover, prover_b,
                                                                                            evil, evil_log,
                                                                                            swapctl_env):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    manifest = box.data / ".swapctl/cuzk/releases" / sha(prover)[:12] / "manifest.json"
    recorded = json.loads(manifest.read_text())
    lib, _ = evil
    env = [*recorded["env"], ["LD_PRELOAD", str(lib)], ["EVIL_LOG", str(evil_log)], ["EDITED", "by-someone"]]
    manifest.write_text(json.dumps({**recorded, "env": env}))
    r = swapctl("rollback", "lab", "--yes", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    assert "+EVIL_LOG=" in r.stderr and "+EDITED=by-someone" in r.stderr  # shown before it runs
    assert "LD_PRELOAD is not carried over" in r.stderr
    back = box.one_daemon()
    assert exe_sha(back) == sha(prover) and "LD_PRELOAD" not in environ(back)
    assert "uid=0" not in evil_log.read_text()


@pytest.mark.parametrize("key", ["--split-string=sh -c id", "-i", "A B", "1X"])
def test_a_manifest_whose_environment_has_a_key_that_is_no_name_is_no_release(box, prover, prover_b, key,
                                                                              swapctl_env):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    manifest = box.data / ".swapctl/cuzk/releases" / sha(prover)[:12] / "manifest.json"
    recorded = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**recorded, "env": [*recorded["env"], [key, "x"]]}))
    r = swapctl("rollback", "lab", "--to", sha(prover)[:12], "--yes", "-p", str(box.playbook_path))
    assert r.returncode == 2 and "matches no release" in r.stderr
    assert [exe_sha(p) for p in box.daemons()] == [sha(prover_b)]


@pytest.mark.parametrize("where", ["state", "releases", "swapctl_dir_of_nobody"])
def test_a_state_directory_others_may_write_to_is_refused(box, prover, prover_b, where, swapctl_env):
    pid = box.start_by_hand(prover)
    state = box.data / ".swapctl/cuzk"
    if where == "swapctl_dir_of_nobody":  # planted by another user before the first deploy
        (box.data / ".swapctl").mkdir()
        os.chown(box.data / ".swapctl", 65534, 65534)
        bad = box.data / ".swapctl"
    else:
        assert deploy(box, prover_b).returncode == 0
        pid = box.daemons()[0]
        bad = state if where == "state" else state / "releases"
        bad.chmod(0o777)
    r = deploy(box, prover, "--restart")
    assert r.returncode == 3, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert f"state directory {bad} " in last and "chown root" in last
    assert box.daemons() == [pid]


def test_a_release_changed_on_the_host_is_never_switched_to(box, prover, prover_b, swapctl_env):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    pid = box.one_daemon()
    saved = box.data / ".swapctl/cuzk/releases" / sha(prover)[:12] / "cuzk"
    saved.write_bytes(saved.read_bytes()[:4096] + b"changed")
    r = swapctl("rollback", "lab", "--yes", "-p", str(box.playbook_path))
    assert r.returncode == 3, r.stderr
    assert "is not the binary it was, so nothing was stopped" in r.stderr
    assert box.daemons() == [pid]  # never stopped


def test_a_release_with_the_same_12_digits_and_another_sha256_is_not_already_on_the_host(box, prover, prover_b,
                                                                                        swapctl_env):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    pid = box.one_daemon()
    fake = sha(prover)[:12] + "0" * 52
    assert fake != sha(prover)
    old = {"size": 4, "name": "cuzk", "created": "2000-01-01T00:00:00Z", "by": "x", "status": "ok", "source": "upload"}
    shutil.rmtree(box.data / ".swapctl/cuzk/releases" / sha(prover)[:12])
    plant(box, sha(prover)[:12], {**old, "sha256": fake})
    r = deploy(box, prover)
    assert r.returncode == 3 and "holds another binary" in r.stderr, r.stderr
    assert box.daemons() == [pid]


def test_a_partial_upload_whose_name_forges_a_listing_line_removes_nothing_else(box, prover, prover_b,
                                                                                swapctl_env):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    # read as lines, it listed `7 NAME` as a stale upload, removed relative to the login's home directory
    victim = Path(pwd.getpwuid(0).pw_dir) / f"swapctl-victim-{os.getpid()}"
    victim.write_text("keep me")
    releases = box.data / ".swapctl/cuzk/releases"
    forged = releases / f".upload-x\n7 {victim.name}"
    forged.write_text("x")
    stale = releases / f".upload-{'c' * 12}"  # a real one from an interrupted upload: pruned, as before
    stale.write_text("x")
    try:
        assert deploy(box, prover, "--restart").returncode == 0
        assert victim.read_text() == "keep me" and forged.exists() and not stale.exists()
    finally:
        victim.unlink(missing_ok=True)


def test_the_state_files_are_their_owners_only(box, prover, prover_b, swapctl_env):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    state = box.data / ".swapctl/cuzk"
    files = [state / "journal.jsonl", *state.glob("releases/*/manifest.json")]
    assert len(files) == 3
    assert {oct(f.stat().st_mode & 0o777) for f in files} == {"0o600"}
    assert {oct(d.stat().st_mode & 0o777) for d in (state, state / "releases")} == {"0o700"}


# -- finding 7: environment keys are names -------------------------------------------------------

@pytest.mark.parametrize("table, key", [
    ('[daemon.env]\n"--split-string=sh -c id" = "x"', "daemon.env"),
    ('[daemon]\nsecret_env = ["-i"]', "daemon.secret_env"),
    ('[daemon]\nkeep_loader_env = ["LD PRELOAD"]', "daemon.keep_loader_env"),
])
def test_the_playbook_accepts_only_variable_names_as_environment_keys(table, key):
    from swapctl.errors import PlaybookError

    with pytest.raises(PlaybookError) as exc:
        parse(f'[hosts.a]\naddress = "h"\n{table}\n', "book.toml")
    assert exc.value.key == key and "is not an environment variable name" in str(exc.value)


# -- finding 8: the journal stays small ----------------------------------------------------------

def test_a_large_journal_is_rotated_and_only_its_tail_read(box, prover, prover_b, swapctl_env):
    box.start_by_hand(prover)
    assert deploy(box, prover_b).returncode == 0
    journal = box.data / ".swapctl/cuzk/journal.jsonl"
    line = json.dumps({"time": "2026-01-01T00:00:00Z", "action": "deploy", "outcome": "deployed",
                       "pad": "x" * 900}) + "\n"
    with open(journal, "a") as f:
        f.write(line * 20000)  # 18 MB: years of deploys
    r = swapctl("history", "lab", "--json", "-p", str(box.playbook_path))
    assert r.returncode == 0 and len(json.loads(r.stdout)["journal"]) == 1000  # its last 1000 entries
    assert deploy(box, prover, "--restart").returncode == 0
    lines = journal.read_text().splitlines()
    assert len(lines) == 2000 and json.loads(lines[-1])["action"] == "deploy" and "pad" not in lines[-1]
    assert journal.stat().st_size < 4 << 20
