"""Issue 47's rough edges: what the docs say against what the tool and the stand-in do. Each test names the
page and the line that said otherwise; the behaviour they describe is held by the tests they cite."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from swapctl import sandbox_hosts
from swapctl.playbook.load import parse

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_every_page_says_two_rollbacks_toggle_as_the_tool_does():
    """rollback goes to what ran before the current release, so two in a row toggle between the last two
    (tests/test_rollback.py::test_two_rollbacks_in_a_row_toggle_between_the_last_two); deploy.md said they
    went two releases back. promises.md names the old rule as replaced, which is its history, not a claim."""
    said = {}
    for p in sorted(DOCS.glob("*.md")):
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if "two rollbacks" in line and "replaces the old rule" not in line:
                said[f"{p.name}:{n}"] = line
    assert "deploy.md" in " ".join(said) and "promises.md" in " ".join(said), said
    wrong = {k: v for k, v in said.items() if "toggle" not in v or "releases back" in v}
    assert wrong == {}


def test_the_hand_started_example_is_described_as_its_playbook_has_it():
    """guide.md said `hand-started` runs `/data/cuzk`; the example's daemon is /data/cuzk-priodisp on port
    40612, as commands.md says. Each page that describes the example names its binary and port."""
    example = tomllib.loads((ROOT / "playbooks" / "hand-started.toml").read_text())
    binary, port = example["daemon"]["binary"], example["hosts"]["gpu-box"]["port"]
    for name in ("guide.md", "commands.md"):
        text = " ".join(page(name).split())
        described = re.search(r"`hand-started` \(([^)]*)\)", text)
        assert described, f"{name} describes the hand-started example"
        paths = re.findall(r"`(/[^`]*)`", described.group(1))
        assert paths == [binary] and f"port {port}" in described.group(1), (name, described.group(1))


VALUED = {"-p", "--playbook", "-i", "--binary", "--report", "--plot", "--dest", "--output", "--dir", "--port",
          "--hosts", "--to", "--for", "--proofs", "--baseline", "--then", "--resolve", "--run", "--build-arg",
          "--match", "--user", "--example", "--from", "--samples", "--pid", "--max-mib", "--quiet-s"}
WRITTEN = {"--report", "--plot", "--dest", "--output", "--dir"}  # paths the command makes
SUBCOMMANDS = {"up", "down", "start", "stop", "status"}


def placeholder(word: str) -> bool:
    return word.upper() == word and any(c.isalpha() for c in word)


def unrunnable(command: str, hosts: set[str], groups: set[str]) -> list[str]:
    """The names in one example command that do not exist on the sandbox (sandbox up --hosts 3)."""
    words = shlex.split(command)[1:]
    bad, i = [], 0
    verb = next((w for w in words if not w.startswith("-")), "")
    while i < len(words):
        w = words[i]
        if w in VALUED and i + 1 < len(words):
            value = words[i + 1]
            made = value.startswith(".sandbox/") or w in WRITTEN or not ("/" in value or "." in value)
            if not placeholder(value) and not made and not (ROOT / value).exists():
                bad.append(f"{w} {value}")
            i += 2
            continue
        if not w.startswith("-") and w != verb and not placeholder(w) and w not in SUBCOMMANDS:
            known = groups if w.startswith("@") else hosts
            if w.lstrip("@") not in known:
                bad.append(w)
        i += 1
    return bad


def test_every_example_command_in_commands_md_names_what_the_sandbox_has(tmp_path):
    """commands.md showed `swapctl status gpu1` and `swapctl -i hosts.ini status @gpus`: a reader trying
    them on the sandbox met names that exist nowhere. Every concrete command on the page (not a synopsis
    with [options]) names the sandbox's hosts and groups, files the sandbox or the repository has, or a
    placeholder in capitals."""
    book = parse(sandbox_hosts.playbook(tmp_path, 40612, 3), str(tmp_path / "swapctl.toml"))
    hosts, groups = set(book.hosts), set(book.groups)
    text = " ".join(page("commands.md").split())
    examples = [c for c in re.findall(r"`(swapctl [^`]*)`", text) if "[" not in c and "\\|" not in c]
    assert len(examples) >= 5, examples
    found = {c: unrunnable(c, hosts, groups) for c in examples}
    assert {c: b for c, b in found.items() if b} == {}
    assert unrunnable("swapctl -i hosts.ini status @gpus", hosts, groups) == ["-i hosts.ini", "@gpus"]
    assert unrunnable("swapctl status gpu1", hosts, groups) == ["gpu1"]


def test_the_sandbox_row_names_every_option_sandbox_up_takes():
    """commands.md's sandbox row left out --hosts, the farm the issue asks the sandbox to show."""
    import typer.main

    from swapctl.cli.sandbox import app

    command = typer.main.get_command(app)
    up = command.commands["up"]  # type: ignore[attr-defined]
    options = {o for p in up.params for o in p.opts if o.startswith("--") and o != "--help"}
    row = next(line for line in page("commands.md").splitlines() if line.startswith("| `swapctl sandbox"))
    synopsis = row.split("|")[1] + row.split("|")[2]
    assert {o for o in options if o not in synopsis} == set()


def test_contributing_says_what_the_stand_in_does_at_sigint():
    """contributing.md said SIGINT is logged and ignored. The stand-in does what cuzk does (prover.cpp's
    shutdown(), main.rs:233-239): no new job or partition starts, the GPU's work finishes, the process does
    not exit (tests/test_drain.py::test_sigterm_kills_the_stand_in_mid_proof_and_sigint_does_not_make_it_exit
    runs it); SIGTERM ends it."""
    source = (ROOT / "images" / "prover" / "prover.cpp").read_text()
    assert "received SIGINT, shutting down" in source and "e.shutdown = true" in source
    text = " ".join(page("contributing.md").split())
    said = text[text.index("SIGINT"):text.index("Per partition:")]
    assert "ignored" not in said
    for claim in ("received SIGINT, shutting down", "no new job or partition starts", "does not exit",
                  "SIGTERM ends it"):
        assert claim in said, claim
    assert "test_sigterm_kills_the_stand_in_mid_proof_and_sigint_does_not_make_it_exit" in said
