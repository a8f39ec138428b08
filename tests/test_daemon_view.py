"""The daemon's own view (GET /status, StatusSnapshot) parsed, on snapshots recorded from the stand-in
(which serves status.rs's shape): in Python for status and the plan, and in drain.sh's awk for the drain,
which must agree."""

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from swapctl.facts.daemon_view import config_path, parse_view, status_url_of
from swapctl.host import scripts
from swapctl.swap.words import InFlight, parse_swap

DATA = Path(__file__).parent / "data" / "status"


def test_mid_proof_snapshot_shows_the_proof_in_flight_and_those_waiting():
    v = parse_view((DATA / "mid-proof.json").read_text())
    assert v is not None
    [p] = v.in_flight
    assert (p.job_id, p.done, p.total) == ("lg-00002", 1, 3)
    assert v.waiting == 2 and v.completed == 2 and v.failed == 0 and v.srs_bytes == 8 << 20
    assert v.summary().startswith("1 proof in flight (job lg-00002: 1/3 partitions, ")
    assert v.summary().endswith(" s in), 2 waiting to start")


def test_after_sigint_the_half_done_proof_stays_in_flight_for_ever():
    """What shutdown() leaves (docs/daemon.md): the partition being synthesized finished and sits in the GPU
    queue that no worker reads any more; the next one never starts."""
    v = parse_view((DATA / "after-sigint.json").read_text())
    assert v is not None and [p.job_id for p in v.in_flight] == ["lg-00002"]
    assert v.in_flight[0].states == ("done", "synth_done", "pending")


@pytest.mark.parametrize("text", ["", "404 Not Found\n", "curl: (7) Failed to connect", "[]", '{"error": "x"}',
                                  '{"pipelines": "no"}'])
def test_what_is_no_snapshot_is_no_view_or_an_empty_one(text):
    v = parse_view(text)
    assert v is None or (v.in_flight == () and v.waiting == 0)


