"""`swapctl init`: write a commented playbook for a new user."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated

import typer

from .. import playbook as pb
from ..errors import BadInput
from ..facts.launch import launch_cmd, parse_launch, propose_ready
from ..facts.status import gather
from ..playbook import examples
from ..remote import connect
from .common import guarded, out, select_hosts, text

TEMPLATE = '''\
# swapctl playbook: where the GPU hosts are and how the daemon runs on them.
# Reference: README.md, "Playbook reference".

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
    path: Annotated[str, typer.Argument(help="Where to write it.")] = "swapctl.toml",
    address: Annotated[str, typer.Option(help="The GPU host's address.")] = "141.0.85.211",
    port: Annotated[int, typer.Option(help="Its SSH port.")] = 22,
    example: Annotated[str | None, typer.Option(
        "--example", help=f"Write one of the example playbooks instead: {', '.join(examples.names())}.",
        show_default=False)] = None,
    from_host: Annotated[str | None, typer.Option(
        "--from", help="Write it from what runs on this HOST: the daemon's binary, args, cwd and log, a match "
                       "that finds exactly it, and a ready line proposed from its log.", show_default=False)] = None,
    match: Annotated[str, typer.Option(help="With --from: a regex on the command line that finds the daemon.")
                     ] = "cuzk",
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented playbook to start from."""

    def run() -> int:
        target = Path(path)
        if from_host is not None:
            body = from_running(from_host, match)
        elif example is not None:
            # the sandbox's example names `swapctl sandbox up`'s default directory and port
            body = examples.render(example, SANDBOX=str(Path(".sandbox").resolve()), PORT="40612")
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


def from_running(target: str, match: str) -> str:
    """A playbook for the daemon that runs on `target` now (found by `match`), as it was started."""
    try:
        re.compile(match)
    except re.error as exc:
        raise BadInput(f"--match {match!r} is not a valid regular expression ({exc})") from None
    book = pb.load(None, required=False)  # the HOST may be a playbook name, an ssh_config alias, user@host:port
    [spec] = select_hosts(book, [target])
    with connect(spec) as host:
        found = gather(host, pb.DaemonSpec(match=match))
        if len(found.daemons) != 1:
            listed = "; ".join(f"pid {p.pid}: {p.args[:80]}" for p in found.daemons)
            why = f"{len(found.daemons)} processes match it ({listed})" if found.daemons else "no process matches it"
            raise BadInput(f"{spec.name}: --match {match!r}: {why}; pass a --match that finds the daemon alone")
        [daemon] = found.daemons
        launch = parse_launch(host.run(launch_cmd(daemon.pid), timeout=30).stdout)
        argv = launch.argv or tuple(daemon.args.split())
        # the program's path alone, else its whole command line: the first that finds it and nothing else
        for exact in ("^" + re.escape(argv[0]) + "( |$)", "^" + re.escape(" ".join(argv)) + "$"):
            if [p.pid for p in gather(host, pb.DaemonSpec(match=exact)).daemons] == [daemon.pid]:
                break
        else:
            raise BadInput(f"{spec.name}: no match finds pid {daemon.pid} alone; write [daemon] match by hand")
    binary = argv[0] if argv[0].startswith("/") else daemon.exe or argv[0]
    ready = propose_ready(launch.ready_lines)
    held = int(daemon.rss_kib / (1 << 20))  # GiB the daemon holds now: the new one needs as much back
    q = json.dumps
    lines = [
        f"# written by `swapctl init --from {target}` from the daemon running there (pid {daemon.pid}):",
        f"#   {' '.join(argv)}",
        f"# check each value, then `swapctl status {spec.name}` and `swapctl deploy {spec.name} --binary ...`",
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
    lines += [f"cwd = {q(launch.cwd)}"] if launch.cwd else []
    if launch.stdout:
        lines.append(f"log = {q(launch.stdout)}                # where its stdout goes now")
    else:
        lines.append('log = "/data/cuzk.log"                # its stdout is no file now: say where the new one writes')
    if ready:
        lines.append(f"ready_log = {q(ready)}     # proposed from its log: {launch.ready_lines[0][:60]!r}")
    else:
        lines.append('# ready_log = "..."                  # nothing in its log looked like a ready line: set it')
    lines += [
        "ready_timeout_s = 600",
        "stop_grace_s = 30",
        "",
        "[memory]",
        f"min_available_gib = {held}                # it holds {held} GiB now: start the new one once that is back",
        "release_timeout_s = 900",
    ]
    if launch.stdout:
        lines += ["", "[logs]", f"paths = [{q(launch.stdout)}]"]
    text_ = "\n".join(lines) + "\n"
    pb.parse(text_, "the playbook from " + target)  # what it writes must load
    return text_
