"""One idempotent Kafka producer per broker process, awaited per batch.

librdkafka runs delivery callbacks in whichever thread polls; a daemon thread
polls, counts a batch's acknowledgements, and wakes the waiting request once,
when the last one is in (one wake-up per batch, not per event), or once more
when Kafka has not answered within ``LATE_AFTER_S``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import Message as KafkaMessage

from changebroker import http, kafka
from changebroker.broker import metrics
from changebroker.broker.consumer_tags import KafkaHeaders


# Not frozen: a frozen dataclass's __init__ costs ~0.5 us more per event.
@dataclass(slots=True)
class Message:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None  # None: a tombstone, which compaction removes the key's events for


class Delivery:
    """A request's messages in flight: one delivery callback for all of them (a callback
    object per message cost ~0.7 us per event), failures kept with what identifies them.

    ``answered_or_late`` returns once Kafka has answered for every message (True) or once
    the producer finds the answer late (False; ``LATE_AFTER_S``); ``answered`` waits for
    the answer in any case."""

    def __init__(
        self,
        messages: Sequence[Message],
        loop: asyncio.AbstractEventLoop,
        in_flight: dict[Delivery, None],
    ) -> None:
        self.messages = messages
        self.pending = len(messages)
        self.started = time.monotonic()
        self._told_late = False  # the polling thread's own flag
        self._answered = False
        self._wake: asyncio.Future[None] = loop.create_future()
        self._refused: dict[int, str] = {}  # produce() refused these at once, by index
        self._failed: list[tuple[int | None, bytes | None, str]] = []  # (partition, value, error)
        self._loop = loop
        self._lock = threading.Lock()
        self._in_flight = in_flight
        if not messages:
            self._answered = True
            self._wake.set_result(None)

    async def answered_or_late(self) -> bool:
        await self._wake
        return self._answered

    async def answered(self) -> None:
        while not self._answered:
            if self._wake.done():
                self._wake = self._loop.create_future()
            await self._wake

    def delivered(self, error: KafkaError | None, message: KafkaMessage) -> None:
        if error is not None:
            metrics.delivery_errors.inc()
            self._failed.append((message.partition(), message.value(), error.str()))
        self._count_down()

    def refused(self, index: int, error: KafkaError) -> None:
        metrics.delivery_errors.inc()
        self._refused[index] = error.str()
        self._count_down()

    def _count_down(self) -> None:
        with self._lock:
            self.pending -= 1
            last = self.pending == 0
        if last:
            self._loop.call_soon_threadsafe(self._finish)

    def _finish(self) -> None:
        self._answered = True
        self._in_flight.pop(self, None)
        self._wake_up()

    def check_late(self, now: float) -> None:
        """From the polling thread: wake the request once when Kafka has not answered within
        ``LATE_AFTER_S``."""
        if self.pending and not self._told_late and now - self.started >= LATE_AFTER_S:
            self._told_late = True
            self._loop.call_soon_threadsafe(self._wake_up)

    def _wake_up(self) -> None:
        _resolve(self._wake)

    @property
    def failed(self) -> bool:
        """Whether Kafka refused or failed any message (``errors`` says which)."""
        return bool(self._refused or self._failed)

    def errors(self) -> list[str | None]:
        """Per message ``None`` when acknowledged, else Kafka's error."""
        out: list[str | None] = [None] * len(self.messages)
        for index, error in self._refused.items():
            out[index] = error
        if self._failed:
            # A report names its message by partition and bytes; of identical messages (the
            # same event twice) which one failed makes no difference to the client.
            unclaimed: dict[tuple[int | None, bytes | None], list[int]] = {}
            for index, message in enumerate(self.messages):
                if index not in self._refused:
                    unclaimed.setdefault((message.partition, message.value), []).append(index)
            for partition, value, error in self._failed:
                out[unclaimed[(partition, value)].pop(0)] = error
        return out


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# A request whose events Kafka has not answered within this is told so, and may ask whether
# their topic still exists (broker/publishing/api.py); the polling thread looks this often.
LATE_AFTER_S = 1.0
LATE_CHECK_EVERY_S = 0.25
STATISTICS_INTERVAL_MS = 5_000
# Once the process drains, what Kafka has not taken within this is failed, so the publishes
# waiting on it are answered (207) within the graceful shutdown's 10 s instead of being cut
# at its end: they would wait up to message.timeout.ms for a Kafka that is down.
DRAIN_DELIVERY_S = 5.0


