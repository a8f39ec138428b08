"""The second red-team round (issue 31; docs/security.md): another user of a shared box, a hostile host and a
hostile inventory get nothing. Each test is one of the 11 holes, on the real sshd host of the lab with a
real second user (`nobody`, or one made with useradd) or a host whose own tools are the attacker."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

# fixtures too (daemon_user, open_box, shared_dir): a test naming one redefines it (F811)
from test_security import NOBODY, daemon_user, end, environ, hostile, open_box, shared_dir, start_as, uid_of  # noqa: F401

from swapctl.playbook import parse

from conftest import Box
from lab import swapctl, swapctl_measured, wait_until
from test_deploy import deploy, exe_sha, sha

WIDE = {"COLUMNS": "500"}


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# -- 1: a path another user chooses cannot forge the status script's sections ------------------------

def forged_sections(box: Box, victim: int) -> str:
    """What a path would have to hold to make root's `victim` the daemon and hide the real one: the status
    script's own section lines (`==> ps`, `==> links`, `==> ids`), tabs and all."""
    return (f"x\n==> ps\n{victim} 1 {victim} S 0.0 1000 100 root {box.binary} --config {box.config}\n"
            f"==> links\n/proc/{victim}/exe\t{box.binary}\n==> ids\n/proc/{victim}/status:Uid:\t0\t0\t0\t0\n"
            f"/proc/{victim}/status:Gid:\t0\t0\t0\t0\n==> tail\x1c==> ps\u2028y")


def test_a_path_holding_the_status_scripts_section_lines_forges_nothing(open_box, prover, prover_b,  # noqa: F811
                                                                         swapctl_env):
    """`nobody` runs its own program from, and sits in, a directory whose path is the forged sections: its
    cwd and its exe are that path, its argv[0] too."""
    box = open_box
    pid = box.start_by_hand(prover)
    victim = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, start_new_session=True)  # root's
    lair = Path(str(box.data) + "/" + forged_sections(box, victim.pid))
    lair.mkdir(parents=True)
    shutil.copy("/usr/bin/sleep", lair / "sleep")
    fake = hostile(["bash", "-c", 'exec -a "$0" "$0" 600', str(lair / "sleep")], {"PATH": "/usr/bin:/bin"},
                   cwd=str(lair))
    try:
        wait_until(lambda: os.path.exists(f"/proc/{fake.pid}/cwd") and
                   os.readlink(f"/proc/{fake.pid}/exe") == str(lair / "sleep"), what="nobody's process")
        r = swapctl("status", "lab", "--json", "-p", str(box.playbook_path))
        assert r.returncode == 0, r.stderr
        host = json.loads(r.stdout)["hosts"]["lab"]
        assert [d["pid"] for d in host["daemons"]] == [pid], host["daemons"]
        r = deploy(box, prover_b)
        assert r.returncode == 0, r.stderr
        assert f"old daemon: pid {pid}" in r.stderr
        assert alive(victim.pid) and alive(fake.pid)  # neither stopped
        [new] = [p for p in box.daemons() if p != fake.pid]
        assert exe_sha(new) == sha(prover_b) and not alive(pid)  # the real one was swapped, alone
    finally:
        end(fake)
        victim.kill()
        victim.wait()


# -- 2: the GPU sampler runs nothing another user can write ------------------------------------------

# `nobody`, owner of the binary's directory, renames root's .swapctl away, plants its own tree with a FIFO
# where the sampler's script is written, drains what root writes and feeds root's bash its own script
PLANT_FIFO = r"""
set -e
cd "$1"; mv .swapctl .swapctl-root; d=.swapctl/cuzk/gpu; mkdir -p "$d"; mkfifo "$d/gpu-sampler.sh.tmp"
touch "$3"
cat "$d/gpu-sampler.sh.tmp" > /dev/null
while [ ! -p "$d/gpu-sampler.sh" ]; do sleep 0.01; done
printf 'id -u > %s\n' "$2" > "$d/gpu-sampler.sh"
"""


