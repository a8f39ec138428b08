"""The daemon under systemd: a real systemd 252 as PID 1 (systemd-nspawn), sshd inside, the stand-in prover
as the unit's ExecStart. Deploy, rollback, auto-rollback and the host's own fallback go through the unit,
and end with one daemon, the right one, the unit's MainPID."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
from pathlib import Path

import pytest

from lab import prover_config, session_of, swapctl, swapctl_in_background, wait_until


def sha(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class UnitBox:
    """One test's daemon on the systemd host: /data/NAME inside (host.data/NAME here), unit NAME.service."""

    def __init__(self, host, name: str, workdir: Path):
        self.host, self.name, self.unit = host, name, f"{name}.service"
        self.dir = host.data / name  # as this machine sees it
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir()
        self.path = f"/data/{name}"  # inside
        self.binary, self.log, self.config = f"{self.path}/cuzk", f"{self.path}/cuzk.log", f"{self.path}/cuzk.toml"
        self.playbook_path = workdir / "swapctl.toml"
        self.journaled = False
        leader = host.leader()
        self.pidns = os.readlink(f"/proc/{leader}/ns/pid")

    def install(self, binary: Path, restart: str = "on-failure", restart_sec: str = "1", exec_path: str = "",
                drop_in: str = "", journal: bool = False) -> int:
        """Puts `binary` at the binary path and runs it as the unit, as an admin would; returns its MainPID
        once it is ready. `journal`: the unit logs to the journal (systemd's default), not to the log file."""
        shutil.copy(binary, self.dir / "cuzk")
        (self.dir / "cuzk.toml").write_text(prover_config())
        output = "" if journal else f"StandardOutput=append:{self.log}\nStandardError=append:{self.log}\n"
        unit = (f"[Unit]\nDescription=stand-in cuzk ({self.name})\n[Service]\n"
                f"ExecStart={exec_path or self.binary} --config {self.config}\nRestart={restart}\n"
                f"RestartSec={restart_sec}\nWorkingDirectory={self.path}\nEnvironment=RUST_LOG=info \"FIL_NOTE=a b\"\n"
                + output)
        self.journaled = journal
        (self.dir / "unit").write_text(unit)
        script = f"cp {self.path}/unit /etc/systemd/system/{self.unit}"
        if drop_in:
            (self.dir / "drop-in").write_text(drop_in)
            script += (f" && mkdir -p /etc/systemd/system/{self.unit}.d && "
                       f"cp {self.path}/drop-in /etc/systemd/system/{self.unit}.d/10-test.conf")
        self.host.sh(f"{script} && systemctl daemon-reload && systemctl start {self.unit}")
        wait_until(lambda: "cuzk-daemon ready" in self.log_text(), what="the unit's daemon to be ready")
        return self.main_pid()

    def journal_text(self) -> str:
        """The unit's journal as `journalctl -u UNIT -o cat` prints it."""
        return self.host.sh(f"journalctl -q -o cat --no-pager -u {self.unit}").stdout

    def write_playbook(self, **daemon) -> Path:
        d = {"binary": self.binary, "match": re.escape(self.binary), "log": self.log, "ready_timeout_s": 20,
             "stop_grace_s": 5, **daemon}
        m = {"min_available_gib": 0.5, "release_timeout_s": 20}
        self.playbook_path.write_text(self.host.server.playbook(daemon=d, memory=m))
        return self.playbook_path

    def log_text(self) -> str:
        if self.journaled:
            return self.journal_text()
        try:
            return (self.dir / "cuzk.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def show(self, *props: str) -> dict[str, str]:
        return self.host.show(self.unit, *props)

    def main_pid(self) -> int:
        return int(self.show("MainPID")["MainPID"])

    def daemons(self) -> dict[int, int]:
        """The daemons running from this box's directory, not their forks: {pid inside: pid here}."""
        procs = {}
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                if os.readlink(p / "ns/pid") != self.pidns:
                    continue
                argv0 = (p / "cmdline").read_bytes().split(b"\0")[0]
                status = (p / "status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            if argv0.startswith(self.path.encode() + b"/") and not fields["State"].startswith("Z"):
                procs[int(fields["NSpid"].split()[-1])] = (int(p.name), int(fields["PPid"]))
        here = {v[0] for v in procs.values()}
        return {inside: pid for inside, (pid, ppid) in procs.items() if ppid not in here}

    def runs(self, binary: Path) -> bool:
        """Exactly one daemon runs, from `binary`, and it is the unit's MainPID (False while things move)."""
        try:
            found = self.daemons()
            return (len(found) == 1 and sha(f"/proc/{next(iter(found.values()))}/exe") == sha(binary)
                    and next(iter(found)) == self.main_pid())
        except (OSError, StopIteration):
            return False

    def journal(self) -> list[dict]:
        path = self.dir / ".swapctl" / "cuzk" / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def close(self) -> None:
        self.host.sh(f"systemctl stop {self.unit}; systemctl reset-failed {self.unit}", check=False)


@pytest.fixture
def ubox(systemd_host, tmp_path, request, swapctl_env):
    name = "t" + hashlib.sha1(request.node.name.encode()).hexdigest()[:8]
    box = UnitBox(systemd_host, name, tmp_path)
    yield box
    box.close()


def deploy(box: UnitBox, binary: Path, *extra: str):
    return swapctl("deploy", "lab", "--binary", str(binary), "--yes", "-p", str(box.playbook_path), *extra)


def test_status_shows_the_unit_its_state_restarts_main_pid_and_files(ubox, prover):
    pid = ubox.install(prover, drop_in="[Service]\nEnvironment=API_TOKEN=hunter2\n")
    ubox.write_playbook()
    r = swapctl("status", "lab", "-p", str(ubox.playbook_path))
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())  # rich folds long lines
    assert f"unit: {ubox.unit} active/running NRestarts 0 MainPID {pid} Restart=on-failure" in out
    assert f"ExecStart: {ubox.binary} --config {ubox.config}" in out
    assert f"# /etc/systemd/system/{ubox.unit}" in out and f"# /etc/systemd/system/{ubox.unit}.d/10-test.conf" in out
    assert "Environment=API_TOKEN=***" in out and "hunter2" not in r.stdout  # the drop-in's secret is masked
    doc = json.loads(swapctl("status", "lab", "-p", str(ubox.playbook_path), "--json").stdout)
    unit = doc["hosts"]["lab"]["unit"]
    assert (unit["name"], unit["active_state"], unit["sub_state"], unit["main_pid"]) == (ubox.unit, "active",
                                                                                        "running", pid)
    assert unit["n_restarts"] == 0 and unit["drop_ins"] == [f"/etc/systemd/system/{ubox.unit}.d/10-test.conf"]
    assert ["API_TOKEN", "***"] in unit["environment"] and "hunter2" not in json.dumps(doc)


def test_deploy_and_rollback_go_through_the_unit(ubox, prover, prover_b):
    ubox.install(prover)
    ubox.write_playbook()
    dry = deploy(ubox, prover_b, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    said = " ".join((dry.stdout + dry.stderr).split())
    # the swap's step, as the dry run numbers it (its command only with -v)
    assert re.search(rf"\b\d\. systemctl stop {re.escape(ubox.unit)};", said), said
    assert f"systemctl start {ubox.unit} (its ExecStart runs" in said
    r = deploy(ubox, prover_b)
    assert r.returncode == 0, r.stderr
    assert f"systemctl stop {ubox.unit}" in r.stderr and "SIGTERM to" not in r.stderr
    assert f"through the unit: systemctl stop {ubox.unit}, then systemctl start {ubox.unit}" in r.stderr
    assert ubox.runs(prover_b), ubox.daemons()
    assert (ubox.dir / "cuzk").is_symlink()  # the unit's ExecStart runs the release through the binary path
    assert ubox.show("ExecStart")["ExecStart"].startswith(f"{{ path={ubox.binary} ;")
    # the first deploy adopted the unit: its Environment and WorkingDirectory, not what systemd adds
    adopted = [json.loads(m.read_text()) for m in (ubox.dir / ".swapctl/cuzk/releases").glob("*/manifest.json")]
    old = next(m for m in adopted if m["sha256"] == sha(prover))
    assert old["env"] == [["RUST_LOG", "info"], ["FIL_NOTE", "a b"]] and old["cwd"] == ubox.path
    new = next(m for m in adopted if m["sha256"] == sha(prover_b))
    assert new["argv"] == [ubox.binary, "--config", ubox.config] and new["env"] == old["env"]

    r = swapctl("rollback", "lab", "--yes", "-p", str(ubox.playbook_path))
    assert r.returncode == 0, r.stderr
    assert f"systemctl stop {ubox.unit}" in r.stderr
    assert ubox.runs(prover), ubox.daemons()
    assert [e["outcome"] for e in ubox.journal()] == ["deployed", "rolled-back"]
    assert ubox.journal()[-1]["pid"] == ubox.main_pid()


def test_a_crashing_build_is_rolled_back_through_the_unit_and_started_once(ubox, prover, prover_crash):
    # RestartSec well under the rollback's own time: a unit left to itself would restart the crashing build
    # several times while swapctl rolls back
    ubox.install(prover, restart="on-failure", restart_sec="200ms")
    ubox.write_playbook()
    r = deploy(ubox, prover_crash)
    assert r.returncode == 4, r.stderr
    assert "rolled back" in r.stderr and "it exited before it was ready" in r.stderr
    assert ubox.runs(prover), ubox.daemons()  # one prover, the old one, the unit's own
    assert ubox.log_text().count("stand-in built to crash at start") == 1  # systemd never restarted it
    state = ubox.show("ActiveState", "SubState", "Result")
    assert state == {"ActiveState": "active", "SubState": "running", "Result": "success"}, state  # reset-failed
    assert ubox.host.sh(f"systemctl list-jobs --no-legend {ubox.unit}").stdout.strip() == ""  # no restart pending
    entry = ubox.journal()[-1]
    assert (entry["action"], entry["outcome"], entry["pid"]) == ("auto-rollback", "rolled-back", ubox.main_pid())


def test_a_unit_that_runs_another_binary_is_refused_naming_both(ubox, prover, prover_b):
    shutil.copy(prover, ubox.dir / "elsewhere")
    pid = ubox.install(prover, exec_path=f"{ubox.path}/elsewhere")
    ubox.write_playbook(unit=ubox.unit)
    r = deploy(ubox, prover_b)
    assert r.returncode == 2, r.stderr
    error = r.stderr.strip().splitlines()[-1]
    assert (f"the unit {ubox.unit} runs {ubox.path}/elsewhere (its ExecStart), the playbook's daemon.binary is "
            f"{ubox.binary}") in error
    assert ubox.main_pid() == pid and list(ubox.daemons()) == [pid]  # nothing stopped
    assert not (ubox.dir / "cuzk").is_symlink()


def test_restart_always_racing_a_hand_kill_ends_with_one_daemon_the_new_one(ubox, prover, prover_b):
    pid = ubox.install(prover, restart="always", restart_sec="100ms")
    ubox.write_playbook(unit=ubox.unit)
    os.kill(ubox.daemons()[pid], signal.SIGKILL)  # by hand, just as the deploy begins: systemd restarts it
    r = deploy(ubox, prover_b)
    assert r.returncode == 0, r.stderr
    assert ubox.runs(prover_b), ubox.daemons()
    assert ubox.host.sh(f"systemctl list-jobs --no-legend {ubox.unit}").stdout.strip() == ""


def test_a_unit_crashed_and_waiting_to_restart_is_found_and_deployed_through(ubox, prover, prover_b):
    pid = ubox.install(prover, restart="on-failure", restart_sec="30s")
    ubox.write_playbook()  # the unit not named: found from its file, as no process runs the binary
    os.kill(ubox.daemons()[pid], signal.SIGKILL)  # a crash: systemd restarts it in 30 s
    wait_until(lambda: ubox.show("SubState")["SubState"] == "auto-restart", what="the unit to wait for its restart")
    r = deploy(ubox, prover_b)
    assert r.returncode == 0, r.stderr
    assert f"old daemon: none running (systemd unit {ubox.unit})" in r.stderr
    assert ubox.runs(prover_b), ubox.daemons()  # one daemon: the unit's, not one beside the pending restart
    assert ubox.host.sh(f"systemctl list-jobs --no-legend {ubox.unit}").stdout.strip() == ""


def test_the_host_goes_back_through_the_unit_when_the_deploy_loses_its_connection(ubox, prover, prover_noready):
    ubox.install(prover, restart="on-failure", restart_sec="200ms")
    ubox.write_playbook(ready_timeout_s=4)
    proc, lines, reader = swapctl_in_background("deploy", "lab", "--binary", str(prover_noready), "--yes",
                                                "-p", str(ubox.playbook_path))
    wait_until(lambda: any(" start: started " in line for line in lines), what="the new daemon's start")
    os.kill(session_of("swapctl-swap", pidns=ubox.pidns), signal.SIGKILL)  # nobody is left to roll back but the host
    assert proc.wait(60) == 5
    wait_until(lambda: ubox.runs(prover), timeout=40, what="the host to go back to the old daemon by itself")
    wait_until(lambda: ubox.journal()[-1]["action"] == "auto-rollback", timeout=10, what="the host's journal line")
    entry = ubox.journal()[-1]
    assert "itself" in entry["by"] and entry["outcome"] == "rolled-back" and entry["to"] == sha(prover)
    assert entry["pid"] == ubox.main_pid()
    # and it stays so: no second prover from Restart= behind the host's back
    assert ubox.host.sh(f"systemctl list-jobs --no-legend {ubox.unit}").stdout.strip() == ""
    assert len(ubox.daemons()) == 1


def test_a_daemon_started_by_hand_in_ssh_services_cgroup_is_not_taken_for_that_unit(ubox, prover, prover_b):
    # without pam_systemd (this host, and some minimal servers) what an ssh session starts stays in
    # ssh.service's cgroup: `systemctl stop ssh.service` would be the wrong stop
    shutil.copy(prover, ubox.dir / "cuzk")
    (ubox.dir / "cuzk.toml").write_text(prover_config())
    ubox.host.sh(f"cd {ubox.path} && setsid {ubox.binary} --config {ubox.config} >> {ubox.log} 2>&1 < /dev/null &")
    wait_until(lambda: "cuzk-daemon ready" in ubox.log_text(), what="the hand-started daemon")
    [pid] = ubox.daemons()
    assert "ssh.service" in Path(f"/proc/{ubox.daemons()[pid]}/cgroup").read_text()
    ubox.write_playbook()
    st = swapctl("status", "lab", "-p", str(ubox.playbook_path))
    assert st.returncode == 0 and "ssh.service" not in st.stdout and "unit:" not in st.stdout
    r = deploy(ubox, prover_b)
    assert r.returncode == 0, r.stderr
    assert "systemctl stop" not in r.stderr and f"SIGTERM to {pid}" in r.stderr
    assert ubox.host.show("ssh.service", "ActiveState")["ActiveState"] == "active"
    wait_until(lambda: len(ubox.daemons()) == 1, what="one daemon")
    [new] = ubox.daemons().values()
    assert sha(f"/proc/{new}/exe") == sha(prover_b)
    for inside in ubox.daemons():
        ubox.host.sh(f"kill {inside}", check=False)


def test_a_unit_logging_to_the_journal_readiness_rollback_fetch_logs_and_timings(ubox, prover, prover_b,
                                                                                 prover_crash, tmp_path):
    ubox.install(prover, restart_sec="200ms", journal=True)
    ubox.write_playbook(log="journal", unit=ubox.unit)
    dest = tmp_path / "logs"

    def fetch() -> dict:
        r = swapctl("fetch-logs", "lab", "--dest", str(dest), "-p", str(ubox.playbook_path), "--json")
        assert r.returncode == 0, r.stderr
        [got] = json.loads(r.stdout)["hosts"]["lab"]
        return got

    first = fetch()
    assert first["remote"] == f"journal -u {ubox.unit}" and first["new_bytes"] > 0
    again = fetch()  # resumed after the cursor, into the same local copy
    assert again["local"] == first["local"] and not again["restarted"]
    r = deploy(ubox, prover_b)
    assert r.returncode == 0, r.stderr
    assert "is ready" in r.stderr and ubox.runs(prover_b), ubox.daemons()  # its ready line came from the journal
    r = deploy(ubox, prover_crash)
    assert r.returncode == 4, r.stderr
    assert f"Failed log: journalctl -u {ubox.unit}" in r.stderr
    assert "stand-in built to crash at start" in r.stderr, r.stderr  # the failed start's lines, from the journal
    assert ubox.runs(prover_b), ubox.daemons()
    assert ubox.journal_text().count("stand-in built to crash at start") == 1
    fetch()
    local = Path(first["local"]).read_text()
    assert local == ubox.journal_text()  # fetched by cursor, piece by piece: every line once, in order
    t = swapctl("timings", first["local"], "--json")
    assert t.returncode == 0, t.stderr
    assert json.loads(t.stdout)["jobs"] >= 2  # a proof from each build that came up


def test_a_build_that_dies_at_once_is_rolled_back_with_its_lines_every_time(ubox, prover, prover_b, prover_crash):
    """A unit logging to the journal, a build that panics before systemd can read its MainPID, ten times.
    Two faults showed here under load: its lines carry the unit's name but no InvocationID (journald reads
    the cgroup of a process already gone), so the error had no log lines (1 deploy in 4); and the log reader,
    ended through `timeout` as it started, ran on without it and the swap never ended, the new build dead and
    nothing rolled back (1 in 10). Each time now: exit 4, the panic line in the error, the old build back."""
    ubox.install(prover, restart_sec="200ms", journal=True)
    ubox.write_playbook(log="journal", unit=ubox.unit)
    assert deploy(ubox, prover_b).returncode == 0
    for attempt in range(10):
        r = swapctl("deploy", "lab", "--binary", str(prover_crash), "--yes", "-p", str(ubox.playbook_path),
                    timeout=60)
        assert r.returncode == 4, (attempt, r.stderr)
        assert "stand-in built to crash at start" in r.stderr, (attempt, r.stderr)
        assert ubox.runs(prover_b), (attempt, ubox.daemons())


def _here(host, inside: int) -> int:
    """The pid this machine gives the container's process `inside`."""
    ns = os.readlink(f"/proc/{host.leader()}/ns/pid")
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and os.readlink(p / "ns/pid") == ns:
                nspid = next(line for line in (p / "status").read_text().splitlines() if line.startswith("NSpid:"))
                if int(nspid.split()[-1]) == inside:
                    return int(p.name)
        except (OSError, StopIteration):
            continue
    raise AssertionError(f"no process {inside} in the container")


def test_the_systemd_example_playbook_deploys_through_cuzks_own_unit(systemd_host, prover, prover_b, tmp_path,
                                                                    swapctl_env):
    """playbooks/systemd.toml as it stands, on the unit cuzk's docs give, pointed at the lab host."""
    from swapctl.playbook import examples

    h, s = systemd_host, systemd_host.server
    (h.data / "zk").mkdir(exist_ok=True)
    (h.data / "zk" / "cuzk.toml").write_text(prover_config())
    shutil.copy(prover, h.data / "zk" / "prover-a")
    unit = "[Service]\nExecStart=/usr/local/bin/cuzk --config /data/zk/cuzk.toml\nRestart=on-failure\nRestartSec=10\n"
    (h.data / "zk" / "cuzk.service").write_text(unit)
    h.sh("install -m 755 /data/zk/prover-a /usr/local/bin/cuzk && cp /data/zk/cuzk.service /etc/systemd/system/ && "
         "systemctl daemon-reload && systemctl start cuzk.service")
    try:
        wait_until(lambda: "cuzk-daemon ready" in h.sh("journalctl -q -o cat -u cuzk.service").stdout,
                   what="cuzk.service ready")
        text = examples.render("systemd")
        for old, new in {'address = "192.0.2.10"': f'address = "{s.address}"\nidentity_file = "{s.client_key}"\n'
                                                     f'known_hosts = "{s.known_hosts}"',
                         "ready_stable_s = 30": "ready_stable_s = 1", "ready_timeout_s = 600": "ready_timeout_s = 30",
                         "min_available_gib = 400": "min_available_gib = 0.5"}.items():
            assert old in text, f"the example no longer has {old!r}"
            text = text.replace(old, new)
        (tmp_path / "systemd.toml").write_text(text)
        r = swapctl("deploy", "gpu-box", "--binary", str(prover_b), "--yes", "-p", str(tmp_path / "systemd.toml"))
        assert r.returncode == 0, r.stderr
        assert "systemctl stop cuzk.service" in r.stderr
        main = int(h.show("cuzk.service", "MainPID")["MainPID"])
        assert sha(f"/proc/{_here(h, main)}/exe") == sha(prover_b)
        assert h.sh("readlink /usr/local/bin/cuzk").stdout.startswith("/usr/local/bin/.swapctl/cuzk/releases/")
    finally:
        h.sh("systemctl stop cuzk.service", check=False)
