"""The Python client's consuming rate against a bare loop doing the same work, in one run.

ChangeFeed: a table of ``CHANGES`` inserted rows of one selector (four columns), served by a
changeserver as its own process, read from the beginning with ``limit`` 1000, as typed
changes, by ``ChangeFeed`` (JSON, protobuf; positions in memory, and in a file written
atomically after each answer). The baseline is a bare httpx loop over the same answers:
``GET /changes?since=``, the body parsed (orjson, or the protobuf classes), each value read
as a consumer would, ``since`` moved to the last change; nothing typed, nothing kept.

Subscription: an event type of 4 partitions filled with ``EVENTS`` 1 KB events, read from
``begin`` (batch_limit 1000, max_uncommitted_events 4000, batch_flush_timeout 1 s) by
``Subscription``, each batch handed to a handler that counts it and committed once the
handler returns. Baselines: a bare httpx loop on the same stream (each line parsed with
orjson, its cursor committed before the next line is read) and a raw confluent-kafka group
member committing every ``consume(1000)`` synchronously. Each reads a subscription of its
own; medians of three reads, the baselines' taken in turn with ours.

    .venv/bin/python -m bench client_throughput

``CHANGEBROKER_BENCH_CLIENT_THROUGHPUT_CHANGES`` and ``..._EVENTS`` set the sizes (defaults
200,000 each), for a quick run at a small size.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg

from bench.broker_stream import PARTITIONS, _fill, broker_with_event_type
from bench.broker_subscription import BATCH_LIMIT, MAX_UNCOMMITTED, _raw_group
from bench.report import Figure, report
from bench.services import changeserver, pg_server_dsn
from changebroker import pg
from changebroker import transicator_pb2 as pb
from changebroker.client import (
    Change,
    ChangeFeed,
    EventBatch,
    FilePositionStore,
    MemoryPositionStore,
    PositionStore,
    Subscription,
)
from changebroker.client.changes import Format

NAME = "client_throughput"
CHANGES = int(os.environ.get(f"CHANGEBROKER_BENCH_{NAME.upper()}_CHANGES", "200000"))
EVENTS = int(os.environ.get(f"CHANGEBROKER_BENCH_{NAME.upper()}_EVENTS", "200000"))
LIMIT = 1000
REPEATS = 3
SELECTOR = "bench"
TABLE = """
CREATE TABLE items (id bigint PRIMARY KEY, name text, qty integer, _change_selector text);
"""
FILL = """
INSERT INTO items SELECT g, 'item ' || g, g %% 100, %s
FROM generate_series(%s::bigint, %s::bigint) g
"""
FENCE = "fence"  # a selector of its own: its row, once served, says every row before it is


def _filled(dsn: str, client: httpx.Client) -> None:
    """``CHANGES`` rows of the selector, in transactions of 10,000, all served."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE)
        for first in range(1, CHANGES + 1, 10_000):
            conn.execute(FILL, (SELECTOR, first, min(first + 9_999, CHANGES)))
        conn.execute("INSERT INTO items VALUES (0, 'fence', 0, %s)", (FENCE,))
    answer = client.get("/changes", params={"selector": FENCE, "block": 600}, timeout=700)
    assert len(answer.json()["changes"]) == 1, answer.text


def _bare_changes(client: httpx.Client, wire_format: str) -> float:
    """Changes/s of a bare httpx loop: each answer parsed, each value read, ``since`` moved."""
    accept = "application/transicator+protobuf" if wire_format == "protobuf" else "application/json"
    since, received = "0.0.0", 0
    started = time.perf_counter()
    while received < CHANGES:
        answer = client.get(
            "/changes",
            params={"selector": SELECTOR, "since": since, "limit": LIMIT},
            headers={"Accept": accept},
        )
        if wire_format == "protobuf":
            changes = pb.ChangeListPb.FromString(answer.content).changes
            for change in changes:
                for column in change.newColumns:
                    kind = column.value.WhichOneof("value")
                    if kind is not None:
                        getattr(column.value, kind)
            since = changes[-1].sequence
        else:
            changes = orjson.loads(answer.content)["changes"]
            for change in changes:
                for column in change["newRow"].values():
                    column["value"]
            since = changes[-1]["sequence"]
        received += len(changes)
    return received / (time.perf_counter() - started)


def _feed(url: str, wire_format: Format, store: Callable[[], PositionStore]) -> float:
    """Changes/s of a ChangeFeed from the beginning, until it has handed out ``CHANGES``."""
    received = 0
    started = time.perf_counter()
    with ChangeFeed(url, [SELECTOR], store=store(), format=wire_format, limit=LIMIT) as feed:
        for item in feed:
            received += isinstance(item, Change)
            if received == CHANGES:
                break
    return received / (time.perf_counter() - started)