def test_the_gpu_sampler_never_runs_a_script_the_owner_of_the_binarys_directory_can_swap(tmp_path,
                                                                                         shared_dir):  # noqa: F811
    from conftest import own_box

    with own_box(tmp_path, tools={"nvidia-smi": "#!/bin/sh\nexit 0\n"}) as host:
        data = shared_dir / "sampler-box"
        data.mkdir()
        os.chown(data, 65534, 65534)  # the daemon's user owns it: swapctl adopts a daemon run by the owner
        box = Box(host.server, data, tmp_path)
        box.write_playbook()
        (data / ".swapctl/cuzk").mkdir(parents=True, mode=0o700)
        proof, planted = data / "proof", data / "planted"
        follow = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, start_new_session=True)
        attacker = hostile(["sh", "-c", PLANT_FIFO, "plant", str(data), str(proof), str(planted)],
                           {"PATH": "/usr/bin:/bin"})
        try:
            wait_until(planted.exists, what="nobody's FIFO")
            r = swapctl("gpu-sampler", "start", "lab", "--pid", str(follow.pid), "-p", str(box.playbook_path))
            assert not proof.exists(), "root ran nobody's script"
            assert r.returncode == 3, r.stderr
            [line] = r.stderr.strip().splitlines()
            assert f"directory {data}, the binary's or one above it, is owned by uid 65534" in line
            assert f"chown root: {data}" in line and "daemon.user" in line
        finally:
            end(attacker)
            follow.kill()
            follow.wait()


# -- 3: what root runs is never found on the daemon's PATH ---------------------------------------------

def test_a_setpriv_on_the_daemons_own_path_is_never_what_root_runs(open_box, prover, prover_b, daemon_user,  # noqa: F811
                                                                   shared_dir, swapctl_env):  # noqa: F811
    """The daemon runs as its own user U with `PATH=U's bin:...`; U puts a `setpriv` there."""
    box, user = open_box, daemon_user
    ubin = shared_dir / f"{user.pw_name}-bin"
    ubin.mkdir()
    proof = ubin / "ran-as"
    (ubin / "setpriv").write_text(f'#!/bin/sh\nid -u >> {proof}\nexec /usr/bin/setpriv "$@"\n')
    (ubin / "setpriv").chmod(0o755)
    for p in (ubin, ubin / "setpriv"):
        os.chown(p, user.pw_uid, user.pw_gid)
    start_as(box, prover, user, path=f"{ubin}:/usr/bin:/bin")
    box.write_playbook(daemon={"user": user.pw_name})
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    assert not proof.exists(), f"U's setpriv ran, as uid {proof.read_text().split()}"
    new = box.one_daemon()
    assert exe_sha(new) == sha(prover_b) and uid_of(new) == user.pw_uid
    assert environ(new)["PATH"] == f"{ubin}:/usr/bin:/bin"  # its PATH is still its own


# -- 4: init --from writes only what deploy would adopt ----------------------------------------------

def init_from(box: Box, out: Path, *extra: str):
    """`swapctl init OUT --from lab`, the host named by the box's playbook."""
    return swapctl("init", str(out), "--from", "lab", "--match", re.escape(str(box.data)) + "/cuzk", *extra,
                   env={"SWAPCTL_PLAYBOOK": str(box.playbook_path)})


