"""The example playbooks in playbooks/: each loads and validates, `swapctl init --example` writes it, and
each does on a real sshd what its comments say."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from swapctl import playbook as pb
from swapctl.cli.fleet import fail_budget
from swapctl.playbook import examples

from lab import free_port, prover_config, swapctl, wait_until

ROOT = Path(__file__).resolve().parent.parent
SANDBOX = {"SANDBOX": "/srv/sandbox", "PORT": "40612", "STATUS_PORT": "40613"}


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


def test_every_file_in_playbooks_is_an_example():
    assert sorted(p.stem for p in (ROOT / "playbooks").glob("*.toml")) == examples.names()
    assert {"hand-started", "farm", "sandbox"} <= set(examples.names())


@pytest.mark.parametrize("name", examples.names())
def test_example_loads_and_validates(name, tmp_path):
    path = tmp_path / f"{name}.toml"
    path.write_text(examples.render(name, **SANDBOX))
    book = pb.load(path)
    assert book.hosts and book.require_daemon()
    assert "${" not in path.read_text()  # every placeholder filled
    assert path.read_text().startswith("# ")  # says what it is for


@pytest.mark.parametrize("name", examples.names())
def test_init_example_writes_it(name, tmp_path):
    r = swapctl("init", str(tmp_path / "swapctl.toml"), "--example", name)
    assert r.returncode == 0, r.stderr
    written = (tmp_path / "swapctl.toml").read_text()
    sandbox_dir = str(Path(".sandbox").resolve())  # `swapctl sandbox up`'s default, from where it ran
    assert written == examples.render(name, SANDBOX=sandbox_dir, PORT="40612", STATUS_PORT="40613")
    pb.load(tmp_path / "swapctl.toml")


def test_init_names_the_examples_when_one_is_unknown(tmp_path):
    r = swapctl("init", str(tmp_path / "x.toml"), "--example", "systemd-unit")
    assert r.returncode == 2 and not (tmp_path / "x.toml").exists()
    assert "no example playbook 'systemd-unit'; the examples: farm, hand-started, sandbox, sudo, systemd" in r.stderr


def test_hand_started_is_the_root_box_on_port_40612():
    book = pb.parse(examples.render("hand-started"), "hand-started.toml")
    [host] = book.hosts.values()
    assert (host.port, host.user) == (40612, "root")
    assert book.daemon.binary == "/data/cuzk-priodisp" and book.daemon.args is None  # adopts the running args
    m = book.daemon.match_regex
    assert m.search("/data/cuzk-priodisp --config /data/cuzk.toml") and m.search("/data/cuzk-priodisp")
    assert not m.search("/data/cuzk-priodisp.old --config x") and not m.search("less /data/cuzk-priodisp")


def adapted(text: str, replacements: dict[str, str]) -> str:
    """The example with a real box's values; each replaced text must be there (the example still says it)."""
    for old, new in replacements.items():
        assert old in text, f"the example no longer has {old!r}"
        text = text.replace(old, new)
    return text


