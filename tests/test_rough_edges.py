"""Issue 47's rough edges: what the docs say against what the tool and the stand-in do. Each test names the
page and the line that said otherwise; the behaviour they describe is held by the tests they cite."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

from swapctl import sandbox_hosts
from swapctl.playbook.load import parse

from lab import swapctl

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


# ---- the experiment's charts ---------------------------------------------------------------------------------

DATA = ROOT / "tests" / "data"


def _stand_in_log(binary: Path, tmp_path: Path, proofs: int, **config: int) -> Path:
    """The log of the stand-in proving steadily until it has made `proofs` proofs."""
    import subprocess

    from lab import prover_config, wait_until

    (tmp_path / "c.toml").write_text(prover_config(jobs=-1, **config))
    log = tmp_path / "p.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(binary), "--config", str(tmp_path / "c.toml")], stdout=out,
                                stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            wait_until(lambda: log.read_text(errors="replace").count("self-check PASSED") >= proofs, timeout=120,
                       what=f"{proofs} proofs")
        finally:
            proc.kill()
            proc.wait()
    return log


def _on_the_axes(fig) -> list[str]:
    """Each legend entry of `fig` whose legend overlaps the plotting area of any of its axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    over = []
    for ax in fig.axes:
        if (legend := ax.get_legend()) is None:
            continue
        box = legend.get_window_extent(renderer)
        for other in fig.axes:
            if box.overlaps(other.bbox):
                over += [f"{t.get_text()} over {other.get_title() or 'an axis'}" for t in legend.get_texts()]
    return over


def _entries(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if (lg := ax.get_legend()) for t in lg.get_texts()]