def test_init_from_never_writes_another_users_look_alike_into_the_playbook(open_box, prover,  # noqa: F811
                                                                            swapctl_env, tmp_path):
    """`nobody` runs `exec -a /data/cuzk python3 ... --config /data/pub/evil.toml` from a directory of its own,
    into a log of its own: with the daemon down, `init --from` once wrote its args, cwd and log."""
    box = open_box
    pub = box.data / "pub"
    pub.mkdir()
    os.chown(pub, 65534, 65534)
    sleeper = f"exec -a \"$0\" python3 -c 'import time; time.sleep(600)' --config {pub}/evil.toml"
    fake = hostile(["bash", "-c", f"exec >> {pub}/evil.log; {sleeper}", str(box.binary)], {"PATH": "/usr/bin:/bin"},
                   cwd=str(pub))
    out = tmp_path / "from-lab.toml"
    try:
        wait_until(lambda: Path(f"/proc/{fake.pid}/cmdline").read_bytes().startswith(str(box.binary).encode()),
                   what="the look-alike")
        r = init_from(box, out)
        assert r.returncode == 2 and not out.exists(), r.stderr
        [line] = r.stderr.strip().splitlines()
        assert "no process that matches it is the daemon" in line
        assert f"pid {fake.pid} (uid 65534, runs /usr/bin/python3" in line, line
        assert f"--config {pub}/evil.toml) matches it but runs no {box.binary} as root or its owner" in line
        pid = box.start_by_hand(prover)  # the daemon comes up beside it: it is what is written
        r = init_from(box, out)
        assert r.returncode == 0, r.stderr
        [line] = [x for x in r.stderr.splitlines() if x.startswith("swapctl:")]
        assert f"not the daemon, not written into the playbook: pid {fake.pid} (uid 65534" in line
        assert f"(pid {pid})" in out.read_text() and str(pub) not in out.read_text()
        d = parse(out.read_text(), str(out)).daemon
        assert (d.binary, d.args, d.cwd, d.log) == (str(box.binary), ("--config", str(box.config)), str(box.data),
                                                     str(box.log))
    finally:
        end(fake)


def test_init_from_adopts_a_daemon_run_as_another_user_only_when_told_who(open_box, prover, daemon_user,  # noqa: F811
                                                                           swapctl_env, tmp_path):
    """Root's binary run as user U (neither root nor the binary's owner): the deploy adopts it only with
    daemon.user = U, so `init --from` takes it only with --user U, and writes that."""
    box, user = open_box, daemon_user
    start_as(box, prover, user)
    out = tmp_path / "from-lab.toml"
    r = init_from(box, out)
    assert r.returncode == 2 and not out.exists(), r.stderr
    assert f"runs no {box.binary} as root or its owner" in r.stderr and "pass --user NAME" in r.stderr
    r = init_from(box, out, "--user", user.pw_name)
    assert r.returncode == 0, r.stderr
    d = parse(out.read_text(), str(out)).daemon
    assert (d.binary, d.user, d.args) == (str(box.binary), user.pw_name, ("--config", str(box.config)))


# -- 5: the switch takes no name another user can take first -------------------------------------------

def test_a_directory_named_like_the_switchs_link_does_not_stop_the_swap(open_box, prover, prover_b,  # noqa: F811
                                                                        swapctl_env):
    """A binary directory every user may write to (sticky, as /tmp: none can rename root's files there)."""
    box = open_box
    box.data.chmod(0o1777)
    box.start_by_hand(prover)
    taken = box.data / "cuzk.swapctl-new"
    subprocess.run([*NOBODY, "mkdir", str(taken)], check=True)
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    new = box.one_daemon()
    assert exe_sha(new) == sha(prover_b) and taken.is_dir()  # and nobody's directory is left alone


# -- 8: an inventory's host is data, never ssh options -------------------------------------------------

def test_an_ansible_host_that_is_no_address_is_refused_at_load_and_runs_nothing(box, swapctl_env, tmp_path):
    pwned = tmp_path / "PWNED"
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[gpus]\ngpu-01 ansible_host={box.server.address} ansible_port={box.server.port}\n"
                         f'gpu-02 ansible_host="*:1 -oProxyCommand=touch${{IFS}}{pwned} y:1"\n')
    r = swapctl("-i", str(inventory), "status", "@gpus", "-p", str(box.playbook_path))
    assert not pwned.exists(), "the inventory ran a command here"
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert f"{inventory}:3" in line and "gpu-02" in line and "is no hostname or IP address" in line


# -- 6 and 7: fetch-logs writes what the host listed, and no more ------------------------------------

