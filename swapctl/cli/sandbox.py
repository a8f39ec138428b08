"""`swapctl sandbox up|down`: a local target to try swapctl on, with no GPU box needed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import sandbox as sb
from ..sandbox_sudo import SUDO_USER
from .common import guarded, out, text

app = typer.Typer(help="A local sandbox host: a real sshd on loopback running the stand-in prover.",
                  rich_markup_mode=None,
                  no_args_is_help=True)
DirOpt = Annotated[Path, typer.Option("--dir", help="Where the sandbox lives.")]


@app.command()
def up(dir: DirOpt = Path(".sandbox"), port: Annotated[int, typer.Option(help="sshd's port.")] = 40612,
       fresh: Annotated[bool, typer.Option("--fresh", help=(
           "Forget the sandbox's releases and journal, and write its playbook again (an edited one is saved "
           "beside it first)."))] = False,
       hosts: Annotated[int, typer.Option("--hosts", help=(
           "How many sandbox hosts (1 to 8): more than one is a farm in the group `farm`, sshd on PORT, "
           "PORT+1, ..., each host in namespaces of its own (needs root)."))] = 1,
       curio: Annotated[bool, typer.Option("--curio", help=(
           "Feed the daemon as Curio does: a PostgreSQL with Curio's tables, a Curio node stand-in proving on "
           "the daemon's PORT+2 and a feeder that keeps tasks waiting; the playbook swaps with stop = "
           "\"cordon\" (needs Debian's postgresql)."))] = False,
       sudo: Annotated[bool, typer.Option("--sudo", help=(
           f"Log in as {SUDO_USER}, not root, every command through `sudo -n` (become = \"sudo\"): makes that "
           "user (no password, no home) and its sudoers rule on this machine; `sandbox down` removes them. "
           "Needs root."))] = False,
       systemd: Annotated[bool, typer.Option("--systemd", help=(
           "Its daemon a systemd unit, as on most production boxes: boots a systemd-nspawn container with "
           "systemd as PID 1 (its sshd at 10.254.254.2:22, the data directory at /data, the prover as "
           "cuzk.service); the image is made once (debootstrap, about 45 s). Needs root, systemd-nspawn and "
           "debootstrap."))] = False,
       ) -> None:
    """Start the sandbox: sshd on 127.0.0.1:PORT, a prover started by hand that proves steadily, a playbook."""

    def run() -> int:
        kept = not fresh and sb.has_history(dir)
        done = sb.up(dir, port, fresh=fresh, hosts=hosts, curio=curio, sudo=sudo, systemd=systemd)
        if systemd:
            out.print(text(f"sandbox up: host `sandbox` at 10.254.254.2:22, a systemd container whose daemon is "
                           f"cuzk.service, playbook {done.playbook}"), soft_wrap=True)
        elif hosts == 1:
            out.print(text(f"sandbox up: host `sandbox` at 127.0.0.1:{port}, playbook {done.playbook}"),
                      soft_wrap=True)
        else:
            out.print(text(f"sandbox up: {hosts} hosts in group `farm` (sandbox, sandbox-2, ...) at 127.0.0.1:"
                           f"{port}-{port + hosts - 1}, playbook {done.playbook}"), soft_wrap=True)
        if done.note:
            out.print(text(done.note), soft_wrap=True)  # paths whole, for a copy and paste
        if done.shared:
            out.print(text(done.shared), soft_wrap=True)
        if sudo:
            out.print(text(f"its hosts log in as {SUDO_USER}, through sudo (/etc/sudoers.d/swapctl-sandbox; "
                           f"`sandbox down` removes the user and the rule)"), soft_wrap=True)
        if kept:
            out.print(text("kept its releases and journal from before (`history sandbox`; `--fresh` forgets them)"))
        if curio:
            out.print(text(f"its daemon proves what a Curio node stand-in (127.0.0.1:{port + 3}) sends it, never idle; "
                           f"its status on 127.0.0.1:{sb.status_port(port)}; the playbook swaps with stop = "
                           f"\"cordon\" (docs/curio.md)"), soft_wrap=True)
        else:
            out.print(text(f"its daemon proves steadily (a proof about every 3 s), its status on 127.0.0.1:"
                           f"{sb.status_port(port, hosts)}{' in each host' if hosts > 1 else ''}"), soft_wrap=True)
        out.print(text(f"builds to deploy: {dir.resolve() / 'builds'}/prover-b"))
        return 0

    guarded(run)


@app.command()
def down(dir: DirOpt = Path(".sandbox")) -> None:
    """Stop the sandbox's sshd and daemons."""

    def run() -> int:
        sb.down(dir)
        out.print("sandbox down")
        return 0

    guarded(run)
