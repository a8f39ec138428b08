"""`swapctl timings`' tables and timeline on logs the stand-in prover wrote across many starts: the plot
numbers runs as the text table does (a run with no proof included), draws at most a few of them, the runs
table says how long each run lived beside how long it proved, and `--by-release` has a column per release
that reads at 80 columns."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from lab import prover_config, swapctl, wait_until


def _start(binary: Path, log: Path, cwd: Path, jobs: int, idle_s: float = 0.0) -> None:
    """One daemon run appended to `log`: the stand-in makes `jobs` proofs, idles `idle_s`, and is killed."""
    (cwd / "c.toml").write_text(prover_config(jobs=jobs))
    text = log.read_bytes() if log.exists() else b""
    before, ready = text.count(b"self-check PASSED"), text.count(b"cuzk-daemon ready")
    with open(log, "ab") as out:
        proc = subprocess.Popen([str(binary), "--config", str(cwd / "c.toml")], stdout=out,
                                stderr=subprocess.STDOUT, cwd=cwd)
        try:
            wait_until(lambda: log.read_bytes().count(b"cuzk-daemon ready") > ready
                       and log.read_bytes().count(b"self-check PASSED") >= before + jobs, what=f"{jobs} proofs")
            time.sleep(idle_s)  # the run lives on without a line: what its table row must still show
        finally:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def many_runs(prover, tmp_path_factory) -> Path:
    """21 starts in one log: the first proves once and idles 3 s, the second proves nothing, 19 prove once."""
    d = tmp_path_factory.mktemp("runs")
    log = d / "cuzk.log"
    _start(prover, log, d, 1, idle_s=3.0)
    _start(prover, log, d, 0)
    for _ in range(19):
        _start(prover, log, d, 1)
    return log


def test_the_plot_numbers_runs_as_the_table_does_and_draws_at_most_four(many_runs, tmp_path):
    """After a run with no proof the plot's run N was the table's N+1, and 21 runs stacked into one
    7,623-pixel-high PNG."""
    from matplotlib import image

    from swapctl.logs.plot import runs
    from swapctl.logs.timings import parse_files

    table = parse_files([str(many_runs)]).runs
    with open(many_runs, "rb") as f:
        lanes = runs([f])
    assert len(lanes) == len(table) == 21
    assert [bool(x) for x in lanes] == [r.jobs > 0 for r in table] == [True, False] + [True] * 19
    png = tmp_path / "t.png"
    r = swapctl("timings", str(many_runs), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert "timeline: the last 4 of 20 runs with proofs (runs 18-21); --run N draws another" in r.stderr, r.stderr
    assert image.imread(str(png)).shape[0] < 2000
    one = swapctl("timings", str(many_runs), "--run", "2", "--plot", str(tmp_path / "2.png"))
    assert one.returncode == 2 and "no TIMELINE lines" in one.stderr, one.stderr  # run 2 made no proof


def test_the_runs_table_says_how_long_each_run_lived_beside_how_long_it_proved(many_runs):
    """A run that proved for a fraction of a second and lived seconds read `wall 0.1 s`."""
    r = swapctl("timings", str(many_runs), env={"COLUMNS": "160"})
    assert r.returncode == 0, r.stderr
    head = next(line for line in r.stdout.splitlines() if "first line (UTC)" in line)
    assert re.search(r"lived\s*[│┃]\s*proving", head) and "wall" not in head, head
    row = next(line for line in r.stdout.splitlines() if re.match(r"│ 1\s+│", line))
    lived, proving = (float(x) for x in re.findall(r"│\s+([\d.]+) s\s+", row)[:2])
    assert lived >= 3.0 and proving < 1.0, row
    last = next(line for line in r.stdout.splitlines() if re.match(r"│ 21\s+│", line))
    assert "≥ " in last, last  # the last run: at least to its own last line


def test_by_release_has_a_column_per_release_that_reads_at_80_columns(box, prover, prover_b, tmp_path, swapctl_env):
    """A deploy and a rollback are three starts of two releases: the table had a column a start, headed by
    its byte range, every cell `…` at 80 columns."""
    from test_logs import fetch

    box.write_playbook(logs={"paths": [str(box.log)]})
    box.start_by_hand(prover, prover_config(jobs=2))
    wait_until(lambda: box.log.read_bytes().count(b"self-check PASSED") >= 2, what="build A's proofs")
    assert swapctl("deploy", "lab", "--binary", str(prover_b), "--yes", "-p", str(box.playbook_path)).returncode == 0
    assert swapctl("rollback", "lab", "--yes", "-p", str(box.playbook_path)).returncode == 0
    wait_until(lambda: box.log.read_bytes().count(b"self-check PASSED") >= 4, what="build A's proofs again")
    dest = tmp_path / "logs"
    assert fetch(box, dest).returncode == 0
    args = ("timings", "lab", "--by-release", "--dest", str(dest), "-p", str(box.playbook_path))
    r = swapctl(*args, env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "…" not in r.stdout and max(len(line) for line in lines) <= 80, r.stdout
    a, b = (hashlib.sha256(p.read_bytes()).hexdigest()[:12] for p in (prover, prover_b))
    head = " ".join(lines[:6])
    assert head.index(b) < head.index(a), r.stdout  # one column each, the release that runs now rightmost
    assert "2 starts" in r.stdout and "1 start" in r.stdout, r.stdout
    proofs = next(line for line in lines if line.startswith("│ proofs"))
    assert len(re.findall(r"\d+", proofs)) == 2, proofs  # a cell a release
    every = json.loads(swapctl(*args, "--json").stdout)["releases"]
    assert [p["release"] for p in every] == [a, b, a]  # --json keeps each start
    # a release's column counts its starts' proofs: each byte range read its own bytes (the ranges of one open
    # file read from where the last one made had left it: A's 2 starts counted as 1 proof or so)
    assert [int(n) for n in re.findall(r"\d+", proofs)] == [every[1]["report"]["jobs"],
                                                            every[0]["report"]["jobs"] + every[2]["report"]["jobs"]]
