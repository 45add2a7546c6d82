"""Publishing 1 KB business events through the broker API vs a raw confluent-kafka producer.

Batches of 1, 100 and 1000 events; the broker runs as its own process
(``changebroker broker --workers <cores>``), as people run it; 4 keep-alive connections
post batches and wait for each answer (the byte-level clients of
:func:`bench.services.keep_alive_fleet`: httpx threads took a third of a core of the
two the broker shares with them). The baseline writes the same bytes with
the same producer settings (acks=all, idempotence), waiting for each batch's
acknowledgements, from as many threads, in the same run.

Then single events as a producer fleet sends them: 64 concurrent keep-alive
connections, each posting one event and waiting for its answer, with the rate
and the p50/p99 latency; the baseline is one raw producer with 64 single events
in flight, each awaited as a request awaits its acknowledgement.

    .venv/bin/python -m bench broker_publish
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
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
THREADS = 4  # batch publishers: connections to the API, threads of the raw producer
# Publishing is CPU-bound Python: one broker worker process per core, as deployed.
WORKERS = os.cpu_count() or 1
PARTITIONS = 4
SECONDS_PER_RUN = 8.0
EVENT_BYTES = 1024
CONNECTIONS = 64  # single-event publishing: concurrent keep-alive connections


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


def poster(
    url: str,
    name: str,
    batch: bytes,
    size: int,
    headers: Callable[[], dict[str, str]] = dict,
) -> Callable[[], int]:
    """A ``work`` for :func:`_rate`: publish ``batch`` (``size`` events) through the API, each
    thread over a keep-alive client of its own with ``headers()`` (asked once per thread)."""
    local = threading.local()

    def post() -> int:
        if not hasattr(local, "client"):
            sent = {"Content-Type": "application/json", **headers()}
            local.client = httpx.Client(base_url=url, timeout=60, headers=sent)
        response = local.client.post(f"/event-types/{name}/events", content=batch)
        if response.status_code != 200:
            raise RuntimeError(f"publish answered {response.status_code}: {response.text[:300]}")
        return size

    return post


def _through_api(url: str, name: str, batch: bytes, size: int) -> float:
    """Events/s of THREADS connections each posting ``batch`` (``size`` events) in turn."""
    request = services.http_request(
        "POST", f"/event-types/{name}/events", batch, "application/json"
    )
    answers, _ = services.keep_alive_fleet(
        int(url.rsplit(":", 1)[1]), request, THREADS, SECONDS_PER_RUN
    )
    return answers * size


def _single_events_api(port: int, name: str, event: bytes) -> tuple[float, list[float]]:
    """(events/s, latencies) of CONNECTIONS connections each publishing one event at a time."""
    request = services.http_request(
        "POST", f"/event-types/{name}/events", b"[" + event + b"]", "application/json"
    )
    return services.keep_alive_fleet(port, request, CONNECTIONS, SECONDS_PER_RUN)


def _single_events_raw(bootstrap: str, topic: str, event: bytes) -> tuple[float, list[float]]:
    """The same with one raw producer: CONNECTIONS single events in flight, each awaited."""
    producer = Producer(kafka.producer_config(bootstrap))
    stopping = threading.Event()

    def poll() -> None:
        while not stopping.is_set():
            producer.poll(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    latencies: list[float] = []

    async def one(deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while time.monotonic() < deadline:
            acknowledged: asyncio.Future[None] = loop.create_future()

            def delivered(
                error: object, _: object, done: asyncio.Future[None] = acknowledged
            ) -> None:
                failure = RuntimeError(f"the raw producer failed: {error}") if error else None
                loop.call_soon_threadsafe(_settle, done, failure)

            started = time.perf_counter()
            producer.produce(topic, event, on_delivery=delivered)
            await acknowledged
            latencies.append(time.perf_counter() - started)

    async def fleet() -> float:
        deadline = time.monotonic() + SECONDS_PER_RUN
        started = time.monotonic()
        await asyncio.gather(*(one(deadline) for _ in range(CONNECTIONS)))
        return len(latencies) / (time.monotonic() - started)

    try:
        return asyncio.run(fleet()), latencies
    finally:
        stopping.set()
        poller.join()
        producer.flush(30)


def _settle(future: asyncio.Future[None], failure: Exception | None) -> None:
    if failure is None:
        future.set_result(None)
    else:
        future.set_exception(failure)


def _single_event_figures(port: int, name: str, bootstrap: str, topic: str) -> list[Figure]:
    event = json.dumps(_event(0), separators=(",", ":")).encode()
    api, api_latencies = _single_events_api(port, name, event)
    raw, raw_latencies = _single_events_raw(bootstrap, topic, event)
    ours, theirs = (statistics.quantiles(ls, n=100) for ls in (api_latencies, raw_latencies))
    what = f"single 1 KB events, {CONNECTIONS} connections, {WORKERS} workers"
    baseline = "raw confluent-kafka producer"
    return [
        Figure("broker_publish", f"{what}: events/s", api, "events/s", raw, baseline),
        Figure("broker_publish", f"{what}: p50", ours[49] * 1000, "ms", theirs[49] * 1000,
               baseline, higher_is_better=False),
        Figure("broker_publish", f"{what}: p99", ours[98] * 1000, "ms", theirs[98] * 1000,
               baseline, higher_is_better=False),
    ]  # fmt: skip


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
            figures += _single_event_figures(int(url.rsplit(":", 1)[1]), name, bootstrap, raw_topic)
            report(figures)
            return 0
        finally:
            admin.delete_topics([raw_topic])


if __name__ == "__main__":
    sys.exit(main())
