"""Incremental, resumable log download: only new bytes, compressed on the wire when the host can.

The local copy's size is the offset to resume from, so an interrupted run picks up where its bytes
end. A remote file whose inode changed or that shrank (rotated, truncated) is fetched again from the
start into a new local name: generations are never mixed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

import zstandard

from ..errors import BadInput, RemoteCommandFailed, RemoteOutputTooLarge
from ..host import scripts
from ..localfiles import own_dir, write_new
from ..playbook.spec import host_name_problem
from ..remote import Host

# The host's halves are swapctl/host/logs/: list_logs.sh's listing (NUL-separated records, each name checked
# here against the patterns, never trusted), read_log.sh's bytes, read_journal.sh's journal, whose last line is
# `-- cursor: ...`, where the next fetch goes on.
CURSOR = b"-- cursor: "

MAX_LISTING = 16 << 20  # bytes of listing read back: some 100,000 files
# fetch-logs' own files in DEST/<host>/ (its record and the record's temporary): no local copy takes a name
# beginning so, whatever the host's file is called (a host file `.swapctl-fetch.json` was once appended to
# the record, and every later fetch of that host failed)
RECORD = ".swapctl-fetch.json"
OWN_PREFIX = ".swapctl-"
# what one decompression step may produce: a 32 KiB zstd frame can hold 1 GiB of zeros, and one call of
# decompressobj() made all of it at once
OUT_CHUNK = 1 << 17


def host_path(dest: Path, host: str, *names: str) -> Path:
    """DEST/HOST/NAMES...: where a host's files lie here (fetch-logs, the experiment, timings). Each part is
    one plain name, so the path stays under DEST; else one line naming the part."""
    for part in (host, *names):
        problem = host_name_problem(part)
        if problem:
            raise BadInput(f"{part!r} {problem}, so it names no file under {dest}; give the host and daemon.log "
                           f"plain names", host=repr(host))
    path = dest.joinpath(host, *names)
    if os.path.commonpath([os.path.normpath(dest), os.path.normpath(path)]) != os.path.normpath(dest):
        raise BadInput(f"{path} is not under {dest}", host=repr(host))  # not reached: the parts are checked
    return path


def within(path: str, patterns: list[str]) -> bool:
    """Whether `path` is absolute, normal (no `.`, `..` or `//`) and matches one of the glob `patterns`
    component by component, as the host's shell globbed it (`*` never crosses a `/`)."""
    if not path.startswith("/") or posixpath.normpath(path) != path:
        return False
    parts = path.split("/")
    for pattern in patterns:
        pieces = pattern.split("/")
        if len(pieces) == len(parts) and all(fnmatch.fnmatchcase(a, p) for a, p in zip(parts, pieces, strict=False)):
            return True
    return False


def parse_listing(raw: bytes, patterns: list[str]) -> tuple[list[str], list[tuple[int, int, str, str]], list[str]]:
    """list_logs.sh's output -> (tools, [(inode, size, path, resolved)], refused names). A record whose names are
    not UTF-8 or lie outside `patterns` is refused, never fetched."""
    fields = raw.split(b"\0")
    tools = fields[0].decode("ascii", "replace").split()[1:] if fields and fields[0].startswith(b"TOOLS") else []
    files, refused = [], []
    i = 1
    while i + 2 < len(fields):
        head, path_b, real_b = fields[i:i + 3]
        i += 3
        words = head.split()
        try:
            path, real = path_b.decode("utf-8"), real_b.decode("utf-8")
        except UnicodeDecodeError:
            refused.append(path_b.decode("utf-8", "replace"))
            continue
        if len(words) != 3 or words[0] != b"FILE" or not all(w.isdigit() for w in words[1:]) \
                or not within(path, patterns) or not within(real, patterns):
            refused.append(path if real == path else f"{path} -> {real}")
            continue
        files.append((int(words[1]), int(words[2]), path, real))
    return tools, files, refused


