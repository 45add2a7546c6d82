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

from confluent_kafka import Consumer, KafkaException, TopicPartition

from changebroker import kafka

WATERMARK_TIMEOUT_SECONDS = 10.0
RETRY_PAUSE_SECONDS = 0.1


@dataclass(frozen=True)
class Watermark:
    low: int
    high: int

    @property
    def oldest_position(self) -> int:
        """The cursor offset before the oldest available event (what ``begin`` means)."""
        return self.low - 1

    @property
    def newest_position(self) -> int:
        """The cursor offset of the newest event (-1 before the first one)."""
        return self.high - 1


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


def read_watermarks(
    consumer: Consumer, topic: str, partitions: Iterable[int]
) -> dict[int, Watermark]:
    """Blocking: the watermarks of ``partitions`` of ``topic``, straight from the leaders."""
    return {partition: _watermark(consumer, topic, partition) for partition in partitions}


class Watermarks:
    """``await watermarks.of("topic", range(3))`` -> ``{0: Watermark(low, high), ...}``."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="watermarks")
        # Created and used on the executor's one thread only.
        self._consumer: Consumer | None = None

    def _read(self, topic: str, partitions: list[int]) -> dict[int, Watermark]:
        if self._consumer is None:
            self._consumer = Consumer(consumer_config(self._bootstrap))
        return read_watermarks(self._consumer, topic, partitions)

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
