"""`swapctl init`: write a commented playbook for a new user."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import tomlkit
import typer

from .. import playbook as pb
from ..errors import BadInput, UnknownHostKey
from ..facts import daemon_view as view
from ..facts.curio_nodes import CurioNode, feeds, running
from ..facts.launch import Launch, launch_cmd, parse_launch, ready_proposal
from ..facts.status import gather
from ..facts.system import Process
from ..playbook import examples
from ..remote import Cmd, Host, connect
from .common import RootOptions, err, guarded, load_playbook, out, root, select_hosts, text

TEMPLATE = '''\
# swapctl playbook: where the GPU hosts are and how the daemon runs on them.
# Reference: docs/playbook.md (generated from the schema: swapctl/playbook/reference.py).

[hosts.gpu-box]
address = "{address}"
port = {port}
user = "root"
# identity_file = "~/.ssh/id_ed25519"  # otherwise ssh-agent and ~/.ssh/config decide
# known_hosts = "~/.ssh/known_hosts"
host_key_policy = "strict"             # strict | accept-new (record a key seen for the first time)

[daemon]
binary = "/data/cuzk"                  # the path the daemon runs from on the host
args = ["--config", "/data/cuzk.toml"] # leave out to keep the running daemon's arguments
match = "cuzk"                         # regex on the command line: finds a daemon swapctl did not start
log = "/data/cuzk.log"                 # the daemon's stdout and stderr
ready_log = "cuzk-daemon ready"        # extended regex: this line after the start means ready
ready_timeout_s = 600                  # SRS loading takes 30-90 s on a real box
ready_stable_s = 30                   # after the ready line it must stay up this long (a crash at the first proof)
stop_grace_s = 30                      # SIGTERM, then SIGKILL after this

[memory]
min_available_gib = 400                # start the new daemon only once MemAvailable >= this
release_timeout_s = 900

[logs]
paths = ["/data/*.log"]

[releases]
keep = 5
'''


def init(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="Where to write it.")] = "swapctl.toml",
    address: Annotated[str, typer.Option(help="The GPU host's address.")] = "192.0.2.10",
    port: Annotated[int, typer.Option(help="Its SSH port.")] = 22,
    example: Annotated[str | None, typer.Option(
        "--example", help=f"Write one of the example playbooks instead: {', '.join(examples.names())}.",
        show_default=False)] = None,
    from_host: Annotated[str | None, typer.Option(
        "--from", help="Write it from what runs on this HOST: the daemon's binary, args, cwd and log, a match "
                       "that finds exactly it, and a ready line proposed from its log.", show_default=False)] = None,
    match: Annotated[str, typer.Option(help="With --from: a regex on the command line that finds the daemon.")
                     ] = "cuzk",
    user: Annotated[str | None, typer.Option(
        "--user", help="With --from: the user the daemon runs as, where that is neither root nor its binary's "
                       "owner (written as daemon.user).", show_default=False)] = None,
    identity_file: Annotated[str | None, typer.Option(
        "--identity-file", metavar="FILE", show_default=False,
        help="With --from: the private key to log in with (written as identity_file).")] = None,
    known_hosts: Annotated[str | None, typer.Option(
        "--known-hosts", metavar="FILE", show_default=False,
        help="With --from: the known_hosts file to check the host's key against (written as known_hosts).")] = None,
    accept_new: Annotated[bool, typer.Option(
        "--accept-new", help="With --from: record the host's key if it is seen for the first time (as ssh's "
                             "StrictHostKeyChecking=accept-new); a changed key is still refused.")] = False,
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented playbook to start from."""

    def run() -> int:
        target = Path(path)
        if from_host is not None:
            body = from_running(from_host, match, user, Login(identity_file, known_hosts, accept_new), root(ctx))
        elif example is not None:
            # the sandbox's example names `swapctl sandbox up`'s default directory and port
            body = examples.render(example, SANDBOX=str(Path(".sandbox").resolve()), PORT="40612",
                                       STATUS_PORT="40613")
        else:
            body = TEMPLATE.format(address=address, port=port)
        if target.exists() and not force:
            raise BadInput(f"{path} exists; edit it, or pass --force to overwrite it")
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        tmp.write_text(body, encoding="utf-8")
        tmp.replace(target)
        what = f"a playbook from {from_host}" if from_host else f"the {example} example" if example else "a playbook"
        out.print(text(f"wrote {what} to {path}; edit [hosts] and [daemon], then run `swapctl status HOST`"))
        return 0

    guarded(run)


