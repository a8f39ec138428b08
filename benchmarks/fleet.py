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
Also `swapctl fetch-logs @all` against `parallel-slurp` (pssh's), and per N the controller's CPU per host,
peak RSS and most file descriptors at once. `--parallel P` deploys P hosts at a time (Ansible with P forks).
`--tools ...,tty` runs swapctl's deploy once more with a pty as its stdout and stderr: the live table drawn
as at a person's terminal, its CPU against the same deploy's without one (issue 34).
Usage: python3 benchmarks/fleet.py [--hosts 8,16,32] [--runs 1] [--parallel P]
       [--tools swapctl,pssh,ansible,collection,tty] [--machine-bashrc] [--deploy-only]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
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


# Runs argv[2:] as its child, then writes the child's CPU seconds and peak RSS (KiB) to argv[1]: the command
# forked from a small process, since a child's ru_maxrss counts the pages it had before exec (tests/lab.py)
MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, u = os.wait4(pid, 0)
open(sys.argv[1], "w").write(f"{u.ru_utime + u.ru_stime} {u.ru_maxrss}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def timed(argv: list[str], env: dict, tty: bool = False) -> tuple[float, float, float, int]:
    """Wall seconds of the command; the CPU seconds it and every process it waited for used; the peak RSS
    (MiB) of the largest of them (wait4's rusage); and the most file descriptors its own process held at
    once (sampled every 20 ms from /proc). `tty`: its stdout and stderr are a terminal (a pty, 160 columns,
    read here as fast as it writes), so swapctl draws its live table as it does for a person."""
    with tempfile.NamedTemporaryFile("r") as measured, tempfile.TemporaryFile("w+") as out:
        sink, drain = (terminal(out) if tty else (out, None))
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", MEASURE, measured.name, *argv], stdout=sink,
                                stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
                                env={**env, "TERM": "xterm-256color", "COLUMNS": "160"} if tty else env)
        if drain:
            os.close(sink)
            drain.start()
        fds = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.02):
                try:
                    child = open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()
                    fds[0] = max(fds[0], len(os.listdir(f"/proc/{child[0]}/fd"))) if child else fds[0]
                except OSError:
                    pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        proc.wait()
        wall = time.perf_counter() - t
        done.set()
        sampler.join()
        if drain:
            drain.join()
        if proc.returncode != 0:
            out.seek(0)
            sys.exit(f"{' '.join(argv[:4])} ... failed ({proc.returncode}): {out.read().strip()[-600:]}")
        cpu, rss_kib = measured.read().split()
    return wall, float(cpu), int(rss_kib) / 1024, fds[0]


