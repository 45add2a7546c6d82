"""Subscription consumption with a commit per batch, and rebalance time, vs a raw Kafka group.

An event type of 4 partitions is filled with 1 KB events (straight into its
topic), then read from ``begin`` by one subscription stream (batch_limit 1000,
max_uncommitted_events 4000) whose client commits every batch's cursor as it
arrives, through the API, as a Nakadi consumer does (the median of three reads).
The baseline is a raw confluent-kafka consumer group member on the same topic
committing every ``consume(1000)`` synchronously, in the same run (the better of
one read before and one after ours).

Rebalance: with one stream holding all 4 partitions (nothing uncommitted), a
second stream joins; the time is from its request until its first batch (a
keep-alive of a partition it was given; batch_flush_timeout 0.01 s). Baseline:
a second member joining the raw group until its partitions are assigned.
Medians of ``REBALANCES`` joins each. The broker runs as its own process.

    .venv/bin/python -m bench broker_subscription
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
import uuid

import httpx
from confluent_kafka import Consumer

from bench.broker_stream import EVENTS, PARTITIONS, REPEATS, _fill, broker_with_event_type
from bench.report import Figure, report
from changebroker import kafka
from changebroker.broker.streams.event_stream import STREAM_CONSUMER_SETTINGS
from changebroker.stack.processes import wait_until

BATCH_LIMIT = 1000
MAX_UNCOMMITTED = 4 * BATCH_LIMIT
REBALANCES = 5
FLUSH_SECONDS = 0.01


def _cursor(line: bytes) -> dict[str, str]:
    """The batch's cursor without parsing its events: it is the line's first object."""
    end = line.index(b"}")
    return dict(json.loads(line[len(b'{"cursor":') : end + 1]))


def _through_subscription(url: str, subscription_id: str, events: int = EVENTS) -> float:
    received = 0
    started = time.monotonic()
    with (
        httpx.Client(base_url=url, timeout=60) as client,
        httpx.Client(base_url=url, timeout=60) as committer,
        client.stream(
            "GET",
            f"/subscriptions/{subscription_id}/events",
            params={
                "batch_limit": BATCH_LIMIT,
                "max_uncommitted_events": MAX_UNCOMMITTED,
                # The last, partial batches go out at the limit, not at the flush timeout.
                "stream_limit": events,
            },
            headers={"Accept-Encoding": "identity"},
        ) as response,
    ):
        if response.status_code != 200:
            raise RuntimeError(f"the stream answered {response.status_code}: {response.read()!r}")
        stream_id = response.headers["X-Nakadi-StreamId"]
        for line in response.iter_lines():  # until the stream ends at stream_limit
            raw = line.encode()
            count = raw.count(b'"eid"')
            if not count:
                continue
            received += count
            committed = committer.post(
                f"/subscriptions/{subscription_id}/cursors",
                json={"items": [_cursor(raw)]},
                headers={"X-Nakadi-StreamId": stream_id},
            )
            if committed.status_code != 204:
                raise RuntimeError(f"commit answered {committed.status_code}: {committed.text}")
    elapsed = time.monotonic() - started
    if received != events:
        raise RuntimeError(f"the stream delivered {received} events, expected {events}")
    return received / elapsed


def _group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        kafka.client_config(
            bootstrap,
            **{
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **{k: v for k, v in STREAM_CONSUMER_SETTINGS.items() if k != "auto.offset.reset"},
            },
        )
    )


def _raw_group(bootstrap: str, topic: str, events: int = EVENTS) -> float:
    consumer = _group_consumer(bootstrap, f"bench-{uuid.uuid4().hex[:8]}")
    started = time.monotonic()
    consumer.subscribe([topic])
    received = 0
    try:
        while received < events:
            messages = consumer.consume(BATCH_LIMIT, 10)
            for message in messages:
                if message.error() is not None:
                    raise RuntimeError(f"raw consumer: {message.error()}")
                message.value()
            received += len(messages)
            if messages:
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return received / (time.monotonic() - started)


def _subscription_rebalance(url: str, subscription_id: str) -> float:
    """Seconds from a second stream's request to its first batch, the first one holding all."""
    params = {"batch_flush_timeout": FLUSH_SECONDS}
    with (
        httpx.Client(base_url=url, timeout=60) as first_client,
        httpx.Client(base_url=url, timeout=60) as second_client,
        first_client.stream(
            "GET", f"/subscriptions/{subscription_id}/events", params=params
        ) as first,
    ):
        lines = first.iter_lines()
        # The first stream holds every partition once it has sent a batch for each.
        seen: set[str] = set()
        while len(seen) < PARTITIONS:
            seen.add(json.loads(next(lines))["cursor"]["partition"])
        started = time.monotonic()
        with second_client.stream(
            "GET", f"/subscriptions/{subscription_id}/events", params=params
        ) as second:
            if second.status_code != 200:
                raise RuntimeError(f"the second stream answered {second.status_code}")
            next(second.iter_lines())
            elapsed = time.monotonic() - started
    return elapsed


