"""The outbox: committed inserts become events of their event type in commit order per key;
rolled-back inserts publish nothing; deletes publish nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import psycopg

from changebroker.stack.processes import wait_until
from tests.support.bridge_stack import Rebuilt, Stack


def test_outbox_inserts_become_events_in_order_per_key(stack: Stack, rebuilt: Rebuilt) -> None:
    stack.start_bridge()  # applies sql/outbox to the application database
    name = f"{stack.prefix}.order-placed"
    created = httpx.post(
        f"{stack.broker_url}/event-types",
        json={
            "name": name,
            "owning_application": "shop",
            "category": "business",
            "partition_strategy": "random",
            "enrichment_strategies": ["metadata_enrichment"],
            "default_statistic": {
                "messages_per_minute": 100,
                "message_size": 100,
                "read_parallelism": 3,
                "write_parallelism": 3,
            },
            "schema": {
                "type": "json_schema",
                "schema": json.dumps(
                    {
                        "properties": {"order": {"type": "string"}, "n": {"type": "integer"}},
                        "required": ["order", "n"],
                    }
                ),
            },
        },
    )
    assert created.status_code == 201, created.text
    insert = (
        "INSERT INTO changebroker_outbox (event_type, partition_key, payload) VALUES (%s, %s, %s)"
    )
    with psycopg.connect(stack.app_dsn) as conn:
        for n in range(30):
            order = f"o{n % 4}"
            conn.execute(insert, (name, order, json.dumps({"order": order, "n": n})))
            if n % 5 == 4:
                conn.rollback()  # the last few inserts never happened
            elif n % 3 == 0:
                conn.execute("DELETE FROM changebroker_outbox")  # the app cleans up at once
                conn.commit()
            else:
                conn.commit()
    committed = [n for n in range(30) if n % 5 != 4]

    def outbox_events() -> list[dict[str, Any]]:
        rebuilt.drain()
        return [e for e in rebuilt.events if e["metadata"]["event_type"] == name]

    wait_until(lambda: len(outbox_events()) >= len(committed), timeout=30, what="outbox events")
    events = outbox_events()
    assert sorted(e["n"] for e in events) == committed
    by_key: dict[str, list[int]] = {}
    partitions: dict[str, set[str]] = {}
    for event in events:
        by_key.setdefault(event["order"], []).append(event["n"])
        partitions.setdefault(event["order"], set()).add(event["metadata"]["partition"])
    # The consumer reads partition by partition: each key's events in commit order.
    assert all(ns == sorted(ns) for ns in by_key.values()), by_key
    # Under partition_strategy random, the row's partition_key keeps a key in one partition.
    assert all(len(p) == 1 for p in partitions.values()), partitions
