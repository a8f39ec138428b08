"""The journal's lines as JournalEntry, in tables: what parses, what is skipped, and where a release started.
The lines the host really writes (sh/swap.sh) are held to the type on every path the host tests take
(tests/test_deploy.py's `journal`)."""

import json

import pytest

from swapctl.facts.daemon_view import Proof
from swapctl.facts.journal_entry import JournalEntry, Start, StopView, Upload, parse, read, started, starts

A, B = "a" * 64, "b" * 64

# As sh/swap.sh's finish writes them (members sorted, `steps` and the release members always there)
DEPLOYED = {"action": "deploy", "by": "root@ctl", "current": B[:12], "from": A, "host": "lab", "log_offset": 4096,
            "outcome": "deployed", "pid": 4242, "steps": {"lock": 0.012, "upload": 1.5, "stop": 0.2},
            "time": "2026-01-01T00:00:00.123456Z", "to": B,
            "upload": {"method": "patch", "wire_bytes": 1000, "seconds": 0.5, "base": A[:12], "from": "/b/cuzk"}}
AUTO_ROLLBACK = {"action": "auto-rollback", "by": "lab itself (swapctl lost its connection; root@ctl started it)",
                 "current": A[:12], "from": B, "host": "lab", "log_offset": 8192, "outcome": "rolled-back",
                 "pid": 4243, "failed_log": "/data/cuzk.log from byte 4096", "marked_bad": True,
                 "rollback_steps": {"stop": 0.1}, "reason": "it exited before it was ready", "steps": {},
                 "time": "2026-01-01T00:01:00.000000Z", "to": A, "in_flight_at_stop": None, "lost": None}
NO_DAEMON = {"action": "deploy", "by": "root@ctl", "current": None, "from": None, "host": "lab", "log_offset": None,
             "outcome": "no-daemon", "pid": None, "steps": {}, "time": "2026-01-01T00:02:00.000000Z", "to": B}
DRAINED = {**DEPLOYED, "in_flight_at_stop": [], "lost": 0, "queued_at_stop": 1, "drain_s": 1.01,
           "in_flight_at_drain": [{"age_s": 60, "job_id": 'a"b', "partitions_done": 9, "total_partitions": 10}]}
EXPERIMENT = {"action": "experiment", "by": "root@ctl", "host": "lab", "time": "2026-01-01T00:03:00.000000Z",
              "release": B, "decision": "keep", "verdict": "B is 3% faster"}


@pytest.mark.parametrize("line", [DEPLOYED, AUTO_ROLLBACK, NO_DAEMON, DRAINED, EXPERIMENT],
                         ids=["deployed", "auto-rollback", "no-daemon", "drained", "experiment"])
def test_a_line_swapctl_writes_parses_and_reads_back_whole(line):
    entry = parse(json.dumps(line))
    assert entry is not None and entry.to_dict() == line
    assert parse(entry.to_json()) == entry


def test_the_members_are_typed():
    e = parse(json.dumps(DRAINED))
    assert e is not None
    assert (e.current, e.from_sha, e.to_sha, e.log_offset, e.pid) == (B[:12], A, B, 4096, 4242)
    assert e.steps == (("lock", 0.012), ("upload", 1.5), ("stop", 0.2)) and dict(e.steps)["upload"] == 1.5
    assert e.upload == Upload("patch", 1000, 0.5, 0, A[:12], "/b/cuzk")
    assert e.stop == StopView((), 0, 1, 1.01, (Proof('a"b', 9, 10, 60),))
    back = parse(json.dumps(AUTO_ROLLBACK))
    assert back is not None and back.way_back and back.stop == StopView(None, None) and back.marked_bad is True


def test_members_no_swapctl_writes_are_left_out_and_free_text_is_kept_as_it_is():
    line = {"action": "deploy", "outcome": "deployed", "time": "2026-01-01T00:00:00Z", "pad": "x" * 900,
            "by": "\x1b]0;pwned\x07", "reason": "a\nb"}
    e = parse(json.dumps(line))
    assert e is not None and "pad" not in e.to_dict()
    assert e.by == "\x1b]0;pwned\x07" and e.reason == "a\nb"  # shown escaped (cli.common.text), never a name