def _raw_rebalance(bootstrap: str, topic: str) -> float:
    """Seconds from a second member's subscribe until it is assigned partitions."""
    group = f"bench-join-{uuid.uuid4().hex[:8]}"
    first = _group_consumer(bootstrap, group)
    first.subscribe([topic])
    stop = threading.Event()
    wait_until(lambda: bool(first.poll(0.1) or first.assignment()), timeout=60, what="a member")

    def keep_polling() -> None:
        while not stop.is_set():
            first.poll(0.05)

    poller = threading.Thread(target=keep_polling, daemon=True)
    poller.start()
    second = _group_consumer(bootstrap, group)
    assigned = threading.Event()
    started = time.monotonic()
    second.subscribe(
        [topic], on_assign=lambda c, partitions: assigned.set() if partitions else None
    )
    try:
        while not assigned.is_set():
            second.poll(0.01)
        return time.monotonic() - started
    finally:
        stop.set()
        poller.join()
        second.close()
        first.close()


def main() -> int:
    with broker_with_event_type("subscription") as broker:
        url, bootstrap, topic = broker.url, broker.bootstrap, broker.topic
        _fill(bootstrap, topic)

        def subscription(group: str) -> str:
            answer = httpx.post(
                f"{url}/subscriptions",
                json={
                    "owning_application": "bench",
                    "event_types": [broker.event_type],
                    "consumer_group": group,
                    "read_from": "begin",
                },
                timeout=60,
            )
            answer.raise_for_status()
            return str(answer.json()["id"])

        # The better of two raw reads, before and after ours: the baseline is never flattered.
        first_raw = _raw_group(bootstrap, topic)
        # Two cores are shared with Kafka, Postgres and the client: the median of three reads,
        # each by a subscription of its own (a read commits all it reads).
        ours = statistics.median(
            _through_subscription(url, subscription(f"rate-{i}")) for i in range(REPEATS)
        )
        raw = max(first_raw, _raw_group(bootstrap, topic))
        joined = subscription("rebalance")
        ours_rebalance = statistics.median(
            _subscription_rebalance(url, joined) for _ in range(REBALANCES)
        )
        raw_rebalance = statistics.median(
            _raw_rebalance(bootstrap, topic) for _ in range(REBALANCES)
        )
        report(
            [
                Figure(
                    "broker_subscription",
                    f"1 KB events/s, 1 stream, {PARTITIONS} partitions, commit every"
                    f" {BATCH_LIMIT}-event batch",
                    ours,
                    "events/s",
                    baseline=raw,
                    baseline_name="raw confluent-kafka group, sync commit per batch",
                ),
                Figure(
                    "broker_subscription",
                    "rebalance: second stream joins until its first batch",
                    ours_rebalance * 1000,
                    "ms",
                    baseline=raw_rebalance * 1000,
                    baseline_name="raw group: second member until assigned",
                    higher_is_better=False,
                ),
            ]
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
