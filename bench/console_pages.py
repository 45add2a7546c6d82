"""Console pages with 1,000 event types and 1,000 subscriptions, vs the broker call each makes.

A broker process gets ``EVENT_TYPES`` event types (1 partition each, created concurrently)
and ``SUBSCRIPTIONS`` subscriptions (on the first event type), then ``changebroker console``
runs as its own process against it (sampling every subscription's stats in the background,
as it does in production). Each page is fetched ``REQUESTS`` times after a warm-up; the
figure is its median time, and its baseline the median of the broker API call the page
depends on most, in the same run. The goal: every page at most ``GOAL_MS``.

    .venv/bin/python -m bench console_pages
"""

from __future__ import annotations

import concurrent.futures
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.broker_stream import broker_with_event_type
from bench.report import Figure, report, verdict
from changebroker.stack.processes import free_port
from changebroker.stack.run import CliProcess

EVENT_TYPES = 1000
SUBSCRIPTIONS = 1000
REQUESTS = 30
GOAL_MS = 300.0


def _median_ms(client: httpx.Client, path: str, params: dict[str, int] | None = None) -> float:
    client.get(path, params=params).raise_for_status()  # warm-up
    times = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        response = client.get(path, params=params)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return statistics.median(times)


def _fill(url: str, first: str) -> tuple[list[str], list[str]]:
    """``EVENT_TYPES - 1`` more event types and ``SUBSCRIPTIONS`` subscriptions."""

    def event_type(i: int) -> str:
        name = f"{first}.n{i:04d}"
        body = {
            "name": name,
            "owning_application": f"bench-app-{i % 20}",
            "category": "business",
            "enrichment_strategies": ["metadata_enrichment"],
            "partition_strategy": "random",
            "default_statistic": {
                "messages_per_minute": 1,
                "message_size": 1,
                "read_parallelism": 1,
                "write_parallelism": 1,
            },
            "schema": {"type": "json_schema", "schema": "{}"},
        }
        httpx.post(f"{url}/event-types", json=body, timeout=120).raise_for_status()
        return name

    def subscription(i: int) -> str:
        body = {
            "owning_application": f"bench-app-{i % 20}",
            "event_types": [first],
            "consumer_group": f"group-{i}",
        }
        answer = httpx.post(f"{url}/subscriptions", json=body, timeout=120)
        answer.raise_for_status()
        return str(answer.json()["id"])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        names = [first, *pool.map(event_type, range(1, EVENT_TYPES))]
        ids = list(pool.map(subscription, range(SUBSCRIPTIONS)))
    return names, ids


def main() -> int:
    with broker_with_event_type("console") as broker:
        url = broker.url
        started = time.monotonic()
        names, ids = _fill(url, broker.event_type)
        print(
            f"{len(names)} event types, {len(ids)} subscriptions in"
            f" {time.monotonic() - started:.0f} s",
            flush=True,
        )
        port = free_port()
        console_url = f"http://127.0.0.1:{port}"
        dead = f"http://127.0.0.1:{free_port()}"  # the pages measured need the broker only
        log = Path(tempfile.mkstemp(prefix="bench-console-", suffix=".log")[1])
        console = CliProcess(
            [
                *("console", "--port", str(port), "--broker-url", url),
                *("--registry-url", dead, "--bridge-url", dead),
                *("--changeserver-url", dead, "--changeserver-mgmt-url", dead),
            ],
            ready_url=f"{console_url}/health",
            log_path=log,
        ).start()
        try:
            sid = ids[0]
            name = names[0]
            with (
                httpx.Client(base_url=console_url, timeout=60) as pages,
                httpx.Client(base_url=url, timeout=60) as api,
            ):
                pairs = [
                    ("overview", "/", (f"/subscriptions/{sid}/stats", None)),
                    ("event types", "/event-types", ("/event-types", None)),
                    (
                        "event types search",
                        "/event-types?q=n05",
                        ("/event-types", None),
                    ),
                    (
                        "event type",
                        f"/event-types/{name}",
                        (f"/event-types/{name}/partitions", None),
                    ),
                    (
                        "subscriptions",
                        "/subscriptions",
                        ("/subscriptions", {"limit": 50}),
                    ),
                    (
                        "subscription",
                        f"/subscriptions/{sid}",
                        (f"/subscriptions/{sid}/stats", None),
                    ),
                    (
                        "reset confirmation",
                        f"/subscriptions/{sid}/reset",
                        (f"/subscriptions/{sid}/cursors", None),
                    ),
                ]
                figures = []
                over = []
                for label, page, (path, params) in pairs:
                    ours = _median_ms(pages, page)
                    theirs = _median_ms(api, path, params)
                    if ours > GOAL_MS:
                        over.append(f"{label} {ours:.0f} ms")
                    figures.append(
                        Figure(
                            "console_pages",
                            f"{label} page, median ms",
                            ours,
                            "ms",
                            theirs,
                            f"broker GET {path.replace(sid, '{id}').replace(name, '{name}')}",
                            higher_is_better=False,
                        )
                    )
        finally:
            console.stop()
    report(figures)
    return verdict(f"{GOAL_MS:.0f} ms page", ", ".join(over))


if __name__ == "__main__":
    sys.exit(main())
