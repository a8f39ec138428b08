"""What a Ctrl-C means, decided in one place: by the phase the swap (or the verb around it) is in.

The CLI's one SIGINT handler forwards each press to `Interrupts.press` and does what the answer says; the
swap moves the phase on as it goes (swap_in.swap_in), checks for a press between steps (`checkpoint`),
and tells the host's swap script to roll back once `second` is set (swaprun)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum


class Phase(Enum):
    PLANNING = "planning"  # nothing on the host changed yet (preflight, lock, upload, backup): a press aborts
    STOPPING = "stopping"  # the host's swap script runs (stop, memory wait, start): it finishes; again: roll back
    SWAPPED = "swapped"  # the host's swap script ended: nothing is left to roll back
    WATCHING = "watching"  # an experiment's window: a press ends it, and B is rolled back
    FINISHING = "finishing"  # what must not be cut short (an experiment's rollback, journal line, report)
    FINISHED = "finished"  # the verb's work is done and a host changed: only its report is left


class Act(Enum):
    ABORT = "abort"  # unwind what runs (KeyboardInterrupt): nothing changed, or the window ends
    GO_ON = "go on"  # what runs finishes; the press is said, and counted where the phase reads it later
    ROLL_BACK = "roll back"  # the host's swap script rolls back at once (`second`)


@dataclass(frozen=True)
class Answer:
    act: Act
    words: str = ""  # what the user is told at the press ("" nothing: the unwinding says it)


ENDED = "Ctrl-C: the swap has ended; swapctl finishes its report"
AGAIN = "Ctrl-C again: rolling back to the old daemon"


class Interrupts:
    """One swap's Ctrl-C: its phase and its presses. `trial`: what the swap puts in is rolled back after a
    press (an experiment's B), which is what its words say."""

    def __init__(self, trial: bool = False) -> None:
        self.trial = trial
        self._phase = Phase.PLANNING
        self._finishing = ""  # what a FINISHING stretch is doing, in words ("" none)
        self.count = 0  # presses since the swap began (reset); read by the experiment after its swap
        self._raised = False  # this phase's press has been raised (checkpoint, or the handler): it is spent
        self.second = threading.Event()  # a second press while stopping: the host's swap rolls back at once

    @property
    def phase(self) -> Phase:
        return Phase.FINISHING if self._finishing else self._phase

    @property
    def pressed(self) -> bool:
        return self.count > 0

    @property
    def stopped(self) -> bool:
        """Whether the old daemon's stop has begun (and was not refused before it): the host may have changed."""
        return self._phase in (Phase.STOPPING, Phase.SWAPPED, Phase.WATCHING, Phase.FINISHED)

    @property
    def aborting(self) -> bool:
        """Whether a press made now would still unwind what runs (a press held back meanwhile may have been
        raised already, or the phase moved on)."""
        return not self._finishing and not self._raised and self._phase in (Phase.PLANNING, Phase.WATCHING)

    def raised(self) -> None:
        """A press has been raised (KeyboardInterrupt) in this phase."""
        self._raised = True

    def enter(self, phase: Phase) -> None:
        self._phase, self._raised = phase, False

    def stop_begins(self) -> None:
        """The swap is about to stop the old daemon: a press counted before it aborts it, nothing changed."""
        self.checkpoint()
        self._phase = Phase.STOPPING

    def checkpoint(self) -> None:
        """Between steps before the stop: a press that was counted, not raised (a swap on a worker thread,
        where the handler cannot unwind it), aborts here."""
        if self.count and self._phase is Phase.PLANNING:
            self._raised = True
            raise KeyboardInterrupt

    @contextmanager
    def finishing(self, what: str) -> Iterator[None]:
        """A stretch a press does not cut short, whatever the swaps inside it do: a press says `what` goes
        on, and is not counted (the rollback inside must not read it as its own)."""
        outer, self._finishing = self._finishing, what
        try:
            yield
        finally:
            self._finishing = outer

    def reset(self) -> None:
        """Before another swap through the same Swap (an experiment's rollback after its deploy)."""
        self._phase, self.count, self._raised = Phase.PLANNING, 0, False
        self.second.clear()

    def press(self) -> Answer:
        """One Ctrl-C: counts it (safe from a signal handler: it sets an event, nothing more) and says what
        it means in this phase."""
        if self._finishing:
            return Answer(Act.GO_ON, f"Ctrl-C: {self._finishing}; it finishes")
        self.count += 1
        phase = self._phase
        if phase is Phase.STOPPING and self.count >= 2:
            self.second.set()
            return Answer(Act.ROLL_BACK, AGAIN)
        if phase is Phase.STOPPING:
            return Answer(Act.GO_ON, "Ctrl-C: the old daemon is stopped, so the swap finishes and B is then rolled "
                                     "back; Ctrl-C again rolls back at once" if self.trial else
                          "Ctrl-C: the old daemon is stopped, so the swap finishes; Ctrl-C again rolls back to it")
        if phase is Phase.SWAPPED:  # a trial reads the count once its swap returns: B is rolled back
            return Answer(Act.GO_ON, "" if self.trial else ENDED)
        if phase is Phase.FINISHED:
            return Answer(Act.GO_ON, ENDED)
        return Answer(Act.ABORT)  # PLANNING, WATCHING
