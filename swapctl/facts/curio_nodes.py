"""The Curio nodes running on a host, and the cuzk each feeds: what `init --from` writes as [curio] nodes.

A node is a `curio run` process (the daemon rule's own: status.sh reads it as it reads the daemon), its
`--listen` (harmony_machines.host_and_port) and its layers: "base", then `--layers` (cmd/curio/run.go:60-64,
stacked atop base: deps/deps.go:206). Which cuzk it feeds is its layers' `[Cuzk] Address`, the last layer that
names one (deps/config/types.go:578), read from harmony_config on the host (host/facts/curio_layers.sh) with
that process's own database settings."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..host import scripts
from ..playbook.spec import NODE, DaemonSpec
from ..remote import Host
from .status import gather

CURIO_RUN = r"(^|[ /])curio[^ /]* run( |$)"  # `curio run ...`, by any path to a program named curio...
LAYER = re.compile(r"[A-Za-z0-9_.-]{1,64}")
ADDRESS = re.compile(r"unix://[A-Za-z0-9_./-]{1,200}|(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")


@dataclass(frozen=True)
class CurioNode:
    listen: str  # checked as [curio] nodes checks a node
    layers: tuple[str, ...]  # "base" first
    address: str | None  # its layers' [Cuzk] Address; None: no layer names one, or not read (`db`)
    db: str  # ok | failed | nosql: whether harmony_config was read


def _flags(words: list[str], *names: str) -> list[str]:
    """Every value of the flags `names` (`--f V`, `--f=V`), in order."""
    out = []
    for i, w in enumerate(words):
        if w in names and i + 1 < len(words):
            out.append(words[i + 1])
        out += [w.split("=", 1)[1] for n in names if w.startswith(n + "=")]
    return out


def running(host: Host, sql: str = "psql") -> list[CurioNode]:
    """Each `curio run` on the host with a --listen, once per address, with the cuzk its layers name."""
    nodes: dict[str, CurioNode] = {}
    for p in gather(host, DaemonSpec(match=CURIO_RUN)).daemons:
        words = p.args.split()
        listens = [a for a in _flags(words, "--listen") if NODE.fullmatch(a) and 0 < int(a.rsplit(":", 1)[1]) < 65536]
        if not listens or listens[0] in nodes:
            continue
        layers = ["base"] + [x for v in _flags(words, "--layers", "--layer", "-l") for x in v.split(",") if x]
        layers = [x for x in dict.fromkeys(layers) if LAYER.fullmatch(x)]
        said = host.run(scripts.command("curio_layers.sh", pid=str(p.pid), layers=",".join(layers), curio_sql=sql),
                        timeout=60, check=False).stdout
        named = {w[1]: w[2] for w in (line.split() for line in said.splitlines())
                 if len(w) == 3 and w[0] == "LAYER" and ADDRESS.fullmatch(w[2])}
        db = next((w[1] for w in (line.split() for line in said.splitlines()) if len(w) == 2 and w[0] == "DB"
                   and w[1] in ("ok", "failed", "nosql")), "failed")
        address = next((named[x] for x in reversed(layers) if x in named), None)
        nodes[listens[0]] = CurioNode(listens[0], tuple(layers), address, db)
    return list(nodes.values())


def feeds(address: str, listen: str, host_addresses: tuple[str, ...]) -> bool:
    """Whether a node on this host whose [Cuzk] Address is `address` reaches the daemon listening on `listen`:
    one unix socket; or the port of a daemon listening everywhere, on loopback or a name of this host (how the
    playbook reaches it); or exactly the host:port the daemon listens on."""
    if address.startswith("unix://") or listen.startswith("unix://"):
        return address == listen
    a_host, _, a_port = address.rpartition(":")
    l_host, _, l_port = listen.rpartition(":")
    if l_host in ("", "0.0.0.0", "[::]", "::"):
        return a_port == l_port and a_host in {"127.0.0.1", "localhost", "[::1]", *host_addresses}
    return a_port == l_port and a_host == l_host
