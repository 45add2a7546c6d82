"""The Kafka side of a stream through timelines: which topic, on which cluster, each of its
partitions is read from, and the move to the next timeline at the end of one.

A partition at a position (:mod:`changebroker.broker.timelines.model`) is read in the timeline that
holds the event after it. While that timeline is closed, its end is known: once the stream has
taken the event at the end, the partition moves on to the next timeline's topic, from its
first offset, on that timeline's cluster. While it is active, the stream learns of a switch
when the event type's timelines are read again (a new revision), and moves on when it reaches
the end then recorded. Every event is read once, in order: the end is where writers stopped.

:class:`Consumers` are blocking and run on the stream's own thread; :class:`Readings` is the
bookkeeping, on the event loop.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, Message, TopicPartition

from changebroker import kafka
from changebroker.broker.streams.watermarks import consumer_config
from changebroker.broker.timelines.model import Timeline, Timelines

PartitionKey = tuple[str, int]  # (event type, partition)
Assignment = tuple[kafka.Cluster, TopicPartition]


class Consumers:
    """A stream's Kafka consumers, one per cluster it reads from (two only while partitions
    straddle a move between storages); on the stream's thread only."""

    def __init__(self, settings: Mapping[str, object]) -> None:
        self._settings = dict(settings)
        self._consumers: dict[kafka.Cluster, Consumer] = {}
        self._assigned: Counter[kafka.Cluster] = Counter()

    def change(self, add: list[Assignment], remove: list[Assignment]) -> None:
        for cluster, partition in remove:
            consumer = self._consumers.get(cluster)
            if consumer is None:
                continue
            consumer.incremental_unassign([partition])
            self._assigned[cluster] -= 1
            if self._assigned[cluster] <= 0:
                del self._assigned[cluster]
                self._consumers.pop(cluster).close()
        for cluster, partition in add:
            consumer = self._consumers.get(cluster)
            if consumer is None:
                consumer = Consumer(consumer_config(cluster) | self._settings)
                self._consumers[cluster] = consumer
            consumer.incremental_assign([partition])
            self._assigned[cluster] += 1

    def poll(self, timeout: float, most: int) -> list[Message]:
        """Waits up to ``timeout`` for the first message, then takes what is already fetched."""
        consumers = list(self._consumers.values())
        if not consumers:
            time.sleep(timeout)
            return []
        if len(consumers) == 1:
            return poll(consumers[0], timeout, most)
        out: list[Message] = []
        for consumer in consumers:
            out += poll(consumer, 0, most - len(out))
        if out:
            return out
        for consumer in consumers:
            got = poll(consumer, timeout / len(consumers), most)
            if got:
                return got
        return []

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
        self._assigned.clear()


def poll(consumer: Consumer, timeout: float, most: int) -> list[Message]:
    """Wait for the first message only, then take whatever else is already fetched.

    ``consume(n, timeout)`` alone would hold a few messages back until ``n``
    arrive or the timeout passes, delaying quiet streams by the whole timeout.
    """
    if most <= 0:
        return []
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, 0)] if most > 1 else [first]


@dataclass
class Reading:
    """Where one partition is read: its timeline, the position before that timeline's first
    offset plus one (``base``), and the position of its last event once it is closed."""

    timelines: Timelines
    timeline: Timeline
    base: int
    end: int | None

    def assignment(self, partition: int, kafka_offset: int | None = None) -> Assignment:
        topic_partition = (
            TopicPartition(self.timeline.topic, partition)
            if kafka_offset is None
            else TopicPartition(self.timeline.topic, partition, kafka_offset)
        )
        return self.timeline.cluster, topic_partition


class GoneTimeline(Exception):
    """A partition's next events are in a timeline whose topic was deleted (its retention
    passed): the stream cannot go on from there."""


def reading(timelines: Timelines, partition: int, position: int) -> tuple[Reading, int]:
    """Where to read ``partition`` after ``position``, and the Kafka offset to start at."""
    timeline, kafka_offset = timelines.at(position, partition)
    if timeline.deleted:
        raise GoneTimeline(
            f"the events of partition {partition} of {timelines.event_type} after this cursor"
            f" were in timeline {timeline.order}, which retention removed; reset the cursors"
        )
    base = timelines.base(timeline, partition)
    return Reading(timelines, timeline, base, timelines.end(timeline, partition)), kafka_offset


class Readings:
    """Where each partition of a stream is read, by (event type, partition)."""

    def __init__(self) -> None:
        self.by_key: dict[PartitionKey, Reading] = {}

    def start(self, key: PartitionKey, timelines: Timelines, position: int) -> Assignment:
        """Read ``key`` after ``position``; what to assign."""
        found, kafka_offset = reading(timelines, key[1], position)
        self.by_key[key] = found
        return found.assignment(key[1], kafka_offset)

    def stop(self, key: PartitionKey) -> Assignment | None:
        found = self.by_key.pop(key, None)
        return None if found is None else found.assignment(key[1])

    def topic_key(self, key: PartitionKey) -> tuple[str, int]:
        """The (topic, partition) Kafka names ``key``'s messages by."""
        return self.by_key[key].timeline.topic, key[1]

    def follow(self, timelines: Timelines) -> None:
        """The event type's timelines as just read: a partition read in a timeline that has
        closed since learns where it ends."""
        for (event_type, partition), found in self.by_key.items():
            if event_type != timelines.event_type:
                continue
            timeline = timelines.timeline(found.timeline.order)
            if timeline is None or timeline.topic != found.timeline.topic:
                continue  # the event type was created anew: its old topic ends the stream
            found.timelines = timelines
            found.timeline = timeline
            found.end = timelines.end(timeline, partition)

    def closing(self) -> bool:
        """Whether any partition is read in a closed timeline (and may have to move on)."""
        return any(found.end is not None for found in self.by_key.values())

    def ended(self, positions: Mapping[PartitionKey, int]) -> list[PartitionKey]:
        """The partitions whose ``positions`` reached the end of the timeline they are read in."""
        return [
            key
            for key, found in self.by_key.items()
            if found.end is not None and key in positions and positions[key] >= found.end
        ]

    def move_on(self, key: PartitionKey, position: int) -> tuple[Assignment, Assignment]:
        """``key`` reached its timeline's end at ``position``: (what to unassign, to assign)."""
        old = self.by_key[key]
        gone = old.assignment(key[1])
        added = self.start(key, old.timelines, position)
        return gone, added
