"""The newcomer's path end to end on one fresh sandbox (issue 47's "Done when"), run as the README and
docs/ give it, from a directory laid out as the quick start leaves a clone (`.sandbox/`, `./swapctl.toml` a
link to its playbook): the quick start's commands, `status` with the daemon's own view, a deploy that drains
(nothing lost), the docs' experiment with its verdict and its HTML report read as headless Chromium renders
it, a short window that has no verdict, and `sandbox up --hosts 3` rolled with a canary. No timing is
asserted here: benchmarks/newcomer_time.py times the experiment."""

from __future__ import annotations

import calendar
import hashlib
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from lab import Ran, free_port, swapctl

ROOT = Path(__file__).resolve().parent.parent
UTC = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


def quick_start_commands() -> list[list[str]]:
    """The swapctl commands scripts/quickstart runs after `sandbox up`, as it writes them (between its
    `set -x` and `set +x`), so this test follows the quick start the README points to."""
    script = (ROOT / "scripts" / "quickstart").read_text()
    traced = script.split("\nset -x\n", 1)[1].split("\nset +x\n", 1)[0]
    return [shlex.split(line, comments=True) for line in traced.splitlines() if line.strip()]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def running(host: str = "@farm") -> dict[str, str]:
    """Each host's release that runs now, by its sha256's first 12 (status's current release is its path)."""
    r = swapctl("status", host, "--json")
    assert r.returncode == 0, r.stderr
    return {name: re.sub(r".*/releases/([0-9a-f]{12})/[^/]+$", r"\1", h["current_release"] or "-")
            for name, h in json.loads(r.stdout)["hosts"].items()}


def current_release() -> str:
    return running("sandbox")["sandbox"]


