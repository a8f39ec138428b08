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
HOSTADDR = re.compile(r"[0-9A-Za-z.:-]{1,253}")
ADDRESS = re.compile(r"unix://[A-Za-z0-9_./-]{1,200}|(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")


@dataclass(frozen=True)
class CurioNode:
    listen: str  # checked as [curio] nodes checks a node
    layers: tuple[str, ...]  # "base" first
    address: str | None  # its layers' [Cuzk] Address ("": an empty one, cuzk off); None: none, or not read (`db`)
    db: str  # ok | failed | nosql: whether harmony_config was read
    host_addresses: tuple[str, ...] = ()  # this host's own addresses and name, as the host says them


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
        layers = [x for x in dict.fromkeys(layers) if LAYER.fullmatch(x)]  # "base" alone: its CURIO_LAYERS then
        said = [line.split() for line in host.run(scripts.command(
            "curio_layers.sh", pid=str(p.pid), layers=",".join(layers), curio_sql=sql), timeout=60, check=False
        ).stdout.splitlines()]
        layers = next(([x for x in w[1].split(",") if LAYER.fullmatch(x)] for w in said
                       if len(w) == 2 and w[0] == "LAYERS"), layers)
        named = {w[1]: "" if w[2] == "-" else w[2] for w in said
                 if len(w) == 3 and w[0] == "LAYER" and (w[2] == "-" or ADDRESS.fullmatch(w[2]))}
        db = next((w[1] for w in said if len(w) == 2 and w[0] == "DB" and w[1] in ("ok", "failed", "nosql")), "failed")
        mine = tuple(w[1] for w in said if len(w) == 2 and w[0] == "HOSTADDR" and HOSTADDR.fullmatch(w[1]))
        address = next((named[x] for x in reversed(layers) if x in named), None)
        nodes[listens[0]] = CurioNode(listens[0], tuple(layers), address, db, mine)
    return list(nodes.values())


LOOPBACK = ("127.0.0.1", "localhost", "[::1]", "::1")


def feeds(address: str, listen: str, host_addresses: tuple[str, ...]) -> bool | None:
    """Whether a node on this host whose [Cuzk] Address is `address` reaches the daemon listening on `listen`:
    one unix socket; or the port of a daemon listening everywhere, on loopback or an address or name of this
    host; or the host:port it listens on (loopback spelled any way). None where it cannot be told: the port,
    on a name that is not one of this host's (DNS may make it one)."""
    if address.startswith("unix://") or listen.startswith("unix://"):
        return address == listen
    a_host, _, a_port = address.rpartition(":")
    l_host, _, l_port = listen.rpartition(":")
    if a_port != l_port:
        return False
    local = {*LOOPBACK, *host_addresses, *([] if l_host in ("", "0.0.0.0", "[::]", "::") else [l_host])}
    if l_host not in ("", "0.0.0.0", "[::]", "::"):
        same = a_host == l_host or a_host in LOOPBACK and l_host in LOOPBACK
        return True if same else (None if not _ip(a_host) else False)
    return True if a_host in local else (None if not _ip(a_host) else False)


def _ip(host: str) -> bool:
    """An address literal (IPv4, or IPv6 in brackets), which DNS cannot make this host's."""
    return re.fullmatch(r"[0-9.]+|\[[0-9A-Fa-f:.]+\]", host) is not None