def terminal(out) -> tuple[int, threading.Thread]:
    """A pty for a command's stdout and stderr (the slave's fd), and a thread that copies all it writes to
    `out` until the command has closed it."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))

    def copy() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the slave
                break
            if not data:
                break
            out.write(data.decode(errors="replace"))
        os.close(master)

    return slave, threading.Thread(target=copy, daemon=True)


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
                             f"[memory]\nmin_available_gib = {MIN_AVAIL_GIB}\nrelease_timeout_s = 30\n\n"
                             '[logs]\npaths = ["/data/cuzk.log"]\n')
        self.ssh_opts = (f"-i {s0.client_key} -o BatchMode=yes -o UserKnownHostsFile={s0.known_hosts} "
                         "-o StrictHostKeyChecking=yes")
        hosts = base / "pssh-hosts"
        hosts.write_text("".join(f"root@{s.address}:{s.port}\n" for s in lab.servers))
        self.pssh = [pssh, "-i", "-h", str(hosts), "-p", str(self.n), "-t", "60", "-x", self.ssh_opts, PROBE] \
            if pssh else None
        slurp = shutil.which("parallel-slurp") or shutil.which("pslurp")
        self.slurp = [slurp, "-h", str(hosts), "-p", str(self.n), "-t", "60", "-x", self.ssh_opts, "-L",
                      str(base / "slurped"), "/data/cuzk.log", "cuzk.log"] if pssh and slurp else None
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

    def ansible(self, tool: str, *args: str, forks: int | None = None) -> list[str]:
        assert self.ansible_bin
        return [str(self.ansible_bin / tool), "-i", str(self.inventory), "-f", str(forks or self.n), *args]

    def ansible_swap(self, new: Path, forks: int) -> list[str]:
        play = self.base / "swap.yml"
        play.write_text(ANSIBLE_SWAP.format(new=new, min_kib=MIN_AVAIL_GIB << 20))
        return self.ansible("ansible-playbook", str(play), forks=forks)

    def collection_swap(self, new: Path, forks: int) -> list[str]:
        import hashlib

        play = self.base / "collection-swap.yml"
        play.write_text(COLLECTION_SWAP.format(new=new, sha=hashlib.sha256(new.read_bytes()).hexdigest(),
                                               min_gib=MIN_AVAIL_GIB))
        return self.ansible("ansible-playbook", str(play), forks=forks)


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


Measured = tuple[float, float, float, int]  # wall s, CPU s, peak RSS MiB, most fds at once


def one_fleet(n: int, args: argparse.Namespace, base: Path, builds: dict, bashrc: Path | None, env: dict,
              ansible_bin: Path | None, pssh: str | None) -> dict[str, list[Measured]]:
    (base / f"n{n}").mkdir()
    lab = NetnsLab(base / f"n{n}", n, prefix="swb", bashrc=bashrc)
    got: dict[str, list[Measured]] = {}
    want = set(args.tools.split(","))
    parallel = str(args.parallel or n)

    def add(name: str, value: Measured) -> None:
        got.setdefault(name, []).append(value)

    try:
        lab.start()
        for s in lab.servers:
            subprocess.run(["tc", "qdisc", "add", "dev", f"{s.netns}h", "root", "tbf", "rate", "100mbit",
                            "burst", "256kb", "latency", "100ms"], check=True)
        t = Tools(base / f"n{n}", lab, ansible_bin if want & {"ansible", "collection"} else None, pssh)
        aenv = ansible_env(env)
        for _ in range(args.runs):  # by turns: load on a shared machine falls on every tool alike
            start_by_hand(lab.servers, builds["a"])
            if not args.deploy_only and "swapctl" in want:
                add("status swapctl", timed(t.swapctl("status", "@all"), env))
                add("fetch-logs swapctl", timed(t.swapctl("fetch-logs", "@all", "--dest", str(base / f"n{n}" / "logs")),
                                                env))
            if t.pssh and not args.deploy_only and "pssh" in want:
                add("status parallel-ssh", timed(t.pssh, env))
                if t.slurp:
                    add("fetch parallel-slurp", timed(t.slurp, env))
            if ansible_bin and not args.deploy_only and "ansible" in want:
                add("status ansible", timed(t.ansible("ansible", "all", "-m", "shell", "-a", PROBE), aenv))
            if "swapctl" in want:
                add("deploy swapctl", timed(t.swapctl("deploy", "@all", "--binary", str(builds["b"]), "--parallel",
                                                      parallel, "--yes"), env))
                assert ready_everywhere(lab.servers, "b"), "swapctl's deploy left a host without build b ready"
                if "tty" in want:  # the same deploy at a terminal: its live table drawn four times a second
                    start_by_hand(lab.servers, builds["a"])
                    add("deploy swapctl, tty", timed(t.swapctl("deploy", "@all", "--binary", str(builds["b"]),
                                                               "--parallel", parallel, "--yes"), env, tty=True))
                    assert ready_everywhere(lab.servers, "b"), "swapctl's deploy at a tty left a host without b"
            if ansible_bin and "ansible" in want:
                start_by_hand(lab.servers, builds["a"])
                add("deploy ansible", timed(t.ansible_swap(builds["c"], int(parallel)), aenv))
                assert ready_everywhere(lab.servers, "c"), "the Ansible play left a host without build c ready"
            if ansible_bin and "collection" in want:
                start_by_hand(lab.servers, builds["a"])
                add("deploy collection", timed(t.collection_swap(builds["d"], int(parallel)), aenv))
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


def report(results: dict[int, dict[str, list[Measured]]], args: argparse.Namespace, shell: str, versions: str) -> None:
    med = statistics.median
    forks = f"--parallel and forks {args.parallel}" if args.parallel else "--parallel and forks N"
    print(f"N namespace hosts behind 100 Mbit/s each, {shell}, stand-in prover running; {os.cpu_count()} cores "
          f"shared by hosts and controller; median of {args.runs}; deploys with {forks}; {versions}")
    print("wall = the command's wall time; CPU = the controller's CPU-seconds (the command and every process it "
          "waited for)\n")
    print(f"  {'N':>3}  {'what':<20} {'wall':>7} {'CPU':>7}   {'reference':<20} {'wall':>7} {'CPU':>7}  "
          f"{'ratio':>6}  goal")
    rows = (("status swapctl", "status parallel-ssh", 0.7), ("status swapctl", "status ansible", None),
            ("fetch-logs swapctl", "fetch parallel-slurp", None),
            ("deploy swapctl", "deploy ansible", 0.15), ("deploy collection", "deploy ansible", None),
            ("deploy swapctl", "deploy collection", None), ("deploy swapctl, tty", "deploy swapctl", None))
    for n, got in results.items():
        for mine, ref, goal in rows:
            if ref not in got or mine not in got:
                continue
            w, c = med(x[0] for x in got[mine]), med(x[1] for x in got[mine])
            rw, rc = med(x[0] for x in got[ref]), med(x[1] for x in got[ref])
            verdict = "" if goal is None else f"<= {goal:g}x: {'met' if w / rw <= goal else 'MISSED'}"
            print(f"  {n:>3}  {mine:<20} {w:>6.2f}s {c:>6.2f}s   {ref:<20} {rw:>6.2f}s {rc:>6.2f}s  "
                  f"{w / rw:>5.2f}x  {verdict}")
    whats = sorted({w for got in results.values() for w in got})
    print("\nat each N: the wall time; the controller's CPU per host; the peak RSS of its largest process, and "
          "the most file descriptors its own process held at once")
    print(f"  {'what':<22}" + "".join(f"{f'N={n}':>33}" for n in results))
    for what in whats:
        cells = []
        for n, got in results.items():
            xs = got.get(what)
            cells.append(f"{med(x[0] for x in xs):6.1f}s {med(x[1] for x in xs) / n * 1000:6.1f} ms "
                         f"{med(x[2] for x in xs):4.0f} MiB {med(x[3] for x in xs):4.0f} fd" if xs else "-")
        print(f"  {what:<22}" + "".join(f"{c:>33}" for c in cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="8,16,32", help="comma-separated numbers of hosts")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--machine-bashrc", action="store_true", help="each host runs this machine's ~/.bashrc")
    ap.add_argument("--ansible", help="the directory holding ansible and ansible-playbook")
    ap.add_argument("--deploy-only", action="store_true", help="only the deploys (swapctl, Ansible, the collection)")
    ap.add_argument("--parallel", type=int, help="the deploys' --parallel and Ansible's forks (default: N)")
    ap.add_argument("--tools", default="swapctl,pssh,ansible,collection",
                    help="comma-separated: which to run (tty: swapctl's deploy again, at a terminal)")
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
            results[n] = one_fleet(n, args, base, builds, rc, env, ansible_bin, pssh)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    shell = "this machine's ~/.bashrc" if args.machine_bashrc else "an empty ~/.bashrc"
    report(results, args, shell, versions)


if __name__ == "__main__":
    main()
