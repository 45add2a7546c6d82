"""One idempotent Kafka producer per broker process, awaited per batch.

librdkafka runs delivery callbacks in whichever thread polls; a daemon thread
polls, counts a batch's acknowledgements, and wakes the waiting request once,
when the last one is in (one wake-up per batch, not per event).
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

from broker import metrics
from changebroker import http, kafka


# Not frozen: a frozen dataclass's __init__ costs ~0.5 us more per event.
@dataclass(slots=True)
class Message:
    topic: str
    partition: int
    key: bytes | None
    value: bytes


class Delivery:
    """A request's messages in flight: one delivery callback for all of them (a callback
    object per message cost ~0.7 us per event), failures kept with what identifies them.
    ``done`` resolves when Kafka has answered for every message."""

    def __init__(self, messages: Sequence[Message], loop: asyncio.AbstractEventLoop) -> None:
        self.messages = messages
        self.pending = len(messages)
        self.done: asyncio.Future[None] = loop.create_future()
        self._refused: dict[int, str] = {}  # produce() refused these at once, by index
        self._failed: list[tuple[int | None, bytes | None, str]] = []  # (partition, value, error)
        self._loop = loop
        self._lock = threading.Lock()

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
        if not self.done.done():
            self.done.set_result(None)

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
        self, bootstrap: str, draining: threading.Event = http.draining, **overrides: Any
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
        self._producer = Producer(kafka.producer_config(bootstrap, **config))
        self._stopping = threading.Event()
        self._draining = draining
        self._poller = threading.Thread(target=self._poll, name="kafka-producer-poll", daemon=True)

    def start(self) -> None:
        """Start delivering acknowledgements (the app's lifespan calls this)."""
        self._poller.start()

    def _poll(self) -> None:
        give_up_at: float | None = None
        while not self._stopping.is_set():
            self._producer.poll(0.05)
            if give_up_at is None:
                if self._draining.is_set():
                    give_up_at = time.monotonic() + DRAIN_DELIVERY_S
            elif time.monotonic() >= give_up_at and len(self._producer):
                self._producer.purge()  # their delivery reports fail the waiting requests

    async def send(self, messages: Sequence[Message]) -> list[str | None]:
        """Write ``messages``; per message ``None`` when acknowledged, else Kafka's error."""
        delivery = await self.submit(messages)
        await delivery.done
        return delivery.errors()

    async def submit(self, messages: Sequence[Message]) -> Delivery:
        """Hand ``messages`` to Kafka; their delivery is awaited apart (``Delivery.done``)."""
        delivery = Delivery(messages, asyncio.get_running_loop())
        if not messages:
            delivery.done.set_result(None)
            return delivery
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