@dataclass(frozen=True)
class Fetched:
    remote: str
    local: str
    new_bytes: int
    wire_bytes: int
    method: str
    restarted: bool  # the remote file was rotated or truncated: a new local copy was begun


class _TooMuch(Exception):
    """The host sent more bytes of a file than it listed."""


class _Sink:
    """Where a file's decompressed bytes go: into `f`, at most `limit` of them (what the host listed), each
    flushed as it comes (what is on disk is the resume point). Past `limit` nothing more is written."""

    def __init__(self, f: BinaryIO, limit: int, on_bytes: Callable[[int], None]):
        self.f, self.limit, self.on_bytes, self.written = f, limit, on_bytes, 0

    def write(self, data: bytes) -> int:
        if self.written + len(data) > self.limit:
            raise _TooMuch
        self.f.write(data)
        self.f.flush()
        self.written += len(data)
        self.on_bytes(len(data))
        return len(data)


def _decoder(method: str, sink: _Sink) -> Callable[[bytes], None]:
    """What a chunk from the wire goes through on its way to `sink`: decompressed OUT_CHUNK bytes at a time,
    so a bomb stops at the listed size having held no more than one step in memory."""
    if method == "zstd":
        # (it calls the sink's write() alone: typeshed asks for a whole IO)
        writer = zstandard.ZstdDecompressor().stream_writer(sink, write_size=OUT_CHUNK,  # type: ignore[arg-type]
                                                            closefd=False)

        def unzstd(chunk: bytes) -> None:
            writer.write(chunk)
        return unzstd
    if method == "gzip":
        z = zlib.decompressobj(wbits=31)

        def gunzip(chunk: bytes) -> None:
            out = z.decompress(chunk, OUT_CHUNK)
            sink.write(out)
            # a full step may leave output in zlib with all the input taken: it comes with no more input
            while z.unconsumed_tail or (len(out) == OUT_CHUNK and not z.eof):
                out = z.decompress(z.unconsumed_tail, OUT_CHUNK)
                sink.write(out)
        return gunzip

    def plain(chunk: bytes) -> None:
        sink.write(chunk)
    return plain


def wire_limit(length: int) -> int:
    """The most bytes `length` bytes of a file may take on the wire: zstd and gzip add a few bytes a block
    to what does not compress, and a frame's header."""
    return length + (length >> 6) + (1 << 16)


