"""TRUNCATE, DROP TABLE, CREATE TABLE and ALTER TABLE as the bridge publishes them: a table
event in every partition ends earlier rows, a dropped table's unit ends, a table created and
filled while the bridge runs is published once, a redefined table is snapshotted again.
(With writers, the replay, subscriptions and transicator's readers: tests/replay/test_ddl.py.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest

from changebroker.bridge import snapshot_runs
from changebroker.bridge.table_events import TABLE_EVENT_KEY
from changebroker.stack.processes import wait_until
from tests.support.bridge_stack import Rebuilt, Stack, rebuilding

TABLE = "public.things"
CREATE = (
    "CREATE TABLE things (id int PRIMARY KEY, n int, note text);"
    " ALTER TABLE things REPLICA IDENTITY FULL"
)


def _events(rebuilt: Rebuilt, table: str = TABLE) -> list[dict[str, Any]]:
    rebuilt.drain()
    return [e for e in rebuilt.events if e.get("data_type") == table]


def _table_events(rebuilt: Rebuilt, table: str = TABLE) -> list[dict[str, Any]]:
    return [e for e in _events(rebuilt, table) if e["data_op"] == "D" and e["data"] == {}]


def _schema(stack: Stack, table: str = TABLE) -> dict[str, Any]:
    body = httpx.get(f"{stack.broker_url}/event-types/{stack.event_type(table)}", timeout=10)
    schema: dict[str, Any] = json.loads(body.json()["schema"]["schema"])
    return schema


def _equal(rebuilt: Rebuilt, table: str = TABLE) -> Callable[[], bool]:
    return lambda: rebuilt.equals_database([table])


def test_a_truncate_is_a_table_event_in_every_partition(stack: Stack, rebuilt: Rebuilt) -> None:
    stack.sql(CREATE)
    stack.sql("INSERT INTO things SELECT i, i, 'before' FROM generate_series(1, 50) i")
    stack.start_bridge()
    wait_until(_equal(rebuilt), timeout=60, what="the rows")
    stack.sql(
        "BEGIN; UPDATE things SET note = 'gone' WHERE id < 10; TRUNCATE things;"
        " INSERT INTO things VALUES (7, 7, 'after'); COMMIT"
    )
    wait_until(lambda: len(_table_events(rebuilt)) == 3, timeout=60, what="the table events")
    wait_until(_equal(rebuilt), timeout=60, what="the table after the truncate")
    assert rebuilt.tables[TABLE] == {(7,): {"id": 7, "n": 7, "note": "after"}}
    ended = _table_events(rebuilt)
    assert sorted(int(e["metadata"]["partition"]) for e in ended) == [0, 1, 2]
    assert {e["metadata"]["flow_id"] for e in ended} == {"truncate"}
    assert {rebuilt.record_keys[e["metadata"]["eid"]] for e in ended} == {TABLE_EVENT_KEY}
    # In each partition's order: the updates before it, the insert after it.
    for partition in ("0", "1", "2"):
        ops = [
            (e["data_op"], e["data"].get("note"))
            for e in _events(rebuilt)
            if e["metadata"]["partition"] == partition
        ]
        end = ops.index(("D", None))
        assert ("U", "gone") not in ops[end:] and ("C", "after") not in ops[:end]
    assert len([e for e in _events(rebuilt) if e["data_op"] == "U"]) == 9
    assert rebuilt.duplicate_eids() == []


def test_a_dropped_table_s_unit_ends_and_a_new_one_starts_anew(
    stack: Stack, rebuilt: Rebuilt
) -> None:
    stack.sql(CREATE)
    stack.sql("INSERT INTO things SELECT i, i, 'old' FROM generate_series(1, 20) i")
    stack.start_bridge()
    wait_until(_equal(rebuilt), timeout=60, what="the rows")
    # Dropped and created again in one transaction, with other columns.
    stack.sql(
        "BEGIN; DROP TABLE things; CREATE TABLE things (id int PRIMARY KEY, label text);"
        " INSERT INTO things VALUES (1, 'new'); COMMIT"
    )
    wait_until(_equal(rebuilt), timeout=60, what="the new table")
    assert rebuilt.tables[TABLE] == {(1,): {"id": 1, "label": "new"}}
    assert {e["metadata"]["flow_id"] for e in _table_events(rebuilt)} == {"drop"}
    assert stack.status()["units"][TABLE]["snapshot"]["created"]

    stack.sql("DROP TABLE things")
    wait_until(lambda: len(_table_events(rebuilt)) == 6, timeout=60, what="the second drop")
    wait_until(lambda: TABLE not in stack.status()["units"], timeout=30, what="the unit's end")
    # The event type stays, for its retention, marked.
    assert "was dropped" in _schema(stack)["description"]
    assert rebuilt.duplicate_eids() == []


def test_a_table_created_and_filled_while_the_bridge_runs_is_published_once(
    stack: Stack, rebuilt: Rebuilt, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The catalog is looked at all the time: a look that sees a table before the stream
    # brought its CREATE must not snapshot it.
    monkeypatch.setattr(snapshot_runs, "DISCOVER_EVERY", 0.05)
    stack.start_bridge()
    rows, loads = 5000, 4
    for load in range(loads):
        stack.sql("DROP TABLE IF EXISTS things")
        stack.sql(CREATE)
        stack.sql(
            "INSERT INTO things SELECT i, i, %s FROM generate_series(1, %s) i",
            (f"load {load}", rows),
        )
        wait_until(_equal(rebuilt), timeout=120, what=f"load {load}")
    events = [e for e in _events(rebuilt) if e["data"]]
    assert len(events) == loads * rows and {e["data_op"] for e in events} == {"C"}
    assert len(_table_events(rebuilt)) == (loads - 1) * 3  # a drop in each partition
    assert stack.status()["units"][TABLE]["snapshot"]["rows_read"] == 0
    # Dropped and created again faster than the bridge reads: the catalog, ahead of the
    # stream, does not make it doubt a CREATE it reads (a table gone by then was complete).
    for load in range(3):
        stack.sql("DROP TABLE things")
        stack.sql(CREATE)
        stack.sql("INSERT INTO things SELECT i, i, %s FROM generate_series(1, 100) i", (load,))
    wait_until(_equal(rebuilt), timeout=120, what="the last quick load")
    assert "S" not in {e["data_op"] for e in _events(rebuilt)}
    assert rebuilt.duplicate_eids() == []


def test_a_table_dropped_during_its_snapshot_leaves_no_run_running(
    make_stack: Callable[[str], Stack], kafka_bootstrap: str, pg_dsn: str
) -> None:
    # Filled before the changeserver began: its rows need a snapshot.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(CREATE)
        conn.execute("INSERT INTO things SELECT i, i, 'x' FROM generate_series(1, 50000) i")
    stack = make_stack(kafka_bootstrap)
    with rebuilding(stack) as rebuilt:
        stack.start_bridge(snapshot_chunk=500)
        wait_until(
            lambda: (
                (stack.status()["units"].get(TABLE, {}).get("snapshot") or {}).get("rows_read", 0)
                > 0
            ),
            timeout=60,
            what="the snapshot under way",
        )
        assert stack.status()["units"][TABLE]["snapshot"]["state"] == "running"
        stack.sql("DROP TABLE things")
        wait_until(lambda: TABLE not in stack.status()["units"], timeout=60, what="the unit's end")
        metrics = httpx.get(f"{stack.bridge_url}/metrics", timeout=10).text
        assert f'changebroker_bridge_snapshot_running{{unit="{TABLE}"}}' not in metrics
        wait_until(lambda: len(_table_events(rebuilt)) == 3, timeout=60, what="the drop")
        assert rebuilt.tables.get(TABLE, {}) == {}
        assert rebuilt.duplicate_eids() == []


def test_a_renamed_column_is_marked_dropped_and_every_row_published_again(
    stack: Stack, rebuilt: Rebuilt
) -> None:
    stack.sql(CREATE)
    stack.sql("INSERT INTO things SELECT i, i, 'note ' || i FROM generate_series(1, 30) i")
    stack.start_bridge()
    wait_until(_equal(rebuilt), timeout=60, what="the rows")
    stack.sql("ALTER TABLE things RENAME COLUMN note TO memo")
    stack.sql("ALTER TABLE things ALTER COLUMN n SET DEFAULT 0")  # changes no row: no run
    wait_until(
        lambda: len([e for e in _events(rebuilt) if e["data_op"] == "S"]) == 30,
        timeout=60,
        what="every row again",
    )
    wait_until(_equal(rebuilt), timeout=60, what="the rows under the new name")
    assert all(set(row) == {"id", "n", "memo"} for row in rebuilt.tables[TABLE].values())
    properties = _schema(stack)["properties"]
    assert properties["note"]["description"].startswith("dropped: text")
    assert properties["memo"]["description"] == "text"
    assert stack.status()["units"][TABLE]["snapshot"]["state"] == "done"
    assert rebuilt.duplicate_eids() == []
