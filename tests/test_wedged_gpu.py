"""Issue 20, part 3: a wedged GPU. When a GPU falls off the bus (Xid 79) or its driver hangs, nvidia-smi never
returns. status must still show everything else and name the hang within nvidia-smi's limit, deploy must refuse
before any change, and nothing swapctl started may stay behind on the host.

No GPU exists here, so the hang is a stand-in: an `nvidia-smi` first in the host's PATH that records its pid
and its child's, then sleeps forever, as the real one waits in the driver."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from conftest import own_box
from lab import prover_config, swapctl, wait_until

HUNG = "#!/bin/sh\necho $$ >> {pids}; sleep 2147483647 & echo $! >> {pids}; wait\n"
LIMIT_S = 2


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def status_scripts(box) -> list[int]:
    """Live status scripts run for this box (their argv names its binary)."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"swapctl-status" in argv and str(box.binary).encode() in argv and alive(int(p.name)):
            found.append(int(p.name))
    return found


def nothing_left(box, pids_file: Path) -> bool:
    """The hung nvidia-smi, its child and the status script are all gone from the host."""
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    return bool(pids) and not any(map(alive, pids)) and not status_scripts(box)


def sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_status_shows_the_daemon_and_memory_and_names_the_hang_within_its_limit(tmp_path, prover):
    pids = tmp_path / "nvidia-smi.pids"
    with own_box(tmp_path, tools={"nvidia-smi": HUNG.format(pids=pids)}) as box:
        box.write_playbook(gpu={"nvidia_smi_timeout_s": LIMIT_S})
        pid = box.start_by_hand(prover)
        started = time.monotonic()
        r = swapctl("status", "lab", "--json", "-p", str(box.playbook_path))
        took = time.monotonic() - started
        assert r.returncode == 0, r.stderr
        assert took < LIMIT_S + 8, f"status took {took:.1f} s"  # not the 60 s it gave up after, with nothing shown
        st = json.loads(r.stdout)["hosts"]["lab"]
        assert [d["pid"] for d in st["daemons"]] == [pid]
        assert st["memory"]["total_kib"] >= st["memory"]["available_kib"] > 0
        assert [d["path"] for d in st["disks"]] == [str(box.data)] and st["sessions"]
        assert st["gpu_hung"] is True and st["gpus"] == []
        assert st["gpu_error"] == (f"nvidia-smi failed: did not answer within {LIMIT_S} s "
                                   f"(GPU or driver wedged? look for an Xid in dmesg)")
        wait_until(lambda: nothing_left(box, pids), timeout=10, what="the hung nvidia-smi and the status script gone")

        pids.unlink()
        r = swapctl("status", "lab", "-p", str(box.playbook_path), env={"COLUMNS": "300"})  # no line folded
        assert r.returncode == 0, r.stderr
        assert f"daemon: pid {pid}" in r.stdout and "memory: " in r.stdout and f"disk {box.data}" in r.stdout
        assert f"GPUs: nvidia-smi failed: did not answer within {LIMIT_S} s (GPU or driver wedged?" in r.stdout
        wait_until(lambda: nothing_left(box, pids), timeout=10, what="the hung nvidia-smi and the status script gone")


def test_deploy_refuses_on_a_wedged_gpu_and_the_daemon_keeps_running(tmp_path, prover, prover_b):
    pids = tmp_path / "nvidia-smi.pids"
    with own_box(tmp_path, tools={"nvidia-smi": HUNG.format(pids=pids)}) as box:
        box.write_playbook(gpu={"nvidia_smi_timeout_s": LIMIT_S})
        pid = box.start_by_hand(prover)
        r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path))
        assert r.returncode == 3, r.stderr
        # the playbook's limit reaches the preflight's status facts
        assert f"nvidia-smi failed: did not answer within {LIMIT_S} s" in r.stderr
        assert "(GPU or driver wedged?" in r.stderr
        assert "the running one is left alone" in r.stderr and "--ignore-gpu-hang" in r.stderr
        assert box.daemons() == [pid] and sha(Path(f"/proc/{pid}/exe")) == sha(prover)
        assert not box.binary.is_symlink()  # nothing changed: no release switched in
        wait_until(lambda: nothing_left(box, pids), timeout=10, what="the hung nvidia-smi and the status script gone")


def test_ignore_gpu_hang_swaps_anyway_and_names_the_hang_in_the_plan(tmp_path, prover, prover_b):
    pids = tmp_path / "nvidia-smi.pids"
    with own_box(tmp_path, tools={"nvidia-smi": HUNG.format(pids=pids)}) as box:
        box.write_playbook(gpu={"nvidia_smi_timeout_s": LIMIT_S})
        box.start_by_hand(prover)
        r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "--ignore-gpu-hang",
                    "-p", str(box.playbook_path))
        assert r.returncode == 0, r.stderr
        assert "warning: nvidia-smi failed: did not answer within" in r.stderr
        pid = box.one_daemon()
        assert sha(Path(f"/proc/{pid}/exe")) == sha(prover_b)
        wait_until(lambda: nothing_left(box, pids), timeout=10, what="the hung nvidia-smi and the status script gone")


# nvidia-smi answers the preflight (the replaying stand-in: one H200, its memory in use known), then hangs
# when the memory wait asks for memory.used, as a GPU falling off the bus while its daemon dies would
HANGS_IN_THE_MEMORY_WAIT = ("#!/bin/sh\ncase \"$*\" in *index,memory.used*) echo $$ >> {pids}; "
                            "exec sleep 2147483647;; esac\nexec {python} {standin} \"$@\"\n")


def test_a_gpu_that_hangs_in_the_memory_wait_holds_the_swap_no_longer_than_its_limit(tmp_path, prover, prover_b):
    import sys

    pids = tmp_path / "nvidia-smi.pids"
    tool = HANGS_IN_THE_MEMORY_WAIT.format(pids=pids, python=sys.executable,
                                           standin=Path(__file__).parent / "standin_nvidia_smi.py")
    with own_box(tmp_path, tools={"nvidia-smi": tool}) as box:
        box.write_playbook(gpu={"nvidia_smi_timeout_s": LIMIT_S}, memory={"release_timeout_s": 60})
        box.start_by_hand(prover, prover_config())
        r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path), timeout=50)
        assert r.returncode == 0, r.stderr
        pid = box.one_daemon()
        assert sha(Path(f"/proc/{pid}/exe")) == sha(prover_b)
        hung = [int(p) for p in pids.read_text().split()]
        assert hung, "the memory wait never asked nvidia-smi: nothing was tested"
        wait_until(lambda: not any(map(alive, hung)), timeout=10, what="the hung nvidia-smi killed")
