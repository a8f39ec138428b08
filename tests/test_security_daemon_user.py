"""The third attack round's host items 1 and 2 (issue 45; docs/security.md): the daemon's own user U, a real
unprivileged user made with useradd, owns the binary's directory (daemon.user allows it) and, with it, the
name `.swapctl` and the daemon's log. Whatever U renames or links there, root writes nothing outside its own
state tree, and never opens a file through U's directory for the daemon's output.

The real sshd host of the lab, a box whose data directory is U's (`open_box`, chowned)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

# fixtures too (daemon_user, open_box, shared_dir): a test naming one redefines it (F811)
from test_security import daemon_user, open_box, prover_c, shared_dir, start_as  # noqa: F401

from conftest import Box
from lab import wait_until
from test_deploy import deploy, exe_sha, sha

SECRET = b"root's own file: nobody else may change it\n"


def as_user(user, script: str, *args: str) -> None:
    """`script` (sh) run as `user`, as the user would run it."""
    subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
                    "sh", "-ec", script, "sh", *args], check=True)


@pytest.fixture
def secret(shared_dir) -> Path:  # noqa: F811
    """A file only root may read or write, outside every box."""
    path = shared_dir / "root-only"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    yield path
    path.unlink()


def untouched(path: Path) -> bool:
    st = path.stat()
    return (path.read_bytes(), st.st_mtime, st.st_uid, st.st_mode & 0o777) == (SECRET, 1_000_000_000, 0, 0o600)


def holders(path: Path) -> list[str]:
    """Every process holding a descriptor on `path`, as `pid fd`."""
    found = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) == str(path):
                found.append(f"{fd.parts[2]} {fd.name}")
        except OSError:
            continue
    return found


def users_box(box: Box, user, prover: Path) -> None:
    """The binary's directory is U's; the daemon runs as U (started by hand), and swapctl has deployed over it
    once, so the state tree is there, its group U's (710)."""
    os.chown(box.data, user.pw_uid, user.pw_gid)
    start_as(box, prover, user)
    box.write_playbook(daemon={"user": user.pw_name, "ready_stable_s": 1})


def plant_evil_tree(box: Box, user, secret: Path) -> None:
    """U's own tree beside the real one: the files root writes in the state directory are links to `secret`,
    those it checks are links to the real ones (so that the swap goes on), ready to be put in place."""
    as_user(user, """cd "$1"; mkdir -p evil/cuzk; cd evil/cuzk
        for f in journal.jsonl journal.jsonl.reserve swap.info lock.beat; do ln -s "$2" "$f"; done
        for f in lock lock.info swap.lock releases; do ln -s "../../.swapctl-real/cuzk/$f" "$f"; done""",
            str(box.data), str(secret))


RENAME = 'cd "$1" && mv .swapctl .swapctl-real && ln -s evil .swapctl'


def root_made_in(d: Path) -> list[str]:
    return [str(p) for p in d.rglob("*") if p.lstat().st_uid == 0]


def test_the_daemons_user_renaming_the_state_tree_mid_swap_redirects_no_write_of_roots(  # noqa: F811
        open_box, prover, prover_b, daemon_user, secret, swapctl_env):  # noqa: F811
    """U waits until the swap has begun (its swap.info), then puts its own tree in place of `.swapctl`: the
    swap's later writes (its journal line, the heartbeat) stay in root's tree, the deploy ends as it would."""
    box, user = open_box, daemon_user
    users_box(box, user, prover)
    assert deploy(box, prover_b).returncode == 0
    plant_evil_tree(box, user, secret)
    info = box.data / ".swapctl/cuzk/swap.info"
    before = info.read_bytes()
    renamed = threading.Event()

    def rename_once_the_swap_began() -> None:
        wait_until(lambda: info.read_bytes() != before, timeout=60, what="the swap to begin")
        as_user(user, RENAME, str(box.data))
        renamed.set()

    t = threading.Thread(target=rename_once_the_swap_began, daemon=True)
    t.start()
    r = deploy(box, prover)
    t.join(timeout=60)
    assert renamed.is_set() and (box.data / ".swapctl").is_symlink()
    assert untouched(secret), secret.read_bytes()
    assert root_made_in(box.data / "evil") == []
    assert r.returncode == 0, r.stderr
    assert exe_sha(box.one_daemon()) == sha(prover)
    real = box.data / ".swapctl-real/cuzk"
    assert f'"to": "{sha(prover)}"' in (real / "journal.jsonl").read_text().splitlines()[-1]


