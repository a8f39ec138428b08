"""Uploads through the real sshd: zstd stream, zstd patch, pipelined SFTP, resume, and the sha256 gate."""

import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from swapctl.errors import LockHeld, Refused, Unreachable
from swapctl.playbook import load
from swapctl.remote import connect
from swapctl.swap import deploy as swap_deploy
from swapctl.swap.deploy import Swap
from swapctl.swap.upload import CACHE_KEEP, CHUNK, PIECE, Base, Cache, Frames, Patch

from conftest import Box, own_box
from lab import path_without, session_of, wait_until
from test_deploy import deploy, exe_sha, journal, lock_held, sha


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history and the binary cache go to the test's own directories."""


@pytest.fixture(scope="module")
def big_b(prover_b, tmp_path_factory) -> Path:
    """Build B with 20 MiB of incompressible data appended (an ELF runs the same with trailing bytes):
    several zstd frames, so an upload can be cut between them."""
    path = tmp_path_factory.mktemp("big") / "prover-big"
    path.write_bytes(prover_b.read_bytes() + random.Random(7).randbytes(20 << 20))
    path.chmod(0o755)
    return path


def rebuilt(src: Path, dest: Path) -> Path:
    """A rebuild that changed a little: a few hundred bytes flipped and 4 KiB inserted, past the code."""
    data = bytearray(src.read_bytes())
    rng = random.Random(11)
    code = len(data) - (20 << 20)
    for _ in range(300):
        data[rng.randrange(code, len(data))] ^= 0xFF
    at = code + (5 << 20)
    data[at:at] = rng.randbytes(4096)
    dest.write_bytes(bytes(data))
    dest.chmod(0o755)
    return dest


def release_file(box: Box, binary: Path) -> Path:
    return box.data / ".swapctl" / "cuzk" / "releases" / sha(binary)[:12] / "cuzk"


def partials(box: Box) -> list[Path]:
    return list((box.data / ".swapctl" / "cuzk" / "releases").glob(".upload-*"))


def test_fresh_upload_streams_zstd_and_installs_identical_bytes(box, prover, prover_b):
    box.start_by_hand(prover)
    r = deploy(box, prover_b)
    assert r.returncode == 0, r.stderr
    up = journal(box)[-1]["upload"]
    assert up["method"] == "zstd" and 0 < up["wire_bytes"] < prover_b.stat().st_size
    assert release_file(box, prover_b).read_bytes() == prover_b.read_bytes()
    assert "upload by zstd" in r.stdout and not partials(box)


def test_rebuilt_binary_goes_as_a_patch_against_the_release_the_host_has(box, prover, big_b, tmp_path):
    box.start_by_hand(prover)
    assert deploy(box, big_b).returncode == 0
    new = rebuilt(big_b, tmp_path / "prover-rebuilt")
    r = deploy(box, new)
    assert r.returncode == 0, r.stderr
    up = journal(box)[-1]["upload"]
    assert up["method"] == "patch" and up["base"] == sha(big_b)[:12]
    assert up["wire_bytes"] < new.stat().st_size // 100
    assert release_file(box, new).read_bytes() == new.read_bytes()
    assert [exe_sha(p) for p in box.daemons()] == [sha(new)]


