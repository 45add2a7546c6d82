"""The bridge's position record: committed with every batch, in the Kafka transaction of its
events (``transactions.py``). ``since``: the sequence read through; per unit what it held,
published and (a table) its newest snapshot run; the tables an operator moved to another
event type. A restart, or a session started over, reads on from it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from changebroker.bridge.snapshots import Run
from changebroker.changeserver.sequence import ZERO, Sequence


@dataclass
class Progress:
    event_type: str = ""
    sequence: str = ""  # last change published
    events: int = 0
    commit_time: int = 0  # of that change, Unix seconds

    def as_json(self) -> dict[str, Any]:
        # Every unit's, several times a batch: a shallow copy (the fields are immutable), not
        # asdict's deep one (0.5 against 6.7 us).
        return dict(vars(self))


@dataclass
class Position:
    """What is committed with every batch (the position record)."""

    since: Sequence = ZERO
    held: dict[str, Sequence] = field(default_factory=dict)
    progress: dict[str, Progress] = field(default_factory=dict)
    # Tables an operator moved to another event type (a change their old one refuses).
    renamed: dict[str, str] = field(default_factory=dict)
    snapshots: dict[str, Run] = field(default_factory=dict)  # table -> its newest run
    # The units whose Progress and Run objects are this position's own, not shared with the
    # position it was copied from (see copy).
    _own: set[str] = field(default_factory=set, init=False, compare=False, repr=False)

    def floor(self, unit: str) -> Sequence:
        return self.held.get(unit, self.since)

    def as_json(self) -> dict[str, Any]:
        return {
            "since": str(self.since),
            "held": {unit: str(seq) for unit, seq in self.held.items()},
            "progress": {unit: p.as_json() for unit, p in self.progress.items()},
            "renamed": dict(self.renamed),
            "snapshots": {table: run.as_json() for table, run in self.snapshots.items()},
        }

    @classmethod
    def of(cls, record: Mapping[str, Any] | None) -> Position:
        if record is None:
            return cls()
        return cls(
            Sequence.parse(record["since"]),
            {unit: Sequence.parse(seq) for unit, seq in record["held"].items()},
            {unit: Progress(**p) for unit, p in record["progress"].items()},
            dict(record.get("renamed", {})),
            {table: Run.of(run) for table, run in record.get("snapshots", {}).items()},
        )

    def copy(self) -> Position:
        """A position to change for the next batch. Its Progress and Run objects are this
        one's until :meth:`own` copies a unit's: a batch copies the units it touches, not
        every unit ever seen (dropped tables too), and this position (committed, or being
        committed) stays as it is."""
        return Position(
            self.since,
            dict(self.held),
            dict(self.progress),
            dict(self.renamed),
            dict(self.snapshots),
        )

    def forget(self, unit: str) -> None:
        """The unit's progress, hold and run gone (a dropped table): a table of the name
        later in the same batch starts from nothing, its Progress made anew by :meth:`own`."""
        for kept in (self.progress, self.held, self.snapshots):
            kept.pop(unit, None)
        self._own.discard(unit)

    def own(self, unit: str) -> Progress:
        """The unit's progress (and run, if it has one) to change: copied on first use."""
        if unit not in self._own:
            self._own.add(unit)
            progress = self.progress.get(unit)
            self.progress[unit] = Progress() if progress is None else dataclasses.replace(progress)
            run = self.snapshots.get(unit)
            if run is not None:
                self.snapshots[unit] = dataclasses.replace(run)
        return self.progress[unit]


def before(seq: Sequence) -> Sequence:
    """The greatest sequence below ``seq``: holding a unit there republishes ``seq`` on."""
    if seq.index > 0:
        return Sequence(seq.lsn, seq.index - 1)
    return Sequence(seq.lsn - 1, 0xFFFFFFFF)
