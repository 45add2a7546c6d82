"""Where the bridge's committed events end, exactly, and which ``/changes`` sequence that is.

The bridge commits each batch of events together with its position record (one Kafka
transaction, bridge/transactions.py). The record carries ``since`` (the sequence it
has read through), ``held`` (tables stopped before a change) and ``offsets``: per topic and
partition, the offset of the last event it ever wrote there. So the newest committed record
is a consistent cut: events up to those offsets are exactly the changes up to ``since``
(up to ``held`` for a held table), except for a table whose existing rows the bridge is still
publishing (``snapshots``: a run not finished). A record without ``offsets`` (an older bridge) says
nothing about where events end; the replay then ends at the last stable offsets and leaves
the sequence unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from changebroker import kafka
from changebroker.bridge.transactions import POSITIONS_TOPIC, load_position
from changebroker.changeserver.sequence import Sequence


@dataclass(frozen=True)
class BridgePosition:
    since: Sequence
    held: dict[str, Sequence]  # table -> everything up to here is published
    offsets: dict[str, dict[int, int]]  # topic -> partition -> last offset written
    # Tables whose existing rows the bridge is still publishing (S events): not complete yet.
    snapshotting: frozenset[str] = frozenset()

    def written(self, topic: str) -> dict[int, int]:
        return self.offsets.get(topic, {})

    def sequence(self, tables: Iterable[str]) -> str:
        """The sequence up to which every one of ``tables`` is published."""
        return str(min([self.since, *(self.held[t] for t in tables if t in self.held)]))


def of(record: Mapping[str, Any] | None) -> BridgePosition | None:
    if record is None or "offsets" not in record:
        return None
    return BridgePosition(
        Sequence.parse(record["since"]),
        {unit: Sequence.parse(seq) for unit, seq in record.get("held", {}).items()},
        {
            topic: {int(p): int(o) for p, o in partitions.items()}
            for topic, partitions in record["offsets"].items()
        },
        frozenset(
            table
            for table, run in record.get("snapshots", {}).items()
            if run.get("finished_at") is None
        ),
    )


def read(bootstrap: str, bridge_name: str) -> BridgePosition | None:
    """The newest committed position of bridge ``bridge_name``; ``None`` without one."""
    topics = kafka.admin(bootstrap).list_topics(timeout=30).topics
    if POSITIONS_TOPIC not in topics:
        return None
    return of(load_position(bootstrap, bridge_name))
