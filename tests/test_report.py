"""The report parsers, on transcripts of real runs (tests/record_transcripts.py records them again)."""

from pathlib import Path

import pytest

from swapctl.swap.words import InstallReport, Reading, Word, parse_install, parse_lock, parse_swap

TRANSCRIPTS = Path(__file__).parent / "data" / "transcripts"


def lines(name: str) -> list[tuple[float, str]]:
    out = []
    for row in (TRANSCRIPTS / name).read_text().splitlines():
        at, _, line = row.partition("\t")
        out.append((float(at), line))
    return out


def swap(name: str):
    return parse_swap(lines(name))


@pytest.mark.parametrize("name, ready, alive, exited, host_decides, why", [
    ("adopt.swap.txt", True, True, False, False, None),
    ("sigkill.swap.txt", True, True, False, False, None),
    ("memory-holder.swap.txt", True, True, False, False, None),
    ("crash.swap.txt", False, False, True, True, "it exited before it was ready"),
    ("crash.swap.2.txt", True, True, False, False, None),  # the rollback to the old daemon
    ("first-noready.swap.txt", False, True, False, False, "not ready after 1 s"),  # no fallback: nobody asked
])
def test_how_a_swap_ended(name, ready, alive, exited, host_decides, why):
    r = swap(name)
    assert (r.memory_ok, r.ready, r.alive, r.exited, r.host_decides) == (True, ready, alive, exited, host_decides)
    assert r.pid is not None and r.offset >= 0 and not r.failure
    assert (None if ready else r.why_not(1)) == why


@pytest.mark.parametrize("name, stopped, sigkill, kids", [
    ("adopt.swap.txt", True, False, 0),
    ("sigkill.swap.txt", True, True, 0),
    ("memory-holder.swap.txt", True, False, 1),  # the daemon's memory holder, waited for
    ("memory-timeout.swap.txt", True, False, 1),
    ("first-noready.swap.txt", False, False, 0),  # nothing ran: no stop
    ("first-noready.stop.txt", True, False, 0),  # the failed daemon, stopped by stop.sh
])
def test_the_stop(name, stopped, sigkill, kids):
    r = swap(name)
    assert (r.stopped, r.sigkill, len(r.kids)) == (stopped, sigkill, kids)


def test_steps_are_timed_from_when_their_lines_arrived():
    r = swap("sigkill.swap.txt")  # stop_grace_s = 1: SIGKILL after a second
    assert set(r.steps) == {"stop", "memory", "start", "ready"}
    assert r.steps["stop"] >= 1.0 and r.stopped_ms >= 1000
    held = swap("memory-holder.swap.txt")  # the holder lingers 1.5 s after the daemon
    assert held.steps["memory"] >= 1.2
    never = swap("first-noready.swap.txt")  # never ready: its time runs to the script's end
    assert "stop" not in never.steps and never.steps["ready"] >= 1.0


def test_memory_that_does_not_come_back_names_what_holds_it():
    r = swap("memory-timeout.swap.txt")
    assert not r.memory_ok and r.pid is None
    assert r.reading == Reading(ms=1000, avail_kib=r.reading.avail_kib, alive=r.kids, gpu_used="")
    assert "memory" in r.steps and "start" not in r.steps


@pytest.mark.parametrize("line, reading", [
    ("R 0 24160268 - ", Reading(0, 24160268, ())),
    ("R 230 24198888 17606 ", Reading(230, 24198888, (17606,))),
    ("R 10 100 1,2 0,512;1,0", Reading(10, 100, (1, 2), "0,512;1,0")),
    ("R 10 100 - 0,512", Reading(10, 100, (), "0,512")),
])
def test_memory_readings(line, reading):
    assert Reading.parse(line.partition(" ")[2]) == reading


@pytest.mark.parametrize("name, installed, failure, missing", [
    ("adopt.receive.txt", True, None, ()),
    ("missing-lib.receive.txt", True, None, ("libswapctlmissing.so => not found",)),
])
def test_install_reports_from_real_runs(name, installed, failure, missing):
    r = parse_install(line for _, line in lines(name))
    assert (r.installed, r.failure, r.missing) == (installed, failure, missing)


@pytest.mark.parametrize("text, report", [
    ("MISMATCH 3f2a", InstallReport(failure=Word.MISMATCH, detail="3f2a")),
    ("NOSPACE 2048", InstallReport(failure=Word.NOSPACE, detail="2048")),
    ("SHORT 4194304", InstallReport(failure=Word.SHORT, detail="4194304")),
    ("OFFSET 12", InstallReport(failure=Word.OFFSET, detail="12")),
    ("BROKEN the stream ended early or was damaged (5 of 9 bytes written)",
     InstallReport(failure=Word.BROKEN, detail="the stream ended early or was damaged (5 of 9 bytes written)")),
    ("", InstallReport()),
])
def test_install_failures(text, report):
    got = parse_install(text.splitlines())
    assert got == report
    assert got.damaged == (report.failure in (Word.MISMATCH, Word.SHORT, Word.BROKEN))


@pytest.mark.parametrize("name, word, detail", [
    ("adopt.lock.txt", Word.LOCKED, ""),
    ("lock-held.lock.txt", Word.HELD, '{"by": "root@'),
])
def test_lock_reports_from_real_runs(name, word, detail):
    [(_, line)] = lines(name)
    r = parse_lock(line)
    assert r.word is word and r.detail.startswith(detail)


@pytest.mark.parametrize("line, word, detail", [
    ("SWAPPING", Word.SWAPPING, ""),
    ("FAILED mkdir: cannot create directory '/data/.swapctl': Read-only file system", Word.FAILED,
     "mkdir: cannot create directory '/data/.swapctl': Read-only file system"),
    ("", None, ""),
    ("Welcome to the GPU box!", None, "Welcome to the GPU box!"),  # a .bashrc that talks
])
def test_lock_first_lines(line, word, detail):
    r = parse_lock(line)
    assert (r.word, r.detail) == (word, detail)


def test_a_log_line_that_starts_with_a_word_is_still_a_log_line():
    r = parse_swap([(0.0, "STARTED 10 0"), (0.1, "LOG READY to serve"), (0.2, "ALIVE 1")])
    assert not r.ready_seen and r.alive
