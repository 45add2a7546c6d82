"""The edges: an event type with no events at all, partitions nothing was written to, a table
whose every row was deleted, a run with nothing new, and a table without a primary key,
which is refused by name."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.sql import SparkSession

from changebroker import cli
from changebroker.bridge.event_types import data_event_type
from changebroker.bridge.tables import Table
from changebroker.replay import run_replay
from changebroker.replay.columns import NoPrimaryKey
from changebroker.stack.processes import wait_until
from tests.support.bridge_stack import Stack, rebuilding
from tests.support.replay_snapshots import snapshot_tables

pytestmark = pytest.mark.spark

SCHEMA = """
CREATE TABLE gone (id int PRIMARY KEY, v text, _change_selector text DEFAULT 'bridge');
CREATE TABLE kept (id int PRIMARY KEY, v text, _change_selector text DEFAULT 'bridge');
ALTER TABLE gone REPLICA IDENTITY FULL;
ALTER TABLE kept REPLICA IDENTITY FULL;
INSERT INTO gone VALUES (1, 'a'), (2, 'b'), (3, 'c');
INSERT INTO kept VALUES (1, 'stays');
DELETE FROM gone;
"""


def _data_event_type(stack: Stack, table: str, key: list[str]) -> str:
    """The bridge's data event type of ``table``: hash on ``key``, or, without one, a single
    ``random`` partition (what an older bridge made of a table without a primary key)."""
    name = stack.event_type(table)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"id": {"description": "bigint", "type": "integer"}},
    }
    if key:
        schema["required"] = key
    body = data_event_type(name, Table(table, (), tuple(key)), schema, 2)
    response = httpx.post(f"{stack.broker_url}/event-types", json=body, timeout=30)
    assert response.status_code == 201, response.text
    return name


def test_empty_topics_deleted_tables_and_a_refused_table_without_a_key(
    stack: Stack, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "snapshots"
    never = _data_event_type(stack, "public.never", ["id"])
    _data_event_type(stack, "public.nokey", [])
    stack.sql(SCHEMA)
    stack.start_bridge()
    with rebuilding(stack) as rebuilt:
        wait_until(
            lambda: rebuilt.equals_database(["public.gone", "public.kept"]),
            timeout=60,
            what="the bridge to publish every table",
        )
    options = stack.replay_options(out)
    said: list[str] = []
    first = run_replay(options, spark, say=said.append)
    assert first.duration_seconds is not None and first.duration_seconds > 0
    assert sorted(first.tables) == ["public.gone", "public.kept", "public.never"]
    assert any("public.nokey" in line and "no primary key" in line for line in said), said
    assert {t: e.rows for t, e in first.tables.items()} == {
        "public.gone": 0,
        "public.kept": 1,
        "public.never": 0,
    }
    assert first.cursors[never] == [
        {"partition": "0", "offset": "001-0001--1"},
        {"partition": "1", "offset": "001-0001--1"},
    ]
    tables = snapshot_tables(spark, first)
    assert tables["public.gone"] == {} and tables["public.never"] == {}
    assert tables["public.kept"] == {(1,): {"id": 1, "v": "stays", "_change_selector": "bridge"}}

    # Nothing new: the next snapshot continues from this one and holds the same.
    second = run_replay(options, spark, say=said.append)
    assert second.base_snapshot_id == first.snapshot_id
    assert second.cursors == first.cursors
    assert snapshot_tables(spark, second) == tables

    # Named, the table without a key is refused, naming it (before any Spark work).
    with pytest.raises(NoPrimaryKey, match=r"public\.nokey"):
        run_replay(dataclasses.replace(options, tables=("public.nokey",)), spark)
    code = cli.main(
        [
            "replay", "--tables", "nokey", "--broker-url", stack.broker_url,
            "--kafka-bootstrap", stack.kafka_bootstrap, "--out", str(out),
            "--prefix", stack.prefix,
        ]
    )  # fmt: skip
    assert code == 2
    assert "table public.nokey" in capsys.readouterr().err
