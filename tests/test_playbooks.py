"""The example playbooks in playbooks/: each loads and validates, `swapctl init --example` writes it, and
each does on a real sshd what its comments say."""

import json
import re
from pathlib import Path

import pytest

from lab import free_port, swapctl
from swapctl import playbook as pb


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history goes to the test's own XDG state directory."""


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
    [before] = box.daemons()
    r = swapctl("deploy", "@farm", "--binary", str(prover_b), "--yes", "--json", "-p", str(playbook))
    assert r.returncode == 3, r.stderr  # the unreachable canary: refused, nothing changed
    hosts = json.loads(r.stdout)["hosts"]
    assert hosts["dead"]["exit_code"] == 3 and "skipped" in hosts["lab"]
    assert box.daemons() == [before]  # the canary failed: no other host touched


def test_the_command_line_overrides_the_playbooks_rollout(box, prover, prover_b):
    playbook = farm_of(box, prover, 'canary = 1\nmax_fail = 0')
    [before] = box.daemons()
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
