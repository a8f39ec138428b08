"""The experiment's evidence as it comes home: the daemon's log and GPU samples, fetched so far, and the
runs in a byte range of the log (the baseline's, then B's)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from .. import playbook as pb
from ..gpu.sampler import fetch_patterns
from ..gpu.samples import Sample, samples_in
from ..logs.fetch import LogFetcher, host_path
from ..logs.timings import ByteRange, Run, parse
from ..remote import Host


class Window:
    """The daemon's log and GPU samples as fetched so far, and the runs in a byte range of the log."""

    def __init__(self, host: Host, book: pb.Playbook, dest: Path) -> None:
        self.book, self.fetcher = book, LogFetcher(host, dest)
        self.log_remote = book.require_daemon().log
        self.local = host_path(dest, host.name, PurePosixPath(self.log_remote).name)
        self.samples_dir = host_path(dest, host.name)
        self.patterns = [self.log_remote] + fetch_patterns(book.daemon.state_dir)

    def fetch(self) -> None:
        self.fetcher.fetch(self.patterns)

    def runs(self, start: int, end: int | None = None) -> list[Run]:
        if not self.local.exists():
            return []
        with open(self.local, "rb") as f:
            size = f.seek(0, 2)
            return parse([ByteRange(f, start, size if end is None else min(end, size))]).runs

    def samples(self) -> list[Sample]:
        return samples_in(self.samples_dir)


def side_runs(runs: list[Run]) -> list[Run]:
    """The runs that proved something: a restart that never got to work is no evidence either way."""
    return [r for r in runs if r.jobs or r.pinned + r.pageable]