@dataclass(frozen=True)
class Login:
    """init --from's --identity-file, --known-hosts and --accept-new: how the first connection logs in."""
    identity_file: str | None = None
    known_hosts: str | None = None
    accept_new: bool = False


def from_running(target: str, match: str, user: str | None, login: Login, opts: RootOptions) -> str:
    """A playbook for the daemon that runs on `target` now (found by `match`), as it was started. Only what
    deploy would adopt with that playbook counts: another user's look-alike is named, never written."""
    try:
        re.compile(match)
    except re.error as exc:
        raise BadInput(f"--match {match!r} is not a valid regular expression ({exc})") from None
    book = load_playbook(None, opts, required=False)  # HOST: a playbook name, an ssh_config alias, user@host:port
    [spec] = select_hosts(book, [target])
    spec = replace(spec, identity_file=login.identity_file or spec.identity_file,
                   known_hosts=login.known_hosts or spec.known_hosts,
                   host_key_policy="accept-new" if login.accept_new else spec.host_key_policy)
    try:
        with connect(spec) as host:
            found = _found(host, spec.name, match, user)
    except UnknownHostKey as exc:  # its advice names a playbook setting, and there is no playbook yet
        raise UnknownHostKey(exc.seen, "if that is the host's key, run init again with --accept-new to record it",
                             host=spec.name) from None
    text_ = _playbook_text(target, spec, found, user)
    pb.parse(text_, "the playbook from " + target)  # what it writes must load
    return text_


@dataclass(frozen=True)
class _Found:
    """The running daemon to adopt, as init found it on the host."""
    daemon: Process
    launch: Launch
    binary: str
    argv: tuple[str, ...]
    exact: str  # a daemon.match that finds it and nothing else deploy would adopt
    config: str
    status_url: str | None
    listen: str = view.DEFAULT_LISTEN  # where the daemon listens: what a node's [Cuzk] Address must name
    curio_nodes: tuple[CurioNode, ...] = ()  # each running `curio run --listen ADDR` (checked as [curio] nodes)


def _found(host: Host, name: str, match: str, user: str | None) -> _Found:
    daemon, launch, binary = _daemon_to_adopt(host, name, match, user)
    argv = launch.argv or tuple(daemon.args.split())
    config = view.config_path(argv)
    config_text = host.run(Cmd("head", "-c", "1048576", "--", config), check=False).stdout
    status_url, listen = view.status_url_of(config_text), view.listen_of(argv, config_text)
    # the program's path alone, else its whole command line: the first that finds it and nothing else
    # that deploy would adopt (a look-alike it matches too is named and left alone there)
    for exact in ("^" + re.escape(argv[0]) + "( |$)", "^" + re.escape(" ".join(argv)) + "$"):
        found = gather(host, pb.DaemonSpec(match=exact, binary=binary, user=user)).daemons
        if [p.pid for p in found] == [daemon.pid]:
            return _Found(daemon, launch, binary, argv, exact, config, status_url, listen, tuple(running(host)))
    raise BadInput(f"{name}: no match finds pid {daemon.pid} alone; write [daemon] match by hand")