def rendered_text(page: Path) -> str:
    """The page's text as headless Chromium renders it: its DOM after load, tags, styles and blanks dropped."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "chromium is needed (bash scripts/system-deps installs it: apt-get install chromium)"
    dom = subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom",
                          f"file://{page.resolve()}"], check=True, capture_output=True, text=True, timeout=120).stdout
    assert "</body>" in dom, dom[-500:]
    text = re.sub(r"<[^>]+>", " ", re.sub(r"(?s)<(style|script)>.*?</\1>", "", dom))
    return " ".join(html.unescape(text).split())


def the_quick_start(sandbox: Path, port: int) -> None:
    """scripts/quickstart's status, deploy and history, word for word: the first status shows the daemon's
    own view (the counters its /status serves), and the deploy drains the proof in flight and loses none."""
    commands = quick_start_commands()
    assert [c[:2] for c in commands] == [["swapctl", "status"], ["swapctl", "deploy"], ["swapctl", "history"]]
    status = swapctl(*commands[0][1:])
    assert status.returncode == 0, status.stderr
    view = re.search(r"^daemon's view: up [^,]+, (\d+) completed, 0 failed since start", status.stdout, re.M)
    assert view, status.stdout
    with urllib.request.urlopen(f"http://127.0.0.1:{port + 1}/status", timeout=10) as answer:
        own = json.load(answer)  # the daemon's own, asked after swapctl asked it: as many proofs or more
    assert 1 <= int(view[1]) <= own["counters"]["total_completed"], (view[0], own["counters"])
    workers = re.search(r"^\s+GPU workers: (\d+) proving, (\d+) idle$", status.stdout, re.M)
    assert workers and int(workers[1]) + int(workers[2]) == len(own["gpu_workers"]), status.stdout

    deploy = swapctl(*commands[1][1:])
    said = " ".join(deploy.stderr.split())
    assert deploy.returncode == 0, deploy.stderr
    assert "would be lost: 1 proof in flight (job " in said or "in flight: 0 proofs in flight" in said, said
    assert "stop: draining " in said and re.search(r"stop: drained in [\d.]+ s: nothing in flight at its last "
                                                   r"reading", said), said
    b = sha(sandbox / "builds" / "prover-b")
    history = swapctl(*commands[2][1:])
    assert history.returncode == 0 and b[:12] in history.stdout, history.stdout
    journal = json.loads(swapctl("history", "sandbox", "--json").stdout)["journal"]
    [entry] = journal
    assert (entry["action"], entry["outcome"], entry["to"], entry["lost"]) == ("deploy", "deployed", b, 0), entry
    assert current_release() == b[:12]


def the_docs_experiment(clone: Path, a: str, b: str) -> None:
    """docs/commands.md's `swapctl experiment sandbox --binary .sandbox/builds/prover-b --report exp.html`
    (with --yes: no terminal): a verdict, and a report that names both builds by sha256 (and what each says
    of itself and the GPU workers it started), B's window (when,
    for how long, its proofs as the terminal said), that B was rolled back (`ask` with no terminal) and that
    the verdict stands."""
    began = time.time()
    r = swapctl("experiment", "sandbox", "--binary", ".sandbox/builds/prover-b", "--report", "exp.html", "--yes",
                timeout=300)
    ended = time.time()
    assert r.returncode == 0, r.stderr
    verdict = re.search(r"^verdict: (.+)$", r.stdout, re.M)
    assert verdict, r.stdout
    proofs = re.search(r"^\s+proofs\s+(\d+)\s+(\d+)\s+\(after the warm-up\)$", r.stdout, re.M)
    assert proofs, r.stdout
    assert current_release() == a[:12]  # rolled back, as the report will say

    page = rendered_text(clone / "exp.html")
    assert verdict[1] in page, page
    # each build also by what it said of itself when uploaded (A was started by hand: nothing; B: the
    # stand-in's `--version`) and the GPU workers its start logged (the stand-in's two pipeline workers)
    row = re.search(rf"\bbefore {a} - pipeline ×2 ({UTC}) \d+ s of its log {proofs[1]} "
                    rf"B {b} prover b pipeline ×2 ({UTC}) (\d+) s window {proofs[2]} ", page)
    assert row, page
    window_began = calendar.timegm(time.strptime(row[2], "%Y-%m-%d %H:%M:%S UTC"))
    assert began - 1 <= window_began <= ended and 0 < int(row[3]) <= ended - window_began + 1, (row[0], began)
    assert "B was rolled back: the build before it runs again; the verdict stands." in page, page
    assert "no verdict" not in page and "95% CI" in page


def a_window_too_short_for_a_verdict(clone: Path, b: str) -> None:
    """A 2 s window holds no proof of B after its warm-up: no `verdict:` line, exit 6, and the report says
    "no verdict" with no interval or mark, and that B was kept (--then keep), which it was."""
    r = swapctl("experiment", "sandbox", "--binary", ".sandbox/builds/prover-b", "--for", "2s", "--then", "keep",
                "--report", "short.html", "--yes", timeout=180)
    assert r.returncode == 6, r.stderr
    assert not re.search(r"^verdict:", r.stdout, re.M) and "p=" not in r.stdout, r.stdout
    reason = re.search(r"^no verdict: (B made [01] proofs? in the window after its warm-up \(need 3 a side\): too "
                       r"few to judge)$", r.stdout, re.M)
    assert reason, r.stdout
    assert current_release() == b[:12]

    page = rendered_text(clone / "short.html")
    assert f"B was kept: it runs now; no verdict: {reason[1]}." in page, page
    assert re.search(rf"\bB {b} prover b pipeline ×2 {UTC} \d+ s window [01] ", page), page
    assert "the verdict stands" not in page and "95% CI" not in page
    assert 'class="sig"' not in (clone / "short.html").read_text()


def a_farm_rolled_with_a_canary(port: int, b: str) -> None:
    """`sandbox up --hosts 3`, then the guide's `deploy @farm`: the canary first, its pause and its check,
    then one host at a time, and the rollout's table with each host's outcome."""
    r = swapctl("sandbox", "up", "--port", str(port), "--hosts", "3")
    assert r.returncode == 0, r.stderr
    assert f"sandbox up: 3 hosts in group `farm` (sandbox, sandbox-2, ...) at 127.0.0.1:{port}-{port + 2}" in r.stdout
    r = swapctl("deploy", "@farm", "--binary", ".sandbox/builds/prover-b", "--yes", timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    order = [next((i for i, x in enumerate(lines) if x.startswith(p)), -1) for p in (
        "sandbox ready: ", "canaries run for 10 s before the rollout goes on", "canary sandbox: up as pid",
        "sandbox-2 connect: ", "sandbox-2 ready: ", "sandbox-3 connect: ", "sandbox-3 ready: ")]
    assert -1 not in order and order == sorted(order), r.stderr  # the canary, its pause, then one host a time
    table = {m[1]: m[2] for m in re.finditer(r"^│ (sandbox(?:-\d)?)\s+│ (\w[\w ]*?)\s+│", r.stdout, re.M)}
    assert table == dict.fromkeys(("sandbox", "sandbox-2", "sandbox-3"), "deployed"), r.stdout
    assert running() == dict.fromkeys(table, b[:12])


@pytest.mark.host
@pytest.mark.skipif(os.geteuid() != 0, reason="the farm puts each host in namespaces of its own: run as root")
def test_the_newcomers_path_from_the_quick_start_to_a_farm_on_one_fresh_sandbox(tmp_path, swapctl_env, monkeypatch):
    """One sandbox, the README's and docs' commands as written, from the clone's directory."""
    clone, port = tmp_path / "clone", free_port()
    clone.mkdir()
    monkeypatch.chdir(clone)
    sandbox = clone / ".sandbox"
    try:
        up: Ran = swapctl("sandbox", "up", "--port", str(port))  # the quick start's, on a port of the test's own
        assert up.returncode == 0, up.stderr
        (clone / "swapctl.toml").symlink_to(".sandbox/swapctl.toml")  # as the quick start links it
        a, b = sha(sandbox / "builds" / "prover-a"), sha(sandbox / "builds" / "prover-b")
        the_quick_start(sandbox, port)
        r = swapctl("rollback", "sandbox", "--yes")  # the README's next step: build A again
        assert r.returncode == 0 and current_release() == a[:12], r.stderr
        the_docs_experiment(clone, a, b)
        a_window_too_short_for_a_verdict(clone, b)
        r = swapctl("rollback", "sandbox", "--yes")  # B kept: A again, so the farm's canary has a build to swap
        assert r.returncode == 0 and current_release() == a[:12], r.stderr
        a_farm_rolled_with_a_canary(port, b)
    finally:
        swapctl("sandbox", "down")
