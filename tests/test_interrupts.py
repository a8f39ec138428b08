"""Ctrl-C as one state machine: what a first and a second press mean in every phase (swap/interrupts.py),
and the CLI's one handler that only forwards presses and does what the answers say (cli/common.py). The
words are the ones tests/test_deploy.py, test_experiment.py and test_fleet.py read from a real swapctl."""

import ast
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from swapctl.cli.common import HOLD_MAX_S, HOLD_S, CtrlC, _forwarding, ctrl_c, guarded, inside_paramiko
from swapctl.swap.interrupts import AGAIN, ENDED, Act, Answer, Interrupts, Phase

FINISHES = "Ctrl-C: the old daemon is stopped, so the swap finishes; Ctrl-C again rolls back to it"
TRIAL = ("Ctrl-C: the old daemon is stopped, so the swap finishes and B is then rolled back; Ctrl-C again "
         "rolls back at once")

# phase, trial -> (first press, second press). A trial is an experiment's swap of B.
TABLE = {
    (Phase.PLANNING, False): (Answer(Act.ABORT), Answer(Act.ABORT)),
    (Phase.PLANNING, True): (Answer(Act.ABORT), Answer(Act.ABORT)),
    (Phase.STOPPING, False): (Answer(Act.GO_ON, FINISHES), Answer(Act.ROLL_BACK, AGAIN)),
    # the experiment said nothing at the second press; it rolls back to the old daemon as deploy's does
    (Phase.STOPPING, True): (Answer(Act.GO_ON, TRIAL), Answer(Act.ROLL_BACK, AGAIN)),
    (Phase.SWAPPED, False): (Answer(Act.GO_ON, ENDED), Answer(Act.GO_ON, ENDED)),
    (Phase.SWAPPED, True): (Answer(Act.GO_ON), Answer(Act.GO_ON)),  # counted: the window rolls B back
    (Phase.WATCHING, True): (Answer(Act.ABORT), Answer(Act.ABORT)),
    (Phase.FINISHED, False): (Answer(Act.GO_ON, ENDED), Answer(Act.GO_ON, ENDED)),
    (Phase.FINISHED, True): (Answer(Act.GO_ON, ENDED), Answer(Act.GO_ON, ENDED)),
}


@pytest.mark.parametrize(("phase", "trial"), list(TABLE), ids=[f"{p.value}-{'trial' if t else 'swap'}"
                                                                for p, t in TABLE])
def test_a_first_and_a_second_press_in_each_phase(phase, trial):
    i = Interrupts(trial=trial)
    i.enter(phase)
    first, second = TABLE[phase, trial]
    assert i.press() == first and i.pressed and i.count == 1
    assert i.press() == second and i.count == 2
    assert i.second.is_set() is (phase is Phase.STOPPING)  # only then is the host told to roll back at once


def test_every_phase_is_in_the_table():
    assert {p for p, _ in TABLE} | {Phase.FINISHING} == set(Phase)


@pytest.mark.parametrize("phase", [p for p in Phase if p is not Phase.FINISHING])
def test_a_finishing_stretch_says_what_goes_on_and_counts_no_press(phase):
    """An experiment's rollback to the build before B runs a whole swap inside it: that swap's own phases
    must not turn a press into an abort or a second-press rollback of the rollback."""
    i = Interrupts(trial=True)
    i.enter(phase)
    with i.finishing("rolling back to the build before B"):
        assert i.phase is Phase.FINISHING
        for inner in (Phase.PLANNING, Phase.STOPPING):
            i.enter(inner)
            said = Answer(Act.GO_ON, "Ctrl-C: rolling back to the build before B; it finishes")
            assert i.press() == said and i.press() == said
    assert i.count == 0 and not i.second.is_set() and i.phase is Phase.STOPPING


def test_a_press_counted_before_the_stop_aborts_it_and_none_after():
    """A swap on a worker thread (a parallel rollout) is not unwound by the handler: it reads the press at
    the stop (swap_in.swap_in) and between upload chunks (send)."""
    i = Interrupts()
    i.checkpoint()
    i.stop_begins()
    assert i.phase is Phase.STOPPING and i.stopped
    i.press()
    i.checkpoint()  # after the stop a press is counted, never raised
    i.reset()
    assert i.phase is Phase.PLANNING and not i.pressed and not i.stopped and not i.second.is_set()
    i.press()
    with pytest.raises(KeyboardInterrupt):
        i.checkpoint()
    with pytest.raises(KeyboardInterrupt):
        i.stop_begins()
    assert i.phase is Phase.PLANNING


def test_stopped_is_whether_the_host_may_have_changed():
    assert [p for p in Phase if (i := Interrupts()).enter(p) or i.stopped] == \
           [Phase.STOPPING, Phase.SWAPPED, Phase.WATCHING, Phase.FINISHED]


def test_the_handler_aborts_before_the_stop_and_says_the_swaps_words_after(capsys):
    keys = CtrlC()
    with pytest.raises(KeyboardInterrupt):  # no swap: the verb's own, before any change
        keys.forward()
    with keys.attached(Interrupts()) as i:
        with pytest.raises(KeyboardInterrupt):
            keys.forward()
        i.reset()  # the next swap through the same Swap
        i.stop_begins()
        keys.forward()
        keys.forward()
        assert i.second.is_set()
    keys.verb.enter(Phase.FINISHED)
    keys.forward()
    said = capsys.readouterr().err
    assert said.splitlines() == [FINISHES, AGAIN, ENDED]


