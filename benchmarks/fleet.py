#!/usr/bin/env python3
"""Fleets side by side (issue 23): swapctl against parallel-ssh and Ansible on the same N hosts, in one run.

For each N (default 8, 16, 32): N hosts, each its own sshd in its own network, mount and PID namespace
(tests/lab.py NetnsLab), behind a veth shaped to 100 Mbit/s, each running the stand-in prover (32 MiB)
started by hand. On the same hosts, by turns:
- `swapctl status @all` against `parallel-ssh -i -p N` and `ansible all -m shell -f N`, both running the
  probe a hand status would (ps, /proc/meminfo, df, who, nvidia-smi);
- `swapctl deploy @all --parallel N --yes` against an Ansible playbook doing the same swap (copy, stop,
  wait for the daemon's exit and MemAvailable, start, wait for the ready line after the start), forks N,
  and against the swapctl.cuzk collection's swap module (copy, then swapctl.cuzk.swap: the same safe swap
  as swapctl's, run on each host by Ansible), forks N, one batch (issue 33).
  Before each deploy every host's prover is started anew by hand, with no swapctl state.
Wall time of each command, and the controller's CPU: user + system seconds of the command and every
process it waited for (getrusage(RUSAGE_CHILDREN) around it: ansible's forks and ssh processes count
too), which the OS accounts whatever else runs on the machine. "CPU per extra host" is the slope
between the smallest and the largest N.

The hosts share this machine's cores with the controller. By default each host gets an empty ~/.bashrc
of its own (a bind mount in its mount namespace), as a GPU box without pyenv has; --machine-bashrc keeps
this machine's (pyenv init: 160 ms of CPU for every remote command, paid by every tool alike).

Needs root, sshd, g++, tc; `parallel-ssh` (Debian/Ubuntu: `apt-get install pssh`) and Ansible: the test
extra pins ansible-core (`bash scripts/venv` puts it in .venv/bin); --ansible DIR names another bin
directory (default: .venv/bin, /tmp/ansible-venv/bin, else PATH). A tool that is missing is left out and
said so.
Usage: python3 benchmarks/fleet.py [--hosts 8,16,32] [--runs 1] [--machine-bashrc] [--deploy-only]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from lab import NetnsLab, build_prover, prover_config, wait_until  # noqa: E402

DAEMON = "'^(\\./|/data/)cuzk '"


def compiled(tree: Path) -> None:
    """swapctl's bytecode, as pip writes it when it installs swapctl: this machine's Python runs with
    PYTHONDONTWRITEBYTECODE=1, and an editable checkout would otherwise compile every module on every run
    (0.08 s of a `status HOST` here), which no installed swapctl does."""
    import compileall

    compileall.compile_dir(str(tree / "swapctl"), quiet=1)
PROBE = "ps -ww -eo pid,ppid,user,etimes,rss,args; cat /proc/meminfo; df -P; who; nvidia-smi; exit 0"
MIN_AVAIL_GIB = 1

ANSIBLE_SWAP = """
- hosts: all
  gather_facts: false
  tasks:
    - name: copy the new binary
      copy: {{src: "{new}", dest: /data/cuzk.new, mode: "0755"}}
    - name: stop the daemon
      shell: pkill -TERM -f '^(\\./|/data/)cuzk ' || true
    - name: wait for it to exit and for its memory
      shell: >-
        timeout 30 sh -c 'while pgrep -f "^(\\./|/data/)cuzk " >/dev/null ||
        [ "$(awk "/^MemAvailable/ {{print \\$2}}" /proc/meminfo)" -lt {min_kib} ]; do sleep 0.05; done'
    - name: install it and start it
      shell: >-
        mv /data/cuzk.new /data/cuzk && cd /data && stat -c %s /data/cuzk.log &&
        (setsid ./cuzk --config /data/cuzk.toml >> /data/cuzk.log 2>&1 < /dev/null &)
      register: started
    - name: wait for the ready line after the start
      shell: >-
        timeout 30 sh -c 'until tail -c +$(({{{{ started.stdout }}}} + 1)) /data/cuzk.log |
        grep -q "cuzk-daemon ready"; do sleep 0.05; done'
