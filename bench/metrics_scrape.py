"""What scraping the broker's /metrics costs, with 1,000 event types and 1,000 subscriptions.

A broker with two worker processes (prometheus_client's multiprocess mode) gets
``EVENT_TYPES`` event types, one event published to each (a label set each), and
``SUBSCRIPTIONS`` subscriptions (on the first event type, of ``PARTITIONS`` partitions: a lag
series per subscription and partition). Once the lag has been read:

- /metrics is fetched ``REQUESTS`` times: its median and 95th percentile, against GET /health
  of the same broker in the same run; the goal is at most ``GOAL_MS``;
- publishing (1 KB events, batches of 100, ``THREADS`` client threads) runs ``ROUNDS`` times
  without and with a scrape every second, alternating; the ratio is with / without.

    .venv/bin/python -m bench metrics_scrape
"""

from __future__ import annotations

import concurrent.futures
import json
import statistics
import sys
import threading
import time
import uuid

import httpx

from bench.broker_publish import _event, _rate
from bench.broker_stream import PARTITIONS, broker_with_event_type
from bench.console_pages import EVENT_TYPES, SUBSCRIPTIONS, _fill
from bench.report import Figure, report
from changebroker.stack.processes import wait_until
from tests.support.metrics import scrape

REQUESTS = 30
GOAL_MS = 200.0
THREADS = 2
BATCH = 100
ROUNDS = 2
LAG = "changebroker_broker_subscription_unconsumed_events"


def _timed_ms(client: httpx.Client, path: str) -> list[float]:
    client.get(path).raise_for_status()  # warm-up
    times = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        client.get(path).raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _publish_rate(url: str, name: str, scrape_every: float | None) -> float:
    """Events per second of ``THREADS`` publishers, with a scraper thread when asked."""
    body = json.dumps([_event(i) for i in range(BATCH)]).encode()
    local = threading.local()
    stop = threading.Event()

    def post() -> int:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=url, timeout=60)
        response = local.client.post(
            f"/event-types/{name}/events",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        response.raise_for_status()
        return BATCH

    def scraper() -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.wait(scrape_every or 0):
                client.get("/metrics").raise_for_status()

    thread = threading.Thread(target=scraper) if scrape_every else None
    if thread:
        thread.start()
    try:
        return _rate(THREADS, post)
    finally:
        stop.set()
        if thread:
            thread.join()


def main() -> int:
    with broker_with_event_type("metrics", "--workers", "2", "--lag-interval", "5s") as broker:
        url = broker.url
        started = time.monotonic()
        names, ids = _fill(url, broker.event_type)

        def publish_one(name: str) -> None:
            # Business events (what _fill creates) need metadata; the undefined first type
            # takes anything.
            metadata = {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-23T10:00:00Z"}
            answer = httpx.post(
                f"{url}/event-types/{name}/events", json=[{"metadata": metadata}], timeout=60
            )
            answer.raise_for_status()

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(publish_one, names))
        print(
            f"{len(names)} event types with an event each, {len(ids)} subscriptions in"
            f" {time.monotonic() - started:.0f} s",
            flush=True,
        )

        def lag_read() -> bool:
            found = scrape(f"{url}/metrics")
            series = sum(1 for name, _ in found.samples if name == LAG)
            return series >= SUBSCRIPTIONS * PARTITIONS

        wait_until(lag_read, timeout=300, what="every subscription's lag in /metrics")
        with httpx.Client(base_url=url, timeout=60) as client:
            text = client.get("/metrics").text
            scraped = _timed_ms(client, "/metrics")
            health = _timed_ms(client, "/health")
        median = statistics.median(scraped)
        p95 = statistics.quantiles(scraped, n=20)[-1]
        print(f"/metrics: {len(text):,} bytes, {text.count(chr(10)):,} lines", flush=True)
        without, with_scrapes = [], []
        for _ in range(ROUNDS):
            without.append(_publish_rate(url, broker.event_type, None))
            with_scrapes.append(_publish_rate(url, broker.event_type, 1.0))
    figures = [
        Figure(
            "metrics_scrape",
            f"/metrics median ms ({EVENT_TYPES} event types, {SUBSCRIPTIONS} subscriptions)",
            median,
            "ms",
            statistics.median(health),
            "GET /health",
            higher_is_better=False,
        ),
        Figure("metrics_scrape", "/metrics 95th percentile ms", p95, "ms", higher_is_better=False),
        Figure(
            "metrics_scrape",
            f"publish 1 KB events/s, batches of {BATCH}, scraped every second",
            statistics.mean(with_scrapes),
            "events/s",
            statistics.mean(without),
            "not scraped",
        ),
    ]
    report(figures)
    if p95 > GOAL_MS:
        print(f"/metrics over the {GOAL_MS:.0f} ms goal: p95 {p95:.0f} ms")
        return 1
    print(f"/metrics within the {GOAL_MS:.0f} ms goal (p95 {p95:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
