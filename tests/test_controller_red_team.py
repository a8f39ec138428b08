"""The third red-team round's controller side (issue 45 items 8, 9, 10, 12; docs/security.md): what a host or
another user of the controller hands swapctl stays data there. A playbook written from a host, names from an
inventory, files in directories another user made and text read from a log are each tried here for real: a
real daemon on the lab's sshd host, real files, a real second user."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# fixtures (daemon_user, shared_dir): a test naming one redefines it (F811)
from test_security import daemon_user, shared_dir  # noqa: F401

from swapctl import playbook as pb
from swapctl.errors import BadInput
from swapctl.logs.fetch import host_path
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
    with open(box.log, "ab") as sink:  # the daemon's output through a pipe, into its log
        subprocess.Popen(["cat"], stdin=read, stdout=sink, start_new_session=True)
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


# -- 9: a host's name is one plain name: refused at load, and every local path stays under DEST ---------

def fetch_logs_from_inventory(box: Box, swapctl_env: Path, inventory: Path, dest: Path):
    """`swapctl -i INVENTORY fetch-logs @gpus --dest DEST`, the box's log in logs.paths."""
    shutil.copy(box.server.known_hosts, swapctl_env / "home" / ".ssh" / "known_hosts")
    box.write_playbook(logs={"paths": [str(box.log)]})
    return swapctl("-i", str(inventory), "fetch-logs", "@gpus", "--dest", str(dest), "-p", str(box.playbook_path))


@pytest.mark.parametrize("form", ["ini", "yml"])
@pytest.mark.parametrize("name", ["../../escaped", "{tmp}/planted"], ids=["dot-dot", "absolute"])
def test_an_inventory_host_whose_name_is_no_plain_name_is_refused_at_load_and_nothing_is_written(
        box: Box, swapctl_env, tmp_path, form, name):
    """`../../escaped` or an absolute path as an inventory host, its ansible_host the lab's real sshd: fetch-logs
    once wrote the host's log outside --dest."""
    (swapctl_env / "home" / ".ssh").mkdir(exist_ok=True)
    box.log.write_text("the daemon's log\n")
    name = name.format(tmp=tmp_path)
    s = box.server
    hostvars = {"ansible_host": s.address, "ansible_port": s.port, "ansible_user": "root",
                "ansible_ssh_private_key_file": str(s.client_key)}
    inventory = tmp_path / f"hosts.{form}"
    if form == "ini":
        inventory.write_text("[gpus]\n" + name + " " + " ".join(f"{k}={v}" for k, v in hostvars.items()) + "\n")
    else:
        inventory.write_text(json.dumps({"gpus": {"hosts": {name: hostvars}}}))  # JSON is YAML
    dest = tmp_path / "a" / "b" / "logs"
    r = fetch_logs_from_inventory(box, swapctl_env, inventory, dest)
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    where = f"{inventory}:2" if form == "ini" else str(inventory)
    assert line.startswith(f"swapctl: {where}: group 'gpus': host {name!r} "), line
    assert "rename it" in line
    assert not (dest.parent.parent / "escaped").exists() and not (tmp_path / "planted").exists()
    assert not dest.exists()


@pytest.mark.parametrize("name, problem", [
    ("../x", "holds a `/`"), ("..", "is `..`"), (".", "is `.`"), ("", "is empty"),
    ("gpu\n01", "holds a control character"), ("gpu\u202e10", "holds a control character"),
])
def test_a_playbook_host_whose_name_is_no_plain_name_is_refused_with_its_key(tmp_path, name, problem):
    path = str(tmp_path / "swapctl.toml")
    with pytest.raises(pb.PlaybookError) as e:
        pb.parse(f'[hosts.{json.dumps(name)}]\naddress = "10.0.0.1"\n', path)
    assert str(e.value).startswith(f"{path}: hosts.{name!r}: {problem}"), e.value
    assert "\n" not in str(e.value)
    with pytest.raises(pb.PlaybookError, match=re.escape(f"host {name!r} {problem}")):
        pb.resolve_host(pb.Playbook(path=path), name, ssh_aliases={name})


@pytest.mark.parametrize("host, names, problem", [
    ("..", (), "'..' is `..`"), ("gpu-01", ("..",), "'..' is `..`"), ("/root/.ssh", (), "holds a `/`"),
    ("gpu-01", ("a/b",), "'a/b' holds a `/`"),
])
def test_every_local_path_built_from_a_host_name_stays_under_dest(tmp_path, host, names, problem):
    assert host_path(tmp_path, "gpu-01", "cuzk.log") == tmp_path / "gpu-01" / "cuzk.log"
    with pytest.raises(BadInput, match=re.escape(problem) + f".* names no file under {re.escape(str(tmp_path))}"):
        host_path(tmp_path, host, *names)


# -- 10: secrets and records only in new files, in directories of the invoking user nobody else can write -----

def as_user(user: pwd.struct_passwd, *argv: str) -> None:
    subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *argv],
                   check=True)


@pytest.fixture
def pub(shared_dir: Path) -> Path:  # noqa: F811
    """A directory every user may make things in, as /tmp (sticky)."""
    d = shared_dir / "pub"
    d.mkdir()
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d)


def secret_playbook(tmp_path: Path) -> Path:
    book = tmp_path / "swapctl.toml"
    book.write_text('[hosts.gpu-a]\naddress = "10.0.0.5"\n[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\n'
                    'secret_env = ["KEY"]\n[daemon.env]\nKEY = "s3cret"\n')
    return book


