"""Fact parsers on real recorded output: nvidia-smi from an H200, ps/meminfo/df/who from a Linux host."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swapctl.facts import nvidia, system
from swapctl.facts.status import parse_status, split_sections
from swapctl.playbook import DaemonSpec

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
NV = DATA / "nvidia-smi"
SYS = DATA / "system"


@pytest.mark.parametrize("name", ["query-gpu.csv", "query-gpu-noheader-nounits.csv"])
def test_query_gpu_h200_two_gpus_by_renamed_header(name):
    text = (NV / "h200-2gpu" / name).read_text()
    if "noheader" in name:  # the parser needs the header; the noheader capture checks the same values
        text = (NV / "h200-2gpu" / "query-gpu.csv").read_text().splitlines()[0] + "\n" + text
    gpus = nvidia.parse_query_gpu(text)
    assert [g.index for g in gpus] == [0, 1]
    g0, g1 = gpus
    assert g0.name == "NVIDIA H200" and g0.driver == "580.159.04"
    assert g0.memory_total_mib == 143771 and g0.memory_used_mib == 0
    assert g1.memory_used_mib == 2579
    # clocks.sm is printed as clocks.current.sm [MHz]; the throttle field under its new name
    assert g0.sm_clock_mhz == 345 and g1.sm_clock_mhz == 1980 and g0.max_sm_clock_mhz == 1980
    assert g0.throttle_reasons == ("gpu_idle",) and g0.active_throttles == ()
    assert g1.throttle_reasons == ()
    assert g0.ecc_uncorrected == 0 and g0.pcie_gen == 5 and g0.pcie_width == 16
    assert g0.power_limit_w == 700.0 and 79 < g0.power_w < 80


def test_query_gpu_one_gpu():
    gpus = nvidia.parse_query_gpu((NV / "h200-1gpu" / "query-gpu.csv").read_text())
    assert len(gpus) == 1 and gpus[0].uuid == "GPU-7e0b2b09-6a13-d6a2-40db-0ef3e2515077"
    assert gpus[0].temperature_c == 38


def test_compute_apps_maps_used_gpu_memory():
    apps = nvidia.parse_compute_apps((NV / "h200-2gpu" / "compute-apps.csv").read_text())
    assert apps == [nvidia.GpuProcess(596, "/tmp/h2d", 2566, "GPU-b4cf5aef-64f7-ec12-e4e3-ebcd8d78929f")]


def test_invalid_field_is_an_error_with_nvidias_words():
    text = (NV / "h200-2gpu" / "query-invalid-field.txt").read_text().split("\nrc=")[0]
    with pytest.raises(nvidia.NvidiaSmiError, match='Field "bogus.field" is not a valid field'):
        nvidia.parse_query_gpu(text)


@pytest.mark.parametrize("value,reasons", [
    ("0x0000000000000001", ("gpu_idle",)),
    ("0x0000000000000044", ("sw_power_cap", "hw_thermal_slowdown")),
    ("[N/A]", ()),
])
def test_throttle_reasons_decoded(value, reasons):
    assert nvidia.decode_throttle(value) == reasons


def test_ps_recorded_output():
    procs = system.parse_ps((SYS / "ps.txt").read_text())
    assert len(procs) > 20
    by_args = {p.args: p for p in procs}
    sessions = [p for p in procs if p.args.startswith("sshd: root@")]
    assert {p.args for p in sessions} >= {"sshd: root@pts/1", "sshd: root@notty"}
    listener = next(p for a, p in by_args.items() if "[listener]" in a)
    assert listener.user == "root" and listener.rss_kib > 0
    assert all(p.pid > 0 and p.elapsed_s >= 0 for p in procs)


def test_ssh_sessions_mark_our_own_connection():
    procs = system.parse_ps((SYS / "ps.txt").read_text())
    own = max(p.pid for p in procs if p.args == "sshd: root@notty")  # the recorder's own `ps` session
    sessions = system.ssh_sessions(procs, own)
    assert [s.own for s in sessions if s.pid == own] == [True]
    others = [s for s in sessions if not s.own]
    assert {(s.user, s.tty) for s in others} == {("root", "pts/1"), ("root", "notty")}


def test_meminfo_who_df_loadavg():
    mem = system.parse_meminfo((SYS / "meminfo.txt").read_text())
    assert mem.total_kib > mem.available_kib > 0
    who = system.parse_who((SYS / "who.txt").read_text())
    assert [(s.user, s.tty, s.source) for s in who] == [("root", "pts/1", "127.0.0.1")]
    assert who[0].since.startswith("Nov 30")
    disks = system.parse_df((SYS / "df.txt").read_text())
    assert len(disks) == 2 and disks[0].mount == "/" and disks[0].avail_kib > 0
    assert system.parse_loadavg((SYS / "loadavg.txt").read_text())[0] >= 0


def test_links_mark_replaced_binary():
    links = system.parse_links("/proc/42/exe\t/data/cuzk (deleted)\n/proc/42/cwd\t/data\n/proc/7/exe\t/usr/bin/x\n")
    procs = [system.Process(42, 1, 42, "S", 0, 1, 1, "root", "/data/cuzk"),
             system.Process(7, 1, 7, "S", 0, 1, 1, "root", "x")]
    p42, p7 = system.with_links(procs, links)
    assert p42.exe == "/data/cuzk" and p42.exe_deleted and p42.cwd == "/data"
    assert p7.exe == "/usr/bin/x" and not p7.exe_deleted and p7.cwd is None


def test_descendants_walks_the_tree():
    procs = [system.Process(pid, ppid, 0, "S", 0, 0, 0, "u", "") for pid, ppid in
             [(10, 1), (11, 10), (12, 11), (13, 1), (14, 10)]]
    assert sorted(system.descendants(procs, 10)) == [11, 12, 14]


def _status_output(gpu_section: str) -> str:
    ps = (SYS / "ps.txt").read_text()
    recorder = next(p.pid for p in system.parse_ps(ps) if p.args.startswith("ps -ww"))
    return "\n".join([
        "==> host", "x86_64", "gpu-box", "==> self", str(recorder), "==> ps", ps, "==> links", "",
        "==> meminfo", (SYS / "meminfo.txt").read_text(), "==> loadavg", "0.5 0.4 0.3 1/100 42",
        "==> who", "", "==> df", (SYS / "df.txt").read_text(), gpu_section,
        "==> current", "", "==> releases", "",
    ])


def test_status_with_real_gpu_output_and_daemon_match():
    gpu = ("==> gpu\n" + (NV / "h200-2gpu" / "query-gpu.csv").read_text() + "rc=0\n==> gpu-apps\n"
           + (NV / "h200-2gpu" / "compute-apps.csv").read_text() + "rc=0")
    st = parse_status("box", _status_output(gpu), DaemonSpec(match=r"\[listener\]"), ["/tmp", "/work"])
    assert st.arch == "x86_64" and st.hostname == "gpu-box"
    assert len(st.gpus) == 2 and st.gpu_error is None and st.gpu_processes[0].pid == 596
    assert st.daemons and all("[listener]" in p.args for p in st.daemons)
    assert all(not p.args.startswith("ps -ww") for p in st.top_processes)  # the status script is not news
    assert [d.path for d in st.disks] == ["/tmp", "/work"]


def test_status_reports_nvml_failure_and_missing_tools():
    failing = "==> gpu\nFailed to initialize NVML: Driver/library version mismatch\nrc=18"
    st = parse_status("box", _status_output(failing), DaemonSpec(match="x"), [])
    assert st.gpus == ()
    assert st.gpu_error == "nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch"
    st = parse_status("box", _status_output("==> gpu\nmissing"), DaemonSpec(match="x"), [])
    assert st.gpu_error == "no GPU tools (nvidia-smi not found)"


@pytest.mark.parametrize("gpu,limit", [
    ("==> gpu\nrc=timeout 10.00", "10"),  # the GPUs' own query hung: their processes were not asked
    ("==> gpu\n" + (NV / "h200-2gpu" / "query-gpu.csv").read_text() + "rc=0\n==> gpu-apps\nrc=timeout 2.50", "2.5"),
])
def test_status_reports_an_nvidia_smi_that_did_not_answer_as_a_hang(gpu, limit):
    st = parse_status("box", _status_output(gpu), DaemonSpec(match=r"\[listener\]"), [])
    assert st.gpu_hung and st.gpus == () and st.gpu_processes == ()  # so the deploy's memory wait asks no GPU
    assert st.gpu_error == (f"nvidia-smi failed: did not answer within {limit} s "
                            f"(GPU or driver wedged? look for an Xid in dmesg)")
    assert st.daemons and st.memory.total_kib > 0  # the rest is there all the same


def test_a_failing_nvidia_smi_is_no_hang():
    failing = "==> gpu\nFailed to initialize NVML: Driver/library version mismatch\nrc=18"
    assert not parse_status("box", _status_output(failing), DaemonSpec(match="x"), []).gpu_hung


def test_split_sections():
    assert split_sections("junk\n==> a\n1\n2\n==> b\n\n==> c\nx") == {"a": "1\n2", "b": "", "c": "x"}


def test_status_reads_a_one_thread_process_age_to_the_tick_whatever_its_name():
    """status.sh's `starts` section, run here on this machine's /proc: a one-thread process named to confuse a
    reader of /proc/PID/stat (`) S 1 ` and a newline in its name) gets its own age, and ps's whole seconds
    (etimes 0 for a process 0.6 s old) are no longer what tells a young daemon from a fork it left."""
    script = (ROOT / "swapctl" / "host" / "facts" / "status.sh").read_text().splitlines()
    at = next(i for i, line in enumerate(script) if line.startswith("sec starts; "))
    name = "a) S 1\n2 (b) R"
    child = subprocess.Popen([sys.executable, "-c", f"open('/proc/self/comm', 'w').write({name!r}); import os, time; "
                              "print(os.fork() or '', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        forked = int(child.stdout.readline())  # type: ignore[union-attr]  # the child's fork, which sleeps on
        assert open(f"/proc/{child.pid}/comm").read().startswith("a) S 1\n")
        time.sleep(0.6)
        out = subprocess.run(["sh", "-c", "sec() { :; }\n" + "\n".join(script[at:at + 2])], capture_output=True,
                             text=True, check=True).stdout
        ages = system.parse_starts(out)
        assert 0.55 <= ages[child.pid][0] <= 5 and ages[child.pid][1] is False, out  # it ran exec: no fork left
        assert ages[forked][1] is True, out  # a fork that never ran exec (PF_FORKNOEXEC)
    finally:
        os.kill(forked, signal.SIGKILL)
        child.kill()
        child.wait()
    assert system.parse_starts("12.50 5.0\n100\n7 64 250\n8 0 9999\nx 1 1\n9 250\n") == {7: (10.0, True)}
    assert system.parse_starts("garbage") == {} and system.parse_starts("1.0 1.0\n0\n7 0 1\n") == {}


def test_a_fork_left_is_told_from_a_daemon_starting_by_whether_it_ran_exec_however_young():
    """The second campaign's 8 runs and the fourth's 3: a daemon killed in its first seconds left its memory
    holder (one thread, its command line), and status took the holder for the daemon (ps's etimes said 1; then
    its age, 0.1 s, was under LEFTOVER_AFTER_S). A fork that never ran exec (PF_FORKNOEXEC, 0x40 in its
    flags) is one however young; a process 0.1 s old that ran exec may be a daemon whose runtime has not
    started its threads yet; where the flags were not read, ps's whole seconds decide as before."""
    ps = ("  200     1   200 S     0.0 16384       1 root     /data/cuzk --config /data/cuzk.toml\n"
          "  300     1   300 S     0.0 16384       0 root     /data/cuzk --config /data/cuzk.toml\n"
          "  400     1   400 S     0.0 16384       3 root     /data/cuzk --config /data/cuzk.toml\n")
    text = "\n".join(["==> host", "x86_64", "gpu-box", "==> self", "1", "==> ps", ps, "==> ids",
                      *(f"/proc/{pid}/status:Threads:\t1" for pid in (200, 300, 400)),
                      "==> starts", "1000.00 3.00", "100", "200 4194368 99990", "300 4194304 99990", "==> meminfo",
                      (SYS / "meminfo.txt").read_text(), "==> gpu", "missing"])
    st = parse_status("box", text, DaemonSpec(match=r"^/data/cuzk\b"), [])
    assert [p.pid for p in st.leftovers] == [200, 400] and [p.pid for p in st.daemons] == [300]
    assert [round(p.age_s, 2) if p.age_s is not None else None for p in st.leftovers] == [0.1, None]
    assert [p.forked for p in (*st.leftovers, *st.daemons)] == [True, None, False]
