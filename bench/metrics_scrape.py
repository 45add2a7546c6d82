"""What scraping the broker's /metrics costs, with 1,000 event types and 1,000 subscriptions.

A broker with two worker processes (prometheus_client's multiprocess mode) gets
``EVENT_TYPES`` event types, one event published to each (a label set each), and
``SUBSCRIPTIONS`` subscriptions (on the first event type, of ``PARTITIONS`` partitions: a lag
series per subscription and partition).

Each subscription's cursors are reset to the beginning (so each has committed cursors and a
lag). Then:

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

from bench.broker_publish import _event, _rate, poster
from bench.broker_stream import PARTITIONS, broker_with_event_type
from bench.console_pages import EVENT_TYPES, SUBSCRIPTIONS, _fill
from bench.report import Figure, report, verdict
from changebroker.metrics import PROMETHEUS_ACCEPT
from changebroker.stack.processes import wait_until

# The broker answers JSON unless asked for Prometheus text, as a scraper asks.
SCRAPER = {"accept": PROMETHEUS_ACCEPT}

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
    stop = threading.Event()

    def scraper() -> None:
        with httpx.Client(base_url=url, timeout=60, headers=SCRAPER) as client:
            while not stop.wait(scrape_every or 0):
                client.get("/metrics").raise_for_status()

    thread = threading.Thread(target=scraper) if scrape_every else None
    if thread:
        thread.start()
    try:
        return _rate(THREADS, poster(url, name, body, BATCH))
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

        def start_at_begin(subscription_id: str) -> None:
            # A subscription has committed cursors (and so a lag) once a stream or a reset
            # set them up: a reset to the first event of each partition, as a backfill starts.
            cursors = [
                {"event_type": broker.event_type, "partition": str(p), "offset": "begin"}
                for p in range(PARTITIONS)
            ]
            answer = httpx.patch(
                f"{url}/subscriptions/{subscription_id}/cursors",
                json={"items": cursors},
                timeout=60,
            )
            answer.raise_for_status()

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(publish_one, names))
            list(pool.map(start_at_begin, ids))
        print(
            f"{len(names)} event types with an event each, {len(ids)} subscriptions in"
            f" {time.monotonic() - started:.0f} s",
            flush=True,
        )

        def lag_read() -> bool:
            text = httpx.get(f"{url}/metrics", timeout=60, headers=SCRAPER).text
            series = sum(1 for line in text.splitlines() if line.startswith(LAG + "{"))
            return series >= SUBSCRIPTIONS * PARTITIONS

        wait_until(lag_read, timeout=300, what="every subscription's lag in /metrics")
        with httpx.Client(base_url=url, timeout=60, headers=SCRAPER) as client:
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
    return verdict(f"{GOAL_MS:.0f} ms /metrics", f"p95 {p95:.0f} ms" if p95 > GOAL_MS else "")


if __name__ == "__main__":
    sys.exit(main())