def _change_feed_figures() -> list[Figure]:
    with (
        pg.scratch_database(pg_server_dsn(), "bench") as dsn,
        tempfile.TemporaryDirectory() as state,
        changeserver(dsn, Path(state)) as (_, port),
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
    ):
        url = f"http://127.0.0.1:{port}"
        print(f"writing {CHANGES:,} changes", flush=True)
        _filled(dsn, client)
        position = Path(state) / "position.json"

        def in_a_file() -> PositionStore:
            position.unlink(missing_ok=True)
            return FilePositionStore(position)

        variants: dict[tuple[str, str], tuple[Format, Callable[[], PositionStore]]] = {
            ("json", "in memory"): ("json", MemoryPositionStore),
            ("protobuf", "in memory"): ("protobuf", MemoryPositionStore),
            ("json", "in a file"): ("json", in_a_file),
        }
        ours: dict[tuple[str, str], list[float]] = {key: [] for key in variants}
        bare: dict[str, list[float]] = {"json": [], "protobuf": []}
        for _ in range(REPEATS):  # in turns: the machine's drift falls on both alike
            for wire_format in bare:
                bare[wire_format].append(_bare_changes(client, wire_format))
            for key, (wire_format, store) in variants.items():
                ours[key].append(_feed(url, wire_format, store))
    return [
        Figure(
            NAME,
            f"ChangeFeed typed changes/s, {wire_format}, position {where}, limit {LIMIT}",
            statistics.median(rates),
            "changes/s",
            baseline=statistics.median(bare[wire_format]),
            baseline_name=f"bare httpx loop, {wire_format} values read",
        )
        for (wire_format, where), rates in ours.items()
    ]


def _subscription(url: str, event_type: str) -> str:
    answer = httpx.post(
        f"{url}/subscriptions",
        json={
            "owning_application": "bench",
            "event_types": [event_type],
            "consumer_group": f"bench-{uuid.uuid4().hex[:8]}",
            "read_from": "begin",
        },
        timeout=60,
    )
    answer.raise_for_status()
    return str(answer.json()["id"])


# The stream parameters of both readers of a subscription, ours and the bare loop. A
# partition's last batch, short of batch_limit, goes out at the flush timeout: 1 s, not
# Nakadi's 30, which would be most of a small run.
STREAM: dict[str, Any] = {
    "batch_limit": BATCH_LIMIT,
    "max_uncommitted_events": MAX_UNCOMMITTED,
    "stream_limit": EVENTS,
    "batch_flush_timeout": 1,
}


def _bare_subscription(url: str, subscription_id: str) -> float:
    """Events/s of a bare httpx loop: each batch line parsed, its cursor committed."""
    received = 0
    started = time.perf_counter()
    with (
        httpx.Client(base_url=url, timeout=60) as client,
        client.stream(
            "GET",
            f"/subscriptions/{subscription_id}/events",
            params=STREAM,
            headers={"Accept-Encoding": "identity"},
        ) as response,
    ):
        stream_id = response.headers["X-Nakadi-StreamId"]
        for line in response.iter_lines():
            batch = orjson.loads(line)
            if not batch.get("events"):
                continue
            received += len(batch["events"])
            committed = client.post(
                f"/subscriptions/{subscription_id}/cursors",
                json={"items": [batch["cursor"]]},
                headers={"X-Nakadi-StreamId": stream_id},
            )
            committed.raise_for_status()
    assert received == EVENTS, f"the stream delivered {received} events, expected {EVENTS}"
    return received / (time.perf_counter() - started)


def _ours_subscription(url: str, subscription_id: str) -> float:
    """Events/s of ``Subscription.run`` with a handler that counts."""
    received = 0
    consumer = Subscription(url, subscription_id, **STREAM)

    def handle(batch: EventBatch) -> None:
        nonlocal received
        received += len(batch.events)
        if received >= EVENTS:
            consumer.stop()

    started = time.perf_counter()
    with consumer:
        consumer.run(handle)
    return received / (time.perf_counter() - started)


def _subscription_figures() -> list[Figure]:
    with broker_with_event_type("client") as broker:
        print(f"filling {EVENTS:,} events", flush=True)
        _fill(broker.bootstrap, broker.topic, EVENTS)
        ours: list[float] = []
        bare: list[float] = []
        raw: list[float] = []
        for _ in range(REPEATS):
            bare.append(
                _bare_subscription(broker.url, _subscription(broker.url, broker.event_type))
            )
            ours.append(
                _ours_subscription(broker.url, _subscription(broker.url, broker.event_type))
            )
            raw.append(_raw_group(broker.bootstrap, broker.topic, EVENTS))
    what = (
        f"Subscription 1 KB events/s, {PARTITIONS} partitions, commit per {BATCH_LIMIT}-event batch"
    )
    baselines = {
        "bare httpx loop, each line parsed, commit per batch": bare,
        "raw confluent-kafka group, sync commit per batch": raw,
    }
    return [
        Figure(
            NAME,
            what,
            statistics.median(ours),
            "events/s",
            baseline=statistics.median(rates),
            baseline_name=name,
        )
        for name, rates in baselines.items()
    ]


def main() -> int:
    report(_change_feed_figures() + _subscription_figures())
    return 0


if __name__ == "__main__":
    sys.exit(main())