class LogFetcher:
    """Brings a host's logs into `dest/<host>/`, remembering which remote file each local copy mirrors."""

    def __init__(self, host: Host, dest: Path, on_bytes: Callable[[str, int], None] | None = None,
                 since: dict[str, tuple[int, str]] | None = None):
        """`since` maps a remote path to (offset, tag): only bytes from that offset, into `<name>.<tag>`."""
        self.host, self.dest, self.dir = host, dest, host_path(dest, host.name)
        self.since = since or {}
        with own_dir(dest, host.name):  # DEST and DEST/HOST yours alone, or one line before anything is written
            pass
        self.state_path = self.dir / RECORD
        self.state: dict[str, dict[str, Any]] = self._load()
        self.on_bytes = on_bytes or (lambda name, n: None)
        self.refused: list[str] = []  # names the last listing held that are outside the patterns

    def _load(self) -> dict[str, dict[str, Any]]:
        """The record of which remote file each local copy mirrors; one that is no such record is named."""
        if not self.state_path.exists():
            return {}
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
            if isinstance(state, dict) and all(isinstance(v, dict) and isinstance(v.get("local"), str)
                                               for v in state.values()):
                return state
        except (ValueError, UnicodeDecodeError):
            pass
        raise BadInput(f"{self.state_path} is not fetch-logs' record; move it away (the next fetch then begins "
                       f"each file again, in new local names)", host=self.host.name)

    def _save(self) -> None:
        with own_dir(self.dest, self.host.name) as here:
            try:
                write_new(here, RECORD, json.dumps(self.state, indent=1, sort_keys=True).encode())
            except OSError as exc:
                raise BadInput(f"cannot write {self.state_path}: {exc.strerror}", host=self.host.name) from None

    def _new_name(self, remote: str) -> str:
        base = re.sub(r"[\x00-\x1f\x7f]", "_", PurePosixPath(remote).name)  # a local name with no newline
        if base.casefold().startswith(OWN_PREFIX):  # casefold: a Mac's disk takes .SWAPCTL-FETCH.JSON for it
            base = "_" + base
        if remote in self.since:
            base = f"{base}.{self.since[remote][1]}"
        taken = {s["local"] for s in self.state.values()} | {p.name for p in self.dir.iterdir()}
        name, n = base, 1
        while name in taken:
            name, n = f"{base}.{n}", n + 1
        return name

    def fetch(self, patterns: list[str]) -> list[Fetched]:
        """Fetches the new bytes of every file the patterns match; names refused are in `self.refused`."""
        relative = [p for p in patterns if not p.startswith("/")]
        if relative:
            raise BadInput(f"logs.paths: {relative[0]!r} is not an absolute path; give the full path on the host")
        listing = bytearray()

        def keep(data: bytes) -> None:
            listing.extend(data)
            if len(listing) > MAX_LISTING:
                raise RemoteOutputTooLarge(f"the log listing is over {MAX_LISTING >> 20} MiB; narrow logs.paths",
                                           host=self.host.name)

        cmd = scripts.command("list_logs.sh", *patterns)
        code, err = self.host.stream_bytes(cmd, keep)
        if code != 0:
            raise RemoteCommandFailed(self.host.name, str(cmd), code, err.decode("utf-8", "replace"))
        tools, files, self.refused = parse_listing(bytes(listing), patterns)
        method = "zstd" if "zstd" in tools else "gzip" if "gzip" in tools else "plain"
        return [self._one(path, inode, size, method, real) for inode, size, path, real in files]

    def _one(self, remote: str, inode: int, size: int, method: str, real: str) -> Fetched:
        start, tag = self.since.get(remote, (0, ""))
        key = f"{remote}@{tag}" if tag else remote
        before = known = self.state.get(key)
        restarted = False
        if known:
            local = self.dir / known["local"]
            have = local.stat().st_size if local.exists() else 0
            if known["inode"] != inode or size < start + have:
                restarted = True  # rotated or truncated: begin a new local copy
                known = None
        if not known:
            known = {"inode": inode, "local": self._new_name(remote)}
            self.state[key] = known
            self._save()
        local = self.dir / known["local"]
        had = local.stat().st_size if local.exists() else None
        offset = start + (had or 0)
        wire = 0
        if size > offset:
            try:
                wire = self._read(remote, real, offset, size - offset, method, local)
            except _TooMuch:
                self._undo(key, before, local, had)
                raise RemoteOutputTooLarge(
                    f"{remote}: the host sent more than the {size - offset:,} bytes it listed ({method} on the "
                    f"wire): none of it was kept; check the head, tail and {method} on root's PATH there",
                    host=self.host.name) from None
        new = start + (local.stat().st_size if local.exists() else 0) - offset
        return Fetched(remote=remote, local=str(local), new_bytes=new, wire_bytes=wire, method=method,
                       restarted=restarted)

    def _read(self, remote: str, real: str, offset: int, length: int, method: str, local: Path) -> int:
        """Appends `length` bytes of the host's `real` from `offset` to `local`: the bytes it took on the wire.
        Raises _TooMuch once the host sends more than that, on the wire or decompressed."""
        wire = 0
        with open(local, "ab") as f:
            decode = _decoder(method, _Sink(f, length, lambda n: self.on_bytes(remote, n)))

            def take(chunk: bytes) -> None:
                nonlocal wire
                wire += len(chunk)
                if wire > wire_limit(length):
                    raise _TooMuch
                decode(chunk)

            code, err = self.host.stream_bytes(
                scripts.command("read_log.sh", f=real, off=offset, len=length, method=method), take, timeout=3600)
        if code != 0:
            raise RemoteCommandFailed(self.host.name, f"read {remote}", code, err.decode(errors="replace"))
        return wire

    def _undo(self, key: str, before: dict[str, Any] | None, local: Path, had: int | None) -> None:
        """Puts the local copy and the record back as they were before a fetch the host sent too much for."""
        if had is None:
            local.unlink(missing_ok=True)
        else:
            with open(local, "r+b") as f:
                f.truncate(had)
        if before is None:
            self.state.pop(key, None)
        else:
            self.state[key] = before
        self._save()


