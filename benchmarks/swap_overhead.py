#!/usr/bin/env python3
"""Time swapctl adds to a swap, against a hand-written ssh script and an Ansible playbook, in one run.

Each tool swaps build A of the stand-in prover for build B on a real sshd on loopback. A watcher on
this machine timestamps, from /proc and the log, the events the tools wait for:
  old gone   the old daemon has exited (its memory is back: MemAvailable crosses the threshold here)
  new start  the new process exists
  ready      the new daemon wrote its ready line (its timestamp in the log)
  reported   the tool said the new daemon is ready (swapctl prints it; the others are done when they exit)
Overheads: start gap = new start - old gone; report gap = reported - ready. Floor = what the daemon
needs itself: its exit after the signal plus its start-up (ready - new start).
exit gap = swapctl's exit - ready: what it does after the ready line (journal, pruning, summary, exit).
Usage: python3 benchmarks/swap_overhead.py [--runs N] [--before REV]   (root; needs sshd, g++)
--before REV runs swapctl as of git commit REV too, by turns with this one, for a before/after in one run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from swapctl.sandbox import build_prover, make_server, prover_config, start_daemon  # noqa: E402

START_DELAY_MS = 300  # the stand-in's "SRS load" before it is ready


def compiled(tree: Path) -> None:
    """swapctl's bytecode, as pip writes it when it installs swapctl: this machine's Python runs with
    PYTHONDONTWRITEBYTECODE=1, and an editable checkout would otherwise compile every module on every run
    (0.08 s of a `status HOST` here), which no installed swapctl does."""
    import compileall

    compileall.compile_dir(str(tree / "swapctl"), quiet=1)


class Watcher(threading.Thread):
    """Polls /proc every millisecond for the old daemon's exit and the new daemon's appearance."""

    def __init__(self, old_pid: int, data: Path):
        super().__init__(daemon=True)
        self.old_pid, self.data = old_pid, str(data).encode()
        self.old_gone = self.new_start = None
        self.stop = False

    def alive(self, pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def run(self) -> None:
        while not self.stop and (self.old_gone is None or self.new_start is None):
            now = time.time()
            if self.old_gone is None and not self.alive(self.old_pid):
                self.old_gone = now
            if self.new_start is None:
                for p in Path("/proc").iterdir():
                    if p.name.isdigit() and int(p.name) != self.old_pid:
                        try:
                            if (p / "cmdline").read_bytes().startswith(self.data) and self.alive(int(p.name)):
                                self.new_start = now
                                break
                        except OSError:
                            pass
            time.sleep(0.001)


def ready_time(log: Path, after: int) -> float:
    for line in log.read_bytes()[after:].decode(errors="replace").splitlines():
        if "cuzk-daemon ready" in line:
            stamp = re.sub(r"\x1b\[[0-9;]*m", "", line).split()[0].rstrip("Z")  # the stand-in dims it
            return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()
    raise RuntimeError("no ready line")


def ssh_base(server) -> list[str]:
    return ["ssh", "-q", "-p", str(server.port), "-i", str(server.client_key), "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={server.known_hosts}", f"root@{server.address}"]


def by_swapctl(server, data: Path, a: Path, b: Path, playbook: Path, env: dict,
               tree: Path | None = None) -> tuple[float, float]:
    """When swapctl reported the new daemon ready (its `ready: ... is ready` line), and when it exited.
    `tree`: run the swapctl of that source tree (an earlier commit) instead of this one."""
    if tree is not None:
        env = {**env, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen([sys.executable, "-m", "swapctl", "deploy", "box", "--binary", str(b), "--yes",
                             "-p", str(playbook)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, cwd=playbook.parent)  # not this tree's root: -m would import from there
    reported = None
    for line in proc.stderr:
        if reported is None and " is ready" in line:
            reported = time.time()
    if proc.wait() != 0 or reported is None:
        raise RuntimeError("swapctl deploy failed")
    return reported, time.time()


def by_ssh_script(server, data: Path, a: Path, b: Path, playbook: Path, env: dict) -> float:
    """What engineers write by hand: kill, sleep, copy, start, poll the log."""
    ssh = ssh_base(server)
    binary, log, config = data / "cuzk", data / "cuzk.log", data / "cuzk.toml"
    offset = log.stat().st_size
    subprocess.run(ssh + [f"pkill -TERM -f '^{binary} '"], check=False)
    time.sleep(1)
    subprocess.run(ssh + [f"cp {b} {binary}.new && mv {binary}.new {binary} && cd {data} && "
                          f"(setsid nohup {binary} --config {config} >> {log} 2>&1 < /dev/null &)"], check=True)
    deadline = time.monotonic() + 60
    while subprocess.run(ssh + [f"tail -c +{offset + 1} {log} | grep -q 'cuzk-daemon ready'"]).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the ssh script saw no ready line in 60 s")
        time.sleep(1)
    return time.time()


ANSIBLE_PLAY = """
- hosts: box
  gather_facts: false
  tasks:
    - name: stop the daemon
      shell: pkill -TERM -f '^{binary} ' || true
    - name: wait for it to exit
      wait_for:
        path: /proc/{pid}/status
        state: absent
        timeout: 60
    - name: install the new binary
      shell: cp {new} {binary}.new && mv {binary}.new {binary}
    - name: start it
      shell: cd {data} && (setsid nohup {binary} --config {config} >> {log} 2>&1 < /dev/null &)
    - name: wait for ready
      wait_for:
        path: {log}
        search_regex: "serving on"
        timeout: 60
