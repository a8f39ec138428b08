"""`swapctl init`: write a commented playbook for a new user."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ..errors import BadInput
from ..playbook import examples
from .common import guarded, out, text

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
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented playbook to start from."""

    def run() -> int:
        target = Path(path)
        if example is not None:
            # the sandbox's example names `swapctl sandbox up`'s default directory and port
            body = examples.render(example, SANDBOX=str(Path(".sandbox").resolve()), PORT="40612")
        else:
            body = TEMPLATE.format(address=address, port=port)
        if target.exists() and not force:
            raise BadInput(f"{path} exists; edit it, or pass --force to overwrite it")
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        tmp.write_text(body, encoding="utf-8")
        tmp.replace(target)
        what = f"the {example} example" if example else "a playbook"
        out.print(text(f"wrote {what} to {path}; edit [hosts] and [daemon], then run `swapctl status HOST`"))
        return 0

    guarded(run)
