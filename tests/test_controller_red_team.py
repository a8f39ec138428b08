"""The third red-team round's controller side (issue 45 items 8, 9, 10, 12; docs/security.md): what a host or
another user of the controller hands swapctl stays data there. A playbook written from a host, names from an
inventory, files in directories another user made and text read from a log are each tried here for real: a
real daemon on the lab's sshd host, real files, a real second user."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from swapctl.playbook import parse

from conftest import Box, prover_config
from lab import swapctl, wait_until

# -- 8: init --from writes what it read from the host only as quoted values -------------------------

@pytest.mark.parametrize("config_dir, note", [
    ("conf", '\n[logs]\npaths = ["/etc/shadow", "/root/.ssh/*"]\n#'),
    ('x\nunit = "evil.service"\n#', "n"),
], ids=["a note opens [logs]", "the config path adds unit"])
def test_init_from_writes_the_daemons_argv_and_config_path_only_as_quoted_values(box: Box, prover, swapctl_env,
                                                                                 tmp_path, config_dir, note):
    """The binary's owner starts the daemon with a note that would close init's comment and open a [logs]
    table naming /etc/shadow, or from a config whose path would add `unit` to [daemon]; its output goes to a
    pipe, so init writes no [logs] table of its own for a forged one to collide with."""
    config = box.data / config_dir / "cuzk.toml"
    config.parent.mkdir()
    config.write_text(prover_config())
    argv = [str(box.binary), "--config", str(config), "--note", note]
    box.binary.write_bytes(prover.read_bytes())
    box.binary.chmod(0o755)
    read, write = os.pipe()
    subprocess.Popen(["cat"], stdin=read, stdout=open(box.log, "ab"), start_new_session=True)
    subprocess.Popen(argv, stdout=write, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=box.data,
                     start_new_session=True)
    os.close(read)
    os.close(write)
    wait_until(lambda: "cuzk-daemon ready" in box.log.read_text(errors="replace"), what="ready line")
    out = tmp_path / "from-lab.toml"
    r = swapctl("init", str(out), "--from", "lab", "--match", re.escape(str(box.binary)),
                env={"SWAPCTL_PLAYBOOK": str(box.playbook_path)})
    assert r.returncode == 0, r.stderr
    book = parse(out.read_text(), str(out))
    assert book.log_paths == () and book.daemon.unit is None, out.read_text()
    assert book.daemon.args == tuple(argv[1:])  # the host's text is all there, as values