def test_with_swaps_on_workers_the_handler_counts_tells_the_rollout_and_never_unwinds(capsys):
    keys, halted = CtrlC(), []
    with keys.listening(lambda: halted.append(1), quiet=True), keys.attached(Interrupts()) as a, \
            keys.attached(Interrupts()) as b:
        b.enter(Phase.STOPPING)
        keys.forward()
        keys.forward()
        keys.swaps.clear()
        keys.forward()  # between batches: nothing attached, still nothing raised
        keys.swaps.extend([a, b])
    assert halted == [1, 1, 1] and a.count == 2 and b.second.is_set() and not keys.quiet
    assert capsys.readouterr().err == ""
    with pytest.raises(KeyboardInterrupt):
        keys.forward()


def test_a_verb_runs_under_one_handler_that_forwards_and_the_one_before_comes_back():
    before = signal.getsignal(signal.SIGINT)
    seen = []

    def verb() -> int:
        seen.append((signal.getsignal(signal.SIGINT), ctrl_c()))
        return 0

    with pytest.raises(BaseException):  # noqa: B017 (typer.Exit)
        guarded(verb)
    [(handler, keys)] = seen
    assert handler == keys.forward and signal.getsignal(signal.SIGINT) is before
    assert ctrl_c() is not keys  # outside a verb: a fresh one no handler forwards to


def test_a_verb_run_off_the_main_thread_sets_no_handler():
    codes = []

    def worker() -> None:
        try:
            guarded(lambda: 0)
        except BaseException as done:  # typer.Exit
            codes.append(getattr(done, "exit_code", None))

    t = threading.Thread(target=worker)
    t.start()
    t.join(10)
    assert codes == [0]


def test_swapctl_sets_the_sigint_handler_in_one_place():
    """One handler: a module that sets its own again would have two homes for what a press means. The entry
    point's is no second home: it holds only while the CLI is imported, before any verb or phase exists, and
    says that nothing was done (test_a_ctrl_c_while_swapctl_starts_is_one_line_and_exit_130)."""
    root = Path(__file__).resolve().parents[1] / "swapctl"
    setters = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "signal.signal" and node.args and \
                    "SIGINT" in ast.unparse(node.args[0]):
                setters.append(str(path.relative_to(root)))
    assert set(setters) == {"cli/common.py", "__main__.py"}, setters


STARTING = """
import os, signal, sys
class Press:  # a Ctrl-C while the CLI is being imported, as one landed in the fault campaign (seed 32, run 123)
    def find_spec(self, name, path=None, target=None):
        if name == "swapctl.cli":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Press())
sys.argv = ["swapctl", "status", "lab"]
from swapctl.__main__ import main
main()
"""


def test_a_ctrl_c_while_swapctl_starts_is_one_line_and_exit_130():
    """A press while typer, rich and paramiko are imported (the first fifth of a second) was Python's
    traceback and exit 1 or a death by SIGINT; it is one line, nothing done, exit 130."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", STARTING], capture_output=True, text=True, timeout=60)
    assert r.returncode == 130, (r.returncode, r.stderr[-600:])
    assert r.stderr == "swapctl: interrupted while starting; nothing was done\n"


def test_a_press_inside_paramiko_is_held_and_raised_once_paramiko_has_returned():
    """A KeyboardInterrupt raised inside paramiko can leave a lock of its held (run 219 of the third campaign:
    the controller never ended; tests/test_upload.py drives it on a real sshd). Here the frame the handler
    gets is one of a paramiko module's; the press comes again HOLD_S later, through the real SIGINT handler,
    and is raised in this test's own code, once. A held press whose checkpoint raised it first is spent."""
    keys = CtrlC()
    press_in_paramiko = "keys.forward(signal.SIGINT, sys._getframe())"
    where = {"__name__": "paramiko.transport", "keys": keys, "signal": signal, "sys": sys}
    with _forwarding(keys), keys.attached(Interrupts()):
        exec(press_in_paramiko, where)  # noqa: S102 (a frame whose module is paramiko's)
        assert keys.held
        with pytest.raises(KeyboardInterrupt):
            time.sleep(2)  # the press again: here, outside paramiko
        assert not keys.held
    with _forwarding(keys), keys.attached(Interrupts()) as i:
        exec(press_in_paramiko, where)  # noqa: S102
        with pytest.raises(KeyboardInterrupt):
            i.checkpoint()  # the swap reached its stop first: the press is raised there
        time.sleep(5 * HOLD_S)  # the press again: spent, nothing raised
        assert not keys.held
    assert not inside_paramiko(sys._getframe())


def test_a_press_held_in_a_paramiko_call_that_waits_is_raised_there_after_hold_max_s():
    """A call that stays in paramiko (a handshake with a silent host, a send window that never opens) is
    waiting, not between a lock's acquire and its `try`: the press is raised there HOLD_MAX_S after it came.
    One in a wait of the threading module is raised at once (the wait gives its lock back as it unwinds)."""
    keys = CtrlC()
    stays = "keys.forward(signal.SIGINT, sys._getframe())\nwhile True: time.sleep(0.01)"
    where = {"__name__": "paramiko.transport", "keys": keys, "signal": signal, "sys": sys, "time": time}
    began = time.monotonic()
    with _forwarding(keys), keys.attached(Interrupts()), pytest.raises(KeyboardInterrupt):
        exec(stays, where)  # noqa: S102
    assert HOLD_MAX_S <= time.monotonic() - began < HOLD_MAX_S + 1.5
    waiting = {"__name__": "threading", "sys": sys}
    exec("import sys\ndef inner(): return sys._getframe()", waiting)  # noqa: S102
    where["inner"] = waiting["inner"]
    exec("frame = inner()", where)  # noqa: S102 (threading's frame, called from paramiko's)
    assert not inside_paramiko(where["frame"]) and inside_paramiko(where["frame"].f_back)
