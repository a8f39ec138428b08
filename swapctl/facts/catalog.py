"""What a host keeps: its releases, the one the binary path points at, and its journal. The inspect script
reads them without a daemon for `history`, `timings --by-release` and `fetch-logs --since-deploy`; the
swap's preflight reads them with the daemon (swap/plan.py's Situation)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from ..host import scripts
from ..playbook.spec import DaemonSpec
from ..remote import Host
from . import journal_entry
from .journal_entry import JOURNAL, JournalEntry, Start
from .releases import RELEASE_ID, Release, parse_releases, rollback_target
from .sections import split_sections


@dataclass(frozen=True)
class Catalog:
    """What the host keeps: its releases, the one the binary path points at, its journal (oldest first, and
    how many of its lines were no entry: skipped)."""

    releases: dict[str, Release]
    current: str | None
    journal: tuple[JournalEntry, ...]
    skipped: int = 0
    where: str = JOURNAL  # HOST:PATH of the journal, for what is said about it

    def rollback_target(self) -> Release | None:
        """Where `rollback` goes from the current release (releases.rollback_target)."""
        return rollback_target(self.releases, self.current, self.journal, list(self.deployed))

    @property
    def deployed(self) -> tuple[str, ...]:
        """Release ids that deploys put in place, oldest first."""
        return journal_entry.deployed(self.journal)

    def started(self) -> Start | None:
        """Where the current release last started in the daemon's log (None: the journal has no such start)."""
        return journal_entry.started(self.journal, self.current)

    def notes(self) -> tuple[str, ...]:
        """What to tell the user about the journal: the lines it skipped."""
        return (journal_entry.skipped_note(self.where, self.skipped),) if self.skipped else ()


def of_sections(facts: dict[str, str], where: str = JOURNAL) -> Catalog:
    """The host's releases, current release and journal (at `where`, HOST:PATH), from the inspect script's
    sections."""
    kind, _, target = facts.get("binary", "missing").partition(" ")
    journal, skipped = journal_entry.read(facts.get("journal", ""))  # a line cut short, or none of swapctl's
    current = PurePosixPath(target).parent.name if kind == "link" else None
    return Catalog(parse_releases(facts.get("releases", "")),
                   current if current and RELEASE_ID.fullmatch(current) else None, journal, skipped, where)


def catalog(host: Host, spec: DaemonSpec) -> Catalog:
    """The host's releases, current release and journal, read by one inspect script (no daemon asked)."""
    cmd = scripts.command("inspect.sh", pid="", bin=spec.binary, state=spec.state_dir, user=spec.user or "")
    return of_sections(split_sections(host.run(cmd).stdout), f"{host.name}:{spec.state_dir}/{JOURNAL}")
