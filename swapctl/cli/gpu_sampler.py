"""`swapctl gpu-sampler start|stop|status HOST...`: the host's GPU sampler, by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from .. import playbook as pb
from ..errors import BadInput, ExitCode, SwapctlError
from ..gpu.sampler import (
    DEFAULT_MAX_BYTES,
    DEFAULT_QUIET_S,
    SamplerStatus,
    daemon_pid,
    sampler_status,
    start_sampler,
    stop_sampler,
)
from ..remote import Host
from ..remote.group import on_hosts
from .common import (
    JsonOpt,
    LimitOpt,
    PlaybookOpt,
    RootOptions,
    err,
    guarded,
    load_playbook,
    out,
    print_json,
    root,
    select_hosts,
    size,
    text,
    worst,
)

app = typer.Typer(help="The GPU sampler on the host: nvidia-smi dmon (and query-gpu) while the daemon runs.",
                  rich_markup_mode=None, no_args_is_help=True)  # help as written, as the other verbs
HostsArg = Annotated[list[str], typer.Argument(help="Host names, user@address:port, or @group.")]


@app.command()
def start(
    ctx: typer.Context,
    hosts: HostsArg,
    pid: Annotated[int | None, typer.Option(
        "--pid", help="Follow this pid (default: the daemon `status` finds).")] = None,
    query: Annotated[bool, typer.Option(
        "--query", help="Also record --query-gpu every 500 ms (power, clocks).")] = False,
    max_mib: Annotated[float, typer.Option("--max-mib", help="Bound on each kind of sample files on the host.")]
    = DEFAULT_MAX_BYTES / (1 << 20),
    quiet_s: Annotated[float, typer.Option("--quiet-s", help="An nvidia-smi silent this long is hung: killed, noted.")]
    = DEFAULT_QUIET_S,
    playbook: PlaybookOpt = None,
    limit: LimitOpt = None,
    json: JsonOpt = False,
) -> None:
    """Start sampling the GPUs while the running daemon lives; it ends by itself when the daemon exits."""
    def one(host: Host, book: pb.Playbook) -> SamplerStatus:
        return start_sampler(host, book.daemon.state_dir, pid or daemon_pid(host, book.daemon),
                             max_bytes=max(int(max_mib * (1 << 20)), 2048), query=query, quiet_s=quiet_s,
                             user=book.daemon.user or "")

    def checked() -> int:
        if quiet_s <= 0 or max_mib <= 0 or (pid is not None and pid <= 1):
            raise BadInput("--quiet-s and --max-mib must be above 0, --pid above 1")
        return _run(hosts, playbook, limit, json, one, root(ctx))

    guarded(checked)


@app.command()
def stop(ctx: typer.Context, hosts: HostsArg, playbook: PlaybookOpt = None, limit: LimitOpt = None,
         json: JsonOpt = False) -> None:
    """Stop the sampler and the nvidia-smi it runs; its files stay for fetch-logs."""
    guarded(lambda: _run(hosts, playbook, limit, json,
                         lambda host, book: stop_sampler(host, book.daemon.state_dir, book.daemon.user or ""),
                         root(ctx)))


@app.command()
def status(ctx: typer.Context, hosts: HostsArg, playbook: PlaybookOpt = None, limit: LimitOpt = None,
           json: JsonOpt = False) -> None:
    """Whether the sampler runs, what it follows, its files on the host and its last note."""
    guarded(lambda: _run(hosts, playbook, limit, json,
                         lambda host, book: sampler_status(host, book.daemon.state_dir, book.daemon.user or ""),
                         root(ctx)))


def _run(targets: list[str], playbook_path: str | None, limit: str | None, as_json: bool,
         fn: Callable[[Host, pb.Playbook], SamplerStatus], opts: RootOptions) -> int:
    book = load_playbook(playbook_path, opts)
    book.require_daemon()
    specs = select_hosts(book, targets, limit)
    results = on_hosts(specs, lambda host: fn(host, book))
    codes = []
    for r in results.values():
        if isinstance(r, BaseException):
            codes.append(int(getattr(r, "exit_code", ExitCode.FAILED)))
        elif not r.ok:  # nothing was started on that host
            codes.append(int(ExitCode.REFUSED))
        else:
            codes.append(0)
    if as_json:
        print_json({"hosts": {n: ({"error": str(r)} if isinstance(r, BaseException) else r)
                              for n, r in results.items()}})
        return worst(codes)
    for name, r in results.items():
        if isinstance(r, BaseException):
            err.print(text(f"swapctl: {r}" if isinstance(r, SwapctlError) else f"swapctl: {name}: {r}"),
                      style="bold red")
        else:
            render(r)
    return worst(codes)


def render(st: SamplerStatus) -> None:
    if st.outcome == "no nvidia-smi":
        err.print(text(f"swapctl: {st.host}: no nvidia-smi on this host: no GPU samples (noted in "
                       f"{st.directory}/gpu-sampler.notes)"), style="bold yellow")
        return
    if st.outcome == "failed":
        err.print(text(f"swapctl: {st.host}: the GPU sampler did not start: {st.reason or st.note}"), style="bold red")
        return
    following = f"pid {st.pid} following daemon pid {st.daemon_pid} since {st.since}"
    if st.outcome == "stopped":
        out.print(text(f"{st.host}: GPU sampler stopped"))
    elif st.outcome == "not running":
        out.print(text(f"{st.host}: no GPU sampler was running"))
    elif st.running:
        out.print(text(f"{st.host}: GPU sampler {st.outcome + ': ' if st.outcome else ''}{following}"))
    else:
        out.print(text(f"{st.host}: no GPU sampler running"))
    total = sum(f.size for f in st.files)
    out.print(text(f"  {len(st.files)} sample files, {size(total / 1024)} in {st.directory}"))
    if st.note:
        out.print(text(f"  last note: {st.note}"), style=None if st.running else "yellow")
