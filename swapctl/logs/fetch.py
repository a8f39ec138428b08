"""Incremental, resumable log download: only new bytes, compressed on the wire when the host can.

The local copy's size is the offset to resume from, so an interrupted run picks up where its bytes
end. A remote file whose inode changed or that shrank (rotated, truncated) is fetched again from the
start into a new local name: generations are never mixed.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

import zstandard

from ..remote import Cmd, Host

LIST = r"""
IFS='
'
printf 'TOOLS %s %s\n' "$(command -v zstd >/dev/null 2>&1 && echo zstd)" "$(command -v gzip >/dev/null 2>&1 && echo gzip)"
for pat; do for f in $pat; do [ -f "$f" ] && stat -c 'FILE %i %s %n' -- "$f"; done; done
exit 0
"""

READ = r"""
f=$1; off=$2; len=$3; method=$4
tail -c "+$((off + 1))" -- "$f" | head -c "$len" | case "$method" in
  zstd) zstd -q -c -3 ;;
  gzip) gzip -1 -c ;;
  *) cat ;;
esac
"""


@dataclass(frozen=True)
class Fetched:
    remote: str
    local: str
    new_bytes: int
    wire_bytes: int
    method: str
    restarted: bool  # the remote file was rotated or truncated: a new local copy was begun


def _decompressor(method: str) -> Callable[[bytes], bytes]:
    if method == "zstd":
        return zstandard.ZstdDecompressor().decompressobj().decompress
    if method == "gzip":
        return zlib.decompressobj(wbits=31).decompress
    return lambda b: b


class LogFetcher:
    """Brings a host's logs into `dest/<host>/`, remembering which remote file each local copy mirrors."""

    def __init__(self, host: Host, dest: Path, on_bytes: Callable[[str, int], None] | None = None,
                 since: dict[str, tuple[int, str]] | None = None):
        """`since` maps a remote path to (offset, tag): only bytes from that offset, into `<name>.<tag>`."""
        self.host, self.dir = host, dest / host.name
        self.since = since or {}
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_path = self.dir / ".swapctl-fetch.json"
        self.state: dict[str, dict] = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.on_bytes = on_bytes or (lambda name, n: None)

    def _save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1, sort_keys=True))
        tmp.replace(self.state_path)

    def _new_name(self, remote: str) -> str:
        base = PurePosixPath(remote).name
        if remote in self.since:
            base = f"{base}.{self.since[remote][1]}"
        taken = {s["local"] for s in self.state.values()} | {p.name for p in self.dir.iterdir()}
        name, n = base, 1
        while name in taken:
            name, n = f"{base}.{n}", n + 1
        return name

    def fetch(self, patterns: list[str]) -> list[Fetched]:
        listing = self.host.run(Cmd.script(LIST, *patterns, label="list-logs")).stdout.splitlines()
        tools = listing[0].split()[1:] if listing and listing[0].startswith("TOOLS") else []
        method = "zstd" if "zstd" in tools else "gzip" if "gzip" in tools else "plain"
        results = []
        for line in listing[1:]:
            _, inode, size, path = line.split(" ", 3)
            results.append(self._one(path, int(inode), int(size), method))
        return results

    def _one(self, remote: str, inode: int, size: int, method: str) -> Fetched:
        start, tag = self.since.get(remote, (0, ""))
        key = f"{remote}@{tag}" if tag else remote
        known = self.state.get(key)
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
        offset = start + (local.stat().st_size if local.exists() else 0)
        wire = 0
        if size > offset:
            decompress = _decompressor(method)
            with open(local, "ab") as f:
                def write(chunk: bytes) -> None:
                    nonlocal wire
                    wire += len(chunk)
                    data = decompress(chunk)
                    if data:
                        f.write(data)
                        f.flush()  # what is on disk is the resume point
                        self.on_bytes(remote, len(data))

                code, err = self.host.stream_bytes(
                    Cmd.script(READ, remote, str(offset), str(size - offset), method, label="read-log"),
                    write, timeout=3600)
            if code != 0:
                from ..errors import RemoteCommandFailed

                raise RemoteCommandFailed(self.host.name, f"read {remote}", code, err.decode(errors="replace"))
        new = start + (local.stat().st_size if local.exists() else 0) - offset
        return Fetched(remote=remote, local=str(local), new_bytes=new, wire_bytes=wire, method=method,
                       restarted=restarted)

