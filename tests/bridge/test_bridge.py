"""End to end: row changes become data-change events exactly once, tables rebuild from them."""

from __future__ import annotations

import base64
import json

import httpx
import psycopg
from confluent_kafka import Producer

from changebroker import kafka
from changebroker.stack.processes import wait_until
from tests.broker.subscription_support import Stream, commit, create
from tests.support.bridge_stack import Rebuilt, Stack

TABLES = """
CREATE TABLE items (
    id int PRIMARY KEY,
    name text NOT NULL,
    price numeric(30, 10),
    seen timestamptz,
    doc jsonb,
    raw bytea,
    ratio double precision,
    active boolean,
    _change_selector text DEFAULT 'bridge'
);
CREATE TABLE lines (
    order_id bigint,
    line int,
    qty int NOT NULL,
    _change_selector text DEFAULT 'bridge',
    PRIMARY KEY (order_id, line)
);
-- Deletes carry the old row, selector included (DEFAULT would send the key alone, no selector).
ALTER TABLE items REPLICA IDENTITY FULL;
ALTER TABLE lines REPLICA IDENTITY FULL;
"""


def test_changes_become_events_and_tables_rebuild(stack: Stack, rebuilt: Rebuilt) -> None:
    stack.sql(TABLES)
    stack.start_bridge()
    stack.sql(
        "INSERT INTO items VALUES (1, 'one', 12345678901234567890.0123456789,"
        " '2026-11-23 04:05:06.789+02', '{\"a\": [1, 2.5, null]}', '\\x00ff10', 0.1, true)"
    )
    with psycopg.connect(stack.app_dsn) as conn:  # one transaction, several tables
        for i in range(2, 40):
            conn.execute("INSERT INTO items (id, name) VALUES (%s, %s)", (i, f"n{i}"))
            conn.execute("INSERT INTO lines VALUES (%s, 1, %s)", (i, i))
    stack.sql("UPDATE items SET name = 'renamed', doc = 'null' WHERE id % 3 = 0")
    stack.sql("DELETE FROM items WHERE id % 5 = 0")
    stack.sql("UPDATE lines SET line = 2 WHERE order_id < 10")  # the key changes
    stack.sql("DELETE FROM lines WHERE order_id % 7 = 0")
    stack.sql("INSERT INTO items (id, name) VALUES (5, 'back')")  # deleted, then again

    tables = ["public.items", "public.lines"]
    wait_until(lambda: rebuilt.equals_database(tables), timeout=60, what="rebuilt tables")
    assert rebuilt.duplicate_eids() == []

    first = next(e for e in rebuilt.events if e["data"].get("id") == 1 and e["data_op"] == "C")
    assert first["data_type"] == "public.items"
    assert first["metadata"]["event_type"] == stack.event_type("public.items")
    assert first["data"] == {
        "id": 1,
        "name": "one",
        "price": "12345678901234567890.0123456789",
        "seen": "2026-11-23T02:05:06.789+00:00",
        "doc": {"a": [1, 2.5, None]},
        "raw": base64.b64encode(b"\x00\xff\x10").decode(),
        "ratio": 0.1,
        "active": True,
        "_change_selector": "bridge",
    }
    deletes = [
        e for e in rebuilt.events if e["data_type"] == "public.lines" and e["data_op"] == "D"
    ]
    # Key changes (orders 2..9) are a delete of the old key; 5 orders deleted outright.
    assert len(deletes) == 8 + 5
    # Each record's Kafka key is its row's key (a key change's delete: the old one).
    key_fields = {"public.items": ["id"], "public.lines": ["order_id", "line"]}
    for e in rebuilt.events:
        row_key = [e["data"][k] for k in key_fields[e["data_type"]]]
        expected = json.dumps(row_key, separators=(",", ":")).encode()
        assert rebuilt.record_keys[e["metadata"]["eid"]] == expected, e
    status = stack.status()
    assert status["units"]["public.items"]["event_type"] == stack.event_type("public.items")
    assert status["units"]["public.items"]["lag_bytes"] == 0


def test_a_subscription_consumer_rebuilds_the_tables(stack: Stack, rebuilt: Rebuilt) -> None:
    """The same through the Nakadi API: a subscription stream, each batch committed; it serves
    committed events only."""
    stack.sql(TABLES)
    stack.start_bridge()
    with psycopg.connect(stack.app_dsn) as conn:
        for i in range(1, 30):
            conn.execute("INSERT INTO items (id, name) VALUES (%s, %s)", (i, f"n{i}"))
            conn.execute("INSERT INTO lines VALUES (%s, 1, %s)", (i, i))
    stack.sql("UPDATE items SET name = 'renamed' WHERE id % 3 = 0")
    stack.sql("DELETE FROM items WHERE id % 5 = 0")
    stack.sql("UPDATE lines SET qty = qty * 2 WHERE order_id % 2 = 0")
    stack.sql("DELETE FROM lines WHERE order_id % 7 = 0")
    tables = ["public.items", "public.lines"]
    wait_until(lambda: rebuilt.equals_database(tables), timeout=60, what="committed events")

    # A crashed bridge's open transaction, aborted when the next one fenced it: its copy of
    # an event must never reach a subscription.
    topic = next(iter(rebuilt.keys))
    crashed = Producer(kafka.producer_config(stack.kafka_bootstrap, **{"transactional.id": topic}))
    crashed.init_transactions(30)
    crashed.begin_transaction()
    crashed.produce(topic, json.dumps(rebuilt.events[0]).encode(), partition=0)
    crashed.flush(30)
    crashed.abort_transaction(30)

    with httpx.Client(base_url=stack.broker_url, timeout=60) as client:
        names = [stack.event_type(t) for t in tables]
        keys = {n: client.get(f"/event-types/{n}").json()["partition_key_fields"] for n in names}
        subscription = create(client, names, read_from="begin")
        through_api = Rebuilt(stack)
        stream = Stream(client, subscription["id"], batch_flush_timeout=1, batch_limit=50)
        try:
            # Each batch committed as it comes: at most max_uncommitted_events (10) are sent
            # before a commit.
            seen = 0
            while seen < len(rebuilt.events):
                (batch,) = stream.read_events(1)
                seen += len(batch["events"])
                for event in batch["events"]:
                    name = event["metadata"]["event_type"]
                    through_api.apply(event, sorted(keys[name]), batch["cursor"]["partition"])
                answer = commit(client, subscription["id"], stream.id, [batch["cursor"]])
                assert answer.status_code in (200, 204), answer.text
        finally:
            stream.close()
    for table in tables:
        assert through_api.tables[table] == rebuilt.tables[table]
    assert through_api.duplicate_eids() == []
