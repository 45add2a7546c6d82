"""Keyed records: the replay takes each record key's last event alone only where it stands for
the key's whole history. Hand-made histories (keyed, keyless and mixed; updates that omit a
column; key changes; a base snapshot) give the same snapshot as the same events without keys,
which are all compacted the exact way, and as what the events mean."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from changebroker import kafka
from changebroker.bridge.data_events import record_key
from changebroker.bridge.event_types import data_event_type
from changebroker.bridge.tables import Table
from changebroker.replay import run_replay
from tests.support.bridge_stack import Stack
from tests.support.replay_snapshots import Rows, snapshot_tables

pytestmark = pytest.mark.spark

PARTITIONS = 2
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"description": "bigint", "type": "integer"},
        "v": {"description": "text", "type": ["string", "null"]},
        "n": {"description": "integer", "type": ["integer", "null"]},
    },
    "required": ["id"],
}

# (op, data, keyed): keyed False is a record an older bridge wrote, without a key. A ``D``
# carries the key only (REPLICA IDENTITY DEFAULT); a ``U`` without ``v`` left it unchanged.
FIRST: list[tuple[str, dict[str, Any], bool]] = [
    # 1: keyless history, then a keyed update omitting v: v comes from the keyless insert.
    ("C", {"id": 1, "v": "one", "n": 1}, False),
    ("U", {"id": 1, "n": 11}, True),
    # 2: keyless insert, keyed whole update: the update alone.
    ("C", {"id": 2, "v": "two", "n": 2}, False),
    ("U", {"id": 2, "v": "deux", "n": 22}, True),
    # 3: keyed history ending in an update omitting v: v from the insert.
    ("C", {"id": 3, "v": "three", "n": 3}, True),
    ("U", {"id": 3, "v": "drei", "n": 33}, True),
    ("U", {"id": 3, "n": 333}, True),
    # 4: deleted.
    ("C", {"id": 4, "v": "four", "n": 4}, True),
    ("U", {"id": 4, "v": "vier", "n": 44}, True),
    ("D", {"id": 4}, True),
    # 5: a whole update that sets v to null: null, not the earlier value.
    ("C", {"id": 5, "v": "five", "n": 5}, True),
    ("U", {"id": 5, "v": None, "n": 55}, True),
    # 6 -> 7: a key change (the old key's delete, then the row under the new key).
    ("C", {"id": 6, "v": "six", "n": 6}, True),
    ("D", {"id": 6}, True),
    ("U", {"id": 7, "v": "six", "n": 7}, True),
    # 8 -> 9: a key change whose update omits v: no earlier event of 9 carries it.
    ("C", {"id": 8, "v": "eight", "n": 8}, True),
    ("D", {"id": 8}, True),
    ("U", {"id": 9, "n": 9}, True),
    # 10: keyed, then keyless (written after the keyed ones), omitting v.
    ("C", {"id": 10, "v": "ten", "n": 10}, True),
    ("U", {"id": 10, "n": 1010}, False),
    # 11: deleted, inserted again.
    ("C", {"id": 11, "v": "eleven", "n": 11}, True),
    ("D", {"id": 11}, True),
    ("C", {"id": 11, "v": "again", "n": 111}, True),
]
# Onto the first snapshot: updates omitting v take it from the base's row.
SECOND: list[tuple[str, dict[str, Any], bool]] = [
    ("U", {"id": 2, "n": 222}, True),
    ("U", {"id": 3, "v": "last", "n": 3333}, True),
    ("U", {"id": 7, "n": 77}, True),
    ("D", {"id": 1}, True),
    ("C", {"id": 12, "v": "twelve", "n": 12}, True),
]


def _row(id: int, v: str | None, n: int | None) -> tuple[tuple[int], dict[str, Any]]:
    return (id,), {"id": id, "v": v, "n": n}


EXPECTED_FIRST: Rows = dict(
    [
        _row(1, "one", 11),
        _row(2, "deux", 22),
        _row(3, "drei", 333),
        _row(5, None, 55),
        _row(7, "six", 7),
        _row(9, None, 9),
        _row(10, "ten", 1010),
        _row(11, "again", 111),
    ]
)
EXPECTED_SECOND: Rows = dict(
    [
        _row(2, "deux", 222),
        _row(3, "last", 3333),
        _row(5, None, 55),
        _row(7, "six", 77),
        _row(9, None, 9),
        _row(10, "ten", 1010),
        _row(11, "again", 111),
        _row(12, "twelve", 12),
    ]
)


def event_type(stack: Stack, table: str) -> tuple[str, str]:
    """The bridge's data event type of ``table``; its name and topic."""
    name = stack.event_type(table)
    body = data_event_type(name, Table(table, (), ("id",)), SCHEMA, PARTITIONS)
    response = httpx.post(f"{stack.broker_url}/event-types", json=body, timeout=30)
    assert response.status_code == 201, response.text
    timelines = httpx.get(f"{stack.broker_url}/event-types/{name}/timelines", timeout=30)
    return name, str(timelines.json()[0]["topic"])


def produce(
    stack: Stack, topic: str, table: str, events: list[tuple[str, dict[str, Any], bool]],
    keys: bool, bootstrap: str | None = None,
) -> None:  # fmt: skip
    """The events in order, one partition per row key; keyed where ``keys`` and the event
    says so; into the stack's Kafka, or the one at ``bootstrap``."""
    producer = Producer(kafka.producer_config(bootstrap or stack.kafka_bootstrap))
    for i, (op, data, keyed) in enumerate(events):
        value = {
            "metadata": {
                "eid": f"00000000-0000-5000-8000-{i:012d}",
                "occurred_at": "2026-01-01T00:00:00Z",
            },
            "data_op": op,
            "data_type": table,
            "data": data,
        }
        key = record_key(data, ("id",)) if keys and keyed else None
        partition = data["id"] % PARTITIONS
        producer.produce(topic, json.dumps(value).encode(), key, partition=partition)
    assert producer.flush(30) == 0


def test_last_keyed_event_alone_only_where_it_stands_for_the_history(
    stack: Stack, spark: SparkSession, tmp_path: Path
) -> None:
    tables = {"public.keyed": True, "public.keyless": False}
    topics = {table: event_type(stack, table) for table in tables}
    for table, keys in tables.items():
        produce(stack, topics[table][1], table, FIRST, keys)
    event_types = tuple(name for name, _ in topics.values())
    options = stack.replay_options(tmp_path / "snapshots", event_types=event_types)
    first = snapshot_tables(spark, run_replay(options, spark))
    assert first == {"public.keyed": EXPECTED_FIRST, "public.keyless": EXPECTED_FIRST}

    for table, keys in tables.items():
        produce(stack, topics[table][1], table, SECOND, keys)
    second = run_replay(options, spark)
    assert second.base_snapshot_id is not None
    assert snapshot_tables(spark, second) == {
        "public.keyed": EXPECTED_SECOND,
        "public.keyless": EXPECTED_SECOND,
    }