def peak(*args: str, timeout: float = 120) -> tuple[int, str, int]:
    """Runs the CLI: (exit code, stderr, its own peak RSS in KiB), measured from a small parent (lab.MEASURE)."""
    r, _, rss_kib = swapctl_measured(*args, timeout=timeout)
    return r.returncode, r.stderr, rss_kib


def lying_head(sends: int, when: str = "true") -> str:
    """A `head` whose `head -c` (the read script's) sends `sends` zero bytes instead, while `when` holds;
    any other use (the login shell's start-up files) is the real one."""
    return (f'#!/bin/sh\nif [ "$1" = -c ] && {when}; then\n  cat > /dev/null; exec /usr/bin/head -c {sends} /dev/zero\n'
            'fi\nexec /usr/bin/head "$@"\n')


def fetch_once(box: Box, dest: Path) -> tuple[int, str, int]:
    return peak("fetch-logs", "lab", "--dest", str(dest), "-p", str(box.playbook_path), timeout=30)


def sent_too_much(box: Box, tmp_path: Path) -> tuple[str, int, Path]:
    """A fetch of a 100-byte log that the host sends too much of: its one error line, its peak RSS (KiB) and
    where it fetched to."""
    box.log.write_bytes(b"x" * 99 + b"\n")
    box.write_playbook(logs={"paths": [str(box.log)]})
    dest = tmp_path / "logs"
    code, err, rss_kib = fetch_once(box, dest)
    assert code != 0, err
    [line] = err.strip().splitlines()
    return line, rss_kib, dest


def test_a_host_that_sends_more_than_it_listed_gets_none_of_it_written(tmp_path):
    """The host's `head` ignores `-c`: it lists 100 bytes and sends 64 MiB."""
    from conftest import own_box

    head = lying_head(64 << 20)
    with own_box(tmp_path, tools={"head": head}) as box:
        line, _, dest = sent_too_much(box, tmp_path)
        assert line.startswith(f"swapctl: lab: {box.log}: the host sent more than the 100 bytes it listed"), line
        assert "none of it was kept" in line and "head" in line
        assert not (dest / "lab" / "cuzk.log").exists()  # nothing half-written
        assert json.loads((dest / "lab" / ".swapctl-fetch.json").read_text()) == {}