def with_(**members) -> str:
    return json.dumps({**DEPLOYED, **members})


@pytest.mark.parametrize("line", [
    "[1]", "1", "null", '"deploy"', "", "{", '{"action": "deploy", "by": "root@x", "fro',  # not an object, cut short
    "[" * 100_000,  # deeper than the JSON parser goes
    '{"action": "deploy", "pid": 1' + "0" * 5000 + "}",  # more digits than Python reads
    json.dumps({"outcome": "deployed"}),  # no action
    with_(action="deploy\x1b[2J"), with_(action="Deploy"), with_(action=""), with_(action=1),
    with_(outcome="deployed\n"),
    with_(current="a\nb"), with_(current="AAAAAAAAAAAA"), with_(current="aaaa"), with_(current=12),
    with_(current="../../etc"), with_(**{"from": "not a sha256"}), with_(to=B[:12]),
    with_(log_offset=-1), with_(log_offset="5"), with_(log_offset=True), with_(log_offset=1.5),
    with_(pid=0), with_(pid=True),
    with_(steps={"lock": "0.1"}), with_(steps={"lock": -1}), with_(steps=[]), with_(steps={"a\nb": 1}),
    with_(steps={"lock": None}), with_(rollback_steps={"stop": True}),
    with_().replace('"lock": 0.012', '"lock": NaN'), with_().replace('"lock": 0.012', '"lock": Infinity'),
    with_(upload="sftp"), with_(upload={"wire_bytes": 1, "seconds": 1}), with_(upload={"method": "sftp"}),
    with_(upload={**DEPLOYED["upload"], "base": "x"}),
    with_(in_flight_at_stop=[{"job_id": "a"}], lost=1), with_(in_flight_at_stop=None, lost="2"),
    with_(in_flight_at_stop="none", lost=0),
    with_(host="lab\n"), with_(time="2026\x1b[8m"), with_(by=["root"]), with_(marked_bad="yes"),
    with_(reason=1), with_(failed_log={}),
    json.dumps(EXPERIMENT | {"decision": "keep it"}), json.dumps(EXPERIMENT | {"release": "b"}),
])
def test_a_line_that_is_no_entry_parses_as_none(line):
    assert parse(line) is None


def test_read_skips_and_counts_the_lines_that_are_no_entries():
    text = "\n".join([json.dumps(DEPLOYED), "[1]", "", with_(current="a\nb"), json.dumps(NO_DAEMON), '{"cut'])
    entries, skipped = read(text + "\n")
    assert [e.outcome for e in entries] == ["deployed", "no-daemon"] and skipped == 3  # a blank line is none


def test_a_line_ends_at_a_newline_only():
    # U+2028 and \x1c end a line for str.splitlines; inside a JSON string they are text
    entries, skipped = read(json.dumps({**DEPLOYED, "reason": "a\u2028b\x1cc"}, ensure_ascii=False))
    assert skipped == 0 and entries[0].reason == "a\u2028b\x1cc"


def landing(current: str | None, offset: int | None, pid: int = 1, frm: str | None = None) -> JournalEntry:
    return JournalEntry(action="deploy", outcome="deployed", current=current, log_offset=offset, pid=pid,
                        from_sha=frm)


@pytest.mark.parametrize("journal, release, start", [
    ([], A[:12], None),
    ([landing(A[:12], 10)], None, None),  # no current release: no start of it
    ([landing(A[:12], 10, frm=B), landing(B[:12], 50, 2), landing(A[:12], 90, 3)], A[:12], Start(A[:12], 90, None, 3)),
    ([landing(A[:12], 10, frm=B), landing(B[:12], 50, 2)], A[:12], Start(A[:12], 10, B, 1)),
    # a line with no offset (no daemon started) is no start, nor one with no current release
    ([landing(A[:12], 10), landing(A[:12], None), landing(None, 70)], A[:12], Start(A[:12], 10, None, 1)),
    ([JournalEntry(action="experiment", release=A)], A[:12], None),
])
def test_where_a_release_started(journal, release, start):
    assert started(journal, release) == start
    assert starts(journal) == [s for s in starts(journal) if s.offset is not None]