def test_hand_started_adopts_the_hand_started_daemon_and_deploys(box, prover, prover_b):
    """The example as it stands, pointed at a real sshd with /data moved to the box's directory."""
    binary, config, log = box.data / "cuzk-priodisp", box.data / "cuzk.toml", box.data / "cuzk.log"
    shutil.copy(prover, binary)
    config.write_text(prover_config())
    hand = subprocess.Popen([str(binary), "--config", str(config)], stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=box.data, start_new_session=True)
    wait_until(lambda: "cuzk-daemon ready" in log.read_text(errors="replace"), what="ready line")
    s = box.server
    text = adapted(examples.render("hand-started"), {
        'address = "192.0.2.10"': f'address = "{s.address}"',
        "port = 40612": f'port = {s.port}\nidentity_file = "{s.client_key}"\nknown_hosts = "{s.known_hosts}"',
        "/data/": f"{box.data}/",
        "ready_stable_s = 30": "ready_stable_s = 1",
        "min_available_gib = 400": "min_available_gib = 0.5",
    })
    box.playbook_path.write_text(text)
    r = swapctl("deploy", "gpu-box", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    pid = box.one_daemon()
    assert pid != hand.pid
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    assert argv == [str(binary).encode(), b"--config", str(config).encode()]  # its own arguments, kept
    h = json.loads(swapctl("history", "gpu-box", "--json", "-p", str(box.playbook_path)).stdout)
    assert [rel["source"] for rel in h["releases"]] == ["upload", "adopted"]


def test_farm_has_groups_a_canary_and_a_failure_budget():
    book = pb.parse(examples.render("farm"), "farm.toml")
    assert set(book.groups) == {"rack-a", "rack-b", "farm"}
    assert set(book.groups["farm"]) == set(book.groups["rack-a"]) | set(book.groups["rack-b"]) == set(book.hosts)
    assert book.rollout == pb.RolloutSpec(parallel=2, canary=1, canary_wait_s=300, max_fail="20%")
    assert fail_budget(book.rollout.max_fail, len(book.groups["farm"])) == 1  # as its comment says


def farm_of(box, prover, rollout: str) -> Path:
    """A farm of two: `dead` (nothing listens there) first, then the box, with `rollout` as [rollout]."""
    box.start_by_hand(prover)
    text = box.playbook_path.read_text()
    text = text.replace("[daemon]", f'[hosts.dead]\naddress = "127.0.0.1"\nport = {free_port()}\n\n'
                                     f'[groups]\nfarm = ["dead", "lab"]\n\n[rollout]\n{rollout}\n\n[daemon]', 1)
    box.playbook_path.write_text(text)
    pb.load(box.playbook_path)
    return box.playbook_path


def test_the_playbooks_canary_stops_the_farm_when_it_fails(box, prover, prover_b):
    playbook = farm_of(box, prover, "canary = 1")
    before = box.one_daemon()
    r = swapctl("deploy", "@farm", "--binary", str(prover_b), "--yes", "--json", "-p", str(playbook))
    assert r.returncode == 3, r.stderr  # the unreachable canary: refused, nothing changed
    hosts = json.loads(r.stdout)["hosts"]
    assert hosts["dead"]["exit_code"] == 3 and "skipped" in hosts["lab"]
    assert box.daemons() == [before]  # the canary failed: no other host touched


def test_the_command_line_overrides_the_playbooks_rollout(box, prover, prover_b):
    playbook = farm_of(box, prover, 'canary = 1\nmax_fail = 0')
    before = box.one_daemon()
    r = swapctl("deploy", "@farm", "--binary", str(prover_b), "--yes", "--json", "--canary", "0",
                "--max-fail", "1", "-p", str(playbook))
    assert r.returncode == 3, r.stderr  # the worst outcome: dead's
    hosts = json.loads(r.stdout)["hosts"]
    assert hosts["lab"]["outcome"] == "deployed"
    assert box.daemons() != [before]


@pytest.mark.parametrize("line,message", [
    ('max_fail = "a lot"', 'rollout.max_fail: must be a number of hosts or a percentage ("10%")'),
    ("parallel = 0", "rollout.parallel: must be at least 1"),
    ("canary = -1", "rollout.canary: must not be negative"),
    ("canary_wait = 30", "rollout.canary_wait: unknown key (did you mean `canary_wait_s`?)"),
])
def test_a_bad_rollout_table_names_the_line_and_the_key(line, message):
    with pytest.raises(pb.PlaybookError, match=re.escape(f"farm.toml:2: {message}")):
        pb.parse(f"[rollout]\n{line}\n", "farm.toml")


def test_the_sandbox_runs_with_its_example_and_deploys(tmp_path):
    sandbox, port = tmp_path / "sandbox", free_port()
    r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port))
    try:
        assert r.returncode == 0, r.stderr
        playbook = sandbox / "swapctl.toml"
        assert playbook.read_text() == examples.render("sandbox", SANDBOX=str(sandbox.resolve()), PORT=str(port),
                                                        STATUS_PORT=str(port + 1))
        r = swapctl("deploy", "sandbox", "--binary", str(sandbox / "builds" / "prover-b"), "--yes", "--json",
                    "-p", str(playbook))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["hosts"]["sandbox"]["outcome"] == "deployed"
        r = swapctl("status", "sandbox", "--json", "-p", str(playbook))
        [daemon] = json.loads(r.stdout)["hosts"]["sandbox"]["daemons"]
        assert daemon["exe"].startswith(str(sandbox.resolve() / "data" / ".swapctl"))  # the new release runs
        # a second `sandbox up` (the quick start run again) keeps what the host has, and says so
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port))
        assert r.returncode == 0 and "kept its releases and journal" in r.stdout, r
        r = swapctl("history", "sandbox", "--json", "-p", str(playbook))
        assert [e["action"] for e in json.loads(r.stdout)["journal"]] == ["deploy"], r.stdout
        r = swapctl("status", "sandbox", "--json", "-p", str(playbook))
        [daemon] = json.loads(r.stdout)["hosts"]["sandbox"]["daemons"]
        assert daemon["exe"].startswith(str(sandbox.resolve() / "data" / ".swapctl"))  # still build B
    finally:
        swapctl("sandbox", "down", "--dir", str(sandbox))


def test_the_reference_pages_example_is_a_valid_playbook_using_every_key(tmp_path):
    from swapctl.playbook import reference

    (tmp_path / "hosts.ini").write_text("[gpus]\ngpu-01\n")  # the inventory it names, beside it
    book = pb.parse(reference.example(), str(tmp_path / "swapctl.toml"))
    assert "gpu-box" in book.hosts and "gpu-01" in book.hosts and book.rollout.canary == 1
    assert book.hosts["gpu-box"].address == "192.0.2.10"  # the documentation range, nobody's real host


def test_the_reference_documents_every_key_the_loader_accepts_and_no_other():
    from swapctl.playbook import reference
    from swapctl.playbook.schema import SCHEMA as _SCHEMA
    from swapctl.playbook.schema import TOP as _TOP

    assert {("hosts" if t == "host" else t) for t in reference.TABLES if t} == set(_TOP)
    for table in reference.TABLES:
        assert set(reference.DOCS[table]) == set(reference.schema(table)), table
    assert set(_SCHEMA) <= set(reference.TABLES)


def test_the_playbook_reference_page_is_what_the_schema_gives():
    from swapctl.playbook import reference

    page = (ROOT / "docs" / "playbook.md").read_text()
    assert page == reference.render(), "docs/playbook.md is stale: run `bash scripts/docs`"


def test_the_rollout_summary_reads_at_80_columns(box, prover, prover_b):
    playbook = farm_of(box, prover, "max_fail = 1")
    r = swapctl("deploy", "@farm", "--binary", str(prover_b), "--yes", "-p", str(playbook), env={"COLUMNS": "80"})
    assert r.returncode == 3, r.stderr
    table = r.stdout[r.stdout.index("rollout"):].splitlines()
    assert max(map(len, table)) <= 80, r.stdout
    assert any(re.search(r"│ dead +│ failed \(3\) +│", line) for line in table), r.stdout
    assert any(re.search(r"│ lab +│ deployed +│ zstd", line) for line in table), r.stdout
    dead = pb.load(playbook).hosts["dead"]
    assert f"root@127.0.0.1:{dead.port}" in r.stdout, r.stdout  # the error's address is not cut mid-number
