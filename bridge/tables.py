"""A table's columns, types, nullability and primary key from the catalog, and its JSON Schema.

The changes carry each column's name and type OID but not nullability or the key, so the
bridge asks the application database. The catalog is now, a change may be older: where the
change's own type OID differs from the catalog's (the table was altered again since), the
change's type wins and the column counts as nullable.

Evolution under the event type's ``forward`` mode (old consumers must read new events):

* an added column becomes a new optional property: a MINOR version;
* a dropped (or renamed) column stays declared, its description marked ``dropped: ``
  (events stop carrying it; the replay leaves it out): removing the property would let new
  events put anything there, which old readers refuse;
* a retype within one JSON type (``int`` -> ``bigint``, ``varchar(5)`` -> ``text``) changes
  the property's description: a PATCH version; a retype to another JSON type (``text`` ->
  ``int``) or a ``DROP NOT NULL`` is refused by the mode, and the table stops (bridge.py).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg

from changebroker.bridge import values


@dataclass(frozen=True)
class Column:
    name: str
    oid: int
    type_name: str
    nullable: bool


@dataclass(frozen=True)
class Table:
    name: str  # schema.table, as the changeserver names it
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # primary key columns in key order; empty without one
    full_identity: bool = False  # REPLICA IDENTITY FULL: deletes carry the whole old row


_COLUMNS = """
SELECT a.attname, a.atttypid::int, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull
FROM pg_attribute a
WHERE a.attrelid = format('%%I.%%I', %(schema)s::text, %(table)s::text)::regclass
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_KEY = """
SELECT a.attname
FROM pg_index i
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = format('%%I.%%I', %(schema)s::text, %(table)s::text)::regclass
  AND i.indisprimary
ORDER BY k.n
"""


def split_name(name: str) -> tuple[str, str]:
    schema, _, table = name.partition(".")
    return (schema, table) if table else ("public", schema)


async def describe(
    conn: psycopg.AsyncConnection[Any], name: str, key: tuple[str, ...] = ()
) -> Table | None:
    """The table as the catalog has it now; ``None`` when it no longer exists. ``key``: the
    operator's key columns (``--key``), which stand in for the primary key."""
    schema, table = split_name(name)
    params = {"schema": schema, "table": table}
    try:
        rows = await (await conn.execute(_COLUMNS, params)).fetchall()
        primary = [r[0] for r in await (await conn.execute(_KEY, params)).fetchall()]
    except psycopg.errors.UndefinedTable:
        return None
    identity = await (
        await conn.execute(
            "SELECT relreplident FROM pg_class"
            " WHERE oid = format('%%I.%%I', %(schema)s::text, %(table)s::text)::regclass",
            params,
        )
    ).fetchone()
    columns = tuple(Column(r[0], r[1], r[2], r[3]) for r in rows)
    full = identity is not None and identity[0] == "f"
    return Table(name, columns, key or tuple(primary), full)


@dataclass(frozen=True)
class Selection:
    """Which tables the bridge publishes: ``include`` globs of ``schema.table`` (empty: every
    table), minus ``exclude`` globs, minus the product's own tables."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]
    own: frozenset[str]
    # Asked of every change: each table's verdict is worked out once (a database has few).
    _verdicts: dict[str, bool] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __call__(self, table: str) -> bool:
        verdict = self._verdicts.get(table)
        if verdict is None:
            verdict = self._verdicts[table] = self._judge(table)
        return verdict

    def _judge(self, table: str) -> bool:
        if table in self.own:
            return False
        if self.include and not any(fnmatch.fnmatchcase(table, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(table, p) for p in self.exclude)


async def published(conn: psycopg.AsyncConnection[Any], publication: str) -> list[str]:
    """The tables of ``publication`` (empty until the changeserver has created it)."""
    rows = await (
        await conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables"
            " WHERE pubname = %s ORDER BY 1",
            (publication,),
        )
    ).fetchall()
    return [r[0] for r in rows]


def refusal(table: Table) -> str | None:
    """Why the bridge cannot publish ``table``; ``None`` when it can."""
    if not table.key:
        return (
            f"{table.name} has no primary key: add one, or name its key columns with"
            f" --key {table.name}=col1,col2 (and make it REPLICA IDENTITY FULL)"
        )
    columns = {c.name: c for c in table.columns}
    missing = [k for k in table.key if k not in columns]
    if missing:
        return f"--key of {table.name} names columns it does not have: {', '.join(missing)}"
    nullable = [k for k in table.key if columns[k].nullable]
    if nullable:
        # A NULL key cannot be ordered past in chunks, nor told apart from another row.
        return f"--key columns of {table.name} must be NOT NULL: {', '.join(nullable)}"
    return None


def json_schema(
    table: Table,
    row_types: Mapping[str, int],
    previous: Mapping[str, Any] | None,
    catalog: bool = True,
) -> dict[str, Any]:
    """The schema of ``data``: ``row_types`` (column -> OID) from the change at hand win over
    the catalog; properties ``previous`` declared and the table no longer has stay, marked
    dropped (``catalog``: ``table`` is the catalog's, not a stand-in for a table gone).

    ``data`` is a row, whose key is required, or ``{}``: a table event (TRUNCATE, DROP TABLE)
    that ends every earlier row of its partition. A schema from before table events
    (``required`` at the top) keeps its form: making the key optional would be refused."""
    properties: dict[str, Any] = dict((previous or {}).get("properties", {}))
    if catalog:
        now = {column.name for column in table.columns} | set(row_types)
        for name, gone in list(properties.items()):
            if name not in now:
                properties[name] = values.dropped(gone)
    for column in table.columns:
        oid = row_types.get(column.name, column.oid)
        if oid == column.oid:
            properties[column.name] = values.column_schema(oid, column.type_name, column.nullable)
        else:
            properties[column.name] = values.column_schema(oid, f"type {oid}", True)
    for name, oid in row_types.items():
        if name not in properties:
            properties[name] = values.column_schema(oid, f"type {oid}", True)
    schema: dict[str, Any] = {"type": "object", "description": f"a row of {table.name}"}
    schema["properties"] = properties
    if table.key and previous is not None and "required" in previous:
        schema["required"] = list(table.key)
    elif table.key:
        schema["description"] += (
            ", or {}: every earlier row of its partition is gone (TRUNCATE, DROP TABLE)"
        )
        schema["anyOf"] = [{"required": list(table.key)}, {"maxProperties": 0}]
    return schema


def dropped_schema(schema: Mapping[str, Any], table: str) -> dict[str, Any]:
    """``schema`` as the event type keeps it once ``table`` is dropped: its history ends."""
    return {**schema, "description": f"a row of {table}, which was dropped: history ended"}


def canonical(schema: Mapping[str, Any]) -> str:
    """One spelling per schema, so equal schemas compare equal as text."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))
