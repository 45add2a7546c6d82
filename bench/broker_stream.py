"""Low-level stream read rate through the broker API vs a raw confluent-kafka consumer.

An event type of 4 partitions is filled with 1 KB business events (written
straight to its topic: reading does not care who wrote them), then read from
``begin`` on every partition, once through ``GET /event-types/{name}/events``
(batch_limit 1000, and Nakadi's default of 1 on a smaller share) and once by a
raw consumer assigned to the same partitions, in the same run (the better of
one read before and one after ours; ours is the median of three reads). The
broker runs as its own process (``changebroker broker``), as people run it.

    .venv/bin/python -m bench broker_stream
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition

from bench import services
from bench.report import Figure, report
from changebroker import kafka
from changebroker.broker.streams.event_stream import STREAM_CONSUMER_SETTINGS
from changebroker.broker.streams.watermarks import consumer_config

PARTITIONS = 4
EVENTS = 200_000
# Nakadi's default batch_limit is 1: a line per event, read over fewer events to stay bounded.
SMALL_BATCH_EVENTS = 50_000
EVENT_BYTES = 1024
REPEATS = 3


def _event(index: int) -> bytes:
    event: dict[str, object] = {
        "order_number": f"order-{index:08d}",
        "metadata": {
            "eid": str(uuid.uuid4()),
            "occurred_at": "2026-11-22T10:00:00.000Z",
            "event_type": "bench",
        },
        "payload": "",
    }
    padding = EVENT_BYTES - len(json.dumps(event, separators=(",", ":")))
    event["payload"] = "x" * max(0, padding)
    return json.dumps(event, separators=(",", ":")).encode()


def _fill(bootstrap: str, topic: str, events: int = EVENTS) -> None:
    producer = Producer(kafka.producer_config(bootstrap, **{"linger.ms": 20}))
    for index in range(events):
        producer.produce(topic, _event(index), partition=index % PARTITIONS)
        if index % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("filling the topic did not finish within 120 s")


def _through_api(url: str, name: str, events: int, batch_limit: int) -> float:
    cursors = [{"partition": str(p), "offset": "begin"} for p in range(PARTITIONS)]
    received = 0
    started = time.monotonic()
    with (
        httpx.Client(base_url=url, timeout=60) as client,
        client.stream(
            "GET",
            f"/event-types/{name}/events",
            params={"batch_limit": batch_limit, "stream_limit": events},
            # httpx asks for gzip by default; the raw consumer gets uncompressed bytes too.
            headers={"X-Nakadi-Cursors": json.dumps(cursors), "Accept-Encoding": "identity"},
        ) as response,
    ):
        if response.status_code != 200:
            raise RuntimeError(f"the stream answered {response.status_code}: {response.read()!r}")
        for chunk in response.iter_raw(1 << 20):
            # Every event carries exactly one eid: counting them needs no JSON parsing here.
            received += chunk.count(b'"eid"')
    elapsed = time.monotonic() - started
    if received != events:
        raise RuntimeError(f"the stream delivered {received} events, expected {events}")
    return events / elapsed


def _raw(bootstrap: str, topic: str, events: int) -> float:
    # The same fetch settings as the broker's streams: the baseline is a well-tuned reader.
    consumer = Consumer(consumer_config(kafka.Cluster(bootstrap)) | STREAM_CONSUMER_SETTINGS)
    started = time.monotonic()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    received = 0
    try:
        while received < events:
            for message in consumer.consume(5000, 10):
                if message.error() is not None:
                    raise RuntimeError(f"raw consumer: {message.error()}")
                message.value()
                received += 1
    finally:
        consumer.close()
    return received / (time.monotonic() - started)


@dataclass(frozen=True)
class BenchBroker:
    url: str
    event_type: str
    topic: str
    bootstrap: str


@contextlib.contextmanager
def broker_with_event_type(
    label: str, *flags: str, bootstrap: str | None = None
) -> Iterator[BenchBroker]:
    """A broker process (one worker, unless ``flags`` say otherwise) on a metadata database of
    its own, with an undefined event type of ``PARTITIONS`` partitions, on ``bootstrap``
    (default: the runner's Kafka); the event type (and so its topic), the process and the
    database are removed afterwards."""
    bootstrap = bootstrap or services.kafka_bootstrap()
    name = f"bench.{label}_{uuid.uuid4().hex[:8]}"
    with services.broker(label, "--workers", "1", *flags, bootstrap=bootstrap) as (url, meta_dsn):
        try:
            yield BenchBroker(url, name, _create(url, name, meta_dsn), bootstrap)
        finally:
            # Deleting the event type deletes its topic: the filled data does not linger.
            with contextlib.suppress(httpx.HTTPError):
                httpx.delete(f"{url}/event-types/{name}", timeout=60)


def _create(url: str, name: str, meta_dsn: str) -> str:
    """An undefined event type of ``PARTITIONS`` partitions; its topic."""
    services.create_event_type(
        url,
        name,
        PARTITIONS,
        category="undefined",
        partition_strategy="random",
        schema={"type": "json_schema", "schema": "{}"},
    )
    with psycopg.connect(meta_dsn) as conn:
        row = conn.execute(
            "SELECT topic FROM broker_event_types WHERE name = %s", (name,)
        ).fetchone()
    assert row is not None, f"{name} has no topic"
    return str(row[0])


def main() -> int:
    with broker_with_event_type("stream") as broker:
        url, name, topic, bootstrap = broker.url, broker.event_type, broker.topic, broker.bootstrap
        _fill(bootstrap, topic)
        # The better of two raw reads, before and after ours: the baseline is never flattered.
        first_raw = _raw(bootstrap, topic, EVENTS)
        # Two cores are shared with Kafka and the client: the median of three reads each.
        api = {
            batch_limit: statistics.median(
                _through_api(url, name, events, batch_limit) for _ in range(REPEATS)
            )
            for batch_limit, events in ((1000, EVENTS), (1, SMALL_BATCH_EVENTS))
        }
        raw = max(first_raw, _raw(bootstrap, topic, EVENTS))
        figures = [
            Figure(
                "broker_stream",
                f"1 KB events/s read, {PARTITIONS} partitions, batch_limit {batch_limit}",
                rate,
                "events/s",
                baseline=raw,
                baseline_name="raw confluent-kafka consumer",
            )
            for batch_limit, rate in api.items()
        ]
        report(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
