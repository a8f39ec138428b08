"""[curio], checked: the nodes that feed the daemon, and what `stop = "cordon"` needs of them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import spec as sp
from .schema import Loader
from .spec import node_ok


def check_nodes(ld: Loader, nodes: Iterable[str], table: str, key: str) -> tuple[str, ...]:
    """[curio] nodes, or a host's curio_nodes: each a node's `curio run --listen` host:port."""
    for node in nodes:
        if not node_ok(node):
            raise ld.fail(f"{node!r} is not a node's host:port (its `curio run --listen`, e.g. \"10.0.0.5:12300\")",
                          table, key)
    return tuple(nodes)


def curio(ld: Loader, doc: dict[str, Any], daemon: sp.DaemonSpec, hosts: dict[str, sp.HostSpec]) -> sp.CurioSpec:
    """[curio], checked against the daemon's stop mode: "cordon" needs nodes, [curio]'s or every host's own."""
    c = ld.section(ld.table(doc, "curio"), "curio", "curio")
    bare = [name for name, h in hosts.items() if not h.curio_nodes]
    if daemon.stop == "cordon" and not c.get("nodes") and (bare or not hosts):
        whose = f" (host {bare[0]!r} names no curio_nodes)" if bare and len(bare) < len(hosts) else ""
        raise ld.fail('"cordon" cordons the Curio nodes that feed the daemon: name them under [curio], '
                      'nodes = ["HOST:PORT"] (each node\'s `curio run --listen`), or each host\'s own under '
                      f'[hosts.NAME], curio_nodes = ["HOST:PORT"]{whose}', "daemon", "stop")
    c["nodes"] = tuple(c.get("nodes", ()))
    c["tasks"] = tuple(c.get("tasks", sp.CUZK_TASKS))
    c["env"] = tuple(c.get("env", {}).items())
    spec = sp.CurioSpec(**c)
    problem = sp.curio_problem(spec, nodes=bool(spec.nodes) or len(bare) < len(hosts))
    if problem:
        raise ld.fail(problem[1], "curio", problem[0])
    return spec


def shared_nodes(book: sp.Playbook, hosts: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each node that two or more of `hosts` would cordon (book.curio_of), with those hosts in their order."""
    by_node: dict[str, list[str]] = {}
    for name in hosts:
        for node in book.curio_of(name).nodes:
            by_node.setdefault(node, []).append(name)
    return {node: tuple(names) for node, names in by_node.items() if len(names) > 1}


def shared_said(book: sp.Playbook, shared: dict[str, tuple[str, ...]]) -> str:
    """Why hosts that share a node cannot swap at once with stop = "cordon", and what to do."""
    node, names = next(iter(shared.items()))
    both = " and ".join(repr(n) for n in names[:2]) + (f" (and {len(names) - 2} more)" if len(names) > 2 else "")
    whose = "their curio_nodes" if all(book.hosts.get(n) and book.hosts[n].curio_nodes for n in names[:2]) \
        else "[curio] nodes"
    return (f'stop = "cordon" with hosts swapped at once: hosts {both} would both cordon node {node} ({whose}), '
            f"and the first swap to end would uncordon it under the other; name each host's own nodes "
            f'(curio_nodes = ["HOST:PORT"] under [hosts.NAME]), or roll out one host at a time (parallel = 1)')