def test_patch_against_a_base_changed_on_the_host_falls_back_to_a_full_upload(box, prover, big_b, tmp_path):
    box.start_by_hand(prover)
    assert deploy(box, big_b).returncode == 0
    base = release_file(box, big_b)
    data = bytearray(base.read_bytes())
    data[len(data) // 2] ^= 0xFF  # someone edited the old release on the host
    edited = base.with_name("edited")
    edited.write_bytes(bytes(data))
    edited.replace(base)  # it runs, so replaced, not written in place
    new = rebuilt(big_b, tmp_path / "prover-rebuilt")
    r = deploy(box, new)
    assert r.returncode == 0, r.stderr
    assert journal(box)[-1]["upload"]["method"] == "zstd"
    assert release_file(box, new).read_bytes() == new.read_bytes()


def test_the_plan_chooses_the_upload_method_once_and_the_deploy_and_dry_run_follow_it(box, prover, big_b, tmp_path):
    # issue 32: one rule (send.choose), read by the preflight work, the receive started before the lock,
    # the upload and --dry-run alike
    box.start_by_hand(prover)
    book = load(box.playbook_path)
    new = rebuilt(big_b, tmp_path / "prover-rebuilt")
    for binary, kind in ((big_b, "zstd"), (new, "patch"), (new, "present")):
        with connect(book.hosts["lab"]) as host, Swap(host, book) as sw:
            plan = sw.plan(str(binary), restart=kind == "present")
            assert plan.upload.kind == kind
            said = [what for what, _ in plan.commands if what.startswith("receive") or "sftp put" in what]
            assert said == ([f"receive {plan.upload.said()} into {box.data}/.swapctl/cuzk/releases/.upload-"
                             f"{sha(binary)[:12]}; takes its sha256 (openssl dgst -sha256, else sha256sum): it must "
                             f"be {sha(binary)}; then ldd"] if kind != "present" else [])
            if kind == "patch":
                assert plan.upload.base == Base(sha(big_b)[:12], str(release_file(box, big_b)),
                                                Cache().get(sha(big_b)))
            swap_deploy.deploy(sw, plan)
        assert journal(box)[-1]["upload"]["method"] == kind
    assert [exe_sha(p) for p in box.daemons()] == [sha(new)]


def test_host_without_zstd_gets_pipelined_sftp(tmp_path, prover, prover_b):
    bin_dir = path_without(tmp_path / "no-zstd-bin", "zstd")
    with own_box(tmp_path, str(bin_dir)) as box:
        box.start_by_hand(prover)
        r = deploy(box, prover_b)
        assert r.returncode == 0, r.stderr
        up = journal(box)[-1]["upload"]
        assert up["method"] == "sftp" and up["wire_bytes"] == prover_b.stat().st_size
        assert release_file(box, prover_b).read_bytes() == prover_b.read_bytes()


def test_a_host_without_zstd_is_planned_for_sftp_and_dry_run_says_so(tmp_path, prover, prover_b):
    bin_dir = path_without(tmp_path / "no-zstd-bin", "zstd")
    with own_box(tmp_path, str(bin_dir)) as box:
        box.start_by_hand(prover)
        r = deploy(box, prover_b, "--dry-run")
        assert r.returncode == 0, r.stderr
        tmp = f"{box.data}/.swapctl/cuzk/releases/.upload-{sha(prover_b)[:12]}"
        assert f"  2. sftp put {prover_b} {tmp}, then:" in r.stderr
        assert "receive a zstd" not in r.stderr and not partials(box)
        Path(tmp).parent.mkdir(mode=0o700, parents=True)  # as a deploy makes it (the dry run made nothing)
        Path(tmp).write_bytes(prover_b.read_bytes()[:4096])  # an upload cut after 4 KiB: sftp goes on from there
        r = deploy(box, prover_b, "--dry-run")
        assert r.returncode == 0, r.stderr
        assert f"  2. sftp put {prover_b} {tmp} (resumed after 4096 bytes), then:" in r.stderr


def test_upload_killed_halfway_resumes_from_the_bytes_on_the_host(box, prover, big_b):
    pid = box.start_by_hand(prover)
    box.write_playbook(daemon={"env": {"PROVER_TOKEN": "hunter2-secret"}, "secret_env": ["PROVER_TOKEN"]})
    book = load(box.playbook_path)
    tmp = box.data / ".swapctl" / "cuzk" / "releases" / f".upload-{sha(big_b)[:12]}"

    cuts: list[int] = []

    def cut(event) -> None:  # once: the bar moves by pieces, and pieces go on until the cut is noticed
        if event.step == "upload" and event.done and event.done >= CHUNK and not cuts:
            wait_until(lambda: tmp.exists() and tmp.stat().st_size >= CHUNK // 2, what="bytes on the host")
            cuts.append(session_of("swapctl-receive"))
            os.kill(cuts[0], signal.SIGKILL)  # the link drops mid-upload

    with connect(book.hosts["lab"]) as host:
        sw = Swap(host, book, events=cut)
        with pytest.raises(Unreachable, match="connection lost during the receive step") as lost:
            swap_deploy.deploy(sw, sw.plan(str(big_b)))
    assert "hunter2" not in str(lost.value) + lost.value.detail  # the manifest carries the environment
    assert box.daemons() == [pid] and exe_sha(pid) == sha(prover)
    wait_until(lambda: not _receiving(), what="the host side of the cut upload to end")
    kept = tmp.stat().st_size
    assert CHUNK // 2 <= kept < big_b.stat().st_size
    assert tmp.read_bytes() == big_b.read_bytes()[:kept]  # what arrived is a true prefix

    r = deploy(box, big_b)
    assert r.returncode == 0, r.stderr
    up = journal(box)[-1]["upload"]
    assert up["method"] == "zstd" and up["resumed_from"] == kept
    assert up["wire_bytes"] < big_b.stat().st_size - kept + CHUNK  # only the rest went over the wire
    assert [exe_sha(p) for p in box.daemons()] == [sha(big_b)] and not partials(box)


def test_upload_started_before_the_lock_touches_nothing_when_the_lock_is_held(box, prover, big_b, tmp_path):
    # The host side of the upload starts before the lock, so that its shell start-up runs beside the
    # lock's; until the upload says GO it must not act. Here it would be a patch, which begins by
    # emptying the upload file: another deploy's upload of the same build, under way, must survive.
    box.start_by_hand(prover)
    assert deploy(box, big_b).returncode == 0  # the host and this machine's cache have big_b: a patch next
    new = rebuilt(big_b, tmp_path / "prover-rebuilt")
    tmp = box.data / ".swapctl" / "cuzk" / "releases" / f".upload-{sha(new)[:12]}"
    part = new.read_bytes()[: 1 << 20]
    tmp.write_bytes(part)
    with lock_held(box):
        r = deploy(box, new)
    assert r.returncode == 3 and "another deploy holds the lock" in r.stderr
    wait_until(lambda: not _receiving(), what="the receive step started ahead to end")
    assert tmp.read_bytes() == part
    assert not release_file(box, new).exists()


def test_a_deploy_refused_at_the_lock_ends_the_receive_it_started(box, prover, prover_b):
    # Through the library, not the CLI: the receive started before the lock must end with the refusal,
    # not wait on the open connection for a GO that never comes.
    box.start_by_hand(prover)
    book = load(box.playbook_path)
    with lock_held(box), connect(book.hosts["lab"]) as host:
        sw = Swap(host, book)
        with pytest.raises(LockHeld):
            swap_deploy.deploy(sw, sw.plan(str(prover_b)))
        wait_until(lambda: not _receiving(), what="the receive started ahead to end", timeout=10)


def _receiving() -> bool:
    try:
        session_of("swapctl-receive")
        return True
    except AssertionError:
        return False


def test_upload_corrupted_on_the_host_never_becomes_a_release(tmp_path, prover, prover_b):
    # A host whose zstd damages one byte of what it writes: a real broken tool, caught only by the sha256.
    zstd = ("#!/bin/sh\n/usr/bin/zstd \"$@\" | python3 -c 'import sys; d = bytearray(sys.stdin.buffer.read()); "
            "d[len(d) // 2] ^= 1; sys.stdout.buffer.write(d)'\n")
    with own_box(tmp_path, tools={"zstd": zstd}) as box:
        pid = box.start_by_hand(prover)
        r = deploy(box, prover_b)
        assert r.returncode == 3, r.stderr
        assert "the upload arrived corrupted" in r.stderr and "deploy again" in r.stderr
        assert box.daemons() == [pid] and exe_sha(pid) == sha(prover)
        assert not release_file(box, prover_b).exists() and not partials(box)
        assert not box.binary.is_symlink() and sha(box.binary) == sha(prover)


@pytest.fixture
def small_disk(box):
    """The box's data directory on a 48 MiB tmpfs: a host whose disk can really fill up."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(box.data)], check=True)
    yield box
    box.kill_all()
    subprocess.run(["umount", "-l", str(box.data)], check=True)


def test_disk_full_during_upload_removes_the_partial_and_keeps_the_daemon(small_disk, prover, big_b):
    box = small_disk
    pid = box.start_by_hand(prover)
    book = load(box.playbook_path)
    filler = box.data / "other-job.out"

    def fill(event) -> None:
        if event.step == "upload" and event.done and not filler.exists():
            # another job writes until the disk is full, as logs do at 3 a.m.
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True)

    with connect(book.hosts["lab"]) as host:
        sw = Swap(host, book, events=fill)
        with pytest.raises(Refused, match="disk filled up during the upload.*partial upload was removed"):
            swap_deploy.deploy(sw, sw.plan(str(big_b)))
    assert box.daemons() == [pid] and exe_sha(pid) == sha(prover)
    assert not partials(box) and not release_file(box, big_b).exists()
    assert not box.binary.is_symlink() and sha(box.binary) == sha(prover)


def test_cache_keeps_only_the_newest_binaries(tmp_path):
    cache = Cache(tmp_path / "cache")
    files = []
    for i in range(CACHE_KEEP + 2):
        f = tmp_path / f"b{i}"
        f.write_bytes(bytes([i]) * 10)
        os.utime(f)
        cache.add(str(f), f"{i:064x}")
        os.utime(cache.root / f"{i:064x}", (1000 + i, 1000 + i))  # added in this order
        files.append(f)
    kept = sorted(p.name for p in cache.root.iterdir())
    assert kept == [f"{i:064x}" for i in range(2, CACHE_KEEP + 2)]
    assert cache.get(f"{3:064x}").read_bytes() == files[3].read_bytes()
    assert cache.get(f"{0:064x}") is None
    shutil.rmtree(cache.root)


def test_hosts_on_the_same_base_read_one_patch_made_once(big_b, tmp_path):
    """A fleet's hosts that run the same release share one zstd --patch-from, also a host that comes later."""
    new = rebuilt(big_b, tmp_path / "rebuilt")
    base = Base("b", "/remote/path", big_b)
    first, second = Patch.of(base, str(new)), Patch.of(base, str(new))
    assert first is second
    pids = {first.proc.pid}
    a, b = b"".join(first.chunks()), b"".join(second.chunks())
    first.release()
    second.release()
    assert a == b and len(a) < 100_000
    out = subprocess.run(["zstd", "-d", "-q", "-c", "--long=31", f"--patch-from={big_b}"], input=a,
                         capture_output=True, check=True).stdout
    assert out == new.read_bytes()
    later = Patch.of(base, str(new))  # a rolling deploy's next host: the made patch, no new process
    pids.add(later.proc.pid)
    assert b"".join(later.chunks()) == a and len(pids) == 1
    later.release()


def test_frames_made_before_the_upload_and_during_it_unpack_to_the_file(big_b):
    """The first frames are compressed during the preflight, the rest as the link takes them; a resumed
    upload starts at its offset. Checked by unpacking with the zstd CLI, as the host does."""
    offset = CHUNK + 12345
    early = Frames(str(big_b), offset)
    wait_until(lambda: early.out.qsize() >= 3, what="frames made before the upload")
    done = []
    stream = b"".join(early.send(done.append))
    out = subprocess.run(["zstd", "-d", "-q", "-c"], input=stream, capture_output=True, check=True).stdout
    assert out == big_b.read_bytes()[offset:] and sum(done) == len(out)
    # the bar moves as the wire takes each piece, not once a 4 MiB frame (2 s of a 16 Mbit/s link): these
    # bytes are incompressible, so a piece stands for about as many bytes of the file
    assert len(done) >= len(out) // PIECE and max(done) <= PIECE * 1.01, (len(done), max(done))


def test_a_ctrl_c_as_the_cache_thread_starts_is_an_interrupt_and_the_daemon_runs_on(box, prover, prover_b,
                                                                                     monkeypatch):
    """The stateful test found it: Ctrl-C just after the upload ended in `RuntimeError: cannot join thread
    before it is started`, exit 1. The interrupt landed between making the cache's thread and starting it,
    and the clean-up joined the thread. A signal cannot be aimed at one bytecode, so this test raises the
    KeyboardInterrupt in that thread's start (a patched Thread.start, for that thread only), on a real sshd."""
    import threading

    real = threading.Thread.start
    hit = []

    def interrupted(thread):
        if getattr(getattr(thread, "_target", None), "__func__", None) is Cache.add:
            hit.append(thread)
            raise KeyboardInterrupt
        real(thread)

    pid = box.start_by_hand(prover)
    book = load(box.playbook_path)
    with connect(book.hosts["lab"]) as host:
        sw = Swap(host, book)
        plan = sw.plan(str(prover_b))
        monkeypatch.setattr(threading.Thread, "start", interrupted)
        with pytest.raises(Refused, match="interrupted before the old daemon was stopped"):
            swap_deploy.deploy(sw, plan)  # raised RuntimeError from the clean-up before the fix
        monkeypatch.setattr(threading.Thread, "start", real)
    assert hit and box.daemons() == [pid] and exe_sha(pid) == sha(prover)
    assert not box.binary.is_symlink() and sha(box.binary) == sha(prover)


# swapctl, with one real SIGINT sent to itself at a chosen instant: in paramiko's Transport._send_user_message
# (paramiko 5.1 transport.py:1826-1834), after it takes clear_to_send_lock and before the `try` that gives it
# back, on the first data the upload sends. The signal cannot be aimed at that one line from outside, so the
# Event the line reads is wrapped, for that call only, by one that sends it; the handler and the signal are real.
SIGINT_IN_SEND = """
import os, signal, sys, threading
import paramiko.transport as t
import swapctl.swap.upload as up
state = {"armed": False, "fired": False}
class Trip:
    def __init__(self, event): self.event = event
    def __getattr__(self, name): return getattr(self.event, name)
    def is_set(self):
        if not state["fired"]:
            state["fired"] = True
            print("SIGINT sent inside _send_user_message", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGINT)
        return self.event.is_set()
real_send, real_counted = t.Transport._send_user_message, up.Uploader._counted
def send(self, data):
    if not state["armed"] or state["fired"] or threading.current_thread() is not threading.main_thread():
        return real_send(self, data)
    event, self.clear_to_send = self.clear_to_send, Trip(self.clear_to_send)
    try:
        return real_send(self, data)
    finally:
        self.clear_to_send = event
def counted(self, chunks):
    for chunk in real_counted(self, chunks):
        state["armed"] = state["armed"] or chunk != b"GO\\n"
        yield chunk
t.Transport._send_user_message, up.Uploader._counted = send, counted
sys.argv = ["swapctl", *sys.argv[1:]]
from swapctl.cli import main
main()
"""


def test_a_ctrl_c_inside_paramikos_send_during_the_upload_ends_the_deploy_and_the_daemon_runs_on(box, prover, big_b):
    """The third campaign's run 219 (tests/data/faults-h100-2026-12-06b): a Ctrl-C during the upload, and the
    controller still ran 90 s later. A KeyboardInterrupt raised inside paramiko between a lock's acquire and
    its `try` leaves the lock held, and every later send on the connection (the unlock, the receive's end)
    waits for it forever. A press while swapctl is inside paramiko is now held until the call returns."""
    from lab import _ended

    pid = box.start_by_hand(prover)
    r = _ended([sys.executable, "-c", SIGINT_IN_SEND, "deploy", "lab", "--binary", str(big_b), "--yes", "-p",
                str(box.playbook_path)], ("deploy",), None, 60)
    assert "SIGINT sent inside _send_user_message" in r.stderr, r.stderr
    assert r.returncode == 3 and "interrupted before the old daemon was stopped" in r.stderr, r.stderr
    assert box.daemons() == [pid] and exe_sha(pid) == sha(prover)
    assert not box.binary.is_symlink() and sha(box.binary) == sha(prover)
    assert deploy(box, big_b).returncode == 0  # the host's lock was given back
