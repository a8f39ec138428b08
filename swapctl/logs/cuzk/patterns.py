"""What cuzk's lines look like: the literals and regexes every other module of the format reads with.

stdout: tracing lines with ANSI colour and `key=value` fields (`partition=Some(3)`): GPU_TIMING,
FIN_TIMING, `partition synthesis complete`, `partition GPU prove complete`, `Phase 7`. stderr, no
timestamp: `CUZK_TIMING: k=v ...`, `CUZK_NTT_H: k=Xms ...`, `TIMELINE,offset_ms,EVENT,job,detail`.
docs/timings.md says what each figure means.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

ANSI = re.compile(rb"\x1b\[[0-9;]*m")
CUZK = re.compile(rb"CUZK_TIMING: ([^\n]*)")
NTT = re.compile(rb"CUZK_NTT_H: ([^\n]*)")
TIMELINE = re.compile(rb"TIMELINE,([^\n]*)")
TRACING = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z")
MS_FIELD = re.compile(rb"\b(\w++)(?<=_ms)=(-?\d+(?:\.\d+)?)\b")  # possessive: no backtracking in a word
NTT_FIELD = re.compile(rb"\b(\w++)=(-?\d+(?:\.\d+)?)ms\b")
# over TIMELINE lines joined after a newline each: the literal newline lets the search run at memchr speed
TL_OFFSET = re.compile(rb"\n(\d+(?:\.\d+)?),")
# GPU_START / GPU_END with the worker and partition of their detail (worker=W,partition=N[,gpu_ms=X])
TL_QUEUE = re.compile(rb"\n(\d+(?:\.\d+)?),(GPU_QUEUE|GPU_PICKUP),")
TL_GPU = re.compile(rb"\n(\d+(?:\.\d+)?),(GPU_START|GPU_END),([^,\n]*),worker=(\d+),partition=(\d+)")
# the run's first line (cuzk-daemon/src/main.rs:63)
START = b"cuzk-daemon starting"
RESTART_MS = 1000  # TIMELINE offsets that go back further than this: a new daemon run
# a tracing line's start: the timestamp, dimmed (ANSI on, the default) or not (NO_COLOR)
TRACING_LINE = (b"\n\x1b[2m20", b"\n20")
TRACING_FIRST = (b"\x1b[2m20", b"20")  # the same, as a chunk's first line
# `gpu_worker{worker_id=W gpu=G ...}`, the span of a partition's GPU work, with or without ANSI codes
_E = rb"(?:\x1b\[[0-9;]*m)*"
GPU_SPAN = re.compile(rb"gpu_worker" + _E + rb"\{" + _E + rb"worker_id" + _E + rb"=" + _E + rb"(\d+) " + _E
                      + rb"gpu" + _E + rb"=" + _E + rb"(\d+)")
# A C++ start function's held time, and the Rust line that follows its return on the same thread, in
# log order: `prove_start_ms` (Rust's clock around the call) matches `total_start_fn_ms` (C++'s).
HELD = re.compile(rb"CUZK_TIMING: mutex_held_ms=(\d+) total_start_fn_ms=(\d+)")
PROVE_STARTED = re.compile(rb"GPU_TIMING spawn_blocking prove_start ([^\n]*)")
WORKER = re.compile(rb"\bworker_id=(\d+)")
PROVE_START = re.compile(rb"\bprove_start_ms=(\d+)")
# Lines written by one write(2) each, which can land inside a TIMELINE line: `eprintln!` writes it in
# pieces, and tracing (stdout) and C++ (glibc's stderr) do not take Rust's stderr lock.
WHOLE = re.compile(rb"CUZK_TIMING: |CUZK_NTT_H: |\x1b\[2m\d{4}-\d\d-\d\dT|\d{4}-\d\d-\d\dT\d\d:")
# what shows that a line landed inside a TIMELINE line (a superset: WHOLE then finds where it begins)
CUT_MARKS = (b"CUZK_", b"\x1b[", b"Z ")  # a C++ line, a coloured tracing line, a plain one ("...Z  INFO")
LINE_START = re.compile(rb"TIMELINE,|CUZK_TIMING: |CUZK_NTT_H: |\x1b\[2m\d{4}-|\d{4}-\d\d-\d\dT\d\d:")

JOB_DONE = b"Phase 7: all partitions complete, proof assembled"  # a proof's end (engine.rs:506-512)
# each GPU worker's first line: which engine shape the build runs, the two-stage pipeline (engine.rs:2958,
# `pipeline.enabled`, the default) or the monolithic workers (engine.rs:3378)
GPU_WORKER_STARTED = re.compile(rb"\b(pipeline|monolithic) GPU worker started")

# tracing messages -> the prefix their `*_ms` fields get when two messages share a field name (None:
# a repeat of another message's values, not counted again); the fields are those after the message
# (the span's fields come before it). Longer messages first: the first alternative that matches wins.
MESSAGES: dict[bytes, str | None] = {
    b"GPU_TIMING hot_path pre-prove overhead": "",
    b"GPU_TIMING spawn_blocking prove_start": "",
    b"GPU_TIMING prove_start returned": "",
    b"FIN_TIMING finalizer partition": "finalizer_",
    b"FIN_TIMING malloc_trim": "",
    b"partition synthesis complete, pushing to GPU queue": None,  # engine.rs:1759: synth_ms again
    b"partition synthesis complete": "",
    b"partition GPU prove complete": "",
    JOB_DONE: "job_",
}
# one scan per literal prefix the messages share: GPU_TIMING, FIN_TIMING, partition, Phase 7
MESSAGE_PREFIXES = (b"GPU_TIMING ", b"FIN_TIMING ", b"partition ", b"Phase 7: ")
MESSAGE_PATTERNS = [
    re.compile(re.escape(prefix) + b"("
               + b"|".join(re.escape(m[len(prefix):]) for m in MESSAGES if m.startswith(prefix)) + rb")([^\n]*)")
    for prefix in MESSAGE_PREFIXES
]

# The codes tracing-subscriber writes (levels, bold, dim, italic, reset): bytes.replace removes each at
# memchr speed, where one regex substitution per code costs more than all the parsing.
COMMON_CODES = tuple(f"\x1b[{c}m".encode() for c in ("0", "1", "2", "3", "31", "32", "33", "34", "35"))


def strip_ansi(chunk: bytes) -> bytes:
    """`chunk` without its ANSI colour codes."""
    if b"\x1b[" not in chunk:
        return chunk
    for code in COMMON_CODES:
        if code in chunk:
            chunk = chunk.replace(code, b"")
    return ANSI.sub(b"", chunk) if b"\x1b[" in chunk else chunk


def timestamp(raw: bytes) -> datetime:
    """A tracing timestamp (`2026-08-21T10:05:15.730455`, the Z cut off) as an aware UTC datetime."""
    return datetime.fromisoformat(raw.decode()).replace(tzinfo=UTC)


def joined(lines: list[bytes]) -> bytes:
    """TIMELINE lines (without `TIMELINE,`), each after a newline, for TL_OFFSET and TL_GPU."""
    return b"\n" + b"\n".join(lines)