def _curio_lines(found: _Found, host_address: str) -> list[str]:
    """[curio] as init writes it: the nodes on the host whose layers' [Cuzk] Address is this daemon, and those
    it cannot tell (layers unread, a host name), each said so; the others named and left out; never the
    database's credentials."""
    q, c, listen = _value, _comment, found.listen
    if not found.curio_nodes:
        return ["", "# [curio]                              # no `curio run --listen` runs on the host: where Curio",
                '# nodes = ["10.0.0.5:12300"]           # nodes feed this daemon, name them (docs/curio.md)']
    ours, notes = [], []
    for n in found.curio_nodes:
        said = f"# {c(n.listen)}: layers {c(','.join(n.layers))}"
        fed = feeds(n.address, listen, (host_address, *n.host_addresses)) if n.address else False
        if n.db != "ok":
            ours.append(n)
            notes.append(f"{said} could not be read (database: {n.db}): check it feeds this daemon ({c(listen)})")
        elif not n.address:
            notes.append(f"{said} give {'an empty' if n.address == '' else 'no'} [Cuzk] Address: it feeds no cuzk, "
                         "left out")
        elif fed is None:
            ours.append(n)
            notes.append(f"{said} give [Cuzk] Address {c(n.address)}: check it reaches this daemon ({c(listen)})")
        else:
            ours += [n] if fed else []
            notes.append(f"{said} give [Cuzk] Address {c(n.address)}: "
                         + ("this daemon" if fed else f"not this daemon ({c(listen)}), left out"))
    lines = ["", "[curio]"]
    lines += [f"nodes = [{', '.join(q(n.listen) for n in ours)}]  # the `curio run --listen` of each node that "
              "feeds this daemon (harmony_machines.host_and_port)"] if ours else ["# nodes = []  # none feeds it"]
    return lines + notes + [
        "# env = { CURIO_DB_HOST = \"...\", CURIO_DB_PASSWORD = \"...\" }  # how the host reaches the harmony "
        "database (secrets: the playbook only)",
        '# and stop = "cordon" under [daemon] to cordon the nodes around a swap (docs/curio.md)']


def _playbook_text(target: str, spec: pb.HostSpec, found: _Found, user: str | None) -> str:
    """The playbook init writes: every value from what runs there, each with what to check."""
    daemon, launch, binary, argv = found.daemon, found.launch, found.binary, found.argv
    exact, config, status_url = found.exact, found.config, found.status_url
    ready = ready_proposal(launch.ready_lines)
    held = held_gib(daemon.rss_kib)
    q, c = _value, _comment
    lines = [
        f"# written by `swapctl init --from {c(target)}` from the daemon running there (pid {daemon.pid}):",
        f"#   {c(' '.join(argv))}",
        f"# check each value, then `swapctl status {c(spec.name)}` and `swapctl deploy {c(spec.name)} --binary ...`",
        "",
        f"[hosts.{q(spec.name)}]",
        f"address = {q(spec.address)}",
    ]
    lines += [f"port = {spec.port}"] if spec.port else []
    lines += [f"{k} = {q(v)}" for k, v in (("user", spec.user), ("identity_file", spec.identity_file),
                                           ("known_hosts", spec.known_hosts)) if v]
    lines += [
        "",
        "[daemon]",
        f"binary = {q(binary)}",
        f"args = [{', '.join(map(q, argv[1:]))}]        # its command line now",
        f"match = {q(exact)}  # finds it and nothing else running there",
    ]
    lines += [f"user = {q(user)}                  # who it runs as (--user)"] if user else []
    lines += [f"cwd = {q(launch.cwd)}"] if launch.cwd else []
    if launch.stdout:
        lines.append(f"log = {q(launch.stdout)}                # where its stdout goes now")
    else:
        lines.append('log = "/data/cuzk.log"                # its stdout is no file now: say where the new one writes')
    if ready:
        lines.append(f"ready_log = {q(ready[0])}     # proposed from its log line: {c(words(ready[1], 160))}")
    else:
        lines.append('# ready_log = "..."                  # nothing in its log looked like a ready line: set it')
    if status_url:
        lines += [f"status_url = {q(status_url)}  # its GET /status (status_listen in {c(config)})",
                  '# stop = "drain"                     # wait until no proof is in flight before the stop']
    else:
        lines.append(f"# status_url = \"http://127.0.0.1:9821/status\"  # {c(config)} sets no status_listen")
    lines += [
        "ready_timeout_s = 600",
        "stop_grace_s = 30",
        "",
        "[memory]",
        f"min_available_gib = {held:g}                # it holds {held:g} GiB now: start the new one once that is back",
        "release_timeout_s = 900",
    ]
    if launch.stdout:
        lines += ["", "[logs]", f"paths = [{q(launch.stdout)}]"]
    lines += _curio_lines(found, spec.address)
    return "\n".join(lines) + "\n"


