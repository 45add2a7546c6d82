"""An event type's timelines, and the one position per partition that runs through them.

Each timeline is a topic on a storage (a Kafka cluster). The next one takes over when an
administrator creates it; the one before then ends where each partition's last event was
(``latest``). A cursor names a timeline and a Kafka offset in its topic
(``001-0002-000000000000000005``).

Across timelines the broker counts a partition's events as one sequence, as Nakadi's cursor
distances do: a *position* is timeline t's offset o plus ``base(t)``, the events of the
timelines before t (each one's last offset + 1). So the end of one timeline and the start of
the next, (t, last) and (t + 1, -1), are one position; distances are differences; committed
offsets, lags and comparisons stay plain numbers, as they were with one timeline (base 0), and
a committed offset stored before there were timelines means what it meant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from changebroker import kafka


class PositionError(ValueError):
    """A timeline and offset that name no position of the event type; says why."""


@dataclass(frozen=True)
class Timeline:
    id: str
    event_type: str
    order: int
    storage: str
    cluster: kafka.Cluster
    topic: str
    created_at: datetime
    switched_at: datetime | None
    # Per partition, the offset of its last event, once the next timeline took over.
    latest: tuple[int, ...] | None = None
    cleanup_at: datetime | None = None
    deleted: bool = False

    @property
    def closed(self) -> bool:
        return self.latest is not None

    def last_offset(self, partition: int) -> int:
        """A closed timeline's last event in ``partition`` (-1: none; a partition added after
        it closed has none)."""
        assert self.latest is not None, "an active timeline has no last offset yet"
        return self.latest[partition] if partition < len(self.latest) else -1


@dataclass(frozen=True)
class Timelines:
    """Every timeline of one event type, oldest first (deleted ones too: their events still
    count in the positions after them)."""

    event_type: str
    partitions: int
    all: tuple[Timeline, ...]
    _by_topic: dict[str, Timeline] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_topic", {t.topic: t for t in self.all})

    @property
    def active(self) -> Timeline:
        return self.all[-1]

    @property
    def readable(self) -> list[Timeline]:
        """The timelines whose topics still exist."""
        return [t for t in self.all if not t.deleted]

    def timeline(self, order: int) -> Timeline | None:
        for timeline in self.all:
            if timeline.order == order:
                return timeline
        return None

    def of_topic(self, topic: str) -> Timeline:
        return self._by_topic[topic]

    def base(self, timeline: Timeline, partition: int) -> int:
        """The position before ``timeline``'s first offset in ``partition``, plus one."""
        total = 0
        for earlier in self.all:
            if earlier.order == timeline.order:
                return total
            total += earlier.last_offset(partition) + 1
        raise ValueError(f"timeline {timeline.order} is not one of {self.event_type}'s")

    def end(self, timeline: Timeline, partition: int) -> int | None:
        """The position of a closed timeline's last event in ``partition``; None while active."""
        if not timeline.closed:
            return None
        return self.base(timeline, partition) + timeline.last_offset(partition)

    def position(self, order: int, offset: int, partition: int) -> int:
        """The position of ``offset`` in timeline ``order`` (-1: before its first event)."""
        timeline = self.timeline(order)
        if timeline is None:
            raise PositionError(
                f"timeline {order} does not exist; {self.event_type} has timelines"
                f" {self.all[0].order} to {self.active.order}"
            )
        if timeline.closed and offset > timeline.last_offset(partition):
            raise PositionError(
                f"timeline {order} ended at offset {timeline.last_offset(partition)} of"
                f" partition {partition}"
            )
        return self.base(timeline, partition) + offset

    def at(self, position: int, partition: int) -> tuple[Timeline, int]:
        """The timeline where the event after ``position`` is (or will be) and its Kafka
        offset there: where to read from."""
        for timeline in self.all:
            end = self.end(timeline, partition)
            if end is None or position < end:
                return timeline, position - self.base(timeline, partition) + 1
        raise AssertionError("the active timeline has no end")

    def locate(
        self, position: int, partition: int, *, latest: bool = False
    ) -> tuple[Timeline, int]:
        """The timeline and Kafka offset that name ``position``: in the first timeline whose
        topic still exists and holds it (a cursor at the end of one timeline names its last
        event, as Nakadi writes the newest offset), or, ``latest``, the last one (a cursor at
        the start of a timeline, -1)."""
        candidates = self.readable or list(self.all)
        if latest:
            for timeline in reversed(candidates):
                base = self.base(timeline, partition)
                if position >= base - 1:
                    return timeline, position - base
            return candidates[0], position - self.base(candidates[0], partition)
        for timeline in candidates:
            end = self.end(timeline, partition)
            if end is None or position <= end:
                return timeline, position - self.base(timeline, partition)
        raise AssertionError("the active timeline has no end")

    def holds(self, timeline: Timeline, position: int, partition: int) -> bool:
        """Whether ``timeline`` can name ``position``: between its -1 and its last event."""
        base = self.base(timeline, partition)
        end = self.end(timeline, partition)
        return base - 1 <= position and (end is None or position <= end)


def timelines_of(event_type: str, partitions: int, rows: Sequence[Timeline]) -> Timelines:
    return Timelines(event_type, partitions, tuple(sorted(rows, key=lambda t: t.order)))
