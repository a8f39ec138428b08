"""The fleet rollout's decisions (swapctl.fleet), with stand-in hosts: which start, which are skipped, why."""

import threading
import time

import pytest

from swapctl.errors import Refused, RolledBack
from swapctl.fleet import SKIPPED, Canary, CanaryGate, Fleet, roll_out
from swapctl.playbook import HostSpec, Playbook
from swapctl.swap.deploy import Outcome

HOSTS = [HostSpec(name=f"gpu-{i}", address="127.0.0.1") for i in range(5)]


def host(fails: set[str] = frozenset(), seconds: float = 0.0):
    """A stand-in for one host's swap: fails (rolled back) on the named hosts; records who ran."""
    ran: list[str] = []

    def one(spec: HostSpec):
        ran.append(spec.name)
        time.sleep(seconds)
        if spec.name in fails:
            return RolledBack("it crashed", host=spec.name)
        return Outcome(host=spec.name, action="deploy", outcome="deployed", old_sha="a" * 64, new_sha="b" * 64)

    return one, ran


def gate(confirm=lambda canaries: True, check=None, waited=None) -> CanaryGate:
    def up(book, name, outcome):
        return Canary(name, 4242, 0.5, 3, {"synth_ms": 260.0}, None)

    return CanaryGate(Playbook(path="t.toml"), wait_s=2.5 if waited is not None else None, confirm=confirm,
                      waiting=(waited.append if waited is not None else lambda s: None), check=check or up)


def words(results):
    return ["skipped" if r == SKIPPED else "failed" if isinstance(r, Exception) else r.outcome
            for r in results.values()]


@pytest.mark.parametrize("fleet, fails, outcome, why", [
    (Fleet(), set(), ["deployed"] * 5, ""),
    (Fleet(max_fail="1"), {"gpu-0", "gpu-1"}, ["failed", "failed", "skipped", "skipped", "skipped"],
     "2 hosts failed, more than --max-fail 1"),
    (Fleet(max_fail="0"), {"gpu-2"}, ["deployed", "deployed", "failed", "skipped", "skipped"],
     "1 hosts failed, more than --max-fail 0"),
    (Fleet(), {"gpu-1", "gpu-3"}, ["deployed", "failed", "deployed", "failed", "deployed"], ""),  # no budget
    (Fleet(canary=1), {"gpu-0"}, ["failed", "skipped", "skipped", "skipped", "skipped"], "the canary failed"),
    (Fleet(canary=2, max_fail="0"), {"gpu-3"}, ["deployed", "deployed", "deployed", "failed", "skipped"],
     "1 hosts failed, more than --max-fail 0"),
])
def test_which_hosts_start(fleet, fails, outcome, why):
    one, ran = host(fails)
    results, stopped = roll_out(HOSTS, one, fleet, gate())
    assert (words(results), stopped) == (outcome, why)
    assert ran == [n for n, w in zip(results, words(results), strict=True) if w != "skipped"]


def test_canaries_shown_and_not_confirmed_stop_the_rollout():
    one, ran = host()
    seen = []
    results, why = roll_out(HOSTS, one, Fleet(canary=2), gate(confirm=lambda c: seen.extend(c) and False))
    assert why == "stopped after the canary" and ran == ["gpu-0", "gpu-1"]
    assert [c.host for c in seen] == ["gpu-0", "gpu-1"] and words(results)[2:] == ["skipped"] * 3


def test_a_canary_that_went_down_stops_the_rollout():
    one, ran = host()
    results, why = roll_out(HOSTS, one, Fleet(canary=1), gate(check=lambda b, n, o: f"canary {n} went down"))
    assert why == "canary gpu-0 went down" and ran == ["gpu-0"]


def test_canary_wait_goes_through_the_injected_clock():
    one, _ = host()
    waited: list[float] = []
    results, why = roll_out(HOSTS, one, Fleet(canary=1, canary_wait=2.5), gate(waited=waited))
    assert waited == [2.5] and why == "" and words(results) == ["deployed"] * 5


def test_a_dry_run_has_no_canary_phase():
    one, _ = host()
    results, why = roll_out(HOSTS, one, Fleet(canary=1), gate(confirm=lambda c: False), dry_run=True)
    assert why == "" and words(results) == ["deployed"] * 5


def test_once_halted_no_further_host_starts():
    one, ran = host()
    halt = [""]

    def stop_after_first(spec):
        result = one(spec)
        halt[0] = "interrupted (Ctrl-C)"
        return result

    results, why = roll_out(HOSTS, stop_after_first, Fleet(canary=1), gate(), halted=lambda: halt[0])
    assert why == "interrupted (Ctrl-C)" and ran == ["gpu-0"]


def test_parallel_runs_at_most_n_at_once_and_every_host_once():
    lock, now, most = threading.Lock(), [0], [0]
    one, ran = host(seconds=0.05)

    def counted(spec):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            return one(spec)
        finally:
            with lock:
                now[0] -= 1

    results, why = roll_out(HOSTS, counted, Fleet(parallel=3), gate())
    assert why == "" and sorted(ran) == [h.name for h in HOSTS] and 1 < most[0] <= 3


def test_an_unreachable_host_counts_as_failed():
    def one(spec):
        if spec.name == "gpu-1":
            return Refused("cannot connect to root@127.0.0.1:1", host=spec.name)
        return host()[0](spec)

    results, why = roll_out(HOSTS, one, Fleet(max_fail="0"), gate())
    assert why == "1 hosts failed, more than --max-fail 0" and words(results)[:3] == ["deployed", "failed", "skipped"]


def test_each_stop_says_its_halt_beside_its_words():
    """issue 46, item 2: a caller branches on why a rollout stopped (fleet.Halt), not on its words."""
    from swapctl.fleet import Halt, halt_of

    one, _ = host({"gpu-0"})
    assert halt_of(roll_out(HOSTS, one, Fleet(canary=1), gate())[1]) is Halt.CANARY_FAILED
    assert halt_of(roll_out(HOSTS, one, Fleet(max_fail="0"), gate())[1]) is Halt.MAX_FAIL
    one, _ = host()
    assert halt_of(roll_out(HOSTS, one, Fleet(canary=1), gate(check=lambda b, n, o: f"canary {n} went down"))[1]) \
        is Halt.CANARY_DOWN
    assert halt_of(roll_out(HOSTS, one, Fleet(canary=1), gate(confirm=lambda c: False))[1]) is Halt.NOT_CONFIRMED
    _, why = roll_out(HOSTS, one, Fleet(), gate())
    assert why == "" and halt_of(why) is None
