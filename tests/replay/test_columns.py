"""The replay's columns from the bridge's schemas: each column's Postgres type as the catalog
has it, read from the ``x-pg-type`` annotation, and from the description of an event type
created before the keyword."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from changebroker import pg_types
from changebroker.bridge import tables
from changebroker.replay.columns import Column, union_columns

# One column of every type the table lists, declared as format_type() names it (a type
# that takes a modifier gets its default one: "character" is character(1)), and a typmod.
EVERY_TYPE = "CREATE TABLE every_type (id bigint PRIMARY KEY, amount numeric(12,2) NOT NULL, {})"


async def _described(dsn: str) -> tables.Table:
    columns = ", ".join(f"c{t.oid} {t.name}" for t in pg_types.TYPES)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(EVERY_TYPE.format(columns))
        table = await tables.describe(conn, "public.every_type")
    assert table is not None
    return table


def _old_form(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as the bridge wrote it before the keyword: the type in the description."""
    properties = {
        name: {k: v for k, v in prop.items() if k != "x-pg-type"}
        for name, prop in schema["properties"].items()
    }
    return {**schema, "properties": properties}


@pytest.mark.parametrize("form", ["x-pg-type", "description"])
def test_every_type_reads_back_as_the_catalog_has_it(pg_dsn: str, form: str) -> None:
    table = asyncio.run(_described(pg_dsn))
    schema = tables.json_schema(table, {}, None)
    if form == "description":
        schema = _old_form(schema)
    assert all(
        ("x-pg-type" in prop) == (form == "x-pg-type") for prop in schema["properties"].values()
    )
    read = union_columns([schema])
    assert [(c.name, c.pg_type, c.type_oid, c.nullable) for c in read] == [
        (c.name, c.type_name, c.oid, c.nullable) for c in table.columns
    ]
    assert read[1] == Column("amount", "numeric(12,2)", pg_types.NUMERIC.oid, False)


def test_the_keyword_names_the_type_whatever_the_description_says() -> None:
    schema = {
        "properties": {
            "total": {
                "description": "the order's total, in euros",
                "x-pg-type": "numeric(12,2)",
                "type": ["string", "null"],
            },
            "moved": {
                "description": "bigint",
                "x-pg-type": "type 1184",
                "type": ["string", "null"],
            },
        }
    }
    assert union_columns([schema]) == [
        Column("total", "numeric(12,2)", 1700, True),
        Column("moved", "type 1184", 1184, True),
    ]


def test_an_event_type_created_before_the_keyword_keeps_its_columns() -> None:
    """Versions as the bridge wrote them before ``x-pg-type``, then one retyping a column
    with it: each version read in its own form, the latest declaration winning."""
    before: dict[str, Any] = {
        "type": "object",
        "properties": {
            "id": {"description": "integer", "type": "integer"},
            "amount": {
                "description": "numeric(12,2), as a string, every digit kept",
                "type": ["string", "null"],
            },
            "at": {
                "description": "timestamp with time zone, RFC 3339 with offset",
                "type": ["string", "null"],
            },
            "doc": {"description": "jsonb"},
            "mood": {"description": "mood", "type": ["string", "null"]},
            "gone": {"description": "dropped: text", "type": ["string", "null"]},
        },
        "required": ["id"],
    }
    after = {
        **before,
        "properties": {
            **before["properties"],
            "id": {"description": "bigint", "x-pg-type": "bigint", "type": "integer"},
        },
    }
    assert union_columns([before]) == [
        Column("id", "integer", 23, False),
        Column("amount", "numeric(12,2)", 1700, True),
        Column("at", "timestamp with time zone", 1184, True),
        Column("doc", "jsonb", 3802, True),
        Column("mood", "mood", None, True),
    ]
    assert union_columns([before, after])[0] == Column("id", "bigint", 20, False)
