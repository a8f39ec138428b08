"""`swapctl status` against real sshd hosts running the real stand-in prover."""

import json
import os
import shutil
import subprocess

import pytest

from lab import NetnsLab, free_port, prover_config, swapctl


def test_status_shows_hand_started_daemon_and_other_sessions(box, prover):
    pid = box.start_by_hand(prover, prover_config(memory_mib=48))
    ssh = ["ssh", "-q", "-p", str(box.server.port), "-i", str(box.server.client_key),
           "-o", f"UserKnownHostsFile={box.server.known_hosts}", "root@127.0.0.1", "sleep 60"]
    colleague = subprocess.Popen(ssh, stdin=subprocess.DEVNULL)
    try:
        from lab import wait_until

        wait_until(lambda: b"sleep 60" in subprocess.run(["ps", "-eo", "args"], capture_output=True).stdout,
                   what="the colleague's session")
        r = swapctl("status", "lab", "--json", "-p", str(box.playbook_path))
    finally:
        colleague.kill()
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)["hosts"]["lab"]
    [daemon] = st["daemons"]
    assert daemon["pid"] == pid
    assert daemon["exe"] == str(box.binary) and not daemon["exe_deleted"]
    assert daemon["cwd"] == str(box.data)
    assert daemon["args"] == f"{box.binary} --config {box.config}"
    assert daemon["rss_kib"] >= 48 * 1024  # the held "SRS" is resident
    assert st["memory"]["total_kib"] >= st["memory"]["available_kib"] > 0
    others = [s for s in st["sessions"] if not s["own"]]
    assert any(s["user"] == "root" and s["tty"] == "notty" for s in others)
    assert all(not s["own"] for s in others) and sum(s["own"] for s in st["sessions"]) == 1
    assert st["gpu_error"] == "no GPU tools (nvidia-smi not found)"
    assert [d["path"] for d in st["disks"]] == [str(box.data)]


def test_status_table_names_replaced_binary(box, prover, prover_b):
    box.start_by_hand(prover)
    tmp = box.data / "cuzk.new"
    shutil.copy(prover_b, tmp)
    os.replace(tmp, box.binary)  # what `scp` + `mv` over a running daemon does
    r = swapctl("status", "lab", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    assert "REPLACED OR DELETED on disk" in r.stdout
    assert "daemon: pid" in r.stdout and "releases: none" in r.stdout


def test_status_without_daemon(box):
    r = swapctl("status", "lab", "-p", str(box.playbook_path))
    assert r.returncode == 0 and "daemon: not running" in r.stdout


def test_unreachable_host_is_reported_and_others_still_shown(box, prover):
    box.start_by_hand(prover)
    text = box.playbook_path.read_text() + f'\n[hosts.dead]\naddress = "127.0.0.1"\nport = {free_port()}\n'
    box.playbook_path.write_text(text)
    r = swapctl("status", "lab", "dead", "--json", "-p", str(box.playbook_path))
    assert r.returncode == 3
    hosts = json.loads(r.stdout)["hosts"]
    assert hosts["dead"]["exit_code"] == 3 and "cannot connect" in hosts["dead"]["error"]
    assert len(hosts["lab"]["daemons"]) == 1


def test_remote_text_is_not_rich_markup(box, prover):
    box.start_by_hand(prover, args=["--config", str(box.config), "[bold red]tag[/bold red]"])
    r = swapctl("status", "lab", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    assert "[bold red]tag[/bold red]" in r.stdout  # printed as the host said it, not as markup


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory, prover):
    lab = NetnsLab(tmp_path_factory.mktemp("netns"), 2)
    try:
        lab.start()
        yield lab
    finally:
        lab.close()


def test_status_of_namespace_hosts_in_parallel(two_hosts, prover, tmp_path):
    # each host has its own /data (mount namespace) and sees only its own processes (PID namespace)
    for i, server in enumerate(two_hosts.servers):
        shutil.copy(prover, server.data / "cuzk")
        (server.data / "cuzk.toml").write_text(prover_config(memory_mib=16 + 16 * i))
        server.exec("cd /data && setsid ./cuzk --config /data/cuzk.toml >> /data/cuzk.log 2>&1 < /dev/null &")
    book = tmp_path / "farm.toml"
    hosts = ""
    for i, s in enumerate(two_hosts.servers):
        hosts += s.playbook(name=f"gpu-{i}") + "\n"
    book.write_text(hosts + '[groups]\nfarm = ["gpu-0", "gpu-1"]\n\n[daemon]\nbinary = "/data/cuzk"\n'
                            'log = "/data/cuzk.log"\n')
    from lab import wait_until

    for s in two_hosts.servers:
        wait_until(lambda s=s: "ready" in (s.data / "cuzk.log").read_text(errors="replace"), what="ready")
    r = swapctl("status", "@farm", "--json", "-p", str(book))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)["hosts"]
    assert set(doc) == {"gpu-0", "gpu-1"}
    for i in range(2):
        [daemon] = doc[f"gpu-{i}"]["daemons"]
        assert daemon["exe"] == "/data/cuzk" and daemon["cwd"] == "/data"
        assert daemon["rss_kib"] >= (16 + 16 * i) * 1024
    # separate PID namespaces: each host sees its own sshd, never the other host's
    for i in range(2):
        seen = " ".join(p["args"] for p in doc[f"gpu-{i}"]["top_processes"])
        assert f"host{i}/sshd_config" in seen and f"host{1 - i}/sshd_config" not in seen
