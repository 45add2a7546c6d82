"""SIGTERM drains the broker, one process or several workers alike: publishes under way are
answered, open streams end whole (their last batch sent, the response finished), and the
process is gone within a bound."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from changebroker import kafka
from changebroker.broker.publishing.producer import KafkaProducer, Message
from changebroker.stack.processes import free_port, wait_until
from changebroker.stack.run import broker_process
from tests.broker.subscription_support import create
from tests.support.event_types import business_event_type, order_events

GRACEFUL = 10.0  # seconds: uvicorn's graceful shutdown, as our services set it
BOUND = GRACEFUL + 5


class Reader(threading.Thread):
    """Reads a stream to its end; ``error`` is what broke it, if the server cut it short."""

    def __init__(self, url: str, path: str, **params: Any) -> None:
        super().__init__(daemon=True)
        self.url, self.path, self.params = url, path, params
        self.events = 0
        self.opened = threading.Event()
        self.error: BaseException | None = None
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            with (
                httpx.Client(base_url=self.url, timeout=60) as client,
                client.stream("GET", self.path, params=self.params) as response,
            ):
                assert response.status_code == 200, response.read()
                self.opened.set()
                for line in response.iter_lines():
                    if line:
                        self.events += len(json.loads(line).get("events") or [])
        except BaseException as error:
            self.error = error
        finally:
            self.ended.set()


class Publisher(threading.Thread):
    """Publishes until the broker stops taking connections; a request cut while in flight
    (sent, never answered) is what draining must prevent."""

    def __init__(self, url: str, name: str) -> None:
        super().__init__(daemon=True)
        self.url, self.name = url, name
        self.answered = 0
        self.cut: list[str] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while True:
                events = order_events(20)
                try:
                    response = client.post(f"/event-types/{self.name}/events", json=events)
                except httpx.ConnectError:
                    return  # the listener is closed: nothing was in flight
                except httpx.TransportError as error:
                    self.cut.append(f"{type(error).__name__}: {error}")
                    return
                assert response.status_code == 200, response.text
                self.answered += 1


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_answers_publishes_and_ends_streams_whole(
    pg_dsn: str, kafka_bootstrap: str, unique_name: Any, tmp_path: Path, workers: int
) -> None:
    process, url = broker_process(
        pg_dsn, kafka_bootstrap, tmp_path / "broker.log", "--workers", str(workers)
    )
    process.start()
    try:
        name = unique_name("drain")
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.post("/event-types", json=business_event_type(name)).status_code == 201
            subscription = create(client, [name], read_from="begin")["id"]
        endless = {
            "batch_flush_timeout": 1,
            "stream_timeout": 3600,
            "max_uncommitted_events": 10**5,
        }
        readers = [
            Reader(url, f"/event-types/{name}/events", **endless),
            Reader(url, f"/subscriptions/{subscription}/events", **endless),
        ]
        for reader in readers:
            reader.start()
            wait_until(reader.opened.is_set, timeout=30, what="the stream to open")
        # Several clients reconnecting as the workers drain: what finds a listener closing.
        publishers = [Publisher(url, name) for _ in range(8)]
        for publisher in publishers:
            publisher.start()
        wait_until(lambda: all(p.answered >= 5 for p in publishers), timeout=30, what="publishes")
        wait_until(lambda: all(r.events > 0 for r in readers), timeout=30, what="events streamed")

        assert process.process is not None
        started = time.monotonic()
        process.process.send_signal(signal.SIGTERM)
        process.process.wait(timeout=BOUND + 10)
        took = time.monotonic() - started
        for publisher in publishers:
            publisher.join(timeout=30)
        for reader in readers:
            reader.join(timeout=30)
        assert took < BOUND, f"the broker took {took:.1f}s to drain"
        assert [p.cut for p in publishers if p.cut] == []
        for reader in readers:
            assert reader.ended.is_set()
            assert reader.error is None, f"{reader.path} was cut: {reader.error!r}"
    finally:
        process.stop()  # a no-op once it exited


def test_a_publish_waiting_on_an_unreachable_kafka_is_answered_while_draining() -> None:
    """Kafka gone when SIGTERM comes: the publish waiting on it is answered (its events
    failed) within the graceful shutdown, not cut at its end, and the producer closes
    promptly after."""
    draining = threading.Event()
    producer = KafkaProducer(
        kafka.Cluster(f"127.0.0.1:{free_port()}"), draining=draining
    )  # nothing listens
    producer.start()

    async def publish() -> list[str | None]:
        sending = asyncio.ensure_future(producer.send([Message("drain", 0, None, b"{}")]))
        await asyncio.sleep(0.5)
        assert not sending.done()  # waiting on Kafka
        draining.set()
        return await asyncio.wait_for(sending, timeout=GRACEFUL - 1)

    try:
        errors = asyncio.run(publish())
    finally:
        started = time.monotonic()
        producer.close()
        took = time.monotonic() - started
    assert len(errors) == 1 and errors[0] is not None, errors
    assert took < 5, f"the producer took {took:.1f}s to close"