class _CursorSplitter:
    """Writes a journal fetch's lines as they come, all but its last line: that is the cursor."""

    def __init__(self, write: Callable[[bytes], None]):
        self.write, self.pending, self.cursor = write, b"", ""

    def feed(self, data: bytes) -> None:
        data = self.pending + data
        cut = data.rfind(b"\n", 0, len(data) - 1) + 1  # keep the last line (whole or not) back
        if cut:
            self.write(data[:cut])
        self.pending = data[cut:]

    def finish(self) -> None:
        if self.pending.startswith(CURSOR):
            self.cursor = self.pending[len(CURSOR):].decode("ascii", "replace").strip()
        elif self.pending:
            self.write(self.pending)  # a line with no cursor after it: journalctl was cut short
        self.pending = b""


def _read_journal(fetcher: LogFetcher, unit: str, entry: dict[str, Any]) -> tuple[int, bytes, str]:
    """One journalctl run after `entry`'s cursor, appended to its local file: (exit code, stderr, new cursor)."""
    with open(fetcher.dir / entry["local"], "ab") as f:
        def write(data: bytes) -> None:
            f.write(data)
            f.flush()  # what is on disk is what the next fetch must not bring again
            fetcher.on_bytes(f"journal -u {unit}", len(data))

        split = _CursorSplitter(write)
        code, err = fetcher.host.stream_bytes(scripts.command("read_journal.sh", unit=unit, cursor=entry["cursor"]),
                                              split.feed, timeout=3600)
        split.finish()
    return code, err, split.cursor


def fetch_journal(fetcher: LogFetcher, unit: str) -> Fetched:
    """The new lines of `unit`'s journal (`journalctl -u UNIT -o cat --after-cursor`) into `<unit>.log`,
    resumed from the cursor the last fetch ended at. A cursor the journal no longer has (vacuumed) begins
    a new local copy from what the journal holds."""
    key = f"journal:{unit}"
    entry: dict[str, Any] = fetcher.state.get(key) or {"cursor": "", "local": fetcher._new_name(f"{unit}.log")}
    local = fetcher.dir / entry["local"]
    before = local.stat().st_size if local.exists() else 0
    code, err, cursor = _read_journal(fetcher, unit, entry)
    restarted = False
    if code != 0 and entry["cursor"]:  # the cursor is gone from the journal: begin again, apart
        entry, restarted, before = {"cursor": "", "local": fetcher._new_name(f"{unit}.log")}, True, 0
        local = fetcher.dir / entry["local"]
        code, err, cursor = _read_journal(fetcher, unit, entry)
    if code != 0:
        raise RemoteCommandFailed(fetcher.host.name, f"journalctl -u {unit}", code, err.decode(errors="replace"))
    entry["cursor"] = cursor or entry["cursor"]
    fetcher.state[key] = entry
    fetcher._save()
    new = (local.stat().st_size if local.exists() else 0) - before
    return Fetched(remote=f"journal -u {unit}", local=str(local), new_bytes=new, wire_bytes=new, method="plain",
                   restarted=restarted)