@pytest.mark.parametrize("made_by", ["U", "root, writable by all"])
def test_export_ansible_writes_no_secret_into_a_directory_another_user_made_first(pub, daemon_user,  # noqa: F811
                                                                                  tmp_path, made_by):
    """U makes DIR/group_vars/cuzk/secrets.yml first, a file U reads (or DIR is root's but any user may write it,
    and U made the rest): export-ansible once wrote the secrets into U's file."""
    user, out = daemon_user, pub / "out"
    if made_by != "U":
        out.mkdir()
        out.chmod(0o777)
    as_user(user, "mkdir", "-p", str(out / "group_vars" / "cuzk"))
    as_user(user, "sh", "-c", f"echo planted > {out}/group_vars/cuzk/secrets.yml; chmod 666 {out}/group_vars/cuzk/*")
    r = swapctl("export-ansible", str(out), "-p", str(secret_playbook(tmp_path)))
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    owner = user.pw_name if made_by == "U" else "root"
    assert line.startswith(f"swapctl: {out} is {owner}'s, mode "), line
    assert "nobody else can write; pick another" in line
    assert (out / "group_vars/cuzk/secrets.yml").read_text() == "planted\n" and not (out / "inventory.ini").exists()


def test_export_ansible_replaces_a_link_in_its_own_directory_and_writes_through_none(tmp_path):
    """A secrets.yml that is a link (to a file everyone reads) in the user's own directory: the secrets go into a
    new file of mode 0600 that takes its name; the link's target is untouched."""
    target = tmp_path / "public.txt"
    target.write_text("public\n")
    below = tmp_path / "out" / "group_vars" / "cuzk"
    below.mkdir(parents=True)
    (below / "secrets.yml").symlink_to(target)
    r = swapctl("export-ansible", str(tmp_path / "out"), "-p", str(secret_playbook(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert target.read_text() == "public\n" and not (below / "secrets.yml").is_symlink()
    assert (below / "secrets.yml").stat().st_mode & 0o777 == 0o600 and "s3cret" in (below / "secrets.yml").read_text()
    assert sorted(p.name for p in below.iterdir()) == ["secrets.yml", "swapctl.yml"]  # no temporary left


@pytest.mark.parametrize("made_by", ["U", "root, writable by all"])
def test_fetch_logs_writes_its_record_through_no_link_another_user_planted(box: Box, pub, daemon_user,  # noqa: F811
                                                                           swapctl_env,
                                                                           tmp_path, made_by):
    """U makes DEST/lab/ first, with `.swapctl-fetch.tmp` a link to a file of root's (or DEST is root's but any
    user may write it): fetch-logs once wrote its record over root's file through the link, and kept it."""
    user, dest = daemon_user, pub / "logs"
    if made_by != "U":
        dest.mkdir()
        dest.chmod(0o777)
    victim = tmp_path / "roots-file"
    victim.write_text("root's\n")
    as_user(user, "mkdir", "-p", str(dest / "lab"))
    as_user(user, "ln", "-s", str(victim), str(dest / "lab" / ".swapctl-fetch.tmp"))
    box.log.write_text("the daemon's log\n")
    box.write_playbook(logs={"paths": [str(box.log)]})
    r = swapctl("fetch-logs", "lab", "--dest", str(dest), "-p", str(box.playbook_path))
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    owner = user.pw_name if made_by == "U" else "root"
    assert line.startswith(f"swapctl: {dest} is {owner}'s, mode "), line
    assert victim.read_text() == "root's\n" and (dest / "lab" / ".swapctl-fetch.tmp").is_symlink()
    assert sorted(p.name for p in (dest / "lab").iterdir()) == [".swapctl-fetch.tmp"]


# -- 12: no text read from a log is parsed by the plotting library -------------------------------------------

SAVED = Path(__file__).resolve().parent / "data" / "h200-gpm" / "run1" / "default"


def hostile_log(tmp_path: Path) -> Path:
    """The saved H200 run's log with worker 0 named `$\\bogus$` (mathtext matplotlib cannot parse) and worker 1
    `\\xff$` (no UTF-8), under a file name with a `$...$` of its own."""
    log = tmp_path / "cuzk-$\\bogus$.log"
    log.write_bytes((SAVED / "cuzk.log").read_bytes().replace(b"worker=0,", b"worker=$\\bogus$,")
                    .replace(b"worker=1,", b"worker=\xff$,"))
    return log


def test_timings_plot_draws_a_log_whose_fields_are_mathtext(tmp_path):
    png = tmp_path / "timeline.png"
    r = swapctl("timings", str(hostile_log(tmp_path)), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_experiments_report_draws_a_log_whose_fields_are_mathtext(tmp_path):
    from swapctl.experiment import verdict
    from swapctl.experiment.html import write_html
    from swapctl.gpu.samples import read_samples
    from swapctl.logs.timings import ByteRange
    from swapctl.logs.timings import parse as parse_log

    class Window:  # what the experiment's Window gives the report, from the files (as tests/saved_report.py)
        local = hostile_log(tmp_path)

        def runs(self, start: int, end: int | None = None):
            with open(self.local, "rb") as f:
                return parse_log([ByteRange(f, start, f.seek(0, 2) if end is None else end)]).runs

        def samples(self) -> list:
            return read_samples([SAVED / "gpu-samples.dmon"])

    win = Window()
    data = win.local.read_bytes()
    b_start = data.rindex(b"\n", 0, data.index(b"cuzk-daemon starting", data.index(b"cuzk-daemon starting") + 1)) + 1
    out = tmp_path / "report.html"
    write_html(out, verdict(win.runs(0, b_start), win.runs(b_start), win.samples()), "h$\\bogus$", "b", win,
               (0, b_start))
    assert out.read_text().count("<img alt='timeline") == 2
