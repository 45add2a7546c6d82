"""What a timeline switch costs the publishers: publish latency while timelines switch, against
the same publishers in the same run with no switch.

A broker process (``--workers <cores>``) and an event type of 4 partitions; 16 keep-alive
connections each publish one 1 KB event at a time and wait for the answer. First for
``SECONDS`` undisturbed (the baseline), then for ``SECONDS`` while a timeline is created every
``SWITCH_EVERY`` seconds: each switch pauses every writer of the event type until the old
topic's end is recorded (broker/timelines/writers.py), so the publishes that arrive meanwhile
wait for it. Also: how long a switch takes, end to end, as the administrator sees it.

    .venv/bin/python -m bench timeline_switch
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
import uuid

import httpx

from bench import services
from bench.report import Figure, report

WORKERS = os.cpu_count() or 1
PARTITIONS = 4
CONNECTIONS = 16
SECONDS = 8.0
SWITCH_EVERY = 1.0
EVENT_BYTES = 1024


def _event() -> bytes:
    event: dict[str, object] = {
        "order_number": "order-1",
        "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T10:00:00.000Z"},
        "payload": "",
    }
    event["payload"] = "x" * max(0, EVENT_BYTES - len(json.dumps(event)))
    return json.dumps([event], separators=(",", ":")).encode()


def _switching(url: str, name: str, until: float, durations: list[float]) -> None:
    """Create a timeline every SWITCH_EVERY seconds until ``until``; each one's duration."""
    with httpx.Client(base_url=url, timeout=120) as client:
        while time.monotonic() + SWITCH_EVERY < until:
            time.sleep(SWITCH_EVERY)
            started = time.perf_counter()
            answer = client.post(f"/event-types/{name}/timelines", json={"storage_id": "default"})
            if answer.status_code != 201:
                raise RuntimeError(f"the switch answered {answer.status_code}: {answer.text}")
            durations.append(time.perf_counter() - started)


def main() -> int:
    with services.broker("timelines", "--workers", str(WORKERS)) as (url, _):
        name = f"bench.switched_{uuid.uuid4().hex[:8]}"
        services.create_event_type(
            url,
            name,
            PARTITIONS,
            category="business",
            enrichment_strategies=["metadata_enrichment"],
            partition_strategy="random",
            schema={"type": "json_schema", "schema": '{"properties": {}}'},
        )
        port = int(url.rsplit(":", 1)[1])
        request = services.http_request(
            "POST", f"/event-types/{name}/events", _event(), "application/json"
        )
        steady_rate, steady = services.keep_alive_fleet(port, request, CONNECTIONS, SECONDS)
        durations: list[float] = []
        switcher = threading.Thread(
            target=_switching, args=(url, name, time.monotonic() + SECONDS, durations)
        )
        switcher.start()
        rate, during = services.keep_alive_fleet(port, request, CONNECTIONS, SECONDS)
        switcher.join()
        ours, theirs = (statistics.quantiles(ls, n=100) for ls in (during, steady))
        what = f"single 1 KB events, {CONNECTIONS} connections, {WORKERS} workers"
        baseline = "the same publishers, no switch"
        switching = f"while a timeline is created every {SWITCH_EVERY:g} s"
        report(
            [
                Figure("timeline_switch", f"{what} {switching}: p99", ours[98] * 1000, "ms",
                       theirs[98] * 1000, baseline, higher_is_better=False),
                Figure("timeline_switch", f"{what} {switching}: max", max(during) * 1000, "ms",
                       max(steady) * 1000, baseline, higher_is_better=False),
                Figure("timeline_switch", f"{what} {switching}: events/s", rate, "events/s",
                       steady_rate, baseline),
                Figure("timeline_switch", f"timeline switch, median of {len(durations)}",
                       statistics.median(durations) * 1000, "ms", higher_is_better=False),
            ]
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