def held_gib(rss_kib: int) -> float:
    """min_available_gib for a daemon holding `rss_kib`: its GiB rounded up to a tenth, never 0 (0 turns the
    memory wait off: a 364 MiB daemon was written as 0)."""
    return max(1, math.ceil(rss_kib * 10 / (1 << 20))) / 10


def words(line: str, most: int) -> str:
    """`line` whole, or cut at the last blank within `most` characters with `…` (never mid-word)."""
    if len(line) <= most:
        return line
    cut = line[:most].rsplit(" ", 1)[0] if " " in line[:most] else line[:most]
    return cut.rstrip() + " …"


def _value(value: str) -> str:
    """`value` as a quoted TOML string: whatever the host said, it stays one value."""
    return tomlkit.string(value).as_string()


def _comment(said: str) -> str:
    """`said` fit for a comment: anything that could end the comment or the line (a newline, a control, a
    line separator, a bidi override) as `?`, 500 characters at most."""
    return "".join(ch if ch.isprintable() else "?" for ch in said[:500])


def _binary_of(daemon: Process, launch: Launch) -> str:
    """The daemon.binary a playbook gives this process: its argv[0] when that is a path, else what it runs."""
    argv0 = (launch.argv or tuple(daemon.args.split()) or ("",))[0]
    return argv0 if argv0.startswith("/") else daemon.exe or argv0


def _daemon_to_adopt(host: Host, name: str, match: str, user: str | None) -> tuple[Process, Launch, str]:
    """The one process `match` finds that deploy would adopt with the playbook written from it (facts/status.py
    _the_daemon: it runs that binary or one of its releases, as root or the binary's owner, or as `user`),
    with how it was started and its binary. A match that is no such process is named in one line."""
    found = gather(host, pb.DaemonSpec(match=match)).daemons
    if not found:
        raise BadInput(f"{name}: --match {match!r}: no process matches it; pass a --match that finds the daemon alone")
    adopted: list[Process] = []
    others: list[Process] = []
    launches: dict[int, Launch] = {}
    binaries: dict[int, str] = {}
    for p in found:
        launches[p.pid] = parse_launch(host.run(launch_cmd(p.pid), timeout=30).stdout)
        binaries[p.pid] = _binary_of(p, launches[p.pid])
    checked = {b: {d.pid for d in gather(host, pb.DaemonSpec(match=match, binary=b, user=user)).daemons}
               for b in dict.fromkeys(binaries.values())}
    for p in found:
        (adopted if p.pid in checked[binaries[p.pid]] else others).append(p)
    who = f"as {user} (--user)" if user else "as root or its owner"
    said = [f"pid {p.pid} (uid {p.uid}, runs {p.exe or '?'}: {p.args[:500]}) matches it but runs no "
            f"{binaries[p.pid]} {who}" for p in others]
    if not adopted:
        fix = "pass --user NAME if it is the daemon and runs as NAME, or" if not user else "fix --user, or"
        raise BadInput(f"{name}: --match {match!r}: no process that matches it is the daemon: {'; '.join(said)}; "
                       f"{fix} start the daemon and run this again")
    if len(adopted) > 1:
        listed = "; ".join(f"pid {p.pid}: {p.args[:80]}" for p in adopted)
        raise BadInput(f"{name}: --match {match!r}: {len(adopted)} processes match it ({listed}); pass a --match "
                       f"that finds the daemon alone")
    for line in said:
        err.print(text(f"swapctl: {name}: not the daemon, not written into the playbook: {line}"), style="yellow")
    [daemon] = adopted
    return daemon, launches[daemon.pid], binaries[daemon.pid]
