"""Records what the host scripts print in real runs into tests/data/transcripts/, for tests/test_report.py.

    python3 tests/record_transcripts.py [SCENARIO...]     (as root, like the tests; rewrites the files)

Each scenario is a deploy through the library against a real sshd on loopback with real prover processes,
as the flow tests run them. A transcript holds one line per report line: the seconds since the script
began, a tab, the line as the host printed it. Lines of the daemon's log (LOG ...) keep their text.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from swapctl.errors import SwapctlError  # noqa: E402
from swapctl.playbook import load  # noqa: E402
from swapctl.remote import connect  # noqa: E402
from swapctl.remote.cmd import Cmd  # noqa: E402
from swapctl.remote.host import Host, Prepared, Result  # noqa: E402
from swapctl.swap import deploy as swap_deploy  # noqa: E402

from conftest import Box  # noqa: E402
from lab import build_prover, make_server, prover_config  # noqa: E402

OUT = Path(__file__).parent / "data" / "transcripts"
RECORDED = ("lock", "receive", "install", "swap", "stop")


class Recording:
    """Taps one host's report scripts: what each printed, line by line, with when."""

    def __init__(self, host: Host):
        self.runs: list[tuple[str, list[tuple[float, str]]]] = []
        stream, prepare, hold = host.stream, host.prepare, host.hold

        def tapped_stream(cmd: Cmd, on_line, **kw) -> Result:  # type: ignore[no-untyped-def]
            began, lines = time.monotonic(), []

            def tap(line: str) -> None:
                lines.append((round(time.monotonic() - began, 3), line))
                on_line(line)

            try:
                return stream(cmd, tap, **kw)
            finally:
                self._keep(cmd, lines)

        def tapped_prepare(cmd: Cmd) -> Prepared:
            ready = prepare(cmd)
            send = ready._send

            def sent(chunks, timeout):  # type: ignore[no-untyped-def]
                began = time.monotonic()
                result = send(chunks, timeout)
                at = round(time.monotonic() - began, 3)
                self._keep(cmd, [(at, line) for line in result.stdout.splitlines()])
                return result

            ready._send = sent
            return ready

        def tapped_hold(cmd: Cmd, timeout: float = 30):  # type: ignore[no-untyped-def]
            held = hold(cmd, timeout)
            self._keep(cmd, [(0.0, held.first_line)])
            return held

        host.stream, host.prepare, host.hold = tapped_stream, tapped_prepare, tapped_hold  # type: ignore[method-assign]

    def _keep(self, cmd: Cmd, lines: list[tuple[float, str]]) -> None:
        if cmd.label in RECORDED:
            self.runs.append((cmd.label, lines))


def run_deploy(box: Box, binary: Path, scenario: str, *, hold_lock: bool = False) -> None:
    book = load(box.playbook_path)
    with connect(book.hosts["lab"]) as host:
        rec = Recording(host)
        sw = swap_deploy.Swap(host, book)
        try:
            if hold_lock:
                with connect(book.hosts["lab"]) as other:
                    first = swap_deploy.Swap(other, book)
                    first.lock()
                    try:
                        sw.lock()
                    finally:
                        first.unlock()
            else:
                swap_deploy.deploy(sw, sw.plan(str(binary)))
        except SwapctlError as exc:
            print(f"{scenario}: {exc.exit_code.name}: {exc}")
        else:
            print(f"{scenario}: ok")
    seen: dict[str, int] = {}
    for label, lines in rec.runs:
        seen[label] = seen.get(label, 0) + 1
        name = f"{scenario}.{label}" + (f".{seen[label]}" if seen[label] > 1 else "") + ".txt"
        text = "".join(f"{at:.3f}\t{_plain(line)}\n" for at, line in lines)
        (OUT / name).write_text(text)


def _plain(line: str) -> str:
    """A log line without its colours (the prover's tracing output), as a reader of the file wants it."""
    return re.sub(r"\x1b\[[0-9;]*m", "", line)


def missing_lib_binary(tmp: Path) -> Path:
    (tmp / "lib.c").write_text("int swapctl_test_fn(void) { return 1; }\n")
    (tmp / "main.c").write_text("int swapctl_test_fn(void);\nint main(void) { return swapctl_test_fn(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp / "libswapctlmissing.so"), str(tmp / "lib.c")],
                   check=True)
    subprocess.run(["gcc", "-o", str(tmp / "needs-lib"), str(tmp / "main.c"), f"-L{tmp}", "-lswapctlmissing"],
                   check=True)
    return tmp / "needs-lib"


def main(only: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="swapctl-transcripts-"))
    os.environ["XDG_STATE_HOME"], os.environ["XDG_CACHE_HOME"] = str(tmp / "state"), str(tmp / "cache")
    bins = tmp / "bin"
    a = build_prover(bins / "prover-a", TIMING="1", TAG="a")
    b = build_prover(bins / "prover-b", TIMING="1", TAG="b")
    crash = build_prover(bins / "prover-crash", FAULT="crash", TAG="crash")
    noready = build_prover(bins / "prover-noready", FAULT="noready", TAG="noready")
    server = make_server(tmp / "sshd")
    server.start()
    server.trust()

    def box(name: str, **daemon: object) -> Box:
        data = server.data / name
        data.mkdir(parents=True)
        bx = Box(server, data, tmp / name)
        (tmp / name).mkdir()
        bx.write_playbook(daemon=daemon or None)
        return bx

    scenarios = {
        "adopt": lambda bx: (bx.start_by_hand(a), run_deploy(bx, b, "adopt")),
        "sigkill": lambda bx: (bx.start_by_hand(a, prover_config(ignore_sigterm=True)), run_deploy(bx, b, "sigkill")),
        "memory-holder": lambda bx: (bx.start_by_hand(a, prover_config(child_hold_mib=8, child_linger_ms=1500)),
                                     run_deploy(bx, b, "memory-holder")),
        "crash": lambda bx: (bx.start_by_hand(a), run_deploy(bx, crash, "crash")),
        "first-noready": lambda bx: (bx.config.write_text(prover_config()), run_deploy(bx, noready, "first-noready")),
        "memory-timeout": lambda bx: (bx.start_by_hand(a, prover_config(child_hold_mib=16, child_linger_ms=60000)),
                                      run_deploy(bx, b, "memory-timeout")),
        "lock-held": lambda bx: (bx.start_by_hand(a), run_deploy(bx, b, "lock-held", hold_lock=True)),
        "missing-lib": lambda bx: (bx.start_by_hand(a), run_deploy(bx, missing_lib_binary(tmp), "missing-lib")),
    }
    settings: dict[str, dict[str, object]] = {
        "sigkill": {"stop_grace_s": 1}, "first-noready": {"ready_timeout_s": 1}, "memory-timeout": {},
    }
    try:
        for name, scenario in scenarios.items():
            if only and name not in only:
                continue
            for old in OUT.glob(f"{name}.*.txt"):
                old.unlink()
            bx = box(name, **settings.get(name, {}))
            if name == "memory-timeout":
                bx.write_playbook(memory={"release_timeout_s": 1})
            try:
                scenario(bx)
            finally:
                bx.kill_all()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
