"""The bridge validates only what can differ from the schema it set for a table: whenever its
check lets an event through unvalidated, full validation would have accepted it too."""

from __future__ import annotations

import itertools
from typing import Any

from changebroker import kafka, pg_types
from changebroker.bridge import tables, values
from changebroker.bridge.data_events import eid
from changebroker.bridge.event_types import (
    CLEANUP_POLICY,
    COMPATIBILITY_MODE,
    OwnSchema,
    Published,
)
from changebroker.broker.event_types import effective_schema
from changebroker.broker.event_types.effective_schema import EventValidator
from changebroker.broker.event_types.store import Revision
from changebroker.broker.publishing.pipeline import Target

TABLE = tables.Table(
    "public.orders",
    (
        tables.Column("id", pg_types.INT8.oid, "bigint", False),
        tables.Column("name", 25, "text", False),
        tables.Column("amount", pg_types.NUMERIC.oid, "numeric", True),
        tables.Column("doc", pg_types.JSONB.oid, "jsonb", True),
        tables.Column("paid", pg_types.BOOL.oid, "boolean", True),
    ),
    ("id",),
)
SCHEMA = tables.json_schema(TABLE, {}, None)
# Each column's values as the changeserver sends them, NULL among them.
TEXTS: dict[str, list[str | None]] = {
    "id": ["42", None],
    "name": ["x", None],
    "amount": ["1.50", None],
    "doc": ['{"a": 1}', "null", None],
    "paid": ["true", None],
}
OIDS = {column.name: column.oid for column in TABLE.columns}


def _event(data: dict[str, Any]) -> dict[str, Any]:
    metadata = {"eid": eid("public.orders/1"), "occurred_at": "2026-11-28T10:00:00Z"}
    return {"metadata": metadata, "data_op": "U", "data_type": TABLE.name, "data": data}


def _rows() -> list[dict[str, Any]]:
    """Every combination of values, and of columns left out (a key-only old row, an
    unchanged TOAST value)."""
    rows = []
    for chosen in itertools.product(*TEXTS.values()):
        texts = zip(TEXTS, chosen, strict=True)
        row = {name: values.to_json(text, OIDS[name]) for name, text in texts}
        rows.append(row)
        rows.append({k: v for k, v in row.items() if k != "name"})
        rows.append({k: v for k, v in row.items() if k != "id"})
    return rows


def test_an_event_the_check_lets_through_is_one_full_validation_accepts() -> None:
    own = OwnSchema.of(SCHEMA, TABLE.key)
    validator = EventValidator(
        effective_schema.build("data", SCHEMA, COMPATIBILITY_MODE, CLEANUP_POLICY)
    )
    verdicts = {True: 0, False: 0}
    for row in _rows():
        admitted = own.admits(row)
        verdicts[admitted] += 1
        # For this table the check is exact: what it refuses, validation refuses.
        assert admitted == (validator.first_error(_event(row)) is None), row
    assert verdicts[True] and verdicts[False]


def test_a_null_where_the_catalog_said_not_null_or_a_missing_key_is_validated() -> None:
    own = OwnSchema.of(SCHEMA, TABLE.key)
    assert own.admits({"id": 1, "name": "x", "amount": None, "doc": None, "paid": None})
    assert not own.admits({"id": 1, "name": None})
    assert not own.admits({"name": "x"})


def _target(user_schema: dict[str, Any], mode: str, cleanup_policy: str) -> Target:
    schema = effective_schema.build("data", user_schema, mode, cleanup_policy)
    return Target(
        name="orders",
        revision=Revision("orders", 1),
        topic="orders",
        cluster=kafka.Cluster("127.0.0.1:9092"),
        partitions=1,
        category="data",
        partition_strategy="hash",
        key_fields=("id",),
        enriched=True,
        compacted=cleanup_policy == "compact",
        version="1.0.0",
        validator=EventValidator(schema),
    )


def test_events_are_checked_only_under_the_schema_the_bridge_declared() -> None:
    declared = _target(SCHEMA, COMPATIBILITY_MODE, CLEANUP_POLICY)
    assert Published.of(declared, SCHEMA).own == OwnSchema.of(SCHEMA, TABLE.key)
    # Changed by hand since, or under a mode or policy that makes the schema stricter.
    stricter = {**SCHEMA, "required": ["id", "name"]}
    for target in (
        _target(stricter, COMPATIBILITY_MODE, CLEANUP_POLICY),
        _target(SCHEMA, "compatible", CLEANUP_POLICY),
        _target(SCHEMA, COMPATIBILITY_MODE, "compact"),
    ):
        assert Published.of(target, SCHEMA).own is None
