"""A table's columns from its event type's schema versions, and each column's Parquet type.

The bridge (bridge/tables.py, values.py) declares each column as a property whose
``x-pg-type`` is the Postgres type (``format_type``: ``bigint``, ``numeric(12,2)``,
``timestamp with time zone``; ``type <oid>`` when the change's type was not the catalog's;
event types from before the keyword start the ``description`` with it) and whose ``type``
admits ``null`` when the column is nullable; the primary key is ``required`` of a row. Every
version is read, oldest first: columns are the union, a later version's declaration of a
column wins (a retype the mode allowed), and a column the newest declaration marks dropped
is no column of the snapshot.

What each Postgres type becomes (README "Snapshot format"): the value keeps its Postgres
meaning. Integers stay integers of their width, ``real`` a 32-bit float (its value is the
float4, not the decimal digits printed), ``double precision`` a double, NaN and infinities
kept; ``numeric`` and ``money`` strings with every digit; ``timestamptz`` a timestamp (a UTC
instant); ``bytea`` binary; ``json``/``jsonb`` their JSON text; everything else Postgres's
text output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from changebroker import pg_types
from changebroker.bridge.values import DROPPED, PG_TYPE

_TYPMOD = re.compile(r"\(\d+(?:,\d+)?\)")
_OID_ONLY = re.compile(r"^type (\d+)$")


class NoPrimaryKey(Exception):
    """A table whose events carry no primary key: there is no "last state per key"."""


@dataclass(frozen=True)
class Column:
    name: str
    pg_type: str  # format_type() as the bridge declared it, e.g. "numeric(12,2)"
    type_oid: int | None  # None for types whose OID is the database's own (enums, domains)
    nullable: bool

    @property
    def kind(self) -> str:
        """``bool``, ``int2`` .. ``timestamptz``, ``timestamp``, ``bytea``, ``json`` or
        ``text``."""
        return pg_types.of(self.type_oid or 0).kind

    @property
    def spark_type(self) -> str:
        return pg_types.of(self.type_oid or 0).spark

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> Column:
        return cls(item["name"], item["pg_type"], item["type_oid"], item["nullable"])


def pg_type_of(prop: Mapping[str, Any]) -> tuple[str, int | None]:
    """The Postgres type a property declares (``x-pg-type``, e.g. ``numeric(12,2)``; in an
    event type from before the keyword, the start of the description: ``"numeric(12,2), as
    a string, every digit kept"``), and its OID in ``pg_types`` (None: not a built-in)."""
    declared = prop.get(PG_TYPE)
    if isinstance(declared, str):
        name = declared
    else:
        name = str(prop.get("description", "text")).split(", ", 1)[0].strip()
    only_oid = _OID_ONLY.match(name)
    if only_oid:
        return name, int(only_oid.group(1))
    found = pg_types.BY_NAME.get(_TYPMOD.sub("", name))
    return name, None if found is None else found.oid


def column_of(name: str, prop: Mapping[str, Any], required: Iterable[str]) -> Column:
    pg_type, oid = pg_type_of(prop)
    json_type = prop.get("type")
    types = json_type if isinstance(json_type, list) else [json_type]
    # A json/jsonb property has no "type" at all: any JSON value, null included.
    nullable = name not in set(required) and (json_type is None or "null" in types)
    return Column(name, pg_type, oid, nullable)


def union_columns(schemas: Iterable[Mapping[str, Any]]) -> list[Column]:
    """Columns of every version (oldest first), in order of first appearance; a later
    version's declaration of a column replaces an earlier one, and one that marks it
    dropped (``values.DROPPED``: dropped or renamed away) leaves it out."""
    columns: dict[str, Column] = {}
    gone: set[str] = set()
    for schema in schemas:
        required = schema.get("required", [])
        for name, prop in schema.get("properties", {}).items():
            if str(prop.get("description", "")).startswith(DROPPED):
                gone.add(name)
            else:
                gone.discard(name)
                columns[name] = column_of(name, prop, required)
    return [column for name, column in columns.items() if name not in gone]


def primary_key(event_type: Mapping[str, Any], table: str) -> list[str]:
    """The key the bridge partitions by; refused when the table has none."""
    fields = event_type.get("partition_key_fields") or []
    if event_type.get("partition_strategy") != "hash" or not fields:
        raise NoPrimaryKey(
            f"table {table} (event type {event_type['name']}) has no primary key, so a snapshot"
            " cannot keep the last state of each row: give it one"
            f" (ALTER TABLE {table} ADD PRIMARY KEY (...)) or leave it out of the replay"
        )
    return [str(f) for f in fields]
