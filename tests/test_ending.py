"""How a swap ended, decided once for the controller and the Ansible modules (swap/ending.py, issue 46 item 1):
the swap script's last words (host/swap/swap.sh's `finish`, each shape below) read through the real parser."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swapctl.swap.ending import Ended, Ending, done_as, ending
from swapctl.swap.words import parse_swap


def report(*said: str):
    return parse_swap([(0.1 * i, line) for i, line in enumerate(said)])


@pytest.mark.parametrize("said, has_fallback, end", [
    (["STARTED 41 0", "READY 41", "OUTCOME deployed 41"], True, Ending.DONE),  # swap.sh:509, a deploy
    (["STARTED 41 0", "READY 41", "OUTCOME rolled-back 41"], True, Ending.DONE),  # :509, a rollback's own target
    (["OUTCOME no-daemon -"], True, Ending.NO_DAEMON),  # :492, memory not back
    (["ROLLBACK it exited before it was ready", "OUTCOME rolled-back 52"], True, Ending.WENT_BACK),  # :422
    (["ROLLBACK not ready after 1 s", "OUTCOME no-daemon -"], False, Ending.NO_FALLBACK),  # :407
    (["ROLLBACK it exited", "OUTCOME rollback-failed 52"], True, Ending.FALLBACK_UNREADY),  # :428, it runs
    (["ROLLBACK it exited", "OUTCOME rollback-failed -"], True, Ending.FALLBACK_FAILED),  # :419, :429
    (["ROLLBACK it exited", "OUTCOME no-daemon -"], True, Ending.FALLBACK_FAILED),  # :409, :414
    (["STARTED 41 0"], True, Ending.NO_OUTCOME),  # cut off before `finish`
    (["OUTCOME deployed; reboot 41"], True, Ending.UNKNOWN),  # a word no swapctl knows: never taken as done
    (["OUTCOME unchanged 41"], True, Ending.UNKNOWN),  # the controller's own word, which the host never says
], ids=["deployed", "rolled-back", "no-daemon", "went-back", "no-fallback", "fallback-unready", "fallback-failed",
        "fallback-not-started", "no-outcome", "forged", "not-the-hosts"])
def test_every_way_a_swap_report_ends(said, has_fallback, end):
    assert ending(report(*said), has_fallback) is end


def test_a_done_swap_is_the_outcome_the_journal_names():
    assert done_as(report("OUTCOME deployed 41")) is Ended.DEPLOYED
    assert done_as(report("OUTCOME rolled-back 41")) is Ended.ROLLED_BACK
    assert Ended.DEPLOYED == "deployed" and f"{Ended.DRY_RUN}" == "dry-run"  # as --json and the journal write them


def test_both_sides_import_the_one_decision():
    """The Ansible modules call the module swapctl ships them, not a copy of the branching (steps.py)."""
    from pathlib import Path

    utils = Path(__file__).parent.parent / "ansible_collections/swapctl/cuzk/plugins/module_utils"
    steps = (utils / "steps.py").read_text()
    assert "swapctl.swap.ending import" in steps and '"rollback-failed"' not in steps and '"no-daemon"' not in steps


def test_gpu_max_one_formula_for_both_sides_on_a_real_h200_status():
    """swap.sh's gpu_max (swap/inputs.gpu_max), which the controller (swaprun.gpu_limits, from `status`) and the
    modules (plan.gpu_limits, from nvidia-smi on the host) both call: what the H200 held, less the daemon's own,
    plus the slack. The status is a real one (tests/data/h200-run/status.json: cuzk held 1542 of 1551 MiB)."""
    import json
    from pathlib import Path

    from swapctl.swap.inputs import gpu_max

    [host] = json.loads((Path(__file__).parent / "data/h200-run/status.json").read_text())["hosts"].values()
    gpus = [(g["index"], g["uuid"], g["memory_used_mib"]) for g in host["gpus"]]
    apps = [(a["pid"], a["gpu_uuid"], a["used_mib"]) for a in host["gpu_processes"]]
    assert gpu_max(gpus, apps, [573], 1024) == "0:1033"  # 1551 - 1542 + 1024
    assert gpu_max(gpus, apps, [999], 1024) == "0:2575"  # another process's memory stays counted
    assert gpu_max([], apps, [573], 1024) == ""  # no GPU: no limit to wait for


def test_a_pid_in_digits_int_refuses_is_no_pid_not_a_traceback():
    """'²'.isdigit() is true and int('²') raises: every reader of a host's numbers asks isdecimal() now."""
    r = report("SWAP ²", "KIDS ² 3", "OUTCOME deployed ²")
    assert (r.script_pid, r.kids, r.outcome_pid) == (None, (3,), None)
    assert ending(r, True) is Ending.DONE and done_as(r) is Ended.DEPLOYED


WORDS = ["SWAP", "KIDS", "STOPPED", "STARTED", "READY", "ROLLBACK", "RETRY", "OUTCOME", "JOURNAL", "TAIL", "LOG",
         "INFLIGHT", "R", "DONE", "ALIVE", "EXITED", "NOTREADY", "MARKED", "CORDON", "UNCORDON", "DRAINED"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(WORDS), st.text(max_size=40)), max_size=12), st.booleans())
def test_no_report_a_host_sends_makes_the_parser_or_the_ending_raise(lines, has_fallback):
    """Anything read from a host ends as a value: each word with any text after it (digits int() refuses,
    control characters, words cut short) parses, and has an ending."""
    r = report(*(f"{word} {rest}" for word, rest in lines))
    assert ending(r, has_fallback) in Ending
