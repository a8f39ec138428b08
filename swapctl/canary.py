"""A canary's check before the rollout goes on: it still runs the new build, and its first partitions'
timings from its log. The rollout (swapctl.fleet) takes it as its gate's `check`, and so needs no log parser."""

from __future__ import annotations

import io

from . import playbook as pb
from .fleet import Canary
from .logs.timings import parse
from .remote import connect
from .swap.deploy import Outcome, Swap


def check_canary(book: pb.Playbook, name: str, outcome: Outcome) -> Canary | str:
    """Whether the canary still runs the new build, and its first partitions' timings; or why it went down."""
    with connect(book.hosts.get(name) or pb.resolve_host(book, name)) as host:
        sw = Swap(host, book)
        daemon = sw.situation().daemon
        if not daemon or daemon.sha256 != outcome.new_sha:
            return f"canary {name} went down: it no longer runs {(outcome.new_sha or '')[:12]}"
        report = parse([io.BytesIO(sw.log_tail(outcome.log_offset or 0, 5000).encode())]).figures()
    p50 = {k: v.p50 for k, v in report.phases.items() if v.p50}
    return Canary(name, daemon.pid, outcome.steps.get("ready", 0), report.partitions,
                  {k: p50[k] for k in ("synth_ms", "ntt_kernels", "gpu_total_ms") if k in p50},
                  report.gpu_phase_share)
