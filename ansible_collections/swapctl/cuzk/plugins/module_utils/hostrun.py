# Running swapctl's host scripts on this host (the module runs on the GPU box itself), and the deploy lock.
from __future__ import annotations

import json
import os
import pwd
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable

from ansible_collections.swapctl.cuzk.plugins.module_utils.settings import HostError, Settings
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.releases import (
    now_iso,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.host import scripts, sh_texts
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.remote.cmd import Cmd, Secret
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import words

scripts.TEXTS.update(sh_texts.TEXTS)


# -- running the host scripts ---------------------------------------------------------------------------

def argv(cmd: Cmd) -> list[str]:
    """`cmd` as the host's shell would exec it after parsing cmd.render(): the same argv, unquoted."""
    return [p.value if isinstance(p, Secret) else p for p in cmd.argv]


def run(cmd: Cmd, timeout: float = 300, check: bool = True) -> str:
    """Runs `cmd` with its named inputs on stdin; its stdout."""
    r = subprocess.run(argv(cmd), input=cmd.feed(), capture_output=True, timeout=timeout, check=False)
    if check and r.returncode != 0:
        raise HostError(f"{cmd} exited {r.returncode}: {r.stderr.decode(errors='replace').strip()[-600:]}")
    return r.stdout.decode("utf-8", "replace")


def stream(cmd: Cmd, line: Callable[[str], None], timeout: float) -> None:
    """Runs `cmd`, handing each line of its stdout to `line` as it comes, until it ends or `timeout` passes."""
    proc = subprocess.Popen(argv(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if proc.stdin is None or proc.stdout is None:
        raise HostError(f"{cmd.label}: no pipes to it")
    proc.stdin.write(cmd.feed())
    proc.stdin.close()
    deadline, buf, fd = time.monotonic() + timeout, b"", proc.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            raise HostError(f"{cmd.label} did not end within {timeout:g} s; the host may be mid-swap: look at its "
                            f"journal and the daemon before running again")
        ready = select.select([fd], [], [], left)[0]
        chunk = os.read(fd, 65536) if ready else b""
        if ready and not chunk:
            break
        buf += chunk
        *done, buf = buf.split(b"\n")
        for raw in done:
            line(raw.decode("utf-8", "replace"))
    if buf:
        line(buf.decode("utf-8", "replace"))
    proc.wait(timeout=max(1.0, deadline - time.monotonic()))


class Lock:
    """The host's deploy lock (lock.sh), held while this process keeps the script's stdin open."""

    def __init__(self, s: Settings):
        info = json.dumps({"by": f"ansible {who()}", "pid": os.getpid(), "since": now_iso()})
        cmd = scripts.command("lock.sh", dir=s.state, info=info, silence=int(s.lock_silence_s), user=s.user)
        self.proc = subprocess.Popen(argv(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        if self.proc.stdin is None or self.proc.stdout is None:
            raise HostError("lock.sh: no pipes to it")
        self.proc.stdin.write(cmd.feed())
        self.proc.stdin.flush()
        got = words.parse_lock(self.proc.stdout.readline().decode("utf-8", "replace").rstrip("\n"))
        if got.word is not words.Word.LOCKED:
            self.close()
            why = {words.Word.HELD: f"another deploy holds the host's lock ({got.detail})",
                   words.Word.SWAPPING: "a swap started by an earlier deploy still runs on the host",
                   words.Word.UNSAFE: f"state directory {got.detail} may be written by others: make it root's, "
                                       f"mode 700"}.get(got.word, "") if got.word else ""
            why = why or f"the lock could not be taken ({got.detail})"
            raise HostError(f"{why}; nothing changed on the host")
        # lock.sh drops the lock after `silence` seconds without a byte (lock.Heartbeat): one every few
        self.done = threading.Event()
        self.beat = threading.Thread(target=self._beat, args=(min(2.0, s.lock_silence_s / 5),), daemon=True)
        self.beat.start()

    def _beat(self, every: float) -> None:
        while not self.done.wait(every):
            try:
                if self.proc.stdin is None:
                    return
                self.proc.stdin.write(b".")
                self.proc.stdin.flush()
            except (OSError, ValueError):  # the lock script ended, or close() closed its stdin
                return

    def close(self) -> None:
        done = getattr(self, "done", None)
        if done is not None:
            done.set()
            self.beat.join()
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def who() -> str:
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"
