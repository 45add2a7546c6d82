"""Kafka low / high watermarks per partition, asked from one long-lived consumer.

The low watermark is the oldest offset still held, the high one the offset the
next event will get. librdkafka calls block, so they run on one thread of
their own: the event loop never waits on Kafka, and the consumer is only ever
used from that thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from changebroker import kafka

WATERMARK_TIMEOUT_SECONDS = 10.0
RETRY_PAUSE_SECONDS = 0.1
TAIL_WINDOW = 16  # offsets read back from the high watermark to find the newest event


@dataclass(frozen=True)
class Watermark:
    low: int
    high: int
    # The offset of the newest committed event, when it is not high - 1: a transaction's
    # control record (or an aborted event) took the offsets after it, as on the bridge's
    # transactional topics. None: high - 1 is an event (or the partition is empty).
    last_event: int | None = None

    @property
    def oldest_position(self) -> int:
        """The cursor offset before the oldest available event (what ``begin`` means)."""
        return self.low - 1

    @property
    def newest_position(self) -> int:
        """The cursor offset of the newest event (-1 before the first one)."""
        return self.high - 1 if self.last_event is None else self.last_event


def consumer_config(cluster: kafka.Cluster) -> dict[str, object]:
    """Readers assign partitions themselves: a group id is required, never joined or committed."""
    return cluster.config(
        **{
            "group.id": "changebroker-low-level",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            # Transactional writers (the bridge) commit or abort: readers see committed events
            # only, and watermarks end at the last stable offset.
            "isolation.level": "read_committed",
        },
    )


def _watermark(consumer: Consumer, topic: str, partition: int) -> Watermark:
    """One partition's watermarks; a topic created a moment ago may still lack a leader, and
    one given partitions since the consumer last looked is asked about again."""
    deadline = time.monotonic() + WATERMARK_TIMEOUT_SECONDS
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=WATERMARK_TIMEOUT_SECONDS, cached=False
            )
            return Watermark(low, high)
        except KafkaException as error:
            if time.monotonic() >= deadline:
                raise
            if error.args[0].code() == KafkaError._UNKNOWN_PARTITION:
                consumer.list_topics(topic, timeout=WATERMARK_TIMEOUT_SECONDS)
            time.sleep(RETRY_PAUSE_SECONDS)


def _last_events(consumer: Consumer, topic: str, marks: Mapping[int, Watermark]) -> dict[int, int]:
    """Per partition of ``marks``, the offset of the newest committed event below its high
    watermark, read from the tail (read_committed skips control records and aborted events);
    ``low - 1`` when none is. The partitions' tails are read together, each round a window
    twice the last further back for those that found nothing: one fetch wait per round, not
    one per partition."""
    found = {p: mark.low - 1 for p, mark in marks.items() if mark.high <= mark.low}
    # Per partition still searching, the range [start, end) to read next.
    searching = {
        p: (max(mark.low, mark.high - TAIL_WINDOW), mark.high)
        for p, mark in marks.items()
        if mark.high > mark.low
    }
    window = TAIL_WINDOW
    while searching:
        newest = _newest_read(consumer, topic, searching)
        window *= 2
        further: dict[int, tuple[int, int]] = {}
        for partition, (start, _) in searching.items():
            low = marks[partition].low
            if partition in newest:
                found[partition] = newest[partition]
            elif start <= low:
                found[partition] = low - 1
            else:
                further[partition] = (max(low, start - window), start)
        searching = further
    return found


def _newest_read(
    consumer: Consumer, topic: str, ranges: Mapping[int, tuple[int, int]]
) -> dict[int, int]:
    """Per partition, the newest offset read in its ``[start, end)`` (absent when none is),
    every partition assigned at once."""
    consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in ranges.items()])
    newest: dict[int, int] = {}
    reading = set(ranges)
    try:
        deadline = time.monotonic() + WATERMARK_TIMEOUT_SECONDS
        while reading and time.monotonic() < deadline:
            message = consumer.poll(RETRY_PAUSE_SECONDS)
            if message is None or message.topic() != topic:
                continue
            partition = message.partition()
            # Only this assignment's: what was fetched for an earlier one may still come.
            if partition is None or partition not in reading:
                continue
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                reading.discard(partition)
                continue
            offset = message.offset()
            end = ranges[partition][1]
            if offset is None or offset >= end:
                reading.discard(partition)
                continue
            newest[partition] = offset
            if offset == end - 1:
                reading.discard(partition)
    finally:
        consumer.unassign()
    return newest


class _LastEvents:
    """The newest event's offset per partition, read again only when its high watermark
    moved: a partition read every second costs one tail fetch per new transaction."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int], tuple[int, int]] = {}  # -> (high, last event)

    def of(
        self, consumer: Consumer, topic: str, marks: Mapping[int, Watermark]
    ) -> dict[int, Watermark]:
        """``marks`` with their newest events, the tails read only of partitions that moved."""
        moved = {
            p: mark
            for p, mark in marks.items()
            if self._known.get((topic, p), (None, 0))[0] != mark.high
        }
        for partition, last in _last_events(consumer, topic, moved).items():
            self._known[(topic, partition)] = (moved[partition].high, last)
        out = {}
        for partition, mark in marks.items():
            last = self._known[(topic, partition)][1]
            out[partition] = mark if last == mark.high - 1 else Watermark(mark.low, mark.high, last)
        return out


def read_watermarks(
    consumer: Consumer,
    topic: str,
    partitions: Iterable[int],
    last_events: _LastEvents | None = None,
) -> dict[int, Watermark]:
    """Blocking: the watermarks of ``partitions`` of ``topic``, straight from the leaders,
    with the newest committed event's offset (``last_events`` remembers them)."""
    known = last_events or _LastEvents()
    marks = {partition: _watermark(consumer, topic, partition) for partition in partitions}
    return known.of(consumer, topic, marks)


class Watermarks:
    """``await watermarks.of("topic", range(3))`` -> ``{0: Watermark(low, high), ...}``, of the
    topics of one cluster."""

    def __init__(self, cluster: kafka.Cluster) -> None:
        self._cluster = cluster
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="watermarks")
        # Created and used on the executor's one thread only.
        self._consumer: Consumer | None = None
        self._last_events = _LastEvents()

    def _read(self, topic: str, partitions: list[int]) -> dict[int, Watermark]:
        if self._consumer is None:
            settings = consumer_config(self._cluster) | {
                # The tail read that finds a partition's newest event stops at its end.
                "enable.partition.eof": True,
                # Kafka answers a connection's requests in order: a fetch of the tail read,
                # still waiting out fetch.wait.max.ms (500) after the unassign, held up the next
                # partition's watermark query for half a second.
                "fetch.wait.max.ms": 10,
            }
            self._consumer = Consumer(settings)
        return read_watermarks(self._consumer, topic, partitions, self._last_events)

    async def of(self, topic: str, partitions: Iterable[int]) -> dict[int, Watermark]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._read, topic, list(partitions))

    def _close_consumer(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    async def close(self) -> None:
        """Leave Kafka (the consumer's sockets and librdkafka threads) and end the thread."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_consumer)
        self._executor.shutdown(wait=True)
