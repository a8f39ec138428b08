"""A newcomer's first steps past the quick start (issue 47): `deploy --build` alone, `swapctl build` from the
directory the quick start leaves (./swapctl.toml a link into .sandbox/), and the one line when no Docker
engine answers. In-process (swapctl.cli.environment), no host asked."""

from __future__ import annotations

import os
from pathlib import Path

from swapctl.cli.environment import Environment, run

PLAYBOOK = """[hosts.lab]
address = "192.0.2.1"
port = 1

[daemon]
binary = "/data/cuzk"
log = "/data/cuzk.log"
"""


def test_deploy_build_alone_builds_from_the_playbooks_build_table(tmp_path):
    """`deploy HOST --build` with no --build-arg said "give either --binary PATH or --build": it passed the
    build args (None when none is given) as the flag itself. Now it goes on to the build, which here finds
    no Dockerfile and says so, before any host is asked."""
    book = tmp_path / "swapctl.toml"
    book.write_text(PLAYBOOK + '\n[build]\ndockerfile = "Dockerfile.none"\n')
    ran = run(["deploy", "lab", "--build", "--yes", "-p", str(book)])
    assert "give either" not in ran.stderr, ran.stderr
    assert ran.code == 2 and f"build.dockerfile: {tmp_path / 'Dockerfile.none'} does not exist" in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1


def test_build_after_the_quick_start_finds_the_dockerfile_beside_the_link_and_names_a_missing_engine_plainly(
        tmp_path):
    """The quick start leaves ./swapctl.toml a link to .sandbox/swapctl.toml; `swapctl build` looked for the
    default Dockerfile.cuzk-rebuild in .sandbox/ (the link's target's directory), not beside ./swapctl.toml
    where the user's clone has it. With no engine the message carried urllib3's tuple repr."""
    (tmp_path / ".sandbox").mkdir()
    (tmp_path / ".sandbox" / "swapctl.toml").write_text(PLAYBOOK)
    (tmp_path / "swapctl.toml").symlink_to(".sandbox/swapctl.toml")
    (tmp_path / "Dockerfile.cuzk-rebuild").write_text("FROM scratch\n")
    sock = tmp_path / "no-engine.sock"
    ran = run(["build", "-p", str(tmp_path / "swapctl.toml")], Environment(environ={"DOCKER_HOST": f"unix://{sock}"}))
    assert "does not exist" not in ran.stderr, ran.stderr
    assert ran.code == 3, ran.stderr
    line = ran.stderr.strip()
    assert line.startswith(f"swapctl: no Docker engine answers at unix://{sock} (No such file or directory);"), line
    assert "('" not in line and "Error(" not in line and len(line.splitlines()) == 1


def test_the_no_engine_reason_is_the_systems_words_for_a_refused_tcp_port(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        book = tmp_path / "swapctl.toml"
        book.write_text(PLAYBOOK)
        (tmp_path / "Dockerfile.cuzk-rebuild").write_text("FROM scratch\n")
        ran = run(["build", "-p", str(book)], Environment(environ={"DOCKER_HOST": f"tcp://127.0.0.1:{port}"}))
    assert ran.code == 3
    assert f"no Docker engine answers at tcp://127.0.0.1:{port} (Connection refused);" in ran.stderr, ran.stderr
    assert "HTTPConnection" not in ran.stderr and os.linesep not in ran.stderr.strip()



def test_sandbox_up_again_keeps_a_playbook_the_user_edited_and_fresh_saves_it_before_writing_its_own(tmp_path):
    """A second `sandbox up` (the quick start run again) rewrote .sandbox/swapctl.toml, which ./swapctl.toml
    links to, and silently dropped the user's keys. An edited playbook is kept (the sandbox's own beside it
    as .dist, said in one line); `--fresh` saves it beside first; an unedited one is the sandbox's to rewrite."""
    from swapctl.playbook import examples

    from lab import free_port, swapctl

    sandbox, port = tmp_path / "sandbox", free_port()
    try:
        assert swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port)).returncode == 0
        playbook = sandbox / "swapctl.toml"
        ours = examples.render("sandbox", SANDBOX=str(sandbox.resolve()), PORT=str(port), STATUS_PORT=str(port + 1))
        assert playbook.read_text() == ours
        mine = ours.replace("stop_grace_s = 10", "stop_grace_s = 30  # mine") + '\n[rollout]\ncanary = 1\n'
        playbook.write_text(mine)
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port))
        assert r.returncode == 0, r.stderr
        assert playbook.read_text() == mine  # the user's keys are all there
        kept = [line for line in r.stdout.splitlines() if line.startswith("kept ")]
        assert kept == [f"kept {playbook.resolve()}: it was edited; the sandbox's own is {playbook.resolve()}.dist "
                        "(`sandbox up --fresh` saves yours beside it and writes the sandbox's)"], r.stdout
        assert (sandbox / "swapctl.toml.dist").read_text() == ours
        assert swapctl("status", "sandbox", "-p", str(playbook)).returncode == 0  # and the sandbox runs with it

        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(port), "--fresh")
        assert r.returncode == 0, r.stderr
        [saved] = sandbox.glob("swapctl.toml.edited-*")
        assert saved.read_text() == mine and playbook.read_text() == ours
        assert f"saved your edited playbook as {saved.resolve()}" in r.stdout
        assert not (sandbox / "swapctl.toml.dist").exists()

        other = free_port()  # the sandbox's own playbook, unedited, follows the sandbox: no line, no copy
        r = swapctl("sandbox", "up", "--dir", str(sandbox), "--port", str(other))
        assert r.returncode == 0 and "kept " not in r.stdout and "saved " not in r.stdout, r.stdout
        assert playbook.read_text() == examples.render("sandbox", SANDBOX=str(sandbox.resolve()), PORT=str(other),
                                                    STATUS_PORT=str(other + 1))
        assert list(sandbox.glob("swapctl.toml.edited-*")) == [saved]  # the user's saved copy outlives ups
    finally:
        swapctl("sandbox", "down", "--dir", str(sandbox))


def test_no_page_of_the_docs_points_into_the_shared_folder_a_users_clone_does_not_have():
    """docs/ and the README cite cuzk's and Curio's own source (repository, commit, file:line), never the
    development machine's ../shared/ notes, which a clone of swapctl does not have."""
    root = Path(__file__).resolve().parent.parent
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    pointing = [f"{p.relative_to(root)}:{n}" for p in pages
                for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "../shared" in line]
    assert pointing == []
