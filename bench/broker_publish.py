"""Publishing 1 KB business events through the broker API vs a raw confluent-kafka producer.

Batches of 1, 100 and 1000 events; the broker runs as its own process
(``changebroker broker --workers <cores>``), as people run it; the same number of client threads
post batches and wait for each answer. The baseline writes the same bytes with
the same producer settings (acks=all, idempotence), waiting for each batch's
acknowledgements, from as many threads, in the same run.

    .venv/bin/python -m bench broker_publish
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable

import httpx
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from bench import services
from bench.report import Figure, report
from changebroker import kafka

BATCH_SIZES = (1, 100, 1000)
THREADS = 4
# Publishing is CPU-bound Python: one broker worker process per core, as deployed.
WORKERS = os.cpu_count() or 1
PARTITIONS = 4
SECONDS_PER_RUN = 8.0
EVENT_BYTES = 1024


def _event(index: int) -> dict[str, object]:
    event: dict[str, object] = {
        "order_number": f"order-{index:08d}",
        "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T10:00:00.000Z"},
        "payload": "",
    }
    padding = EVENT_BYTES - len(json.dumps(event, separators=(",", ":")))
    event["payload"] = "x" * max(0, padding)
    return event


def _rate(threads: int, work: Callable[[], int]) -> float:
    """Events per second of ``threads`` threads each repeating ``work`` for the run's time."""
    counts = [0] * threads
    deadline = time.monotonic() + SECONDS_PER_RUN

    def loop(slot: int) -> None:
        while time.monotonic() < deadline:
            counts[slot] += work()

    started = time.monotonic()
    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.monotonic() - started)


def _through_api(url: str, name: str, batch: bytes, size: int) -> float:
    local = threading.local()

    def post() -> int:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=url, timeout=60)
        response = local.client.post(
            f"/event-types/{name}/events",
            content=batch,
            headers={"Content-Type": "application/json"},
        )
        if response.status_code != 200:
            raise RuntimeError(f"publish answered {response.status_code}: {response.text[:300]}")
        return size

    return _rate(THREADS, post)


def _raw(bootstrap: str, topic: str, events: list[bytes]) -> float:
    local = threading.local()

    def produce() -> int:
        if not hasattr(local, "producer"):
            local.producer = Producer(kafka.producer_config(bootstrap))
        for value in events:
            local.producer.produce(topic, value)
        local.producer.flush(60)
        return len(events)

    return _rate(THREADS, produce)


def main() -> int:
    bootstrap = services.kafka_bootstrap()
    raw_topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    admin = kafka.admin(bootstrap)
    with services.broker("broker", "--workers", str(WORKERS)) as (url, _):
        try:
            admin.create_topics(
                [NewTopic(raw_topic, num_partitions=PARTITIONS, replication_factor=1)]
            )[raw_topic].result(30)
            name = f"bench.orders_{uuid.uuid4().hex[:8]}"
            schema = {
                "properties": {
                    "order_number": {"type": "string"},
                    "payload": {"type": "string"},
                },
                "required": ["order_number"],
            }
            services.create_event_type(
                url,
                name,
                PARTITIONS,
                category="business",
                enrichment_strategies=["metadata_enrichment"],
                partition_strategy="hash",
                partition_key_fields=["order_number"],
                schema={"type": "json_schema", "schema": json.dumps(schema)},
            )
            figures = []
            for size in BATCH_SIZES:
                events = [_event(i) for i in range(size)]
                encoded = [json.dumps(e, separators=(",", ":")).encode() for e in events]
                body = b"[" + b",".join(encoded) + b"]"
                api = _through_api(url, name, body, size)
                raw = _raw(bootstrap, raw_topic, encoded)
                figures.append(
                    Figure(
                        "broker_publish",
                        f"1 KB events/s, batches of {size}, {WORKERS} workers",
                        api,
                        "events/s",
                        baseline=raw,
                        baseline_name="raw confluent-kafka producer",
                    )
                )
            report(figures)
            return 0
        finally:
            admin.delete_topics([raw_topic])


if __name__ == "__main__":
    sys.exit(main())