def _statistics(text: str) -> None:
    """librdkafka's statistics (JSON, on the polling thread): messages awaiting delivery."""
    metrics.producer_queue.set(json.loads(text).get("msg_cnt", 0))


class KafkaProducer:
    def __init__(
        self,
        cluster: kafka.Cluster,
        draining: threading.Event = http.draining,
        **overrides: Any,
    ) -> None:
        # Concurrent requests share Kafka batches: a 2 ms linger gathers what 64 connections
        # publishing single events send meanwhile (measured there: 2-3x the events/s and a
        # quarter of the p50 against linger 0, and less CPU per event; 5 and 10 ms were no
        # better). A request waits at most 30 s for Kafka, then its events are reported
        # failed (207).
        config = {
            "linger.ms": 2,
            "message.timeout.ms": 30_000,
            # librdkafka's statistics every few seconds: the queue depth in /metrics.
            "statistics.interval.ms": STATISTICS_INTERVAL_MS,
            "stats_cb": _statistics,
            **overrides,
        }
        self._producer = Producer(cluster.producer_config(**config))
        self._stopping = threading.Event()
        self._draining = draining
        self._poller = threading.Thread(target=self._poll, name="kafka-producer-poll", daemon=True)
        # Deliveries awaiting Kafka, in a dict (insertion and removal on the event loop, a
        # copy read by the polling thread) rather than a timer per request: asyncio.wait's
        # timeout cost a single-event publish ~3% more CPU.
        self._in_flight: dict[Delivery, None] = {}

    def start(self) -> None:
        """Start delivering acknowledgements (the app's lifespan calls this)."""
        self._poller.start()

    def _poll(self) -> None:
        give_up_at: float | None = None
        check_at = time.monotonic() + LATE_CHECK_EVERY_S
        while not self._stopping.is_set():
            self._producer.poll(0.05)
            now = time.monotonic()
            if now >= check_at:
                check_at = now + LATE_CHECK_EVERY_S
                self._tell_late(now)
            if give_up_at is None:
                if self._draining.is_set():
                    give_up_at = now + DRAIN_DELIVERY_S
            elif now >= give_up_at and len(self._producer):
                self._producer.purge()  # their delivery reports fail the waiting requests

    def _tell_late(self, now: float) -> None:
        for delivery in list(self._in_flight):
            delivery.check_late(now)

    async def learn(self, topic: str) -> None:
        """Ask Kafka about ``topic`` now: partitions added to it (repartitioning) are written
        to at once, not after librdkafka's next metadata refresh (minutes away)."""
        await asyncio.to_thread(self._producer.list_topics, topic, timeout=10)

    async def send(self, messages: Sequence[Message]) -> list[str | None]:
        """Write ``messages``; per message ``None`` when acknowledged, else Kafka's error."""
        delivery = await self.submit(messages)
        await delivery.answered()
        return delivery.errors()

    async def submit(
        self, messages: Sequence[Message], headers: KafkaHeaders | None = None
    ) -> Delivery:
        """Hand ``messages`` to Kafka, each with the record ``headers`` given; their answer
        is awaited apart (``Delivery``)."""
        delivery = Delivery(messages, asyncio.get_running_loop(), self._in_flight)
        if not messages:
            return delivery
        self._in_flight[delivery] = None
        produce, delivered = self._producer.produce, delivery.delivered
        for index, message in enumerate(messages):
            while True:
                try:
                    produce(
                        message.topic,
                        message.value,
                        message.key,
                        partition=message.partition,
                        on_delivery=delivered,
                        headers=headers,
                    )
                    break
                except KafkaException as exc:
                    delivery.refused(index, exc.args[0])
                    break
                except BufferError:
                    # The local queue is full: let deliveries drain it, then retry.
                    await asyncio.sleep(0.005)
        return delivery

    def close(self, timeout: float = 2.0) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), then stop polling and release
        the client: left to the garbage collector, it kept reconnecting to a Kafka gone.
        The app closes it after its requests ended: what is still queued then was answered
        already (failed, while draining) or its request was cut, so waiting longer for a Kafka
        that does not take it only delays the exit."""
        self._producer.flush(timeout)
        self._producer.purge()  # what Kafka did not take in time fails its requests (207)
        self._producer.flush(1)  # serves the purged messages' reports
        self._stopping.set()
        self._poller.join(timeout=5)
        self._producer.close()
