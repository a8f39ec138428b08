"""`swapctl fetch-logs HOST...`: bring the daemon's logs home, only the new bytes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from .. import playbook as pb
from ..errors import BadInput, ExitCode, SwapctlError
from ..facts.catalog import catalog as read_catalog
from ..gpu.sampler import fetch_patterns
from ..logs.fetch import Fetched, LogFetcher, fetch_journal
from ..remote import Host
from ..remote.group import on_hosts
from .common import (
    JsonOpt,
    PlaybookOpt,
    RootOptions,
    err,
    guarded,
    load_playbook,
    out,
    print_json,
    root,
    select_hosts,
    text,
    warn,
    worst,
)
from .terminal import log_lines


def fetch_logs(
    ctx: typer.Context,
    hosts: Annotated[list[str], typer.Argument(metavar="HOST", help="Host names, user@address:port, or @group.")],
    dest: Annotated[Path, typer.Option("--dest", help="Local directory; files go to DIR/HOST/.")] = Path("logs"),
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep fetching new lines until Ctrl-C.")] = False,
    since_deploy: Annotated[bool, typer.Option(
        "--since-deploy", help="Of the daemon's log, only what the current release wrote (from the journal).")] = False,
    playbook: PlaybookOpt = None,
    json: JsonOpt = False,
) -> None:
    """Download the files that logs.paths names: incremental, resumable, compressed on the wire."""
    guarded(lambda: _fetch(hosts, dest, follow, playbook, json, since_deploy, root(ctx)))


def _since_deploy(host: Host, book: pb.Playbook) -> dict[str, tuple[int, str]]:
    """The daemon log's offset where the current release started, from the host's journal."""
    if book.daemon.journal:
        raise BadInput("--since-deploy reads a log file from a byte offset; this daemon logs to its unit's journal: "
                       f"use `journalctl -u {book.daemon.unit} --since ...` on the host", host=host.name)
    catalog = read_catalog(host, book.daemon)
    warn(catalog.notes())
    began = catalog.started()
    if began is None:
        raise BadInput("no start of the current release in the host's journal: --since-deploy needs one (deploy "
                       "with swapctl first)", host=host.name)
    return {book.require_daemon().log: (began.offset, f"since-{began.release}")}


def _fetch(targets: list[str], dest: Path, follow: bool, playbook_path: str | None, as_json: bool,
           since_deploy: bool, opts: RootOptions) -> int:
    book = load_playbook(playbook_path, opts)
    unit = book.daemon.unit if book.daemon.journal else None  # its log is that unit's journal
    patterns = list(book.log_paths) or ([book.daemon.log] if book.daemon.log and not unit else [])
    if not patterns and not unit:
        raise BadInput(f"{book.path}: logs.paths: no log paths; add `paths = [\"/data/*.log\"]` under [logs]")
    specs = select_hosts(book, targets)
    # the GPU sampler's segments and notes come too, under their own names (swapctl.gpu.sampler)
    samples = fetch_patterns(book.daemon.state_dir) if book.daemon.binary else []

    def one(host: Host) -> list[Fetched]:
        fetcher = LogFetcher(host, dest, since=_since_deploy(host, book) if since_deploy else None)
        fetched = fetcher.fetch(patterns + samples)
        _refused(host.name, fetcher.refused)
        return [*fetched, fetch_journal(fetcher, unit)] if unit else fetched

    results = on_hosts(specs, one)
    codes = []
    for name, r in results.items():
        if isinstance(r, BaseException):
            codes.append(int(getattr(r, "exit_code", ExitCode.FAILED)))
            err.print(text(f"swapctl: {r}" if isinstance(r, SwapctlError) else f"swapctl: {name}: {r}"),
                      style="bold red")
        else:
            codes.append(0)
    if as_json:
        print_json({"hosts": {n: ({"error": str(r)} if isinstance(r, BaseException) else [f.__dict__ for f in r])
                              for n, r in results.items()}})
    else:
        for name, r in results.items():
            if not isinstance(r, BaseException):
                for f in r:
                    _line(name, f)
    if follow and len(specs) == 1 and not codes[0]:
        _follow(specs[0], dest, patterns, unit)
    return worst(codes)


def _refused(host: str, names: list[str]) -> None:
    """Names the host listed outside logs.paths (or not UTF-8): never fetched, and said so."""
    for name in names:
        err.print(text(f"swapctl: {host}: not fetched, outside logs.paths: {name}"), style="yellow")


def _line(host: str, f: Fetched) -> None:
    note = " (rotated or truncated on the host: new local copy)" if f.restarted else ""
    ratio = f", {f.wire_bytes:,} on the wire ({f.method})" if f.new_bytes else ""
    out.print(text(f"{host}: {f.remote} -> {f.local}: {f.new_bytes:,} new bytes{ratio}{note}"))


def _follow(spec: pb.HostSpec, dest: Path, patterns: list[str], unit: str | None = None) -> None:
    """Fetches new bytes every second and prints them, like tail -F, until Ctrl-C."""
    from ..remote import connect

    with connect(spec) as host:
        fetcher, warned = LogFetcher(host, dest), set()
        try:
            while True:
                fetched = fetcher.fetch(patterns) + ([fetch_journal(fetcher, unit)] if unit else [])
                _refused(spec.name, [n for n in fetcher.refused if n not in warned])  # once each
                warned.update(fetcher.refused)
                for f in fetched:
                    if f.new_bytes:
                        with open(f.local, "rb") as fh:
                            fh.seek(-f.new_bytes, 2)
                            out.print(log_lines(fh.read().decode("utf-8", "replace").rstrip("\n")))
                time.sleep(1)
        except KeyboardInterrupt:
            err.print("stopped following")