def in_flight_line(snapshot: Path) -> str:
    body = scripts.load("drain.sh").body
    script = f"{body}\ncat \"$1\" | in_flight\n"
    return subprocess.run(["sh", "-c", script, "sh", str(snapshot)], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("name", ["mid-proof.json", "after-sigint.json"])
def test_the_drain_on_the_host_counts_what_status_counts(name):
    v = parse_view((DATA / name).read_text())
    lines = in_flight_line(DATA / name).splitlines()
    assert lines[0] == f"queue {v.waiting}"
    assert [line.split()[:3] for line in lines[1:]] == [[p.job_id, str(p.done), str(p.total)] for p in v.in_flight]


def test_swap_report_keeps_the_last_reading_before_the_stop_for_the_journal():
    run = parse_swap([(0.0, "INFLIGHT 0 queue 3 2 a1b2:7/10:41 c3d4:0/10:2"), (0.1, "KIDS "), (0.2, "STOPPED 5"),
                      (0.3, "INFLIGHT 9 queue 0 0")])
    assert run.in_flight == InFlight(0, 3, run.in_flight.proofs)
    assert run.in_flight.summary() == ("2 proofs in flight (job a1b2: 7/10 partitions, 41 s in; "
                                       "job c3d4: 0/10 partitions, 2 s in), 3 waiting to start")


def stop_record(*lines: str) -> dict:
    """The journal members drain.sh's stop_json writes after these drain lines (the host writes the line)."""
    body = scripts.load("drain.sh").body
    feed = "".join(f"seen {shlex.quote(x)} quiet\n" if x.split()[0] in ("INFLIGHT", "NOSTATUS")
                   else f"drain_waited={x.split()[1]}\n" for x in lines)
    out = subprocess.run(["sh", "-c", f"{body}\n{feed}printf '{{\"a\": 1%s}}' \"$(stop_json)\"\n"],
                         capture_output=True, text=True, check=True).stdout
    record = json.loads(out)
    record.pop("a")
    return record


def test_the_hosts_journal_line_keeps_what_was_in_flight_at_the_stop():
    # the last reading before the stop: what the stop loses; a drain's wait, and what was in flight when it began
    assert stop_record("INFLIGHT 0 queue 3 2 a1b2:7/10:41 c3d4:0/10:2") == {
        "in_flight_at_stop": [{"job_id": "a1b2", "partitions_done": 7, "total_partitions": 10, "age_s": 41},
                              {"job_id": "c3d4", "partitions_done": 0, "total_partitions": 10, "age_s": 2}],
        "lost": 2, "queued_at_stop": 3}
    assert stop_record("INFLIGHT 0 queue 0 1 a1b2:9/10:60", "INFLIGHT 1000 queue 1 0", "DRAINED 1010") == {
        "in_flight_at_stop": [], "lost": 0, "queued_at_stop": 1, "drain_s": 1.01,
        "in_flight_at_drain": [{"job_id": "a1b2", "partitions_done": 9, "total_partitions": 10, "age_s": 60}]}
    assert stop_record("NOSTATUS no answer") == {"in_flight_at_stop": None, "lost": None}
    assert stop_record() == {}  # no status_url: the journal says nothing it does not know
    # a job id is the daemon's text: it cannot break the line
    assert stop_record('INFLIGHT 0 queue 0 1 a"b\\c:1/2:3')["in_flight_at_stop"][0]["job_id"] == 'a"b\\c'


@pytest.mark.parametrize("config, url", [
    ('[daemon]\nlisten = "0.0.0.0:9820"\nstatus_listen = "0.0.0.0:9821"\n', "http://127.0.0.1:9821/status"),
    ('[daemon]\nstatus_listen = "10.0.0.5:9999" # debug UI\n', "http://10.0.0.5:9999/status"),
    ('[daemon]\n# status_listen = "0.0.0.0:9821"\n', None),
    ('[srs]\nstatus_listen = "0.0.0.0:9821"\n', None),  # not the daemon's table
    ('[daemon]\nstatus_listen = ""\n', None),
])
def test_status_url_comes_from_the_configs_status_listen(config, url):
    assert status_url_of(config) == url


@pytest.mark.parametrize("argv, path", [
    (("/usr/local/bin/cuzk", "--config", "/etc/cuzk.toml"), "/etc/cuzk.toml"),
    (("/usr/local/bin/cuzk", "-c", "/x.toml", "-l", "0.0.0.0:1"), "/x.toml"),
    (("/usr/local/bin/cuzk", "--config=/y.toml"), "/y.toml"),
    (("/usr/local/bin/cuzk",), "/data/zk/cuzk.toml"),
])
def test_config_path_is_cuzks_own_default_unless_named(argv, path):
    assert config_path(argv) == path


def pipeline(**fields: object) -> dict:
    return {"job_id": "a1", "proof_kind": "porep", "started_secs_ago": 4, "partitions_done": 1, "total_partitions": 3,
            "partitions": [{"state": "gpu"}], **fields}


HOSTILE = {
    "arrays 100,000 deep": '{"pipelines": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "a NaN age": json.dumps({"pipelines": [pipeline(started_secs_ago=float("nan"))]}),
    "an infinite uptime": '{"pipelines": [], "uptime_secs": 1e400, "counters": {"total_completed": -Infinity}}',
    "a count past any counter": '{"pipelines": [], "counters": {"queue_depth": 1' + "0" * 400 + "}}",
    "a negative age": json.dumps({"pipelines": [pipeline(started_secs_ago=-5, partitions_done=1e400)]}),
    "a job id of controls": json.dumps({"pipelines": [pipeline(job_id="a\x1b[2J\u202eb\n\ud800")]}),
    "an object for a job id": json.dumps({"pipelines": [pipeline(job_id={"x": [1]}, proof_kind=[2])],
                                          "gpu_workers": [{"state": {}, "current_job": 1e300}]}),
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_an_answer_that_is_no_snapshot_becomes_finite_numbers_and_plain_text_or_none(text):
    from swapctl.cli.common import to_json
    from swapctl.cli.status import _view_shown

    v = parse_view(text)
    if v is None:
        return
    shown = json.dumps(to_json(_view_shown(v)), allow_nan=False)  # --json: strict JSON, or this raises
    for p in v.pipelines:
        assert p.age_s >= 0 and p.text().isprintable() and p.proof_kind.isprintable()
        assert "\u202e" not in p.job_id
    assert all(w.state.isprintable() and (w.job_id or "").isprintable() for w in v.workers)
    assert "NaN" not in shown and "Infinity" not in shown
    assert v.summary()


@pytest.mark.parametrize("garbled", [
    "INFLIGHT 12 queue 0 1 job with blanks:1/3:4",  # a job id with a blank: awk split it
    "INFLIGHT 12 queue 0 1 a1:1/3:nan",  # a NaN age as %.0f writes it
    "INFLIGHT 12 queue 0 1 a1:1/3:-5",  # a negative age
    "INFLIGHT 12 queue 0 1 a1:1/3:inf a2:x/y:z :/:",
    "INFLIGHT nan queue -1", "INFLIGHT", "DRAINED nan", "UNDRAINED 5", "UNDRAINED x 1", "STOPPED ", "STARTED 1",
    "WATCH ²", "R 1",
])
def test_no_line_the_host_sends_ends_the_swaps_stream_and_the_outcome_is_still_read(garbled):
    run = parse_swap([(0.0, "SWAP 4242"), (0.1, garbled), (0.2, "KIDS "), (0.3, "STOPPED 5"), (0.4, "DONE"),
                      (0.5, "STARTED 77 0"), (0.6, "READY"), (0.7, "OUTCOME deployed 77")])
    assert (run.stopped_ms, run.pid, run.outcome, run.outcome_pid) == (5, 77, "deployed", 77)
    for p in run.in_flight.proofs if run.in_flight else ():
        assert p.age_s >= 0 and p.done >= 0 and p.total >= 0


class Answering:
    """Whoever holds the daemon's status port (a proxy, or any user while it is down): a real HTTP server that
    answers every GET with `body`."""

    def __init__(self, body: bytes):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:  # the reader stopped at its bound
                    pass

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/status"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def drain_on_host(url: str, then: str = "") -> subprocess.CompletedProcess:
    """drain.sh's reading of the daemon's status at `url` as the swap script makes it (INFLIGHT or NOSTATUS),
    kept for the journal as the drain keeps it; `then` runs after it."""
    lib = scripts.load("lib.sh").body
    body = scripts.load("drain.sh").body
    script = f'{lib}\n{body}\nline=$(in_flight_line "$1" 0); echo "$line"; seen "$line" quiet\n{then}'
    return subprocess.run(["sh", "-c", script, "sh", url], capture_output=True, text=True, timeout=60)


def test_a_pretty_printed_answer_counts_what_the_compact_one_counts():
    """A proxy that pretty-prints: the drain must still see the proof in flight, not count it as queued."""
    doc = json.loads((DATA / "mid-proof.json").read_text())
    with Answering(json.dumps(doc, indent=2).encode()) as daemon:
        line = drain_on_host(daemon.url).stdout.splitlines()[0]
    seen = InFlight.parse(line.removeprefix("INFLIGHT "))
    assert [(p.job_id, p.done, p.total) for p in seen.proofs] == [("lg-00002", 1, 3)]
    assert seen.queued == 2


ODD = [pipeline(job_id="job with blanks", started_secs_ago=float("nan")),
       pipeline(job_id="a\tb\x01c\u202ed", started_secs_ago=-7),
       pipeline(job_id="", partitions_done=-1, total_partitions=1e400, started_secs_ago=1e400)]


def test_whatever_the_daemon_says_in_a_drain_the_host_writes_a_journal_line_swapctl_reads():
    from swapctl.facts.journal_entry import parse as parse_entry

    answer = json.dumps({"pipelines": ODD, "counters": {"queue_depth": float("nan")}}, ensure_ascii=False).encode()
    answer = answer.replace(b"\\t", b"\t").replace(b"\\u0001", b"\x01")  # raw controls, as no serde writes them
    with Answering(answer) as daemon:
        out = drain_on_host(daemon.url, "printf '%s\\n' \"$(stop_json)\"").stdout.splitlines()
    run = parse_swap([(0.0, out[0]), (0.1, "STOPPED 5")])
    assert run.in_flight is not None and len(run.in_flight.proofs) == 2  # the third has no partition left
    deployed = {"action": "deploy", "by": "root@ctl", "current": "b" * 12, "from": "a" * 64, "host": "lab",
                "log_offset": 0, "outcome": "deployed", "pid": 1, "steps": {}, "time": "2026-01-01T00:00:00Z",
                "to": "b" * 64}
    entry = parse_entry(json.dumps(deployed)[:-1] + out[1] + "}")
    assert entry is not None and entry.stop is not None and entry.stop.lost == 2
    proofs = entry.stop.in_flight or ()
    assert [p.job_id for p in proofs] == ["job?with?blanks", "a?b?c???d"]
    assert all(p.age_s >= 0 for p in proofs)


def test_a_64_mib_answer_is_read_only_to_its_bound_and_within_the_drains_time():
    """A status read on the host is bounded in bytes (as status.sh reads it) and time: 64 MiB is no answer."""
    import time

    with Answering(b'{"pipelines": [' + b" " * (64 << 20) + b"]}") as daemon:
        began = time.monotonic()
        line = drain_on_host(daemon.url).stdout
        took = time.monotonic() - began
    assert line.startswith("NOSTATUS ") and "bytes" in line
    assert took < 10, took


@pytest.mark.parametrize("argv, config, listen", [
    (["cuzk", "--config", "c.toml"], '[daemon]\nlisten = "0.0.0.0:9820"  # gRPC\n', "0.0.0.0:9820"),
    (["cuzk", "-l", "127.0.0.1:1"], '[daemon]\nlisten = "0.0.0.0:9820"\n', "127.0.0.1:1"),  # the flag wins
    (["cuzk", "--listen=unix:///run/x.sock"], "", "unix:///run/x.sock"),
    (["cuzk"], '[srs]\nlisten = "0.0.0.0:1"\n', "unix:///run/curio/cuzk.sock"),  # not the daemon's: the default
])
def test_where_the_daemon_listens_is_its_flag_else_its_configs_daemon_listen(argv, config, listen):
    from swapctl.facts.daemon_view import listen_of
    assert listen_of(argv, config) == listen


@pytest.mark.parametrize("address, listen, fed", [
    ("127.0.0.1:9820", "0.0.0.0:9820", True),
    ("gpu-a:9820", "0.0.0.0:9820", True),  # how the playbook reaches the host
    ("10.0.0.7:9820", "0.0.0.0:9820", True),  # one of the host's own addresses (hostname -I)
    ("10.9.9.9:9820", "0.0.0.0:9820", False),  # another box's cuzk on the same port
    ("prover-7:9820", "0.0.0.0:9820", None),  # a name DNS may make this host's: init says to check it
    ("127.0.0.1:9821", "0.0.0.0:9820", False),
    ("10.0.0.5:9820", "10.0.0.5:9820", True),
    ("localhost:9820", "127.0.0.1:9820", True),  # loopback, spelled another way
    ("127.0.0.1:9820", "10.0.0.5:9820", False),  # the daemon does not listen on loopback
    ("unix:///run/curio/cuzk.sock", "unix:///run/curio/cuzk.sock", True),
    ("unix:///run/other.sock", "unix:///run/curio/cuzk.sock", False),
])
def test_a_node_feeds_the_daemon_its_cuzk_address_reaches(address, listen, fed):
    from swapctl.facts.curio_nodes import feeds
    assert feeds(address, listen, ("gpu-a", "10.0.0.7")) is fed
