"""Kafka low / high watermarks per partition, asked from one long-lived consumer.

The low watermark is the oldest offset still held, the high one the offset the
next event will get. librdkafka calls block, so they run on one thread of
their own: the event loop never waits on Kafka, and the consumer is only ever
used from that thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
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


def consumer_config(bootstrap: str) -> dict[str, object]:
    """Readers assign partitions themselves: a group id is required, never joined or committed."""
    return kafka.client_config(
        bootstrap,
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
    """One partition's watermarks; a topic created a moment ago may still lack a leader."""
    deadline = time.monotonic() + WATERMARK_TIMEOUT_SECONDS
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=WATERMARK_TIMEOUT_SECONDS, cached=False
            )
            return Watermark(low, high)
        except KafkaException:
            if time.monotonic() >= deadline:
                raise
            time.sleep(RETRY_PAUSE_SECONDS)


def _last_event(consumer: Consumer, topic: str, partition: int, mark: Watermark) -> int:
    """The offset of the newest committed event below ``mark.high``, read from the tail
    (read_committed skips control records and aborted events); ``low - 1`` when none is."""
    window = TAIL_WINDOW
    end = mark.high
    while end > mark.low:
        start = max(mark.low, end - window)
        consumer.assign([TopicPartition(topic, partition, start)])
        newest = None
        try:
            deadline = time.monotonic() + WATERMARK_TIMEOUT_SECONDS
            while time.monotonic() < deadline:
                message = consumer.poll(RETRY_PAUSE_SECONDS)
                # Only this assignment's: what was fetched for an earlier one may still come.
                if message is None or (message.topic(), message.partition()) != (topic, partition):
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    raise KafkaException(error)
                offset = message.offset()
                if offset is None or offset >= end:
                    break
                newest = offset
                if offset == end - 1:
                    break
        finally:
            consumer.unassign()
        if newest is not None:
            return int(newest)
        end, window = start, window * 2
    return mark.low - 1


class _LastEvents:
    """The newest event's offset per partition, read again only when its high watermark
    moved: a partition read every second costs one tail fetch per new transaction."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int], tuple[int, int]] = {}  # -> (high, last event)

    def of(self, consumer: Consumer, topic: str, partition: int, mark: Watermark) -> Watermark:
        if mark.high <= mark.low:
            return mark
        known = self._known.get((topic, partition))
        if known is None or known[0] != mark.high:
            known = self._known[(topic, partition)] = (
                mark.high,
                _last_event(consumer, topic, partition, mark),
            )
        last = known[1]
        return mark if last == mark.high - 1 else Watermark(mark.low, mark.high, last)


def read_watermarks(
    consumer: Consumer,
    topic: str,
    partitions: Iterable[int],
    last_events: _LastEvents | None = None,
) -> dict[int, Watermark]:
    """Blocking: the watermarks of ``partitions`` of ``topic``, straight from the leaders,
    with the newest committed event's offset (``last_events`` remembers them)."""
    known = last_events or _LastEvents()
    return {
        partition: known.of(consumer, topic, partition, _watermark(consumer, topic, partition))
        for partition in partitions
    }


class Watermarks:
    """``await watermarks.of("topic", range(3))`` -> ``{0: Watermark(low, high), ...}``."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="watermarks")
        # Created and used on the executor's one thread only.
        self._consumer: Consumer | None = None
        self._last_events = _LastEvents()

    def _read(self, topic: str, partitions: list[int]) -> dict[int, Watermark]:
        if self._consumer is None:
            settings = consumer_config(self._bootstrap) | {
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