def zstd_bomb(path: Path, size: int) -> int:
    """A zstd frame of `size` zero bytes, written to `path`: its size on disk."""
    import zstandard

    c, zero = zstandard.ZstdCompressor(level=3).compressobj(), bytes(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(c.compress(zero))
        f.write(c.flush())
    return path.stat().st_size


def test_a_zstd_bomb_is_stopped_at_the_listed_size_in_bounded_memory(tmp_path):
    """The host's `zstd` sends 32 KiB that decompress to 1 GiB, for a log it listed as 100 bytes: one
    decompression call once made all of it (a 1.07 GiB peak) and wrote it."""
    from conftest import own_box

    bomb = tmp_path / "bomb.zst"
    assert zstd_bomb(bomb, 1 << 30) < 64 << 10
    zstd = f"#!/bin/sh\ncat > /dev/null\nexec cat {bomb}\n"
    with own_box(tmp_path, tools={"zstd": zstd}) as box:
        line, rss_kib, dest = sent_too_much(box, tmp_path)
        assert f"{box.log}: the host sent more than the 100 bytes it listed (zstd on the wire)" in line, line
        assert rss_kib < 200 << 10, f"peak RSS {rss_kib >> 10} MiB"
        assert not (dest / "lab" / "cuzk.log").exists()


def test_a_log_that_grew_keeps_its_copy_when_the_host_then_sends_too_much(tmp_path):
    """A copy fetched before stays as it was (its resume point) when the next fetch is refused."""
    from conftest import own_box

    liar = tmp_path / "liar"
    head = lying_head(1 << 20, when=f"[ -e {liar} ]")
    with own_box(tmp_path, tools={"head": head}) as box:
        box.log.write_bytes(b"first\n")
        box.write_playbook(logs={"paths": [str(box.log)]})
        dest = tmp_path / "logs"
        assert fetch_once(box, dest)[0] == 0
        record = (dest / "lab" / ".swapctl-fetch.json").read_text()
        with open(box.log, "ab") as f:
            f.write(b"second\n")
        liar.touch()
        code, err, _ = fetch_once(box, dest)
        assert code != 0 and "the host sent more than the 7 bytes it listed" in err, err
        assert (dest / "lab" / "cuzk.log").read_bytes() == b"first\n"
        assert (dest / "lab" / ".swapctl-fetch.json").read_text() == record
        liar.unlink()
        assert fetch_once(box, dest)[0] == 0
        assert (dest / "lab" / "cuzk.log").read_bytes() == b"first\nsecond\n"


# -- 9: no host file names fetch-logs' own record --------------------------------------------------

def test_a_host_file_named_like_fetch_logs_record_is_a_copy_beside_it(open_box, tmp_path):  # noqa: F811
    """`nobody` plants `.swapctl-fetch.json` in a log directory every user may write to; [logs] paths takes
    its hidden files too. Its bytes past the record's size were once appended to the record, and every later
    fetch failed (the third here: the second brought them)."""
    box = open_box
    box.data.chmod(0o1777)
    planted = box.data / ".swapctl-fetch.json"
    subprocess.run([*NOBODY, "sh", "-c", f"yes 'not a record' | head -n 5000 > {planted}"], check=True)
    box.log.write_bytes(b"line one\n")
    box.write_playbook(logs={"paths": [f"{box.data}/.*", str(box.log)]})
    dest = tmp_path / "logs"
    for _ in range(3):
        r = swapctl("fetch-logs", "lab", "--dest", str(dest), "--json", "-p", str(box.playbook_path))
        assert r.returncode == 0, r.stderr
    record = json.loads((dest / "lab" / ".swapctl-fetch.json").read_text())
    assert record[str(planted)]["local"] == "_.swapctl-fetch.json" and record[str(box.log)]["local"] == "cuzk.log"
    assert (dest / "lab" / "_.swapctl-fetch.json").read_bytes() == planted.read_bytes()
    assert (dest / "lab" / "cuzk.log").read_bytes() == b"line one\n"


def test_a_local_record_that_is_no_record_is_named_in_one_line(box, tmp_path):
    box.write_playbook(logs={"paths": [str(box.log)]})
    box.log.write_bytes(b"x\n")
    (tmp_path / "logs" / "lab").mkdir(parents=True)
    record = tmp_path / "logs" / "lab" / ".swapctl-fetch.json"
    record.write_text("{}not a record\n")
    r = swapctl("fetch-logs", "lab", "--dest", str(tmp_path / "logs"), "-p", str(box.playbook_path))
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line == f"swapctl: lab: {record} is not fetch-logs' record; move it away (the next fetch then begins " \
                   "each file again, in new local names)"


# -- 10: one deadline for the whole of a remote call --------------------------------------------------

@pytest.fixture(scope="module")
def talking_sudo(tmp_path_factory, shared_dir):  # noqa: F811
    """A real sshd taking real logins that are not root (made with useradd), whose `sudo` answers
    `sudo -n true` with a line every 0.2 s, for ever."""
    from test_sudo import sudo_server

    bin_dir = shared_dir / "talking-sudo-bin"  # the login user's to run: the lab's own directories are root's
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text("#!/bin/sh\nwhile :; do echo 'sudo: still thinking' >&2; sleep 0.2; done\n")
    (bin_dir / "sudo").chmod(0o755)
    yield from sudo_server(tmp_path_factory.mktemp("talking-sudo"), path=f"{bin_dir}:{os.environ['PATH']}")


def test_a_sudo_that_never_stops_talking_is_held_to_one_deadline(talking_sudo, tmp_path, swapctl_env):
    """Its limit applied per read: a sudo saying a line a second held `status` for as long as it talked."""
    server, users = talking_sudo
    data = server.data / "talking"
    data.mkdir()
    box = Box(server, data, tmp_path)
    box.write_playbook(host={"user": users.sudoer, "become": "sudo"})
    began = time.monotonic()
    r = swapctl("--connect-timeout", "1.5", "status", "lab", "-p", str(box.playbook_path), timeout=60)
    took = time.monotonic() - began
    assert r.returncode == 1, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line == (f"swapctl: lab: `sudo -n true` did not finish within 3 s (twice --connect-timeout); run it there "
                    f"as {users.sudoer} to see what it waits for")
    assert took < 10, f"{took:.1f} s"


# `nobody` listening where the daemon's status would be (the daemon is down): it answers every request
# with a byte every 0.2 s, for ever
DRIP = r"""
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
while True:
    c, _ = s.accept()
    try:
        c.recv(65536)
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
        while True:
            c.sendall(b" ")
            time.sleep(0.2)
    except OSError:
        c.close()
"""


def test_a_status_url_that_never_finishes_answering_costs_status_two_seconds(tmp_path, swapctl_env):
    """On a host without curl the view is read with wget, whose -T 2 bounds each read: a server sending a
    byte every 0.2 s held the status script to its own deadline (80 s), and status failed."""
    from conftest import own_box
    from lab import free_port, path_without

    port = free_port()
    drip = hostile(["/usr/bin/python3", "-c", DRIP, str(port)], {"PATH": "/usr/bin:/bin"})
    try:
        wait_until(lambda: subprocess.run(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"],
                                          capture_output=True).returncode == 0, what="nobody's server")
        with own_box(tmp_path, path=str(path_without(tmp_path / "no-curl", "curl"))) as box:
            box.write_playbook(daemon={"status_url": f"http://127.0.0.1:{port}/status"})
            began = time.monotonic()
            r = swapctl("status", "lab", "-p", str(box.playbook_path), env=WIDE, timeout=100)
            took = time.monotonic() - began
        assert r.returncode == 0, r.stderr
        assert f"daemon's view: no status (http://127.0.0.1:{port}/status: " in r.stdout, r.stdout
        assert took < 15, f"{took:.1f} s"
    finally:
        end(drip)


FORGE = r"""
import os, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
body = os.environ["BODY"].encode()  # not on its command line, which status shows
while True:
    c, _ = s.accept()
    c.recv(65536)
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    c.close()
"""


def test_a_status_port_answering_with_a_releases_section_adds_no_release(tmp_path, swapctl_env):
    """Whoever listens on daemon.status_url's port (any user, once the daemon is gone) writes into the status
    script's output: a `==> releases` line in its answer came before the real section and was read as the
    host's releases: a release that does not exist, shown by status and offered to deploy and rollback."""
    from swapctl.facts.releases import Release

    from conftest import own_box
    from lab import free_port

    port = free_port()
    fake = Release(sha256="ab" * 32, size=1, name="cuzk", created="2026-01-01T00:00:00Z", by="nobody")
    server = hostile(["/usr/bin/python3", "-c", FORGE, str(port)],
                     {"PATH": "/usr/bin:/bin", "BODY": "{}\n==> releases\n" + fake.to_json() + "\n"})
    try:
        wait_until(lambda: subprocess.run(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"],
                                          capture_output=True).returncode == 0, what="nobody's server")
        with own_box(tmp_path) as box:
            box.write_playbook(daemon={"status_url": f"http://127.0.0.1:{port}/status"})
            r = swapctl("status", "lab", "--json", "-p", str(box.playbook_path), env=WIDE, timeout=100)
    finally:
        end(server)
    assert r.returncode == 0, r.stderr
    assert "ababababab" not in r.stdout, "a release forged by the status port is shown"
    assert json.loads(r.stdout)["hosts"]["lab"]["releases"] == [], r.stdout[-2000:]
