"""The habits people bring from other tools: --version, completion, help as written, 80 columns,
ssh_config aliases."""

import json
import re

import pytest

from lab import swapctl
from test_deploy import deploy


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local state and ~ (ssh_config) stay inside the test."""


def test_history_reads_at_80_columns_in_a_pipe_and_json_keeps_every_field(box, prover, prover_b):
    box.start_by_hand(prover)
    who = {"USER": "release-engineer-on-call", "LOGNAME": "release-engineer-on-call"}  # longer than its column
    r = swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path), env=who)
    assert r.returncode == 0, r.stderr
    r = swapctl("history", "lab", "-p", str(box.playbook_path), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    h = json.loads(swapctl("history", "lab", "--json", "-p", str(box.playbook_path)).stdout)
    [entry] = h["journal"]
    assert entry["by"].startswith("release-engineer-on-call@")  # whole in --json
    # in the table: on one line, cut with an ellipsis, never one letter a line
    assert sum(bool(re.search(r"│ release-engineer-o\w*… +│", line)) for line in lines) == 3, r.stdout
    assert entry["time"][:19].replace("T", " ") in r.stdout
    for release in h["releases"]:
        assert release["sha256"][:12] in r.stdout  # ids are copied into `rollback --to`: whole
    assert entry["from"][:12] in r.stdout and entry["to"][:12] in r.stdout
    assert "deployed" in r.stdout and "adopted, ok" in r.stdout