"""


def ansible_bin() -> Path | None:
    venv = ROOT / "benchmarks" / ".venv-ansible"
    exe = venv / "bin" / "ansible-playbook"
    if not exe.exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "ansible-core"], check=True,
                           capture_output=True, timeout=600)
        except (subprocess.SubprocessError, OSError):
            return None
    return exe


def by_ansible(server, data: Path, a: Path, b: Path, playbook: Path, env: dict, pid: int = 0) -> float:
    exe = ansible_bin()
    work = data.parent / "ansible"
    work.mkdir(exist_ok=True)
    (work / "inventory").write_text(
        f"box ansible_host={server.address} ansible_port={server.port} ansible_user=root "
        f"ansible_ssh_private_key_file={server.client_key} "
        f"ansible_ssh_common_args='-o UserKnownHostsFile={server.known_hosts}' "
        f"ansible_python_interpreter={sys.executable}\n")
    # the log's size before the start: wait_for must find the new ready line, not the old one
    (work / "play.yml").write_text(ANSIBLE_PLAY.format(
        binary=data / "cuzk", pid=pid, new=b, data=data, config=data / "cuzk.toml", log=data / "cuzk.log"))
    r = subprocess.run([str(exe), "-i", str(work / "inventory"), str(work / "play.yml")], capture_output=True,
                       text=True, env={**env, "ANSIBLE_HOST_KEY_CHECKING": "True"})
    if r.returncode:
        raise RuntimeError(f"ansible-playbook exited {r.returncode}: {r.stdout[-1500:]} {r.stderr[-500:]}")
    return time.time()


def one_swap(tool, server, base: Path, a: Path, b: Path, env: dict) -> dict:
    data = base / "data"
    if data.exists():
        shutil.rmtree(data)
    data.mkdir()
    shutil.copy(a, data / "cuzk")
    (data / "cuzk.toml").write_text(prover_config(memory_mib=512, start_delay_ms=START_DELAY_MS))
    log = data / "cuzk.log"
    pid = start_daemon(data / "cuzk", data / "cuzk.toml", log, data)
    # reap it when it exits, as init does on a real machine (tools that wait for /proc/PID to vanish need it)
    threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
    offset = log.stat().st_size
    playbook = base / "swapctl.toml"
    playbook.write_text(server.playbook(name="box", daemon={
        "binary": str(data / "cuzk"), "args": ["--config", str(data / "cuzk.toml")], "match": str(data / "cuzk"),
        "log": str(log), "ready_timeout_s": 30, "stop_grace_s": 10},
        memory={"min_available_gib": 1, "release_timeout_s": 60}))
    watcher = Watcher(pid, data)
    watcher.start()
    started = time.time()
    try:
        if tool is by_ansible:
            reported = by_ansible(server, data, a, b, playbook, env, pid=pid)
            exited = reported
        else:
            reported = tool(server, data, a, b, playbook, env)
        reported, exited = reported if isinstance(reported, tuple) else (reported, reported)
        watcher.join(5)
    finally:
        subprocess.run(["pkill", "-KILL", "-f", str(data)], check=False)
    ready = ready_time(log, offset)
    startup = ready - watcher.new_start
    return {"total": reported - started, "start_gap": watcher.new_start - watcher.old_gone,
            "report_gap": reported - ready, "exit_gap": exited - ready, "startup": startup,
            "stop": watcher.old_gone - started}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-ansible", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tools", default="swapctl,ssh script,ansible", help="comma-separated")
    ap.add_argument("--before", metavar="REV", help="also swapctl as of git REV, run by turns with this one")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="swapctl-bench-"))
    compiled(ROOT)
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state"), "XDG_CACHE_HOME": str(base / "cache")}
    server = make_server(base / "sshd")
    server.start()
    server.trust()
    a = build_prover(base / "prover-a", TAG="a")
    b = build_prover(base / "prover-b", TAG="b")
    tools = {"swapctl": by_swapctl, "ssh script": by_ssh_script}
    if not args.no_ansible and ansible_bin():
        tools["ansible"] = by_ansible
    tools = {k: v for k, v in tools.items() if k in args.tools.split(",")}
    if args.before:
        tree = base / "before"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        compiled(tree)
        tools = {f"@{args.before}": functools.partial(by_swapctl, tree=tree), **tools}
    results: dict[str, dict[str, float]] = {}
    try:
        runs: dict[str, list[dict]] = {name: [] for name in tools}
        for _ in range(args.runs):  # by turns: load on a shared machine falls on every tool alike
            for name, tool in tools.items():
                runs[name].append(one_swap(tool, server, base, a, b, env))
        results = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"swap of the stand-in prover (512 MiB held, {START_DELAY_MS} ms start-up) over sshd on loopback; "
          f"median of {args.runs}")
    print("before stop: from the command's start to the old daemon's exit (swapctl: preflight, upload, verify, "
          "backup)\nswap window: old daemon gone -> ready reported; its floor is the daemon's own start-up")
    print(f"{'tool':<12} {'whole s':>8} {'before stop s':>14} {'swap window s':>14} {'start gap ms':>13} "
          f"{'report gap ms':>14} {'exit gap ms':>12} {'over floor ms':>14}")
    for name, r in results.items():
        window = r["total"] - r["stop"]
        print(f"{name:<12} {r['total']:8.2f} {r['stop']:14.2f} {window:14.2f} {r['start_gap'] * 1000:13.0f} "
              f"{r['report_gap'] * 1000:14.0f} {r['exit_gap'] * 1000:12.0f} {(window - r['startup']) * 1000:14.0f}")
    s = results["swapctl"]
    for name, r in results.items():
        if name != "swapctl":
            print(f"swapctl vs {name}: start gap {s['start_gap'] / r['start_gap']:.3f}x, "
                  f"report gap {s['report_gap'] / max(r['report_gap'], 1e-3):.3f}x, "
                  f"swap window {(s['total'] - s['stop']) / (r['total'] - r['stop']):.2f}x")
    over = s["total"] - s["stop"] - s["startup"]
    ok = s["start_gap"] < 0.2 and s["report_gap"] < 0.2 and over < 0.5
    print(f"goals (each gap < 200 ms, swap window within 0.5 s of the floor): {'met' if ok else 'NOT met'}")
    before = f"; swapctl @{args.before}: {results[f'@{args.before}']['exit_gap'] * 1000:.0f} ms" if args.before else ""
    print(f"ready line -> swapctl exited (goal <= 100 ms): {s['exit_gap'] * 1000:.0f} ms, "
          f"{'met' if s['exit_gap'] <= 0.1 else 'NOT met'}{before}")


if __name__ == "__main__":
    main()