def test_the_daemons_user_flipping_the_state_tree_throughout_a_deploy_gets_no_write_of_roots(  # noqa: F811
        open_box, prover, prover_b, prover_c, daemon_user, secret, swapctl_env):  # noqa: F811
    """U swaps its own tree in and out of `.swapctl` every few milliseconds from the moment the deploy holds
    the lock (its heartbeat, the upload, the backup, the swap, the prune): each step either works in root's
    tree or refuses in one line; root writes nothing of U's and creates nothing in U's tree."""
    box, user = open_box, daemon_user
    users_box(box, user, prover)
    assert deploy(box, prover_b).returncode == 0
    plant_evil_tree(box, user, secret)
    stop = box.data / "stop-flipping"
    flipper = subprocess.Popen(
        ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "sh", "-c", """
        cd "$1"; before=$(stat -c %y .swapctl/cuzk/lock.beat)  # the lock taken: lock.beat made again
        while [ "$(stat -c %y .swapctl/cuzk/lock.beat)" = "$before" ] && [ ! -e "$2" ]; do sleep 0.002; done
        until [ -e "$2" ]; do
          mv .swapctl .swapctl-real && ln -s evil .swapctl; sleep 0.003
          rm .swapctl && mv .swapctl-real .swapctl; sleep 0.003
        done""", "sh", str(box.data), str(stop)])
    try:
        r = deploy(box, prover_c)
    finally:
        as_user(user, 'touch "$1"', str(stop))
        flipper.wait(timeout=20)
    assert untouched(secret), secret.read_bytes()
    assert root_made_in(box.data / "evil") == []
    assert "Traceback" not in r.stderr
    assert r.returncode == 0 or len(r.stderr.strip().splitlines()[-1]) > 0  # a refusal says why
    assert deploy(box, prover_c).returncode == 0  # the tree in place again: the next deploy goes through


def test_a_log_the_daemons_user_links_to_roots_file_is_never_opened_by_root(  # noqa: F811
        open_box, prover, prover_b, daemon_user, secret, swapctl_env):  # noqa: F811
    """U owns the log's directory and makes daemon.log a link to a file only root may write: the new build's
    output is opened as U (who cannot), so the deploy refuses before anything stops, naming the log."""
    box, user = open_box, daemon_user
    users_box(box, user, prover)
    old = box.one_daemon()
    as_user(user, 'ln -sf "$1" "$2"', str(secret), str(box.log))
    r = deploy(box, prover_b)
    assert untouched(secret), secret.read_bytes()
    assert holders(secret) == []
    assert r.returncode != 0 and f"daemon.log {box.log} cannot be opened for appending by the daemon's user" in r.stderr
    assert "Traceback" not in r.stderr
    assert box.one_daemon() == old  # nothing was stopped


def test_status_never_reads_for_the_daemons_user_a_config_only_root_may_read(
        open_box, daemon_user, prover, secret):  # noqa: F811
    """U runs a program of its own from the binary's directory (U owns it) whose command line names a file
    only root may read as its --config: the status facts read a process's config as that process's user, so
    none of the file's lines reaches what swapctl knows of the host (its memory budget, where it listens)."""
    from swapctl.facts.status import gather
    from swapctl.playbook import load
    from swapctl.remote.host import LocalHost

    box, user = open_box, daemon_user
    users_box(box, user, prover)
    secret.write_bytes(b'[daemon]\nlisten = "0.0.0.0:4242"\nstatus_listen = "0.0.0.0:4243"\n'
                       b'[memory]\ntotal_budget = "9TiB"\n')
    shutil.copy("/bin/sh", box.data / "sh")
    os.chown(box.data / "sh", user.pw_uid, user.pw_gid)
    spy = subprocess.Popen(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
                            str(box.data / "sh"), "-s", "--", "--config", str(secret)],
                           stdin=subprocess.PIPE, start_new_session=True)
    spy.stdin.write(b"sleep 60\n")
    spy.stdin.flush()
    try:
        wait_until(lambda: os.readlink(f"/proc/{spy.pid}/exe") == str(box.data / "sh"), what="the spy")
        facts = gather(LocalHost("lab"), load(box.playbook_path).daemon)
        seen = {c.pid: c for c in facts.configs}
        assert spy.pid in seen and seen[spy.pid].path == str(secret), facts.configs  # found, with its file
        spied = seen[spy.pid]
        assert "4242" not in repr(spied) and "9TiB" not in repr(spied), spied
        daemon = next(c for pid, c in seen.items() if pid not in (None, spy.pid))
        assert daemon.listen or daemon.status_listen or repr(daemon)  # the daemon's own config is still read
    finally:
        spy.kill()
        spy.wait()