"""

COLLECTION_SWAP = """
- hosts: all
  gather_facts: false
  tasks:
    - name: copy the new binary
      copy: {{src: "{new}", dest: /data/cuzk.new, mode: "0700"}}
    - name: swap it in, safely (swapctl.cuzk)
      swapctl.cuzk.swap:
        src: /data/cuzk.new
        sha256: "{sha}"
        daemon: {{binary: /data/cuzk, args: [--config, /data/cuzk.toml], match: /data/cuzk, log: /data/cuzk.log,
                 ready_timeout_s: 30, stop_grace_s: 5}}
        memory: {{min_available_gib: {min_gib}, release_timeout_s: 30}}
        host: "{{{{ inventory_hostname }}}}"
"""


def timed(argv: list[str], env: dict, ok=lambda r: r.returncode == 0) -> tuple[float, float]:
    """Wall seconds of the command, and the CPU seconds it and every process it waited for used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not ok(r):
        sys.exit(f"{' '.join(argv[:4])} ... failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-600:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def start_by_hand(servers, binary: Path) -> None:
    for s in servers:
        s.exec(f"pkill -9 -f {DAEMON}; rm -rf /data/.swapctl /data/cuzk /data/cuzk.new /data/cuzk.log; true",
               check=False)
        shutil.copy(binary, s.data / "cuzk")
        (s.data / "cuzk.toml").write_text(prover_config())
        s.exec("cd /data && setsid ./cuzk --config /data/cuzk.toml >> /data/cuzk.log 2>&1 < /dev/null &")
    for s in servers:
        wait_until(lambda s=s: "ready" in (s.data / "cuzk.log").read_text(errors="replace"), what="ready")


def ready_everywhere(servers, build: str) -> bool:
    """Every host runs `build` (the stand-in logs its TAG at start), ready."""
    for s in servers:
        log = re.sub(r"\x1b\[[0-9;]*m", "", (s.data / "cuzk.log").read_text(errors="replace"))  # its colours
        last = log[log.rfind("cuzk-daemon starting"):]
        if f"build={build}" not in last or "cuzk-daemon ready" not in last:
            return False
    return True


class Tools:
    """The command lines of each tool for one lab."""

    def __init__(self, base: Path, lab: NetnsLab, ansible_bin: Path | None, pssh: str | None):
        self.base, self.lab, self.n = base, lab, len(lab.servers)
        s0 = lab.servers[0]
        self.book = base / "farm.toml"
        names = ", ".join(f'"gpu-{i}"' for i in range(self.n))
        self.book.write_text("".join(s.playbook(name=f"gpu-{i}") + "\n" for i, s in enumerate(lab.servers)) +
                             f"[groups]\nall = [{names}]\n\n[daemon]\nbinary = \"/data/cuzk\"\n"
                             'args = ["--config", "/data/cuzk.toml"]\nmatch = "/data/cuzk"\n'
                             'log = "/data/cuzk.log"\nready_timeout_s = 30\nstop_grace_s = 5\n\n'
                             f"[memory]\nmin_available_gib = {MIN_AVAIL_GIB}\nrelease_timeout_s = 30\n")
        self.ssh_opts = (f"-i {s0.client_key} -o BatchMode=yes -o UserKnownHostsFile={s0.known_hosts} "
                         "-o StrictHostKeyChecking=yes")
        hosts = base / "pssh-hosts"
        hosts.write_text("".join(f"root@{s.address}:{s.port}\n" for s in lab.servers))
        self.pssh = [pssh, "-i", "-h", str(hosts), "-p", str(self.n), "-t", "60", "-x", self.ssh_opts, PROBE] \
            if pssh else None
        self.ansible_bin = ansible_bin
        inventory = base / "inventory.ini"
        inventory.write_text("[all]\n" + "".join(
            f"gpu-{i} ansible_host={s.address} ansible_port={s.port}\n" for i, s in enumerate(lab.servers)) +
            f"[all:vars]\nansible_user=root\nansible_ssh_private_key_file={s0.client_key}\n"
            f"ansible_ssh_common_args='-o UserKnownHostsFile={s0.known_hosts} -o StrictHostKeyChecking=yes'\n"
            f"ansible_python_interpreter={shutil.which('python3')}\n")
        self.inventory = inventory

    def swapctl(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "swapctl", *args, "-p", str(self.book)]

    def ansible(self, tool: str, *args: str) -> list[str]:
        assert self.ansible_bin
        return [str(self.ansible_bin / tool), "-i", str(self.inventory), "-f", str(self.n), *args]

    def ansible_swap(self, new: Path) -> list[str]:
        play = self.base / "swap.yml"
        play.write_text(ANSIBLE_SWAP.format(new=new, min_kib=MIN_AVAIL_GIB << 20))
        return self.ansible("ansible-playbook", str(play))

    def collection_swap(self, new: Path) -> list[str]:
        import hashlib

        play = self.base / "collection-swap.yml"
        play.write_text(COLLECTION_SWAP.format(new=new, sha=hashlib.sha256(new.read_bytes()).hexdigest(),
                                               min_gib=MIN_AVAIL_GIB))
        return self.ansible("ansible-playbook", str(play))


def install_collection(ansible_bin: Path, base: Path) -> Path:
    """swapctl.cuzk built from this checkout (scripts/build_collection.py) and installed under `base`."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_collection.py"), "--output", str(base / "dist")],
                       capture_output=True, text=True, check=True, env={**os.environ, "PATH": f"{ansible_bin}:"
                                                                        f"{os.environ['PATH']}"})
    subprocess.run([str(ansible_bin / "ansible-galaxy"), "collection", "install", r.stdout.split()[-1], "-p",
                    str(base / "collections")], capture_output=True, check=True)
    return base / "collections"


def ansible_env(env: dict) -> dict:
    """Ansible as it ships, with its host key checking on (the tools here all verify keys), no cowsay."""
    return {**env, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_NOCOWS": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "ANSIBLE_LOCAL_TEMP": str(Path(env["XDG_CACHE_HOME"]) / "ansible-tmp")}


def one_fleet(n: int, runs: int, base: Path, builds: dict, bashrc: Path | None, env: dict,
              ansible_bin: Path | None, pssh: str | None, deploy_only: bool = False
              ) -> dict[str, list[tuple[float, float]]]:
    (base / f"n{n}").mkdir()
    lab = NetnsLab(base / f"n{n}", n, prefix="swb", bashrc=bashrc)
    got: dict[str, list[tuple[float, float]]] = {}

    def add(name: str, value: tuple[float, float]) -> None:
        got.setdefault(name, []).append(value)

    try:
        lab.start()
        for s in lab.servers:
            subprocess.run(["tc", "qdisc", "add", "dev", f"{s.netns}h", "root", "tbf", "rate", "100mbit",
                            "burst", "256kb", "latency", "100ms"], check=True)
        t = Tools(base / f"n{n}", lab, ansible_bin, pssh)
        aenv = ansible_env(env)
        for _ in range(runs):  # by turns: load on a shared machine falls on every tool alike
            start_by_hand(lab.servers, builds["a"])
            if not deploy_only:
                add("status swapctl", timed(t.swapctl("status", "@all"), env))
            if t.pssh and not deploy_only:
                add("status parallel-ssh", timed(t.pssh, env))
            if ansible_bin and not deploy_only:
                add("status ansible", timed(t.ansible("ansible", "all", "-m", "shell", "-a", PROBE), aenv))
            add("deploy swapctl", timed(t.swapctl("deploy", "@all", "--binary", str(builds["b"]), "--parallel",
                                                  str(n), "--yes"), env))
            assert ready_everywhere(lab.servers, "b"), "swapctl's deploy left a host without build b ready"
            if ansible_bin:
                start_by_hand(lab.servers, builds["a"])
                add("deploy ansible", timed(t.ansible_swap(builds["c"]), aenv))
                assert ready_everywhere(lab.servers, "c"), "the Ansible play left a host without build c ready"
                start_by_hand(lab.servers, builds["a"])
                add("deploy collection", timed(t.collection_swap(builds["d"]), aenv))
                assert ready_everywhere(lab.servers, "d"), "the collection's play left a host without build d ready"
    finally:
        for s in lab.servers:  # each namespace's init ignores SIGTERM: stop() would wait 10 s for each
            if s.proc:
                s.proc.kill()
        lab.close()
    return got


def find_tools(ansible: str | None) -> tuple[Path | None, str | None, str]:
    pssh = shutil.which("parallel-ssh") or shutil.which("pssh")
    candidates = [Path(ansible)] if ansible else [ROOT / ".venv" / "bin", Path("/tmp/ansible-venv/bin")]
    found = shutil.which("ansible-playbook")
    if found:
        candidates.append(Path(found).parent)
    ansible_bin = next((c for c in candidates if (c / "ansible-playbook").exists()), None)
    versions = []
    if pssh:
        versions.append(f"{Path(pssh).name} (pssh)")
    if ansible_bin:
        v = subprocess.run([str(ansible_bin / "ansible"), "--version"], capture_output=True, text=True).stdout
        versions.append(v.splitlines()[0] if v else "ansible")
    missing = [name for name, have in (("parallel-ssh (apt-get install pssh)", pssh),
                                       ("ansible (see this file's docstring)", ansible_bin)) if not have]
    if missing:
        print(f"left out, not installed: {', '.join(missing)}", file=sys.stderr)
    return ansible_bin, pssh, ", ".join(versions)


def report(results: dict[int, dict[str, list[tuple[float, float]]]], runs: int, shell: str, versions: str) -> None:
    med = statistics.median
    print(f"N namespace hosts behind 100 Mbit/s each, {shell}, stand-in prover running; {os.cpu_count()} cores "
          f"shared by hosts and controller; median of {runs}; {versions}")
    print("wall = the command's wall time; CPU = the controller's CPU-seconds (the command and every process it "
          "waited for)\n")
    print(f"  {'N':>3}  {'what':<20} {'wall':>7} {'CPU':>7}   {'reference':<20} {'wall':>7} {'CPU':>7}  "
          f"{'ratio':>6}  goal")
    rows = (("status swapctl", "status parallel-ssh", 1.0), ("status swapctl", "status ansible", None),
            ("deploy swapctl", "deploy ansible", 0.5), ("deploy collection", "deploy ansible", None),
            ("deploy swapctl", "deploy collection", None))
    for n, got in results.items():
        for mine, ref, goal in rows:
            if ref not in got or mine not in got:
                continue
            w, c = med(x[0] for x in got[mine]), med(x[1] for x in got[mine])
            rw, rc = med(x[0] for x in got[ref]), med(x[1] for x in got[ref])
            verdict = "" if goal is None else f"<= {goal:g}x: {'met' if w / rw <= goal else 'MISSED'}"
            print(f"  {n:>3}  {mine:<20} {w:>6.2f}s {c:>6.2f}s   {ref:<20} {rw:>6.2f}s {rc:>6.2f}s  "
                  f"{w / rw:>5.2f}x  {verdict}")
    ns = sorted(results)
    if len(ns) < 2:
        return
    lo, hi = ns[0], ns[-1]
    print(f"\ncontroller CPU per extra host, from N={lo} to N={hi} (goal for swapctl <= 30 ms):")
    for what in ("status swapctl", "status parallel-ssh", "status ansible", "deploy swapctl", "deploy ansible",
                 "deploy collection"):
        if what in results[lo] and what in results[hi]:
            c_lo, c_hi = med(x[1] for x in results[lo][what]), med(x[1] for x in results[hi][what])
            per = (c_hi - c_lo) / (hi - lo) * 1000
            goal = f"  {'met' if per <= 30 else 'MISSED'}" if "swapctl" in what else ""
            print(f"  {what:<20} {per:6.1f} ms{goal}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="8,16,32", help="comma-separated numbers of hosts")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--machine-bashrc", action="store_true", help="each host runs this machine's ~/.bashrc")
    ap.add_argument("--ansible", help="the directory holding ansible and ansible-playbook")
    ap.add_argument("--deploy-only", action="store_true", help="only the deploys (swapctl, Ansible, the collection)")
    args = ap.parse_args()
    ansible_bin, pssh, versions = find_tools(args.ansible)
    compiled(ROOT)
    base = Path(tempfile.mkdtemp(prefix="swapctl-fleet-"))
    builds = {t: build_prover(base / f"prover-{t}", TIMING="1", TAG=t) for t in ("a", "b", "c", "d")}
    rc = None
    if not args.machine_bashrc:
        rc = base / "bashrc"
        rc.write_text("# a GPU box's root shell: nothing to start\n")
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state"), "XDG_CACHE_HOME": str(base / "cache")}
    (base / "cache" / "ansible-tmp").mkdir(parents=True)
    if ansible_bin:
        env["ANSIBLE_COLLECTIONS_PATH"] = str(install_collection(ansible_bin, base))
    results = {}
    try:
        for n in (int(x) for x in args.hosts.split(",")):
            results[n] = one_fleet(n, args.runs, base, builds, rc, env, ansible_bin, pssh, args.deploy_only)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    shell = "this machine's ~/.bashrc" if args.machine_bashrc else "an empty ~/.bashrc"
    report(results, args.runs, shell, versions)


if __name__ == "__main__":
    main()
