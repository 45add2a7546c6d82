"""Units of progress: each table is a unit, and each event type of the outbox is one.

A unit whose change cannot be published (its schema change refused, an event the event type
rejects, an outbox event type that does not exist) stops: its later changes are skipped
while the others go on, and its position is held just before the change that stopped it
(in the position record, so nothing is lost). An operator resumes it (``POST
/units/{unit}/resume``), into a new event type if need be; a restart retries it too.
"""

from __future__ import annotations

import logging

from changebroker import kafka, logs
from changebroker.bridge.position import Position, before
from changebroker.broker.publishing.pipeline import Target
from changebroker.changeserver.sequence import Sequence

log = logging.getLogger(__name__)


class UnitStopped(Exception):
    """This change cannot be published; its unit stops here."""


class TableGone(Exception):
    """The table is dropped (or renamed) and never had an event type: nothing says what its
    key was, and its DROP, ahead in the stream, ends whatever it had."""


class TableRefused(Exception):
    """The bridge cannot publish this table (no key): none of its changes are published."""


class Units:
    """Which units are stopped, refused or gone, and what operators asked for them."""

    def __init__(self) -> None:
        self.stopped: dict[str, str] = {}  # unit -> why; in memory: a restart retries
        self.refused: dict[str, str] = {}  # table -> why it is not published
        self.gone: set[str] = set()  # dropped before any change was published (TableGone)
        self.renames: dict[str, str] = {}  # asked for, not committed yet
        self._resumes: dict[str, str | None] = {}  # unit -> its new event type; asked for

    def clear(self) -> None:
        """A session starts: stops not committed with a held position (the failed batch's)
        must not skip anything now; the committed ones are retried, as after any restart."""
        self.stopped.clear()
        self.refused.clear()
        self.gone.clear()

    def stop(self, unit: str, reason: str, seq: Sequence, position: Position) -> None:
        self.stopped[unit] = reason
        position.held[unit] = before(seq)
        log.error(
            "unit stopped: its changes wait until an operator acts",
            extra=logs.fields(unit=unit, sequence=str(seq), reason=reason),
        )

    def resume(self, unit: str, event_type: str | None = None) -> bool:
        """An operator acted on what stopped ``unit``: its held changes are tried again (once
        :meth:`apply_resumes` runs), into ``event_type`` when given."""
        if unit not in self.stopped:
            return False
        self._resumes[unit] = event_type
        log.info("unit resumed", extra=logs.fields(unit=unit, event_type=event_type or ""))
        return True

    def apply_resumes(self) -> list[str]:
        """The units resumed since the last call, no longer stopped."""
        resumed = list(self._resumes)
        for unit, event_type in self._resumes.items():
            self.stopped.pop(unit, None)
            if event_type:
                self.renames[unit] = event_type
        self._resumes.clear()
        return resumed

    def committed(self, position: Position) -> None:
        """``position`` is in Kafka: the renames it carries are no longer only asked for."""
        for unit, name in position.renamed.items():
            if self.renames.get(unit) == name:
                del self.renames[unit]

    def end(self, table: str) -> None:
        """A dropped table is no unit any more."""
        self.stopped.pop(table, None)
        self.refused.pop(table, None)


def check_writable(target: Target, cluster: kafka.Cluster) -> None:
    """Refuse an event type whose active timeline is on another Kafka cluster than
    ``cluster``, the bridge's."""
    if target.cluster != cluster:
        raise UnitStopped(
            f"event type {target.name} is on another Kafka cluster"
            f" ({target.cluster.bootstrap}); the bridge commits events and its position in"
            f" one transaction of its own ({cluster.bootstrap}): create a timeline of"
            " it on the bridge's cluster, then resume the unit"
        )