def test_a_long_windows_timeline_draws_each_bar_wide_enough_to_see_with_its_legend_beside_the_axes(prover, tmp_path):
    """A 3-minute window on the sandbox (bars of 0.05-0.4 s, some 450 of them end to end) drew each bar under
    3 px on the 14-inch figure, with the legend on the bars. The stand-in here makes as many bars for its
    length, faster: the axis shows its last stretch (said in its title) where the median bar is 8 px or more,
    and the legend sits beside the axes, an entry for each phase it drew."""
    from swapctl.logs import plot

    log = _stand_in_log(prover, tmp_path, 60, partitions=4, synth_ms=2, gpu_ms=8, job_interval_ms=20)
    [lanes] = [r for r in plot.runs([log.open("rb")]) if r]
    widths = sorted(e - s for bars in lanes.values() for _, s, e in bars if e > s)
    median_s = widths[len(widths) // 2] / 1000
    first, last, whole = plot.shown(lanes)
    assert whole / median_s >= 400, (whole, median_s)  # as many median bars end to end as the sandbox's window
    with plot._pyplot() as plt:
        fig = plot.figure(plt, [lanes], "sandbox: B")
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        assert median_s * ax.bbox.width / (hi - lo) >= 8, (median_s, ax.bbox.width, hi - lo)
        assert f"its last {last - first:.0f} s of {whole:.0f} s" in ax.get_title()
        assert _on_the_axes(fig) == []
        phases = {p for bars in lanes.values() for p, s, e in bars if e > s and e / 1000 >= first}
        assert sorted(_entries(fig)) == sorted(phases)
        plt.close(fig)


def test_the_timelines_legends_name_only_what_is_drawn_and_sit_off_the_lines(tmp_path):
    """The saved H200 experiment (tests/data/h200-experiment): cuzk's copy there ends where it starts (GPU_PICKUP
    and GPU_START at one ms), so no copy is drawn, yet the legend named it; the GPU counters' two legends sat on
    the sm% and RX lines. One legend each, beside the axes, naming what is drawn."""
    from swapctl.gpu.samples import read_samples
    from swapctl.logs import plot
    from swapctl.logs.timings import parse_files

    exp = DATA / "h200-experiment"
    lanes = [r for r in plot.runs([(exp / "cuzk.log").open("rb")]) if r][-1:]
    assert all(e == s for _, bars in lanes[0].items() for p, s, e in bars if p == "copy")
    epoch = parse_files([str(exp / "cuzk.log")]).runs[-1].epoch
    assert epoch is not None
    counters = [plot.Counters(epoch, read_samples([exp / "gpu-samples.dmon"]))]
    with plot._pyplot() as plt:
        fig = plot.figure(plt, lanes, "h200: B", counters)
        entries = _entries(fig)
        assert "copy" not in entries and {"synthesis", "gpu"} <= set(entries)
        assert any("PCIe RX" in e for e in entries) and any("duty cycle" in e for e in entries)
        assert _on_the_axes(fig) == []
        plt.close(fig)


def test_where_the_time_goes_names_no_part_it_does_not_draw(tmp_path):
    """The saved H200 report's where-the-time-goes (tests/saved_report.py's run): barrier is 0 on both sides
    and queued 0.003%, nothing a pixel wide, yet the chart's legend and the report's list named them."""
    import saved_report

    from swapctl.experiment import verdict
    from swapctl.logs import plot

    win = saved_report.SavedWindow()
    data = win.local.read_bytes()
    second = data.index(b"cuzk-daemon starting", data.index(b"cuzk-daemon starting") + 1)
    b_start = data.rindex(b"\n", 0, second) + 1
    v = verdict(win.runs(0, b_start), win.runs(b_start), win.samples())
    rows = [(f"{side} GPU {g}", parts) for side, s in (("before", v.before), ("B", v.after))
            for g, parts in s.where.items()]
    assert all(parts["barrier"] == 0 and parts["queued"] < 0.0001 for _, parts in rows), rows
    with plot._pyplot() as plt:
        fig = plot.where_figure(plt, rows)
        assert sorted(_entries(fig)) == ["copy", "kernels", "synthesis"]
        assert _on_the_axes(fig) == []
        plt.close(fig)
    out = tmp_path / "report.html"
    saved_report.render(out)
    listed = re.findall(r"<li><b>([^<]*)</b>", out.read_text())
    assert sorted(listed) == ["copy", "kernels", "synthesis"]


# ---- what a stop did, in the deploy's lines and in history ------------------------------------------------


def _stop_lines(stderr: str) -> list[str]:
    """The deploy's lines of its stop step (each one line: progress is never wrapped)."""
    return [line.removeprefix("lab stop: ") for line in stderr.splitlines() if line.startswith("lab stop: ")]


def test_a_proof_a_term_stop_lost_is_said_at_the_stop_and_in_historys_journal(box, prover, prover_b, swapctl_env):
    """A `--now`/term stop mid-proof: the journal had `lost: 1`, while the deploy's lines and `history` said
    nothing of it. The stop's line names it as the journal counts it, and history's journal has a lost column."""
    from test_drain import Daemon, started_one

    from test_deploy import journal

    d = Daemon(box, synth_ms=20000, stop="term")
    d.start(prover)
    gen = d.load(pending=1)
    try:
        started_one(gen)
        r = d.deploy(prover_b)
        assert r.returncode == 0, r.stderr
    finally:
        gen.stop()
    entry = journal(box)[-1]
    assert entry["lost"] == 1
    [job] = [p["job_id"] for p in entry["in_flight_at_stop"]]
    stopped = [line for line in _stop_lines(r.stderr) if line.startswith("stopped in")]
    assert len(stopped) == 1 and re.fullmatch(rf"stopped in [\d.]+ s; lost 1 proof in flight \(job {job}: .*\)",
                                              stopped[0]), stopped
    h = swapctl("history", "lab", "-p", str(box.playbook_path), env={"COLUMNS": "80"})
    assert h.returncode == 0, h.stderr
    journal_table = h.stdout.split("journal", 1)[1]
    assert re.search(r"┃\s*lost\s*┃", journal_table), journal_table
    row = next(line for line in journal_table.splitlines() if entry["from"][:12] in line)  # the row's first line
    assert [c.strip() for c in row.split("│")][4] == "1", row
    # and the deploy's last line, the one read at 3 a.m., says it too (it said "deployed ... as pid N" alone)
    assert r.stdout.strip().endswith("; the stop lost 1 proof in flight"), r.stdout


def test_a_drained_deploy_says_the_sigint_after_the_drain_and_before_the_stop(box, prover, prover_b, swapctl_env):
    """The drain's lines read as if SIGTERM came first and never named the SIGINT that drain.sh sends once
    nothing is in flight (the daemon's scheduler then takes no new proof). In order: draining, drained and
    SIGINT sent, stopped; the daemon's log has its SIGINT line."""
    from test_drain import Daemon, started_one

    d = Daemon(box, synth_ms=300, stop="drain", drain_timeout_s=30)
    d.start(prover)
    gen = d.load(pending=1, gap_s=3)
    try:
        started_one(gen)
        r = d.deploy(prover_b)
        assert r.returncode == 0, r.stderr
    finally:
        gen.stop()
    said = _stop_lines(r.stderr)
    first = [next(i for i, s in enumerate(said) if s.startswith(w)) for w in ("draining", "drained in", "stopped in")]
    assert first == sorted(first), said
    assert "then SIGINT (it takes no new proof) and SIGTERM to" in said[first[0]], said
    assert said[first[1]].endswith("SIGINT sent (it takes no new proof), the stop next"), said
    assert "received SIGINT, shutting down" in box.log.read_text()


# ---- status's releases and history's: one table ------------------------------------------------------------


def _release_rows(stdout: str, after: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The releases table printed after the line `after`: its header lines and its (#, mark, id) rows."""
    lines = stdout.split(after, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    header = [line for line in lines[start:end] if line.startswith("┃")]
    rows = [tuple(c.strip() for c in line.split("│")[1:4]) for line in lines[start:end]
            if line.startswith("│") and line.split("│")[1].strip()]
    return header, rows  # type: ignore[return-value]


def test_status_and_history_number_and_head_the_releases_alike(box, prover, prover_b, swapctl_env):
    """status listed releases oldest first with no numbers under `sha256/status`, history newest first
    numbered (the index `rollback --to` takes) under `release/source, status`: a number read off one named
    another release in the other. Both now print the one table: same headers, same number for each. And
    status did not mark where `rollback` goes (`<`, read from the journal): now both mark it, and their
    --json name the same rollback_target."""
    box.start_by_hand(prover)
    for binary in (prover_b, prover):
        r = swapctl("deploy", "lab", "--binary", str(binary), "--yes", "-p", str(box.playbook_path))
        assert r.returncode == 0, r.stderr
    env = {"COLUMNS": "80"}
    st = swapctl("status", "lab", "-p", str(box.playbook_path), env=env)
    h = swapctl("history", "lab", "-p", str(box.playbook_path), env=env)
    assert st.returncode == 0 and h.returncode == 0, st.stderr + h.stderr
    st_header, st_rows = _release_rows(st.stdout, "\nreleases")
    h_header, h_rows = _release_rows(h.stdout, "lab: releases")
    assert st_header == h_header and "release" in st_header[0] and "#" in st_header[1], st_header
    assert [(n, i) for n, _, i in st_rows] == [(n, i) for n, _, i in h_rows] and len(h_rows) == 2, (st_rows, h_rows)
    assert st_rows == h_rows and sorted(m for _, m, _ in st_rows) == ["*", "<"], (st_rows, h_rows)
    assert "< `swapctl rollback` goes back to it" in st.stdout, st.stdout
    running, back = (next(i for _, m, i in h_rows if m == mark) for mark in "*<")
    assert prover.read_bytes() != prover_b.read_bytes() and running != back
    st_json = json.loads(swapctl("status", "lab", "--json", "-p", str(box.playbook_path)).stdout)
    h_json = json.loads(swapctl("history", "lab", "--json", "-p", str(box.playbook_path)).stdout)
    st_doc = st_json["hosts"]["lab"]
    assert st_doc["rollback_target"] == h_json["rollback_target"] == back, (st_doc["rollback_target"], h_json)


# ---- init --from on the sandbox's own daemon -----------------------------------------------------------------


def test_init_from_a_small_stand_in_keeps_the_memory_wait_proposes_its_ready_line_and_finds_its_status(
        box, prover, swapctl_env, tmp_path):
    """`init --from sandbox` wrote `min_available_gib = 0` for its 364 MiB daemon (int() of 0.36: the memory
    wait off), proposed `status HTTP server listening` (cuzk's status server, up before the engine: main.rs:133)
    as its ready line, quoting it cut mid-word ('... status HTTP s'), and found no status_listen: the sandbox's
    config had it in [prover], where cuzk never reads it. The daemon here is configured as the sandbox's is."""
    import tomllib

    from lab import free_port, prover_config

    status_port = free_port()
    config = prover_config(memory_mib=200, jobs=1, status_listen=f"127.0.0.1:{status_port}")
    assert "\n[daemon]\nstatus_listen = " in config  # as cuzk reads it (cuzk-core/src/config.rs:29-40)
    box.start_by_hand(prover, config)
    s = box.server
    ssh = swapctl_env / "home" / ".ssh"
    ssh.mkdir()
    (ssh / "config").write_text(f"Host gpu1\n    HostName {s.address}\n    Port {s.port}\n    User root\n"
                                f"    IdentityFile {s.client_key}\n    UserKnownHostsFile {s.known_hosts}\n")
    out = tmp_path / "from-gpu1.toml"
    r = swapctl("init", str(out), "--from", "gpu1", "--match", re.escape(str(box.data)) + "/cuzk")
    assert r.returncode == 0, r.stderr
    written = out.read_text()
    book = tomllib.loads(written)
    assert 0.2 <= book["memory"]["min_available_gib"] <= 1.0, written  # 200 MiB and more held: 0.2 GiB up
    assert book["daemon"]["ready_log"] == "cuzk-daemon ready", written
    assert book["daemon"]["status_url"] == f"http://127.0.0.1:{status_port}/status", written
    [quoted] = [line.split("# proposed from its log line: ", 1)[1] for line in written.splitlines()
                if line.startswith("ready_log = ")]
    assert quoted.endswith("cuzk-daemon ready, serving on unix:///run/cuzk.sock"), quoted


def test_the_words_init_quotes_are_cut_between_words():
    from swapctl.cli.init import held_gib, words

    line = "2026-12-06T07:28:50.759532Z  INFO cuzk_daemon: status HTTP server listening addr=127.0.0.1:43179"
    assert words(line, 60) == "2026-12-06T07:28:50.759532Z  INFO cuzk_daemon: status HTTP …"
    assert words(line, 200) == line
    assert [held_gib(k) for k in (0, 1, 373_000, 1 << 20, 419_430_400)] == [0.1, 0.1, 0.4, 1.0, 400.0]


def test_init_from_an_address_logs_in_with_its_own_options_and_records_a_new_key_only_when_asked(
        box, prover, swapctl_env, tmp_path):
    """`init --from root@ADDRESS:PORT` on a host whose key is not known advised setting host_key_policy in a
    playbook, when there is none yet, and init had no option for a key or a known_hosts file (issue 47)."""
    import tomllib

    box.start_by_hand(prover)
    s = box.server
    known = tmp_path / "known_hosts"
    target = f"root@{s.address}:{s.port}"
    out = tmp_path / "from.toml"
    args = ("init", str(out), "--from", target, "--match", re.escape(str(box.data)) + "/cuzk",
            "--identity-file", str(s.client_key), "--known-hosts", str(known))
    r = swapctl(*args)
    assert r.returncode == 3 and not out.exists(), r.stderr
    said = " ".join(r.stderr.split())
    assert "unknown host key" in said and "run init again with --accept-new to record it" in said, said
    assert "host_key_policy" not in said
    r = swapctl(*args, "--accept-new")
    assert r.returncode == 0, r.stderr
    assert f"[{s.address}]:{s.port} " in known.read_text()  # recorded, as ssh records a key on a port
    [host] = tomllib.loads(out.read_text())["hosts"].values()
    assert (host["identity_file"], host["known_hosts"]) == (str(s.client_key), str(known))
    assert host.get("host_key_policy", "strict") == "strict"  # the playbook checks the key from now on
    name = next(iter(tomllib.loads(out.read_text())["hosts"]))
    assert swapctl("status", name, "-p", str(out)).returncode == 0  # it logs in as written, the key now known
